#!/usr/bin/env bash
# preprocess_data with Megatron's SentencePiece tokenizer types over SentencePiece models trained
# here with spm_train (a unigram model, vocabulary 500, and a BPE model with byte fallback and a
# user-defined "<EOD>", vocabulary 800, on a generated corpus of ASCII, accented Latin, CJK,
# Cyrillic, Greek, emoji, digits and whitespace runs; one thread, no sampling or shuffling, so it is
# deterministic):
#  * SentencePieceTokenizer: the ids in the written .bin/.idx (read with Megatron's layout) are,
#    document for document, what Megatron's _SentencePieceTokenizer computes with Debian's
#    python3-sentencepiece (its special tokens <CLS> <SEP> <EOD> <MASK> <PAD> <s> </s> cut out of
#    the text, the missing ones added after the model's pieces), <EOD> (Megatron's eod) appended;
#  * GPTSentencePieceTokenizer: sp.encode(text) + the model's eos;
#  * Llama2Tokenizer: [bos] + sp.encode(text) per sentence + the model's eos (Megatron's _Llama2Tokenizer);
#  * `gridformer tokenize --tokenizer-type SentencePieceTokenizer` gives each line's ids as the same
#    reference, and --decode gives sp.decode;
#  * the output does not depend on --workers; a SentencePiece type without --tokenizer-model is refused.
# With GF_BENCH_THROUGHPUT=1 (a benchmark, not run by the suite: bench/README.md) it then prints the encode throughput
# of preprocess_data on a larger generated input (24 MB) and the CPU.
# Skips (exit 77, "SKIP: ...": ctest's SKIP_RETURN_CODE) when spm_train or python3-sentencepiece is missing.
#   bash tests/integration/preprocess_sentencepiece.sh BUILD_DIR SOURCE_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v spm_train > /dev/null || skip "spm_train not found (Debian package sentencepiece)"
need_python sentencepiece

# Training text, test documents (JSONL; strings and lists of strings, empty ones, literal special
# token strings, characters unseen in training) and a larger input for the throughput.
"$PY" - "$WORK" "${GF_BENCH_THROUGHPUT:-}" <<'EOF'
import json, random, sys
work = sys.argv[1]
random.seed(1234)
CJK = [chr(0x4E00 + i * 7) for i in range(100)] + [chr(c) for c in range(0x3041, 0x3069)]
ALPHABETS = {
    "ascii": "bcdfghjklmnprstvwz", "vowels": "aeiouy",
    "latin": "\u00e9\u00e8\u00ea\u00eb\u00e0\u00e2\u00e4\u00ee\u00ef\u00f4\u00f6\u00fb\u00fc\u00e7\u00f1\u00e5\u00f8\u0153\u00df",
    "cyrillic": "".join(chr(c) for c in range(0x0430, 0x0450)),
    "greek": "".join(chr(c) for c in range(0x03B1, 0x03CA)),
}
def word():
    r = random.random()
    if r < 0.35:
        w = "".join(random.choice(ALPHABETS["ascii"]) + random.choice(ALPHABETS["vowels"]) for _ in range(random.randint(1, 4)))
        return w.capitalize() if random.random() < 0.2 else w
    if r < 0.45:
        return "".join(random.choice(ALPHABETS["ascii"]) + random.choice(ALPHABETS["latin"]) for _ in range(random.randint(1, 3)))
    if r < 0.6:
        return "".join(random.choice(CJK) for _ in range(random.randint(1, 5)))
    if r < 0.72:
        return "".join(random.choice(ALPHABETS["cyrillic"]) for _ in range(random.randint(2, 9)))
    if r < 0.78:
        return "".join(random.choice(ALPHABETS["greek"]) for _ in range(random.randint(2, 7)))
    if r < 0.84:
        e = [chr(random.randint(0x1F600, 0x1F61F)) for _ in range(random.randint(1, 3))]
        return "\u200d".join(e) if random.random() < 0.2 else "".join(e)
    if r < 0.93:
        return random.choice([str(random.randint(0, 10 ** random.randint(1, 9))), f"{random.random() * 1000:.3f}", "1,000,000", "0x1F"])
    return random.choice(["!?", "(x)", "a-b", "e-mail@example.com", "\u2603", "\u00a0", "\u3000", "...", "\"q\""])
spaces = [" ", " ", " ", "  ", "   ", "\t", "\n", " \t ", "\u00a0"]
def text(n):
    out = []
    for _ in range(n):
        out.append(word())
        out.append(random.choice(spaces))
    return "".join(out).strip(" ")
with open(f"{work}/train.txt", "w", encoding="utf-8") as f:
    for _ in range(8000):
        f.write(text(random.randint(3, 25)).replace("\n", " ") + "\n")
specials = ["<s>", "</s>", "<EOD>", "<SEP>", "<CLS>", "<MASK>", "<PAD>", "<unk>", "<EO", "<<SEP>>"]
rare = ["\u0928\u092e\u0938\u094d\u0924\u0947", "\u05e9\u05dc\u05d5\u05dd", "\U0001F9EA", "\u00ff\u0100"]  # unseen in training
with open(f"{work}/in.jsonl", "w", encoding="utf-8") as f:
    for i in range(600):
        parts = []
        for _ in range(random.randint(0, 30)):
            r = random.random()
            parts.append(random.choice(specials) if r < 0.08 else random.choice(rare) if r < 0.12 else word())
            parts.append(random.choice(spaces))
        t = "".join(parts)
        if i % 10 == 3:
            f.write(json.dumps({"id": i, "text": [t[: len(t) // 2], "", t[len(t) // 2:]]}) + "\n")
        else:
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    f.write(json.dumps({"id": -1, "text": ""}) + "\n")
    f.write(json.dumps({"id": -2, "text": "<EOD><EOD></s> "}) + "\n")
with open(f"{work}/big.jsonl", "w", encoding="utf-8") as f:
    size = 0 if sys.argv[2] else 24 << 20  # the throughput's input: only for the benchmark
    while size < 24 << 20:
        line = json.dumps({"text": text(random.randint(20, 400))}, ensure_ascii=False) + "\n"
        f.write(line)
        size += len(line.encode())
EOF

COMMON=(--input=train.txt --character_coverage=0.9995 --num_threads=1
        --input_sentence_size=0 --shuffle_input_sentence=false --minloglevel=2)
spm_train "${COMMON[@]}" --model_prefix=unigram --model_type=unigram --vocab_size=500 > spm_unigram.log 2>&1 \
  || fail "spm_train unigram: $(tail -5 spm_unigram.log)"
spm_train "${COMMON[@]}" --model_prefix=bpe --model_type=bpe --byte_fallback=true --vocab_size=800 \
  --user_defined_symbols="<EOD>" > spm_bpe.log 2>&1 \
  || fail "spm_train bpe: $(tail -5 spm_bpe.log)"

check() {  # check MODEL TYPE
  local model=$1 type=$2 name=$1_$2
  for w in 1 3; do
    preprocess "${name}_w$w" --input in.jsonl --tokenizer-model "$model.model" --tokenizer-type "$type" --append-eod --workers "$w"
  done
  cmp "${name}_w1_text_document.bin" "${name}_w3_text_document.bin"
  cmp "${name}_w1_text_document.idx" "${name}_w3_text_document.idx"
  PYTHONPATH="$SRC/tests/integration" "$PY" - "${name}_w1_text_document" in.jsonl "$model.model" "$type" "$name" <<'EOF'
import json, sys
import lib
import sentencepiece
prefix, corpus, model, type_, name = sys.argv[1:]
sp = sentencepiece.SentencePieceProcessor(model_file=model)

# Megatron-LM megatron/training/tokenizer/tokenizer.py, transcribed: _SentencePieceTokenizer
# (_initalize, tokenize) and _GPTSentencePieceTokenizer (tokenize = encode_as_ids, eod = eos_id).
if type_ == "SentencePieceTokenizer":
    vocab = {sp.id_to_piece(i): i for i in range(len(sp))}
    special = {}
    def add(t):
        if t not in vocab:
            vocab[t] = len(vocab)
        special[t] = vocab[t]
    for t in ["<CLS>", "<SEP>", "<EOD>", "<MASK>"]:
        add(t)
    for get, fallback in [(sp.pad_id, "<PAD>"), (sp.bos_id, "<BOS>"), (sp.eos_id, "<EOS>")]:
        try:
            t = sp.id_to_piece(get())
        except IndexError:
            t = fallback
        add(t)
    eod, vocab_size = vocab["<EOD>"], len(vocab)
    def tokenize(text):
        ids, idx = [], 0
        while 1:
            indices = {}
            for token in special:
                try:
                    indices[token] = text[idx:].index(token)
                except ValueError:
                    continue
            if len(indices) == 0:
                break
            next_token = min(indices, key=indices.get)
            next_idx = idx + indices[next_token]
            ids.extend(sp.encode_as_ids(text[idx:next_idx]))
            ids.append(special[next_token])
            idx = next_idx + len(next_token)
        ids.extend(sp.encode_as_ids(text[idx:]))
        return ids
elif type_ == "Llama2Tokenizer":  # _Llama2Tokenizer.tokenize(s, bos=True, eos=False); eod = eos_id
    eod, vocab_size = sp.eos_id(), len(sp)
    tokenize = lambda s: [sp.bos_id()] + sp.encode(s)
else:
    eod, vocab_size = sp.eos_id(), len(sp)
    tokenize = sp.encode
ref = []
for line in open(corpus, encoding="utf-8"):
    doc = json.loads(line)["text"]
    ids = []
    for s in doc if isinstance(doc, list) else [doc]:  # Megatron's Encoder.encode
        ids += tokenize(s)
    if ids:
        ids.append(eod)  # --append-eod
    ref.append(ids)

docs = lib.documents(prefix)  # vocab_size < 65500: uint16 (DType code 8), as Megatron picks
assert len(docs) == len(ref), (len(docs), len(ref))
tokens = specials_inside = 0
for d, (got, want) in enumerate(zip(docs, ref)):
    assert got == want, f"{name}: document {d + 1}: {got} != reference {want}"
    tokens += len(got)
    specials_inside += sum(1 for t in got[:-1] if t == eod or t >= len(sp))
assert max(max(d, default=0) for d in docs) < vocab_size, (max(max(d, default=0) for d in docs), vocab_size)
if type_ == "SentencePieceTokenizer":
    assert specials_inside > 0, "no special token inside a document: the test does not exercise the split"
print(f"{name}: {len(ref)} documents, {tokens} tokens equal to the reference "
      f"(pieces {len(sp)}, vocab_size {vocab_size}, eod {eod}, eos {sp.eos_id()}, {specials_inside} <EOD>/added ids inside documents)")
EOF
}
check unigram SentencePieceTokenizer
check unigram GPTSentencePieceTokenizer
check bpe SentencePieceTokenizer
check bpe GPTSentencePieceTokenizer
check unigram Llama2Tokenizer

# gridformer tokenize, line by line, against the same transcription of Megatron's tokenize().
"$PY" -c "
import json, sys
for line in open(sys.argv[1], encoding='utf-8'):
    t = json.loads(line)['text']
    t = ''.join(t) if isinstance(t, list) else t
    print(t.replace('\\n', ' ').replace('\\r', ' '))
" in.jsonl > lines.txt
"$PY" -c "
import sentencepiece, sys
sp = sentencepiece.SentencePieceProcessor(model_file=sys.argv[1])
for line in open(sys.argv[2], encoding='utf-8'):
    print(' '.join(map(str, sp.encode(line.rstrip('\\n')))))
" bpe.model lines.txt > lines.spids
"$BIN" tokenize --tokenizer-type SentencePieceTokenizer --tokenizer-model bpe.model < lines.txt > lines.ids 2> tok.err \
  || fail "gridformer tokenize: $(cat tok.err)"
"$BIN" tokenize --tokenizer-type GPTSentencePieceTokenizer --tokenizer-model bpe.model --decode < lines.spids \
  > lines.decoded 2> tok.err || fail "gridformer tokenize --decode: $(cat tok.err)"
"$PY" - bpe.model lines.txt lines.ids lines.decoded <<'EOF'
import sys
import sentencepiece
sp = sentencepiece.SentencePieceProcessor(model_file=sys.argv[1])
specials = {}
vocab = {sp.id_to_piece(i): i for i in range(len(sp))}
for t in ["<CLS>", "<SEP>", "<EOD>", "<MASK>", sp.id_to_piece(sp.pad_id()) if sp.pad_id() >= 0 else "<PAD>",
          sp.id_to_piece(sp.bos_id()), sp.id_to_piece(sp.eos_id())]:
    if t not in vocab:
        vocab[t] = len(vocab)
    specials[t] = vocab[t]
def tokenize(text):  # Megatron's _SentencePieceTokenizer.tokenize
    ids, idx = [], 0
    while 1:
        indices = {t: text[idx:].index(t) for t in specials if t in text[idx:]}
        if not indices:
            break
        nt = min(indices, key=indices.get)
        ids.extend(sp.encode_as_ids(text[idx:idx + indices[nt]]))
        ids.append(specials[nt])
        idx += indices[nt] + len(nt)
    return ids + sp.encode_as_ids(text[idx:])
lines = open(sys.argv[2], encoding="utf-8").read().split("\n")[:-1]
got = open(sys.argv[3]).read().split("\n")[:-1]
dec = open(sys.argv[4], encoding="utf-8").read().split("\n")[:-1]
assert len(got) == len(lines) == len(dec), (len(got), len(lines), len(dec))
for i, (line, ids, d) in enumerate(zip(lines, got, dec)):
    want = tokenize(line)
    assert [int(x) for x in ids.split()] == want, f"tokenize line {i + 1}: {ids} != {want}"
    ref = sp.decode(sp.encode(line))
    assert d == ref, f"decode line {i + 1}: {d!r} != {ref!r}"
print(f"gridformer tokenize: {len(lines)} lines equal to Megatron's SentencePieceTokenizer; --decode equal to sp.decode")
EOF

# predict with MindFormers' LlamaTokenizer (vocab_file: tokenizer.model): a tiny Llama trained 10 steps
# on the Llama2Tokenizer data; each prompt is encoded as [bos] + sp.encode(prompt), and stdout is
# sp.decode(prompt ids + generated ids) for each prompt, one a line.
cat > llama_sp.yaml <<YAML
seed: 3
runner_config: {train_steps: 10, batch_size: 4}
lr_schedule: {type: cosine, learning_rate: 0.01, lr_end: 0.001, warmup_steps: 1}
train_dataset: {data_loader: {type: MegatronDataset, data_path: ${WORK}/unigram_Llama2Tokenizer_w1_text_document, split: "1,0,0"}}
processor: {tokenizer: {type: LlamaTokenizer, vocab_file: ${WORK}/unigram.model}}
callbacks: [{type: CheckpointMonitor, prefix: sp, save_checkpoint_steps: 1000, keep_checkpoint_max: 1}]
model:
  arch: {type: LlamaForCausalLM}
  model_config: {type: LlamaConfig, vocab_size: 500, seq_length: 32, hidden_size: 32, num_layers: 2, num_heads: 4,
                 n_kv_heads: 2, intermediate_size: 48, eos_token_id: 2, max_decode_length: 32}
YAML
train llama_sp llama_sp.yaml
"$BIN" predict --config llama_sp.yaml --load_checkpoint llama_sp --predict_data "Bo ka ma" \
  --predict_data "$(printf '\u4e2d\u6587 12 caf\u00e9')" --max_new_tokens 8 --ids_out pred.jsonl > pred.out 2> pred.err \
  || { cat pred.err; fail "predict with LlamaTokenizer"; }
"$PY" - "$WORK" <<'EOF'
import json, sys
import sentencepiece
w = sys.argv[1]
sp = sentencepiece.SentencePieceProcessor(model_file=w + "/unigram.model")
prompts = ["Bo ka ma", "\u4e2d\u6587 12 caf\u00e9"]
rows = [json.loads(l) for l in open(w + "/pred.jsonl")]
out = open(w + "/pred.out", encoding="utf-8").read().split("\n")[:-1]
assert len(rows) == len(out) == 2, (len(rows), len(out))
for p, r, o in zip(prompts, rows, out):
    assert r["prompt"] == [sp.bos_id()] + sp.encode(p), (r["prompt"], sp.encode(p))
    assert r["generated"], "nothing generated"
    ids = r["prompt"] + [i for i in r["generated"] if i != sp.eos_id()]
    assert o == sp.decode(ids), f"stdout {o!r} != sp.decode {sp.decode(ids)!r}"
print(f"predict with LlamaTokenizer: prompts encoded as [bos] + sp.encode, stdout = sp.decode of prompt and continuation")
EOF

refused 2 "--tokenizer-model" bad "$PRE" --input in.jsonl --output-prefix bad --tokenizer-type SentencePieceTokenizer

# Throughput (GF_BENCH_THROUGHPUT=1 only): the larger input with the unigram model (SentencePieceTokenizer, --append-eod).
[ -n "${GF_BENCH_THROUGHPUT:-}" ] || { echo "OK"; exit 0; }
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)"
bytes=$(stat -c %s big.jsonl)
for w in 1 2; do
  t0=$(date +%s.%N)
  preprocess "big_w$w" --input big.jsonl --tokenizer-model unigram.model --tokenizer-type SentencePieceTokenizer --append-eod \
    --workers "$w" --log-interval 1000000
  t1=$(date +%s.%N)
  "$PY" -c "import sys; b, s = int(sys.argv[1]), float(sys.argv[3]) - float(sys.argv[2]); print(f'throughput --workers ${w}: {b / 1048576:.1f} MB in {s:.2f} s = {b / 1048576 / s:.1f} MB/s (target >= 5 MB/s) on {sys.argv[4]} ({sys.argv[5]} CPUs)')" \
    "${bytes}" "${t0}" "${t1}" "${cpu:-unknown CPU}" "$(env -u OMP_NUM_THREADS nproc)"  # lib sets OMP_NUM_THREADS=1, which nproc reports
done
echo "OK"
