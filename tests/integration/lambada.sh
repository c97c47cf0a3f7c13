#!/usr/bin/env bash
# LAMBADA cloze accuracy through the runner (train --lambada_data; docs/evaluation.md) against
# tools/lambada_torch.py, the PyTorch reference, on the same weights: a tiny GPT-2 trained here for
# 300 steps on the test passages themselves (tests/data/lambada_tiny.jsonl, preprocessed into
# Megatron's format), so that it gets some of them right and not others. Non-strict and strict,
# run_mode eval on one rank and under model_parallel 2 (vocabulary split), and after training's
# last step: the same count as PyTorch's, which the log line and metrics.jsonl report.
set -euo pipefail
BUILD="$1"; SRC="$2"
BIN="$BUILD/bin/gridformer"
PY=/usr/bin/python3
command -v mpirun >/dev/null || { echo "FAIL: mpirun missing (openmpi-bin)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=1
WORK="$(mktemp -d)"; trap "rm -rf $WORK" EXIT
cd "$WORK"
VOCAB="$SRC/data/gpt2/gpt2-vocab.json"; MERGES="$SRC/data/gpt2/gpt2-merges.txt"; DATA="$SRC/tests/data/lambada_tiny.jsonl"
"$BUILD/bin/preprocess_data" --input "$DATA" --output-prefix lambada --vocab-file "$VOCAB" --merge-file "$MERGES" \
  --append-eod > prep.log 2>&1 || { cat prep.log; exit 1; }
cat > gpt2.yaml <<YAML
seed: 5
runner_config: {train_steps: 300, batch_size: 4}
lr_schedule: {type: cosine, learning_rate: 0.003, lr_end: 0.001, warmup_steps: 5}
optimizer: {type: AdamW, beta1: 0.9, beta2: 0.95, weight_decay: 0.0}
train_dataset: {data_loader: {type: MegatronDataset, data_path: $WORK/lambada_text_document, split: "100,0,0"}}
callbacks: [{type: MFLossMonitor, per_print_times: 50}]
processor: {tokenizer: {type: GPT2Tokenizer, vocab_file: $VOCAB, merge_file: $MERGES}}
model:
  arch: {type: GPT2LMHeadModel}
  model_config: {type: GPT2Config, vocab_size: 50257, seq_length: 32, hidden_size: 128, num_layers: 2, num_heads: 4,
                 max_position_embeddings: 64}
YAML
"$BIN" train --config gpt2.yaml --set output_dir=run --save-weights weights.safetensors --lambada_data "$DATA" \
  > train.log 2>&1 || { cat train.log; echo "FAIL: training"; exit 1; }

count() {  # count METRICS: the last lambada line's correct/items
  $PY -c "
import json, sys
l = [json.loads(x) for x in open(sys.argv[1]) if 'lambada_correct' in x][-1]
print('%d/%d' % (l['lambada_correct'], l['lambada_items']))" "$1"
}
reference() {  # reference [--strict]
  $PY "$SRC/tools/lambada_torch.py" --weights weights.safetensors --num-heads 4 --seq-length 32 --data "$DATA" \
    --vocab-file "$VOCAB" --merge-file "$MERGES" "$@" | $PY -c "
import json, sys
r = json.loads(sys.stdin.read().strip().splitlines()[-1])
print('%d/%d' % (r['correct'], r['items']))"
}
REF=$(reference); REF_STRICT=$(reference --strict)
echo "PyTorch: $REF non-strict, $REF_STRICT strict"
[ "$REF" != "0/11" ] && [ "$REF" != "11/11" ] || echo "note: the reference count is $REF (a weaker check)"
AFTER=$(count run/metrics.jsonl)
[ "$AFTER" = "$REF" ] || { cat train.log; echo "FAIL: after training $AFTER, PyTorch $REF"; exit 1; }
grep -q "lambada: accuracy .* ($REF) on" train.log || { echo "FAIL: no lambada log line"; exit 1; }

evaluate() {  # evaluate NP NAME [args]: run_mode eval from the saved weights
  local np=$1 name=$2; shift 2
  mpirun -np $np --oversubscribe "$BIN" train --config gpt2.yaml --set output_dir=$name --set run_mode=eval \
    --set load_checkpoint=weights.safetensors --set eval_dataset.data_loader.type=MegatronDataset \
    --set "eval_dataset.data_loader.data_path=$WORK/lambada_text_document" --set eval_dataset.data_loader.split=0,100,0 --set eval_dataset.eval_iters=1 --lambada_data "$DATA" "$@" > $name.log 2>&1 \
    || { cat $name.log; echo "FAIL: eval $name"; exit 1; }
}
evaluate 1 eval1
evaluate 1 eval1s --strict_lambada
evaluate 2 eval2 --set parallel_config.model_parallel=2 --set parallel_config.vocab_emb_dp=False
evaluate 2 eval2s --set parallel_config.model_parallel=2 --set parallel_config.vocab_emb_dp=False --strict_lambada
for n in eval1 eval2; do
  [ "$(count $n/metrics.jsonl)" = "$REF" ] || { cat $n.log; echo "FAIL: $n: $(count $n/metrics.jsonl), PyTorch $REF"; exit 1; }
  grep -q '"eval_loss"' $n/metrics.jsonl || { echo "FAIL: $n: no eval loss beside the accuracy"; exit 1; }
done
for n in eval1s eval2s; do
  [ "$(count $n/metrics.jsonl)" = "$REF_STRICT" ] || { cat $n.log; echo "FAIL: $n: $(count $n/metrics.jsonl), PyTorch $REF_STRICT"; exit 1; }
done
echo "ok: gridformer = PyTorch: $REF non-strict, $REF_STRICT strict (eval on 1 rank and mp2, and after training)"
echo PASS
