#!/usr/bin/env bash
# Starts gridformer's ranks from a MindFormers rank table under OpenMPI's mpirun, with
# MindFormers' arguments, and supervises them: one rank failing stops all of them, the script
# names it and shows the end of its log. See docs/distributed.md.
set -uo pipefail

PROG=run_distribute.sh
usage() {
  cat >&2 <<'EOF'
usage: bash scripts/run_distribute.sh RANK_TABLE CONFIG DEVICE_RANGE RUN_MODE [RANK_SIZE]

  RANK_TABLE    MindFormers/HCCL rank table JSON (build/bin/rank_table --device_num "[0,8)" writes one)
  CONFIG        YAML config (MindFormers layout)
  DEVICE_RANGE  "[START,END)" or "[START,END]": both mean START..END-1, as in MindFormers.
                One-server table: the devices of this server (END-START ranks).
                Multi-server table: one server's global rank ids, e.g. [8,16) for the second of 8-device servers.
  RUN_MODE      train | finetune | eval (passed as --set run_mode=RUN_MODE)
  RANK_SIZE     total ranks (default END-START); give it for a multi-server table

Starts `mpirun -np RANK_SIZE gridformer train --config CONFIG --set run_mode=RUN_MODE` with
RANK_TABLE_FILE=RANK_TABLE; mpirun's output goes to <output_dir>/log/mpirun.log, each rank's log to
<output_dir>/log/rank_N/gridformer.log (output_dir from the config, default ./output).

environment:
  GRIDFORMER_BIN  the gridformer binary (default: <this script's dir>/../build/bin/gridformer)
  RANK_TABLE_BIN  the rank_table tool (default: next to GRIDFORMER_BIN)
  MPIRUN          mpirun to use (default: mpirun); MPIRUN_ARGS: extra mpirun options (split on spaces)
  GF_STOP_TIMEOUT seconds to wait for the ranks after SIGINT/SIGTERM before killing mpirun (default 20)
  GF_DRY_RUN=1    check everything, write the hostfile/rankfile, print the mpirun command, start nothing
EOF
  exit "${1:-2}"
}
say() { echo "$PROG: $*" >&2; }
die() { echo "$PROG: error: $*" >&2; exit 2; }

[ $# -ge 1 ] && { [ "$1" = "-h" ] || [ "$1" = "--help" ]; } && usage 0
[ $# -eq 4 ] || [ $# -eq 5 ] || { echo "$PROG: expected 4 or 5 arguments, got $#" >&2; usage; }
TABLE=$1 CONFIG=$2 RANGE=$3 RUN_MODE=$4 RANK_SIZE_ARG=${5:-}

# ---- arguments ----------------------------------------------------------------------------------
[ -f "$TABLE" ] || die "RANK_TABLE '$TABLE' is not a file (write one: build/bin/rank_table --device_num \"[0,8)\")"
[ -f "$CONFIG" ] || die "CONFIG '$CONFIG' is not a file"
TABLE=$(realpath "$TABLE") CONFIG=$(realpath "$CONFIG")
range_re='^\[[[:space:]]*([0-9]+)[[:space:]]*,[[:space:]]*([0-9]+)[[:space:]]*[])]$'
[[ $RANGE =~ $range_re ]] || die "DEVICE_RANGE '$RANGE': expected \"[START,END)\" or \"[START,END]\" such as \"[0,8)\""
START=$((10#${BASH_REMATCH[1]})) END=$((10#${BASH_REMATCH[2]}))
((START < END)) || die "DEVICE_RANGE '$RANGE' is empty: END must be greater than START (devices START..END-1)"
WIDTH=$((END - START))
case "$RUN_MODE" in
  train | finetune | eval | predict) ;;
  *) die "RUN_MODE '$RUN_MODE': expected train, finetune or eval" ;;
esac
if [ -n "$RANK_SIZE_ARG" ]; then
  [[ $RANK_SIZE_ARG =~ ^[1-9][0-9]*$ ]] || die "RANK_SIZE '$RANK_SIZE_ARG' is not a positive number"
  RANK_SIZE=$RANK_SIZE_ARG
else
  RANK_SIZE=$WIDTH
fi

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN=${GRIDFORMER_BIN:-$HERE/../build/bin/gridformer}
TOOL=${RANK_TABLE_BIN:-$(dirname "$BIN")/rank_table}
[ -x "$BIN" ] || die "no gridformer binary at $BIN: build it (cmake -S . -B build && cmake --build build -j) or set GRIDFORMER_BIN"
[ -x "$TOOL" ] || die "no rank_table tool at $TOOL: build it with gridformer, or set RANK_TABLE_BIN"
MPIRUN=${MPIRUN:-mpirun}
command -v "$MPIRUN" >/dev/null || die "$MPIRUN not found (Debian: apt-get install openmpi-bin), or set MPIRUN"

# ---- the rank table -----------------------------------------------------------------------------
summary=$("$TOOL" check "$TABLE" 2>&1) || die "${summary#error: }"
N=$(sed -n '1s/.* \([0-9]*\) rank(s) on [0-9]* server(s)$/\1/p' <<<"$summary")
mapfile -t SERVER_LINES < <(grep '^server ' <<<"$summary")
S=${#SERVER_LINES[@]}
SERVER_IDS=() SERVER_COUNTS=() SERVER_RANKS=() SERVER_DEVICES=()
for line in "${SERVER_LINES[@]}"; do
  read -r _ _ id _ count _ ranks _ devices <<<"$line"
  SERVER_IDS+=("$id") SERVER_COUNTS+=("$count") SERVER_RANKS+=("$ranks") SERVER_DEVICES+=("$devices")
done

# ---- does the range fit the table? --------------------------------------------------------------
if ((S == 1)); then
  ((WIDTH == N)) || die "DEVICE_RANGE $RANGE has $WIDTH device(s) but the rank table $TABLE has $N rank(s); use \"[0,$N)\", or write a table for $WIDTH: rank_table --device_num \"$RANGE\""
  ((RANK_SIZE == N)) || die "RANK_SIZE $RANK_SIZE but the rank table $TABLE has $N rank(s) (DEVICE_RANGE $RANGE has $WIDTH); give RANK_SIZE $N or leave it out"
else
  # mpirun places ranks on the hosts of the hostfile in order, so every server must hold the next
  # block of rank ids (merge_hccl.py and `rank_table merge` write tables that way).
  ranges="" base=0 mine=-1
  for ((s = 0; s < S; s++)); do
    c=${SERVER_COUNTS[s]}
    expect=$(seq -s, "$base" $((base + c - 1)))
    sorted=$(tr , '\n' <<<"${SERVER_RANKS[s]}" | sort -n | paste -sd,)
    [ "$sorted" = "$expect" ] || die "server ${SERVER_IDS[s]} in $TABLE has rank ids ${SERVER_RANKS[s]}, but run_distribute.sh needs each server to hold the next block ($base..$((base + c - 1))); renumber with: rank_table merge OUT.json IN.json ..."
    ranges+=" [$base,$((base + c))) ${SERVER_IDS[s]};"
    ((START == base && END == base + c)) && mine=$s
    base=$((base + c))
  done
  if [ -z "$RANK_SIZE_ARG" ]; then
    die "the rank table $TABLE has $N ranks on $S servers: pass RANK_SIZE $N as the 5th argument, with this server's rank range as DEVICE_RANGE:${ranges%;}"
  fi
  ((RANK_SIZE == N)) || die "RANK_SIZE $RANK_SIZE but the rank table $TABLE has $N rank(s) on $S servers; give RANK_SIZE $N"
  ((mine >= 0)) || die "DEVICE_RANGE $RANGE is not the rank range of any server in $TABLE; the servers' ranges are:${ranges%;}"
fi

# ---- the config: valid, laid out for RANK_SIZE ranks, and where its output goes --------------------
# `gridformer config --ranks N` runs the check every rank runs at start and prints the same message.
config_err=$(mktemp "${TMPDIR:-/tmp}/gf_rd_config.XXXXXX") || die "cannot create a temporary file"
resolved=$("$BIN" config --config "$CONFIG" --set run_mode="$RUN_MODE" --ranks "$RANK_SIZE" 2>"$config_err")
config_status=$?
config_problems=$(cat "$config_err"); rm -f "$config_err"
if ((config_status != 0)); then
  echo "$config_problems" >&2
  grep -q '^error: the parallel layout does not fit' <<<"$config_problems" &&
    die "the parallel layout of $CONFIG does not fit RANK_SIZE $RANK_SIZE (the rank table's rank count): change parallel_config as above, or use a rank table of the size the layout needs; nothing started (every rank would stop with this message)"
  die "CONFIG $CONFIG has the problems above"
fi
OUT=$(sed -n 's/^output_dir:[[:space:]]*//p' <<<"$resolved" | head -1 | sed "s/^[\"']//; s/[\"']\$//")
OUT=${OUT:-./output}
LOGDIR=$OUT/log

if ((S > 1 && mine != 0)); then
  say "ranks $START..$((END - 1)) (server ${SERVER_IDS[mine]}) are started by mpirun from the server of rank 0 (${SERVER_IDS[0]}): run this script there with DEVICE_RANGE [0,${SERVER_COUNTS[0]}); nothing to start here"
  exit 0
fi

# ---- placement: one rank per device slot (a core) when the cores suffice ------------------------
mkdir -p "$LOGDIR" || die "cannot create $LOGDIR (output_dir in $CONFIG)"
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) # nproc alone honours OMP_NUM_THREADS
placement=()
if ((S == 1)); then
  IFS=, read -r -a ranks <<<"${SERVER_RANKS[0]}"
  IFS=, read -r -a devices <<<"${SERVER_DEVICES[0]}"
  maxdev=$(tr , '\n' <<<"${SERVER_DEVICES[0]}" | sort -n | tail -1)
  if ((N <= CORES && maxdev < CORES)); then
    : >"$LOGDIR/rankfile"
    for i in "${!ranks[@]}"; do echo "rank ${ranks[i]}=localhost slot=${devices[i]}" >>"$LOGDIR/rankfile"; done
    placement=(--rankfile "$LOGDIR/rankfile")
    note="each rank bound to the core of its device_id ($LOGDIR/rankfile)"
  elif ((N <= CORES)); then
    placement=(--map-by core --bind-to core)
    note="device ids reach $maxdev but there are $CORES cores: rank r bound to core r"
  else
    placement=(--oversubscribe --bind-to none)
    note="$N ranks on $CORES cores: oversubscribed, not bound"
  fi
else
  : >"$LOGDIR/hostfile"
  per=0
  for ((s = 0; s < S; s++)); do
    echo "${SERVER_IDS[s]} slots=${SERVER_COUNTS[s]}" >>"$LOGDIR/hostfile"
    ((SERVER_COUNTS[s] > per)) && per=${SERVER_COUNTS[s]}
  done
  placement=(--hostfile "$LOGDIR/hostfile" --map-by slot)
  if ((per <= CORES)); then
    placement+=(--bind-to core)
    note="hosts from $LOGDIR/hostfile, ranks in table order, each bound to a core (assumes every server has $CORES cores like this one)"
  else
    placement+=(--oversubscribe --bind-to none)
    note="hosts from $LOGDIR/hostfile, ranks in table order; $per ranks per server > $CORES cores: not bound"
  fi
fi

export RANK_TABLE_FILE=$TABLE
exports=(-x RANK_TABLE_FILE)
for v in OMP_NUM_THREADS LD_LIBRARY_PATH; do [ -n "${!v:-}" ] && exports+=(-x "$v"); done
read -r -a extra <<<"${MPIRUN_ARGS:-}"
cmd=("$MPIRUN" -np "$RANK_SIZE" "${placement[@]}" --mca orte_abort_on_non_zero_status 1 "${exports[@]}" "${extra[@]}"
  "$BIN" train --config "$CONFIG" --set run_mode="$RUN_MODE")

say "$RANK_SIZE rank(s) from $TABLE ($S server(s)), run_mode $RUN_MODE, config $CONFIG"
say "placement: $note"
say "mpirun output: $LOGDIR/mpirun.log; rank logs: $LOGDIR/rank_N/gridformer.log"
say "command: ${cmd[*]}"
if [ "${GF_DRY_RUN:-0}" = 1 ]; then
  say "GF_DRY_RUN=1: nothing started"
  exit 0
fi

# ---- run and supervise --------------------------------------------------------------------------
# Each rank log is appended to; remember where this run's part starts.
LOG_START=()
for ((r = 0; r < N; r++)); do
  f=$LOGDIR/rank_$r/gridformer.log
  LOG_START[r]=$(stat -c %s "$f" 2>/dev/null || echo 0)
done
this_run_log() { tail -c +$((${LOG_START[$1]} + 1)) "$LOGDIR/rank_$1/gridformer.log" 2>/dev/null; }
rank_pid() { this_run_log "$1" | sed -n 's/.*\] rank [0-9]* of [0-9]*, pid \([0-9]*\),.*/\1/p' | tail -1; }
is_gridformer() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q "gridformer train"; }

# SIGINT/SIGTERM: the same signal goes to every rank of this host (pids from this run's logs).
# The runner checks for a stop request on every rank at each step (an all-reduce), so all ranks,
# on every server, stop together between steps with status 128+signal, and mpirun ends.
# (Signalling mpirun instead is no good: OpenMPI 4 waits odls_base_sigkill_timeout, sends SIGTERM
# and then SIGKILL almost at once, so ranks die mid-step without a word.) mpirun itself gets
# SIGTERM only if no rank could be signalled or the ranks have not stopped after GF_STOP_TIMEOUT
# seconds, and SIGKILL 10 s after that, or at a second signal.
MPI_PID="" STOP_SIGNAL="" STOP_DEADLINE=0 MPI_TERMED=0
on_signal() {
  if [ -z "$MPI_PID" ]; then
    say "SIG$1 before mpirun started"
    [ "$1" = INT ] && exit 130
    exit 143
  fi
  if [ -n "$STOP_SIGNAL" ]; then
    say "second signal: killing mpirun"
    kill -KILL "$MPI_PID" 2>/dev/null
    return
  fi
  STOP_SIGNAL=$1
  STOP_DEADLINE=$((SECONDS + ${GF_STOP_TIMEOUT:-20}))
  local r pid signalled=0
  for ((r = 0; r < N; r++)); do
    pid=$(rank_pid "$r")
    if [ -n "$pid" ] && is_gridformer "$pid" && kill -"$1" "$pid" 2>/dev/null; then signalled=$((signalled + 1)); fi
  done
  say "SIG$1: sent SIG$1 to $signalled rank(s) on this host; all ranks stop together between steps"
  if ((signalled == 0)); then
    say "no rank to signal yet: asking mpirun to stop the job"
    kill -TERM "$MPI_PID" 2>/dev/null
    MPI_TERMED=1
  fi
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
"${cmd[@]}" >"$LOGDIR/mpirun.log" 2>&1 &
MPI_PID=$!
say "started mpirun (pid $MPI_PID)"

while kill -0 "$MPI_PID" 2>/dev/null; do
  if [ -n "$STOP_SIGNAL" ]; then
    if ((SECONDS >= STOP_DEADLINE && MPI_TERMED == 0)); then
      say "the ranks did not stop within ${GF_STOP_TIMEOUT:-20} s: asking mpirun to stop the job"
      kill -TERM "$MPI_PID" 2>/dev/null
      MPI_TERMED=1
    elif ((SECONDS >= STOP_DEADLINE + 10)); then
      say "mpirun did not stop: killing it"
      kill -KILL "$MPI_PID" 2>/dev/null
    fi
    sleep 0.2
  else
    wait "$MPI_PID" # returns when mpirun ends or a trapped signal arrives
  fi
done
wait "$MPI_PID"
STATUS=$?
trap - INT TERM

# No rank of this run may outlive mpirun (mpirun kills them; this is the check, and the last resort).
for ((r = 0; r < N; r++)); do
  pid=$(rank_pid "$r")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && is_gridformer "$pid"; then
    say "rank $r (pid $pid) was still running after mpirun ended: killing it"
    kill -KILL "$pid" 2>/dev/null
  fi
done

if [ -n "$STOP_SIGNAL" ]; then
  say "stopped by SIG$STOP_SIGNAL; all ranks stopped (mpirun status $STATUS)"
  [ "$STOP_SIGNAL" = INT ] && exit 130
  exit 143
fi
if ((STATUS == 0)); then
  say "all $RANK_SIZE rank(s) finished; logs in $LOGDIR"
  exit 0
fi

# A rank failed: mpirun names it ("process rank 3 with PID ... exited on signal 9 (Killed)", or
# "The first process to do so was: Process name: [[jobid,1],3] Exit code: 2").
MLOG=$LOGDIR/mpirun.log
failed=$(sed -n 's/.*process rank \([0-9][0-9]*\) with PID.*/\1/p' "$MLOG" | head -1)
how=$(sed -n 's/.*process rank [0-9]* with PID.* \(exited on signal .*\)\.$/\1/p' "$MLOG" | head -1)
if [ -z "$failed" ]; then
  failed=$(sed -n 's/.*Process name: \[\[[0-9]*,[0-9]*\],\([0-9][0-9]*\)\].*/\1/p' "$MLOG" | head -1)
  code=$(sed -n 's/.*Exit code:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$MLOG" | head -1)
  [ -n "$code" ] && how="exited with status $code"
fi
if [ -n "$failed" ]; then
  say "rank $failed failed (${how:-see $MLOG}); mpirun stopped the other ranks (mpirun status $STATUS)"
  if [ -n "$(this_run_log "$failed")" ]; then
    say "last 20 lines of $LOGDIR/rank_$failed/gridformer.log:"
    this_run_log "$failed" | tail -n 20 >&2
  else
    say "rank $failed wrote no log this run; last 20 lines of $MLOG:"
    tail -n 20 "$MLOG" >&2
  fi
else
  say "mpirun failed with status $STATUS and named no rank; last 20 lines of $MLOG:"
  tail -n 20 "$MLOG" >&2
fi
# Errors the runner reported (rank 0 reports the ones every rank shares, such as a config or rank table problem).
errors=$(grep -a '\] \[error\] ' "$MLOG" | tail -n 5)
[ -n "$errors" ] && { say "errors reported by the ranks (from $MLOG):"; echo "$errors" >&2; }
exit "$STATUS"
