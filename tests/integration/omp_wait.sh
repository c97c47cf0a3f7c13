#!/usr/bin/env bash
# gridformer's OpenMP barrier wait (runner/cli/env_defaults.cpp, default_environment): libgomp itself reports the
# spin count it took (OMP_DISPLAY_ENV=verbose prints its settings when it loads, before main):
#  * with neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT set, libgomp spins 10000 pauses (its own default
#    is 300000), also in a rank started by mpirun;
#  * GOMP_SPINCOUNT and OMP_WAIT_POLICY set by the user are left as they are (active: libgomp's long spin);
#  * the setup log names the wait in force.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
# The environment as gridformer finds it without a user's settings (lib's OMP_NUM_THREADS=1 too: the runs below
# that need it set it themselves).
unset OMP_WAIT_POLICY GOMP_SPINCOUNT OMP_NUM_THREADS
# The last report is the one of the process that ran (a first one, libgomp's own default, is printed
# before gridformer re-executes itself with the variable set).
spin() { grep -o "GOMP_SPINCOUNT = '[0-9]*'" | tail -1; }
got="$(OMP_DISPLAY_ENV=verbose "$BIN" --help 2>&1 | spin)"
[ "$got" = "GOMP_SPINCOUNT = '10000'" ] || fail "environment unset: libgomp reports [$got], expected 10000"
echo "unset: $got"
got="$(GOMP_SPINCOUNT=777 OMP_DISPLAY_ENV=verbose "$BIN" --help 2>&1 | spin)"
[ "$got" = "GOMP_SPINCOUNT = '777'" ] || fail "GOMP_SPINCOUNT=777: libgomp reports [$got]"
echo "GOMP_SPINCOUNT=777: $got"
out="$(OMP_WAIT_POLICY=active OMP_DISPLAY_ENV=verbose "$BIN" --help 2>&1)"
got="$(spin <<< "$out")"
grep -q "OMP_WAIT_POLICY = 'ACTIVE'" <<< "$out" || fail "OMP_WAIT_POLICY=active not kept: $out"
case "$got" in "GOMP_SPINCOUNT = '10000'"|"GOMP_SPINCOUNT = '300000'"|"") fail "OMP_WAIT_POLICY=active: [$got]";; esac
echo "OMP_WAIT_POLICY=active: $got"
if command -v mpirun >/dev/null; then
  got="$(OMP_DISPLAY_ENV=verbose mpirun -np 1 --oversubscribe "$BIN" --help 2>&1 | spin)"
  [ "$got" = "GOMP_SPINCOUNT = '10000'" ] || fail "under mpirun: libgomp reports [$got]"
  echo "mpirun rank: $got"
fi
# The re-executed process keeps its name (pgrep, top and killall see "gridformer"): one waiting on stdin.
# Other tests' gridformer processes may run meanwhile: the one named gridformer must be this tokenize.
if [ -f "$VOCAB" ]; then
  (sleep 3 | "$BIN" tokenize --vocab-file "$VOCAB" --merge-file "$MERGES" > /dev/null) &
  sleep 1.5
  names="$(ps -eo comm,args | grep -- "tokenize --vocab-file" | grep -v grep || true)"
  pids="$(pgrep -a -x gridformer | grep -F -- "tokenize --vocab-file $VOCAB --merge-file $MERGES" || true)"
  wait
  [ -n "$pids" ] || fail "no process named gridformer while one ran ($names)"
  echo "process name: gridformer"
fi
# The setup log line of a one-step run.
cd "$SRC"
OMP_NUM_THREADS=1 "$BIN" train --config configs/gpt2/run_gpt2_tiny.yaml --set runner_config.train_steps=1 \
  --set "callbacks=[{type: MFLossMonitor, per_print_times: 1}]" --set output_dir="$WORK/out" > "$WORK/log" 2>&1 ||
  { cat "$WORK/log"; fail "train"; }
grep -q "OpenMP spin 10000 (gridformer's default GOMP_SPINCOUNT)" "$WORK/log" ||
  { grep "thread(s)" "$WORK/log"; fail "the setup log does not name the default spin"; }
OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive "$BIN" train --config configs/gpt2/run_gpt2_tiny.yaml --set runner_config.train_steps=1 \
  --set "callbacks=[{type: MFLossMonitor, per_print_times: 1}]" --set output_dir="$WORK/out2" > "$WORK/log2" 2>&1 ||
  { cat "$WORK/log2"; fail "train (passive)"; }
grep -q "thread(s), OMP_WAIT_POLICY=passive" "$WORK/log2" || { grep "thread(s)" "$WORK/log2"; fail "the log does not name OMP_WAIT_POLICY"; }
echo "omp_wait: ok"
