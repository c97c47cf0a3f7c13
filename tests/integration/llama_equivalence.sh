#!/usr/bin/env bash
# A Llama (grouped-query attention: 4 heads on 2 key/value heads, RoPE at theta 1e6, RMSNorm,
# SwiGLU, untied head) trains the same 20 steps under every parallel layout as on one rank:
# losses within 1e-5 relative at every step, gathered weights as compare_runs.py checks them.
# Layouts: dp2, mp2, mp2+sp, dp2xmp2+sp+zero, each tensor-parallel one with the vocabulary split
# (vocab_emb_dp False) and replicated; at mp2 each rank holds one of the two key/value heads.
# Full recompute under dp2xmp2+sp gives bitwise the losses and weights of no recompute. And a
# layout that would split a key/value head (mp4 on 2 kv heads) stops before any work, naming it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
GLOBAL_BATCH=8
random_llama llama.yaml

# ltrain NAME DP MP [extra --set ...]: lib.sh's train / mpi_train on DP x MP ranks, global batch GLOBAL_BATCH, weights saved
ltrain() {
  local name=$1 dp=$2 mp=$3; shift 3
  local args=(--save-weights "$name/weights.safetensors" --set parallel_config.data_parallel="$dp"
              --set parallel_config.model_parallel="$mp" --set runner_config.batch_size=$((GLOBAL_BATCH / dp)) "$@")
  if ((dp * mp == 1)); then train "$name" llama.yaml "${args[@]}"
  else mpi_train $((dp * mp)) "$name" llama.yaml "${args[@]}"
  fi
}
SP="--set parallel_config.use_seq_parallel=True"
ZERO="--set parallel.enable_parallel_optimizer=True"
VP="--set parallel_config.vocab_emb_dp=False"

ltrain one 1 1
ltrain dp2 2 1
for v in rep vp; do
  extra=(); [ "$v" = vp ] && extra=($VP)
  ltrain "mp2_$v" 1 2 "${extra[@]}"
  ltrain "mp2_sp_$v" 1 2 $SP "${extra[@]}"
  ltrain "dp2_mp2_sp_zero_$v" 2 2 $SP $ZERO "${extra[@]}"
done
ltrain dp2_mp2_sp_zero_vp_recompute 2 2 $SP $ZERO $VP --set recompute_config.recompute=True
cmp <(grep -o '"loss":[^,]*' dp2_mp2_sp_zero_vp/metrics.jsonl) <(grep -o '"loss":[^,]*' dp2_mp2_sp_zero_vp_recompute/metrics.jsonl) \
  || fail "recompute changed the losses"
cmp dp2_mp2_sp_zero_vp/weights.safetensors dp2_mp2_sp_zero_vp_recompute/weights.safetensors \
  || fail "recompute changed the weights"
echo "dp2_mp2_sp_zero_vp_recompute: losses and weights bitwise equal to dp2_mp2_sp_zero_vp"
"$PY" "$SRC/tests/integration/compare_runs.py" one dp2 mp2_rep mp2_vp mp2_sp_rep mp2_sp_vp dp2_mp2_sp_zero_rep \
  dp2_mp2_sp_zero_vp || fail "a layout differs from one rank"

# mp4 would split each of the 2 key/value heads: refused on every rank before any work (status 2, naming it).
refused 2 "n_kv_heads" mp4 mpirun -np 4 --oversubscribe "$BIN" train --config llama.yaml --set parallel_config.model_parallel=4 \
  --set output_dir=mp4
[ -e mp4/metrics.jsonl ] && fail "mp4 started training"
echo "PASS"
