#!/usr/bin/env bash
# OpenBLAS's kernels (core/math/blas_kernels.h, runner/cli/env_defaults.cpp): when OpenBLAS took a
# family of a lower tier than this CPU runs (its SSE3 "Prescott" kernels on a CPU newer than the
# library), gridformer and machine_probe re-execute themselves with OPENBLAS_CORETYPE set to the best
# family the CPU runs, and the setup log says so. A shim (openblas_prescott_shim.c, LD_PRELOAD) makes
# OpenBLAS's answer "Prescott" while OPENBLAS_CORETYPE is unset and the real library's answer after,
# so the family the log names is the one OpenBLAS really runs. Checked:
#  * the shimmed run names the expected family (from /proc/cpuinfo's flags) and Prescott as OpenBLAS's own;
#  * a user's OPENBLAS_CORETYPE is kept as it is, and so is a user's GOMP_SPINCOUNT beside the kernels';
#  * without the shim the log names OpenBLAS's own choice, or the expected family if it was upgraded;
#  * machine_probe records the family it measured (blas_core), so the probe matches the runs.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
unset OPENBLAS_CORETYPE OMP_WAIT_POLICY GOMP_SPINCOUNT
cc -shared -fPIC -O1 -o "$WORK/shim.so" "$SRC/tests/integration/openblas_prescott_shim.c" -ldl
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { for f in "$@"; do [[ "$flags" == *" $f "* ]] || return 1; done; }
expected=""
if has avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16; then expected="Cooperlake"
elif has avx512f avx512cd avx512bw avx512dq avx512vl; then expected="SkylakeX"
elif has avx2 fma; then expected="Haswell"; fi
echo "this CPU's best OpenBLAS family: ${expected:-none beyond SSE}"
cd "$SRC"
kernels() {  # kernels OUT_NAME [env...]: one step of the tiny GPT-2; prints the setup line with the kernels
  local name="$1"; shift
  env "$@" OMP_NUM_THREADS=1 "$BIN" train --config configs/gpt2/run_gpt2_tiny.yaml --set runner_config.train_steps=1 \
    --set output_dir="$WORK/$name" > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "train ($name)"; }
  grep -o "OpenBLAS kernels .*" "$WORK/$name.log" | head -1
}
line="$(kernels shim LD_PRELOAD="$WORK/shim.so")"
echo "shimmed: $line"
if [ -n "$expected" ]; then
  [[ "$line" == "OpenBLAS kernels $expected (gridformer's OPENBLAS_CORETYPE for this CPU's "*"; OpenBLAS's own choice was Prescott)" ]] ||
    fail "expected $expected chosen over Prescott"
else
  [ "$line" = "OpenBLAS kernels Prescott (OpenBLAS's own choice)" ] || fail "nothing better to choose"
fi
line="$(kernels user LD_PRELOAD="$WORK/shim.so" OPENBLAS_CORETYPE=Haswell)"
echo "user's: $line"
[ "$line" = "OpenBLAS kernels Haswell (OPENBLAS_CORETYPE=Haswell)" ] || fail "the user's OPENBLAS_CORETYPE not kept"
line="$(kernels spin LD_PRELOAD="$WORK/shim.so" GOMP_SPINCOUNT=777)"
echo "user's spin: $line"
grep -q "thread(s), GOMP_SPINCOUNT=777; OpenBLAS kernels ${expected:-Prescott} " "$WORK/spin.log" ||
  { grep "thread(s)" "$WORK/spin.log"; fail "GOMP_SPINCOUNT=777 with the kernels' default"; }
line="$(kernels plain)"
echo "unshimmed: $line"
[[ "$line" == *"(OpenBLAS's own choice)" || "$line" == "OpenBLAS kernels $expected (gridformer's OPENBLAS_CORETYPE"* ]] ||
  fail "unshimmed"
# machine_probe measures the family a run gets.
LD_PRELOAD="$WORK/shim.so" OMP_NUM_THREADS=1 "$BUILD/bin/machine_probe" --shapes NN:64x64x64 --budget-ms 5 \
  --out "$WORK/probe.json" > "$WORK/probe.log" 2>&1 || { cat "$WORK/probe.log"; fail "machine_probe"; }
"$PY" - "$WORK/probe.json" "${expected:-Prescott}" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["blas_core"] == sys.argv[2], (j["blas_core"], sys.argv[2])
assert j["openblas_kernels"].startswith(sys.argv[2] + " ("), j["openblas_kernels"]
print("machine_probe:", j["blas_core"], "-", j["openblas_kernels"])
PY
echo "openblas_kernels: ok"
