#!/usr/bin/env bash
# MindFormers' scripts/msrun_launcher.sh for gridformer: starts a job of WORKER_NUM ranks without a rank table,
# run on every node (server) with that node's LOCAL_WORKER and NODE_RANK, as MindSpore's msrun is. Node 0 (the
# host MASTER_ADDR names) gathers the other nodes' registrations at MASTER_ADDR:MASTER_PORT (build/bin/msrun_rendezvous),
# then starts every rank in one mpirun job (the other nodes' over ssh) through scripts/run_distribute.sh, which checks
# and supervises it; the other nodes wait and end with the job's status. Each rank's output goes to
# LOG_DIR/worker_<rank>.log on the node it runs on. See docs/distributed.md ("msrun-style launch").
set -uo pipefail

PROG=msrun_launcher.sh
usage() {
  cat >&2 <<'EOF'
usage: bash scripts/msrun_launcher.sh "COMMAND" [WORKER_NUM] [LOCAL_WORKER] [MASTER_ADDR] [MASTER_PORT] [NODE_RANK] [LOG_DIR] [JOIN] [CLUSTER_TIME_OUT]
       bash scripts/msrun_launcher.sh [--worker_num N] [--local_worker_num N] [--master_addr A] [--master_port P]
                                      [--node_rank R] [--log_dir D] [--join True|False] [--cluster_time_out S] COMMAND ARGS...

MindFormers' positional forms (COMMAND quoted, as one argument), with its defaults:
  "COMMAND"                       8 workers on this node
  "COMMAND" WORKER_NUM            WORKER_NUM workers on this node
  "COMMAND" WORKER_NUM MASTER_PORT LOG_DIR JOIN CLUSTER_TIME_OUT                            one node
  "COMMAND" WORKER_NUM LOCAL_WORKER MASTER_ADDR MASTER_PORT NODE_RANK LOG_DIR JOIN CLUSTER_TIME_OUT   several nodes
msrun's flags (--name VALUE or --name=VALUE) may be given instead of or besides them, before or after a quoted
COMMAND; with an unquoted COMMAND they come first and everything after COMMAND is its arguments, as for msrun.

  WORKER_NUM        ranks of the whole job (default 8)
  LOCAL_WORKER      ranks on this node (default 8; WORKER_NUM when only WORKER_NUM is given). Equal to WORKER_NUM:
                    one node, and MASTER_ADDR and NODE_RANK are not used
  MASTER_ADDR       address of node 0, where the nodes meet (default 127.0.0.1)
  MASTER_PORT       TCP port there, 1024-65535 (default 8118)
  NODE_RANK         this node's index: 0 on the host MASTER_ADDR names (it launches the job), 1, 2, ... on the
                    others (default 0); node k's ranks follow those of nodes 0..k-1
  LOG_DIR           each rank's output: LOG_DIR/worker_<rank>.log (default output/msrun_log; + _$MF_LOG_SUFFIX if set)
  JOIN              True: wait for the job's end and exit with its status. False (default): go on in the
                    background and return at once; the launcher's output is in LOG_DIR/scheduler.log on node 0,
                    LOG_DIR/node_<NODE_RANK>.log on the others
  CLUSTER_TIME_OUT  seconds for all nodes to register (default 7200; negative: no limit)

COMMAND, one of:
  gridformer train --config X.yaml [--set KEY=VALUE ...] [other `gridformer train` options]
  [python] run_mindformer.py --config X.yaml [--run_mode M] [--use_parallel B] [--load_checkpoint P]
                    [--train_dataset_dir D] [--KEY VALUE ...]   MindFormers' arguments, each becoming a --set
                    (--train_dataset_dir sets train_dataset.data_loader.data_path)
  X.yaml [gridformer train options]                            the config alone
  gridformer pretrain_gpt ARGS...   a Megatron-LM job (docs/megatron.md; what scripts/torchrun runs): the ranks run
                    it with torchrun's environment (RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR
                    MASTER_PORT; LOCAL_RANK = RANK mod LOCAL_WORKER, so every node needs the same LOCAL_WORKER)
`gridformer` is $GRIDFORMER_BIN, else a gridformer on PATH, else build/bin/gridformer next to this script; a path
to the binary works too.

Several nodes: run it on each, in the same directory with the same paths (binary, config, data), the same COMMAND,
WORKER_NUM, MASTER_ADDR, MASTER_PORT and LOG_DIR, and each node's own LOCAL_WORKER and NODE_RANK; node 0 needs
passwordless ssh to the others (mpirun starts their ranks). Node 0 writes LOG_DIR/rank_table.json (the nodes as
servers) and runs scripts/run_distribute.sh with it: its environment (MPIRUN_ARGS, GF_CONNECT_TIMEOUT, ...) applies.
A node is counted only when it proves the job's secret: GF_JOB_SECRET when set (the same on every node, 16 characters
or more), else a random one node 0's launcher writes to LOG_DIR/.job_secret (mode 0600) and the other nodes read there
(LOG_DIR on a directory they share). Node 0 refuses and logs any other connection.

environment:
  GRIDFORMER_BIN    the gridformer binary; RANK_TABLE_BIN, MSRUN_RENDEZVOUS_BIN: the tools (default: next to it)
  MF_LOG_SUFFIX     appended to LOG_DIR as _SUFFIX (MindFormers)
  GF_JOB_SECRET     several nodes: the job's secret, the same on every node (default: LOG_DIR/.job_secret, above)
  GF_TORCHRUN_ENV=1 give every rank torchrun's environment, as for pretrain_gpt (scripts/torchrun sets it)
  GF_DRY_RUN=1      check the arguments and the config, print what would run, start nothing
exit status: 2 for a wrong argument or config (nothing started); with JOIN True the job's status (see
run_distribute.sh), 1 if the nodes did not all register within CLUSTER_TIME_OUT.
EOF
  exit "${1:-2}"
}
say() { echo "$PROG: $*" >&2; }
die() { echo "$PROG: error: $*" >&2; exit 2; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SELF=$HERE/$(basename "${BASH_SOURCE[0]}")

# ---- node 0, once every node has registered: the job through run_distribute.sh ---------------------------------
# (msrun_rendezvous serve runs this with GF_MSRUN_STATE, the launcher's settings, and the nodes it gathered.)
launch() { # launch NODES_FILE: LOG_DIR/rank_table.json from the nodes, then run_distribute.sh in this process
  local nodes=$1 tables=$LOGABS/rank_tables addr prev="" i s
  local -a ADDRS=() COUNTS=() RANKS=()
  while read -r nr addr local host; do
    [ -n "$nr" ] || continue
    # Two launchers on one host (the same address, consecutive node ranks) are one server of both nodes' ranks.
    if [ "$addr" = "$prev" ]; then
      COUNTS[-1]=$((COUNTS[-1] + local)) RANKS[-1]+=",$nr"
    else
      for i in "${!ADDRS[@]}"; do
        [ "${ADDRS[i]}" = "$addr" ] && die "nodes ${RANKS[i]} and $nr are on one host ($addr) but node(s) between them are not: mpirun places ranks host by host, so give the launchers of one host consecutive NODE_RANKs"
      done
      ADDRS+=("$addr") COUNTS+=("$local") RANKS+=("$nr")
    fi
    prev=$addr
  done <"$nodes"
  rm -rf "$tables" && mkdir -p "$tables" || die "cannot write $tables"
  local -a parts=()
  for i in "${!ADDRS[@]}"; do
    "$TOOL" --device_num "[0,${COUNTS[i]})" --server_ip "${ADDRS[i]}" --output_dir "$tables/$i" >/dev/null ||
      die "rank_table could not write a table for ${ADDRS[i]}"
    parts+=("$(ls "$tables/$i"/*.json)")
  done
  local table=$LOGABS/rank_table.json
  if ((${#ADDRS[@]} == 1)); then
    cp "${parts[0]}" "$table"
  else
    "$TOOL" merge "$table" "${parts[@]}" >/dev/null || die "rank_table merge failed"
  fi
  local servers="" first=0
  for i in "${!ADDRS[@]}"; do
    servers+="${servers:+, }${ADDRS[i]} (node ${RANKS[i]}: ranks $first..$((first + COUNTS[i] - 1)))"
    first=$((first + COUNTS[i]))
  done
  say "$WORKER_NUM rank(s) on ${#ADDRS[@]} host(s): $servers; rank table $table"
  local -a rd=(bash "$HERE/run_distribute.sh" "$table" "$CONFIG" "[0,${COUNTS[0]})" "$RUN_MODE")
  ((${#ADDRS[@]} > 1)) && rd+=("$WORKER_NUM")
  say "running: GRIDFORMER_BIN=$WRAPPER ${rd[*]}"
  export GRIDFORMER_BIN=$WRAPPER RANK_TABLE_BIN=$TOOL
  exec "${rd[@]}"
}
if [ -n "${GF_MSRUN_STATE:-}" ]; then
  # shellcheck disable=SC1090 # written by this script (declare -p)
  source "$GF_MSRUN_STATE" || die "cannot read $GF_MSRUN_STATE"
  launch "$GF_MSRUN_NODES"
fi

# ---- arguments -------------------------------------------------------------------------------------------------
ORIG_ARGS=("$@")
declare -A FLAG=()
POS=() CMDV=() CMD_STYLE=""
set_flag() { # set_flag NAME VALUE
  [ -z "${FLAG[$1]+x}" ] || die "--$1 is given twice"
  FLAG[$1]=$2
}
is_program() { # the first word of an unquoted msrun-style command (not a config file)
  case "$1" in *.yaml | *.yml) return 1 ;; esac
  return 0
}
while (($#)); do
  a=$1
  case "$a" in
    -h | --help) usage 0 ;;
    --worker_num=* | --local_worker_num=* | --master_addr=* | --master_port=* | --node_rank=* | --log_dir=* | --join=* | --cluster_time_out=*)
      n=${a%%=*} && set_flag "${n#--}" "${a#*=}" ;;
    --worker_num | --local_worker_num | --master_addr | --master_port | --node_rank | --log_dir | --join | --cluster_time_out)
      (($# >= 2)) || die "$a needs a value"
      set_flag "${a#--}" "$2"
      shift ;;
    --bind_core* | --sim_level* | --sim_rank_id* | --rank_table_file* | --worker_log_name* | --tail_worker_log*)
      die "msrun's ${a%%=*} is not supported here (gridformer's launcher binds ranks to cores itself when they fit; see --help)" ;;
    --*) die "unknown option $a (msrun's options: --worker_num --local_worker_num --master_addr --master_port --node_rank --log_dir --join --cluster_time_out; see --help)" ;;
    *)
      if ((${#CMDV[@]} == 0)) && [ -z "$CMD_STYLE" ]; then
        if [[ $a =~ [[:space:]] ]] || ! is_program "$a"; then
          CMD_STYLE=quoted
          # As MindFormers' script does (eval), the shell's quoting inside COMMAND holds; globs are not expanded.
          set -f
          eval "CMDV=($a)" 2>/dev/null || die "COMMAND \"$a\": its quotes do not match"
          set +f
        else
          CMD_STYLE=msrun CMDV=("$@")
          break
        fi
      else
        POS+=("$a")
      fi ;;
  esac
  shift
done
((${#CMDV[@]})) || { say "error: no COMMAND"; usage; }
if [ "$CMD_STYLE" = msrun ] && ((${#POS[@]})); then die "unexpected arguments before COMMAND: ${POS[*]}"; fi

# MindFormers' positional forms: COMMAND plus 0, 1, 5 or 8 values.
WORKER_NUM=8 LOCAL_WORKER=8 MASTER_ADDR=127.0.0.1 MASTER_PORT=8118 NODE_RANK=0 LOG_DIR=output/msrun_log JOIN=False CLUSTER_TIME_OUT=7200
only_worker_num=0
case ${#POS[@]} in
  0) ;;
  1) WORKER_NUM=${POS[0]} LOCAL_WORKER=${POS[0]} ;;
  5) WORKER_NUM=${POS[0]} LOCAL_WORKER=${POS[0]} MASTER_PORT=${POS[1]} LOG_DIR=${POS[2]} JOIN=${POS[3]} CLUSTER_TIME_OUT=${POS[4]} ;;
  8) WORKER_NUM=${POS[0]} LOCAL_WORKER=${POS[1]} MASTER_ADDR=${POS[2]} MASTER_PORT=${POS[3]} NODE_RANK=${POS[4]} LOG_DIR=${POS[5]} JOIN=${POS[6]} CLUSTER_TIME_OUT=${POS[7]} ;;
  *) die "got COMMAND and ${#POS[@]} more argument(s) (${POS[*]}); MindFormers' forms take 0, 1, 5 or 8 after COMMAND: \"COMMAND\" [WORKER_NUM] [LOCAL_WORKER MASTER_ADDR MASTER_PORT NODE_RANK LOG_DIR JOIN CLUSTER_TIME_OUT] (see --help)" ;;
esac
# A flag and a positional value for the same parameter would leave one of them unused: refused.
declare -A POS_HAS=()
case ${#POS[@]} in
  1) POS_HAS=([worker_num]=1) ;;
  5) POS_HAS=([worker_num]=1 [master_port]=1 [log_dir]=1 [join]=1 [cluster_time_out]=1) ;;
  8) POS_HAS=([worker_num]=1 [local_worker_num]=1 [master_addr]=1 [master_port]=1 [node_rank]=1 [log_dir]=1 [join]=1 [cluster_time_out]=1) ;;
esac
for f in "${!FLAG[@]}"; do
  [ -z "${POS_HAS[$f]+x}" ] || die "--$f and the positional ${f^^} are both given"
done
[ -n "${FLAG[worker_num]+x}" ] && WORKER_NUM=${FLAG[worker_num]}
[ -n "${FLAG[local_worker_num]+x}" ] && LOCAL_WORKER=${FLAG[local_worker_num]}
# --worker_num without --local_worker_num: one node of WORKER_NUM, as MindFormers' two-argument form.
[ -n "${FLAG[worker_num]+x}" ] && [ -z "${FLAG[local_worker_num]+x}" ] && ((${#POS[@]} == 0)) && LOCAL_WORKER=$WORKER_NUM
[ -n "${FLAG[master_addr]+x}" ] && MASTER_ADDR=${FLAG[master_addr]}
[ -n "${FLAG[master_port]+x}" ] && MASTER_PORT=${FLAG[master_port]}
[ -n "${FLAG[node_rank]+x}" ] && NODE_RANK=${FLAG[node_rank]}
[ -n "${FLAG[log_dir]+x}" ] && LOG_DIR=${FLAG[log_dir]}
[ -n "${FLAG[join]+x}" ] && JOIN=${FLAG[join]}
[ -n "${FLAG[cluster_time_out]+x}" ] && CLUSTER_TIME_OUT=${FLAG[cluster_time_out]}

[[ $WORKER_NUM =~ ^[1-9][0-9]{0,5}$ ]] || die "WORKER_NUM '$WORKER_NUM' is not a positive number"
[[ $LOCAL_WORKER =~ ^[1-9][0-9]{0,5}$ ]] || die "LOCAL_WORKER '$LOCAL_WORKER' is not a positive number"
((LOCAL_WORKER <= WORKER_NUM)) || die "LOCAL_WORKER $LOCAL_WORKER is more than WORKER_NUM $WORKER_NUM (the ranks of the whole job)"
[[ $MASTER_PORT =~ ^[0-9]{1,5}$ ]] && ((MASTER_PORT >= 1024 && MASTER_PORT <= 65535)) ||
  die "MASTER_PORT '$MASTER_PORT': expected a port from 1024 to 65535"
[[ $NODE_RANK =~ ^-?[0-9]{1,5}$ ]] || die "NODE_RANK '$NODE_RANK' is not a number (0 on node 0, 1, 2, ... on the others)"
[[ $CLUSTER_TIME_OUT =~ ^-?[0-9]{1,9}$ ]] || die "CLUSTER_TIME_OUT '$CLUSTER_TIME_OUT' is not a number of seconds (negative: no limit)"
case "$JOIN" in
  True | true | 1) JOIN=True ;;
  False | false | 0) JOIN=False ;;
  *) die "JOIN '$JOIN': expected True or False" ;;
esac
[ -n "$MASTER_ADDR" ] && [[ ! $MASTER_ADDR =~ [[:space:]] ]] || die "MASTER_ADDR '$MASTER_ADDR' is not an address"
[ -n "$LOG_DIR" ] || die "LOG_DIR is empty"
SINGLE=0
((LOCAL_WORKER == WORKER_NUM)) && SINGLE=1
if ((!SINGLE)); then
  ((NODE_RANK >= 0)) || die "NODE_RANK $NODE_RANK: with several nodes (WORKER_NUM $WORKER_NUM > LOCAL_WORKER $LOCAL_WORKER) give each node its index: 0 on the host MASTER_ADDR names, 1, 2, ... on the others"
fi
[ -n "${MF_LOG_SUFFIX:-}" ] && LOG_DIR=${LOG_DIR}_$MF_LOG_SUFFIX

# ---- the command ------------------------------------------------------------------------------------------------
BIN="" CONFIG="" SETS=() TRAIN=() RUN_MODE="" MEGATRON=()
default_bin() {
  if [ -n "${GRIDFORMER_BIN:-}" ]; then echo "$GRIDFORMER_BIN"
  elif command -v gridformer >/dev/null; then command -v gridformer
  else echo "$HERE/../build/bin/gridformer"; fi
}
forms='COMMAND must be `gridformer train --config X.yaml ...`, `run_mindformer.py --config X.yaml ...` or a config file X.yaml (see --help)'
# MindFormers' run_mindformer.py arguments that set a key elsewhere than their own name.
declare -A MF_KEY=([train_dataset_dir]=train_dataset.data_loader.data_path [eval_dataset_dir]=eval_dataset.data_loader.data_path
  [batch_size]=runner_config.batch_size [epochs]=runner_config.epochs [sink_mode]=runner_config.sink_mode
  [gradient_accumulation_steps]=runner_config.gradient_accumulation_steps [num_samples]=train_dataset.data_loader.num_samples
  [device_id]=context.device_id [device_target]=context.device_target [mode]=context.mode
  [strategy_load_checkpoint]=parallel.strategy_ckpt_load_file)
w0=${CMDV[0]}
case "$w0" in
  *.yaml | *.yml)
    CONFIG=$w0 BIN=$(default_bin) rest=("${CMDV[@]:1}") style=config ;;
  python | python3 | python3.* | */python | */python3 | */python3.* | run_mindformer.py | */run_mindformer.py)
    if [ "${w0##*/}" = run_mindformer.py ]; then rest=("${CMDV[@]:1}"); else rest=("${CMDV[@]:2}")
      [ "${CMDV[1]:-}" != "" ] && [ "${CMDV[1]##*/}" = run_mindformer.py ] || die "\"${CMDV[*]}\": python runs nothing here but run_mindformer.py; $forms"
    fi
    BIN=$(default_bin) style=mindformers ;;
  gridformer | */gridformer)
    if [ "$w0" = gridformer ]; then BIN=$(default_bin); else BIN=$w0; fi
    case "${CMDV[1]:-}" in
      train) rest=("${CMDV[@]:2}") style=gridformer ;;
      pretrain_gpt) rest=() MEGATRON=("${CMDV[@]:2}") style=megatron ;;
      *) die "\"${CMDV[*]}\": only \`gridformer train\` and \`gridformer pretrain_gpt\` are launched this way (got '${CMDV[1]:-}'); $forms" ;;
    esac ;;
  *) die "\"${CMDV[*]}\": $forms" ;;
esac
i=0
while ((i < ${#rest[@]})); do
  a=${rest[i]}
  if [[ $a == --*=* ]]; then key=${a%%=*} val=${a#*=} has=1; else key=$a val=${rest[i + 1]:-} has=0; fi
  step=$((2 - has))
  case "$style:$key" in
    *:--config)
      ((has || i + 1 < ${#rest[@]})) || die "--config needs a file"
      [ -z "$CONFIG" ] || die "--config is given twice"
      CONFIG=$val ;;
    gridformer:--set | config:--set) SETS+=(--set "$val") ;;
    gridformer:--rank_table | config:--rank_table) die "--rank_table: this launch writes its own rank table (LOG_DIR/rank_table.json); use scripts/run_distribute.sh for a table of yours" ;;
    gridformer:--* | config:--*)
      # another `gridformer train` option: passed on (with its value when it has one)
      if ((has)) || [[ ${rest[i + 1]:-} == --* ]] || ((i + 1 >= ${#rest[@]})); then TRAIN+=("$a"); step=1
      else TRAIN+=("$a" "$val"); fi ;;
    mindformers:--run_mode) SETS+=(--set "run_mode=$val") ;;
    mindformers:--predict_data | mindformers:--modal_type | mindformers:--adapter_id | mindformers:--predict_batch_size)
      die "$key: prediction is \`gridformer predict\` (README), not launched by this script" ;;
    mindformers:--register_path | mindformers:--remote_save_url)
      die "$key: MindFormers' $key has no counterpart in gridformer" ;;
    mindformers:--options)
      ((has)) && die "--options takes KEY=VALUE pairs after it, not --options=..."
      step=1
      while ((i + step < ${#rest[@]})) && [[ ${rest[i + step]} != --* ]]; do
        [[ ${rest[i + step]} == *=* ]] || die "--options ${rest[i + step]}: expected KEY=VALUE"
        SETS+=(--set "${rest[i + step]}"); step=$((step + 1))
      done ;;
    mindformers:--*)
      ((has || i + 1 < ${#rest[@]})) && [[ $has == 1 || ${rest[i + 1]} != --* ]] || die "$key needs a value (run_mindformer.py's arguments are --KEY VALUE)"
      k=${key#--}
      SETS+=(--set "${MF_KEY[$k]:-$k}=$val") ;;
    *) die "\"${CMDV[*]}\": unexpected '$a' (arguments are --KEY VALUE); $forms" ;;
  esac
  i=$((i + step))
done
if [ "$style" != megatron ]; then
  [ -n "$CONFIG" ] || die "\"${CMDV[*]}\": no --config"
  [ -f "$CONFIG" ] || die "CONFIG '$CONFIG' is not a file"
  CONFIG=$(realpath "$CONFIG")
fi
[ -x "$BIN" ] || die "no gridformer binary at $BIN: build it (cmake -S . -B build && cmake --build build -j), or set GRIDFORMER_BIN"
BIN=$(realpath "$BIN")
TOOL=${RANK_TABLE_BIN:-$(dirname "$BIN")/rank_table}
RDV=${MSRUN_RENDEZVOUS_BIN:-$(dirname "$BIN")/msrun_rendezvous}
[ -x "$TOOL" ] || die "no rank_table tool at $TOOL: build it with gridformer, or set RANK_TABLE_BIN"
((SINGLE)) || [ -x "$RDV" ] || die "no msrun_rendezvous tool at $RDV: build it with gridformer, or set MSRUN_RENDEZVOUS_BIN"
[ -f "$HERE/run_distribute.sh" ] || die "no run_distribute.sh next to this script ($HERE)"

# The config as the ranks will read it: valid, and its run mode (run_distribute.sh checks the layout on WORKER_NUM).
err=$(mktemp "${TMPDIR:-/tmp}/gf_msrun.XXXXXX") || die "cannot create a temporary file"
if [ "$style" = megatron ]; then
  # The config the arguments mean on WORKER_NUM ranks (LOG_DIR/megatron_job.yaml): run_distribute.sh checks its
  # layout and takes its output_dir; the ranks run pretrain_gpt with the arguments themselves.
  resolved=$("$BIN" config --ranks "$WORKER_NUM" --from-megatron "${MEGATRON[@]}" 2>"$err")
  st=$?
  problems=$(grep -v '^note: \|^differs from Megatron-LM: ' "$err"); rm -f "$err"
  if ((st != 0)); then
    echo "$problems" >&2
    die "the Megatron arguments have the problems above (gridformer config --from-megatron); nothing started"
  fi
else
  resolved=$("$BIN" config --config "$CONFIG" "${SETS[@]}" 2>"$err")
  st=$?
  problems=$(cat "$err"); rm -f "$err"
  if ((st != 0)); then
    echo "$problems" >&2
    die "CONFIG $CONFIG${SETS[*]:+ with ${SETS[*]}} has the problems above; nothing started"
  fi
fi
RUN_MODE=$(sed -n 's/^run_mode:[[:space:]]*//p' <<<"$resolved" | head -1 | tr -d "\"'")
case "$RUN_MODE" in
  train | finetune | eval) ;;
  *) die "run_mode '$RUN_MODE' (from $CONFIG${SETS[*]:+ with ${SETS[*]}}): this launch runs train, finetune or eval" ;;
esac

OUT=$(sed -n 's/^output_dir:[[:space:]]*//p' <<<"$resolved" | head -1 | sed "s/^[\"']//; s/[\"']\$//")
OUT=${OUT:-./output}
shell_words() { # the words as a shell would read them back
  local w out=""
  for w in "$@"; do
    [[ $w =~ ^[A-Za-z0-9_./=:,@%+-]+$ ]] || w="'${w//\'/\'\\\'\'}'"
    out+="${out:+ }$w"
  done
  echo "$out"
}
mkdir -p "$LOG_DIR" || die "cannot create LOG_DIR $LOG_DIR"
LOGABS=$(realpath "$LOG_DIR")
if [ "$style" = megatron ]; then
  RUNS=$(shell_words "$BIN" pretrain_gpt "${MEGATRON[@]}")
  CONFIG=$LOGABS/megatron_job.yaml
  echo "$resolved" >"$CONFIG.$$" && mv -f "$CONFIG.$$" "$CONFIG" || die "cannot write $CONFIG"
else
  RUNS=$(shell_words "$BIN" train --config "$CONFIG" "${SETS[@]}" "${TRAIN[@]}")
fi
# What every node must agree on, checked by node 0 at registration (pretrain_gpt: LOCAL_RANK needs LOCAL_WORKER).
JOB="cwd=$PWD worker_num=$WORKER_NUM log_dir=$LOGABS command=$RUNS"
# torchrun's environment for each rank: a Megatron job's, and any job scripts/torchrun launches (GF_TORCHRUN_ENV=1).
TR_ENV=0
{ [ "$style" = megatron ] || [ "${GF_TORCHRUN_ENV:-0}" = 1 ]; } && TR_ENV=1 JOB+=" local_worker=$LOCAL_WORKER"

if ((SINGLE)); then
  where="one node, $WORKER_NUM worker(s)"
  [ "$NODE_RANK" != 0 ] && [ "$NODE_RANK" != -1 ] && where+=" (NODE_RANK $NODE_RANK not used: every worker is on this node)"
elif ((NODE_RANK == 0)); then
  where="node 0 of a job of $WORKER_NUM worker(s): $LOCAL_WORKER here; the other nodes register at $MASTER_ADDR:$MASTER_PORT"
else
  where="node $NODE_RANK of a job of $WORKER_NUM worker(s): $LOCAL_WORKER here, started by node 0 ($MASTER_ADDR:$MASTER_PORT)"
fi

# ---- the ranks' wrapper: each rank's output to LOG_DIR/worker_<rank>.log --------------------------------------
# run_distribute.sh runs it as its gridformer binary (GRIDFORMER_BIN): `config` and `train` get this launch's
# arguments; a rank (mpirun sets OMPI_COMM_WORLD_RANK) writes its stdout and stderr to worker_<rank>.log and on to
# mpirun (mpirun.log); exec keeps the rank's pid gridformer's. Every node writes the same file (same paths), since
# mpirun starts it on every node.
WRAPPER=$LOGABS/gridformer_worker.sh
{
  echo '#!/usr/bin/env bash'
  echo "# written by scripts/msrun_launcher.sh for: $RUNS"
  echo "LOG=$(shell_words "$LOGABS") RANK_LOG_DIR=$(shell_words "$(realpath -m "$OUT")/log")"
  TR_LOCAL=$LOCAL_WORKER TR_ADDR=$MASTER_ADDR TR_PORT=$MASTER_PORT
  declare -p BIN SETS TRAIN style MEGATRON TR_ENV TR_LOCAL TR_ADDR TR_PORT | sed 's/^declare -[a-zA-Z-]* /declare /'
  cat <<'EOF'
case "${1:-}" in
  train)
    shift
    r=${OMPI_COMM_WORLD_RANK:-0}
    echo "# rank $r's stdout and stderr (rank 0: its console log; every rank: its errors); its whole log: $RANK_LOG_DIR/rank_$r/gridformer.log" >"$LOG/worker_$r.log"
    if ((TR_ENV)); then
      # torchrun's environment: node k holds ranks k*LOCAL..k*LOCAL+LOCAL-1 (every node the same LOCAL_WORKER)
      export RANK=$r WORLD_SIZE=${OMPI_COMM_WORLD_SIZE:-1} LOCAL_RANK=$((r % TR_LOCAL)) LOCAL_WORLD_SIZE=$TR_LOCAL \
        GROUP_RANK=$((r / TR_LOCAL)) MASTER_ADDR=$TR_ADDR MASTER_PORT=$TR_PORT
      echo "# torchrun's environment: RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GROUP_RANK=$GROUP_RANK MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT" >>"$LOG/worker_$r.log"
    fi
    exec > >(exec tee -a "$LOG/worker_$r.log") 2>&1
    # A Megatron job runs pretrain_gpt with its arguments (run_distribute.sh's `--config ... --set run_mode=...` name
    # their translation, which it checked).
    [ "$style" = megatron ] && exec "$BIN" pretrain_gpt "${MEGATRON[@]}"
    exec "$BIN" train "$@" "${SETS[@]}" "${TRAIN[@]}" ;;
  config) shift; exec "$BIN" config "$@" "${SETS[@]}" ;;
  *) exec "$BIN" "$@" ;;
esac
EOF
} >"$WRAPPER.$$" && chmod +x "$WRAPPER.$$" && mv -f "$WRAPPER.$$" "$WRAPPER" || die "cannot write $WRAPPER"

say "$where; run_mode $RUN_MODE"
say "command: $RUNS"
say "worker logs: $LOGABS/worker_<rank>.log"
if [ "${GF_DRY_RUN:-0}" = 1 ]; then
  if ((SINGLE)); then
    say "GF_DRY_RUN=1: run_distribute.sh checks the layout and prints its mpirun command; nothing starts"
    export GF_DRY_RUN
  elif ((NODE_RANK == 0)); then
    say "GF_DRY_RUN=1: would wait at $MASTER_ADDR:$MASTER_PORT for the other nodes' $((WORKER_NUM - LOCAL_WORKER)) worker(s), then run run_distribute.sh; nothing started"
    exit 0
  else
    say "GF_DRY_RUN=1: would register $LOCAL_WORKER worker(s) at $MASTER_ADDR:$MASTER_PORT and wait for the job's end; nothing started"
    exit 0
  fi
fi

# ---- JOIN False: the rest goes on in the background -------------------------------------------------------------
if [ "$JOIN" = False ] && [ -z "${GF_MSRUN_DETACHED:-}" ] && [ "${GF_DRY_RUN:-0}" != 1 ]; then
  out=$LOGABS/scheduler.log
  ((SINGLE || NODE_RANK == 0)) || out=$LOGABS/node_$NODE_RANK.log
  GF_MSRUN_DETACHED=1 setsid nohup bash "$SELF" "${ORIG_ARGS[@]}" >"$out" 2>&1 </dev/null &
  say "JOIN False: the launch goes on in the background (pid $!, its own session); its output: $out (JOIN True waits for the job's end and returns its status)"
  exit 0
fi

# ---- one node: the job here ---------------------------------------------------------------------------------------
if ((SINGLE)); then
  nodes=$LOGABS/nodes
  echo "0 127.0.0.1 $WORKER_NUM $(hostname)" >"$nodes" || die "cannot write $nodes"
  launch "$nodes"
fi

# ---- several nodes ----------------------------------------------------------------------------------------------
# The job's secret, which a node proves before node 0 counts it (msrun_rendezvous reads it from the environment,
# never argv): GF_JOB_SECRET, else node 0 writes a fresh random one to LOG_DIR/.job_secret before it serves, and the
# other nodes read it there once node 0 answers.
if [ -n "${GF_JOB_SECRET:-}" ]; then
  export GF_JOB_SECRET
  unset GF_JOB_SECRET_FILE
  say "job secret: GF_JOB_SECRET (a node without it is refused)"
else
  export GF_JOB_SECRET_FILE=$LOGABS/.job_secret
  if ((NODE_RANK == 0)); then
    tmp=$(umask 077 && mktemp "$LOGABS/.job_secret.XXXXXX") || die "cannot write in $LOGABS"
    token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    ((${#token} == 32)) && printf '%s\n' "$token" >"$tmp" && chmod 600 "$tmp" && mv -f "$tmp" "$GF_JOB_SECRET_FILE" ||
      { rm -f "$tmp"; die "cannot write the job secret $GF_JOB_SECRET_FILE"; }
    unset token
    say "job secret: written to $GF_JOB_SECRET_FILE (mode 0600); the other nodes read it there (LOG_DIR shared), or set GF_JOB_SECRET on every node"
  else
    say "job secret: read from $GF_JOB_SECRET_FILE once node 0 answers (node 0's launcher writes it; LOG_DIR must be shared with node 0, else set GF_JOB_SECRET on every node)"
  fi
fi
if ((NODE_RANK == 0)); then
  state=$LOGABS/.msrun_state
  { declare -p HERE LOGABS CONFIG RUN_MODE WORKER_NUM WRAPPER TOOL | sed 's/^declare -[a-zA-Z-]* /declare -g /'; } >"$state" || die "cannot write $state"
  export GF_MSRUN_STATE=$state GF_MSRUN_NODES=$LOGABS/nodes
  rm -f "$GF_MSRUN_NODES"
  exec "$RDV" serve --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" --worker_num "$WORKER_NUM" \
    --local_worker_num "$LOCAL_WORKER" --timeout "$CLUSTER_TIME_OUT" --job "$JOB" --nodes "$GF_MSRUN_NODES" \
    --end_message "$OUT/log/job" -- bash "$SELF"
fi
exec "$RDV" join --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" --worker_num "$WORKER_NUM" \
  --local_worker_num "$LOCAL_WORKER" --node_rank "$NODE_RANK" --timeout "$CLUSTER_TIME_OUT" --job "$JOB"
