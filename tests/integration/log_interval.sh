#!/usr/bin/env bash
# The log line is honest: with per_print_times 5, step 1 is reported alone and each later line's
# per_step_time times its steps matches the wall clock between the lines (evaluation left out);
# metrics.jsonl holds the same interval figures and one run_start line per run; the machine probe
# is read (the log names it, its FMA peak is the MFU's, its GEMM ceiling is named beside it, its backend
# the fp32 default) and
# runner_config.peak_tflops and GF_GEMM override it; without a probe (or with another CPU's) the
# run says so and keeps the built-in defaults (the nominal peak of the CPU's instructions).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
unset GF_GEMM GF_MACHINE_PROBE
random_gpt2 run.yaml seed=5 out=./out steps=20 batch=8 clip= warmup= optimizer="{type: AdamW}" \
  top="lr_schedule: {type: constant, learning_rate: 0.001}" data_seed=3 samples=16 print=5 vocab=1000 seq=64 hidden=128 model=

# A probe file for this CPU with figures no machine has, so the log can only have taken them from it.
CPU="$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)"
[ -n "$CPU" ] || CPU="unknown CPU"
write_probe() {  # write_probe FILE CPU BACKEND
  "$PY" - "$1" "$2" "$3" <<'PY'
import json, sys
path, cpu, backend = sys.argv[1:]
json.dump({"tool": "machine_probe", "version": 2, "cpu": cpu, "date": "2026-11-23T09:08:07Z", "threads": 1,
           "fp32_backend": backend, "gflops": {"blas": 111.0, "eigen": 222.0, "bf16": 333.0},
           "peak_tflops": {"float32": 0.0111, "bfloat16": 0.0456},
           "limits": {"fp32_fma_tflops": 0.0123, "fp32_fma_isa": "avx512f", "bf16_tflops": 0.0789,
                      "bf16_isa": "amx_bf16", "triad_gbs": 1.0}}, open(path, "w"))
PY
}
write_probe probe.json "$CPU" eigen

# 1. The probe is read: its fp32 backend and its FMA peak, named in the log with its GEMM ceiling beside it.
GF_MACHINE_PROBE="$WORK/probe.json" "$BIN" train --config run.yaml > a.txt 2>&1 || { cat a.txt; fail "run with the probe"; }
grep -qF "MFU relative to 0.0123 TFLOP/s per rank, the FMA peak (fp32, avx512f) measured by machine_probe on $CPU (2026-11-23T09:08:07Z); the GEMM ceiling (machine_probe's fastest fp32 product, eigen) is 0.0111 TFLOP/s per rank" a.txt \
  || fail "the log does not name the probe's peak: $(grep 'MFU relative' a.txt)"
grep -q "fp32 GEMM backend: eigen (the faster one here: machine_probe measured blas 111 and eigen 222 GFLOP/s" a.txt \
  || fail "the probe's backend was not taken: $(grep 'GEMM backend' a.txt)"
# The probe's 0.0123 TFLOP/s is below what the run reaches: one warning says so and what to do.
[ "$(grep -c 'is above 100%: this run reaches' a.txt)" = 1 ] || fail "no single MFU warning: $(grep -c 'above 100%' a.txt)"
grep -q "re-run build/bin/machine_probe on a quiet machine" a.txt || fail "the MFU warning does not say what to do"

# 2. Step 1 alone, then intervals: per_step_time x steps = the wall clock between the lines.
"$PY" - a.txt out/metrics.jsonl <<'PY' || fail "interval timing"
import json, re, sys
from datetime import datetime
log, metrics = sys.argv[1:]
pat = re.compile(r"^\[(\S+ \S+)\] .*step:\[\s*(\d+)/\s*\d+\].*per_step_time: ([0-9.]+) ms \(([^)]*)\)")
lines = []
for l in open(log):
    m = pat.search(l)
    if m:
        t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
        lines.append((int(m.group(2)), t, float(m.group(3)), m.group(4)))
assert [s for s, *_ in lines] == [1, 5, 10, 15, 20], lines
assert lines[0][3] == "step 1 alone: start-up", lines[0]
assert lines[1][3] == "mean of steps 2-5" and lines[2][3] == "mean of steps 6-10", lines
rows = [json.loads(l) for l in open(metrics)]
steps = [r for r in rows if "loss" in r]
assert [r["step"] for r in steps] == [1, 5, 10, 15, 20]
assert [r["interval_steps"] for r in steps] == [1, 4, 5, 5, 5], [r["interval_steps"] for r in steps]
assert [r["startup"] for r in steps] == [True, False, False, False, False]
for r in steps:
    assert abs(r["mfu"] - r["tflops"] / 0.0123) <= 1e-9 * max(1.0, r["mfu"]), r
    assert abs(r["tokens_per_s"] * r["step_ms"] / 1000 - 8 * 64) < 1e-6 * 8 * 64, r  # tokens per step
total = 0.0
for (s0, t0, _, _), (s1, t1, ms, _), r in zip(lines, lines[1:], steps[1:]):
    wall = t1 - t0  # log timestamps, to the millisecond
    counted = ms * r["interval_steps"] / 1000
    print(f"steps {s0 + 1}-{s1}: {r['interval_steps']} x {ms:.1f} ms = {counted * 1000:.1f} ms; wall clock between "
          f"the lines {wall * 1000:.1f} ms")
    assert abs(wall - counted) <= 0.03 + 0.1 * wall, (s1, wall, counted)
    assert abs(r["step_ms"] - ms) < 0.05 + 1e-6 * ms, (r["step_ms"], ms)
PY

# 3. Evaluation is not counted: after an eval line the next interval runs from its end. (An evaluation reads each
# validation sample once: 320 distinct samples make its 40 batches of 8.)
rm -rf out
GF_MACHINE_PROBE="$WORK/probe.json" "$BIN" train --config run.yaml --set runner_config.train_steps=15 --set do_eval=True \
  --set eval_step_interval=5 --set eval_dataset.eval_iters=40 --set train_dataset.data_loader.num_samples=320 \
  > b.txt 2>&1 || { cat b.txt; fail "run with evaluation"; }
grep -qF "eval at step 5: loss" b.txt && grep -qF "(40 batches of the validation data)" b.txt || fail "the evaluation did not read 40 batches"
"$PY" - b.txt <<'PY' || fail "evaluation time was counted"
import re, sys
from datetime import datetime
ts = lambda l: datetime.strptime(l[1:24], "%Y-%m-%d %H:%M:%S.%f").timestamp()
prints, evals = {}, {}
for l in open(sys.argv[1]):
    m = re.search(r"step:\[\s*(\d+)/.*per_step_time: ([0-9.]+) ms", l)
    if m:
        prints[int(m.group(1))] = (ts(l), float(m.group(2)))
    m = re.search(r"eval at step (\d+):", l)
    if m:
        evals[int(m.group(1))] = ts(l)
for s in (10, 15):
    t, ms = prints[s]
    after_eval = t - evals[s - 5]        # from the end of the evaluation to this line
    eval_s = evals[s - 5] - prints[s - 5][0]
    print(f"steps {s - 4}-{s}: 5 x {ms:.1f} ms = {5 * ms:.1f} ms; {after_eval * 1000:.1f} ms after the evaluation, "
          f"which took {eval_s * 1000:.1f} ms")
    assert eval_s > 0.5 * 5 * ms / 1000, "the evaluation is too short to tell"  # it would show if counted
    assert abs(after_eval - 5 * ms / 1000) <= 0.03 + 0.1 * after_eval, (s, after_eval, ms)
PY

# 4. runner_config.peak_tflops overrides the probe; a second run appends its own run_start line.
GF_MACHINE_PROBE="$WORK/probe.json" "$BIN" train --config run.yaml --set runner_config.train_steps=5 \
  --set runner_config.peak_tflops=0.5 > c.txt 2>&1 || { cat c.txt; fail "run with peak_tflops"; }
grep -q "MFU relative to 0.5 TFLOP/s per rank, set by runner_config.peak_tflops" c.txt \
  || fail "peak_tflops did not override: $(grep 'MFU relative' c.txt)"
"$PY" - c.txt <<'PY' || fail "an MFU warning without an MFU above 100%"
import re, sys
log = open(sys.argv[1]).read()
mfus = [float(m) for m in re.findall(r"MFU: ([0-9.]+)%", log)]
# steps after the first: a warning exactly when one of them is above 100% of 0.5 TFLOP/s
assert ("is above 100%" in log) == any(m > 100 for m in mfus[1:]), mfus
PY
"$PY" - out/metrics.jsonl "$BUILD/generated/gf_git_commit.h" <<'PY' || fail "run_start lines"
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
starts = [r for r in rows if r.get("event") == "run_start"]
assert len(starts) == 2, len(starts)
assert rows[0]["event"] == "run_start"
first, second = starts
for k in ["time", "config_hash", "git_commit", "layout", "cpu", "gemm_backend", "peak_tflops", "peak_source"]:
    assert k in second, k
assert second["layout"] == {"dp": 1, "mp": 1, "pp": 1, "cp": 1, "sp": False, "zero": False, "zero_stage": 0, "ranks": 1}, second["layout"]
assert first["peak_tflops"] == 0.0123 and second["peak_tflops"] == 0.5, (first["peak_tflops"], second["peak_tflops"])
assert second["peak_source"] == "set by runner_config.peak_tflops"
assert first["gemm_backend"] == "eigen", first
assert first["config_hash"] != second["config_hash"]  # different --set, different resolved config
assert len(second["time"]) == 20 and second["time"].endswith("Z"), second["time"]
# The commit CMake wrote for this build (scripts/git_commit.cmake), not HEAD: a commit made after
# the build is not the binary's.
built = re.search(r'GF_GIT_COMMIT "([^"]*)"', open(sys.argv[2]).read()).group(1)
assert second["git_commit"] == built, (second["git_commit"], built)
assert re.fullmatch(r"[0-9a-f]{4,40}(-dirty)?|unknown", built), built
last = [r for r in rows[rows.index(second):] if "loss" in r]
assert all(abs(r["mfu"] - r["tflops"] / 0.5) <= 1e-9 for r in last), last
PY
# The same config gives the same hash.
rm -rf out
GF_MACHINE_PROBE="$WORK/probe.json" "$BIN" train --config run.yaml --set runner_config.train_steps=1 > d1.txt 2>&1 || fail "d1"
GF_MACHINE_PROBE="$WORK/probe.json" "$BIN" train --config run.yaml --set runner_config.train_steps=1 > d2.txt 2>&1 || fail "d2"
[ "$(grep -o '"config_hash":"[0-9a-f]*"' out/metrics.jsonl | sort -u | wc -l)" -eq 1 ] || fail "one config, two hashes"

# 5. GF_GEMM overrides the probe's backend, and says so.
GF_GEMM=blas GF_MACHINE_PROBE="$WORK/probe.json" "$BIN" train --config run.yaml --set runner_config.train_steps=1 > e.txt 2>&1 \
  || fail "GF_GEMM run"
grep -q "fp32 GEMM backend: blas (GF_GEMM=blas in the environment; machine_probe measured" e.txt \
  || fail "GF_GEMM did not override: $(grep 'GEMM backend' e.txt)"

# 6. No probe, or another CPU's: the built-in defaults, and the log says why.
GF_MACHINE_PROBE="$WORK/nowhere.json" "$BIN" train --config run.yaml --set runner_config.train_steps=1 > f.txt 2>&1 || fail "no probe"
grep -q "fp32 GEMM backend: blas (the built-in default (no machine probe at $WORK/nowhere.json" f.txt \
  || fail "no-probe backend line: $(grep 'GEMM backend' f.txt)"
grep -q "MFU relative to [0-9.]* TFLOP/s per rank, the built-in nominal peak, .* x 1 thread(s), since no machine probe" f.txt \
  || fail "no-probe peak: $(grep 'MFU relative' f.txt)"
write_probe other.json "Not This CPU 9000" eigen
GF_MACHINE_PROBE="$WORK/other.json" "$BIN" train --config run.yaml --set runner_config.train_steps=1 > g.txt 2>&1 || fail "other CPU"
grep -q "was measured on \"Not This CPU 9000\".*ignored" g.txt || fail "another CPU's probe was not refused: $(grep 'MFU relative' g.txt)"
grep -q "fp32 GEMM backend: blas (the built-in default" g.txt || fail "another CPU's backend was taken"

# 7. Where a run looks by default: next to its build, <binary dir>/../machine_probe.json.
mkdir -p copy/bin
cp "$BIN" copy/bin/gridformer
write_probe copy/machine_probe.json "$CPU" eigen
copy/bin/gridformer train --config run.yaml --set runner_config.train_steps=1 > h.txt 2>&1 || { cat h.txt; fail "copied binary"; }
grep -q "MFU relative to 0.0123 TFLOP/s per rank, the FMA peak (fp32, avx512f) measured by machine_probe" h.txt \
  || fail "the probe next to the binary was not read: $(grep 'MFU relative' h.txt)"
rm copy/machine_probe.json
copy/bin/gridformer train --config run.yaml --set runner_config.train_steps=1 > i.txt 2>&1 || fail "copied binary, no probe"
grep -q "no machine probe at $WORK/copy/machine_probe.json" i.txt || fail "no probe next to the binary: $(grep 'MFU relative' i.txt)"
echo "log_interval: all checks passed"
