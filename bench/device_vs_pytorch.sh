#!/usr/bin/env bash
# gridformer against the PyTorch 2.x of a bigger machine that has none of our libraries, side by
# side at the same threads (the Speed issue's comparison), from a bundle of our binaries
# (../shared/tools/device-bundle/make_bundle.sh -> .device/bundle.tar.xz):
#
#   bash bench/device_vs_pytorch.sh BUNDLE.tar.xz OUT [THREADS=16] [ROUNDS=2] [BATCH=16] [SHAPES=gpt2-124M,mixtral-tiny]
#
# 1. machine_probe at THREADS: the GEMM backends' rates (and their check against exact products),
#    the hardware's FMA / AVX-512 BF16 / AMX peaks and the triad -> OUT/probe.json;
# 2. bench/train_vs_pytorch.py, fp32: this build with the probe's fp32 backend ("new") and the same
#    binary held to Eigen (GF_GEMM=eigen: the backend the version-1 probe chose on such a machine,
#    i.e. the speed before oneDNN's sgemm), and PyTorch (the machine's python3), interleaved rounds;
# 3. the same in bf16 (compute_dtype: bfloat16 against torch.autocast), "new" against PyTorch;
# 4. PyTorch's step profiled per shape and dtype (GEMM, attention, loss, copies, other, optimizer).
# Everything is printed and kept under OUT (train_*.json: every run; --report prints the tables).
set -uo pipefail
BUNDLE="$(realpath "$1")"; OUT="$(mkdir -p "$2" && realpath "$2")"
THREADS="${3:-16}"; ROUNDS="${4:-2}"; BATCH="${5:-16}"; SHAPES="${6:-gpt2-124M,mixtral-tiny}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The Python with PyTorch: $PY if set, else the first python3 that imports torch.
for cand in ${PY:-} python3 /usr/local/bin/python3 /opt/conda/bin/python3 /usr/bin/python3; do
  if command -v "$cand" > /dev/null && "$cand" -c 'import torch' 2> /dev/null; then PY="$(command -v "$cand")"; break; fi
done
. "$ROOT/bench/device_unpack.sh"
echo "== $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; python3 $PY: $("$PY" -c 'import torch; print("torch", torch.__version__, "threads", torch.get_num_threads())' 2>&1)"

# Build directories as train_vs_pytorch.py expects them (DIR/bin/gridformer ...): wrappers that
# run the bundle's binaries with its libraries, "eigen" with GF_GEMM=eigen.
device_wrap "$OUT/builds/new/bin" "" gridformer machine_probe bench_gemm
device_wrap "$OUT/builds/eigen/bin" "GF_GEMM=eigen" gridformer machine_probe bench_gemm

echo "== machine_probe at $THREADS threads"
OMP_NUM_THREADS=$THREADS "$OUT/builds/new/bin/machine_probe" --threads "$THREADS" --out "$OUT/probe.json" --print \
  > "$OUT/probe.txt" 2>&1
head -3 "$OUT/probe.txt"
"$PY" - "$OUT/probe.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print("limits:", j.get("limits"))
print("check:", j.get("check"))
for p in j["products"]:
    print(f"  {p['op']} {p['M']}x{p['N']}x{p['K']}: {p['gflops']} {p.get('bf16_impl', '')}")
PY

common=(--shapes "$SHAPES" --threads "$THREADS" --rounds "$ROUNDS" --steps 4 --batch "$BATCH" --python "$PY"
        --no-gemm --probe "$OUT/probe.json")
echo "== fp32: new (probe's backend) and eigen against PyTorch"
"$PY" "$ROOT/bench/train_vs_pytorch.py" "${common[@]}" --dtypes fp32 \
  --build "$OUT/builds/new,$OUT/builds/eigen" --json "$OUT/train_fp32.json" 2>&1 | tail -40
echo "== bf16: new against PyTorch autocast"
"$PY" "$ROOT/bench/train_vs_pytorch.py" "${common[@]}" --dtypes bf16 \
  --build "$OUT/builds/new" --json "$OUT/train_bf16.json" 2>&1 | tail -25
# Where PyTorch's step goes (torch.profiler, one run per shape and dtype after the timed rounds): with
# gridformer's own breakdown (bench/device_step_breakdown.sh) it says how far a ratio can go, e.g. a
# peer whose GEMMs are most of its step and run at our rate leaves no 2x.
echo "== PyTorch's step, profiled (bench/torch_gpt2.py --profile)"
for shape in ${SHAPES//,/ }; do
  for dt in fp32 bf16; do
    OMP_NUM_THREADS=$THREADS "$PY" "$ROOT/bench/torch_gpt2.py" --shape "$shape" --dtype "$dt" --threads "$THREADS" \
      --batch "$BATCH" --steps 3 --warmup 1 --profile --json 2> "$OUT/torch_profile_${shape}_$dt.log" \
      > "$OUT/torch_profile_${shape}_$dt.json" || { echo "  $shape $dt: failed ($OUT/torch_profile_${shape}_$dt.log)"; continue; }
    echo "  $shape $dt: $(grep '^profile' "$OUT/torch_profile_${shape}_$dt.log" | sed 's/^profile ([^)]*): //')"
  done
done
echo "== done $(date -u +%FT%TZ)"
