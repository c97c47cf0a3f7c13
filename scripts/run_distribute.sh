#!/usr/bin/env bash
# Starts gridformer's ranks from a MindFormers rank table under OpenMPI's mpirun, with
# MindFormers' arguments, and supervises them: one rank failing stops all of them, the script
# names it and shows its errors whole. It fails fast: the layout is checked against the table
# and the other servers are probed over ssh before anything starts, ssh has a connection
# timeout, and nothing it started outlives it. See docs/distributed.md.
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

Several servers: run it on each server (in the same directory, same paths), each with its own
DEVICE_RANGE, in any order. On the server of rank 0 it starts mpirun, which starts every rank,
the other servers' over ssh, in one job; on the others it waits for that job (<output_dir>/log/job),
follows this server's ranks and ends with the job's status.

Starts `mpirun -np RANK_SIZE gridformer train --config CONFIG --set run_mode=RUN_MODE` with
RANK_TABLE_FILE=RANK_TABLE; mpirun's output goes to <output_dir>/log/mpirun.log, each rank's log to
<output_dir>/log/rank_N/gridformer.log (output_dir from the config, default ./output). First checks
the config and its parallel layout on RANK_SIZE ranks (gridformer config --ranks RANK_SIZE) and, with
several servers, that ssh reaches each of them. As root, mpirun gets --allow-run-as-root.

environment:
  GRIDFORMER_BIN  the gridformer binary (default: <this script's dir>/../build/bin/gridformer)
  RANK_TABLE_BIN  the rank_table tool (default: next to GRIDFORMER_BIN)
  MPIRUN          mpirun to use (default: mpirun); MPIRUN_ARGS: extra mpirun options (split on spaces)
  GF_STOP_TIMEOUT seconds to wait for the ranks after SIGINT/SIGTERM before killing mpirun (default 20)
  GF_CONNECT_TIMEOUT  seconds ssh may take to connect to a server (default 10): the remote servers are
                  probed with `ssh -o ConnectTimeout=N -o BatchMode=yes HOST true` before launch, and
                  mpirun's ssh agent gets the same options
  GF_PROBE        0: do not probe the remote servers; 1: probe them in a dry run too (default: before a launch)
  GF_PROGRESS_INTERVAL  seconds between progress lines while the job runs (default 30; the first after 5)
  GF_DRY_RUN=1    check everything, write the hostfile/rankfile, print the mpirun command, start nothing
  GF_JOIN_TIMEOUT seconds another server's script waits for the job to appear (default 300)
  GF_JOB_STALE    seconds without the launcher's beat in the job file after which another server's
                  script stops waiting for the job's end (default 20)
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
# The parts sourced below (scripts/lib/run_distribute_*.sh), beside the script itself even when it is run through a
# symlink.
LIB=$(dirname "$(realpath "${BASH_SOURCE[0]}")")/lib
for part in follow remote failure; do
  [ -f "$LIB/run_distribute_$part.sh" ] || die "no $LIB/run_distribute_$part.sh: it belongs beside this script"
done
BIN=${GRIDFORMER_BIN:-$HERE/../build/bin/gridformer}
TOOL=${RANK_TABLE_BIN:-$(dirname "$BIN")/rank_table}
[ -x "$BIN" ] || die "no gridformer binary at $BIN: build it (cmake -S . -B build && cmake --build build -j) or set GRIDFORMER_BIN"
[ -x "$TOOL" ] || die "no rank_table tool at $TOOL: build it with gridformer, or set RANK_TABLE_BIN"
MPIRUN=${MPIRUN:-mpirun}
command -v "$MPIRUN" >/dev/null || die "$MPIRUN not found (Debian: apt-get install openmpi-bin), or set MPIRUN"
CONNECT_TIMEOUT=${GF_CONNECT_TIMEOUT:-10} PROGRESS_INTERVAL=${GF_PROGRESS_INTERVAL:-30} PROBE=${GF_PROBE:-}
[[ $CONNECT_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "GF_CONNECT_TIMEOUT '$CONNECT_TIMEOUT' is not a positive number of seconds"
[[ $PROGRESS_INTERVAL =~ ^[1-9][0-9]*$ ]] || die "GF_PROGRESS_INTERVAL '$PROGRESS_INTERVAL' is not a positive number of seconds"
case "$PROBE" in "" | 0 | 1) ;; *) die "GF_PROBE '$PROBE': expected 0 (never probe) or 1 (probe in a dry run too)" ;; esac

# ---- children: nothing this script starts outlives it ---------------------------------------------
# mpirun runs in a session of its own (setsid): its ssh children and the ranks put themselves in
# process groups of their own but stay in that session, so on exit every process left in it is
# stopped (SIGTERM, then SIGKILL). Each ssh probe runs under timeout(1), which makes a process group
# of its own. Ctrl-C at a terminal reaches only this script's group; the script decides what the
# ranks get (SIGINT/SIGTERM below).
MPI_PID="" PROBE_PIDS=()
TEMP_PATHS=()  # this script's temporary files and directories, removed on exit (a Ctrl-C included)
# session_pids: the live processes of mpirun's session (its id is mpirun's pid). Nothing if that pid
# now belongs to another program (mpirun gone and the number reused).
session_pids() {
  local leader
  leader=$(ps -o comm= -p "$MPI_PID" 2>/dev/null)
  case "$leader" in "" | setsid | mpirun | orterun | mpiexec | "$(basename "$MPIRUN")") ;; *) return 0 ;; esac
  ps --sid "$MPI_PID" -o pid=,stat= 2>/dev/null | awk '$2 !~ /^Z/ {print $1}'
}
cleanup_children() {
  local pid left i
  for pid in "${PROBE_PIDS[@]}"; do # still this script's child: the probe's group (timeout and its ssh)
    [ "$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ')" = $$ ] && kill -KILL -- "-$pid" 2>/dev/null
  done
  [ -n "$MPI_PID" ] || return 0
  left=$(session_pids)
  [ -n "$left" ] || return 0
  say "stopping what is left of mpirun's session: $(ps -o pid=,comm= -p "$(paste -sd, <<<"$left")" | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $2, $1}')"
  kill -TERM $left 2>/dev/null
  for i in 1 2 3 4 5 6 7 8 9 10; do
    sleep 0.2
    left=$(session_pids)
    [ -n "$left" ] || return 0
  done
  kill -KILL $left 2>/dev/null
  for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.2; [ -n "$(session_pids)" ] || return 0; done
  say "could not stop: $(session_pids | paste -sd' ')"
}
on_exit() {
  local status=$1
  cleanup_children
  ((${#TEMP_PATHS[@]} == 0)) || rm -rf -- "${TEMP_PATHS[@]}"
  [ -n "${JOB_ID:-}" ] && [ "$JOB_STATE" = running ] &&
    job_end failed "$status" "run_distribute.sh on server ${SERVER_IDS[0]} exited (status $status) before the job's end was known"
  return 0
}
JOB_ID="" JOB_STATE=""
trap 'on_exit $?' EXIT
# Until mpirun has started, a signal just ends the script (the EXIT trap stops the probes).
early_signal() { say "SIG$1: stopping before anything started"; [ "$1" = INT ] && exit 130; exit 143; }
trap 'early_signal INT' INT
trap 'early_signal TERM' TERM

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
TEMP_PATHS+=("$config_err")
resolved=$("$BIN" config --config "$CONFIG" --set run_mode="$RUN_MODE" --ranks "$RANK_SIZE" 2>"$config_err")
config_status=$?
config_problems=$(cat "$config_err"); rm -f "$config_err"
if ((config_status != 0)); then
  echo "$config_problems" >&2
  grep -q '^error: the parallel layout does not fit' <<<"$config_problems" &&
    die "the parallel layout of $CONFIG does not fit RANK_SIZE $RANK_SIZE (the rank table's rank count): change parallel_config as above, or use a rank table of the size the layout needs; nothing started (every rank would stop with this message)"
  die "CONFIG $CONFIG has the problems above; nothing started (every rank would stop with them)"
fi
OUT=$(sed -n 's/^output_dir:[[:space:]]*//p' <<<"$resolved" | head -1 | sed "s/^[\"']//; s/[\"']\$//")
OUT=${OUT:-./output}
LOGDIR=$OUT/log

# The ranks of this server (all of them on a one-server table), and the server of each rank.
LOCAL_RANKS=() RANK_SERVER=()
for ((s = 0, r = 0; s < S; s++)); do
  for ((i = 0; i < SERVER_COUNTS[s]; i++, r++)); do
    RANK_SERVER[r]=${SERVER_IDS[s]}
    ((S == 1 || s == mine)) && LOCAL_RANKS+=("$r")
  done
done
JOB_FILE=$LOGDIR/job
# Each rank log is appended to, run after run; LOG_START[r] is where this run's part starts.
LOG_START=()
this_run_log() { tail -c +$((${LOG_START[$1]:-0} + 1)) "$LOGDIR/rank_$1/gridformer.log" 2>/dev/null; }
rank_pid() { this_run_log "$1" | sed -n 's/.*\] rank [0-9]* of [0-9]*, pid \([0-9]*\),.*/\1/p' | tail -1; }
is_gridformer() { { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null | grep -q "gridformer train"; }

# ---- another server's range: wait for the job, follow it, end with its status -------------------
# shellcheck source=lib/run_distribute_follow.sh
source "$LIB/run_distribute_follow.sh"

if ((S > 1 && mine != 0)); then
  # Another server's range (MindFormers runs the script on every server): mpirun on the server of
  # rank 0 starts these ranks over ssh, in one MPI job. This script waits for that job, follows it
  # and ends with its status. See "Several servers" in docs/distributed.md.
  follow_job
  exit $?
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
# What picks the GEMM kernels (OpenBLAS's core type and cache sizes, oneDNN's instruction-set cap, gridformer's
# backend and machine probe) goes to every rank too: a rank on another server starts from ssh's environment, without
# them, and computes with other kernels (the last bits of products, so of the losses, differ).
for v in $(compgen -e | grep -E '^(OPENBLAS_|GOTO_|ONEDNN_|DNNL_)|^GF_(GEMM|MACHINE_PROBE)$'); do exports+=(-x "$v"); done
read -r -a extra <<<"${MPIRUN_ARGS:-}"

# ---- as root: allowed, with a warning -----------------------------------------------------------
root_opts=()
if [ "$(id -u)" -eq 0 ]; then
  say "warning: running as root; a non-root account is recommended for training (Open MPI refuses root unless told, and Huawei's Ascend Megatron-LM adaptation advises a normal user): mpirun gets --allow-run-as-root"
  [[ " ${extra[*]} " == *" --allow-run-as-root "* ]] || root_opts=(--allow-run-as-root)
fi

# ---- remote servers: mpirun's ssh with a connection timeout, and a probe of each ---------------
# shellcheck source=lib/run_distribute_remote.sh
source "$LIB/run_distribute_remote.sh"

cmd=("$MPIRUN" -np "$RANK_SIZE" "${placement[@]}" "${root_opts[@]}" --mca orte_abort_on_non_zero_status 1
  "${agent_opts[@]}" "${alive_opts[@]}" "${exports[@]}" "${extra[@]}" "$BIN" train --config "$CONFIG" --set run_mode="$RUN_MODE")

say "$RANK_SIZE rank(s) from $TABLE ($S server(s)), run_mode $RUN_MODE, config $CONFIG"
say "placement: $note"
say "mpirun output: $LOGDIR/mpirun.log; rank logs: $LOGDIR/rank_N/gridformer.log"
shell_words() { # the words as a shell would read them back: plain, or in single quotes
  local w out=""
  for w in "$@"; do
    [[ $w =~ ^[A-Za-z0-9_./=:,@%+-]+$ ]] || w="'${w//\'/\'\\\'\'}'"
    out+="${out:+ }$w"
  done
  echo "$out"
}
say "command: $(shell_words "${cmd[@]}")"
if ((${#REMOTE[@]})); then
  if [ "$PROBE" = 1 ] || { [ -z "$PROBE" ] && [ "${GF_DRY_RUN:-0}" != 1 ]; }; then
    probe_remote
  else
    say "remote servers not probed (${REMOTE[*]})$([ "$PROBE" = 0 ] && echo ": GF_PROBE=0" || echo "; GF_PROBE=1 probes them in a dry run")"
  fi
fi
if [ "${GF_DRY_RUN:-0}" = 1 ]; then
  say "GF_DRY_RUN=1: nothing started"
  exit 0
fi

# ---- run and supervise --------------------------------------------------------------------------
for ((r = 0; r < N; r++)); do
  f=$LOGDIR/rank_$r/gridformer.log
  LOG_START[r]=$(stat -c %s "$f" 2>/dev/null || echo 0)
done

# The job file (several servers): what the other servers' run_distribute.sh wait for and follow
# (follow_job, in scripts/lib/run_distribute_follow.sh). Written when mpirun starts, its beat bumped
# every 2 s, its end recorded.
JOB_BEAT=0 JOB_STATUS="" JOB_MESSAGE="" JOB_STARTED=""
job_write() {
  [ -n "$JOB_ID" ] || return 0
  printf '%s\n' "job=$JOB_ID" "state=$JOB_STATE" "status=$JOB_STATUS" "message=$JOB_MESSAGE" "server=${SERVER_IDS[0]}" \
    "host=$(hostname)" "launcher_pid=$$" "mpirun_pid=$MPI_PID" "table=$TABLE" "config=$CONFIG" "run_mode=$RUN_MODE" \
    "rank_size=$RANK_SIZE" "log_start=${LOG_START[*]}" "started=$JOB_STARTED" "beat=$JOB_BEAT" >"$JOB_FILE.$$" 2>/dev/null &&
    mv -f "$JOB_FILE.$$" "$JOB_FILE" 2>/dev/null || { rm -f "$JOB_FILE.$$"; say "warning: cannot write $JOB_FILE"; }
}
job_end() { JOB_STATE=$1 JOB_STATUS=$2 JOB_MESSAGE=$3; job_write; } # job_end STATE STATUS MESSAGE

# SIGINT/SIGTERM: the same signal goes to every rank of this host (pids from this run's logs).
# The runner checks for a stop request on every rank at each step (an all-reduce), so all ranks,
# on every server, stop together between steps with status 128+signal, and mpirun ends.
# (Signalling mpirun instead is no good: OpenMPI 4 waits odls_base_sigkill_timeout, sends SIGTERM
# and then SIGKILL almost at once, so ranks die mid-step without a word.) mpirun itself gets
# SIGTERM if no rank could be signalled (then, if it has not ended within 5 s, its whole session
# is killed), or if the ranks have not stopped after GF_STOP_TIMEOUT seconds, and SIGKILL 10 s after
# that, or at a second signal. Whatever is left of mpirun's session when the script exits is
# stopped by the EXIT trap (cleanup_children).
STOP_SIGNAL="" STOP_DEADLINE=0 MPI_TERMED=0 NO_RANKS=0 BEFORE_RANKS=0
on_signal() {
  if [ -n "$STOP_SIGNAL" ]; then
    say "second signal: killing mpirun"
    kill -KILL "$MPI_PID" 2>/dev/null
    return
  fi
  STOP_SIGNAL=$1
  STOP_DEADLINE=$((SECONDS + ${GF_STOP_TIMEOUT:-20}))
  local r pid signalled=0
  for r in "${LOCAL_RANKS[@]}"; do
    pid=$(rank_pid "$r")
    if [ -n "$pid" ] && is_gridformer "$pid" && kill -"$1" "$pid" 2>/dev/null; then signalled=$((signalled + 1)); fi
  done
  if ((signalled > 0)); then
    say "SIG$1: sent SIG$1 to $signalled rank(s) on this host; all ranks stop together between steps"
  else
    say "SIG$1: no rank has started on this host yet: asking mpirun to stop the job"
    kill -TERM "$MPI_PID" 2>/dev/null
    MPI_TERMED=1 NO_RANKS=1 BEFORE_RANKS=1 STOP_DEADLINE=$((SECONDS + 5))
  fi
}
# A signal between starting mpirun and knowing its pid is held until the pid is known.
PENDING_SIGNAL=""
trap 'PENDING_SIGNAL=INT' INT
trap 'PENDING_SIGNAL=TERM' TERM
setsid -w "${cmd[@]}" >"$LOGDIR/mpirun.log" 2>&1 </dev/null &
MPI_PID=$! T0=$SECONDS
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
if ((S > 1)); then
  say "started mpirun (pid $MPI_PID): a daemon on each of ${#REMOTE[@]} remote server(s) over ssh (connect timeout ${CONNECT_TIMEOUT} s), then $RANK_SIZE rank(s); progress every $PROGRESS_INTERVAL s"
else
  say "started mpirun (pid $MPI_PID): $RANK_SIZE rank(s); progress every $PROGRESS_INTERVAL s"
fi
if ((S > 1)); then
  JOB_ID=$(date -u +%Y%m%dT%H%M%SZ)-$(hostname -s 2>/dev/null || hostname)-$$ JOB_STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ) JOB_STATE=running
  job_write
  say "job $JOB_ID: $(realpath -m "$JOB_FILE") (the other servers' run_distribute.sh follow it there)"
fi
[ -n "$PENDING_SIGNAL" ] && on_signal "$PENDING_SIGNAL"

# progress: one line on how far the job is, so the console is never silent for long.
progress() {
  local r started=0 step last
  for ((r = 0; r < N; r++)); do [ -n "$(rank_pid "$r")" ] && started=$((started + 1)); done
  step=$(grep -a 'step:\[' "$LOGDIR/mpirun.log" 2>/dev/null | tail -1 | sed -n 's/.*\(step:\[[^]]*\]\), \(loss: [^,]*\).*/\1, \2/p')
  if ((started == 0)); then
    last=$(grep -av -e '^[[:space:]]*$' -e '^-----' "$LOGDIR/mpirun.log" 2>/dev/null | tail -1 | cut -c1-200)
    say "$((SECONDS - T0)) s: no rank has logged its start yet$( ((S > 1)) && echo " (mpirun starts its daemons over ssh first)")${last:+; mpirun.log: $last}"
  elif [ -z "$step" ]; then
    say "$((SECONDS - T0)) s: $started of $N rank(s) have logged their start; no step yet"
  else
    say "$((SECONDS - T0)) s: $started of $N rank(s) have logged their start; rank 0 at $step"
  fi
}

# The first progress line after 5 s (ranks starting, data indices building), then every PROGRESS_INTERVAL.
next_progress=$((SECONDS + (PROGRESS_INTERVAL < 5 ? PROGRESS_INTERVAL : 5))) next_beat=$((SECONDS + 2))
while kill -0 "$MPI_PID" 2>/dev/null; do
  if [ -n "$JOB_ID" ] && ((SECONDS >= next_beat)); then
    JOB_BEAT=$((JOB_BEAT + 1)) next_beat=$((SECONDS + 2))
    job_write
  fi
  if [ -n "$STOP_SIGNAL" ]; then
    if ((NO_RANKS && SECONDS >= STOP_DEADLINE)); then
      say "mpirun did not stop within 5 s: killing its session"
      # shellcheck disable=SC2046 # one pid per word
      kill -KILL $(session_pids) 2>/dev/null
      NO_RANKS=0 STOP_DEADLINE=$((SECONDS + 10))
    elif ((SECONDS >= STOP_DEADLINE && MPI_TERMED == 0)); then
      say "the ranks did not stop within ${GF_STOP_TIMEOUT:-20} s: asking mpirun to stop the job"
      kill -TERM "$MPI_PID" 2>/dev/null
      MPI_TERMED=1
    elif ((SECONDS >= STOP_DEADLINE + 10)); then
      say "mpirun did not stop: killing it"
      kill -KILL "$MPI_PID" 2>/dev/null
    fi
    sleep 0.2
  else
    sleep 0.5 & # a trapped signal interrupts this wait at once
    wait $!
    if ((SECONDS >= next_progress)) && [ -z "$STOP_SIGNAL" ]; then
      progress
      next_progress=$((SECONDS + PROGRESS_INTERVAL))
    fi
  fi
done
wait "$MPI_PID"
STATUS=$?
trap 'exit 130' INT # from here a signal just ends the script (the EXIT trap still sweeps mpirun's session)
trap 'exit 143' TERM

# No rank of this run on this server may outlive mpirun (mpirun kills them; this is the check, and
# the last resort). The other servers' ranks are their daemons' to stop (and their own
# run_distribute.sh's, following the job): a pid in their logs means nothing here.
for r in "${LOCAL_RANKS[@]}"; do
  pid=$(rank_pid "$r")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && is_gridformer "$pid"; then
    say "rank $r (pid $pid) was still running after mpirun ended: killing it"
    kill -KILL "$pid" 2>/dev/null
  fi
done

if [ -n "$STOP_SIGNAL" ]; then
  if ((BEFORE_RANKS)); then
    JOB_MESSAGE="stopped by SIG$STOP_SIGNAL before any rank started on ${SERVER_IDS[0]}"
  else
    JOB_MESSAGE="stopped by SIG$STOP_SIGNAL; all ranks stopped"
  fi
  say "$JOB_MESSAGE (mpirun status $STATUS)"
  [ "$STOP_SIGNAL" = INT ] && { job_end stopped 130 "$JOB_MESSAGE"; exit 130; }
  job_end stopped 143 "$JOB_MESSAGE"
  exit 143
fi
if ((STATUS == 0)); then
  final=$(grep -a 'step:\[' "$LOGDIR/mpirun.log" 2>/dev/null | tail -1 | sed -n 's/.*\(step:\[[^]]*\]\), \(loss: [^,]*\).*/\1, \2/p')
  [ -n "$final" ] && say "last logged step: $final"
  say "all $RANK_SIZE rank(s) finished; logs in $LOGDIR"
  job_end finished 0 "all $RANK_SIZE rank(s) finished"
  exit 0
fi

# ---- mpirun failed: which rank (or server), and the errors the ranks logged ----------------------
# shellcheck source=lib/run_distribute_failure.sh
source "$LIB/run_distribute_failure.sh"
job_end failed "$STATUS" "$JOB_MESSAGE"
exit "$STATUS"
