#!/usr/bin/env bash
# Build the default training corpus from the Debian package `fortunes` (English fortune cookies).
#
#   scripts/make_default_data.sh [REPO]
#
# 1. Every regular file in /usr/share/games/fortunes (not *.dat, not *.u8, not the offensive
#    ones under off/) is split into fortunes at lines holding a single "%"; each fortune is one
#    document, written in file-name order to data/fortunes/fortunes.jsonl as {"text": ...}.
# 2. build/bin/preprocess_data --append-eod tokenizes it with the GPT-2 vocabulary in
#    data/gpt2/ (fetched by scripts/fetch_gpt2_vocab.sh when missing) into
#    data/fortunes/fortunes_text_document.{bin,idx}.
# Idempotent: a step whose output exists is skipped. Needs python3, the fortunes package and a
# built preprocess_data; nothing is downloaded except the vocabulary when it is missing.
set -euo pipefail

REPO="$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}" && pwd)"
FORTUNE_DIR=/usr/share/games/fortunes
OUT_DIR="${REPO}/data/fortunes"
JSONL="${OUT_DIR}/fortunes.jsonl"
PREFIX="${OUT_DIR}/fortunes"
VOCAB_DIR="${REPO}/data/gpt2"
TOOL="${REPO}/build/bin/preprocess_data"

die() { echo "make_default_data: $*" >&2; exit 1; }

[[ -d "${FORTUNE_DIR}" ]] || die "${FORTUNE_DIR} missing: apt-get install -y fortunes"
command -v python3 >/dev/null || die "python3 not found"
[[ -x "${TOOL}" ]] || die "${TOOL} not built: cmake --build ${REPO}/build --target preprocess_data"
mkdir -p "${OUT_DIR}"

if [[ ! -s "${JSONL}" ]]; then
  python3 - "${FORTUNE_DIR}" "${JSONL}" <<'EOF'
import json, os, sys

src, dst = sys.argv[1], sys.argv[2]
names = sorted(n for n in os.listdir(src)
               if os.path.isfile(os.path.join(src, n)) and not os.path.islink(os.path.join(src, n))
               and not n.endswith((".dat", ".u8")))
docs = 0
with open(dst + ".tmp", "w", encoding="utf-8") as out:
    for name in names:
        with open(os.path.join(src, name), encoding="utf-8", errors="replace") as f:
            fortune = []
            for line in f.read().split("\n") + ["%"]:
                if line.strip() == "%":
                    text = "\n".join(fortune).strip("\n")
                    if text.strip():
                        out.write(json.dumps({"text": text}) + "\n")
                        docs += 1
                    fortune = []
                else:
                    fortune.append(line)
os.replace(dst + ".tmp", dst)
print(f"make_default_data: {dst}: {docs} fortunes from {len(names)} files")
EOF
else
  echo "make_default_data: ${JSONL} already present"
fi

if [[ ! -s "${VOCAB_DIR}/gpt2-vocab.json" || ! -s "${VOCAB_DIR}/gpt2-merges.txt" ]]; then
  bash "${REPO}/scripts/fetch_gpt2_vocab.sh" "${VOCAB_DIR}"
fi

if [[ ! -s "${PREFIX}_text_document.idx" || ! -s "${PREFIX}_text_document.bin" ]]; then
  "${TOOL}" --input "${JSONL}" --output-prefix "${PREFIX}" \
    --vocab-file "${VOCAB_DIR}/gpt2-vocab.json" --merge-file "${VOCAB_DIR}/gpt2-merges.txt" \
    --append-eod --workers "$(nproc)" --log-interval 5000
else
  echo "make_default_data: ${PREFIX}_text_document.{bin,idx} already present"
fi

docs=$(wc -l < "${JSONL}")
bin_bytes=$(stat -c %s "${PREFIX}_text_document.bin")
echo "make_default_data: ${PREFIX}_text_document.{bin,idx}: ${docs} documents, $((bin_bytes / 2)) tokens (uint16)"
