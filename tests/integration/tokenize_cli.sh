#!/usr/bin/env bash
# `gridformer tokenize` end to end: the real GPT-2 vocabulary, ids per input line, --decode back.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
[ -f "$VOCAB" ] && [ -f "$MERGES" ] || fail "$VOCAB missing: run scripts/setup.sh"
out="$(printf 'Hello world\n\nIt'"'"'s 2024!\n' | "$BIN" tokenize --vocab-file "$VOCAB" --merge-file "$MERGES")"
expected=$'15496 995\n\n1026 338 48609 0'
[ "$out" = "$expected" ] || fail "got [$out], expected [$expected]"
back="$(printf '%s\n' "$out" | "$BIN" tokenize --decode --vocab-file "$VOCAB" --merge-file "$MERGES")"
[ "$back" = $'Hello world\n\nIt\'s 2024!' ] || fail "decode gave [$back]"
# BERT WordPiece (--tokenizer-type, Megatron's names): each line of the WordPiece test corpus against the
# transcription of BERT's tokenization.py, lower-cased and cased.
W="$SRC/tests/data/wordpiece"
"$PY" -c 'import json,sys; [print(json.loads(l)["text"].replace("\n", " ").replace("\r", " ")) for l in open(sys.argv[1])]' \
  "$W/corpus.jsonl" > lines.txt
for t in BertWordPieceLowerCase:--lower BertWordPieceCase:--cased; do
  ours="$("$BIN" tokenize --tokenizer-type "${t%%:*}" --vocab-file "$W/vocab.txt" < lines.txt)"
  ref="$("$PY" -c 'import json,sys; [print(json.dumps({"text": l.rstrip("\n")})) for l in open(sys.argv[1])]' lines.txt |
         "$PY" "$SRC/tools/bert_tokenization_reference.py" --vocab "$W/vocab.txt" "${t##*:}")"
  [ "$ours" = "$ref" ] || fail "${t%%:*}: $(diff <(echo "$ours") <(echo "$ref") | head -4)"
  echo "${t%%:*}: $(wc -l < lines.txt) lines, ids equal to the reference"
done
echo "tokenize_cli: ok"
