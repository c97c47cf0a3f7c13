#!/usr/bin/env bash
# A hang names its rank (the Hosts issue's item 5, parallel.hang_timeout, parallel/watchdog.h): one rank
# of a training run is frozen with SIGSTOP mid-run and
#  (a) 4 ranks, dp2 x mp2 (collectives), world rank 2 stopped: the job ends within hang_timeout and a
#      margin with status 6; one summary line names world rank 2, and only it, and the call (group, op,
#      sequence number) that a live rank reports it waits in for rank 2; every live rank reports what it
#      waits for and its last calls; no rank of the run is left;
#  (b) 2 ranks, pp2 (point-to-point), world rank 0 stopped by itself just before its pipeline send of micro-batch
#      1 at step 25 (GF_PIPELINE_FAULT, engine/step_engine.cpp), so that rank 1 waits in the matching receive: the
#      same, the summary written by rank 1 (the lowest live rank) and naming that message: the send matching
#      world rank 1's pp recv, its tag and bytes. (Frozen at a random moment, rank 1 waited in the step's world
#      all-reduce 3 times of 3.)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
KILL_AT_EXIT=1  # a frozen rank left by a failure is woken and killed
TIMEOUT=5   # parallel.hang_timeout, seconds
random_gpt2 tiny.yaml seed=3 steps=1000000 batch=4 clip= lr_end= optimizer= samples=400 model=
pid_of_rank() {  # OUT R: world rank R's pid, from its log ("rank R of N, pid P"), if it is one of the run's ranks
  local p
  p=$(sed -n "s/.*\] rank $2 of [0-9]*, pid \([0-9]*\),.*/\1/p" "$1/log/rank_$2/gridformer.log" | head -1)
  [ -n "$p" ] && ranks_of "$1" | grep -x "$p" > /dev/null && echo "$p"
  return 0
}

# hang CASE NP STOP [--set ...]: NP ranks into CASE, world rank STOP frozen after step 20 (SELF_STOP=1: the
# rank stops itself, by the pipeline fault, and this waits for its stopped state); checks the end.
hang() {
  local c=$1 np=$2 stop=$3; shift 3
  mpirun -np "$np" --oversubscribe "$BIN" train --config tiny.yaml --set "output_dir=$WORK/$c" \
    --set parallel.hang_timeout=$TIMEOUT "$@" > "$c.log" 2>&1 &
  local job=$! pid t0 t1 status=0
  wait_step "$c" 20 1200
  pid=$(pid_of_rank "$WORK/$c" "$stop")
  [ -n "$pid" ] || fail "($c) no running rank $stop"
  if [ -n "${SELF_STOP:-}" ]; then
    local state=""
    for _ in $(seq 1 1200); do
      state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
      [ "$state" = T ] && break
      sleep 0.01
    done
    [ "$state" = T ] || fail "($c) rank $stop did not stop itself (state '$state')"
    t0=$(date +%s.%N)
  else
    t0=$(date +%s.%N)
    kill -STOP "$pid"
  fi
  wait "$job" || status=$?
  t1=$(date +%s.%N)
  kill -CONT "$pid" 2>/dev/null || true
  local took; took=$("$PY" -c "print(round($t1 - $t0, 1))")
  [ "$status" -eq 6 ] || { tail -30 "$c.log"; fail "($c) status $status, expected 6 (a hang)"; }
  "$PY" -c "import sys; sys.exit(0 if $took <= $TIMEOUT + 20 else 1)" \
    || fail "($c) the job ended $took s after the stop (hang_timeout $TIMEOUT s + 20 s allowed)"
  "$PY" -c "import sys; sys.exit(0 if $took >= $TIMEOUT else 1)" || fail "($c) the job ended $took s after the stop, before hang_timeout"
  # Nothing of the run is left (mpirun has killed the stopped rank too).
  for _ in $(seq 1 100); do [ -z "$(ranks_of "$WORK/$c")" ] && break; sleep 0.1; done
  [ -z "$(ranks_of "$WORK/$c")" ] || fail "($c) ranks left running: $(ranks_of "$WORK/$c")"
  # One summary line, naming the stopped rank only.
  local summary
  summary=$(grep "hang: world rank .* did not arrive at" "$c.log" || true)
  [ "$(printf '%s\n' "$summary" | grep -c 'did not arrive')" -eq 1 ] || { grep "hang:" "$c.log"; fail "($c) not one summary line"; }
  [ "$(printf '%s' "$summary" | grep -o 'did not arrive' | wc -l)" -eq 1 ] || fail "($c) the summary names more than one rank: $summary"
  printf '%s' "$summary" | grep -q "hang: world rank $stop (host [^)]*) did not arrive at " \
    || fail "($c) the summary does not name world rank $stop: $summary"
  printf '%s' "$summary" | grep -q "ending the job with exit status 6" || fail "($c) the summary does not give the status: $summary"
  echo "($c) $np ranks, world rank $stop stopped: status 6 after $took s; $summary" | sed 's/^\(.\{400\}\).*/\1.../'
  SUMMARY=$summary
}

# every live rank reported its wait and its last calls
reported() {  # CASE RANK...
  local c=$1 r; shift
  for r in "$@"; do
    grep -q "hang: rank $r (host [^,]*, pid [0-9]*) has waited [0-9.]* s in " "$c.log" || { grep "hang:" "$c.log"; fail "($c) rank $r did not report its wait"; }
    grep -q "hang:   rank $r [a-z-]* (rank [0-9]* of [0-9]*, [0-9]* collectives, [0-9]* sends, [0-9]* receives): .* #[0-9]* " "$c.log" \
      || fail "($c) rank $r did not list its last calls"
  done
}

# (a) dp2 x mp2, world rank 2 stopped.
hang a 4 2 --set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2
reported a 0 1 3
call=$(printf '%s' "$SUMMARY" | sed -n 's/.*did not arrive at \([a-z-]* [a-z-]* #[0-9]*\) ([0-9]* bytes).*/\1/p')
[ -n "$call" ] || fail "(a) the summary names no collective call (group op #seq): $SUMMARY"
# A started all-reduce (a gradient bucket) names its tag after the call: "... #113 tag 0 (19456 bytes)".
grep -q "has waited [0-9.]* s in $call \(tag [0-9]* \)\?(.*, for world rank 2 " a.log || { grep "hang:" a.log; fail "(a) no live rank waits for rank 2 in $call"; }
echo "(a) ranks 0, 1, 3 reported their waits and last calls; rank 2 named at $call, where a live rank waits for it"

# (b) pp2, world rank 0 stopped by itself before a pipeline send: rank 1 reports alone and writes the summary.
GF_PIPELINE_FAULT=stop-before-send GF_PIPELINE_FAULT_STEP=25 SELF_STOP=1 \
  hang b 2 0 --set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=4
reported b 1
printf '%s' "$SUMMARY" | grep -Eq "did not arrive at the send matching world rank 1's pp recv #[0-9]+ \(tag [0-9]+, [0-9]+ bytes\)" \
  || fail "(b) the summary does not name the pipeline receive rank 1 waits in: $SUMMARY"
grep -q "^\[rank 1\] hang: world rank 0 " b.log || fail "(b) the summary was not written by rank 1"
echo "(b) rank 1 reported and wrote the summary"
