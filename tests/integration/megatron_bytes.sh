#!/usr/bin/env bash
# preprocess_data writes the same .bin/.idx bytes as Megatron-LM's writer for the same tokens.
#   bash tests/integration/megatron_bytes.sh BUILD_DIR SOURCE_DIR
# preprocess_data --dump-ids records the ids of every document; tools/megatron_index_writer_check.py
# (Megatron's IndexedDatasetBuilder/_IndexWriter, transcribed) writes them again; cmp compares.
# Skips (exit 0) without python3 + numpy or without the GPT-2 vocabulary.
set -euo pipefail
BUILD="$(cd "$1" && pwd)"
SRC="$(cd "$2" && pwd)"
TOOL="${BUILD}/bin/preprocess_data"
VOCAB="${SRC}/data/gpt2/gpt2-vocab.json"
MERGES="${SRC}/data/gpt2/gpt2-merges.txt"
[[ -x "${TOOL}" ]] || { echo "FAIL: ${TOOL} not built"; exit 1; }
if [[ ! -s "${VOCAB}" || ! -s "${MERGES}" ]]; then
  echo "SKIP: GPT-2 vocabulary missing (run scripts/fetch_gpt2_vocab.sh)"; exit 0
fi
PY=""
for candidate in python3 /usr/bin/python3; do
  if command -v "${candidate}" >/dev/null && "${candidate}" -c 'import numpy' 2>/dev/null; then PY="${candidate}"; break; fi
done
[[ -n "${PY}" ]] || { echo "SKIP: no python3 with numpy"; exit 0; }
WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT

cat > "${WORK}/in.jsonl" <<'JSON'
{"text": "Hello world!", "title": "Greeting"}
{"text": "", "title": "Empty text: no tokens, no EOD, still a document"}
{"text": "Line one.\nLine two\twith a tab and  two spaces.", "title": ""}
{"text": ["A list of sentences.", "", " Each non-empty one is a sequence."], "title": "Sentences"}
{"text": "caf\u00e9 \u2014 na\u00efve \ud83d\ude00 <|endoftext|> 12345", "title": "Unicode"}
JSON
for i in $(seq 1 200); do echo "{\"text\": \"Document number ${i} repeats ${i} words.\", \"title\": \"T${i}\"}"; done >> "${WORK}/in.jsonl"

check() {  # check NAME EXTRA...
  local name="$1"; shift
  "${TOOL}" --input "${WORK}/in.jsonl" --output-prefix "${WORK}/${name}" --vocab-file "${VOCAB}" \
    --merge-file "${MERGES}" --json-keys text title --dump-ids "${WORK}/${name}.ids" "$@" > /dev/null 2>&1
  "${PY}" "${SRC}/tools/megatron_index_writer_check.py" --ids "${WORK}/${name}.ids" \
    --output-prefix "${WORK}/${name}_megatron" --vocab-size 50257 > /dev/null
  for key in text title; do
    for ext in bin idx; do
      cmp "${WORK}/${name}_${key}_document.${ext}" "${WORK}/${name}_megatron_${key}_document.${ext}"
    done
  done
}
check eod --append-eod --workers 2
check noeod --workers 1
# The dump must hold what the files hold: the EOD run has one more token per non-empty document.
[[ $(stat -c %s "${WORK}/eod_text_document.bin") -gt $(stat -c %s "${WORK}/noeod_text_document.bin") ]] \
  || { echo "FAIL: --append-eod added no tokens"; exit 1; }
echo "PASS: .bin/.idx byte-identical to Megatron's writer (with and without --append-eod)"
