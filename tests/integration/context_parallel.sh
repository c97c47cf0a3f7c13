#!/usr/bin/env bash
# Context parallel (parallel_config.context_parallel): each sample's positions split over the context
# ranks. Two cores: ulysses_cp (contiguous chunks, an all-to-all to whole heads) and colossalai_cp (ring
# attention: chunks c and 2cp-1-c per rank, key/value blocks passed around the ring, online softmax).
# Every layout trains the same 20 steps as one rank: losses within 1e-5 relative at every step and the
# gathered weights as compare_runs.py checks them.
#  Llama (RoPE at global positions): under each core cp2, cp4, cp2 x mp2 + sp, cp2 x dp2 with ZeRO,
#    cp2 x pp2, grouped-query cp2, cp2 with packed documents and a sliding window (held to one rank's
#    floor under other summation orders, floor_check.py: see the documents below), Mixtral-style MoE
#    (dropless) at cp2 under each core and ring cp2 x ep2 with ZeRO; full recompute
#    bitwise equal to cp2 without; hybrid_cp with ulysses_degree_in_cp 2 (1) bitwise the ulysses_cp
#    (colossalai_cp) run. hybrid_cp between its ends (Ulysses groups of U neighbours, a ring across
#    them): 2 x 2 (cp4, U 2) alone, with full recompute (bitwise equal), GQA, packed documents and a
#    window, MoE, and x mp2 + sp; 4 x 2 (cp8, U 4).
#  GPT-2 (learned positions, unfused core, dropout on the embedding, residuals and probabilities, whose
#    masks are keyed by global position): cp2 under each core, selective recompute bitwise equal;
#    hybrid 2 x 2; held to one rank's floor (floor_check.py, as the documents).
#  The context group's bytes per rank equal the analytic counts of the cores' exchanges.
#  A checkpoint does not depend on the context degree: cp2's step-10 checkpoint (exit_interval 10)
#    resumes at cp1 and one rank's at cp2 (ring), each giving the uninterrupted run's steps 11-20 within 1e-5, and
#    its weights after step 20 as compare_runs.py holds a layout's.
#  Refused before any work, naming the key: hybrid_cp with a Ulysses degree that does not divide
#    context_parallel, or whose heads do not split over it, ulysses_cp with heads not
#    divisible by model_parallel x context_parallel, a ring whose sequence does not cut into 2 cp chunks,
#    an MoE capacity (it drops by place in the whole sequence).
set -euo pipefail
BUILD="$1"; SRC="$2"
BIN="$BUILD/bin/gridformer"
command -v mpirun >/dev/null || { echo "FAIL: mpirun missing (openmpi-bin)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=1
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
fail() { echo "FAIL: $*"; exit 1; }
cat > llama.yaml <<YAML
seed: 11
runner_config: {train_steps: 20, batch_size: 4}
runner_wrapper: {use_clip_grad: True, max_grad_norm: 0.5}
lr_schedule: {type: cosine, learning_rate: 0.003, lr_end: 0.0003, warmup_steps: 2}
optimizer: {type: AdamW, beta1: 0.9, beta2: 0.95, weight_decay: 0.1}
train_dataset: {data_loader: {type: RandomTokens, seed: 5, num_samples: 16}}
callbacks: [{type: MFLossMonitor, per_print_times: 1}]
model:
  arch: {type: LlamaForCausalLM}
  model_config: {type: LlamaConfig, vocab_size: 101, seq_length: 32, hidden_size: 64, num_layers: 2, num_heads: 4,
                 n_kv_heads: 4, intermediate_size: 48, theta: 10000.0, rms_norm_eps: 1.0e-5, use_flash_attention: True}
YAML
cat > gpt2.yaml <<YAML
seed: 7
runner_config: {train_steps: 20, batch_size: 4}
lr_schedule: {type: cosine, learning_rate: 0.002, lr_end: 0.0002, warmup_steps: 2}
optimizer: {type: AdamW, weight_decay: 0.1}
train_dataset: {data_loader: {type: RandomTokens, seed: 3, num_samples: 16}}
callbacks: [{type: MFLossMonitor, per_print_times: 1}]
model:
  arch: {type: GPT2LMHeadModel}
  model_config: {type: GPT2Config, vocab_size: 96, seq_length: 32, hidden_size: 64, num_layers: 2, num_heads: 4,
                 hidden_dropout_rate: 0.1, attention_dropout_rate: 0.1, use_flash_attention: False}
YAML

# train CONFIG NAME RANKS [--set ...]: gathered weights in NAME/weights.safetensors, metrics in NAME/.
train() {
  local cfg=$1 name=$2 np=$3; shift 3
  local cmd=("$BIN" train --config "$cfg" --set output_dir="$name" --save-weights "$name/weights.safetensors" "$@")
  if [ "$np" -eq 1 ]; then "${cmd[@]}" > "$name.log" 2>&1 || { tail -30 "$name.log"; fail "$name"; }
  else mpirun -np "$np" --oversubscribe "${cmd[@]}" > "$name.log" 2>&1 || { tail -30 "$name.log"; fail "$name"; }
  fi
}
losses() { grep -o '"loss":[^,]*' "$1/metrics.jsonl"; }
same_bits() {  # same_bits A B: losses and gathered weights bit for bit
  cmp <(losses "$1") <(losses "$2") || fail "$2: losses differ from $1's"
  cmp "$1/weights.safetensors" "$2/weights.safetensors" || fail "$2: weights differ from $1's"
  echo "$2: losses and weights bitwise equal to $1"
}
# cp_ ALGO N: the --set arguments of context parallel N under ALGO (u: ulysses_cp, r: colossalai_cp)
cp_() { local a=ulysses_cp; [ "$1" = r ] && a=colossalai_cp; echo "--set parallel_config.context_parallel=$2 --set parallel_config.context_parallel_algo=$a"; }
# hy_ N U: hybrid_cp over N ranks, Ulysses groups of U
hy_() { echo "--set parallel_config.context_parallel=$1 --set parallel_config.context_parallel_algo=hybrid_cp --set parallel_config.ulysses_degree_in_cp=$2"; }

# ---- Llama -------------------------------------------------------------------------------------
train llama.yaml one 1
train llama.yaml gqa_one 1 --set model.model_config.n_kv_heads=2 --set model.model_config.use_flash_attention=False
# Packed documents (eod 7: each document's positions from 0, attention inside it, the eod's target
# untrained) and a 12-token sliding window: positions and bounds found over the whole sequence.
DOCS=(--set train_dataset.data_loader.reset_position_ids=True --set train_dataset.data_loader.reset_attention_mask=True
      --set train_dataset.data_loader.eod_mask_loss=True --set train_dataset.data_loader.eod_token_id=7
      --set model.model_config.sliding_window=12)
train llama.yaml docs_one 1 "${DOCS[@]}"
# Its floor: the same run under three other summation orders of what context parallel reorders
# (the unfused core; that with Eigen's GEMMs; each weight gradient's token sum in two partial sums,
# 2 accumulated micro-batches), and each layout held by floor_check.py to max(1e-5, twice the largest
# probe's figure) per tensor, loss and model L2 (tests/integration/context_parallel_rows.sh derives
# the rule). With packed documents and eod_mask_loss an embedding row is trained by few tokens whose
# gradient terms nearly cancel, so AdamW turns rounding into a visible fraction of a step there, and
# which reordering moves it most is luck: on an AMD EPYC with OpenBLAS's Haswell kernels
# (GF_GEMM=blas) the probes reach 1.6e-5 (embed_tokens) and ring cp2 2.0e-5, over the plain 1e-5,
# while their step-1 gradients agree with one rank's within 2 x the probes' 5.8e-7.
train llama.yaml docs_unf 1 "${DOCS[@]}" --set model.model_config.use_flash_attention=False
GF_GEMM=eigen train llama.yaml docs_eu 1 "${DOCS[@]}" --set model.model_config.use_flash_attention=False
train llama.yaml docs_acc 1 "${DOCS[@]}" --set runner_config.batch_size=2 --set runner_config.gradient_accumulation_steps=2
docs_check() { python3 "$SRC/tests/integration/floor_check.py" train docs_one docs_unf,docs_eu,docs_acc "$1" || fail "$1"; }
for a in u r; do
  train llama.yaml ${a}_cp2 2 $(cp_ $a 2)
  train llama.yaml ${a}_cp4 4 $(cp_ $a 4)
  train llama.yaml ${a}_cp2_mp2_sp 4 $(cp_ $a 2) --set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=True
  train llama.yaml ${a}_cp2_dp2_zero 4 $(cp_ $a 2) --set parallel_config.data_parallel=2 --set runner_config.batch_size=2 \
    --set parallel.enable_parallel_optimizer=True
  train llama.yaml ${a}_cp2_pp2 4 $(cp_ $a 2) --set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 \
    --set runner_config.batch_size=2
  train llama.yaml ${a}_cp2_recompute 2 $(cp_ $a 2) --set recompute_config.recompute=True
  same_bits ${a}_cp2 ${a}_cp2_recompute
  # Grouped-query attention (4 heads on 2 key/value heads): under Ulysses each rank holds 2 heads on 1 kv head.
  train llama.yaml ${a}_gqa_cp2 2 $(cp_ $a 2) --set model.model_config.n_kv_heads=2 --set model.model_config.use_flash_attention=False
  train llama.yaml ${a}_docs_cp2 2 $(cp_ $a 2) "${DOCS[@]}"
  python3 "$SRC/tests/integration/compare_runs.py" one ${a}_cp2 ${a}_cp4 ${a}_cp2_mp2_sp ${a}_cp2_dp2_zero ${a}_cp2_pp2
  python3 "$SRC/tests/integration/compare_runs.py" gqa_one ${a}_gqa_cp2
  docs_check ${a}_docs_cp2
done
# The context group's bytes (resources.json) are the exchanges' analytic counts, per rank, for 20 steps of
# 2 layers (B 4, T 32, 4 heads of 16, q|k|v 192 floats a row, attention output 64), with N ranks in all,
# U in a Ulysses group and R = N / U in a ring:
#  ring: per layer (R-1) key|value blocks forward, (R-1) blocks and R gradient blocks backward, each
#    B T U / N rows of 128 / U floats (the Ulysses group's rows, 1 / U of the heads);
#  Ulysses: per layer q|k|v and the output forward, the output gradient, the output and the q|k|v
#    gradient backward, each sending (U-1)/U of its B T/N rows to the other ranks of its group.
check_bytes() {
python3 - "$@" <<'PY'
import json, sys
for d in sys.argv[1:]:
    algo, N = d[0], int(d.split("_cp")[1].split("_")[0])
    U = {"r": 1, "u": N, "h": int(d.split("_u")[1]) if "_u" in d else 2}[algo]
    R, rows = N // U, 4 * 32 // N
    per_layer = (3 * R - 2) * rows * U * 128 // U if R > 1 else 0
    per_layer += rows * (U - 1) // U * (2 * 192 + 3 * 64)
    want = 20 * 2 * per_layer * 4
    got = {r["cp_bytes_sent"] for r in json.load(open(d + "/resources.json"))["ranks"]}
    assert got == {want}, f"{d}: context group sent {sorted(got)} bytes per rank, the exchanges count {want}"
    print(f"{d}: {want} bytes per rank in the context group, as counted")
PY
}
check_bytes u_cp2 u_cp4 r_cp2 r_cp4
HY="--set parallel_config.context_parallel=2 --set parallel_config.context_parallel_algo=hybrid_cp"
train llama.yaml hybrid_u2 2 $HY --set parallel_config.ulysses_degree_in_cp=2
train llama.yaml hybrid_u1 2 $HY --set parallel_config.ulysses_degree_in_cp=1
same_bits u_cp2 hybrid_u2
same_bits r_cp2 hybrid_u1
# hybrid_cp between its ends: Ulysses groups of U neighbouring ranks, a ring of cp / U across them.
train llama.yaml h_cp4 4 $(hy_ 4 2)
train llama.yaml h_cp8_u4 8 $(hy_ 8 4)
train llama.yaml h_cp4_mp2_sp 8 $(hy_ 4 2) --set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=True
train llama.yaml h_cp4_recompute 4 $(hy_ 4 2) --set recompute_config.recompute=True
same_bits h_cp4 h_cp4_recompute
train llama.yaml h_gqa_cp4 4 $(hy_ 4 2) --set model.model_config.n_kv_heads=2 --set model.model_config.use_flash_attention=False
train llama.yaml h_docs_cp4 4 $(hy_ 4 2) "${DOCS[@]}"
python3 "$SRC/tests/integration/compare_runs.py" one h_cp4 h_cp8_u4 h_cp4_mp2_sp
python3 "$SRC/tests/integration/compare_runs.py" gqa_one h_gqa_cp4
docs_check h_docs_cp4
grep -q "context_parallel=4 (hybrid_cp: Ulysses 2 x ring 2)" h_cp4.log && grep -q "context_parallel=2 (ulysses_cp)" u_cp2.log || fail "the layout line does not name hybrid_cp's degrees"
grep -q "context_parallel=2" u_cp2_mp2_sp.log || fail "the layout line does not name context_parallel"
check_bytes h_cp4 h_cp8_u4

# ---- Mixtral-style MoE (dropless, 4 experts top-2, balancing and z losses): each sequence's
# balancing loss from its whole counts (summed over the context group), expert gradients over the
# expert-data x context ranks; with expert parallel and ZeRO too.
MOE=(--set moe_config.expert_num=4 --set moe_config.num_experts_chosen=2 --set moe_config.aux_loss_factor=0.05
     --set moe_config.z_loss_factor=0.001 --set moe_config.capacity_factor=-1)
train llama.yaml moe_one 1 "${MOE[@]}"
train llama.yaml moe_r_cp2 2 $(cp_ r 2) "${MOE[@]}"
train llama.yaml moe_u_cp2 2 $(cp_ u 2) "${MOE[@]}"
train llama.yaml moe_r_cp2_ep2_zero 4 $(cp_ r 2) "${MOE[@]}" --set parallel_config.data_parallel=2 \
  --set parallel_config.expert_parallel=2 --set runner_config.batch_size=2 --set parallel.enable_parallel_optimizer=True
train llama.yaml moe_h_cp4 4 $(hy_ 4 2) "${MOE[@]}"
python3 "$SRC/tests/integration/compare_runs.py" moe_one moe_r_cp2 moe_u_cp2 moe_r_cp2_ep2_zero moe_h_cp4

# ---- GPT-2: learned positions, unfused core, dropout ------------------------------------------------
train gpt2.yaml g_one 1
# Held to its floor as the documents are (floor_check.py; probes: the fused core, that with Eigen's
# GEMMs, 2 accumulated micro-batches). Dropout makes the weights' figures a lottery too: on the EPYC
# with OpenBLAS's Haswell kernels (GF_GEMM=blas) the probes reach 1.0e-5 (h.0.mlp.c_proj) and the
# layouts 7.1e-6 - 1.5e-5, while every layout's step-1 gradients agree with one rank's within 2 x the
# probes' 5.1e-7.
train gpt2.yaml g_fl 1 --set model.model_config.use_flash_attention=True
GF_GEMM=eigen train gpt2.yaml g_eu 1 --set model.model_config.use_flash_attention=True
train gpt2.yaml g_acc 1 --set runner_config.batch_size=2 --set runner_config.gradient_accumulation_steps=2
for a in u r; do
  train gpt2.yaml g_${a}_cp2 2 $(cp_ $a 2)
  train gpt2.yaml g_${a}_cp2_sel 2 $(cp_ $a 2) --set recompute_config.select_recompute=True
  same_bits g_${a}_cp2 g_${a}_cp2_sel
done
train gpt2.yaml g_h_cp4 4 $(hy_ 4 2)
python3 "$SRC/tests/integration/floor_check.py" train g_one g_fl,g_eu,g_acc g_u_cp2,g_r_cp2,g_h_cp4 || fail "GPT-2 layouts"

# ---- checkpoints across context degrees --------------------------------------------------------------
CK=(--set callbacks='[{type: MFLossMonitor, per_print_times: 1}, {type: CheckpointMonitor, prefix: cp, save_checkpoint_steps: 10}]')
train llama.yaml ck_cp2 2 $(cp_ u 2) "${CK[@]}" --set runner_config.exit_interval=10
train llama.yaml ck_one 1 "${CK[@]}" --set runner_config.exit_interval=10
train llama.yaml res_cp1 1 --set load_checkpoint="$WORK/ck_cp2/checkpoint" --set resume_training=True
train llama.yaml res_cp2 2 $(cp_ r 2) --set load_checkpoint="$WORK/ck_one/checkpoint" --set resume_training=True
python3 - one res_cp1 res_cp2 <<'PY'
import json, sys
def steps(d):
    return {r["step"]: r["loss"] for r in map(json.loads, open(d + "/metrics.jsonl")) if "loss" in r}
ref = steps(sys.argv[1])
for d in sys.argv[2:]:
    got = steps(d)
    assert sorted(got) == list(range(11, 21)), f"{d}: resumed steps {sorted(got)}"
    worst = max(abs(got[s] - ref[s]) / abs(ref[s]) for s in got)
    assert worst <= 1e-5, f"{d}: step losses differ from the uninterrupted run by {worst:.3g} relative"
    print(f"{d}: steps 11-20 within {worst:.2g} relative of one uninterrupted rank")
PY
# ... and their weights after step 20 as compare_runs.py holds a layout's (it compares a resumed run's logged steps).
python3 "$SRC/tests/integration/compare_runs.py" one res_cp1 res_cp2 || fail "a resumed run's weights differ"

# ---- refusals -----------------------------------------------------------------------------------------
refused() {  # refused NAME RANKS PATTERN [--set ...]
  local name=$1 np=$2 pat=$3; shift 3
  set +e
  mpirun -np "$np" --oversubscribe "$BIN" train --config llama.yaml --set output_dir="$name" "$@" > "$name.log" 2>&1
  local status=$?
  set -e
  [ "$status" -ne 0 ] || fail "$name ran"
  grep -q -- "$pat" "$name.log" || { tail -20 "$name.log"; fail "$name: the message does not say '$pat'"; }
  [ -e "$name/metrics.jsonl" ] && fail "$name started training"
  echo "$name refused: $(grep -m1 -- "$pat" "$name.log" | cut -c1-180)"
}
refused hybrid 4 "ulysses_degree_in_cp: 3.: the Ulysses degree must divide context_parallel" $(hy_ 4 3)
refused hybrid_heads 4 "model_parallel. x .ulysses_degree_in_cp" $(hy_ 4 2) --set model.model_config.n_kv_heads=1 \
  --set model.model_config.use_flash_attention=False
refused heads 4 "model_parallel. x .context_parallel" $(cp_ u 4) --set model.model_config.n_kv_heads=2
refused chunks 4 "2 x .parallel_config.context_parallel" $(cp_ r 4) --set model.model_config.seq_length=36
refused capacity 2 "capacity_factor" $(cp_ r 2) --set moe_config.expert_num=4 --set moe_config.capacity_factor=1.5
echo "PASS"
