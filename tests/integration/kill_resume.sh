#!/usr/bin/env bash
# Killed at random moments, nothing is lost (the Resilience issue): "20 kills with SIGKILL at random
# moments of a 2-rank run (each followed by a resume) end with the uninterrupted run's losses and
# weights bit for bit."
# The run: GPT-2, dp2, dropout on, cosine lr with warmup, clipping, 200 steps over 4 epochs of the
# data, a checkpoint every 2 steps, keep_checkpoint_max 2; each start draws async_save True or False
# (two config files), so the resumes cross both save paths. It is started with resume_training: True
# and no load_checkpoint (its own checkpoint/latest, or step 1 while there is none); one of its rank
# processes (rank drawn at random) gets SIGKILL; mpirun takes the job down (the other rank gets
# SIGCONT, SIGTERM a second later, SIGKILL another second later: 2 s of the ~3 s a kill costs here;
# any rank left is killed here); it is started again, until 20 kills have hit a live rank process
# (one that was running, and mpirun failed); the 21st start runs to the end.
# The moments, drawn from a seed: 1 in 4 during start-up (1-700 ms after mpirun starts, or at this
# start's first logged step if that comes sooner; a rank not yet exec'd is killed as soon as it is:
# MPI start-up, checkpoint reading), 3 in 4 during training (1-6 steps of this start logged, then
# 0-40 ms: mid-step, mid-save, mid-commit; with a save every 2 steps one is being written most of the
# time). Counted in steps, the kills move the run ~2-4 steps on each (at most ~10): the 20 leave most
# of the 200 steps to the last start, so the run does not reach its end before the 20th kill.
# Checked: every step 1..200 is in metrics.jsonl (appended by each start), and the last line of each
# step has the uninterrupted run's loss and grad_norm, the same doubles (repr); the final weights
# (--save-weights) are byte-identical (cmp) to the uninterrupted run's; the last start resumed from a
# checkpoint; no `.tmp` left in checkpoint/.
# Printed: the seed (KILL_RESUME_SEED=N draws another plan; the machine's timing still varies), each
# kill (rank, moment, the last step logged and `latest` when it landed, any `.tmp` in checkpoint/,
# what the next start resumed from), and the time taken.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
KILL_AT_EXIT=1
declare -a SUMMARY=()
fail() { [ "${#SUMMARY[@]}" -eq 0 ] || printf '%s\n' "${SUMMARY[@]}"; echo "FAIL: $*"; exit 1; }  # lib.sh's fail, the kills so far printed first
KILLS=20 STEPS=200
SEED="${KILL_RESUME_SEED:-20250611}"
RANDOM="$SEED"
T0=$SECONDS

for a in True False; do
  random_gpt2 "async_$a.yaml" seed=3 steps=$STEPS batch=4 lr_end= optimizer= samples=400 top="parallel_config: {data_parallel: 2}" \
    ckpt="prefix: tiny, save_checkpoint_steps: 2, keep_checkpoint_max: 2, async_save: $a"
done
# The run's output directories are absolute paths under WORK, so that the ranks found by their
# command line are this test's (other tests' gridformer processes may come and go meanwhile).
start() {  # OUT ASYNC [--set ...]: 2 ranks into OUT in the background (pid in $job); the final weights in OUT/w.safetensors
  local out=$1 a=$2; shift 2
  mpirun -np 2 --oversubscribe "$BIN" train --config "async_$a.yaml" --set "output_dir=$out" \
    --save-weights "$out/w.safetensors" "$@" >> "$out.log" 2>&1 &
  job=$!
}
last_step() { { grep '"loss":' "$1/metrics.jsonl" 2>/dev/null || true; } | tail -1 | sed -n 's/.*"step":\([0-9]*\).*/\1/p'; }
# The timing-critical waits below use bash builtins only: on 2 cores beside 2 ranks that spin in MPI,
# every fork (pgrep, grep, sleep) can cost tens of milliseconds, i.e. steps.
now_ms() { local t=${EPOCHREALTIME//[.,]/}; NOW=$((t / 1000)); }  # sets NOW
exec {NAP}<> <(:)  # a pipe nobody writes to: `read -t S -u $NAP` sleeps S seconds without a fork
nap_ms() { local t; printf -v t '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); read -r -t "$t" -u "$NAP" _ || true; }
# find_rank R: sets pid to this start's rank R (a child of mpirun $job, once it runs gridformer: its
# environment has OMPI_COMM_WORLD_RANK), or to "" while there is none
find_rank() {
  local f p e k kids=()
  pid=""
  for f in /proc/"$job"/task/*/children; do
    k=(); { read -r -a k < "$f"; } 2>/dev/null || true
    kids+=("${k[@]}")
  done
  for p in "${kids[@]}"; do
    { while IFS= read -r -d '' e; do
        if [ "$e" = "OMPI_COMM_WORLD_RANK=$1" ]; then pid=$p; return 0; fi
      done < "/proc/$p/environ"; } 2>/dev/null || true
  done
  return 0
}
# wait_lines N DEADLINE: until N step lines of this start (the lines of metrics.jsonl after its first
# $lines0, through tail -F: inotify, else polling every 50 ms), the end of mpirun ($job: tail ends with it), or the
# time DEADLINE (ms, as NOW; 0: none), whichever comes first. bash's read takes each line as it comes
# (grep -m N > /dev/null would read on to the end of its input).
wait_lines() {
  local c=0 line left t
  while [ "$c" -lt "$1" ]; do
    if [ "$2" -gt 0 ]; then
      now_ms; left=$(($2 - NOW))
      [ "$left" -gt 0 ] || break
      printf -v t '%d.%03d' $((left / 1000)) $((left % 1000))
      IFS= read -r -t "$t" line || break
    else
      IFS= read -r line || break
    fi
    if [[ $line == *'"loss":'* ]]; then c=$((c + 1)); fi
  done < <(tail --pid="$job" -s 0.05 -n "+$((lines0 + 1))" -F "$RUN/metrics.jsonl" 2>/dev/null)
  return 0
}
# wait_exit PID: waits for mpirun (at most 60 s) and sets $status
wait_exit() {
  local i
  for i in $(seq 1 1200); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$1" 2>/dev/null; then
    # What mpirun and its children were doing (state, kernel wait channel), for the report: a rank in D state (an
    # fsync under load) cannot die until its syscall returns; mpirun in S waits for its children or their output.
    echo "mpirun $1 still running 60 s after the kill; its process tree:"
    ps -o pid,ppid,stat,wchan:24,etime,args --ppid "$1" -p "$1" 2>/dev/null | cut -c1-200 || true
    for c in $(pgrep -P "$1" || true); do ps -o pid,ppid,stat,wchan:24,etime,args --ppid "$c" 2>/dev/null | tail -n +2 | cut -c1-200; done
    kill -KILL "$1" 2>/dev/null || true
    fail "mpirun did not exit within 60 s of a rank's SIGKILL"
  fi
  status=0; wait "$1" || status=$?
}
# no_ranks_left OUT: any rank mpirun left behind is killed, and gone
no_ranks_left() {
  local p i left
  for i in $(seq 1 100); do
    left=$(ranks_of "$1")
    [ -z "$left" ] && return 0
    for p in $left; do kill -KILL "$p" 2>/dev/null || true; done
    sleep 0.05
  done
  fail "rank processes of $1 survive SIGKILL: $left"
}

# The plan, drawn in this shell from the seed (the kills' ranks and moments, each start's async_save).
declare -a K_RANK K_MODE K_STEPS K_MS ASYNC
for i in $(seq 1 $KILLS); do
  K_RANK[i]=$((RANDOM % 2))
  if [ $((RANDOM % 4)) -eq 0 ]; then K_MODE[i]=startup; K_STEPS[i]=0; K_MS[i]=$((1 + RANDOM % 700))
  else K_MODE[i]=train; K_STEPS[i]=$((1 + RANDOM % 6)); K_MS[i]=$((RANDOM % 41)); fi
done
for i in $(seq 1 $((KILLS + 1))); do if [ $((RANDOM % 2)) -eq 0 ]; then ASYNC[i]=True; else ASYNC[i]=False; fi; done
echo "seed $SEED (KILL_RESUME_SEED=$SEED reproduces this plan)"

# The uninterrupted reference.
start "$WORK/ref" True
wait_exit "$job"
[ "$status" -eq 0 ] || { tail -20 ref.log; fail "the reference run failed (status $status)"; }
echo "reference: $STEPS steps in $((SECONDS - T0)) s"

RUN="$WORK/run"
mkdir -p "$RUN"
: > "$RUN/metrics.jsonl"  # there from the start, so that tail -F follows it by inotify (the runner appends to it)
kills=0 starts=0
while [ "$kills" -lt "$KILLS" ]; do
  starts=$((starts + 1))
  i=$((kills + 1))
  r=${K_RANK[i]}
  echo "=== start $starts (async_save: ${ASYNC[starts]}), kill $i planned: rank $r, ${K_MODE[i]} ${K_STEPS[i]} steps + ${K_MS[i]} ms" >> run.log
  lines0=$( { wc -l < "$RUN/metrics.jsonl"; } 2>/dev/null || echo 0)
  now_ms; t_launch=$NOW
  start "$RUN" "${ASYNC[starts]}" --set resume_training=True
  pid=""
  if [ "${K_MODE[i]}" = startup ]; then  # the deadline, or this start's first step if that comes first
    wait_lines 1 $((t_launch + K_MS[i]))
    moment="start-up, ${K_MS[i]} ms"
  else  # the rank's pid first (it is there long before its first step), then K steps and M ms
    until find_rank "$r"; [ -n "$pid" ] || ! kill -0 "$job" 2>/dev/null; do nap_ms 5; done
    wait_lines "${K_STEPS[i]}" 0
    nap_ms "${K_MS[i]}"
    moment="${K_STEPS[i]} steps + ${K_MS[i]} ms"
  fi
  # SIGKILL to the chosen rank (as soon as it runs); counted only when it reached it alive.
  hit=""
  while kill -0 "$job" 2>/dev/null; do
    [ -n "$pid" ] || find_rank "$r"
    st=""; if [ -n "$pid" ]; then { read -r _ _ st _ < "/proc/$pid/stat"; } 2>/dev/null || true; fi
    if [ -n "$st" ] && [ "$st" != Z ] && kill -KILL "$pid" 2>/dev/null; then hit=$pid; break; fi
    nap_ms 2
  done
  now_ms; t_kill=$((NOW - t_launch))
  at_step=$(last_step "$RUN"); at_latest=$(cat "$RUN/checkpoint/latest" 2>/dev/null || echo none)
  tmps=$(ls -A "$RUN/checkpoint" 2>/dev/null | grep '\.tmp$' | tr '\n' ' ' || true); tmps=${tmps% }
  wait_exit "$job"
  no_ranks_left "$RUN"
  if [ -n "$hit" ] && [ "$status" -ne 0 ]; then
    kills=$((kills + 1))
    SUMMARY[kills]="kill $kills (start $starts, async_save ${ASYNC[starts]}): rank $r at $t_kill ms ($moment); last step logged ${at_step:-none}, latest ${at_latest}${tmps:+, in the directory: $tmps}"
    echo "=== killed rank $r (pid $hit) at $t_kill ms; mpirun status $status" >> run.log
  elif [ "$status" -eq 0 ]; then
    fail "the run finished (start $starts) after $kills kills: the kill plan let it reach step $STEPS"
  else
    tail -30 run.log; fail "start $starts ended with status $status before the kill: it failed by itself"
  fi
done
# The last start, to the end.
starts=$((starts + 1))
echo "=== start $starts (async_save: ${ASYNC[starts]}), to the end" >> run.log
start "$RUN" "${ASYNC[starts]}" --set resume_training=True
wait_exit "$job"
[ "$status" -eq 0 ] || { tail -30 run.log; fail "the last start failed (status $status)"; }

# What each start resumed from (run.log holds every start's log, in order): a checkpoint, step 1 when
# there was none yet, or neither when it was killed before it got that far.
mapfile -t FROM < <(awk '/^=== start /{n++} /resumed from |no checkpoint under .* yet/{if (!(n in f)) f[n]=$0} END {for (s = 1; s <= n; s++) print (s in f) ? f[s] : "-"}' run.log \
  | sed -e 's/.*resumed from [^ ]*\/\([^/: ]*\): step \([0-9]*\).*/\1/' -e 's/.*no checkpoint under .* yet.*/nothing: step 1/' -e 's/^-$/nothing: killed before it read one/')
[[ ${FROM[starts - 1]} == tiny-* ]] || fail "the last start did not resume from a checkpoint (${FROM[starts - 1]})"

# The last line of each step against the reference.
"$PY" - "$RUN/metrics.jsonl" "$WORK/ref/metrics.jsonl" "$STEPS" <<'PY' || fail "the losses differ from the uninterrupted run's (above)"
import json, sys
def steps(path):
    last = {}
    for n, line in enumerate(open(path), 1):
        try:
            j = json.loads(line)
        except ValueError:
            sys.exit(f"{path}:{n}: not a JSON line: {line!r}")
        if "loss" in j:
            last[j["step"]] = (repr(j["loss"]), repr(j["grad_norm"]))
    return last
run, ref, n = steps(sys.argv[1]), steps(sys.argv[2]), int(sys.argv[3])
missing = [s for s in range(1, n + 1) if s not in run]
if missing or sorted(ref) != list(range(1, n + 1)):
    sys.exit(f"steps missing: {missing[:10]} (the reference has {len(ref)} steps)")
bad = [s for s in range(1, n + 1) if run[s] != ref[s]]
for s in bad[:10]:
    print(f"step {s}: loss, grad_norm {run[s]} after the kills, {ref[s]} uninterrupted")
sys.exit(1 if bad else 0)
PY
cmp "$RUN/w.safetensors" "$WORK/ref/w.safetensors" || fail "the final weights differ from the uninterrupted run's"
left=$(ls -A "$RUN/checkpoint" | grep '\.tmp$' || true)
[ -z "$left" ] || fail "temporary save directories are left: $left"

for k in $(seq 1 "$kills"); do echo "${SUMMARY[k]}; start $((k + 1)) resumed from ${FROM[k]}"; done
echo "PASS: $kills SIGKILLs (rank 0: $(printf '%s\n' "${SUMMARY[@]}" | grep -c 'rank 0 at'), rank 1: $(printf '%s\n' "${SUMMARY[@]}" | grep -c 'rank 1 at')), $starts starts: steps 1-$STEPS bitwise the uninterrupted run's losses and grad norms, final weights byte-identical; $((SECONDS - T0)) s"
