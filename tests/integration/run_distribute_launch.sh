#!/usr/bin/env bash
# scripts/run_distribute.sh fails fast and leaves nothing behind:
#  (a) a config whose layout does not fit the rank table (MindFormers' 4 x 8 table, a layout of 8)
#      is refused before anything starts, GF_DRY_RUN=1 too, with the ranks' whole message;
#  (b) servers that never answer (addresses in a network namespace pair this test makes, where no
#      host is behind them) are named within seconds, by the ssh probe and, with the probe off, by
#      mpirun's own ssh (ConnectTimeout); the script exits non-zero and no ssh/mpirun is left;
#  (c) SIGINT to the script's process group (Ctrl-C) while it probes, and while mpirun waits on ssh,
#      ends it at once with nothing left;
#  (d) a rank's multi-line error reaches the console whole, once; as root the script runs without
#      OMPI_ALLOW_RUN_AS_ROOT and warns once.
# Every packet of (b) and (c) stays inside the two namespaces: the script runs in one of them, whose
# only link is the veth to the other. (b) and (c) are skipped, with the reason, without CAP_NET_ADMIN.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
TOOL="$BUILD/bin/rank_table"
RUN="$SRC/scripts/run_distribute.sh"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
# No OMPI_ALLOW_RUN_AS_ROOT (lib's, unset here): the script must allow root itself.
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM RANK_TABLE_FILE MPIRUN_ARGS GF_PROBE GF_DRY_RUN
export GRIDFORMER_BIN="$BIN"
# Addresses for (b) and (c): 10.X.Y.0/24, from this test's pid, used only inside its namespaces.
# Every process this test starts has $WORK or one of those addresses on its command line (lib's ours); at exit what is
# left of them is killed and the namespaces deleted.
test_net launch l
AT_EXIT=drop_namespaces
write_config() {  # write_config FILE DATA_PARALLEL TRAIN_STEPS
  bare_gpt2 "$1" out=./out steps="$3" batch=1 layers=2 top="parallel_config: {data_parallel: $2}"
}

# (a) Layout vs table, before launch. Stand-ins for ssh and mpirun record any call: there must be
# none (the table's servers are real addresses elsewhere; nothing may be sent to them). Where
# possible the script also runs in an empty network namespace (unshare -n).
mkdir fakebin
for f in ssh mpirun; do printf '#!/bin/sh\necho "%s $*" >> %s/called\nexit 1\n' "$f" "$WORK" > "fakebin/$f"; done
chmod +x fakebin/*
isolate=()
unshare -n true 2>/dev/null && isolate=(unshare -n)
write_config "$WORK/eight.yaml" 8 3
TABLE="$SRC/tests/data/rank_table_4x8.json"
set +e
"$BIN" config --config "$WORK/eight.yaml" --set run_mode=train --ranks 32 > /dev/null 2> expected.txt; s0=$?
start=$SECONDS
for dry in 1 0; do
  GF_DRY_RUN=$dry PATH="$WORK/fakebin:$PATH" MPIRUN="$WORK/fakebin/mpirun" ${isolate[@]+"${isolate[@]}"} \
    bash "$RUN" "$TABLE" "$WORK/eight.yaml" "[0,8)" train 32 > "a$dry.txt" 2>&1
  echo $? > "a$dry.status"
done
set -e
[ "$s0" -eq 2 ] || fail "(a) gridformer config --ranks 32 gave status $s0, expected 2"
grep -q "^error: the parallel layout does not fit 32 rank(s):" expected.txt || fail "(a) config --ranks: $(cat expected.txt)"
[ "$(wc -l < expected.txt)" -ge 3 ] || fail "(a) expected a multi-line message: $(cat expected.txt)"
for dry in 1 0; do
  [ "$(cat "a$dry.status")" -eq 2 ] || { cat "a$dry.txt"; fail "(a) GF_DRY_RUN=$dry: status $(cat "a$dry.status"), expected 2"; }
  [[ $(cat "a$dry.txt") == *"$(cat expected.txt)"* ]] || { cat "a$dry.txt"; fail "(a) GF_DRY_RUN=$dry: the whole message is not shown"; }
  grep -q "does not fit RANK_SIZE 32 .*nothing started" "a$dry.txt" || fail "(a) GF_DRY_RUN=$dry: no closing line: $(cat "a$dry.txt")"
  ! grep -q "command:" "a$dry.txt" || fail "(a) GF_DRY_RUN=$dry: got as far as the command"
done
[ ! -e called ] || fail "(a) ssh or mpirun was called: $(cat called)"
[ ! -e out/log/mpirun.log ] || fail "(a) mpirun.log written"
grep -q "the parallel layout does not fit 32 rank(s):" a0.txt && \
  grep -q "a layout that fits 32 rank(s): parallel_config: {data_parallel: 32, model_parallel: 1, pipeline_stage: 1}" a0.txt \
  || fail "(a) message lines missing"
echo "(a) layout of 8 vs the 4x8 table refused before launch (dry run and real) in $((SECONDS - start)) s, whole message${isolate:+, in an empty network namespace}"

# (d) A multi-line error from the ranks, whole and once. The ranks run a stand-in that adds
# model_parallel 3 to the training command (as if the servers read a different copy of the config),
# so the launcher's check passes and the ranks' own check fails with the real message.
cat > "$WORK/ranks_see_mp3" <<EOF
#!/usr/bin/env bash
[ "\$1" = train ] && exec "$BIN" "\$@" --set parallel_config.model_parallel=3
exec "$BIN" "\$@"
EOF
chmod +x "$WORK/ranks_see_mp3"
write_config "$WORK/two.yaml" 2 3
"$TOOL" --device_num "[0,2)" --server_ip 127.0.0.1 --output_dir tables > /dev/null
set +e
"$BIN" config --config "$WORK/two.yaml" --set parallel_config.model_parallel=3 --ranks 2 > /dev/null 2> expected_d.txt
start=$SECONDS
GRIDFORMER_BIN="$WORK/ranks_see_mp3" RANK_TABLE_BIN="$TOOL" timeout 120 bash "$RUN" tables/hccl_2p_01_127.0.0.1.json "$WORK/two.yaml" "[0,2)" train > d.txt 2>&1
sd=$?
set -e
[ "$sd" -eq 2 ] || { cat d.txt; fail "(d) status $sd, expected 2 (the ranks' layout error)"; }
sed -i 's/^error: //' expected_d.txt
[ "$(wc -l < expected_d.txt)" -ge 4 ] || fail "(d) expected a message of several lines: $(cat expected_d.txt)"
# The record as the console shows it: its first line after the log prefix, then the others as they are.
shown=$(awk -v first="$(head -1 expected_d.txt)" 'index($0, "] [error] " first) { on = 1; sub(/.*\] \[error\] /, "") }
  on && /^\[/ && !index($0, first) { on = 0 } on && /^run_distribute.sh: / { on = 0 } on' d.txt)
[ "$shown" = "$(cat expected_d.txt)" ] || { cat d.txt; fail "(d) the error is not shown whole; expected:"$'\n'"$(cat expected_d.txt)"$'\n'"shown:"$'\n'"$shown"; }
[ "$(grep -c "\] \[error\] the parallel layout does not fit 2 rank(s):" d.txt)" -eq 1 ] || { cat d.txt; fail "(d) the error is not shown exactly once"; }
if [ "$(id -u)" -eq 0 ]; then
  [ "$(grep -c "warning: running as root; a non-root account is recommended" d.txt)" -eq 1 ] || fail "(d) no single root warning: $(cat d.txt)"
  grep -q "command: mpirun .*--allow-run-as-root" d.txt || fail "(d) mpirun without --allow-run-as-root: $(grep command: d.txt)"
fi
nothing_left "(d)"
echo "(d) the ranks' $(wc -l < expected_d.txt)-line layout error shown whole, once, in $((SECONDS - start)) s$([ "$(id -u)" -eq 0 ] && echo "; as root without OMPI_ALLOW_RUN_AS_ROOT, one warning")"

# (b) and (c) need two network namespaces joined by a veth pair.
skip_net() { skip "(b) unreachable servers and (c) Ctrl-C during a launch: $*"$'\n'"run_distribute_launch: checks passed ((b) and (c) skipped)"; }
command -v ssh >/dev/null || skip_net "no ssh client (Debian: openssh-client)"
command -v ip >/dev/null || skip_net "no ip command (Debian: iproute2)"
ip netns add "$NS_A" 2>netns.err || skip_net "ip netns add is not permitted here ($(head -1 netns.err)); needs root or CAP_NET_ADMIN"
ip netns add "$NS_B"
# A: this host's side, 10.X.Y.1. B: the peer, 10.X.Y.9. 10.X.Y.2 and .3 are servers with no host
# behind them: A sends their frames to MAC addresses nobody has, so B drops every SYN unanswered.
ip link add "$VA" netns "$NS_A" type veth peer name "$VB" netns "$NS_B"
ip -n "$NS_A" link set lo up
ip -n "$NS_A" addr add "$NET.1/24" dev "$VA"
ip -n "$NS_A" link set "$VA" up
ip -n "$NS_B" addr add "$NET.9/24" dev "$VB"
ip -n "$NS_B" link set "$VB" up
ip -n "$NS_A" neigh add "$NET.2" lladdr 02:00:00:00:00:02 dev "$VA" nud permanent
ip -n "$NS_A" neigh add "$NET.3" lladdr 02:00:00:00:00:03 dev "$VA" nud permanent
[ "$(ip -n "$NS_A" route | grep -c .)" -eq 1 ] || fail "namespace $NS_A has routes beyond $NET.0/24: $(ip -n "$NS_A" route)"
in_ns() { ip netns exec "$NS_A" "$@"; }

for i in 1 2 3; do "$TOOL" --device_num "[0,2)" --server_ip "$NET.$i" --output_dir tables > /dev/null; done
"$TOOL" merge tables/three.json "tables/hccl_2p_01_$NET.1.json" "tables/hccl_2p_01_$NET.2.json" "tables/hccl_2p_01_$NET.3.json" > /dev/null
write_config "$WORK/six.yaml" 6 3
launch() {  # launch OUT ENV...: run_distribute.sh on the three-server table from namespace A, in the background
  local out=$1; shift
  in_ns env "$@" bash "$RUN" tables/three.json "$WORK/six.yaml" "[0,2)" train 6 > "$out" 2>&1 &
  SCRIPT=$!
}

# (b1) the probe names both servers within the connect timeout.
rm -rf out
start=$SECONDS
launch b1.txt GF_CONNECT_TIMEOUT=3
wait_exit "$SCRIPT" 30
[ "$STATUS" -eq 2 ] || { cat b1.txt; fail "(b1) status $STATUS, expected 2"; }
for i in 2 3; do
  grep -q "^  $NET.$i: no answer within 3 s: check the address" b1.txt || { cat b1.txt; fail "(b1) $NET.$i not named"; }
done
grep -q "Connection timed out" b1.txt || fail "(b1) ssh's own message missing: $(cat b1.txt)"
grep -q "2 of 2 remote server(s) unreachable .*nothing started" b1.txt || fail "(b1) no closing line: $(cat b1.txt)"
! grep -q "$NET.1:" b1.txt || fail "(b1) this host ($NET.1) was probed"
[ ! -e out/log/mpirun.log ] || fail "(b1) mpirun was started"
nothing_left "(b1)"
echo "(b1) the ssh probe named both unreachable servers; exit $STATUS after $((SECONDS - start)) s"

# (b2) without the probe, mpirun's own ssh gives up after ConnectTimeout and the script says why.
rm -rf out
start=$SECONDS
launch b2.txt GF_CONNECT_TIMEOUT=3 GF_PROBE=0
wait_exit "$SCRIPT" 30
[ "$STATUS" -ne 0 ] || { cat b2.txt; fail "(b2) exit status 0"; }
grep -q "command: mpirun .*--mca plm_rsh_agent 'ssh -o ConnectTimeout=3 -o BatchMode=yes'" b2.txt || fail "(b2) agent: $(grep command: b2.txt)"
grep -q "mpirun could not start its daemons over ssh" b2.txt || { cat b2.txt; fail "(b2) no ssh diagnosis"; }
grep -q "ssh: connect to host $NET.[23] port 22: Connection timed out" b2.txt || { cat b2.txt; fail "(b2) unreachable server not named"; }
nothing_left "(b2)"
echo "(b2) without the probe, mpirun's ssh timed out; exit $STATUS after $((SECONDS - start)) s, nothing left"

# (b3) an agent of the user's own (here from the environment) is kept, not doubled, and the probe
# uses it; GF_PROBE=1 probes in a dry run.
rm -rf out
launch b3.txt GF_DRY_RUN=1 GF_PROBE=1 OMPI_MCA_plm_rsh_agent="ssh -o ConnectTimeout=2 -o BatchMode=yes -o LogLevel=ERROR"
wait_exit "$SCRIPT" 30
[ "$STATUS" -eq 2 ] || { cat b3.txt; fail "(b3) status $STATUS, expected 2"; }
grep -q "your plm_rsh_agent 'ssh -o ConnectTimeout=2 -o BatchMode=yes -o LogLevel=ERROR' (from OMPI_MCA_plm_rsh_agent) is used as it is" b3.txt \
  || fail "(b3) the user's agent not reported: $(cat b3.txt)"
! grep -q "plm_rsh_agent 'ssh -o ConnectTimeout=10" b3.txt || fail "(b3) the script added its own agent: $(grep command: b3.txt)"
grep -q "checking ssh to 2 remote server(s) ($NET.2 $NET.3): ssh -o ConnectTimeout=2 -o BatchMode=yes -o LogLevel=ERROR HOST true" b3.txt \
  && grep -q "^  $NET.3: no answer: check the address" b3.txt || fail "(b3) probe: $(cat b3.txt)"
nothing_left "(b3)"
echo "(b3) the user's plm_rsh_agent kept and used by the probe (dry run with GF_PROBE=1)"

# (c) Ctrl-C: SIGINT to the script's process group, as a terminal sends it (job control on, so the
# script is a group of its own and does not ignore SIGINT).
ctrl_c() {  # ctrl_c NAME PATTERN ENV...: launch, wait for a process matching PATTERN, Ctrl-C, check
  local name=$1 pattern=$2; shift 2
  rm -rf out
  set -m
  launch "$name.txt" "$@"
  set +m
  local i
  for i in $(seq 1 100); do pgrep -f -- "$pattern" > /dev/null && break; sleep 0.1; done
  pgrep -f -- "$pattern" > /dev/null || { cat "$name.txt"; fail "($name) no process matching '$pattern' within 10 s"; }
  local t=$SECONDS
  kill -INT -- "-$SCRIPT"
  wait_exit "$SCRIPT" 15
  [ "$STATUS" -eq 130 ] || { cat "$name.txt"; fail "($name) status $STATUS after SIGINT, expected 130"; }
  nothing_left "($name)"
  echo "($name) Ctrl-C while '$pattern' ran: exit 130 after $((SECONDS - t)) s, nothing left"
}
mkdir -p tmp_c1
ctrl_c c1 "BatchMode=yes $MARK true" GF_CONNECT_TIMEOUT=60 TMPDIR="$WORK/tmp_c1"
[ -z "$(ls -A tmp_c1)" ] || fail "(c1) Ctrl-C during the probe left temporary files: $(ls tmp_c1)"
ctrl_c c2 "BatchMode=yes -x $MARK +orted" GF_CONNECT_TIMEOUT=60 GF_PROBE=0
if grep -q "stopping what is left of mpirun's session: ssh" c2.txt; then
  echo "(c2) (mpirun, stopped, had left its ssh children running; the script stopped them)"
fi
echo "run_distribute_launch: all checks passed"
