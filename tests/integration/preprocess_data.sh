#!/usr/bin/env bash
# preprocess_data end to end: the output bytes do not depend on --workers (JSONL and plain text),
# progress lines are printed, bad input fails (status 2) with the line number.
#   bash tests/integration/preprocess_data.sh BUILD_DIR SOURCE_DIR
# Skips (exit 77, ctest's SKIP_RETURN_CODE) when the GPT-2 vocabulary is missing (scripts/fetch_gpt2_vocab.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_vocab

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
}' > in.jsonl

# pre NAME INPUT EXTRA...: lib's preprocess of INPUT into $WORK/NAME
pre() {
  local name=$1 input=$2; shift 2
  preprocess "$WORK/$name" --input "$input" --vocab-file "$VOCAB" --merge-file "$MERGES" --append-eod --log-interval 500 "$@"
}

pre w1 in.jsonl --workers 1
pre w2 in.jsonl --workers 2
pre w3 in.jsonl --workers 3
for w in w2 w3; do
  cmp w1_text_document.bin "${w}_text_document.bin"
  cmp w1_text_document.idx "${w}_text_document.idx"
done
grep -q "wrote $WORK/w1_text_document.{bin,idx}: 3000 documents" w1.out || fail "unexpected summary: $(cat w1.out)"
grep -Eq '^Processed [0-9]+ documents \([0-9.]+ docs/s, [0-9]+ tokens/s, [0-9.]+ MB/s\), [0-9.]+% of input, ETA [0-9]+:[0-9]{2}:[0-9]{2}$' \
  w1.err || fail "no progress line in: $(cat w1.err)"

# Plain text: one document per paragraph, same bytes for any number of workers.
sed -e 's/^{.*"text": "\{0,1\}\[\{0,1\}"\{0,1\}//' -e 's/\\n/\n/g' -e 's/\\t.*//' in.jsonl \
  | awk 'NR % 5 == 0 { print "" } { print }' > in.txt
pre t1 in.txt --workers 1
pre t2 in.txt --workers 2
cmp t1_text_document.bin t2_text_document.bin
cmp t1_text_document.idx t2_text_document.idx
paragraphs=$(awk 'BEGIN { RS = ""; FS = "\n" } { n++ } END { print n }' in.txt)
grep -q ": ${paragraphs} documents" t1.out || fail "expected ${paragraphs} paragraphs: $(cat t1.out)"

# Bad JSON on line 4 fails (status 2), names the line and leaves no output.
{ head -n 3 in.jsonl; echo '{"text": oops}'; } > bad.jsonl
refused 2 "bad.jsonl:4: invalid JSON" bad "$PRE" --input "$WORK/bad.jsonl" --output-prefix "$WORK/bad" --vocab-file "$VOCAB" \
  --merge-file "$MERGES" --append-eod --log-interval 500 --workers 2
[[ ! -e bad_text_document.idx && ! -e bad_text_document.bin ]] || fail "output left behind after an error"
echo "PASS: preprocess_data output identical for 1, 2 and 3 workers (JSONL and text)"
