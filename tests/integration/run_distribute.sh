#!/usr/bin/env bash
# scripts/run_distribute.sh end to end on this (2-core) host: 8 ranks from a generated 8-device
# rank table train a tiny GPT-2; kill -9 of one rank stops every rank and the script names it;
# a rank table of the wrong size is refused (by the script and by the runner); SIGINT to the
# script stops every rank; bad arguments get usage messages; a multi-server table gets a hostfile;
# scripts/run_standalone.sh runs one rank.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
TOOL="$BUILD/bin/rank_table"
RUN="$SRC/scripts/run_distribute.sh"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
export GRIDFORMER_BIN="$BIN"
unset RANK_TABLE_FILE
# Every process this test starts has $WORK on its command line (the config path): lib's ours; none may outlive it.
KILL_AT_EXIT=1

write_config() {  # write_config FILE TRAIN_STEPS [DATA_PARALLEL]
  random_gpt2 "$1" out=./out steps="$2" batch=1 clip= warmup= optimizer= samples=16 model= top="parallel_config: {data_parallel: ${3:-8}}"
}
write_config "$WORK/short.yaml" 3
write_config "$WORK/long.yaml" 100000
write_config "$WORK/sixteen.yaml" 100000 16
"$TOOL" --device_num "[0,8)" --server_ip 127.0.0.1 --output_dir tables > /dev/null
"$TOOL" --device_num "[0,4)" --server_ip 127.0.0.1 --output_dir tables > /dev/null
T8=tables/hccl_8p_01234567_127.0.0.1.json
T4=tables/hccl_4p_0123_127.0.0.1.json

# wait_for_steps: until every rank's log shows a step (at most 30 s).
wait_for_steps() {
  for _ in $(seq 1 150); do
    local n=0
    for r in 0 1 2 3 4 5 6 7; do grep -q "step:\[" "out/log/rank_$r/gridformer.log" 2>/dev/null && n=$((n + 1)); done
    [ "$n" -eq 8 ] && return 0
    sleep 0.2
  done
  fail "not every rank logged a step within 30 s"
}
# (a) 8 ranks on 2 cores train; each rank logs where the table puts it.
start=$SECONDS
bash "$RUN" "$T8" "$WORK/short.yaml" "[0,8]" train > a.txt 2>&1 || { cat a.txt; cat out/log/mpirun.log; fail "(a) 8-rank run"; }
grep -q "8 ranks on 2 cores: oversubscribed, not bound" a.txt || fail "(a) placement: $(grep placement a.txt)"
grep -q "all 8 rank(s) finished" a.txt || fail "(a) no success line"
[ -s out/log/mpirun.log ] || fail "(a) no out/log/mpirun.log"
for r in 0 1 2 3 4 5 6 7; do
  log="out/log/rank_$r/gridformer.log"
  [ -s "$log" ] || fail "(a) no log for rank $r"
  grep -q "rank table .*hccl_8p_01234567_127.0.0.1.json: 8 ranks on 1 server(s); this rank: server 127.0.0.1 device $r" "$log" \
    || fail "(a) rank $r did not log its place in the table"
  grep -q "rank $r of 8, pid [0-9]*, 1 thread(s)" "$log" || fail "(a) rank $r did not log its pid"
done
[ "$(grep -c '"loss"' out/metrics.jsonl)" -eq 3 ] || fail "(a) expected 3 steps in metrics.jsonl"
echo "(a) 8 ranks trained in $((SECONDS - start)) s"

# (b) kill -9 of one rank: every rank stops, the script names the rank and exits non-zero.
rm -rf out
bash "$RUN" "$T8" "$WORK/long.yaml" "[0,8)" train > b.txt 2>&1 &
script=$!
wait_for_steps
victim=5
pid=$(sed -n 's/.*rank 5 of 8, pid \([0-9]*\),.*/\1/p' out/log/rank_$victim/gridformer.log | tail -1)
[ -n "$pid" ] || fail "(b) no pid in rank $victim's log"
kill -9 "$pid"
killed=$SECONDS
wait_exit "$script" 30; status=$STATUS
[ "$status" -eq 137 ] || { cat b.txt; fail "(b) the script exited $status after a rank was killed, expected 137 (mpirun's for a rank killed by signal 9)"; }
grep -q "rank $victim failed (exited on signal 9 (Killed))" b.txt || { cat b.txt; fail "(b) the output does not name rank $victim"; }
grep -q "last 20 lines of .*rank_$victim/gridformer.log" b.txt || fail "(b) no log tail"
[ "$(grep -c "\[rank $victim\]" b.txt)" -ge 1 ] || fail "(b) the tail is not rank $victim's log"
nothing_left "(b) after the kill" 0.5
echo "(b) kill -9 of rank $victim: script exited $status after $((SECONDS - killed)) s, nothing left running"

# (c) a table of the wrong size: the script refuses before starting; the runner refuses under plain mpirun.
run c1 bash "$RUN" "$T4" "$WORK/short.yaml" "[0,8)" train; s1=$STATUS
run c2 bash "$RUN" "$T4" "$WORK/short.yaml" "[0,4)" train 8; s2=$STATUS
run c3 env RANK_TABLE_FILE="$T4" mpirun -np 8 --oversubscribe "$BIN" train --config "$WORK/short.yaml"; s3=$STATUS
run c4 mpirun -np 8 --oversubscribe "$BIN" train --config "$WORK/short.yaml" --rank_table "$T4"; s4=$STATUS
[ "$s1" -eq 2 ] && grep -q 'DEVICE_RANGE \[0,8) has 8 device(s) but the rank table .* has 4 rank(s)' c1.log || fail "(c) range vs table: $s1 $(cat c1.log)"
[ "$s2" -eq 2 ] && grep -q 'RANK_SIZE 8 but the rank table .* has 4 rank(s)' c2.log || fail "(c) RANK_SIZE vs table: $s2 $(cat c2.log)"
for f in c3.log c4.log; do
  grep -q "rank table $T4 has 4 rank(s) but 8 rank(s) are running; start 4 ranks" $f || fail "(c) runner message: $(head -3 $f)"
  [ "$(grep -c '\[error\]' $f)" -eq 1 ] || fail "(c) expected one error line in $f"
done
[ "$s3" -eq 2 ] && [ "$s4" -eq 2 ] || fail "(c) runner status $s3/$s4, expected 2"
# One rank, a malformed table: the message names the entry.
sed 's/"rank_id": "3"/"rank_id": "three"/' "$T8" > bad.json
run c5 "$BIN" train --config "$WORK/short.yaml" --rank_table bad.json; s5=$STATUS
[ "$s5" -eq 2 ] && grep -q 'rank table bad.json: server_list\[0\].device\[3\].rank_id "three" is not a number' c5.log \
  || fail "(c) malformed table: $s5 $(cat c5.log)"
echo "(c) tables of the wrong size and malformed tables refused"

# (d) SIGINT (and SIGTERM) to the script stops every rank cleanly between steps. (Job control on: a background job of a
# non-interactive shell would ignore SIGINT.)
rm -rf out
set -m
bash "$RUN" "$T8" "$WORK/long.yaml" "[0,8)" train > d.txt 2>&1 &
script=$!
set +m
wait_for_steps
kill -INT "$script"
wait_exit "$script" 30; status=$STATUS
[ "$status" -eq 130 ] || { cat d.txt; fail "(d) SIGINT gave status $status, expected 130"; }
grep -q "stopped by SIGINT; all ranks stopped" d.txt || fail "(d) no stop line"
for r in 0 1 2 3 4 5 6 7; do
  grep -q "stopped by signal" "out/log/rank_$r/gridformer.log" || { tail -5 "out/log/rank_$r/gridformer.log"; tail -20 out/log/mpirun.log; cat d.txt; fail "(d) rank $r did not stop cleanly"; }
done
nothing_left "(d) after SIGINT" 0.5
# SIGTERM likewise (status 143).
rm -rf out
bash "$RUN" "$T8" "$WORK/long.yaml" "[0,8)" train > d2.txt 2>&1 &
script=$!
wait_for_steps
kill -TERM "$script"
wait_exit "$script" 30; status=$STATUS
[ "$status" -eq 143 ] || { cat d2.txt; fail "(d) SIGTERM gave status $status, expected 143"; }
[ "$(grep -l "stopped by signal 15" out/log/rank_*/gridformer.log | wc -l)" -eq 8 ] || fail "(d) not every rank stopped on SIGTERM"
nothing_left "(d) after SIGTERM" 0.5
echo "(d) SIGINT and SIGTERM stopped all 8 ranks"

# (e) arguments: usage and what is wrong, before anything starts.
usage_case() {  # usage_case "MESSAGE" ARGS...
  local want=$1; shift
  run e bash "$RUN" "$@"
  [ "$STATUS" -eq 2 ] || fail "(e) run_distribute.sh $* gave status $STATUS, expected 2"
  grep -qF -- "$want" e.log || fail "(e) run_distribute.sh $*: expected '$want' in: $(cat e.log)"
}
usage_case "usage: bash scripts/run_distribute.sh RANK_TABLE CONFIG DEVICE_RANGE RUN_MODE [RANK_SIZE]"
usage_case "expected 4 or 5 arguments, got 3" "$T8" short.yaml "[0,8)"
usage_case "RANK_TABLE 'nope.json' is not a file" nope.json short.yaml "[0,8)" train
usage_case "CONFIG 'nope.yaml' is not a file" "$T8" nope.yaml "[0,8)" train
usage_case "DEVICE_RANGE '0,8': expected" "$T8" short.yaml "0,8" train
usage_case "DEVICE_RANGE '[8,0)' is empty" "$T8" short.yaml "[8,0)" train
usage_case "RUN_MODE 'fit': expected train, finetune or eval" "$T8" short.yaml "[0,8)" fit
usage_case "RANK_SIZE 'x' is not a positive number" "$T8" short.yaml "[0,8)" train x
usage_case "server_list[0].device[3].rank_id \"three\" is not a number" bad.json short.yaml "[0,8)" train
printf 'model: {model_config: {num_layer: 2}}\n' > typo.yaml
usage_case "did you mean \`num_layers\`" "$T8" typo.yaml "[0,8)" train
echo "(e) bad arguments refused"

# (f) a two-server table: a hostfile from the server ids and mpirun's ssh agent (dry run; this host cannot reach them).
"$TOOL" --device_num "[0,8)" --server_ip 10.0.0.1 --output_dir tables > /dev/null
"$TOOL" --device_num "[0,8)" --server_ip 10.0.0.2 --output_dir tables > /dev/null
"$TOOL" merge tables/two.json tables/hccl_8p_01234567_10.0.0.1.json tables/hccl_8p_01234567_10.0.0.2.json > /dev/null
GF_DRY_RUN=1 bash "$RUN" tables/two.json "$WORK/sixteen.yaml" "[0,8)" train 16 > f.txt 2>&1 || { cat f.txt; fail "(f) dry run"; }
printf '10.0.0.1 slots=8\n10.0.0.2 slots=8\n' | cmp -s - out/log/hostfile || fail "(f) hostfile: $(cat out/log/hostfile)"
grep -q "command: mpirun -np 16 --hostfile ./out/log/hostfile --map-by slot" f.txt || fail "(f) command: $(grep command f.txt)"
grep -q "command: .* --mca plm_rsh_agent 'ssh -o ConnectTimeout=10 -o BatchMode=yes' " f.txt || fail "(f) ssh agent: $(grep command f.txt)"
# A dry run sends nothing to the servers (these addresses are not on this machine).
grep -q "remote servers not probed (10.0.0.1 10.0.0.2)" f.txt || fail "(f) the dry run should not probe: $(cat f.txt)"
GF_DRY_RUN=1 bash "$RUN" tables/two.json "$WORK/sixteen.yaml" "[8,16)" train 16 > f2.txt 2>&1 || fail "(f) second server's range"
grep -q "ranks 8..15 (server 10.0.0.2) are started by mpirun from the server of rank 0 (10.0.0.1) over ssh" f2.txt \
  && grep -q "GF_DRY_RUN=1: not waiting for the job; nothing to start here" f2.txt || fail "(f) the second server's range, dry run: $(cat f2.txt)"
# Not a dry run: it waits for the job from 10.0.0.1 (tests/integration/two_servers.sh runs one); none comes here.
run f3 env GF_JOIN_TIMEOUT=1 bash "$RUN" tables/two.json "$WORK/sixteen.yaml" "[8,16)" train 16
[ "$STATUS" -eq 2 ] && grep -q "no job from server 10.0.0.1 within 1 s in $WORK/out/log/job; nothing ran here" f3.log \
  || fail "(f) the second server's range without a job: status $STATUS, $(cat f3.log)"
usage_case "pass RANK_SIZE 16 as the 5th argument" tables/two.json short.yaml "[0,8)" train
usage_case "DEVICE_RANGE [4,12) is not the rank range of any server" tables/two.json short.yaml "[4,12)" train 16
nothing_left "(f) a dry run" 0
echo "(f) two-server table: hostfile written, other servers start nothing"

# (g) run_standalone.sh: one rank, RANK_TABLE_FILE ignored.
run g0 env RANK_TABLE_FILE="$T8" bash "$SRC/scripts/run_standalone.sh" "$WORK/short.yaml" train --bogus
((STATUS == 2)) && grep -qF "run_standalone.sh: expected 2 arguments, got 3" g0.log || fail "(g) run_standalone.sh took 3 arguments: status $STATUS, $(cat g0.log)"
rm -rf out
run g env RANK_TABLE_FILE="$T8" bash "$SRC/scripts/run_standalone.sh" "$WORK/short.yaml" train
((STATUS == 2)) || fail "(g) data_parallel 8 on one rank: status $STATUS, expected 2"
grep -q "a layout that fits 1 rank(s): parallel_config: {data_parallel: 1, model_parallel: 1" g.log || fail "(g) layout message: $(cat g.log)"
sed 's/data_parallel: 8/data_parallel: 1/' "$WORK/short.yaml" > "$WORK/one.yaml"
RANK_TABLE_FILE="$T8" bash "$SRC/scripts/run_standalone.sh" "$WORK/one.yaml" train > g.txt 2>&1 || { cat g.txt; fail "(g) standalone run"; }
grep -q "rank table" out/log/rank_0/gridformer.log && fail "(g) the standalone run read RANK_TABLE_FILE"
[ "$(grep -c '"loss"' out/metrics.jsonl)" -eq 3 ] || fail "(g) expected 3 steps"
echo "(g) run_standalone.sh ran one rank"
echo "run_distribute: all checks passed"
