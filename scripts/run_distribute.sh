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
# The launcher on the server of rank 0 writes <output_dir>/log/job (key=value lines, replaced whole
# with mv) when mpirun starts, bumps its `beat` every 2 s while the job runs, and writes the end
# (state finished/failed/stopped, mpirun's status, a one-line message). The log directory is the
# same path on every server (a shared file system, as the ranks' logs and the data need), so this
# server reads it there. Liveness is judged by the beat moving, by this host's clock alone: the
# servers' clocks need not agree.
JOB_TEXT=""
jf() { sed -n "s/^$1=//p" <<<"$JOB_TEXT" | head -1; }
read_job() { JOB_TEXT=$(cat "$JOB_FILE" 2>/dev/null) || JOB_TEXT=""; }
stop_here() { # stop_here PID...: TERM, then KILL after 2 s, whichever of PID... still runs
  local pid i left=("$@")
  kill -TERM "${left[@]}" 2>/dev/null
  for i in 1 2 3 4 5 6 7 8 9 10; do
    sleep 0.2
    left=($(for pid in "${left[@]}"; do kill -0 "$pid" 2>/dev/null && echo "$pid"; done))
    ((${#left[@]})) || return 0
  done
  kill -KILL "${left[@]}" 2>/dev/null
}
follow_job() {
  local join=${GF_JOIN_TIMEOUT:-300} stale=${GF_JOB_STALE:-20} here=${SERVER_IDS[mine]} first=${SERVER_IDS[0]}
  local job_path id state beat old_id="" old_beat="" old_state="" t0=$SECONDS seen_at=$SECONDS said_old=0
  [[ $join =~ ^[1-9][0-9]*$ ]] || die "GF_JOIN_TIMEOUT '$join' is not a positive number of seconds"
  [[ $stale =~ ^[1-9][0-9]*$ ]] || die "GF_JOB_STALE '$stale' is not a positive number of seconds"
  job_path=$(realpath -m "$JOB_FILE")
  local how_first="bash scripts/run_distribute.sh $TABLE $CONFIG \"[0,${SERVER_COUNTS[0]})\" $RUN_MODE $RANK_SIZE"
  say "ranks $START..$((END - 1)) (server $here) are started by mpirun from the server of rank 0 ($first) over ssh, in one job with all $RANK_SIZE ranks; run this script there too, in this same directory, with DEVICE_RANGE [0,${SERVER_COUNTS[0]}) (either may start first)"
  if [ "${GF_DRY_RUN:-0}" = 1 ]; then
    say "GF_DRY_RUN=1: not waiting for the job; nothing to start here"
    return 0
  fi
  trap 'exit 130' INT
  trap 'exit 143' TERM
  read_job
  old_id=$(jf job) old_beat=$(jf beat) old_state=$(jf state)
  say "waiting up to $join s (GF_JOIN_TIMEOUT) for that job in $job_path"
  # A job already in the file is followed only if it is running and its beat moves, or if it was
  # running here and has ended since (a job shorter than the beat's 2 s); one that had ended before,
  # or whose launcher stopped beating, is an earlier run's: wait for a new one.
  while :; do
    read_job
    id=$(jf job) state=$(jf state) beat=$(jf beat)
    if [ -n "$id" ] && [ "$id" != "$old_id" ]; then break; fi
    if [ -n "$id" ] && [ "$state" = running ] && [ "$beat" != "$old_beat" ]; then break; fi
    if [ -n "$id" ] && ((said_old == 0)) && [ "$old_state" = running ] && [ "$state" != running ]; then break; fi
    if [ -n "$old_id" ] && ((said_old == 0)) && { [ "$old_state" != running ] || ((SECONDS - seen_at >= stale)); }; then
      say "the job already in $job_path ($old_id, $old_state) is an earlier run's: waiting for a new one"
      said_old=1
    fi
    if ((SECONDS - t0 >= join)); then
      say "no job from server $first within $join s in $job_path; nothing ran here"
      die "start it on $first, in this same directory (the same paths as here): $how_first  (or raise GF_JOIN_TIMEOUT)"
    fi
    sleep 0.5
  done
  local j_table j_config j_size j_mode
  j_table=$(jf table) j_config=$(jf config) j_size=$(jf rank_size) j_mode=$(jf run_mode)
  if [ "$j_table" != "$TABLE" ] || [ "$j_config" != "$CONFIG" ] || [ "$j_size" != "$RANK_SIZE" ] || [ "$j_mode" != "$RUN_MODE" ]; then
    die "job $id in $job_path (from server $(jf server)) runs RANK_SIZE $j_size, run_mode $j_mode, table $j_table, config $j_config; this script was given RANK_SIZE $RANK_SIZE, run_mode $RUN_MODE, table $TABLE, config $CONFIG: give every server the same arguments (and its own DEVICE_RANGE)"
  fi
  read -r -a LOG_START <<<"$(jf log_start)"
  say "job $id: launched by run_distribute.sh on server $(jf server) (host $(jf host), pid $(jf launcher_pid); mpirun pid $(jf mpirun_pid)); following ranks $START..$((END - 1)) here"

  # Follow: this server's ranks (pids from this run's part of their logs, checked on this host),
  # the daemon that started them (their parent, orted), the job file's beat and end.
  local -A PID=() DAEMON=()
  local r pid ppid running announced=0 last_beat=$beat beat_at=$SECONDS end="" next_progress=$((SECONDS + PROGRESS_INTERVAL))
  # A signal here stops the following, not the job: the job is mpirun's, on the first server.
  trap 'say "SIGINT: no longer following job $id; it goes on: stop it from server $first (Ctrl-C to run_distribute.sh there)"; exit 130' INT
  trap 'say "SIGTERM: no longer following job $id; it goes on: stop it from server $first"; exit 143' TERM
  while :; do
    for r in "${LOCAL_RANKS[@]}"; do
      [ -n "${PID[$r]:-}" ] && continue
      pid=$(rank_pid "$r")
      [ -n "$pid" ] && is_gridformer "$pid" || continue
      PID[$r]=$pid
      ppid=$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ')
      [ -n "$ppid" ] && [ "$(ps -o comm= -p "$ppid" 2>/dev/null)" = orted ] && DAEMON[$ppid]=1
    done
    if ((!announced && ${#PID[@]} == ${#LOCAL_RANKS[@]})); then
      say "all ${#LOCAL_RANKS[@]} rank(s) of this server running: $(for r in "${LOCAL_RANKS[@]}"; do printf 'rank %s pid %s, ' "$r" "${PID[$r]}"; done | sed 's/, $//')${DAEMON[*]:+ (under orted pid ${!DAEMON[*]})}"
      announced=1
    fi
    read_job
    if [ "$(jf job)" != "$id" ]; then end=replaced; break; fi
    state=$(jf state) beat=$(jf beat)
    case "$state" in finished | failed | stopped) end=$state; break ;; esac
    if [ "$beat" != "$last_beat" ]; then last_beat=$beat beat_at=$SECONDS; fi
    if ((SECONDS - beat_at >= stale)); then end=stale; break; fi
    if ((SECONDS >= next_progress)); then
      running=0
      for r in "${!PID[@]}"; do kill -0 "${PID[$r]}" 2>/dev/null && running=$((running + 1)); done
      local step
      step=$(grep -a 'step:\[' "$LOGDIR/mpirun.log" 2>/dev/null | tail -1 | sed -n 's/.*\(step:\[[^]]*\]\), \(loss: [^,]*\).*/\1, \2/p')
      say "$((SECONDS - t0)) s: $running of ${#LOCAL_RANKS[@]} rank(s) of this server running${step:+; rank 0 at $step}"
      next_progress=$((SECONDS + PROGRESS_INTERVAL))
    fi
    sleep 0.5
  done
  trap 'exit 130' INT
  trap 'exit 143' TERM

  # Nothing of this job outlives it here: mpirun's daemon stops these ranks and exits; what is still
  # running 10 s after the end (a daemon cut off from mpirun, say) is stopped and named.
  local left=() names=() i
  for i in $(seq 1 50); do
    left=()
    for r in "${!PID[@]}"; do kill -0 "${PID[$r]}" 2>/dev/null && is_gridformer "${PID[$r]}" && left+=("${PID[$r]}"); done
    for pid in "${!DAEMON[@]}"; do [ "$(ps -o comm= -p "$pid" 2>/dev/null)" = orted ] && left+=("$pid"); done
    ((${#left[@]})) || break
    [ "$end" = stale ] && break # the ranks may still be running the job: leave them
    sleep 0.2
  done
  if ((${#left[@]})) && [ "$end" != stale ]; then
    names=()
    for r in "${!PID[@]}"; do kill -0 "${PID[$r]}" 2>/dev/null && names+=("rank $r pid ${PID[$r]}"); done
    for pid in "${!DAEMON[@]}"; do kill -0 "$pid" 2>/dev/null && names+=("orted pid $pid"); done
    say "the job ended but these still ran on this server 10 s later: $(IFS=,; echo "${names[*]}" | sed 's/,/, /g'): stopping them"
    stop_here "${left[@]}"
  fi

  local status message ran=""
  status=$(jf status) message=$(jf message)
  for r in "${LOCAL_RANKS[@]}"; do
    pid=$(rank_pid "$r")
    if [ -n "$pid" ]; then ran+="${ran:+, }rank $r pid $pid"; else ran+="${ran:+, }rank $r (no start logged)"; fi
  done
  say "this server's ranks, from their logs: $ran"
  case "$end" in
    finished)
      say "job $id finished (server $first's report): ${message:-all ranks finished}; logs in $LOGDIR"
      return "${status:-0}" ;;
    failed | stopped)
      say "job $id $end (server $first's report): $message (mpirun status $status); mpirun.log and the whole report on $first; logs in $LOGDIR"
      [[ $status =~ ^[0-9]+$ ]] && ((status != 0)) && return "$status"
      return 1 ;;
    replaced)
      say "job $id was replaced in $job_path by another job ($(jf job)) before its end was recorded"
      return 1 ;;
    stale)
      running=0
      for r in "${!PID[@]}"; do kill -0 "${PID[$r]}" 2>/dev/null && running=$((running + 1)); done
      say "job $id: the launcher on server $first stopped updating $job_path $stale s ago (GF_JOB_STALE) without recording the job's end (it was killed, or that server or the shared file system is unreachable from here); $running rank(s) of this server still run; end status unknown"
      return 1 ;;
  esac
}

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
# mpirun starts a daemon on every other server with its rsh agent, ssh by default. Without a
# timeout, ssh to a host that never answers waits out the kernel's TCP retries (minutes), and
# without BatchMode it may wait for a password nobody types. The agent is
# "ssh -o ConnectTimeout=N -o BatchMode=yes" (OpenMPI splits plm_rsh_agent on spaces; ':' separates
# alternatives). An agent the user set (MPIRUN_ARGS, OMPI_MCA_plm_rsh_agent or an mca-params.conf
# file) is kept as it is: a second --mca plm_rsh_agent would be joined to it with a comma.
OMPI_INFO_OUT="" # what ompi_info says of the rsh launcher's and the daemons' TCP parameters (environment and mca-params.conf files)
user_mca() { # user_mca NAME SYNONYM...: "SOURCE<tab>VALUE" of an MCA parameter the user set, nothing if it is the default
  local i n v src
  for ((i = 0; i + 2 < ${#extra[@]}; i++)); do
    case ${extra[i]} in -mca | --mca | -gmca | --gmca) ;; *) continue ;; esac
    for n in "$@"; do [ "${extra[i + 1]}" = "$n" ] && { printf 'MPIRUN_ARGS\t%s\n' "${extra[i + 2]}"; return; }; done
  done
  for n in "$@"; do v=OMPI_MCA_$n; [ -n "${!v:-}" ] && { printf '%s\t%s\n' "$v" "${!v}"; return; }; done
  src=$(sed -n "s/^mca:[a-z]*:[a-z]*:param:$1:source://p" <<<"$OMPI_INFO_OUT")
  [ -n "$src" ] && [ "$src" != default ] || return 0
  v=$(sed -n "s/^mca:[a-z]*:[a-z]*:param:$1:value://p" <<<"$OMPI_INFO_OUT")
  v=${v#\"} v=${v%\"}
  printf '%s\t%s\n' "$src" "$v"
}
REMOTE=() AGENT=() RSH_ARGS=() agent_opts=() alive_opts=()
if ((S > 1)); then
  THIS_HOST=$({ hostname; hostname -s; hostname -I | tr ' ' '\n'; ip -o addr show | awk '{sub(/\/.*/, "", $4); print $4}'; } 2>/dev/null | sed '/^$/d')
  for id in "${SERVER_IDS[@]}"; do
    case "$id" in localhost | 127.* | ::1) continue ;; esac
    grep -qxF -- "$id" <<<"$THIS_HOST" || REMOTE+=("$id")
  done
  info=$(dirname "$(command -v "$MPIRUN")")/ompi_info
  [ -x "$info" ] || info=$(command -v ompi_info) || info=""
  [ -z "$info" ] || OMPI_INFO_OUT=$("$info" --parsable --level 9 --param plm rsh 2>/dev/null; "$info" --parsable --level 9 --param oob tcp 2>/dev/null)
  IFS=$'\t' read -r agent_from agent_value <<<"$(user_mca plm_rsh_agent orte_rsh_agent pls_rsh_agent)"
  IFS=$'\t' read -r _ args_value <<<"$(user_mca plm_rsh_args)"
  read -r -a RSH_ARGS <<<"${args_value:-}"
  if [ -n "${agent_value:-}" ]; then
    read -r -a AGENT <<<"${agent_value%%:*}"
    say "ssh agent: your plm_rsh_agent '$agent_value' (from $agent_from) is used as it is; GF_CONNECT_TIMEOUT is not added to it (add -o ConnectTimeout=$CONNECT_TIMEOUT -o BatchMode=yes yourself)"
  else
    AGENT=(ssh -o ConnectTimeout="$CONNECT_TIMEOUT" -o BatchMode=yes)
    agent_opts=(--mca plm_rsh_agent "${AGENT[*]}")
  fi
  # A server that drops off the network (link down, power off) sends nothing more: no reset, no
  # end of file. mpirun and each daemon (orted) hold a TCP connection to each other; Open MPI's
  # keepalive on it (default: first probe after 300 s idle, then 9 probes 20 s apart, 8 minutes in
  # all) is what notices. Here: after 6 s idle, 3 probes 3 s apart, so a lost server ends the job
  # within about 15 s, mpirun names it ("lost communication with a remote daemon ... on node X"),
  # and the daemon on the far side, cut off from mpirun, stops its ranks and exits. Values you set
  # (MPIRUN_ARGS, OMPI_MCA_*, mca-params.conf) are kept.
  for kv in oob_tcp_keepalive_time=6 oob_tcp_keepalive_intvl=3 oob_tcp_keepalive_probes=3; do
    [ -n "$(user_mca "${kv%%=*}")" ] || alive_opts+=(--mca "${kv%%=*}" "${kv#*=}")
  done
  if ((${#REMOTE[@]})) && ! command -v "${AGENT[0]}" >/dev/null; then
    [ "${GF_DRY_RUN:-0}" = 1 ] || die "${AGENT[0]} not found: mpirun needs it to reach ${REMOTE[*]} (Debian: apt-get install openssh-client)"
    say "warning: ${AGENT[0]} not found: mpirun needs it to reach ${REMOTE[*]} (Debian: apt-get install openssh-client)"
  fi
fi

# probe_remote: every remote server at once, with mpirun's own agent; names each one that does not
# answer and says what to do. Each probe is bounded by timeout(1) as well, should ssh hang after
# connecting.
probe_reason() { # probe_reason HOST STATUS OUTPUT
  case "$3" in
    *"timed out"*) echo "no answer${agent_opts[*]:+ within $CONNECT_TIMEOUT s}: check the address (server_id in the rank table), that the host is up, and that its ssh port is open from here" ;;
    *"No route to host"* | *"Network is unreachable"*) echo "no route to it from here: check the address (server_id in the rank table) and the network" ;;
    *"Could not resolve hostname"* | *"Name or service not known"*) echo "the name does not resolve: check server_id in the rank table, or add it to /etc/hosts" ;;
    *"Connection refused"*) echo "it answers but nothing listens on the ssh port: start sshd there" ;;
    *"Host key verification failed"*) echo "its host key is not known here and BatchMode cannot ask: connect once by hand (ssh $1 true) or add it (ssh-keyscan $1 >> ~/.ssh/known_hosts)" ;;
    *"Permission denied"*) echo "ssh wants a password: set up passwordless ssh for $(id -un) (ssh-keygen; ssh-copy-id $1)" ;;
    *) if (($2 == 124 || $2 == 137)); then echo "ssh did not finish within $((CONNECT_TIMEOUT + 10)) s"; else echo "ssh failed with status $2"; fi ;;
  esac
}
probe_remote() {
  local dir i bad=0 statuses=() start=$SECONDS
  dir=$(mktemp -d "${TMPDIR:-/tmp}/gf_rd_probe.XXXXXX") || die "cannot create a temporary directory"
  say "checking ssh to ${#REMOTE[@]} remote server(s) (${REMOTE[*]}): ${AGENT[*]}${RSH_ARGS[*]:+ ${RSH_ARGS[*]}} HOST true"
  for i in "${!REMOTE[@]}"; do
    timeout -k 2 $((CONNECT_TIMEOUT + 10)) "${AGENT[@]}" "${RSH_ARGS[@]}" "${REMOTE[i]}" true </dev/null >"$dir/$i" 2>&1 &
    PROBE_PIDS+=($!)
  done
  for i in "${!REMOTE[@]}"; do wait "${PROBE_PIDS[i]}"; statuses[i]=$?; done
  PROBE_PIDS=()
  for i in "${!REMOTE[@]}"; do
    ((statuses[i] == 0)) && continue
    ((bad++ == 0)) && say "cannot reach these servers over ssh (mpirun starts a daemon on each this way):"
    echo "  ${REMOTE[i]}: $(probe_reason "${REMOTE[i]}" "${statuses[i]}" "$(cat "$dir/$i")")" >&2
    sed '/^[[:space:]]*$/d; s/^/      /' "$dir/$i" | tail -n 3 >&2
  done
  rm -rf "$dir"
  ((bad == 0)) || die "$bad of ${#REMOTE[@]} remote server(s) unreachable (checked in $((SECONDS - start)) s); fix them or the rank table; nothing started (GF_PROBE=0 skips this check)"
  say "ssh reaches all ${#REMOTE[@]} remote server(s) ($((SECONDS - start)) s)"
}

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
# (follow_job above). Written when mpirun starts, its beat bumped every 2 s, its end recorded.
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

# error_blocks SEEN FILE: the [error]/[critical] records of gridformer's logs in FILE, each with all
# its lines (a message may span several; a record ends at the next record, a blank line or mpirun's
# own output), leaving out those also in SEEN and repeats (rank 0's console copy in mpirun.log and
# its log file hold the same records); the last 10.
error_blocks() {
  awk '
    function flush(key) {
      if (block != "") {
        key = block; sub(/^\[[^]]*\] /, "", key)
        if (!(key in seen)) { seen[key] = 1; if (!quiet) out[++n] = block }
      }
      block = ""
    }
    FNR == 1 { flush(); quiet = (FILENAME == ARGV[1]) }
    /^\[[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] / { flush(); if ($0 ~ /\] \[(error|critical)\] /) block = $0; next }
    block != "" && (/^[[:space:]]*$/ || /^-----/ || /^\[[^] ]*:[0-9]+\] / || /^(mpirun|Primary job|prterun|ORTE) /) { flush(); next }
    block != "" { block = block "\n" $0 }
    END { flush(); for (i = (n > 10 ? n - 9 : 1); i <= n; i++) print out[i] }' "$@"
}

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
# A server lost (the network, the server itself, or its daemon): "ORTE has lost communication with
# a remote daemon. ... Remote daemon: [[13280,0],1] on node 10.0.0.2".
lost=$(sed -n 's/^[[:space:]]*Remote daemon:.* on node \([^[:space:]]*\).*/\1/p' "$MLOG" | head -1)
rank_errors=""
[ -n "$failed" ] && rank_errors=$(error_blocks /dev/null <(this_run_log "$failed"))
# The rank mpirun names is the first to exit, not always the one that found the problem: a rank whose log
# holds no error stopped because another did. Then the first rank (in rank order, of the logs this server
# has) that logged an error is the one to show.
if [ -n "$failed" ] && [ -z "$rank_errors" ]; then
  for ((r = 0; r < N; r++)); do
    [ "$r" = "$failed" ] && continue
    e=$(error_blocks /dev/null <(this_run_log "$r"))
    if [ -n "$e" ]; then
      say "rank $failed exited first, without an error of its own; rank $r reported one"
      failed=$r rank_errors=$e how="reported an error"
      break
    fi
  done
fi
where=""
((S > 1)) && [ -n "$failed" ] && [ -n "${RANK_SERVER[failed]:-}" ] && where=" (server ${RANK_SERVER[failed]})"
if [ -n "$lost" ] && [ -z "$failed" ]; then
  JOB_MESSAGE="lost server $lost: mpirun lost its connection to the daemon there (network link down, server down, or its orted killed) and stopped the job"
  say "$JOB_MESSAGE (mpirun status $STATUS, $((SECONDS - T0)) s into the job); check $lost and the network between it and ${SERVER_IDS[0]}"
  say "the ranks on $lost are stopped by its daemon, cut off from mpirun (Open MPI's TCP keepalive), or by run_distribute.sh following the job there"
elif [ -n "$failed" ]; then
  JOB_MESSAGE="rank $failed$where failed (${how:-see mpirun.log})"
  say "rank $failed$where failed (${how:-see $MLOG}); mpirun stopped the other ranks (mpirun status $STATUS)"
  if [ -n "$rank_errors" ]; then
    say "the errors rank $failed logged ($LOGDIR/rank_$failed/gridformer.log):"
    echo "$rank_errors" >&2
  elif [ -n "$(this_run_log "$failed")" ]; then
    say "last 20 lines of $LOGDIR/rank_$failed/gridformer.log:"
    this_run_log "$failed" | tail -n 20 >&2
  else
    say "rank $failed wrote no log this run; last 20 lines of $MLOG:"
    tail -n 20 "$MLOG" >&2
  fi
else
  ssh_lines=$(grep -a -E '^ssh: |Permission denied|Host key verification failed|Could not resolve hostname' "$MLOG" | sort -u)
  if [ -n "$ssh_lines" ]; then
    say "mpirun could not start its daemons over ssh:"
    echo "$ssh_lines" >&2
    JOB_MESSAGE="mpirun could not start its daemons over ssh: $(head -1 <<<"$ssh_lines")"
    say "every server needs passwordless ssh from this host ('${AGENT[*]:-ssh} HOST true' must work without a prompt) and its right address as server_id in the rank table"
    say "mpirun failed with status $STATUS; its whole report: $MLOG"
  else
    say "mpirun failed with status $STATUS and named no rank; last 20 lines of $MLOG:"
    tail -n 20 "$MLOG" >&2
    JOB_MESSAGE="mpirun failed with status $STATUS and named no rank"
  fi
fi
# The other errors the ranks reported, each whole (rank 0 reports the ones every rank shares, such
# as a config or rank table problem, on its console, which mpirun.log holds).
if [ -n "$failed" ]; then
  errors=$(error_blocks <(this_run_log "$failed") "$MLOG")
else
  errors=$(error_blocks /dev/null "$MLOG")
fi
[ -n "$errors" ] && { say "errors reported by the ranks (from $MLOG):"; echo "$errors" >&2; }
job_end failed "$STATUS" "$JOB_MESSAGE"
exit "$STATUS"
