#!/usr/bin/env bash
# Pipeline schedules from a file (parallel.pipeline_config.pipeline_schedule_file, torch.distributed.pipelining's
# CSV form; docs/distributed.md, "Schedules from a file").
#
# (a) 1F1B at pp2 with 4 micro-batches written out as a file, in torch's compute_only form (Schedule1F1B's order
#     with its idle steps as empty cells; the messages derived) and in its compute_comms form (every send and
#     receive listed, each receive right before its compute): 8 steps of a Llama (dropout off) bitwise equal to the
#     built-in 1f1b's, losses and gathered weights.
# (b) An order no built-in schedule has (stage 0 runs three forwards before its first backward): over the default
#     bound on live micro-batches (1F1B's min(pp, m) = 2), so refused; with pipeline_schedule_max_live: 3 it runs,
#     bitwise the built-in 1f1b's again (the same backward order, so the same gradient sums).
# (c) Three bad files, each refused with status 2 by `gridformer config`, `gridformer plan` and `train` on 2
#     ranks before any rank trains a step, the message naming the stage, the action and the file's cell: a
#     deadlock, an unmatched send, a peak over the bound.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
random_llama llama.yaml layers=4 steps=8
PP2=(--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=4 --set runner_config.batch_size=2)
file() { echo "--set parallel.pipeline_config.pipeline_schedule_file=$WORK/$1"; }

cat > 1f1b.csv <<'EOF'
0F0,0F1,,0B0,0F2,0B1,0F3,0B2,,0B3
,1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3
EOF
cat > 1f1b_comms.csv <<'EOF'
0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0F2,0SEND_F2,0RECV_B1,0B1,0F3,0SEND_F3,0RECV_B2,0B2,0RECV_B3,0B3
1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1RECV_F2,1F2,1B2,1SEND_B2,1RECV_F3,1F3,1B3,1SEND_B3
EOF
cat > three_ahead.csv <<'EOF'
# stage 0: three forwards in flight before the first backward
0F0,0F1,0F2,0B0,0F3,0B1,0B2,0B3
1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3
EOF
# Stage 1 runs micro-batch 1 first; stage 0 sends it only after micro-batch 0's backward, which waits on stage 1.
cat > deadlock.csv <<'EOF'
0F0,0B0,0F1,0B1,0F2,0B2,0F3,0B3
1F1,1B1,1F0,1B0,1F2,1B2,1F3,1B3
EOF
# 1f1b_comms.csv with stage 1's receive of micro-batch 2's activation left out.
sed '2s/1RECV_F2,//' 1f1b_comms.csv > unmatched.csv
cp three_ahead.csv peak.csv

layout_train 2 builtin llama.yaml "${PP2[@]}"
layout_train 2 from_file llama.yaml "${PP2[@]}" $(file 1f1b.csv)
layout_train 2 from_file_comms llama.yaml "${PP2[@]}" $(file 1f1b_comms.csv)
layout_train 2 three_ahead llama.yaml "${PP2[@]}" $(file three_ahead.csv) \
  --set parallel.pipeline_config.pipeline_schedule_max_live=3
logged builtin 8
same_bits builtin from_file from_file_comms three_ahead
grep -q "pipeline: file over 2 stages, 4 micro-batches: bubble" from_file.log || fail "no pipeline line for the file's schedule"
grep -q "schedule file $WORK/1f1b.csv, 4 micro-batches .*; simulated bubble 20.0%" from_file.log \
  || fail "the file's simulated bubble is not 1F1B's analytic (pp - 1) / (m + pp - 1) = 20%"
ok "1F1B from a file (derived and explicit messages) and a three-ahead order trained bitwise the built-in 1f1b"

# refuse NAME PATTERN CSV [--set ...]: config, plan and train on 2 ranks refuse it with status 2 and PATTERN.
refuse() {
  local name=$1 pattern=$2 csv=$3; shift 3
  refused 2 "$pattern" "${name}_config" "$BIN" config --config llama.yaml "${PP2[@]}" $(file "$csv") "$@"
  refused 2 "$pattern" "${name}_plan" "$BIN" plan --config llama.yaml "${PP2[@]}" $(file "$csv") "$@"
  mpi_refused 2 "${name}_train" "$pattern" llama.yaml "${PP2[@]}" $(file "$csv") "$@"
}
refuse deadlock "deadlock: stage 0, action #3 Backward(micro 0, chunk 0) [$WORK/deadlock.csv:1:2 '0B0'] waits for the gradient from stage 1" deadlock.csv
grep -qF "stage 1, action #1 Forward(micro 1, chunk 0) [$WORK/deadlock.csv:2:1 '1F1'] waits for the activation from stage 0" \
  deadlock_config.log || fail "the deadlock's other stage is not named"
refuse unmatched "unmatched send: stage 0, action #7 SendForward(micro 2, chunk 0) [$WORK/unmatched.csv:1:8 '0SEND_F2'] is received by no RecvForward(micro 2, chunk 0) on stage 1" unmatched.csv
refuse peak "stage 0, action #5 Forward(micro 2, chunk 0) [$WORK/peak.csv:2:3 '0F2']: holds 3 micro-batch activations at once (peak 3), over the bound 2" peak.csv
refuse peak_given "holds 3 micro-batch activations at once (peak 3), over the bound 2 (parallel.pipeline_config.pipeline_schedule_max_live)" \
  peak.csv --set parallel.pipeline_config.pipeline_schedule_max_live=2
refused 2 "pipeline_schedule_file=$WORK/missing.csv: $WORK/missing.csv: no such schedule file" missing \
  "$BIN" config --config llama.yaml "${PP2[@]}" $(file missing.csv)
echo "PASS"
