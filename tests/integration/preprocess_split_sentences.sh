#!/usr/bin/env bash
# preprocess_data --split-sentences (Megatron's flag, as Huawei's Ascend guide prepares enwiki with
# BertWordPieceLowerCase into *_text_sentence.bin/.idx): on the enwiki-style corpus of
# tests/data/sentence_split, the written .bin/.idx are byte for byte what Megatron's own writer
# (tools/megatron_index_writer_check.py, its IndexedDatasetBuilder transcribed) writes for the golden
# sentences (tools/sentence_split_reference.py: ICU through PyICU with the same rules) encoded with
# the transcription of BERT's tokenization.py, one sequence per sentence, [EOS] after each
# document's last; with and without --keep-newlines (with GPT-2's BPE too, which keeps the newlines WordPiece
# drops: both modes against the reference GPT-2 encoder); the output does not depend on --workers; an
# unknown --lang and --keep-newlines alone are refused.
set -euo pipefail
BUILD="$(cd "$1" && pwd)"; SRC="$(cd "$2" && pwd)"
TOOL="${BUILD}/bin/preprocess_data"
DATA="${SRC}/tests/data/sentence_split"
VOCAB="${SRC}/tests/data/wordpiece/vocab.txt"
PY=/usr/bin/python3
"$PY" -c "import numpy" 2> /dev/null || { echo "SKIP: /usr/bin/python3 without numpy (python3-numpy)"; exit 77; }
WORK="$(mktemp -d)"; trap 'rm -rf "${WORK}"' EXIT
cd "${WORK}"
# The corpus's documents that its unit test splits with other settings (a "lang" or a small
# "max_chunk_chars" of their own) are left out: preprocess_data splits every document alike.
"$PY" - "${DATA}" <<'PY'
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
    "${TOOL}" --input corpus.jsonl --output-prefix "${mode}_w${w}" --vocab-file "${VOCAB}" \
      --tokenizer-type BertWordPieceLowerCase --append-eod --workers "$w" "${flags[@]}" > "${mode}_w${w}.out" 2>&1 \
      || { cat "${mode}_w${w}.out"; echo "FAIL: preprocess_data ${flags[*]}"; exit 1; }
  done
  cmp "${mode}_w1_text_sentence.bin" "${mode}_w3_text_sentence.bin"
  cmp "${mode}_w1_text_sentence.idx" "${mode}_w3_text_sentence.idx"
  "$PY" - "${SRC}" . "${VOCAB}" "${mode}" <<'PY' > "${mode}.dump"
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
t = bt.FullTokenizer('${VOCAB}', do_lower_case=True); bt.megatron_eod(t); print(t.vocab_size())")
  "$PY" "${SRC}/tools/megatron_index_writer_check.py" --ids "${mode}.dump" --output-prefix "${mode}_megatron" \
    --vocab-size "$size" --level sentence > /dev/null
  cmp "${mode}_w1_text_sentence.bin" "${mode}_megatron_text_sentence.bin" || { echo "FAIL: ${mode}: .bin differs from Megatron's"; exit 1; }
  cmp "${mode}_w1_text_sentence.idx" "${mode}_megatron_text_sentence.idx" || { echo "FAIL: ${mode}: .idx differs from Megatron's"; exit 1; }
  echo "${mode}: $(grep -c . corpus.jsonl) documents, $("$PY" -c "import json; print(sum(len(json.loads(l)['lengths']) for l in open('${mode}.dump')))") sentences: .bin/.idx byte for byte Megatron's"
done
# WordPiece drops whitespace, so the two modes write the same ids above (they check the sentences, not the
# newlines); GPT-2's BPE keeps the newlines that --keep-newlines leaves at the end of a sentence, so there each
# mode's .bin/.idx is held byte for byte to Megatron's writer over the golden sentences of that mode encoded by the
# reference GPT-2 encoder (tools/gpt2_encoder_reference.py), and the two modes must differ.
GPT2="${SRC}/data/gpt2"
if [ -s "${GPT2}/gpt2-vocab.json" ]; then
  "$PY" -c "import regex" 2> /dev/null || { echo "SKIP: /usr/bin/python3 without regex (python3-regex)"; exit 77; }
  for mode in plain keep; do
    flags=(--split-sentences); [ "$mode" = keep ] && flags+=(--keep-newlines)
    "${TOOL}" --input corpus.jsonl --output-prefix "gpt2_${mode}" --vocab-file "${GPT2}/gpt2-vocab.json" \
      --merge-file "${GPT2}/gpt2-merges.txt" "${flags[@]}" > /dev/null
    "$PY" - "${SRC}" . "${GPT2}" "${mode}" <<'PY' > "gpt2_${mode}.dump"
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
    cmp "gpt2_${mode}_text_sentence.bin" "gpt2_${mode}_megatron_text_sentence.bin" \
      || { echo "FAIL: GPT-2 ${mode}: .bin differs from Megatron's"; exit 1; }
    cmp "gpt2_${mode}_text_sentence.idx" "gpt2_${mode}_megatron_text_sentence.idx" \
      || { echo "FAIL: GPT-2 ${mode}: .idx differs from Megatron's"; exit 1; }
  done
  cmp -s gpt2_plain_text_sentence.bin gpt2_keep_text_sentence.bin && { echo "FAIL: --keep-newlines changed nothing"; exit 1; }
  echo "GPT-2 BPE: both modes byte for byte Megatron's; --keep-newlines keeps the newlines between sentences ($(stat -c %s gpt2_plain_text_sentence.bin) -> $(stat -c %s gpt2_keep_text_sentence.bin) bytes)"
fi

if "${TOOL}" --input "${DATA}/corpus.jsonl" --output-prefix bad --vocab-file "${VOCAB}" --tokenizer-type BertWordPieceLowerCase \
     --split-sentences --lang klingon > bad.out 2>&1; then echo "FAIL: --lang klingon accepted"; exit 1; fi
grep -q "english" bad.out || { cat bad.out; echo "FAIL: the refusal does not list the languages"; exit 1; }
if "${TOOL}" --input "${DATA}/corpus.jsonl" --output-prefix bad --vocab-file "${VOCAB}" --tokenizer-type BertWordPieceLowerCase \
     --keep-newlines > bad.out 2>&1; then echo "FAIL: --keep-newlines without --split-sentences accepted"; exit 1; fi
grep -q "needs --split-sentences" bad.out || { cat bad.out; exit 1; }
echo "OK"
