#!/usr/bin/env bash
# A 4-rank data-parallel job across two servers (two network namespaces joined by a veth pair, each
# with its own sshd, as tests/integration/two_servers.sh makes them; 2 ranks per server, Open MPI's
# TCP over the veth) against the same 4 ranks on one server (the first namespace alone: shared
# memory between all four): tokens/s (medians of ROUNDS interleaved runs) and the bytes on the veth.
# Both servers are namespaces of this one machine: the veth is a memory copy, not a wire, and the
# four ranks share its cores either way, so this measures the TCP path's cost, not a network's.
#   bash bench/two_servers.sh [BUILD_DIR] [ROUNDS] [STEPS]      (root: network namespaces, sshd)
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(realpath "${1:-$SRC/build}")"; ROUNDS=${2:-3}; STEPS=${3:-30}
BIN="$BUILD/bin/gridformer" TOOL="$BUILD/bin/rank_table" RUN="$SRC/scripts/run_distribute.sh"
[ -x /usr/sbin/sshd ] || { echo "two_servers bench: needs /usr/sbin/sshd (apt-get install openssh-server)" >&2; exit 2; }
WORK="$(mktemp -d)"
X=$(($$ / 250 % 250 + 1)) Y=$(($$ % 250 + 1))
NET="10.$X.$Y" NS_A="gf_2sb_$$_a" NS_B="gf_2sb_$$_b" VA="gf2b$$a" VB="gf2b$$b" IP_A="10.$X.$Y.1" IP_B="10.$X.$Y.2"
cleanup() {
  for p in $(pgrep -f -- "$WORK/" || true); do kill -KILL "$p" 2>/dev/null || true; done
  ip netns del "$NS_A" 2>/dev/null || true; ip netns del "$NS_B" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK"
ip netns add "$NS_A"; ip netns add "$NS_B"
ip link add "$VA" netns "$NS_A" type veth peer name "$VB" netns "$NS_B"
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" addr add "$IP_A/24" dev "$VA"; ip -n "$NS_A" link set "$VA" up
ip -n "$NS_B" addr add "$IP_B/24" dev "$VB"; ip -n "$NS_B" link set "$VB" up
on_server() { local ns=$1 name=$2; shift 2; ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name" "$@"; }
mkdir -m 700 ssh; mkdir -p /run/sshd tmp
ssh-keygen -q -t ed25519 -N '' -f ssh/client_key; cp ssh/client_key.pub ssh/authorized_keys
for s in a b; do
  ip=$IP_A ns=$NS_A; [ $s = b ] && { ip=$IP_B; ns=$NS_B; }
  ssh-keygen -q -t ed25519 -N '' -f "ssh/host_key_$s"
  echo "$ip $(cut -d' ' -f1,2 "ssh/host_key_$s.pub")" >> ssh/known_hosts
  printf '%s\n' "ListenAddress $ip" "HostKey $WORK/ssh/host_key_$s" "AuthorizedKeysFile $WORK/ssh/authorized_keys" \
    "PermitRootLogin prohibit-password" "PasswordAuthentication no" "UsePAM no" "StrictModes no" "PidFile $WORK/ssh/sshd_$s.pid" > "ssh/sshd_$s.conf"
  on_server "$ns" "gfbench-$s" /usr/sbin/sshd -D -e -f "$WORK/ssh/sshd_$s.conf" > "ssh/sshd_$s.log" 2>&1 &
  disown $!
done
printf '%s\n' "Host *" "  IdentityFile $WORK/ssh/client_key" "  IdentitiesOnly yes" "  UserKnownHostsFile $WORK/ssh/known_hosts" \
  "  GlobalKnownHostsFile /dev/null" "  StrictHostKeyChecking yes" "  BatchMode yes" "  ConnectTimeout 5" "  LogLevel ERROR" > ssh/config
for i in $(seq 1 50); do on_server "$NS_A" gfbench-a ssh -F "$WORK/ssh/config" "$IP_B" true 2>/dev/null && break; sleep 0.2; done

export OMP_NUM_THREADS=1 GRIDFORMER_BIN="$BIN" RANK_TABLE_BIN="$TOOL" GF_PROGRESS_INTERVAL=600
export OMPI_MCA_plm_rsh_agent="ssh -F $WORK/ssh/config" OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_btl_tcp_if_include="$NET.0/24" OMPI_MCA_oob_tcp_if_include="$NET.0/24"
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_orte_tmpdir_base="$WORK/tmp"
"$TOOL" --device_num "[0,2)" --server_ip "$IP_A" --output_dir tables > /dev/null
"$TOOL" --device_num "[0,2)" --server_ip "$IP_B" --output_dir tables > /dev/null
"$TOOL" merge tables/two.json "tables/hccl_2p_01_$IP_A.json" "tables/hccl_2p_01_$IP_B.json" > /dev/null
"$TOOL" --device_num "[0,4)" --server_ip "$IP_A" --output_dir tables > /dev/null
cat > job.yaml <<YAML
seed: 11
output_dir: ./out
runner_config: {batch_size: 2, train_steps: $STEPS}
parallel_config: {data_parallel: 4}
train_dataset: {data_loader: {type: RandomTokens, seed: 5, num_samples: 64}}
callbacks: [{type: MFLossMonitor, per_print_times: 10}]
model:
  arch: {type: GPT2LMHeadModel}
  model_config: {type: GPT2Config, vocab_size: 1000, seq_length: 128, hidden_size: 128, num_layers: 4, num_heads: 4}
YAML
tx() { echo $(($(ip netns exec "$NS_A" cat "/sys/class/net/$VA/statistics/tx_bytes") + $(ip netns exec "$NS_B" cat "/sys/class/net/$VB/statistics/tx_bytes"))); }
# run KIND: one job; prints "tokens/s bytes_on_the_veth" (tokens/s: the last logged interval, steps after the first 10)
run() {
  rm -rf out
  local t0 t1
  t0=$(tx)
  if [ "$1" = two ]; then
    on_server "$NS_A" gfbench-a bash "$RUN" tables/two.json "$WORK/job.yaml" "[0,2)" train 4 > "run_$1.txt" 2>&1 || { cat "run_$1.txt" >&2; exit 1; }
  else
    on_server "$NS_A" gfbench-a bash "$RUN" "tables/hccl_4p_0123_$IP_A.json" "$WORK/job.yaml" "[0,4)" train > "run_$1.txt" 2>&1 || { cat "run_$1.txt" >&2; exit 1; }
  fi
  t1=$(tx)
  echo "$(/usr/bin/python3 -c 'import json,sys; print([json.loads(l) for l in open("out/metrics.jsonl") if "tokens_per_s" in l][-1]["tokens_per_s"])') $((t1 - t0))"
}
declare -a TWO=() ONE=() BYTES=() BYTES1=()
for r in $(seq 1 "$ROUNDS"); do
  read -r t b < <(run two); TWO+=("$t"); BYTES+=("$b")
  read -r t b < <(run one); ONE+=("$t"); BYTES1+=("$b")
  printf 'round %d: two servers %.0f tokens/s (%d bytes on the veth), one server %.0f tokens/s (%d bytes on the veth)\n' \
    "$r" "${TWO[-1]}" "${BYTES[-1]}" "${ONE[-1]}" "${BYTES1[-1]}"
done
params=$(sed -n 's/.* \([0-9]*\) parameters$/\1/p' out/log/rank_0/gridformer.log | head -1)
/usr/bin/python3 - "$params" "$STEPS" "${TWO[*]}" "${ONE[*]}" "${BYTES[*]}" <<'PY'
import statistics, sys
params, steps = int(sys.argv[1]), int(sys.argv[2])
two, one, b = ([float(x) for x in a.split()] for a in sys.argv[3:6])
mt, mo, mb = statistics.median(two), statistics.median(one), statistics.median(b)
print(f"median tokens/s: two servers {mt:.0f}, one server {mo:.0f}: two/one = {mt / mo:.3f}")
print(f"median bytes on the veth per two-server job: {mb / 1e6:.2f} MB ({mb / steps / 1e6:.3f} MB per step; "
      f"one copy of the fp32 gradients is {params * 4 / 1e6:.3f} MB: {mb / steps / (params * 4):.2f} copies per step, "
      f"both directions and the start-up included; a ring all-reduce over 4 ranks sends 1.5 copies on each of its "
      f"2 links that cross the servers: 3)")
PY
echo "commit: $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown) (scripts), binary $BIN; $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "model: GPT-2 4 layers, hidden 128, seq 128, vocab 1000 ($params parameters); 4 ranks x batch 2 (global 8 samples), $STEPS steps; tokens/s = the last logged interval (steps $((STEPS - 9))-$STEPS)"
echo "two servers: 2 ranks per namespace, each bound to a core; one server: 4 ranks in the first namespace, oversubscribed, not bound; OMP_NUM_THREADS=1"
echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), $(env -u OMP_NUM_THREADS nproc) cores; Open MPI $(mpirun --version | head -1 | awk '{print $NF}'); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
