#!/usr/bin/env bash
# preprocess_data end to end: the output bytes do not depend on --workers (JSONL and plain text),
# progress lines are printed, bad input fails with the line number.
#   bash tests/integration/preprocess_data.sh BUILD_DIR SOURCE_DIR
# Skips (exit 77, ctest's SKIP_RETURN_CODE) when the GPT-2 vocabulary is missing (scripts/fetch_gpt2_vocab.sh).
set -euo pipefail
BUILD="$(cd "$1" && pwd)"
SRC="$(cd "$2" && pwd)"
TOOL="${BUILD}/bin/preprocess_data"
VOCAB="${SRC}/data/gpt2/gpt2-vocab.json"
MERGES="${SRC}/data/gpt2/gpt2-merges.txt"
[[ -x "${TOOL}" ]] || { echo "FAIL: ${TOOL} not built"; exit 1; }
if [[ ! -s "${VOCAB}" || ! -s "${MERGES}" ]]; then
  echo "SKIP: GPT-2 vocabulary missing (run scripts/fetch_gpt2_vocab.sh)"
  exit 77
fi
WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT

# 3000 documents of varied text: escapes, unicode, empty texts, sentence lists.
awk 'BEGIN {
  split("the quick brown fox jumps over a lazy dog; caf\303\251 na\303\257ve \342\200\224 r\303\251sum\303\251 2024 it'"'"'s", w, " ")
  for (i = 0; i < 3000; i++) {
    n = (i * 7919) % 60; s = ""
    for (j = 0; j < n; j++) s = s w[1 + (i * 31 + j * 17) % 15] ((j % 11 == 10) ? "\\n" : " ")
    if (i % 97 == 0) s = ""
    if (i % 13 == 0) printf("{\"text\": [\"%s\", \"\", \"Second \\\"quoted\\\" part.\"]}\n", s)
    else printf("{\"id\": %d, \"text\": \"%s\\tend\"}\n", i, s)
  }
}' > "${WORK}/in.jsonl"

run() {  # run NAME INPUT EXTRA...
  local name="$1" input="$2"; shift 2
  "${TOOL}" --input "${input}" --output-prefix "${WORK}/${name}" --vocab-file "${VOCAB}" \
    --merge-file "${MERGES}" --append-eod --log-interval 500 "$@" > "${WORK}/${name}.out" 2> "${WORK}/${name}.err"
}

run w1 "${WORK}/in.jsonl" --workers 1
run w2 "${WORK}/in.jsonl" --workers 2
run w3 "${WORK}/in.jsonl" --workers 3
for w in w2 w3; do
  cmp "${WORK}/w1_text_document.bin" "${WORK}/${w}_text_document.bin"
  cmp "${WORK}/w1_text_document.idx" "${WORK}/${w}_text_document.idx"
done
grep -q "wrote ${WORK}/w1_text_document.{bin,idx}: 3000 documents" "${WORK}/w1.out" \
  || { echo "FAIL: unexpected summary: $(cat "${WORK}/w1.out")"; exit 1; }
grep -Eq '^Processed [0-9]+ documents \([0-9.]+ docs/s, [0-9]+ tokens/s, [0-9.]+ MB/s\), [0-9.]+% of input, ETA [0-9]+:[0-9]{2}:[0-9]{2}$' \
  "${WORK}/w1.err" || { echo "FAIL: no progress line in: $(cat "${WORK}/w1.err")"; exit 1; }

# Plain text: one document per paragraph, same bytes for any number of workers.
sed -e 's/^{.*"text": "\{0,1\}\[\{0,1\}"\{0,1\}//' -e 's/\\n/\n/g' -e 's/\\t.*//' "${WORK}/in.jsonl" \
  | awk 'NR % 5 == 0 { print "" } { print }' > "${WORK}/in.txt"
run t1 "${WORK}/in.txt" --workers 1
run t2 "${WORK}/in.txt" --workers 2
cmp "${WORK}/t1_text_document.bin" "${WORK}/t2_text_document.bin"
cmp "${WORK}/t1_text_document.idx" "${WORK}/t2_text_document.idx"
paragraphs=$(awk 'BEGIN { RS = ""; FS = "\n" } { n++ } END { print n }' "${WORK}/in.txt")
grep -q ": ${paragraphs} documents" "${WORK}/t1.out" \
  || { echo "FAIL: expected ${paragraphs} paragraphs: $(cat "${WORK}/t1.out")"; exit 1; }

# Bad JSON on line 4 fails, names the line and leaves no output.
{ head -n 3 "${WORK}/in.jsonl"; echo '{"text": oops}'; } > "${WORK}/bad.jsonl"
if run bad "${WORK}/bad.jsonl" --workers 2; then echo "FAIL: bad JSON accepted"; exit 1; fi
grep -q "bad.jsonl:4: invalid JSON" "${WORK}/bad.err" || { echo "FAIL: $(cat "${WORK}/bad.err")"; exit 1; }
[[ ! -e "${WORK}/bad_text_document.idx" && ! -e "${WORK}/bad_text_document.bin" ]] \
  || { echo "FAIL: output left behind after an error"; exit 1; }
echo "PASS: preprocess_data output identical for 1, 2 and 3 workers (JSONL and text)"
