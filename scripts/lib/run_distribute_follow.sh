# Sourced by scripts/run_distribute.sh (moved out of it unchanged): another server's range. Defines follow_job,
# which waits for the job the server of rank 0 launched, follows this server's ranks and ends with the job's status
# (and jf, read_job, stop_here).
# It runs in run_distribute.sh's shell, at that point of it, with its variables and functions (say, die, ...).

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
