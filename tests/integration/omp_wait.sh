#!/usr/bin/env bash
# gridformer's OpenMP barrier wait (runner/cli/env_defaults.cpp, default_environment): libgomp itself reports the
# spin count it took (OMP_DISPLAY_ENV=verbose prints its settings when it loads, before main):
#  * with neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT set, libgomp spins 10000 pauses (its own default
#    is 300000), also in a rank started by mpirun;
#  * GOMP_SPINCOUNT and OMP_WAIT_POLICY set by the user are left as they are (active: libgomp's long spin);
#  * the setup log names the wait in force.
set -euo pipefail
BUILD="$1"; SRC="$2"
BIN="$BUILD/bin/gridformer"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMP_WAIT_POLICY GOMP_SPINCOUNT
# The last report is the one of the process that ran (a first one, libgomp's own default, is printed
# before gridformer re-executes itself with the variable set).
spin() { grep -o "GOMP_SPINCOUNT = '[0-9]*'" | tail -1; }
got="$(OMP_DISPLAY_ENV=verbose "$BIN" --help 2>&1 | spin)"
[ "$got" = "GOMP_SPINCOUNT = '10000'" ] || { echo "FAIL: environment unset: libgomp reports [$got], expected 10000"; exit 1; }
echo "unset: $got"
got="$(GOMP_SPINCOUNT=777 OMP_DISPLAY_ENV=verbose "$BIN" --help 2>&1 | spin)"
[ "$got" = "GOMP_SPINCOUNT = '777'" ] || { echo "FAIL: GOMP_SPINCOUNT=777: libgomp reports [$got]"; exit 1; }
echo "GOMP_SPINCOUNT=777: $got"
out="$(OMP_WAIT_POLICY=active OMP_DISPLAY_ENV=verbose "$BIN" --help 2>&1)"
got="$(spin <<< "$out")"
grep -q "OMP_WAIT_POLICY = 'ACTIVE'" <<< "$out" || { echo "FAIL: OMP_WAIT_POLICY=active not kept: $out"; exit 1; }
case "$got" in "GOMP_SPINCOUNT = '10000'"|"GOMP_SPINCOUNT = '300000'"|"") echo "FAIL: OMP_WAIT_POLICY=active: [$got]"; exit 1;; esac
echo "OMP_WAIT_POLICY=active: $got"
if command -v mpirun >/dev/null; then
  got="$(OMP_DISPLAY_ENV=verbose mpirun -np 1 --oversubscribe "$BIN" --help 2>&1 | spin)"
  [ "$got" = "GOMP_SPINCOUNT = '10000'" ] || { echo "FAIL: under mpirun: libgomp reports [$got]"; exit 1; }
  echo "mpirun rank: $got"
fi
# The re-executed process keeps its name (pgrep, top and killall see "gridformer"): one waiting on stdin.
V="$SRC/data/gpt2/gpt2-vocab.json"; M="$SRC/data/gpt2/gpt2-merges.txt"
if [ -f "$V" ]; then
  (sleep 3 | "$BIN" tokenize --vocab-file "$V" --merge-file "$M" > /dev/null) &
  sleep 1.5
  names="$(ps -eo comm,args | grep -- "tokenize --vocab-file" | grep -v grep || true)"
  pids="$(pgrep -x gridformer || true)"
  wait
  [ -n "$pids" ] || { echo "FAIL: no process named gridformer while one ran ($names)"; exit 1; }
  echo "process name: gridformer"
fi
# The setup log line of a one-step run.
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
cd "$SRC"
OMP_NUM_THREADS=1 "$BIN" train --config configs/gpt2/run_gpt2_tiny.yaml --set runner_config.train_steps=1 \
  --set "callbacks=[{type: MFLossMonitor, per_print_times: 1}]" --set output_dir="$WORK/out" > "$WORK/log" 2>&1 ||
  { cat "$WORK/log"; echo "FAIL: train"; exit 1; }
grep -q "OpenMP spin 10000 (gridformer's default GOMP_SPINCOUNT)" "$WORK/log" ||
  { grep "thread(s)" "$WORK/log"; echo "FAIL: the setup log does not name the default spin"; exit 1; }
OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive "$BIN" train --config configs/gpt2/run_gpt2_tiny.yaml --set runner_config.train_steps=1 \
  --set "callbacks=[{type: MFLossMonitor, per_print_times: 1}]" --set output_dir="$WORK/out2" > "$WORK/log2" 2>&1 ||
  { cat "$WORK/log2"; echo "FAIL: train (passive)"; exit 1; }
grep -q "thread(s), OMP_WAIT_POLICY=passive" "$WORK/log2" || { grep "thread(s)" "$WORK/log2"; echo "FAIL: the log does not name OMP_WAIT_POLICY"; exit 1; }
echo "omp_wait: ok"
