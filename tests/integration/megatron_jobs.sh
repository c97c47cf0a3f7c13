#!/usr/bin/env bash
# Megatron-LM and MindSpeed job scripts as users have them (tests/data/megatron/, unmodified copies), run with only
# the launcher line, the paths and the sizes changed: `torchrun $DISTRIBUTED_ARGS pretrain_gpt.py` (or
# `python3 -m torch.distributed.launch $DISTRIBUTED_ARGS ../../pretrain_gpt.py`) becomes `mpirun -np N gridformer
# pretrain_gpt`, the widths and lengths shrink to seconds on 2 cores. For each script:
#   - the job trains and logs Megatron's line (` iteration N/M | consumed samples: ... | lm loss: ... |`);
#   - `gridformer config --from-megatron` with the same arguments gives YAML whose `train` has bitwise the same losses;
#   - the Ascend GPT scripts (fp16: TP8, its PP8 lowered to the 8 ranks' PP1 as Megatron does; bf16) save, and run
#     again with more iterations resume from their checkpoint on the same schedule;
#   - the MindSpeed MoE script runs at TP2 x EP2 with its MoE arguments;
# and a weighted --data-path (0.3 a 0.7 b) trains; an argument Megatron does not have is refused naming the nearest.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_vocab
need_corpus
command -v mpirun > /dev/null || fail "mpirun missing (openmpi-bin)"
REF="$SRC/tests/data/megatron"
LAMBADA="$SRC/tests/data/lambada_tiny.jsonl"

# shrink SCRIPT OUT: the launcher line, the paths and the sizes; nothing else of the script changes.
shrink() {
  sed -e 's|^torchrun $DISTRIBUTED_ARGS pretrain_gpt.py|$LAUNCH -np $NPUS_PER_NODE|' \
      -e 's|^python3 -m torch.distributed.launch $DISTRIBUTED_ARGS \\|$LAUNCH -np $GPUS_PER_NODE \\|' \
      -e '/^       \.\.\/\.\.\/pretrain_gpt.py \\$/d' -e '/^       \.\.\/\.\.\/main.py \\$/d' \
      -e 's|^NPUS_PER_NODE=8|NPUS_PER_NODE=4|' \
      -e "s|^VOCAB_FILE=.*|VOCAB_FILE=$VOCAB|" -e "s|^MERGE_FILE=.*|MERGE_FILE=$MERGES|" \
      -e "s|--vocab-file gpt2-vocab.json|--vocab-file $VOCAB|" -e "s|--merge-file gpt2-merges.txt|--merge-file $MERGES|" \
      -e "s|^DATA_PATH=.*|DATA_PATH=$CORPUS|" -e "s|^VALID_DATA=.*|VALID_DATA=$LAMBADA|" \
      -e 's|--hidden-size [0-9]*|--hidden-size 64|' -e 's|--num-attention-heads [0-9]*|--num-attention-heads 8|' \
      -e 's|--seq-length [0-9]*|--seq-length 32|' -e 's|--max-position-embeddings [0-9]*|--max-position-embeddings 32|' \
      -e 's|--micro-batch-size 4|--micro-batch-size 2|' -e 's|--global-batch-size 96|--global-batch-size 8|' \
      -e 's|--train-iters [0-9]*|--train-iters $ITERS|' -e 's|--save-interval 10000|--save-interval 2|' \
      "$1" > "$2"
}
# LAUNCH: gridformer pretrain_gpt under mpirun (RUN), or a shim that writes the arguments it is given (ARGS).
printf '#!/usr/bin/env bash\nexec mpirun "$1" "$2" --oversubscribe %q pretrain_gpt "${@:3}"\n' "$BIN" > run_job
printf '#!/usr/bin/env bash\nprintf "%%s\\n" "$2" > np.txt; printf "%%s\\n" "${@:3}" > args.txt\n' > capture_args
chmod +x run_job capture_args
touch env_npu.sh  # the Ascend scripts source their NPU environment; on a CPU there is none to set

# job NAME SCRIPT ITERS [script args]: runs the shrunk script in NAME/ (its own ./output, ./checkpoint_dist).
job() {
  local name=$1 script=$2 iters=$3; shift 3
  mkdir -p "$name"; cp env_npu.sh "$name/"
  shrink "$REF/$script" "$name/job.sh"
  (cd "$name" && LAUNCH="$WORK/run_job" ITERS=$iters bash job.sh "$@") > "$name.log" 2>&1 ||
    { tail -30 "$name.log"; fail "$name: $script exited with status $?"; }
  grep -qE "^\[.*\] iteration +$iters/ +$iters \| consumed samples: +[0-9]+ \| elapsed time per iteration \(ms\): [0-9.]+ \| learning rate: [0-9.]+E[-+][0-9]+ \| global batch size: +[0-9]+ \|( lm loss: [0-9.]+E[-+][0-9]+ \|)? loss scale: [0-9.]+ \|( grad norm: [0-9.]+ \|)? number of skipped iterations: +[0-9]+ \| number of nan iterations: +0 \|$" \
    <(sed 's/\] \[info\]  iteration/] iteration/' "$name.log") || { grep iteration "$name.log" | tail -3; fail "$name: no Megatron log line for iteration $iters"; }
  # Megatron prints no lm loss for an interval whose iterations were all skipped (fp16 overflow): the last one has it.
  grep -qE "iteration +$iters/ +$iters .*\| lm loss: " "$name.log" || fail "$name: iteration $iters trained nothing"
  ok "$name: $(grep -o 'iteration  *'"$iters"'/.*lm loss: [^|]*' "$name.log" | tail -1)"
}
# same_as_yaml NAME SCRIPT ITERS [script args]: config --from-megatron of the same arguments, trained by `train`,
# gives NAME's losses bit for bit.
same_as_yaml() {
  local name=$1 script=$2 iters=$3; shift 3
  mkdir -p "$name.args"; cp env_npu.sh "$name.args/"
  shrink "$REF/$script" "$name.args/job.sh"
  (cd "$name.args" && LAUNCH="$WORK/capture_args" ITERS=$iters bash job.sh "$@") || fail "$name: capturing its arguments"
  local np
  np=$(cat "$name.args/np.txt")
  mapfile -t args < "$name.args/args.txt"
  # In a directory of its own: the script's relative --save/--load must not see the job's checkpoints.
  mkdir -p "$name.y"
  (cd "$name.y" && "$BIN" config --ranks "$np" --from-megatron "${args[@]}") > "$name.yaml" 2> "$name.yaml.err" ||
    { cat "$name.yaml.err"; fail "$name: config --from-megatron"; }
  grep -q "^log_format: megatron" "$name.yaml" || fail "$name: the YAML does not keep Megatron's log lines"
  run "$name.yaml_run" bash -c "cd $name.y && mpirun -np $np --oversubscribe $BIN train --config ../$name.yaml"
  ((STATUS == 0)) || { tail -20 "$name.yaml_run.log"; fail "$name: train on the translated YAML"; }
  same_losses "$name/output" "$name.y/output"
  ok "$name: config --from-megatron's YAML trains to the same losses"
}

# 1. Ascend's Megatron-LM GPT script (fp16, TP8 PP8 -> PP1 on 8 ranks, distributed optimizer, full recompute). Its
# fp16 loss scale starts at Megatron's 2^32 and halves at each overflow: the first ~16 iterations are skipped.
job gpt pretrain_gpt_distributed.sh 20
grep -qF "megatron: no effect here: \`--distributed-backend\`: ranks talk over MPI here" gpt.log || fail "gpt: --distributed-backend not noted"
[ -d gpt/checkpoint_dist ] || fail "gpt: nothing saved under --save ./checkpoint_dist"
same_as_yaml gpt pretrain_gpt_distributed.sh 20
# Run again with more iterations: --load (= --save) resumes where it stopped, on the same schedule.
mv gpt/output gpt/output_first
job gpt pretrain_gpt_distributed.sh 22
grep -qE "resumed from .*checkpoint_dist.*step 20" gpt.log || fail "gpt: the second run did not resume from step 20"
grep -qE "iteration +21/ +22" gpt.log && ! grep -qE "iteration +1/ +22" gpt.log || fail "gpt: the resumed run's iterations"

# 2. Its bf16 form with Ascend's banded attention (--pre-tockens/--next-tockens/--shape-order as the script takes them).
job gpt_bf16 pretrain_gpt_distributed_bf16.sh 2 --pre=8 --next=0 --shape_order=SBH
same_as_yaml gpt_bf16 pretrain_gpt_distributed_bf16.sh 2 --pre=8 --next=0 --shape_order=SBH
grep -q "pre_tokens: 8" gpt_bf16.yaml || fail "gpt_bf16: --pre-tockens 8 is not the YAML's pre_tokens"
# Run again with more iterations: its --load (= --save ./checkpoint_dist) resumes where it stopped, on the same schedule
# (--lr-decay-iters and the warm-up fraction of it fixed by the script).
mv gpt_bf16/output gpt_bf16/output_first
job gpt_bf16 pretrain_gpt_distributed_bf16.sh 4 --pre=8 --next=0 --shape_order=SBH
grep -qE "resumed from .*checkpoint_dist.*step 2" gpt_bf16.log || fail "gpt_bf16: the second run did not resume from step 2"
grep -qE "iteration +3/ +4" gpt_bf16.log && ! grep -qE "iteration +1/ +4" gpt_bf16.log || fail "gpt_bf16: the resumed run's iterations"

# 3. MindSpeed's MoE script: TP2 x EP2 on 4 ranks, 4 experts top-2, alltoall, grouped GEMM, RoPE, bf16.
job moe pretrain_gpt_megatron_moe_8k.sh 4
grep -qF "expert_parallel=2" moe.log || fail "moe: not laid out with expert_parallel 2"
same_as_yaml moe pretrain_gpt_megatron_moe_8k.sh 4

# 4. A weighted --data-path, and an argument Megatron does not have.
run blend "$BIN" config --ranks 1 --from-megatron --num-layers 2 --hidden-size 64 --num-attention-heads 8 --seq-length 32 \
  --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 2 --train-iters 2 --lr 1e-4 \
  --vocab-file "$VOCAB" --merge-file "$MERGES" --data-path 0.3 "$CORPUS" 0.7 "$CORPUS"
((STATUS == 0)) || { cat blend.log; fail "config --from-megatron with a weighted --data-path"; }
grep -v '^note: \|^differs from' blend.log > blend.yaml
train blend_run blend.yaml
grep -qF "blended by weight" blend_run.log || fail "the weighted data path was not blended"
refused 2 "--num-layer" unknown_arg "$BIN" config --from-megatron --num-layer 2
grep -qF "num-layers" unknown_arg.log || fail "an unknown argument without the nearest real one: $(cat unknown_arg.log)"

# 5. Ascend's LAMBADA script (tasks/main.py --task LAMBADA --strict-lambada off, --load a Megatron checkpoint,
# --no-load-optim --no-load-rng) on a Megatron checkpoint converted from our tiny GPT-2: a model of the shrunk
# scripts' shape (64 wide, 8 heads, 32 positions) trained on the LAMBADA passages themselves so that it gets some
# right, written by `convert --format megatron` at the script's TP8 (its PP8 lowered to PP1 on 8 ranks) as
# ./checkpoint_dist. The script, run with its launcher line changed, prints Megatron's result box; its count is
# the one `train --lambada_data` gives on our own checkpoint and the one config --from-megatron's YAML gives.
"$PRE" --input "$LAMBADA" --output-prefix lambada --vocab-file "$VOCAB" --merge-file "$MERGES" --append-eod > prep.log 2>&1 ||
  { cat prep.log; fail "preprocess the LAMBADA passages"; }
lambada_gpt2 lam.yaml 500 0.0025 64 8 8 32 "{type: CheckpointMonitor, save_checkpoint_steps: 500}"
train lam lam.yaml --lambada_data "$LAMBADA"
OURS=$(lambada_count lam/metrics.jsonl)
[ "$OURS" != "0/11" ] && [ "$OURS" != "11/11" ] || echo "note: the model counts $OURS (a weaker check than a count between)"
mkdir -p lambada_job
run lam_convert "$BIN" convert --from lam --to lambada_job/checkpoint_dist --format megatron --tensor-model-parallel-size 8
((STATUS == 0)) || { cat lam_convert.log; fail "convert --format megatron at TP8"; }
cp env_npu.sh lambada_job/
shrink "$REF/test_gpt_distributed.sh" lambada_job/job.sh
# Its standard output apart from the log (standard error): Megatron's print_rank_0 prints the box to stdout, where log
# parsers read it; merged by mpirun with another pipe, their lines' order in one file is not the ranks' to keep.
(cd lambada_job && LAUNCH="$WORK/run_job" bash job.sh) > lambada_job.out 2> lambada_job.log ||
  { tail -30 lambada_job.log lambada_job.out; fail "test_gpt_distributed.sh"; }
grep -q "loaded weights from ./checkpoint_dist (Megatron-LM checkpoint, iteration release" lambada_job.log ||
  { grep -i "load" lambada_job.log | head; fail "the LAMBADA job did not load the Megatron checkpoint"; }
# The box, as Megatron's evaluate_and_print_results prints it: a rule one longer than the line, the line, the rule.
"$PY" - lambada_job.out "$OURS" <<'EOF2' || fail "the LAMBADA job's result box (its stdout: $(head -c 2000 lambada_job.out))"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
at = [i for i, l in enumerate(lines) if l.startswith(" validation results on LAMBADA | ")]
assert len(at) == 1, f"{len(at)} result lines"
i = at[0]
box = lines[i]
assert lines[i - 1] == lines[i + 1] == "-" * (len(box) + 1), "the rules around the result line"
m = re.fullmatch(r" validation results on LAMBADA \| number correct: (\S+) \| total examples: (\S+) \| avg accuracy: (\S+)", box)
assert m, box
correct, total = (int(x) for x in sys.argv[2].split("/"))
want = (f"{float(correct):.4E}", f"{float(total):.4E}", f"{correct / total:.4E}")  # Python's own '{:.4E}'
assert m.groups() == want, f"{m.groups()}, expected {want} ({sys.argv[2]} from train --lambada_data)"
print(f"ok: {box.strip()}")
EOF2
ok "test_gpt_distributed.sh on 8 ranks: $OURS correct, as train --lambada_data counts on our checkpoint"
same_as_yaml_args() {  # the job's arguments as config --from-megatron YAML (the shrunk script, its launcher captured)
  mkdir -p lambada_args/y; cp env_npu.sh lambada_args/
  shrink "$REF/test_gpt_distributed.sh" lambada_args/job.sh
  (cd lambada_args && LAUNCH="$WORK/capture_args" bash job.sh) || fail "capturing the LAMBADA job's arguments"
  mapfile -t args < lambada_args/args.txt
  cp -r lambada_job/checkpoint_dist lambada_args/y/
  local np
  np=$(cat lambada_args/np.txt)
  (cd lambada_args/y && "$BIN" config --ranks "$np" --from-megatron "${args[@]}") > lambada.yaml 2> lambada.yaml.err ||
    { cat lambada.yaml.err; fail "config --from-megatron of the LAMBADA job"; }
}
same_as_yaml_args
run lam_yaml bash -c "cd lambada_args/y && mpirun -np 8 --oversubscribe $BIN train --config ../../lambada.yaml --lambada_data $LAMBADA"
((STATUS == 0)) || { tail -20 lam_yaml.log; fail "the LAMBADA job's YAML"; }
[ "$(lambada_count lambada_args/y/output/metrics.jsonl)" = "$OURS" ] || fail "the LAMBADA job's YAML counts $(lambada_count lambada_args/y/output/metrics.jsonl), ours $OURS"
ok "config --from-megatron's YAML of the LAMBADA job counts the same: $OURS"
echo PASS
