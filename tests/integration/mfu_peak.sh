#!/usr/bin/env bash
# MFU is the model's FLOPs over the hardware's peak of the compute dtype (PaLM's and Megatron's
# definition), so it can never pass 100%, and the log names the peak it divides by:
#   (a) with a machine probe measured here (build/bin/machine_probe, one thread), an fp32 run divides by
#       the probe's FMA peak (limits.fp32_fma_tflops) and a bf16 run by its bf16 peak (limits.bf16_tflops:
#       AMX, else AVX-512 BF16; the FMA peak on a CPU with neither), never by the probe's GEMM ceiling
#       (peak_tflops), which the line names beside it as a figure of its own;
#   (b) without a probe (GF_MACHINE_PROBE=off) the run divides by the built-in nominal peak: the FLOPs per
#       cycle of the CPU's widest instructions for the dtype at 5 GHz (runner/report/machine_probe.h,
#       builtin_peak: AVX-512 64, AVX2 32, SSE 16; bf16 AMX 1024, AVX-512 BF16 128), times the threads;
#       no probe measured this CPU, so a bound above what a core reaches is what keeps MFU under 100%;
#   (c) the check fails when the peak is wrong: a probe whose FMA peak is far below what the run reaches
#       gives MFU above 100%, and the same check reports it;
#   (d) a probe that had under 0.8 of the cores (cores_share; other processes ran while it measured, and its peaks
#       are theirs to lower: on a 2-vCPU AMX Xeon beside four compilers it had 0.19 and measured 0.063 TFLOP/s
#       fp32, a seventh of the quiet figure) is not divided by: the run takes the built-in nominal peak and names
#       the probe and its share. The probe (a) measures takes that path too when this machine is busy;
#   (e) a probe that saw a quiet share but whose FMA peak is below its own fastest fp32 product (a peak below a rate
#       it reached: the suite's other tests ran while it measured the peak; CI of 64436e6 had FMA 0.054 under a
#       0.095 TFLOP/s product and logged MFU 102.7%) is not divided by either: the built-in peak, the reason named.
# Each run: every logged MFU (the log's "MFU: x%" and metrics.jsonl's mfu) is at most 1, mfu equals tflops
# over run_start's peak_tflops, and the "MFU relative to" line names that peak and says what it is.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_corpus
need_vocab
unset GF_MACHINE_PROBE GF_GEMM

"$BUILD/bin/machine_probe" --out probe.json --threads 1 --budget-ms 60 > probe.log 2>&1 \
  || { cat probe.log; fail "machine_probe exited non-zero"; }
tiny_config gpt2 fp32.yaml --set runner_config.train_steps=6
tiny_config gpt2 bf16.yaml --set runner_config.train_steps=6 --set model.model_config.compute_dtype=bfloat16

# check_mfu NAME KIND [PROBE | REASON]: KIND is probe (the peak must be PROBE's hardware peak for the run's dtype) or
# builtin (the built-in nominal peak of this CPU's instructions, for the REASON the line gives: GF_MACHINE_PROBE=off
# when not given).
check_mfu() {
  "$PY" - "$1" "$2" "${3:-}" <<'EOF'
import json, re, sys
name, kind, arg = sys.argv[1:]
log = open(f"{name}.log").read()
rows = [json.loads(l) for l in open(f"{name}/metrics.jsonl")]
start = [r for r in rows if r.get("event") == "run_start"][-1]
steps = [r for r in rows if "loss" in r]
assert steps, "no step lines"
peak, threads, dtype = start["peak_tflops"], start["threads"], start["compute_dtype"]
line = re.search(r"MFU relative to (\S+) TFLOP/s per rank, (.*)", log)
assert line, "no 'MFU relative to' line"
named, what = float(line.group(1)), line.group(2)
assert abs(named - peak) <= 5e-4 * peak, f"the log names {named}, metrics.jsonl divides by {peak}"
if kind == "probe":
    p = json.load(open(arg))
    lim, scale = p["limits"], threads / p["threads"]
    if dtype == "bfloat16" and (lim["bf16_tflops"] or 0) > 0:  # null: no bf16 instructions
        want, label = lim["bf16_tflops"] * scale, f"the bf16 peak ({lim['bf16_isa']}) measured by machine_probe on {p['cpu']}"
    else:
        want, label = lim["fp32_fma_tflops"] * scale, f"the FMA peak (fp32, {lim['fp32_fma_isa']}"
    assert abs(peak - want) <= 1e-9 * want, f"peak {peak}, the probe's hardware peak for {dtype} is {want}"
    assert what.startswith(label), f"the line says '{what}', not '{label}...'"
    gemm = (p["peak_tflops"]["bfloat16"] if dtype == "bfloat16" and p["peak_tflops"].get("bfloat16")
            else p["peak_tflops"]["float32"]) * scale
    assert re.search(r"the GEMM ceiling \(machine_probe's fastest .*\) is ", what), f"no GEMM ceiling beside it: {what}"
    print(f"{name}: peak {peak:.4g} TFLOP/s, {label.split(' measured')[0].rstrip(',')} of probe.json; its GEMM ceiling "
          f"{gemm:.4g} named beside it")
else:
    flags = set(re.search(r"^flags\s*:(.*)$", open("/proc/cpuinfo").read(), re.M).group(1).split())
    fp32 = (64, "avx512f") if "avx512f" in flags else (32, "avx2") if {"avx2", "fma"} <= flags else (16, "sse")
    table = fp32
    if dtype == "bfloat16":
        table = (1024, "amx_bf16") if "amx_bf16" in flags else (128, "avx512_bf16") if "avx512_bf16" in flags else fp32
    per_thread = table[0] * 5e9 / 1e12
    want = per_thread * threads
    assert abs(peak - want) <= 1e-9 * want, f"peak {peak}, the built-in nominal peak of {table[1]} x {threads} is {want}"
    label = f"the built-in nominal peak, {per_thread:.3g} TFLOP/s per thread ({table[0]} FLOP/cycle of {table[1]}"
    assert what.startswith(label), f"the line says '{what}', not '{label}...'"
    reason = arg or "GF_MACHINE_PROBE=off"
    assert f"since no machine probe measured this CPU's ({reason}" in what, what
    print(f"{name}: peak {peak:.4g} TFLOP/s = the built-in {table[1]} x {threads} thread(s)")
printed = [float(m) for m in re.findall(r"MFU: ([0-9.]+)%", log)]
assert len(printed) == len(steps), (len(printed), len(steps))
for r, pct in zip(steps, printed):
    assert abs(r["mfu"] - r["tflops"] / peak) <= 1e-9 * max(r["mfu"], 1e-12), f"step {r['step']}: mfu {r['mfu']}, tflops {r['tflops']}"
    assert r["mfu"] <= 1.0 and pct <= 100.0, f"step {r['step']}: MFU {100 * r['mfu']:.2f}% above 100% of {peak} TFLOP/s"
assert "is above 100%" not in log, "the run warned of MFU above 100%"
print(f"{name}: {len(steps)} logged steps, MFU {min(printed):.2f}-{max(printed):.2f}% (<= 100%), tflops / {peak:.4g}")
EOF
}

# share FILE: the probe FILE's cores_share
share() { "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["cores_share"])' "$1"; }
BUSY="had $(share probe.json) of the cores (other processes ran while it measured)"

# (a) The probe measured here: its peaks where it had the cores, else (this machine busy) the built-in one.
for dtype in fp32 bf16; do
  GF_MACHINE_PROBE="$WORK/probe.json" train "p_$dtype" "$dtype.yaml"
  if "$PY" -c 'import json, sys; j = json.load(open("probe.json"))
sys.exit(j["cores_share"] < 0.8 or j["limits"]["fp32_fma_tflops"] < j["peak_tflops"]["float32"])'; then
    check_mfu "p_$dtype" probe probe.json || fail "p_$dtype: $(grep 'MFU relative' "p_$dtype.log")"
  elif "$PY" -c 'import json, sys; j = json.load(open("probe.json")); sys.exit(j["cores_share"] < 0.8)'; then
    # an FMA peak below the probe's own fastest product (the suite's other tests ran while it measured the peak)
    echo "the probe's FMA peak is below its own fastest fp32 product: (a) is a disturbed probe's case"
    check_mfu "p_$dtype" builtin "the machine probe at $WORK/probe.json measured an FMA peak" \
      || fail "p_$dtype: $(grep 'MFU relative' "p_$dtype.log")"
  else
    echo "the probe had $(share probe.json) of the cores: (a) is a busy probe's case"
    check_mfu "p_$dtype" builtin "the machine probe at $WORK/probe.json $BUSY" || fail "p_$dtype: $(grep 'MFU relative' "p_$dtype.log")"
  fi
done

# (b) No probe: the built-in nominal peak.
for dtype in fp32 bf16; do
  GF_MACHINE_PROBE=off train "b_$dtype" "$dtype.yaml"
  check_mfu "b_$dtype" builtin || fail "b_$dtype: $(grep 'MFU relative' "b_$dtype.log")"
done

# (c) A probe whose FMA peak is 1 GFLOP/s, far below any run (and its fastest product below that, so that it reads as
# consistent): MFU above 100%, and the check says so.
"$PY" -c 'import json; j = json.load(open("probe.json")); j["limits"]["fp32_fma_tflops"] = 0.001; j["cores_share"] = 1.0
j["peak_tflops"]["float32"] = 0.0005
json.dump(j, open("low.json", "w"))'
GF_MACHINE_PROBE="$WORK/low.json" train low fp32.yaml
grep -q "is above 100%: this run reaches" low.log || fail "no warning for a peak below the run"
if check_mfu low probe low.json > low_check.txt 2>&1; then fail "the check passed a run with MFU above 100%: $(cat low_check.txt)"; fi
grep -q "above 100% of 0.001 TFLOP/s" low_check.txt || fail "the check failed for another reason: $(cat low_check.txt)"
ok "a peak below the run is caught: $(grep -o 'step [0-9]*: MFU [0-9.]*% above 100% of 0.001 TFLOP/s' low_check.txt)"

# (d) The same probe marked busy (cores_share 0.5): the built-in nominal peak, the probe and its share named.
"$PY" -c 'import json; j = json.load(open("probe.json")); j["cores_share"] = 0.5; json.dump(j, open("busy.json", "w"))'
for dtype in fp32 bf16; do
  GF_MACHINE_PROBE="$WORK/busy.json" train "busy_$dtype" "$dtype.yaml"
  check_mfu "busy_$dtype" builtin "the machine probe at $WORK/busy.json had 0.5 of the cores" \
    || fail "busy_$dtype: $(grep 'MFU relative' "busy_$dtype.log")"
done
# (e) A quiet share, but an FMA peak half its own fastest fp32 product: the built-in nominal peak, the reason named.
"$PY" -c 'import json; j = json.load(open("probe.json")); j["cores_share"] = 1.0
j["limits"]["fp32_fma_tflops"] = j["peak_tflops"]["float32"] / 2; json.dump(j, open("disturbed.json", "w"))'
GF_MACHINE_PROBE="$WORK/disturbed.json" train disturbed fp32.yaml
check_mfu disturbed builtin "the machine probe at $WORK/disturbed.json measured an FMA peak" \
  || fail "disturbed: $(grep 'MFU relative' disturbed.log)"
echo "mfu_peak: all checks passed"
