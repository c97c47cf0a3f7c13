#!/usr/bin/env bash
# Two servers for real: two network namespaces joined by a veth pair, each a "server" with its own
# address from a 2-server rank table, its own host name (a UTS namespace) and its own sshd (started
# here with a host key and a client key made here; ~/.ssh is not touched). mpirun's daemon reaches
# the far server over that ssh; Open MPI talks TCP over the veth only. Binary, config, table and
# data are the same paths on both servers (one file system, as a cluster's shared one).
#  (a) run_distribute.sh on each server with its own range, the first server's started first: one
#      4-rank job (2 ranks per server) whose losses are the one-rank run's (same global batch, the
#      same Megatron data) within 1e-5 relative; the second server's script follows the job and
#      ends with its status; the gradients crossed the veth;
#  (b) the same with the second server's script started first (it waits for the job);
#  (c) the second server's script alone: no job within GF_JOIN_TIMEOUT, it says what to run where;
#  (d) kill -9 of the far server's ranks, and (e) the far server's link down (its veth end): the
#      whole job stops within 30 s, both scripts exit non-zero naming the far server, and nothing
#      is left running on either side (ranks, orted, mpirun, ssh, sshd sessions).
# Skipped, with the reason, where namespaces or sshd cannot be made.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
TOOL="$BUILD/bin/rank_table"
RUN="$SRC/scripts/run_distribute.sh"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
# Not lib's root permission for Open MPI (run_distribute.sh allows root itself), nor a transport or ssh of the caller's.
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM RANK_TABLE_FILE MPIRUN_ARGS GF_PROBE GF_DRY_RUN GF_JOIN_TIMEOUT
unset OMPI_MCA_plm_rsh_agent OMPI_MCA_btl OMPI_MCA_btl_tcp_if_include OMPI_MCA_oob_tcp_if_include
# Every process of a job has $WORK or one of the addresses on its command line (ranks: the config; orted and mpirun's
# ssh: the agent and mpirun's address): lib's ours; the two sshd listeners are the servers' own and are left out (they,
# and the namespaces, go at exit).
test_net 2srv 2s
HOST_A="gfsrv-$$-a" HOST_B="gfsrv-$$-b"
AT_EXIT=drop_namespaces
sessions() { local p; for p in "${OURS_BUT[@]}"; do pgrep -a -P "$p" || true; done; }

# ---- the two servers ---------------------------------------------------------------------------
# on_node NS HOSTNAME CMD...: CMD on that server (its network, its host name; the cwd kept). mpirun's ssh (its
# plm_rsh_agent): ssh -F $WORK/ssh/config, this test's key and known hosts, no prompt, a connect timeout.
# ClientAlive: the server ends a session whose client is gone (its link down) within ~10 s.
skip_servers() { skip "two_servers: $*"; }
ssh_nodes skip_servers "$HOST_A" "$HOST_B" "ClientAliveInterval 3" "ClientAliveCountMax 3"
echo "two servers: $HOST_A ($IP_A, namespace $NS_A) and $HOST_B ($IP_B, namespace $NS_B), each with its own sshd; ssh between them works"

# The environment both servers give the job, as a cluster's profile would.
export GRIDFORMER_BIN="$BIN" RANK_TABLE_BIN="$TOOL" GF_PROGRESS_INTERVAL=600
export OMPI_MCA_plm_rsh_agent="ssh -F $WORK/ssh/config"
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include="$NET.0/24" OMPI_MCA_oob_tcp_if_include="$NET.0/24"
export OMPI_MCA_orte_tmpdir_base="$WORK/tmp"  # and lib's OMP_NUM_THREADS=1, OMPI_MCA_btl_vader_single_copy_mechanism=none
mkdir tmp

# ---- the table, the data, the config -----------------------------------------------------------
"$TOOL" --device_num "[0,2)" --server_ip "$IP_A" --output_dir tables > /dev/null
"$TOOL" --device_num "[0,2)" --server_ip "$IP_B" --output_dir tables > /dev/null
"$TOOL" merge tables/two.json "tables/hccl_2p_01_$IP_A.json" "tables/hccl_2p_01_$IP_B.json" > /dev/null
mkdir data
PYTHONPATH="$SRC/tests/integration" "$PY" - <<'PY'
import random
import lib
rng = random.Random(3)
# Learnable documents (each counts up in steps of its own from a random start), so the loss falls.
docs = []
for _ in range(120):
    a, k = rng.randrange(1, 101), rng.randrange(1, 4)
    docs.append([0] + [(a + k * t) % 100 + 1 for t in range(rng.randrange(8, 40))])
lib.write("data/tiny_text_document", docs)  # Megatron's MMIDIDX layout, uint16 tokens
PY
write_config() {  # write_config FILE TRAIN_STEPS: random_gpt2's run on this test's Megatron data (split 1,0,0, seed 7)
  random_gpt2 "$1" out=./out steps="$2" batch=1 top="parallel_config: {data_parallel: 4}"
  sed -i "s|^train_dataset: .*|train_dataset: {data_loader: {type: MegatronDataset, data_path: $WORK/data/tiny_text_document, split: \"1,0,0\", seed: 7}}|" "$1"
  grep -q "^train_dataset: {data_loader: {type: MegatronDataset" "$1" || fail "write_config: $1 has no Megatron data"
}
STEPS=8
write_config "$WORK/job.yaml" "$STEPS"
write_config "$WORK/long.yaml" 1000000
# The reference: one rank, the same global batch (4 samples), the same data.
"$BIN" train --config "$WORK/job.yaml" --set output_dir=one --set runner_config.batch_size=4 \
  --set parallel_config.data_parallel=1 > one.txt 2>&1 || { cat one.txt; fail "the one-rank reference run"; }

# ---- helpers ------------------------------------------------------------------------------------
# server_a OUT CONFIG [ENV...] / server_b ...: each server's own command, MindFormers' way, in the
# background; PID_A / PID_B.
server_a() { local out=$1 cfg=$2; shift 2; on_node "$NS_A" "$HOST_A" env "$@" bash "$RUN" tables/two.json "$cfg" "[0,2)" train 4 > "$out" 2>&1 & PID_A=$!; }
server_b() { local out=$1 cfg=$2; shift 2; on_node "$NS_B" "$HOST_B" env "$@" bash "$RUN" tables/two.json "$cfg" "[2,4)" train 4 > "$out" 2>&1 & PID_B=$!; }
wait_for() {  # wait_for SECONDS FILE PATTERN
  local i
  for i in $(seq 1 $(($1 * 10))); do grep -q -- "$3" "$2" 2>/dev/null && return 0; sleep 0.1; done
  cat "$2" 2>/dev/null || true; fail "no '$3' in $2 within $1 s"
}
tx() { echo $(($(ip netns exec "$NS_A" cat "/sys/class/net/$VA/statistics/tx_bytes") + $(ip netns exec "$NS_B" cat "/sys/class/net/$VB/statistics/tx_bytes"))); }
losses_match() {  # losses_match NAME: the last $STEPS losses of out/metrics.jsonl against one rank's
  "$PY" - "$1" "$STEPS" <<'PY'
import json, sys
name, steps = sys.argv[1], int(sys.argv[2])
one = [json.loads(l)["loss"] for l in open("one/metrics.jsonl") if '"loss"' in l]
job = [json.loads(l)["loss"] for l in open("out/metrics.jsonl") if '"loss"' in l][-steps:]
assert len(one) == len(job) == steps, (len(one), len(job))
worst = max(abs(a - b) / abs(a) for a, b in zip(one, job))
for s, (a, b) in enumerate(zip(one, job), 1):
    assert abs(a - b) / abs(a) <= 1e-5, f"{name}: step {s}: one rank {a}, two servers {b}"
assert one[-1] < one[0], one
print(f"{name}: {steps} losses of 4 ranks on 2 servers = 1 rank's within {worst:.1e} relative ({one[0]:.5f} -> {one[-1]:.5f})")
PY
}
all_gone() {  # all_gone WHAT DEADLINE: lib's ours and the sshd sessions all gone by SECONDS = DEADLINE
  local left
  while :; do
    left="$(ours)$(sessions)"
    [ -z "$left" ] && return 0
    ((SECONDS < $2)) || { ps -fp "$(echo "$left" | awk '{print $1}' | paste -sd,)" || true; fail "$1: processes left running:"$'\n'"$left"; }
    sleep 0.2
  done
}
params=$(sed -n 's/.* \([0-9]*\) parameters$/\1/p' one.txt | head -1)
[ -n "$params" ] || fail "no parameter count in the one-rank log"

# ---- (a) the first server's command first, then the second's ------------------------------------
start=$SECONDS tx0=$(tx)
server_a a1.txt "$WORK/job.yaml"
wait_for 30 out/log/job "^state=running"
server_b a2.txt "$WORK/job.yaml"
wait_exit "$PID_A" 120; sa=$STATUS
wait_exit "$PID_B" 60; sb=$STATUS
bytes=$(($(tx) - tx0))
[ "$sa" -eq 0 ] || { cat a1.txt; cat out/log/mpirun.log; fail "(a) the first server's script: status $sa"; }
[ "$sb" -eq 0 ] || { cat a2.txt; fail "(a) the second server's script: status $sb"; }
job=$(sed -n 's/^job=//p' out/log/job)
grep -q "all 4 rank(s) finished" a1.txt || fail "(a) no success line: $(cat a1.txt)"
grep -q "checking ssh to 1 remote server(s) ($IP_B)" a1.txt || fail "(a) the first server did not probe the second: $(cat a1.txt)"
grep -q "job $job: launched by run_distribute.sh on server $IP_A (host $HOST_A, " a2.txt || { cat a2.txt; fail "(a) the second server did not follow job $job"; }
grep -q "following ranks 2..3 here" a2.txt && grep -q "job $job finished (server $IP_A's report): all 4 rank(s) finished" a2.txt \
  || { cat a2.txt; fail "(a) the second server's report"; }
for r in 0 1 2 3; do
  grep -q "rank table $WORK/tables/two.json: 4 ranks on 2 server(s); this rank: server $NET.$((r / 2 + 1)) device $((r % 2))" \
    "out/log/rank_$r/gridformer.log" || fail "(a) rank $r's place in the table"
done
losses_match "(a)"
# Each step's gradient all-reduce crosses the veth both ways: at least one copy of the gradients
# (params x 4 bytes) per step; a job whose ranks all ran on one side would send almost nothing.
((bytes >= 2 * STEPS * params * 4)) || fail "(a) only $bytes bytes on the veth for $STEPS steps of $params parameters"
all_gone "(a)" $((SECONDS + 10))
echo "(a) first server then second: job $job, both scripts exit 0 after $((SECONDS - start)) s; $bytes bytes on the veth; nothing left"

# ---- (b) the second server's command first: it waits for the job (the earlier one in out/log/job is not it)
start=$SECONDS
logged_a=$(grep -c '"loss"' out/metrics.jsonl)  # (b) appends to (a)'s metrics: its own lines come after these
server_b b2.txt "$WORK/job.yaml"
wait_for 30 b2.txt "waiting up to 300 s (GF_JOIN_TIMEOUT) for that job"
sleep 1
server_a b1.txt "$WORK/job.yaml"
wait_exit "$PID_A" 120; sa=$STATUS
wait_exit "$PID_B" 60; sb=$STATUS
[ "$sa" -eq 0 ] || { cat b1.txt; cat out/log/mpirun.log; fail "(b) the first server's script: status $sa"; }
[ "$sb" -eq 0 ] || { cat b2.txt; fail "(b) the second server's script: status $sb"; }
job2=$(sed -n 's/^job=//p' out/log/job)
[ "$job2" != "$job" ] || fail "(b) no new job"
grep -q "the job already in $WORK/out/log/job ($job, finished) is an earlier run's: waiting for a new one" b2.txt || { cat b2.txt; fail "(b) the earlier job"; }
grep -q "job $job2 finished (server $IP_A's report): all 4 rank(s) finished" b2.txt || { cat b2.txt; fail "(b) the second server's report"; }
logged_b=$(grep -c '"loss"' out/metrics.jsonl)
((logged_b - logged_a == STEPS)) || fail "(b) logged $((logged_b - logged_a)) steps after (a)'s $logged_a, expected $STEPS"
losses_match "(b)"
all_gone "(b)" $((SECONDS + 10))
echo "(b) second server then first: job $job2, both scripts exit 0 after $((SECONDS - start)) s; nothing left"

# ---- (c) the second server's command alone --------------------------------------------------------
server_b c.txt "$WORK/job.yaml" GF_JOIN_TIMEOUT=3
wait_exit "$PID_B" 20
[ "$STATUS" -eq 2 ] || { cat c.txt; fail "(c) status $STATUS, expected 2"; }
grep -q "no job from server $IP_A within 3 s in $WORK/out/log/job; nothing ran here" c.txt \
  && grep -q "start it on $IP_A, in this same directory (the same paths as here): bash scripts/run_distribute.sh $WORK/tables/two.json $WORK/job.yaml \"\[0,2)\" train 4" c.txt \
  || { cat c.txt; fail "(c) message"; }
echo "(c) the second server alone: after 3 s, status 2 and what to run on $IP_A"

# ---- (d), (e): faults on the far server ----------------------------------------------------------
# start_long NAME: both servers' commands on the long config; returns when every rank has stepped.
start_long() {
  rm -rf out
  server_a "$1.1.txt" "$WORK/long.yaml"
  server_b "$1.2.txt" "$WORK/long.yaml"
  local r i n
  for i in $(seq 1 600); do
    n=0
    for r in 0 1 2 3; do grep -q "step:\[" "out/log/rank_$r/gridformer.log" 2>/dev/null && n=$((n + 1)); done
    [ "$n" -eq 4 ] && break
    sleep 0.1
  done
  [ "$n" -eq 4 ] || { cat "$1.1.txt" "$1.2.txt"; fail "($1) not every rank stepped within 60 s"; }
  wait_for 10 "$1.2.txt" "all 2 rank(s) of this server running"
  for r in 0 1 2 3; do
    RPID[r]=$(sed -n "s/.*rank $r of 4, pid \([0-9]*\),.*/\1/p" "out/log/rank_$r/gridformer.log")
    local want=$NS_A; ((r >= 2)) && want=$NS_B
    [ "$(ip netns identify "${RPID[r]}")" = "$want" ] || fail "($1) rank $r (pid ${RPID[r]}) runs in '$(ip netns identify "${RPID[r]}")', not $want"
  done
}
RPID=()
# check_stop NAME T0: both scripts end within 30 s of T0, non-zero, naming the far server; nothing left.
check_stop() {
  local name=$1 t0=$2
  wait_exit "$PID_A" $((t0 + 30 - SECONDS)); sa=$STATUS; ta=$((SECONDS - t0))
  wait_exit "$PID_B" $((t0 + 30 - SECONDS)); sb=$STATUS; tb=$((SECONDS - t0))
  [ "$sa" -ne 0 ] || { cat "$name.1.txt"; fail "($name) the first server's script exited 0"; }
  [ "$sb" -ne 0 ] || { cat "$name.2.txt"; fail "($name) the second server's script exited 0"; }
  all_gone "($name)" $((t0 + 30))
  STOPPED="first server's script exit $sa after $ta s, second's exit $sb after $tb s, nothing left after $((SECONDS - t0)) s"
}

# (d) kill -9 of the far server's ranks.
start_long d
t0=$SECONDS
kill -KILL "${RPID[2]}" "${RPID[3]}"
check_stop d "$t0"
grep -E -q "rank [23] \(server $IP_B\) failed \(exited on signal 9 \(Killed\)\)" d.1.txt || { cat d.1.txt; fail "(d) the first server's script does not name the rank and $IP_B"; }
grep -E -q "job .* failed \(server $IP_A's report\): rank [23] \(server $IP_B\) failed \(exited on signal 9 \(Killed\)\)" d.2.txt || { cat d.2.txt; fail "(d) the second server's report"; }
echo "(d) kill -9 of ranks 2 and 3 on $IP_B: $STOPPED"

# (e) the far server's link down.
start_long e
t0=$SECONDS
ip -n "$NS_B" link set "$VB" down
check_stop e "$t0"
grep -q "lost server $IP_B: mpirun lost its connection to the daemon there" e.1.txt || { cat e.1.txt; cat out/log/mpirun.log | grep -v 'step:\[' | tail -20; fail "(e) the first server's script does not name $IP_B"; }
grep -q "job .* failed (server $IP_A's report): lost server $IP_B" e.2.txt || { cat e.2.txt; fail "(e) the second server's report"; }
echo "(e) $IP_B's veth down: $STOPPED"
echo "two_servers: all checks passed"
