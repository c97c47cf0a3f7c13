#!/usr/bin/env bash
# scripts/msrun_launcher.sh, MindFormers' msrun-style launch without a rank table:
#  (a) one node, 4 workers, MindFormers' two-argument form ("COMMAND" 4: JOIN False by default): the launcher
#      returns at once, the job goes on in the background (LOG_DIR/scheduler.log), each rank's output is in
#      output/msrun_log/worker_<rank>.log, and the losses are `mpirun -np 4`'s of the same config, bitwise;
#  (b) two nodes of 2 workers on this host (node 1's launcher first, msrun's flags and an unquoted command; node 0's
#      MindFormers' nine-argument form, JOIN True; master 127.0.0.1): one 4-rank job with those losses, both launchers
#      exit 0, node 1's after the job's end, which node 0 reports to it;
#  (c) two nodes in two network namespaces, each with its own address and sshd (as tests/integration/two_servers.sh):
#      node 0's mpirun starts node 1's ranks over ssh, the same losses, node 1's worker logs written there
#      (skipped, with the reason, where namespaces or sshd cannot be made);
#  (d) a node alone: node 0 and another node each give up after CLUSTER_TIME_OUT with what to do, status 1;
#  (f) SIGINT to node 0's launcher (Ctrl-C) mid-run: run_distribute.sh stops the ranks between steps, both
#      launchers exit 130;
#  (e) wrong arguments, a layout that does not fit, a MASTER_ADDR that is not this host's: status 2, a clear
#      message, nothing started; --help; run_mindformer.py's arguments mapped to --set (GF_DRY_RUN=1);
#  (g) the job's secret: while node 0 waits for node 1, this test's own client on loopback registers without the
#      secret and with a wrong one: both refused, logged by node 0 with the peer's address, not counted; the token
#      (LOG_DIR/.job_secret, mode 0600) is in no output; then node 1 joins and the job runs on nodes 0 and 1.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
LAUNCH="$SRC/scripts/msrun_launcher.sh"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
[ -x "$BUILD/bin/msrun_rendezvous" ] || fail "$BUILD/bin/msrun_rendezvous not built"
# Not lib's root permission for Open MPI: the launcher's mpirun must allow root itself.
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM RANK_TABLE_FILE MPIRUN_ARGS GF_PROBE GF_DRY_RUN MF_LOG_SUFFIX
unset OMPI_MCA_plm_rsh_agent OMPI_MCA_btl OMPI_MCA_btl_tcp_if_include OMPI_MCA_oob_tcp_if_include
export GRIDFORMER_BIN="$BIN" GF_PROGRESS_INTERVAL=600
# Every process this test starts has $WORK or one of the namespaces' addresses on its command line (the ranks: the
# config; the launchers and the rendezvous: the log directory or the master's address): lib's ours, but for (c)'s
# sshds; at exit all killed and the namespaces deleted.
test_net msrun ms
AT_EXIT=drop_namespaces
random_gpt2 job.yaml out=./out batch=1 steps=6 samples=32 top="parallel_config: {data_parallel: 4}"
losses_match() { # losses_match NAME DIR: DIR/metrics.jsonl's losses are the mpirun reference's, bitwise
  "$PY" - "$1" "$2" <<'PY'
import json, sys
name, d = sys.argv[1], sys.argv[2]
ref = [json.loads(l)["loss"] for l in open("ref/metrics.jsonl") if '"loss"' in l]
got = [json.loads(l)["loss"] for l in open(d + "/metrics.jsonl") if '"loss"' in l]
assert len(ref) == len(got) == 6, (name, len(ref), len(got))
assert got == ref, f"{name}: losses {got} differ from mpirun -np 4's {ref}"
print(f"{name}: 6 losses = mpirun -np 4's, bitwise ({ref[0]:.6f} -> {ref[-1]:.6f})")
PY
}
C="gridformer train --config $WORK/job.yaml"
# launch_node CASE RANK [SET...]: node RANK's launcher for case CASE in the background, MindFormers' nine-argument
# form (4 workers, 2 here, master 127.0.0.1:$PORT, LOG_DIR $WORK/logs_CASE, JOIN True, 60 s) of $C into output_dir
# CASE and the SETs ("--set K=V"); its output in CASE<RANK>.txt, its pid in PID<RANK>.
launch_node() {
  local case=$1 rank=$2; shift 2
  bash "$LAUNCH" "$C --set output_dir=$case${*:+ $*}" 4 2 127.0.0.1 "$PORT" "$rank" "$WORK/logs_$case" True 60 \
    > "$case$rank.txt" 2>&1 &
  printf -v "PID$rank" '%s' "$!"
}
start=$SECONDS
ROOT_OPT=(); [ "$(id -u)" -eq 0 ] && ROOT_OPT=(--allow-run-as-root)
mpirun -np 4 --oversubscribe "${ROOT_OPT[@]}" "$BIN" train --config job.yaml --set output_dir=ref > ref.txt 2>&1 \
  || { cat ref.txt; fail "the mpirun -np 4 reference"; }
echo "reference: mpirun -np 4 in $((SECONDS - start)) s"

# ---- (a) one node, 4 workers, "COMMAND" 4 (JOIN False) -----------------------------------------------------------
start=$SECONDS
bash "$LAUNCH" "gridformer train --config $WORK/job.yaml --set output_dir=a" 4 > a.txt 2>&1 || { cat a.txt; fail "(a) status $?"; }
returned=$((SECONDS - start))
grep -q "JOIN False: the launch goes on in the background" a.txt || { cat a.txt; fail "(a) no background line"; }
[ ! -s a/metrics.jsonl ] || [ "$(grep -c '"loss"' a/metrics.jsonl)" -lt 6 ] || fail "(a) the launcher returned after the job's end ($returned s)"
for i in $(seq 1 900); do grep -q "all 4 rank(s) finished" output/msrun_log/scheduler.log 2>/dev/null && break; sleep 0.1; done
grep -q "all 4 rank(s) finished" output/msrun_log/scheduler.log || { cat a.txt output/msrun_log/scheduler.log; fail "(a) the job did not finish within 90 s"; }
for r in 0 1 2 3; do
  [ -f "output/msrun_log/worker_$r.log" ] || fail "(a) no output/msrun_log/worker_$r.log"
  grep -q "rank $r of 4, pid" "a/log/rank_$r/gridformer.log" || fail "(a) rank $r's log"
done
grep -q 'step:\[' output/msrun_log/worker_0.log || fail "(a) worker_0.log has no steps: $(cat output/msrun_log/worker_0.log)"
losses_match "(a)" a
nothing_left "(a)"
echo "(a) one node, 4 workers, JOIN False: the launcher returned after $returned s, the job finished after $((SECONDS - start)) s; worker_0..3.log; nothing left"

# ---- (b) two nodes x 2 workers on this host ----------------------------------------------------------------------
start=$SECONDS
PORT=$(free_port)
bash "$LAUNCH" --worker_num=4 --local_worker_num=2 --master_addr=127.0.0.1 --master_port="$PORT" --node_rank=1 \
  --log_dir="$WORK/logs_b" --join=True --cluster_time_out=60 gridformer train --config job.yaml --set output_dir=b > b1.txt 2>&1 &
PID1=$!
sleep 1
bash "$LAUNCH" "gridformer train --config job.yaml --set output_dir=b" 4 2 127.0.0.1 "$PORT" 0 "$WORK/logs_b" True 60 > b0.txt 2>&1 &
PID0=$!
wait_exit "$PID0" 100; s0=$STATUS
wait_exit "$PID1" 20; s1=$STATUS
[ "$s0" -eq 0 ] || { cat b0.txt b1.txt; fail "(b) node 0's launcher: status $s0"; }
[ "$s1" -eq 0 ] || { cat b1.txt; fail "(b) node 1's launcher: status $s1"; }
grep -q "node 1 (.*, 127.0.0.1) registered 2 worker(s): 4 of 4" b0.txt || { cat b0.txt; fail "(b) node 0 did not register node 1"; }
grep -q "4 rank(s) on 1 host(s): 127.0.0.1 (node 0,1: ranks 0..3)" b0.txt || { cat b0.txt; fail "(b) the placement"; }
grep -q "all 4 rank(s) finished" b0.txt || { cat b0.txt; fail "(b) no success line"; }
grep -q "job .* started: ranks 2..3 run here" b1.txt && grep -q "job .* ended (node 0's report): finished (status 0)" b1.txt \
  || { cat b1.txt; fail "(b) node 1's report"; }
for r in 0 1 2 3; do [ -f "logs_b/worker_$r.log" ] || fail "(b) no logs_b/worker_$r.log"; done
losses_match "(b)" b
nothing_left "(b)"
echo "(b) two nodes x 2 workers on 127.0.0.1:$PORT (node 1 first, flags; node 0 positional, JOIN True): one 4-rank job, both exit 0 after $((SECONDS - start)) s; nothing left"

# ---- (f) Ctrl-C to node 0's launcher: the job stops, both launchers end with its status ---------------------------
start=$SECONDS PORT=$(free_port)
launch_node f 1 --set runner_config.train_steps=100000
launch_node f 0 --set runner_config.train_steps=100000
for i in $(seq 1 600); do
  n=0
  for r in 0 1 2 3; do grep -q "rank $r of 4, pid" "f/log/rank_$r/gridformer.log" 2>/dev/null && n=$((n + 1)); done
  [ "$n" -eq 4 ] && grep -q 'step:\[' logs_f/worker_0.log 2>/dev/null && break
  sleep 0.1
done
[ "$n" -eq 4 ] || { cat f0.txt f1.txt; fail "(f) the ranks did not start within 60 s"; }
t0=$SECONDS
kill -INT "$PID0"
wait_exit "$PID0" 40; s0=$STATUS
wait_exit "$PID1" 10; s1=$STATUS
[ "$s0" -eq 130 ] || { cat f0.txt; fail "(f) node 0's launcher: status $s0, expected 130"; }
[ "$s1" -eq 130 ] || { cat f1.txt; fail "(f) node 1's launcher: status $s1, expected 130"; }
grep -Eq "SIGINT: sent SIGINT to [1-4] rank\(s\) on this host; all ranks stop together between steps" f0.txt || { cat f0.txt; fail "(f) the ranks were not asked to stop"; }
grep -q "ended (node 0's report): failed with status 130 (status 130)" f1.txt || { cat f1.txt; fail "(f) node 1's report"; }
nothing_left "(f)"
echo "(f) SIGINT to node 0's launcher mid-run: the ranks stop between steps, both launchers exit 130 within $((SECONDS - t0)) s; nothing left"

# ---- (d) a node alone ----------------------------------------------------------------------------------------------
start=$SECONDS
PORT=$(free_port)
bash "$LAUNCH" "job.yaml" 4 2 127.0.0.1 "$PORT" 0 logs_d True 3 > d0.txt 2>&1 &
PID0=$!
PORT2=$(free_port)
bash "$LAUNCH" "job.yaml" 4 2 127.0.0.1 "$PORT2" 1 logs_d True 3 > d1.txt 2>&1 &
PID1=$!
wait_exit "$PID0" 30; s0=$STATUS
wait_exit "$PID1" 30; s1=$STATUS
[ "$s0" -eq 1 ] && grep -q "the cluster did not form within 3 s (cluster_time_out): 2 of 4 worker(s) registered (node 0 (2 worker(s)))" d0.txt \
  || { cat d0.txt; fail "(d) node 0 alone: status $s0"; }
[ "$s1" -eq 1 ] && grep -q "node 0's launcher did not answer at 127.0.0.1:$PORT2 within 3 s (cluster_time_out): nothing listens there yet" d1.txt \
  || { cat d1.txt; fail "(d) node 1 alone: status $s1"; }
[ ! -e out/log/mpirun.log ] || fail "(d) something ran"
nothing_left "(d)"
echo "(d) node 0 alone and node 1 alone: each status 1 after $((SECONDS - start)) s with the cluster_time_out message"

# ---- (e) wrong arguments -----------------------------------------------------------------------------------------
bad() { # bad WANT_TEXT ARGS...: status 2 and WANT_TEXT in the output, quickly
  local want=$1 st=0
  shift
  timeout 60 bash "$LAUNCH" "$@" > e.txt 2>&1 || st=$?
  [ "$st" -eq 2 ] || { cat e.txt; fail "(e) $*: status $st, expected 2"; }
  grep -qF -- "$want" e.txt || { cat e.txt; fail "(e) $*: no '$want'"; }
}
bad "got COMMAND and 2 more argument(s) (4 2); MindFormers' forms take 0, 1, 5 or 8 after COMMAND" "$C" 4 2
bad "WORKER_NUM 'four' is not a positive number" --worker_num four "$C"
bad "LOCAL_WORKER 8 is more than WORKER_NUM 4" --worker_num 4 --local_worker_num 8 "$C"
bad "MASTER_PORT '80': expected a port from 1024 to 65535" "$C" 4 2 127.0.0.1 80 0 logs True 60
bad "JOIN 'maybe': expected True or False" "$C" 4 4 127.0.0.1 8118 0 logs maybe 60
bad "unknown option --workers" --workers 4 "$C"
bad "--worker_num and the positional WORKER_NUM are both given" "$C" 4 --worker_num 4
bad "msrun's --bind_core is not supported here" --bind_core=True "$C"
bad "COMMAND must be \`gridformer train --config X.yaml ...\`" "python train.py --config job.yaml" 4
bad "CONFIG 'missing.yaml' is not a file" "gridformer train --config missing.yaml" 4
bad "the parallel layout of $WORK/job.yaml does not fit RANK_SIZE 2" "$C" 2 2 127.0.0.1 8118 0 logs True 60
bad "MASTER_ADDR 192.0.2.1 is not an address of this host" "$C" 4 2 192.0.2.1 "$(free_port)" 0 logs True 60
[ ! -e out/log/mpirun.log ] || fail "(e) something ran"
bash "$LAUNCH" --help > help.txt 2>&1 || fail "(e) --help: status $?"
grep -q "LOG_DIR/worker_<rank>.log" help.txt && grep -q -- "--cluster_time_out" help.txt || fail "(e) --help: $(cat help.txt)"
GF_DRY_RUN=1 bash "$LAUNCH" "python run_mindformer.py --config job.yaml --run_mode train --use_parallel True --train_dataset_dir $WORK/job.yaml --seed 3 --runner_config.train_steps 2" 4 > e_mf.txt 2>&1 \
  || { cat e_mf.txt; fail "(e) run_mindformer.py form: status $?"; }
grep -qF "command: $BIN train --config $WORK/job.yaml --set run_mode=train --set use_parallel=True --set train_dataset.data_loader.data_path=$WORK/job.yaml --set seed=3 --set runner_config.train_steps=2" e_mf.txt \
  || { cat e_mf.txt; fail "(e) run_mindformer.py's arguments"; }
grep -q "GF_DRY_RUN=1: nothing started" e_mf.txt || { cat e_mf.txt; fail "(e) the dry run"; }
nothing_left "(e)"
echo "(e) 12 wrong arguments refused with status 2 and a message, nothing started; --help; run_mindformer.py's arguments as --set"

# ---- (g) a stranger without the job's secret ---------------------------------------------------------------------
start=$SECONDS PORT=$(free_port)
launch_node g 0
for i in $(seq 1 300); do grep -q "waiting up to 60 s for the other nodes" g0.txt && break; sleep 0.1; done
grep -q "waiting up to 60 s for the other nodes" g0.txt || { cat g0.txt; fail "(g) node 0 did not serve"; }
# The stranger's registration is node 1's to the letter (its job line as node 0 prints its command) but the secret.
job="cwd=$WORK worker_num=4 log_dir=$WORK/logs_g command=$(sed -n 's/^msrun_launcher.sh: command: //p' g0.txt)"
"$PY" "$SRC/tests/integration/rendezvous_stranger.py" "$PORT" "$job" g0.txt > g_stranger.txt 2>&1 || { cat g_stranger.txt; fail "(g) a stranger was not refused, logged and left out"; }
[ "$(stat -c %a logs_g/.job_secret)" = 600 ] || fail "(g) logs_g/.job_secret has mode $(stat -c %a logs_g/.job_secret)"
launch_node g 1
wait_exit "$PID0" 100; s0=$STATUS
wait_exit "$PID1" 20; s1=$STATUS
[ "$s0" -eq 0 ] && [ "$s1" -eq 0 ] || { cat g0.txt g1.txt; fail "(g) statuses $s0 and $s1 after the strangers"; }
[ "$(cut -d' ' -f1-3 logs_g/nodes | paste -sd' ')" = "0 127.0.0.1 2 1 127.0.0.1 2" ] || fail "(g) the nodes: $(cat logs_g/nodes)"
! grep -q stranger logs_g/nodes || fail "(g) the stranger is among the nodes"
token=$(cat logs_g/.job_secret)
[[ $token =~ ^[0-9a-f]{32}$ ]] || fail "(g) logs_g/.job_secret does not hold 32 hex digits"
! grep -rqF --exclude=.job_secret -- "$token" g0.txt g1.txt g_stranger.txt g/log logs_g || fail "(g) the token was printed"
losses_match "(g)" g
nothing_left "(g)"
echo "(g) two registrations without the job's secret (none, wrong) refused and logged with 127.0.0.1, not counted; then node 1 joined, the job ran: $((SECONDS - start)) s"

# ---- (c) two nodes in two network namespaces, over ssh -----------------------------------------------------------
skip_c() { skip "(c) two nodes in network namespaces: $*"$'\n'"msrun_launch: checks passed ((c) skipped)"; }
ssh_nodes skip_c gfmsrun-a gfmsrun-b
mkdir tmp
start=$SECONDS
# Each node its own LOG_DIR path would differ; the same path on both (one file system here) with a node's own file
# names is what a cluster's shared directory gives.
node_env=(env OMPI_MCA_plm_rsh_agent="ssh -F $WORK/ssh/config" OMPI_MCA_btl=self,vader,tcp
  OMPI_MCA_btl_tcp_if_include="$NET.0/24" OMPI_MCA_oob_tcp_if_include="$NET.0/24" OMPI_MCA_orte_tmpdir_base="$WORK/tmp")
on_node "$NS_B" gfmsrun-b "${node_env[@]}" bash "$LAUNCH" "$C --set output_dir=c" 4 2 "$IP_A" 8118 1 "$WORK/logs_c" True 60 > c1.txt 2>&1 &
PID1=$!
on_node "$NS_A" gfmsrun-a "${node_env[@]}" bash "$LAUNCH" "$C --set output_dir=c" 4 2 "$IP_A" 8118 0 "$WORK/logs_c" True 60 > c0.txt 2>&1 &
PID0=$!
wait_exit "$PID0" 100; s0=$STATUS
wait_exit "$PID1" 20; s1=$STATUS
[ "$s0" -eq 0 ] || { cat c0.txt c1.txt; cat c/log/mpirun.log 2>/dev/null | tail -20; fail "(c) node 0's launcher: status $s0"; }
[ "$s1" -eq 0 ] || { cat c1.txt; fail "(c) node 1's launcher: status $s1"; }
grep -q "node 1 (gfmsrun-b, $IP_B) registered 2 worker(s): 4 of 4" c0.txt || { cat c0.txt; fail "(c) node 0 did not register node 1 at $IP_B"; }
grep -q "4 rank(s) on 2 host(s): $IP_A (node 0: ranks 0..1), $IP_B (node 1: ranks 2..3)" c0.txt || { cat c0.txt; fail "(c) the placement"; }
grep -q "ssh reaches all 1 remote server(s)" c0.txt || { cat c0.txt; fail "(c) no ssh probe of node 1"; }
grep -q "job .* started: ranks 2..3 run here" c1.txt && grep -q "ended (node 0's report): all 4 rank(s) finished (status 0)" c1.txt \
  || { cat c1.txt; fail "(c) node 1's report"; }
for r in 0 1 2 3; do
  [ -f "logs_c/worker_$r.log" ] || fail "(c) no logs_c/worker_$r.log"
  grep -q "rank table $WORK/logs_c/rank_table.json: 4 ranks on 2 server(s); this rank: server $NET.$((r / 2 + 1)) device $((r % 2))" \
    "c/log/rank_$r/gridformer.log" || fail "(c) rank $r's place: $(grep 'rank table' "c/log/rank_$r/gridformer.log")"
done
losses_match "(c)" c
nothing_left "(c)"
echo "(c) two nodes in network namespaces ($IP_A, $IP_B), node 1 first: node 0's mpirun started ranks 2..3 on $IP_B over ssh; both exit 0 after $((SECONDS - start)) s; nothing left"
echo "msrun_launch: all checks passed"
