#!/usr/bin/env bash
# preprocess_data --split-sentences (Megatron's flag, as Huawei's Ascend guide prepares enwiki with
# BertWordPieceLowerCase into *_text_sentence.bin/.idx): on the enwiki-style corpus of
# tests/data/sentence_split, the written .bin/.idx are byte for byte what Megatron's own writer
# (tools/megatron_index_writer_check.py, its IndexedDatasetBuilder transcribed) writes for the golden
# sentences (tools/sentence_split_reference.py: ICU through PyICU with the same rules) encoded with
# the transcription of BERT's tokenization.py, one sequence per sentence, [EOS] after each
# document's last; with and without --keep-newlines (with GPT-2's BPE too, which keeps the newlines WordPiece
# drops: both modes against the reference GPT-2 encoder); the output does not depend on --workers; an
# unknown --lang and --keep-newlines alone are refused (status 2).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
DATA="$SRC/tests/data/sentence_split"
WP_VOCAB="$SRC/tests/data/wordpiece/vocab.txt"
need_python numpy
# The corpus's documents that its unit test splits with other settings (a "lang" or a small
# "max_chunk_chars" of their own) are left out: preprocess_data splits every document alike.
"$PY" - "$DATA" <<'PY'
import json, sys
data = sys.argv[1]
with open("corpus.jsonl", "w", encoding="utf-8") as c, open("sentences.jsonl", "w", encoding="utf-8") as g:
    for line, gold in zip(open(data + "/corpus.jsonl", encoding="utf-8"), open(data + "/sentences.jsonl", encoding="utf-8")):
        doc = json.loads(line)
        if doc.get("lang", "english") == "english" and doc.get("max_chunk_chars", 1000000) == 1000000:
            c.write(line)
            g.write(gold)
PY

for mode in plain keep; do
  flags=(--split-sentences); [ "$mode" = keep ] && flags+=(--keep-newlines)
  for w in 1 3; do
    preprocess "${mode}_w$w" --input corpus.jsonl --vocab-file "$WP_VOCAB" --tokenizer-type BertWordPieceLowerCase --append-eod \
      --workers "$w" "${flags[@]}"
  done
  cmp "${mode}_w1_text_sentence.bin" "${mode}_w3_text_sentence.bin"
  cmp "${mode}_w1_text_sentence.idx" "${mode}_w3_text_sentence.idx"
  "$PY" - "$SRC" . "$WP_VOCAB" "$mode" <<'PY' > "$mode.dump"
import json, sys
sys.path.insert(0, sys.argv[1] + "/tools")
import bert_tokenization_reference as bt
data, vocab_file, mode = sys.argv[2:]
tok = bt.FullTokenizer(vocab_file, do_lower_case=True)
eod = bt.megatron_eod(tok)
for line in open(data + "/sentences.jsonl", encoding="utf-8"):
    sentences = json.loads(line)["sentences_keep_newlines" if mode == "keep" else "sentences"]
    ids, lengths = [], []
    for s in sentences:  # Megatron's Encoder.encode
        t = tok.convert_tokens_to_ids(tok.tokenize(s))
        if t:
            ids += t
            lengths.append(len(t))
    if ids:  # --append-eod
        ids.append(eod)
        lengths[-1] += 1
    print(json.dumps({"key": "text", "ids": ids, "lengths": lengths}))
PY
  size=$("$PY" -c "
import sys; sys.path.insert(0, '${SRC}/tools')
import bert_tokenization_reference as bt
t = bt.FullTokenizer('${WP_VOCAB}', do_lower_case=True); bt.megatron_eod(t); print(t.vocab_size())")
  "$PY" "${SRC}/tools/megatron_index_writer_check.py" --ids "${mode}.dump" --output-prefix "${mode}_megatron" \
    --vocab-size "$size" --level sentence > /dev/null
  cmp "${mode}_w1_text_sentence.bin" "${mode}_megatron_text_sentence.bin" || fail "$mode: .bin differs from Megatron's"
  cmp "${mode}_w1_text_sentence.idx" "${mode}_megatron_text_sentence.idx" || fail "$mode: .idx differs from Megatron's"
  echo "${mode}: $(grep -c . corpus.jsonl) documents, $("$PY" -c "import json; print(sum(len(json.loads(l)['lengths']) for l in open('${mode}.dump')))") sentences: .bin/.idx byte for byte Megatron's"
done
# WordPiece drops whitespace, so the two modes write the same ids above (they check the sentences, not the
# newlines); GPT-2's BPE keeps the newlines that --keep-newlines leaves at the end of a sentence, so there each
# mode's .bin/.idx is held byte for byte to Megatron's writer over the golden sentences of that mode encoded by the
# reference GPT-2 encoder (tools/gpt2_encoder_reference.py), and the two modes must differ.
GPT2="$(dirname "$VOCAB")"
if [ -s "$VOCAB" ]; then
  need_python regex
  for mode in plain keep; do
    flags=(--split-sentences); [ "$mode" = keep ] && flags+=(--keep-newlines)
    preprocess "gpt2_$mode" --input corpus.jsonl --vocab-file "$VOCAB" --merge-file "$MERGES" "${flags[@]}"
    "$PY" - "$SRC" . "$GPT2" "$mode" <<'PY' > "gpt2_$mode.dump"
import json, sys
sys.path.insert(0, sys.argv[1] + "/tools")
import gpt2_encoder_reference as g
data, gpt2, mode = sys.argv[2:]
enc = g.Encoder.from_files(gpt2 + "/gpt2-vocab.json", gpt2 + "/gpt2-merges.txt")
for line in open(data + "/sentences.jsonl", encoding="utf-8"):
    sentences = json.loads(line)["sentences_keep_newlines" if mode == "keep" else "sentences"]
    ids, lengths = [], []
    for s in sentences:  # Megatron's Encoder.encode, no --append-eod
        t = enc.encode(s)
        if t:
            ids += t
            lengths.append(len(t))
    print(json.dumps({"key": "text", "ids": ids, "lengths": lengths}))
PY
    "$PY" "${SRC}/tools/megatron_index_writer_check.py" --ids "gpt2_${mode}.dump" --output-prefix "gpt2_${mode}_megatron" \
      --vocab-size 50257 --level sentence > /dev/null
    cmp "gpt2_${mode}_text_sentence.bin" "gpt2_${mode}_megatron_text_sentence.bin" || fail "GPT-2 $mode: .bin differs from Megatron's"
    cmp "gpt2_${mode}_text_sentence.idx" "gpt2_${mode}_megatron_text_sentence.idx" || fail "GPT-2 $mode: .idx differs from Megatron's"
  done
  cmp -s gpt2_plain_text_sentence.bin gpt2_keep_text_sentence.bin && fail "--keep-newlines changed nothing"
  echo "GPT-2 BPE: both modes byte for byte Megatron's; --keep-newlines keeps the newlines between sentences ($(stat -c %s gpt2_plain_text_sentence.bin) -> $(stat -c %s gpt2_keep_text_sentence.bin) bytes)"
fi

refused 2 "english" klingon "$PRE" --input "$DATA/corpus.jsonl" --output-prefix bad --vocab-file "$WP_VOCAB" \
  --tokenizer-type BertWordPieceLowerCase --split-sentences --lang klingon
refused 2 "needs --split-sentences" keep_alone "$PRE" --input "$DATA/corpus.jsonl" --output-prefix bad --vocab-file "$WP_VOCAB" \
  --tokenizer-type BertWordPieceLowerCase --keep-newlines
echo "OK"
