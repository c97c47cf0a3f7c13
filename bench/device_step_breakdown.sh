#!/usr/bin/env bash
# bench/step_breakdown.py on a bigger machine without our libraries, from a bundle of our binaries
# (../shared/tools/device-bundle/make_bundle.sh -> .device/bundle.tar.xz):
#
#   bash bench/device_step_breakdown.sh BUNDLE.tar.xz OUT [THREADS=16] [RUNS=gpt2-124M:fp32:1024:4,...]
#
# machine_probe at THREADS (OUT/probe.json), then the breakdown of each run at THREADS threads
# with that probe's fp32 backend (OUT/step_breakdown.{txt,json}). THREADS may be a list (2,16): each
# run at each count, with every category's speedup and the 14 slowest spans' (what stays serial);
# the probe then runs at the largest.
set -uo pipefail
BUNDLE="$(realpath "$1")"; OUT="$(mkdir -p "$2" && realpath "$2")"
THREADS="${3:-16}"
RUNS="${4:-gpt2-124M:fp32:1024:4,gpt2-124M:bf16:1024:4,llama-tiny:fp32,mixtral-tiny:fp32}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/bench/device_unpack.sh"
device_wrap "$OUT/build/bin" "" gridformer machine_probe
PROBE_THREADS=$(tr ',' '\n' <<<"$THREADS" | sort -n | tail -1)
TOP=()
[[ "$THREADS" == *,* ]] && TOP=(--top 14)
echo "== $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
OMP_NUM_THREADS=$PROBE_THREADS "$OUT/build/bin/machine_probe" --threads "$PROBE_THREADS" --out "$OUT/probe.json" 2>&1 | head -2
python3 "$ROOT/bench/step_breakdown.py" --build "$OUT/build" --threads "$THREADS" --runs "$RUNS" "${TOP[@]}" \
  --probe "$OUT/probe.json" --json "$OUT/step_breakdown.json" 2>&1 | tee "$OUT/step_breakdown.txt"
echo "== done $(date -u +%FT%TZ)"
