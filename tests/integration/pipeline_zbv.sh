#!/usr/bin/env bash
# ZB-V (parallel.pipeline_config.pipeline_scheduler: zero_bubble_v, MindSpore's name, with pipeline_interleave and
# pp_interleave_num 2 as MindFormers sets them): two model chunks per stage in a V, stage s running virtual stages s
# and 2p - 1 - s, so the head and the loss are on stage 0 and stage p - 1 turns the V in memory. It trains the same
# 20 steps as one rank accumulating the same micro-batches (gradient_accumulation_steps 4 of batch 2, global batch 8):
#   - bitwise where the order allows: every weight gradient is summed over the micro-batches in their order (the
#     weight passes of a chunk run in micro-batch order), and so is the loss: Llama (untied head) at pp2 and pp4, fp32
#     and bf16, and Mixtral (top-2 of 4 experts, its router losses through the objective) at pp2 and pp4, and at pp4
#     in bf16;
#   - GPT-2's tied embedding is one tensor on stage 0 under the V, and its lookup's and head's gradients add up in the
#     schedule's order rather than micro-batch by micro-batch: compare_runs.py's criteria (1e-5) against the same
#     one rank, and its pipelined twin under 1F1B (the copies summed across stages) held to them too;
#   - with data and tensor parallelism and ZeRO around it (pp2 x dp2 x mp2 + SP + ZeRO on 8 ranks): compare_runs.py.
# DualPipe-V's order (docs/schedules, from tools/dualpipev_schedule.py) runs from a file in the same V, bitwise too.
# The run's plan is held to account: the bytes the pipeline group sent (stage p - 1's turn of the V sends nothing)
# equal what `plan` counts, which the end-of-run line prints beside them. And what cannot run is refused before any
# work: one chunk per stage, three, and recompute (the deferred weight pass reads the activations it overwrites).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
GLOBAL_BATCH=8
ZBV="--set parallel.pipeline_config.pipeline_scheduler=zero_bubble_v --set parallel.pipeline_config.pipeline_interleave=True --set model.model_config.pp_interleave_num=2"

GAS4="--set runner_config.gradient_accumulation_steps=4"
BF16="--set model.model_config.compute_dtype=bfloat16"

# pp4 x 2 chunks is 8 virtual stages: 8 layers, one a virtual stage.
random_llama llama.yaml layers=8 hidden=32 ffn=32
ptrain llama gas4 1 1 1 4 $GAS4
ptrain llama pp2_zbv 1 1 2 4 $ZBV
ptrain llama pp4_zbv 1 1 4 4 $ZBV
ptrain llama gas4_bf16 1 1 1 4 $GAS4 $BF16
ptrain llama pp2_zbv_bf16 1 1 2 4 $ZBV $BF16
ptrain llama pp4_zbv_bf16 1 1 4 4 $ZBV $BF16
logged llama/pp4_zbv 20
(cd llama && same_bits gas4 pp2_zbv pp4_zbv && same_bits gas4_bf16 pp2_zbv_bf16 pp4_zbv_bf16) || fail "llama under ZB-V"
grep -q "schedule zero_bubble_v" llama/pp4_zbv.log || fail "the log does not name the schedule"
grep -qE "pipeline stage 0 .*the embedding, the final norm, head and loss" llama/pp4_zbv.log \
  || { grep "pipeline stage" llama/pp4_zbv.log; fail "stage 0 is not said to hold the embedding and the head"; }

random_llama mixtral.yaml arch=MixtralForCausalLM hidden=32 layers=8 \
  top="moe_config: {expert_num: 4, num_experts_chosen: 2, capacity_factor: 1.0, aux_loss_factor: 0.02, z_loss_factor: 0.001}"
ptrain mixtral gas4 1 1 1 4 $GAS4
ptrain mixtral pp2_zbv 1 1 2 4 $ZBV
ptrain mixtral pp4_zbv 1 1 4 4 $ZBV
ptrain mixtral gas4_bf16 1 1 1 4 $GAS4 $BF16
ptrain mixtral pp4_zbv_bf16 1 1 4 4 $ZBV $BF16
(cd mixtral && same_bits gas4 pp2_zbv pp4_zbv && same_bits gas4_bf16 pp4_zbv_bf16) || fail "mixtral under ZB-V"
cmp <(grep -o '"aux_loss":[^,]*' mixtral/gas4/metrics.jsonl) <(grep -o '"aux_loss":[^,]*' mixtral/pp4_zbv/metrics.jsonl) \
  || fail "ZB-V's router figures differ from one rank's"

# DualPipe-V (DeepSeek's order in its V form) as the schedule file docs/schedules ships, written by
# tools/dualpipev_schedule.py from PyTorch's ScheduleDualPipeV: the file reader places torch's "v"-style stages in the
# V, and the run is bitwise one rank's at pp2 (4 micro-batches) and pp4 (8 of batch 1). It holds one more chunk
# activation on stage 0 than ZB-V (2P + 1), so without pipeline_schedule_max_live it is refused naming that figure.
for pm in 2:4 4:8; do
  cmp <("$PY" "$SRC/tools/dualpipev_schedule.py" --stages "${pm%%:*}" --micro-batches "${pm##*:}") \
    "$SRC/docs/schedules/dualpipev_pp${pm%%:*}_m${pm##*:}.csv" || fail "docs/schedules/dualpipev_pp${pm%%:*}_m${pm##*:}.csv is not the tool's"
done
DPV="--set parallel.pipeline_config.pipeline_interleave=True --set model.model_config.pp_interleave_num=2"
ptrain llama gas8 1 1 1 8 --set runner_config.gradient_accumulation_steps=8
ptrain llama pp2_dualpipev 1 1 2 4 $DPV --set parallel.pipeline_config.pipeline_schedule_file="$SRC/docs/schedules/dualpipev_pp2_m4.csv" \
  --set parallel.pipeline_config.pipeline_schedule_max_live=5
ptrain llama pp4_dualpipev 1 1 4 8 $DPV --set parallel.pipeline_config.pipeline_schedule_file="$SRC/docs/schedules/dualpipev_pp4_m8.csv" \
  --set parallel.pipeline_config.pipeline_schedule_max_live=9
(cd llama && same_bits gas4 pp2_dualpipev && same_bits gas8 pp4_dualpipev) || fail "DualPipe-V's file"
mkdir -p llama/bad
mpi_refused 4 llama/bad/dualpipev_live "holds 9 micro-batch activations at once (peak 9), over the bound 8" llama.yaml \
  --set parallel_config.pipeline_stage=4 --set parallel_config.micro_batch_num=8 --set runner_config.batch_size=1 $DPV \
  --set parallel.pipeline_config.pipeline_schedule_file="$SRC/docs/schedules/dualpipev_pp4_m8.csv"

random_gpt2 gpt2.yaml layers=4
ptrain gpt2 gas4 1 1 1 4 $GAS4
ptrain gpt2 pp2_1f1b 1 1 2 4
ptrain gpt2 pp2_zbv 1 1 2 4 $ZBV
ptrain gpt2 pp2_dp2_mp2_sp_zero_zbv 2 2 2 2 $ZBV --set parallel_config.use_seq_parallel=True --set parallel.enable_parallel_optimizer=True
(cd gpt2 && "$PY" "$SRC/tests/integration/compare_runs.py" gas4 pp2_1f1b pp2_zbv pp2_dp2_mp2_sp_zero_zbv) \
  || fail "gpt2 (tied embedding) under ZB-V"

# The bytes sent in the pipeline group: measured by the run, counted by plan (the run's own end-of-run lines, one a
# rank, say "they differ" when they do).
for r in llama/pp4_zbv:4 gpt2/pp2_zbv:2 gpt2/pp2_dp2_mp2_sp_zero_zbv:8; do
  n=$(grep -c "a training step sent .* in the pipeline group .*; plan counted" "${r%%:*}.log" || true)
  ((n == ${r##*:})) || { grep "a training step sent" "${r%%:*}.log"; fail "${r%%:*}: $n ranks' bytes beside the plan's, ${r##*:} expected"; }
  ! grep -q "they differ" "${r%%:*}.log" || { grep "they differ" "${r%%:*}.log"; fail "${r%%:*}: bytes differ from the plan's"; }
  grep -m1 "rank 0: a training step sent" "${r%%:*}.log" | sed 's/.*\] //'
done

random_llama bad.yaml layers=4
mkdir -p bad
PP2="--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=4"
mpi_refused 2 bad/one_chunk "set \`parallel.pipeline_config.pipeline_interleave: True\` and \`model.model_config.pp_interleave_num: 2\`" bad.yaml \
  $PP2 --set parallel.pipeline_config.pipeline_scheduler=zero_bubble_v
mpi_refused 2 bad/three_chunks "runs two model chunks per stage, in a V" bad.yaml $PP2 $ZBV --set model.model_config.pp_interleave_num=3
mpi_refused 2 bad/recompute "zero_bubble_v\` with \`recompute_config.recompute: True\`" bad.yaml $PP2 $ZBV --set recompute_config.recompute=True
ok "ZB-V"
