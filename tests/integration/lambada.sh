#!/usr/bin/env bash
# LAMBADA cloze accuracy through the runner (train --lambada_data; docs/evaluation.md) against
# tools/lambada_torch.py, the PyTorch reference, on the same weights: a tiny GPT-2 trained here for
# 300 steps on the test passages themselves (tests/data/lambada_tiny.jsonl, preprocessed into
# Megatron's format), so that it gets some of them right and not others. Non-strict and strict,
# run_mode eval on one rank and under model_parallel 2 (vocabulary split), and after training's
# last step: the same count as PyTorch's, which the log line and metrics.jsonl report.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
DATA="$SRC/tests/data/lambada_tiny.jsonl"
preprocess lambada --input "$DATA" --vocab-file "$VOCAB" --merge-file "$MERGES" --append-eod
lambada_gpt2 gpt2.yaml 300 0.003 128 2 4 64
train run gpt2.yaml --save-weights weights.safetensors --lambada_data "$DATA"

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
AFTER=$(lambada_count run/metrics.jsonl)
[ "$AFTER" = "$REF" ] || { cat run.log; fail "after training $AFTER, PyTorch $REF"; }
grep -q "lambada: accuracy .* ($REF) on" run.log || fail "no lambada log line"

evaluate() {  # evaluate NP NAME [args]: run_mode eval from the saved weights (lib's mpi_train)
  local np=$1 name=$2; shift 2
  mpi_train $np $name gpt2.yaml --set run_mode=eval \
    --set load_checkpoint=weights.safetensors --set eval_dataset.data_loader.type=MegatronDataset \
    --set "eval_dataset.data_loader.data_path=$WORK/lambada_text_document" --set eval_dataset.data_loader.split=0,100,0 --set eval_dataset.eval_iters=1 --lambada_data "$DATA" "$@"
}
evaluate 1 eval1
evaluate 1 eval1s --strict_lambada
evaluate 2 eval2 --set parallel_config.model_parallel=2 --set parallel_config.vocab_emb_dp=False
evaluate 2 eval2s --set parallel_config.model_parallel=2 --set parallel_config.vocab_emb_dp=False --strict_lambada
for n in eval1 eval2; do
  [ "$(lambada_count $n/metrics.jsonl)" = "$REF" ] || { cat $n.log; fail "$n: $(lambada_count $n/metrics.jsonl), PyTorch $REF"; }
  grep -q '"eval_loss"' $n/metrics.jsonl || fail "$n: no eval loss beside the accuracy"
done
for n in eval1s eval2s; do
  [ "$(lambada_count $n/metrics.jsonl)" = "$REF_STRICT" ] || { cat $n.log; fail "$n: $(lambada_count $n/metrics.jsonl), PyTorch $REF_STRICT"; }
done
echo "ok: gridformer = PyTorch: $REF non-strict, $REF_STRICT strict (eval on 1 rank and mp2, and after training)"
echo PASS
