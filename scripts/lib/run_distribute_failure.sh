# Sourced by scripts/run_distribute.sh (moved out of it unchanged) when mpirun failed: names the rank that failed
# (or the server lost, or ssh), shows the errors the ranks logged, and sets JOB_MESSAGE.
# It runs in run_distribute.sh's shell, at that point of it, with its variables and functions (say, die, ...).

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
