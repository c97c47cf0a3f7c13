#!/usr/bin/env bash
# scripts/gridformer.sbatch under a real Slurm on this host: a cluster of one node made here (slurmctld and slurmd
# started by the test with a slurm.conf of its own, its own ports, state and spool in a temporary directory; no
# accounting; auth/none where the installed Slurm has it, else munge with a key made here):
#  (a) `sbatch --wait` of a 4-rank data-parallel training (--ntasks-per-node=4, srun --mpi=pmix): status 0, each rank
#      its own <output_dir>/log/rank_N/gridformer.log knowing its rank of 4, the losses `mpirun -np 4`'s, bitwise;
#  (b) a layout that does not fit the allocation (data_parallel 4 on 2 tasks): the job ends with status 2 and the
#      ranks' layout message in its output, before srun starts anything.
# The daemons are stopped on exit. Skipped, with the reason, where Slurm is not installed (Debian: slurm-wlm) or its
# daemons cannot be started here.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
SBATCH_SCRIPT="$SRC/scripts/gridformer.sbatch"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
for b in slurmctld slurmd sbatch srun sinfo scancel; do
  command -v "$b" >/dev/null || skip "slurm: no $b (Debian: apt-get install slurm-wlm; scripts/setup.sh installs it)"
done
# Not lib's root permission for Open MPI: srun starts the ranks (the reference's mpirun says --allow-run-as-root).
unset SLURM_CONF SLURM_JOB_ID SLURM_JOBID OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM RANK_TABLE_FILE
export GRIDFORMER_BIN="$BIN"
PIDS=()
# At exit: the jobs cancelled and the daemons stopped (SIGTERM, then lib's kill_ours: SIGKILL to whatever names $WORK/).
stop_slurm() {
  [ -f "$WORK/slurm.conf" ] && SLURM_CONF="$WORK/slurm.conf" timeout 5 scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
}
AT_EXIT=stop_slurm KILL_AT_EXIT=1

# ---- a cluster of one node ---------------------------------------------------------------------------------------
ports=$("$PY" -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
read -r CTLD_PORT SLURMD_PORT <<<"$ports"
HOST=$(hostname -s) NODE="gfnode$$" ME=$(id -un)
plugins=$(dirname "$(find /usr/lib /usr/lib64 -name auth_munge.so -path '*slurm*' 2>/dev/null | head -1)")
if [ -e "$plugins/auth_none.so" ] && [ "${GF_SLURM_AUTH:-none}" = none ]; then
  AUTH=$'AuthType=auth/none\nCredType=cred/none' auth_note="auth/none"
else
  command -v munged >/dev/null || skip "slurm: this Slurm has no auth/none and munged is missing (Debian: munge)"
  head -c 1024 /dev/urandom > munge.key && chmod 400 munge.key
  munged --force --key-file="$WORK/munge.key" --socket="$WORK/munge.sock" --pid-file="$WORK/munge.pid" \
    --log-file="$WORK/munge.log" --seed-file="$WORK/munge.seed" 2>munge.err || skip "slurm: munged did not start: $(head -2 munge.err)"
  for i in $(seq 1 50); do [ -s munge.pid ] && break; sleep 0.1; done
  PIDS+=("$(cat munge.pid)")
  AUTH="AuthType=auth/munge
AuthInfo=socket=$WORK/munge.sock
CredType=cred/munge" auth_note="munge (a key made here)"
fi
mkdir state spool
# CPUs=8 with config_overrides: four 1-CPU tasks fit on a 2-core machine (slurmd takes the configured counts).
cat > slurm.conf <<EOF
ClusterName=gftest$$
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=$ME
SlurmdUser=$ME
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
$AUTH
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$HOST CPUs=8 RealMemory=1000 State=UNKNOWN
PartitionName=gftest Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF="$WORK/slurm.conf"
slurmctld -D -f "$SLURM_CONF" > slurmctld.out 2>&1 &
PIDS+=($!)
slurmd -D -f "$SLURM_CONF" -N "$NODE" > slurmd.out 2>&1 &
PIDS+=($!)
state=""
for i in $(seq 1 150); do
  state=$(sinfo -h -n "$NODE" -o %t 2>/dev/null || true)
  [ "$state" = idle ] && break
  for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || break 2; done
  sleep 0.1
done
if [ "$state" != idle ]; then
  skip "slurm: the Slurm daemons did not come up (node state '${state}'): $(cat slurmctld.out slurmd.out slurmctld.log slurmd.log 2>/dev/null | grep -iE 'error|fatal' | head -3 | tr '\n' ' ')"
fi
srun --mpi=list 2>&1 | grep -qw pmix || skip "slurm: this Slurm has no PMIx plugin (srun --mpi=list: $(srun --mpi=list 2>&1 | tr '\n' ' '))"
echo "a Slurm cluster of one node: slurmctld :$CTLD_PORT, slurmd $NODE :$SLURMD_PORT ($auth_note), srun --mpi=pmix"

random_gpt2 job.yaml out=./out batch=1 steps=6 samples=32 top="parallel_config: {data_parallel: 4}"
ROOT_OPT=(); [ "$(id -u)" -eq 0 ] && ROOT_OPT=(--allow-run-as-root)
start=$SECONDS
mpirun -np 4 --oversubscribe "${ROOT_OPT[@]}" "$BIN" train --config job.yaml --set output_dir=ref > ref.txt 2>&1 \
  || { cat ref.txt; fail "the mpirun -np 4 reference"; }
echo "reference: mpirun -np 4 in $((SECONDS - start)) s"

# job NAME TASKS LIMIT: `sbatch --wait` of job.yaml into output_dir NAME on TASKS tasks of the node, at most LIMIT s;
# its status in st, its output file in out, its start in start.
job() {
  start=$SECONDS st=0
  timeout "$3" sbatch --wait --quiet --nodes=1 --ntasks-per-node="$2" --cpus-per-task=1 --output="$WORK/$1-%j.out" \
    "$SBATCH_SCRIPT" job.yaml --set output_dir="$1" > "$1.txt" 2>&1 || st=$?
  out=$(ls "$1"-*.out 2>/dev/null | head -1)
}

# ---- (a) sbatch --wait, 4 ranks ----------------------------------------------------------------------------------
job a 4 100
# On failure the job's own output comes last: the end of a failed test's output is what a CI log shows of it.
[ "$st" -eq 0 ] || { tail -20 slurmd.log; cat a.txt; [ -n "$out" ] && tail -30 "$out"; fail "(a) sbatch --wait: status $st"; }
grep -q "gridformer.sbatch: job [0-9]*: 4 rank(s) on $NODE, 1 thread(s) each; srun --mpi=pmix" "$out" || { cat "$out"; fail "(a) the script's line"; }
grep -q 'step:\[' "$out" || { cat "$out"; fail "(a) no steps in the job's output"; }
for r in 0 1 2 3; do
  grep -q "rank $r of 4, pid" "a/log/rank_$r/gridformer.log" || fail "(a) rank $r's log: $(head -3 "a/log/rank_$r/gridformer.log" 2>&1)"
done
"$PY" - <<'PY'
import json
ref = [json.loads(l)["loss"] for l in open("ref/metrics.jsonl") if '"loss"' in l]
got = [json.loads(l)["loss"] for l in open("a/metrics.jsonl") if '"loss"' in l]
assert len(ref) == len(got) == 6, (len(ref), len(got))
assert got == ref, f"sbatch's losses {got} differ from mpirun -np 4's {ref}"
print(f"(a) 6 losses of the sbatch job = mpirun -np 4's, bitwise ({ref[0]:.6f} -> {ref[-1]:.6f})")
PY
echo "(a) sbatch --wait of 4 ranks (srun --mpi=pmix): status 0 after $((SECONDS - start)) s; rank_0..3 logs, each its rank of 4"

# ---- (b) a layout that does not fit the allocation ---------------------------------------------------------------
job b 2 60
[ "$st" -eq 2 ] || { cat b.txt ${out:+"$out"}; fail "(b) status $st, expected 2"; }
grep -q "the parallel layout does not fit 2 rank(s)" "$out" && grep -q "gridformer.sbatch: error: job.yaml does not run on this allocation's 2 rank(s)" "$out" \
  || { cat "$out"; fail "(b) message"; }
[ ! -e b/log ] || fail "(b) ranks ran"
echo "(b) data_parallel 4 on 2 tasks: status 2 after $((SECONDS - start)) s with the layout message; nothing ran"
echo "slurm: all checks passed"
