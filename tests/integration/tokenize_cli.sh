#!/usr/bin/env bash
# `gridformer tokenize` end to end: the real GPT-2 vocabulary, ids per input line, --decode back.
set -euo pipefail
BUILD="$1"; SRC="$2"
V="$SRC/data/gpt2/gpt2-vocab.json"; M="$SRC/data/gpt2/gpt2-merges.txt"
[ -f "$V" ] && [ -f "$M" ] || { echo "FAIL: $V missing: run scripts/setup.sh"; exit 1; }
out="$(printf 'Hello world\n\nIt'"'"'s 2024!\n' | "$BUILD/bin/gridformer" tokenize --vocab-file "$V" --merge-file "$M")"
expected=$'15496 995\n\n1026 338 48609 0'
[ "$out" = "$expected" ] || { echo "FAIL: got [$out], expected [$expected]"; exit 1; }
back="$(printf '%s\n' "$out" | "$BUILD/bin/gridformer" tokenize --decode --vocab-file "$V" --merge-file "$M")"
[ "$back" = $'Hello world\n\nIt\'s 2024!' ] || { echo "FAIL: decode gave [$back]"; exit 1; }
# BERT WordPiece (--tokenizer-type, Megatron's names): each line of the WordPiece test corpus against the
# transcription of BERT's tokenization.py, lower-cased and cased.
W="$SRC/tests/data/wordpiece"
python3 -c 'import json,sys; [print(json.loads(l)["text"].replace("\n", " ").replace("\r", " ")) for l in open(sys.argv[1])]' \
  "$W/corpus.jsonl" > /tmp/gf_tok_$$.txt
for t in BertWordPieceLowerCase:--lower BertWordPieceCase:--cased; do
  ours="$("$BUILD/bin/gridformer" tokenize --tokenizer-type "${t%%:*}" --vocab-file "$W/vocab.txt" < /tmp/gf_tok_$$.txt)"
  ref="$(python3 -c 'import json,sys; [print(json.dumps({"text": l.rstrip("\n")})) for l in open(sys.argv[1])]' /tmp/gf_tok_$$.txt |
         python3 "$SRC/tools/bert_tokenization_reference.py" --vocab "$W/vocab.txt" "${t##*:}")"
  [ "$ours" = "$ref" ] || { rm -f /tmp/gf_tok_$$.txt; echo "FAIL: ${t%%:*}: $(diff <(echo "$ours") <(echo "$ref") | head -4)"; exit 1; }
  echo "${t%%:*}: $(wc -l < /tmp/gf_tok_$$.txt) lines, ids equal to the reference"
done
rm -f /tmp/gf_tok_$$.txt
echo "tokenize_cli: ok"
