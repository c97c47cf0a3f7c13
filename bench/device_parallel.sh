#!/usr/bin/env bash
# bench/parallel_cores.py (pp4 bubbles, ep8 against data parallel, a core for every thread) on a bigger
# machine without our libraries, from a bundle of our binaries
# (../shared/tools/device-bundle/make_bundle.sh -> .device/bundle.tar.xz):
#
#   bash bench/device_parallel.sh BUNDLE.tar.xz OUT [CORES=16] [ROUNDS=2] [STEPS=6] [ONLY=pp,ep]
#
# machine_probe at CORES threads (OUT/probe.json), then the layouts (OUT/parallel_cores.{txt,json}).
set -uo pipefail
BUNDLE="$(realpath "$1")"; OUT="$(mkdir -p "$2" && realpath "$2")"
CORES="${3:-16}"; ROUNDS="${4:-2}"; STEPS="${5:-6}"; ONLY="${6:-pp,ep}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
X="$(mktemp -d)"
tar -xJf "$BUNDLE" -C "$X"
export B="$X/bundle"
. "$B/env.sh"
BLD="${LD_LIBRARY_PATH:-}"; unset LD_LIBRARY_PATH   # python3 must not see the bundle's older libraries
mkdir -p "$OUT/build/bin"
for t in gridformer machine_probe; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/bin/%s "$@"\n' "$BLD" "$B" "$t" > "$OUT/build/bin/$t"
  chmod +x "$OUT/build/bin/$t"
done
# The bundle's mpirun needs the bundle's libraries too; the script finds this one first on PATH.
MPIRUN="$(PATH="$B/usr/bin:$B/bin:$PATH" command -v mpirun)"
mkdir -p "$OUT/mpi"
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$BLD" "$MPIRUN" > "$OUT/mpi/mpirun"
chmod +x "$OUT/mpi/mpirun"
export PATH="$OUT/mpi:$PATH"
echo "== $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs ($(lscpu | grep -E '^(Thread|Core|Socket)' | tr -s ' ' | tr '\n' ';')); $(mpirun --version | head -1)"
OMP_NUM_THREADS=$CORES "$OUT/build/bin/machine_probe" --threads "$CORES" --out "$OUT/probe.json" 2>&1 | head -2
export GF_MACHINE_PROBE="$OUT/probe.json"   # every run takes this probe's fp32 backend
python3 "$ROOT/bench/parallel_cores.py" --build "$OUT/build" --cores "$CORES" --rounds "$ROUNDS" --steps "$STEPS" \
  --only "$ONLY" --json "$OUT/parallel_cores.json" 2>&1 | tee "$OUT/parallel_cores.txt"
echo "== done $(date -u +%FT%TZ)"
