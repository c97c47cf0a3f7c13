# Sourced by scripts/run_distribute.sh (moved out of it unchanged): the remote servers. Sets mpirun's ssh agent with
# a connection timeout and Open MPI's TCP keepalive (REMOTE, AGENT, RSH_ARGS, agent_opts, alive_opts) and defines
# probe_remote, the ssh probe of each remote server.
# It runs in run_distribute.sh's shell, at that point of it, with its variables and functions (say, die, ...).

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
  TEMP_PATHS+=("$dir")  # removed by run_distribute.sh's EXIT trap should a signal end the probe
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
