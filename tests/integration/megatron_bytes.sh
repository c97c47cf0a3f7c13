#!/usr/bin/env bash
# preprocess_data writes the same .bin/.idx bytes as Megatron-LM's tools/preprocess_data.py.
#   bash tests/integration/megatron_bytes.sh BUILD_DIR SOURCE_DIR
# 1. Tokens and bytes: tests/golden/tokenizer/unicode_space.jsonl (U+0085, U+FEFF, U+180E and
#    other characters where JavaScript's, PCRE2's and Python's `regex`'s \s, \p{L}, \p{N}
#    differ) must give the committed unicode_space_text_document.bin/.idx, which
#    tools/make_tokenizer_golden_py.py wrote with Python's `regex` (as Megatron tokenizes) and
#    Megatron's writer. No Python needed; with python3-regex + numpy the goldens are also
#    regenerated and compared.
# 2. Bytes for the same tokens: preprocess_data --dump-ids records the ids of every document;
#    tools/megatron_index_writer_check.py (Megatron's IndexedDatasetBuilder/_IndexWriter,
#    transcribed) writes them again; cmp compares. Skipped without /usr/bin/python3 + numpy.
# Skips (exit 77, ctest's SKIP_RETURN_CODE) without the GPT-2 vocabulary.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_vocab

# 1. The Python-made golden for the characters where the regex engines differ.
GOLDEN="$SRC/tests/golden/tokenizer"
for workers in 1 2; do
  preprocess "us$workers" --input "$GOLDEN/unicode_space.jsonl" --vocab-file "$VOCAB" --merge-file "$MERGES" --append-eod \
    --workers "$workers"
  for ext in bin idx; do
    cmp "us${workers}_text_document.$ext" "$GOLDEN/unicode_space_text_document.$ext" \
      || fail "unicode_space.jsonl: .$ext differs from Megatron's (Python regex) bytes"
  done
done
echo "PASS: unicode_space.jsonl gives Megatron's .bin/.idx bytes (committed Python golden)"
if "$PY" -c 'import regex, numpy' 2>/dev/null; then
  "$PY" "$SRC/tools/make_tokenizer_golden_py.py" --check --vocab-file "$VOCAB" --merge-file "$MERGES"
else
  echo "NOTE: no $PY with regex + numpy: the golden was not regenerated (apt-get install python3-regex)"
fi

# 2. Megatron's writer on our ids.
need_python numpy

cat > in.jsonl <<'JSON'
{"text": "Hello world!", "title": "Greeting"}
{"text": "", "title": "Empty text: no tokens, no EOD, still a document"}
{"text": "Line one.\nLine two\twith a tab and  two spaces.", "title": ""}
{"text": ["A list of sentences.", "", " Each non-empty one is a sequence."], "title": "Sentences"}
{"text": "caf\u00e9 \u2014 na\u00efve \ud83d\ude00 <|endoftext|> 12345", "title": "Unicode"}
JSON
for i in $(seq 1 200); do echo "{\"text\": \"Document number ${i} repeats ${i} words.\", \"title\": \"T${i}\"}"; done >> in.jsonl

check() {  # check NAME EXTRA...
  local name=$1; shift
  preprocess "$name" --input in.jsonl --vocab-file "$VOCAB" --merge-file "$MERGES" --json-keys text title \
    --dump-ids "$name.ids" "$@"
  "$PY" "$SRC/tools/megatron_index_writer_check.py" --ids "$name.ids" --output-prefix "${name}_megatron" --vocab-size 50257 \
    > /dev/null
  for key in text title; do
    for ext in bin idx; do
      cmp "${name}_${key}_document.$ext" "${name}_megatron_${key}_document.$ext"
    done
  done
}
check eod --append-eod --workers 2
check noeod --workers 1
# The dump must hold what the files hold: the EOD run has one more token per non-empty document.
[[ $(stat -c %s eod_text_document.bin) -gt $(stat -c %s noeod_text_document.bin) ]] || fail "--append-eod added no tokens"
echo "PASS: .bin/.idx byte-identical to Megatron's writer (with and without --append-eod)"
