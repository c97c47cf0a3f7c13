#!/usr/bin/env bash
# Sharded data parallelism (parallel.zero_stage, hybrid sharding): every layout trains the same 20
# steps as one rank, losses within 1e-5 relative at every step and the gathered weights as
# compare_runs.py checks them.
#  GPT-2 (tied embedding, dropout): dp4 ZeRO-1, ZeRO-2, ZeRO-3; dp4 hybrid 2 under ZeRO-1, 2 and 3
#    (MindFormers' optimizer_weight_shard_size and SMP's hybrid_shard_degree); ZeRO-3 x mp2 + sp;
#    ZeRO-3 x pp2 (1F1B; the tied embedding's two copies); ZeRO-3 with full recompute; ZeRO-2 and 3 with
#    gradient accumulation; ZeRO-3 in bf16 bitwise ZeRO-2 in bf16 (the same reductions), its step 1 within
#    1e-6 of one bf16 rank (the same weights' bits, each sample's forward its own) and every later step within 1e-4
#    (bf16 rounding: zero_bf16_check.py).
#  Mixtral-style MoE: ZeRO-3 x ep2 (the experts' units over their own data-parallel group).
#  ZeRO-3 with parallel.zero_prefetch False bitwise equal to ZeRO-3; ZeRO-3 x pp2 on the MoE Llama (its
#    untied lm_head in chunks on the last stage).
#  ZeRO-3's checkpoint (every rank its slices) resumes on one rank and at mp2 x dp2 under ZeRO-1, and one rank's
#    resumes under dp4 ZeRO-3 with hybrid shards: each gives the uninterrupted run's steps 11-20 within 1e-5 and its
#    weights after step 20 as compare_runs.py holds a layout's (each tensor, and the model's L2 norm, within 1e-5).
#  At stages 2 and 3 the LM head's weight is cut into vocabulary chunks no larger than a layer's unit
#    (GPT-2's 2000-word vocabulary: 4 chunks, a tied embedding; the MoE Llama's 1000: an untied lm_head),
#    and each layer into two units (its attention's, its MLP's): the logs name the chunks, and the
#    comparisons above cover both.
#  The data-parallel group's bytes per rank per step equal the analytic counts of each stage.
#  Refused before any work, naming the keys: a zero_stage outside 0-3, zero_stage 0 with
#    enable_parallel_optimizer, a shard group that does not divide the data-parallel group (and with
#    experts their data-parallel group).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
random_gpt2 gpt2.yaml seed=7 batch=8 lr=0.002 lr_end=0.0002 optimizer="{type: AdamW, weight_decay: 0.1}" data_seed=3 \
  samples=64 vocab=2000 seq=32 hidden=64 layers=3
random_llama moe.yaml batch=8 clip= samples=64 top="moe_config: {expert_num: 4, num_experts_chosen: 2, capacity_factor: 0}" \
  vocab=1000 seq=32 kv=4 theta=10000.0

# ztrain CONFIG NAME RANKS [--set ...]: lib.sh's train / mpi_train, the gathered weights in NAME/weights.safetensors.
ztrain() {
  local cfg=$1 name=$2 np=$3; shift 3
  if [ "$np" -eq 1 ]; then train "$name" "$cfg" --save-weights "$name/weights.safetensors" "$@"
  else mpi_train "$np" "$name" "$cfg" --save-weights "$name/weights.safetensors" "$@"
  fi
}
z() { echo "--set parallel.zero_stage=$1"; }
DP4="--set parallel_config.data_parallel=4 --set runner_config.batch_size=2"
HYB="--set parallel_config.hybrid_shard_degree=2"

# ---- GPT-2 ---------------------------------------------------------------------------------------
ztrain gpt2.yaml one 1
ztrain gpt2.yaml z1 4 $DP4 $(z 1)
ztrain gpt2.yaml z2 4 $DP4 $(z 2)
ztrain gpt2.yaml z3 4 $DP4 $(z 3)
ztrain gpt2.yaml h1 4 $DP4 $(z 1) --set parallel.parallel_optimizer_config.optimizer_weight_shard_size=2
ztrain gpt2.yaml h2 4 $DP4 $(z 2) $HYB
ztrain gpt2.yaml h3 4 $DP4 $(z 3) $HYB
ztrain gpt2.yaml z3_mp2_sp 4 --set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2 \
  --set parallel_config.use_seq_parallel=True --set runner_config.batch_size=4 $(z 3)
ztrain gpt2.yaml z3_pp2 4 --set parallel_config.data_parallel=2 --set parallel_config.pipeline_stage=2 \
  --set parallel_config.micro_batch_num=2 --set runner_config.batch_size=2 $(z 3)
ztrain gpt2.yaml z3_recompute 4 $DP4 $(z 3) --set recompute_config.recompute=True
ztrain gpt2.yaml z3_noprefetch 4 $DP4 $(z 3) --set parallel.zero_prefetch=False
"$PY" "$SRC/tests/integration/compare_runs.py" one z1 z2 z3 h1 h2 h3 z3_mp2_sp z3_pp2 z3_recompute
# parallel.zero_prefetch False: the same gathers, only later; the same bits.
cmp <(grep -o '"loss":[^,]*' z3/metrics.jsonl) <(grep -o '"loss":[^,]*' z3_noprefetch/metrics.jsonl) || fail "z3_noprefetch: losses differ from z3's"
cmp z3/weights.safetensors z3_noprefetch/weights.safetensors || fail "z3_noprefetch: weights differ from z3's"
grep -q "when the block runs: parallel.zero_prefetch False" z3_noprefetch.log || fail "z3_noprefetch: the log does not say so"
echo "z3_noprefetch: losses and weights bitwise equal to z3's"

# Gradient accumulation: the gradient is held whole until the last micro-batch's backward reduce-scatters it.
ACC="--set runner_config.gradient_accumulation_steps=2"
ztrain gpt2.yaml acc_one 1 $ACC --set runner_config.batch_size=4
ztrain gpt2.yaml acc_z2 2 --set parallel_config.data_parallel=2 $ACC --set runner_config.batch_size=2 $(z 2)
ztrain gpt2.yaml acc_z3 2 --set parallel_config.data_parallel=2 $ACC --set runner_config.batch_size=2 $(z 3)
"$PY" "$SRC/tests/integration/compare_runs.py" acc_one acc_z2 acc_z3

# ---- MoE -----------------------------------------------------------------------------------------
# Held as tests/integration/moe_equivalence.sh and context_parallel.sh hold layouts: every run on OpenBLAS
# (whatever a machine probe would pick), and one rank against itself under the reordering data parallel
# makes, each weight gradient's token sum in two partial sums (2 accumulated micro-batches), as the floor
# (compare_runs.py --floor: each tensor held to max(1e-5, twice its floor figure)). An embedding row trained
# by few tokens has a gradient whose terms nearly cancel, and AdamW turns their rounding into a visible
# fraction of a step: on the 2-vCPU EPYC with OpenBLAS's Cooperlake kernels the probe moves
# model.embed_tokens.weight by 9.5e-6 and moe_z3_ep2 by 1.01e-5. Without the floor this comparison passed
# or failed with the GEMM backend the machine probe chose (oneDNN's sgemm: under 1e-5; OpenBLAS: 1.01e-5,
# the binary before the last Speed changes as well). Eigen's kernels as a probe reach only 3.5e-6 there:
# they reorder the products' sums, not the embedding's token sum.
# On an AMX Xeon (CPU model 167, OpenBLAS's Cooperlake kernels) ZeRO-2/3 over dp2 with 2 micro-batches (moe_z3_pp2;
# dp2 without pipeline stages gives the same bits) moves embed_tokens by 1.13e-5: rows 774 and 951 (tokens whose
# gradients nearly cancel) by 7.7e-5 and 5.2e-5, while the probe above reaches 2.6e-6 there. One rank against
# itself with oneDNN's sgemm in place of OpenBLAS moves the same two rows by 5.5e-5 and 3.6e-5 (8.3e-6 on the
# tensor): the layout's figure is rounding of that size, so that probe is a second floor (each tensor: the larger).
GF_GEMM=blas ztrain moe.yaml moe_one 1
GF_GEMM=blas ztrain moe.yaml moe_one_acc 1 --set runner_config.batch_size=4 --set runner_config.gradient_accumulation_steps=2
GF_GEMM=onednn ztrain moe.yaml moe_one_onednn 1
GF_GEMM=blas ztrain moe.yaml moe_z3_ep2 4 $DP4 --set parallel_config.expert_parallel=2 $(z 3)
# dp2 x pp2: the untied lm_head cut into chunks on the last stage
GF_GEMM=blas ztrain moe.yaml moe_z3_pp2 4 --set parallel_config.data_parallel=2 --set parallel_config.pipeline_stage=2 \
  --set parallel_config.micro_batch_num=2 --set runner_config.batch_size=2 $(z 3)
"$PY" "$SRC/tests/integration/compare_runs.py" moe_one --floor=moe_one_acc,moe_one_onednn moe_z3_ep2 moe_z3_pp2
# The head's weight was cut into vocabulary chunks wherever a stage holds it whole with its embedding
# (tied) or holds an untied lm_head: not under pipeline stages with a tied embedding (its two copies).
for run in z2 z3 h2 h3 z3_mp2_sp z3_recompute acc_z2 acc_z3 moe_z3_ep2; do
  grep -q "vocabulary chunks, each a unit" "$run.log" || fail "$run: the head's weight was not cut into vocabulary chunks"
done
grep -q "vocabulary chunks, each a unit" z3_pp2.log && fail "z3_pp2: a tied head split from its embedding was cut"
echo "the head's weight in vocabulary chunks: $(grep -o 'in [0-9]* vocabulary chunks[^:]*: units \[[^]]*\]' z3.log | head -1)"
# ---- bf16: ZeRO-3 gathers each unit and converts it to bf16 there; the same sums as ZeRO-2 ---------------
BF="--set model.model_config.compute_dtype=bfloat16"
ztrain gpt2.yaml bf_one 1 $BF
ztrain gpt2.yaml bf_z2 4 $DP4 $(z 2) $BF
ztrain gpt2.yaml bf_z3 4 $DP4 $(z 3) $BF
cmp <(grep -o '"loss":[^,]*' bf_z2/metrics.jsonl) <(grep -o '"loss":[^,]*' bf_z3/metrics.jsonl) || fail "bf_z3: losses differ from bf_z2's"
cmp bf_z2/weights.safetensors bf_z3/weights.safetensors || fail "bf_z3: weights differ from bf_z2's"
echo "bf_z3: losses and weights bitwise equal to bf_z2 (the same units reduce-scattered)"
# Against one rank in bf16 the sums' order differs and bf16 weights round those differences up, so bf16 sharding is
# held bitwise to the run with the same reductions (above), and to one bf16 rank: step 1 within 1e-6, every later
# step within 1e-4 (tests/integration/zero_bf16_check.py derives both), plain data parallel beside it.
ztrain gpt2.yaml bf_z0 4 $DP4 $BF
"$PY" "$SRC/tests/integration/zero_bf16_check.py" bf_one bf_z0 bf_z3 || fail "bf16 against one bf16 rank"

# ---- checkpoints: ZeRO-3's slices resume on one rank and at mp2 ----------------------------------------
CK=(--set callbacks='[{type: MFLossMonitor, per_print_times: 1}, {type: CheckpointMonitor, prefix: z, save_checkpoint_steps: 10}]')
ztrain gpt2.yaml ck_z3 4 $DP4 $(z 3) "${CK[@]}" --set runner_config.exit_interval=10
ztrain gpt2.yaml res_one 1 --set load_checkpoint="$WORK/ck_z3/checkpoint" --set resume_training=True
ztrain gpt2.yaml res_mp2 4 --set parallel_config.model_parallel=2 --set parallel_config.data_parallel=2 \
  --set runner_config.batch_size=4 $(z 1) --set load_checkpoint="$WORK/ck_z3/checkpoint" --set resume_training=True
grep -q "zero_stage 1\|ZeRO-1" res_mp2.log || fail "res_mp2: the log does not name ZeRO-1"
grep -q "model_parallel=2" res_mp2.log || fail "res_mp2: the log does not name model_parallel=2"
ztrain gpt2.yaml ck_one 1 "${CK[@]}" --set runner_config.exit_interval=10
ztrain gpt2.yaml res_z3 4 $DP4 $(z 3) $HYB --set load_checkpoint="$WORK/ck_one/checkpoint" --set resume_training=True
close_after 10 1e-5 one res_one res_mp2 res_z3
# ... and their weights after step 20 as compare_runs.py holds a layout's (it compares a resumed run's logged steps).
"$PY" "$SRC/tests/integration/compare_runs.py" one res_one res_mp2 res_z3 || fail "a resumed run's weights differ"

# ---- bytes: the data-parallel group's bytes per rank per step equal the analytic counts ----------------
# Per step on the data-parallel group of 4: the loss and the gradient norm (one double each, all-reduced
# by the ring); ZeRO-1 a reduce-scatter and an all-gather of the whole arena; ZeRO-2 a reduce-scatter and
# an all-gather per unit; ZeRO-3 a reduce-scatter per unit and an all-gather of each unit before each
# block's forward and backward: each vocabulary chunk of the tied embedding for the lookup and for the
# head's forward and backward, the position embedding's unit for the lookup only (the embedding's
# backward reads no weight), the others twice. At stages 2 and 3 the lookup's row gradients then go to
# the ranks that own them: the most rows of any rank all-reduced (one double), then every rank's rows
# (64 here: 2 x 32 tokens, each its id and 64 values) all-gathered in one round. The unit sizes and the
# chunks' indices are the ones the run logs ("ZeRO-N units (floats): [...]", "units [...]").
"$PY" - z1 z2 z3 <<'PY'
import json, re, sys
def cnt(n, d, k):  # shard k of n elements over d ranks: the first n % d shards hold one more (shard_begin)
    k %= d
    return n // d + (1 if k < n % d else 0)
def rs(n, d, r):  # elements rank r sends in a ring reduce-scatter of n elements over d ranks
    return sum(cnt(n, d, r - s - 1) for s in range(d - 1))
def ag(n, d, r):
    return sum(cnt(n, d, r - s) for s in range(d - 1))
D, STEPS, ROWS, WIDTH = 4, 20, 64, 64
def chunk_units(log):
    m = re.search(r"vocabulary chunks, each a unit gathered and reduced on its own: units (\[[^\]]*\])", log)
    return json.loads(m.group(1)) if m else []
def gathers(i, chunks):  # ZeRO-3's all-gathers of unit i per step (GPT-2: the tied embedding's chunks first)
    if not chunks:
        return 3 if i == 0 else 2  # the embedding's unit: the lookup, the tied head's forward and backward
    if i in chunks:
        return 3
    return 1 if i == len(chunks) else 2  # the unit after the chunks: the position embedding, the lookup's
def rows_floats(d, r):  # the lookup's rows to their owners: the all-gather of every rank's ROWS rows
    return ag(d * ROWS * (WIDTH + 1), d, r)
for run in sys.argv[1:]:
    stage = int(run[1])
    log = open(run + ".log").read()
    units = json.loads(re.search(r"ZeRO-\d units \(floats\): (\[[^\]]*\])", log).group(1))
    chunks = chunk_units(log)
    # 2048 padded rows of 64; chunks of at most the largest layer unit, a layer's MLP half (33216 floats:
    # 519 rows): 4 chunks, the arena's first units (wte comes first)
    assert stage < 2 or chunks == [0, 1, 2, 3], f"{run}: vocabulary chunks {chunks}"
    ranks = json.load(open(run + "/resources.json"))["ranks"]
    for r in range(D):
        floats = 0
        for i, n in enumerate(units):
            floats += rs(n, D, r)
            if stage <= 2:
                floats += ag(n, D, r)
            else:
                floats += gathers(i, chunks) * ag(n, D, r)
        doubles = 2 * (rs(1, D, r) + ag(1, D, r))  # the loss and the norm's all-reduces
        if chunks:
            floats += rows_floats(D, r)
            doubles += rs(1, D, r) + ag(1, D, r)
        want = STEPS * (4 * floats + 8 * doubles)
        got = ranks[r]["dp_bytes_sent"]
        assert got == want, f"{run} rank {r}: dp bytes sent {got:.0f}, analytic {want}"
    print(f"{run}: data-parallel bytes per rank equal the analytic count ({STEPS} steps, {len(units)} unit(s))")
# Hybrid 2 at stage 3 (h3): the units' reduce-scatters and gathers and the norm in the shard group of 2
# (ranks 2g, 2g + 1), each slice's all-reduce over the replica group of 2 (ranks r and r + 2), and only the
# loss over the whole data-parallel group.
log = open("h3.log").read()
units = json.loads(re.search(r"ZeRO-3 units \(floats\): (\[[^\]]*\])", log).group(1))
chunks = chunk_units(log)
assert chunks == [0, 1, 2, 3], f"h3: vocabulary chunks {chunks}"
ranks = json.load(open("h3/resources.json"))["ranks"]
for r in range(D):
    sr, rr = r % 2, r // 2
    shard = sum(4 * (rs(n, 2, sr) + gathers(i, chunks) * ag(n, 2, sr)) for i, n in enumerate(units)) + 8 * (rs(1, 2, sr) + ag(1, 2, sr))
    shard += 4 * rows_floats(2, sr) + 8 * (rs(1, 2, sr) + ag(1, 2, sr))  # the lookup's rows, in the shard group
    replica = sum(4 * (rs(cnt(n, 2, sr), 2, rr) + ag(cnt(n, 2, sr), 2, rr)) for n in units)
    dp = 8 * (rs(1, D, r) + ag(1, D, r))
    for key, want in (("shard_bytes_sent", shard), ("replica_bytes_sent", replica), ("dp_bytes_sent", dp)):
        got = ranks[r][key]
        assert got == STEPS * want, f"h3 rank {r}: {key} {got:.0f}, analytic {STEPS * want}"
print(f"h3: shard-group, replica-group and data-parallel bytes per rank equal the analytic counts")
PY

# ---- refusals -----------------------------------------------------------------------------------------
zrefused() {  # [CFG=moe.yaml] zrefused NAME RANKS PATTERN [--set ...]: lib.sh's refused (status 2, the message)
  local name=$1 np=$2 pat=$3 cfg=${CFG:-gpt2.yaml}; shift 3
  refused 2 "$pat" "$name" mpirun -np "$np" --oversubscribe "$BIN" train --config "$cfg" --set output_dir="$name" "$@"
}
zrefused stage4 1 "zero_stage=4: expects 0" $(z 4)
zrefused stage0 1 "drop one of them" $(z 0) --set parallel.enable_parallel_optimizer=True
zrefused degree 4 "use 2" $DP4 $(z 3) --set parallel_config.hybrid_shard_degree=3
zrefused both 4 "set one" $DP4 $(z 3) $HYB --set parallel.parallel_optimizer_config.optimizer_weight_shard_size=4
CFG=moe.yaml zrefused moe_degree 4 "experts' data-parallel group" $DP4 --set parallel_config.expert_parallel=2 \
  $(z 3) --set parallel_config.hybrid_shard_degree=4
echo "PASS"
