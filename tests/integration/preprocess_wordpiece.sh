#!/usr/bin/env bash
# preprocess_data with Megatron's BERT WordPiece tokenizer types (BertWordPieceLowerCase,
# BertWordPieceCase): the ids in the written .bin/.idx (read with Megatron's layout) are, document
# for document, what tools/bert_tokenization_reference.py computes, [EOS] (Megatron's eod)
# appended; the output does not depend on --workers; no --merge-file is needed.
#   bash tests/integration/preprocess_wordpiece.sh BUILD_DIR SOURCE_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
DATA="$SRC/tests/data/wordpiece"
REF="$SRC/tools/bert_tokenization_reference.py"

# The golden corpus (every script and whitespace class) three times, then 500 generated documents.
for _ in 1 2 3; do cat "$DATA/corpus.jsonl"; done > in.jsonl
"$PY" - in.jsonl <<'EOF'
import json, random, sys
random.seed(7)
words = ["Hello", "world", "caf\u00e9", "\u041f\u0440\u0438\u0432\u0435\u0442", "\u6211\u7231", "\u039f\u0394\u039f\u03a3",
         "unaffable", "zzz", "\u2603", "na\u00efve,", "\u00a0", "\t", "\u3000", "\u0928\u092e\u0938\u094d\u0924\u0947", "!?"]
with open(sys.argv[1], "a", encoding="utf-8") as f:
    for i in range(500):
        f.write(json.dumps({"id": i, "text": " ".join(random.choice(words) for _ in range(random.randint(0, 30)))}) + "\n")
EOF

check() {  # check TYPE REF_FLAG
  local type=$1 flag=$2
  for w in 1 3; do
    preprocess "${type}_w$w" --input in.jsonl --vocab-file "$DATA/vocab.txt" --tokenizer-type "$type" --append-eod --workers "$w"
  done
  cmp "${type}_w1_text_document.bin" "${type}_w3_text_document.bin"
  cmp "${type}_w1_text_document.idx" "${type}_w3_text_document.idx"
  "$PY" "$REF" --vocab "$DATA/vocab.txt" "$flag" --eod < in.jsonl > "$type.ref"
  PYTHONPATH="$SRC/tests/integration" "$PY" - "${type}_w1_text_document" "$type.ref" "$type" <<'EOF'
import sys
import lib
prefix, ref_path, name = sys.argv[1:]
docs = lib.documents(prefix)  # 607 ids < 65500: uint16 (DType code 8), as Megatron picks
ref = [[int(t) for t in line.split()] for line in open(ref_path)]
assert len(docs) == len(ref), (len(docs), len(ref))
for d, (got, want) in enumerate(zip(docs, ref)):
    assert got == want, f"{name}: document {d + 1}: {got} != reference {want}"
print(f"{name}: {len(ref)} documents, {sum(map(len, docs))} tokens equal to the reference")
EOF
}
check BertWordPieceLowerCase --lower
check BertWordPieceCase --cased

# The two types differ (case is kept), [EOS] = 606 ends each non-empty document, and an unknown type
# is refused with the supported ones named.
cmp -s BertWordPieceLowerCase_w1_text_document.bin BertWordPieceCase_w1_text_document.bin \
  && fail "lower-case and cased outputs are equal"
refused 2 "supported: GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase" bad "$PRE" --input in.jsonl \
  --output-prefix bad --vocab-file "$DATA/vocab.txt" --tokenizer-type BertWordPieceUpper
echo "OK"
