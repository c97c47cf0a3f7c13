#!/usr/bin/env bash
# scripts/torchrun, torchrun's launcher line for Megatron jobs (`torchrun $DISTRIBUTED_ARGS pretrain_gpt.py ARGS`):
#  (a) one node, 2 ranks (--nproc_per_node 2 --nnodes 1 --node_rank 0 --master_addr localhost --master_port P): the
#      losses are `mpirun -np 2 gridformer pretrain_gpt`'s, bitwise; every rank's process had torchrun's environment
#      (a gridformer shim records it: RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR MASTER_PORT);
#  (b) two nodes of 2 ranks on this host (two launchers, node 1 first, torchrun's dashed spellings on node 1, 127.0.0.1):
#      one 4-rank job, ranks 0,1 node 0's and 2,3 node 1's, each with its torchrun environment, the losses of
#      `mpirun -np 4`, both launchers exit 0;
#  (c) the job's secret: while node 0 waits, this test's own client on loopback sends node 1's registration to the
#      letter without the secret, then with a wrong one: refused, logged by node 0 with 127.0.0.1, not counted; the
#      token (LOG_DIR/.job_secret, 0600) is printed nowhere; then the real node 1 joins and the job runs on nodes 0, 1.
#      A node with another GF_JOB_SECRET is refused (status 2); a node whose LOG_DIR holds no secret gives up after
#      the join timeout saying to set GF_JOB_SECRET (status 1);
#  (d) wrong flags: status 2, a message, nothing started; --help; GF_DRY_RUN=1 with torch.distributed.launch's and
#      --rdzv-endpoint's forms and each reference script with its launcher replaced (the launcher word): the three
#      pretrain scripts check out on their 8 ranks; the LAMBADA one (../../main.py) stops at its missing checkpoint.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_vocab
need_corpus
command -v mpirun > /dev/null || fail "mpirun missing (openmpi-bin)"
[ -x "$BUILD/bin/msrun_rendezvous" ] || fail "$BUILD/bin/msrun_rendezvous not built"
TR="$SRC/scripts/torchrun"
unset MPIRUN_ARGS GF_DRY_RUN GF_JOB_SECRET GF_JOB_SECRET_FILE GF_TORCHRUN_ENV RANK_TABLE_FILE MF_LOG_SUFFIX GF_PROBE
unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR MASTER_PORT
export GF_PROGRESS_INTERVAL=600 RANK_TABLE_BIN="$BUILD/bin/rank_table" MSRUN_RENDEZVOUS_BIN="$BUILD/bin/msrun_rendezvous"
# The ranks' gridformer: a shim that writes the torchrun variables it was started with to ./env/rank_N.env, then is
# gridformer.
mkdir -p shim
printf '#!/usr/bin/env bash\nif [ "${1:-}" = pretrain_gpt ]; then mkdir -p env; env | grep -E "^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT)=" | sort | paste -sd" " > "env/rank_$OMPI_COMM_WORLD_RANK.env"; fi\nexec %q "$@"\n' "$BIN" > shim/gridformer
chmod +x shim/gridformer
export GRIDFORMER_BIN="$WORK/shim/gridformer"
ARGS=(--num-layers 2 --hidden-size 64 --num-attention-heads 8 --seq-length 32 --max-position-embeddings 32
  --micro-batch-size 1 --global-batch-size 4 --train-iters 3 --lr 1e-4 --log-interval 1 --vocab-file "$VOCAB"
  --merge-file "$MERGES" --data-path "$CORPUS" --split 949,50,1)
# Processes of this test: their command lines name $WORK.
ours() { pgrep -af -- "$WORK/" | grep -v "^$$ " || true; }
nothing_left() { sleep 0.3; local left; left=$(ours); [ -z "$left" ] || fail "$1: processes left running:"$'\n'"$left"; }
wait_exit() { # wait_exit PID SECONDS: sets STATUS, or fails if PID runs longer
  local pid=$1 limit=$2 start=$SECONDS
  while kill -0 "$pid" 2> /dev/null; do
    ((SECONDS - start < limit)) || fail "a launcher did not exit within $limit s"
    sleep 0.1
  done
  set +e; wait "$pid"; STATUS=$?; set -e
}
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
env_is() { # env_is DIR RANK EXPECTED: the torchrun variables rank RANK's process had
  [ "$(cat "$1/env/rank_$2.env" 2> /dev/null)" = "$3" ] || fail "$1: rank $2's environment: '$(cat "$1/env/rank_$2.env" 2> /dev/null)', expected '$3'"
}
serving() { # serving FILE: node 0's rendezvous is up (within 30 s)
  for _ in $(seq 1 300); do grep -q "waiting up to .* for the other nodes" "$1" && return 0; sleep 0.1; done
  cat "$1"; fail "node 0 did not serve ($1)"
}
mkdir ref2 ref4 a b c
(cd ref2 && mpirun -np 2 --oversubscribe "$BIN" pretrain_gpt "${ARGS[@]}") > ref2.log 2>&1 || { tail ref2.log; fail "mpirun -np 2"; }
(cd ref4 && mpirun -np 4 --oversubscribe "$BIN" pretrain_gpt "${ARGS[@]}") > ref4.log 2>&1 || { tail ref4.log; fail "mpirun -np 4"; }

# ---- (a) one node ---------------------------------------------------------------------------------------------------
PORT=$(free_port)
(cd a && "$TR" --nproc_per_node 2 --nnodes 1 --node_rank 0 --master_addr localhost --master_port "$PORT" pretrain_gpt.py "${ARGS[@]}") > a.log 2>&1 \
  || { tail -30 a.log; fail "(a) status $?"; }
grep -q "run_distribute.sh: all 2 rank(s) finished" a.log || { tail a.log; fail "(a) no success line"; }
same_losses ref2/output a/output
for r in 0 1; do
  env_is a "$r" "GROUP_RANK=0 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=localhost MASTER_PORT=$PORT RANK=$r WORLD_SIZE=2"
  grep -q "^# torchrun's environment: RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 " "a/output/torchrun_log/worker_$r.log" || fail "(a) worker_$r.log"
done
grep -qF "megatron: no effect here: \`RANK=0\`: set for torch.distributed's launcher" a/output/torchrun_log/worker_0.log \
  || fail "(a) pretrain_gpt did not see RANK"
nothing_left "(a)"
ok "(a) one node, 2 ranks: mpirun -np 2's losses, each rank with torchrun's environment"

# ---- (b) two nodes of 2 ranks on this host --------------------------------------------------------------------------
PORT=$(free_port)
(cd b && "$TR" --nproc-per-node=2 --nnodes=2 --node-rank=1 --master-addr=127.0.0.1 --master-port="$PORT" ../../pretrain_gpt.py "${ARGS[@]}") > b1.log 2>&1 &
PID1=$!
sleep 1
(cd b && "$TR" --nproc_per_node 2 --nnodes 2 --node_rank 0 --master_addr 127.0.0.1 --master_port "$PORT" pretrain_gpt.py "${ARGS[@]}") > b0.log 2>&1 &
PID0=$!
wait_exit "$PID0" 120; s0=$STATUS
wait_exit "$PID1" 20; s1=$STATUS
((s0 == 0 && s1 == 0)) || { tail -20 b0.log b1.log; fail "(b) statuses $s0 (node 0) and $s1 (node 1)"; }
grep -q "node 1 (.*, 127.0.0.1) registered 2 worker(s): 4 of 4" b0.log || { cat b0.log; fail "(b) node 0 did not count node 1"; }
grep -q "4 rank(s) on 1 host(s): 127.0.0.1 (node 0,1: ranks 0..3)" b0.log || { cat b0.log; fail "(b) the placement"; }
grep -q "job .* started: ranks 2..3 run here" b1.log && grep -q "ended (node 0's report): finished (status 0)" b1.log \
  || { cat b1.log; fail "(b) node 1's report"; }
same_losses ref4/output b/output
for r in 0 1 2 3; do
  env_is b "$r" "GROUP_RANK=$((r / 2)) LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT RANK=$r WORLD_SIZE=4"
done
nothing_left "(b)"
ok "(b) two nodes x 2 ranks (node 1 first): one 4-rank job, ranks 0,1 node 0's and 2,3 node 1's, mpirun -np 4's losses"

# ---- (c) the job's secret -------------------------------------------------------------------------------------------
PORT=$(free_port)
node() { # node RANK [flags...]: node RANK's launcher in c/, two nodes of 2 ranks at 127.0.0.1:$PORT
  local r=$1; shift
  cd c && exec "$TR" --nproc_per_node 2 --nnodes 2 --node_rank "$r" --master_addr 127.0.0.1 --master_port "$PORT" "$@" pretrain_gpt.py "${ARGS[@]}"
}
(node 0 --rdzv_conf join_timeout=120) > c0.log 2>&1 &
PID0=$!
serving c0.log
# The stranger's registration is node 1's to the letter (its job line from what node 0 prints) but for the secret.
job="cwd=$WORK/c worker_num=4 log_dir=$WORK/c/output/torchrun_log command=$(sed -n 's/^msrun_launcher.sh: command: //p' c0.log) local_worker=2"
"$PY" "$SRC/tests/integration/rendezvous_stranger.py" "$PORT" "$job" c0.log > c_stranger.log 2>&1 || { cat c_stranger.log; fail "(c) a stranger was not refused, logged and left out"; }
[ "$(stat -c %a c/output/torchrun_log/.job_secret)" = 600 ] || fail "(c) .job_secret's mode"
# A node with another secret in GF_JOB_SECRET; a node whose LOG_DIR holds no secret (not shared): neither counted.
(export GF_JOB_SECRET=another-secret-of-another-job; node 1) > c_other.log 2>&1 &
PIDX=$!
wait_exit "$PIDX" 30
((STATUS == 2)) && grep -q "refused this node: a wrong job secret" c_other.log || { cat c_other.log; fail "(c) another GF_JOB_SECRET: status $STATUS"; }
(node 1 --log_dir "$WORK/c/unshared" --rdzv_conf join_timeout=3) > c_unshared.log 2>&1 &
PIDX=$!
wait_exit "$PIDX" 30
((STATUS == 1)) && grep -q "this node has had no job secret for 3 s .*set GF_JOB_SECRET to the same value" c_unshared.log \
  || { cat c_unshared.log; fail "(c) no secret file: status $STATUS"; }
! grep -q "registered 2 worker(s)" c0.log || { cat c0.log; fail "(c) a node without the secret was counted"; }
(node 1) > c1.log 2>&1 &
PID1=$!
wait_exit "$PID0" 120; s0=$STATUS
wait_exit "$PID1" 20; s1=$STATUS
((s0 == 0 && s1 == 0)) || { tail -20 c0.log c1.log; fail "(c) statuses $s0 and $s1 after the strangers"; }
[ "$(cut -d' ' -f1-3 c/output/torchrun_log/nodes | paste -sd' ')" = "0 127.0.0.1 2 1 127.0.0.1 2" ] || fail "(c) the nodes: $(cat c/output/torchrun_log/nodes)"
! grep -q stranger c/output/torchrun_log/nodes || fail "(c) the stranger is among the nodes"
grep -q "job .* started: ranks 2..3 run here" c1.log || { cat c1.log; fail "(c) node 1's ranks"; }
same_losses ref4/output c/output
token=$(cat c/output/torchrun_log/.job_secret)
[[ $token =~ ^[0-9a-f]{32}$ ]] || fail "(c) .job_secret does not hold 32 hex digits"
! grep -rqF --exclude=.job_secret -- "$token" c0.log c1.log c_stranger.log c_other.log c_unshared.log c/output || fail "(c) the token was printed"
nothing_left "(c)"
ok "(c) registrations without the secret, with a wrong one, with another GF_JOB_SECRET and without the file: refused, not counted; then node 1 joined and the job ran"

# ---- (d) wrong flags, --help, dry runs ------------------------------------------------------------------------------
mkdir d && cd d
bad() { # bad WANT ARGS...: status 2, WANT in the output, nothing started
  local want=$1 st=0
  shift
  timeout 60 "$TR" "$@" > bad.log 2>&1 || st=$?
  ((st == 2)) || { cat bad.log; fail "(d) $*: status $st, expected 2"; }
  grep -qF -- "$want" bad.log || { cat bad.log; fail "(d) $*: no '$want'"; }
  [ ! -e output ] || fail "(d) $*: something started (output/)"
}
bad "--nnodes 1:4: elastic ranges (MIN:MAX) are not supported" --nnodes 1:4 pretrain_gpt.py "${ARGS[@]}"
bad "--nproc_per_node 'gpu': give the number of ranks" --nproc_per_node gpu pretrain_gpt.py "${ARGS[@]}"
bad "--node_rank 2: with --nnodes 2 the node ranks are 0..1" --nnodes 2 --node_rank 2 pretrain_gpt.py "${ARGS[@]}"
bad "--master_port '80': expected a port from 1024 to 65535" --master_port 80 pretrain_gpt.py "${ARGS[@]}"
bad "-m: running a Python module is not supported" -m megatron.training pretrain_gpt.py
bad "unknown flag --nproc (torchrun's flags read here:" --nproc 2 pretrain_gpt.py "${ARGS[@]}"
bad "SCRIPT 'train.py': this torchrun runs Megatron's pretrain_gpt.py" train.py --lr 1
bad "--rdzv_backend 'etcd': only c10d and static" --rdzv_backend etcd pretrain_gpt.py "${ARGS[@]}"
bad "--max_restarts 3: restarts are not supported" --max_restarts 3 pretrain_gpt.py "${ARGS[@]}"
bad "--nproc_per_node is given twice" --nproc_per_node 2 --nproc-per-node 2 pretrain_gpt.py "${ARGS[@]}"
bad "no SCRIPT" --nproc_per_node 2
bad "--num-layer" --nproc_per_node 2 pretrain_gpt.py --num-layer 2
"$TR" --help > help.log 2>&1 || fail "(d) --help: status $?"
grep -q -- "--nproc_per_node N" help.log && grep -q "GF_JOB_SECRET" help.log || fail "(d) --help: $(cat help.log)"
rm -rf output
GF_DRY_RUN=1 "$TR" --nproc-per-node 2 --nnodes 2 --node-rank 1 --rdzv-endpoint 127.0.0.1:29411 --rdzv-backend c10d --rdzv-id 7 --use-env \
  ../../pretrain_gpt.py "${ARGS[@]}" > dry.log 2>&1 || { cat dry.log; fail "(d) dry run: status $?"; }
grep -qF "msrun_launcher.sh --worker_num 4 --local_worker_num 2 --master_addr 127.0.0.1 --master_port 29411 --node_rank 1" dry.log &&
  grep -qF "command: $GRIDFORMER_BIN pretrain_gpt --num-layers 2" dry.log && grep -q "GF_DRY_RUN=1: would register 2 worker(s) at 127.0.0.1:29411" dry.log \
  || { cat dry.log; fail "(d) the dry run"; }
# The reference scripts with the two-word edit (their data paths pointed here): each checks out on its 8 ranks.
touch env_npu.sh
for s in pretrain_gpt_distributed.sh pretrain_gpt_distributed_bf16.sh pretrain_gpt_megatron_moe_8k.sh; do
  sed -e "s|^torchrun |$TR |" -e "s|^python3 -m torch.distributed.launch |$TR |" \
    -e "s|^VOCAB_FILE=.*|VOCAB_FILE=$VOCAB|" -e "s|^MERGE_FILE=.*|MERGE_FILE=$MERGES|" -e "s|^DATA_PATH=.*|DATA_PATH=$CORPUS|" \
    -e "s|--vocab-file gpt2-vocab.json|--vocab-file $VOCAB|" -e "s|--merge-file gpt2-merges.txt|--merge-file $MERGES|" \
    "$SRC/tests/data/megatron/$s" > "$s"
  [ "$(diff "$SRC/tests/data/megatron/$s" "$s" | grep -c '^>.*scripts/torchrun')" = 1 ] || fail "(d) $s: the launcher line was not edited"
  script_args=()
  [ "$s" = pretrain_gpt_distributed_bf16.sh ] && script_args=(--pre=8 --next=0 --shape_order=SBH)
  st=0
  GF_DRY_RUN=1 bash "$s" "${script_args[@]}" > "$s.log" 2>&1 || st=$?
  ((st == 0)) || { tail -20 "$s.log"; fail "(d) $s with scripts/torchrun: status $st"; }
  grep -q "torchrun: one node: 8 rank(s)" "$s.log" && grep -q "GF_DRY_RUN=1: nothing started" "$s.log" || { tail "$s.log"; fail "(d) $s"; }
done
# Ascend's LAMBADA script (../../main.py) reaches pretrain_gpt's translation: its --load checkpoint is not here.
sed -e "s|^python3 -m torch.distributed.launch |$TR |" -e "s|^VOCAB_FILE=.*|VOCAB_FILE=$VOCAB|" -e "s|^MERGE_FILE=.*|MERGE_FILE=$MERGES|" \
  -e "s|^VALID_DATA=.*|VALID_DATA=$SRC/tests/data/lambada_tiny.jsonl|" "$SRC/tests/data/megatron/test_gpt_distributed.sh" > lambada.sh
st=0
GF_DRY_RUN=1 bash lambada.sh > lambada.log 2>&1 || st=$?
((st == 2)) && grep -qF "command: $GRIDFORMER_BIN pretrain_gpt --task LAMBADA" lambada.log && grep -qF "\`load_checkpoint: ./checkpoint_dist\`: no such file or directory" lambada.log \
  || { tail lambada.log; fail "(d) test_gpt_distributed.sh (main.py): status $st"; }
cd "$WORK"
nothing_left "(d)"
ok "(d) 12 wrong invocations refused with status 2, nothing started; --help; dry runs (dashed and rdzv spellings, the 4 reference scripts edited)"
echo "torchrun_launch: all checks passed"
