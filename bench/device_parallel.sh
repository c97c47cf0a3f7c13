#!/usr/bin/env bash
# bench/parallel_cores.py (pp4 bubbles, ep8 against data parallel, a core for every thread) on a bigger
# machine without our libraries, from a bundle of our binaries
# (../shared/tools/device-bundle/make_bundle.sh -> .device/bundle.tar.xz):
#
#   bash bench/device_parallel.sh BUNDLE.tar.xz OUT [CORES=16] [ROUNDS=2] [STEPS=6] [ONLY=pp,ep] [MORE ARGS...]
#
# machine_probe at CORES threads (OUT/probe.json), then the layouts (OUT/parallel_cores.{txt,json}).
# MORE ARGS go to bench/parallel_cores.py; OLD_BIN=path/to/another/gridformer (built like the bundle's)
# runs with the bundle's libraries as --old.
set -uo pipefail
BUNDLE="$(realpath "$1")"; OUT="$(mkdir -p "$2" && realpath "$2")"
CORES="${3:-16}"; ROUNDS="${4:-2}"; STEPS="${5:-6}"; ONLY="${6:-pp,ep}"
shift $(( $# < 6 ? $# : 6 ))
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/bench/device_unpack.sh"
device_wrap "$OUT/build/bin" "" gridformer machine_probe
OLD=()
if [ -n "${OLD_BIN:-}" ]; then
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$BLD" "$(realpath "$OLD_BIN")" > "$OUT/build/bin/gridformer-old"
  chmod +x "$OUT/build/bin/gridformer-old"
  OLD=(--old "$OUT/build/bin/gridformer-old")
fi
# The bundle's mpirun needs the bundle's libraries too; the script finds this one first on PATH.
device_wrap_mpirun "$OUT/mpi"
export PATH="$OUT/mpi:$PATH"
echo "== $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs ($(lscpu | grep -E '^(Thread|Core|Socket)' | tr -s ' ' | tr '\n' ';')); $(mpirun --version | head -1)"
# Open MPI's shared-memory single copy (CMA lets a receiver read the sender's memory: transfers then move
# without the sender's help; a container may deny it) and a 2-rank transfer that forces it.
OMPI_INFO="$(PATH="$B/usr/bin:$PATH" command -v ompi_info)"
echo "== $(LD_LIBRARY_PATH=$BLD "$OMPI_INFO" --param btl vader --level 9 2>&1 | grep -o 'btl_vader_single_copy_mechanism" (current value: "[a-z]*"[^)]*' | head -1); ptrace_scope $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo n/a)"
cat > "$OUT/cma.yaml" <<YAML
seed: 1
output_dir: $OUT/cma_out
runner_config: {batch_size: 1, train_steps: 2}
train_dataset: {data_loader: {type: RandomTokens, seed: 0}}
parallel_config: {pipeline_stage: 2, micro_batch_num: 2}
model:
  arch: {type: GPT2LMHeadModel}
  model_config: {type: GPT2Config, vocab_size: 512, seq_length: 64, hidden_size: 64, num_layers: 2, num_heads: 2}
YAML
if OMP_NUM_THREADS=1 timeout 60 mpirun -np 2 --mca btl_vader_single_copy_mechanism cma "$OUT/build/bin/gridformer" train \
     --config "$OUT/cma.yaml" > "$OUT/cma.log" 2>&1; then echo "== a pp2 run with single copy forced to cma: works"
else echo "== a pp2 run with single copy forced to cma: FAILED ($(grep -m1 -iE 'errno|cma|process_vm|error' "$OUT/cma.log"))"; fi
OMP_NUM_THREADS=$CORES "$OUT/build/bin/machine_probe" --threads "$CORES" --out "$OUT/probe.json" 2>&1 | head -2
export GF_MACHINE_PROBE="$OUT/probe.json"   # every run takes this probe's fp32 backend
python3 "$ROOT/bench/parallel_cores.py" --build "$OUT/build" --cores "$CORES" --rounds "$ROUNDS" --steps "$STEPS" \
  --only "$ONLY" --json "$OUT/parallel_cores.json" "${OLD[@]}" "$@" 2>&1 | tee "$OUT/parallel_cores.txt"
echo "== done $(date -u +%FT%TZ)"
