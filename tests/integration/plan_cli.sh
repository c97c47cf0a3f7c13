#!/usr/bin/env bash
# `gridformer plan` sizes a run without building it: its per-rank parameter, optimizer-state,
# weight-copy and activation bytes are the ones the run then reports (resources.json), for a Llama
# at mp2 with ZeRO-1 over dp2, bf16 and selective recompute, and a GPT-2 with full recompute; a
# layout that does not fit is refused with status 2 before any sizing; an asynchronous checkpoint
# save's snapshot is planned at the bytes it copies, and a synchronous save plans none.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
common=(--set runner_config.train_steps=1 --set train_dataset.data_loader.type=RandomTokens
        --set model.model_config.seq_length=32 --set model.model_config.num_layers=2 --set runner_config.batch_size=2)
check() {  # NAME CONFIG NP extra...
  local name=$1 cfg=$2 np=$3; shift 3
  "$BIN" plan --config "$cfg" "${common[@]}" "$@" > "$name.plan"
  mpi_train "$np" "$name" "$cfg" "${common[@]}" "$@"
  "$PY" - "$name.plan" "$(find "$name" -name resources.json)" <<'PY'
import json, re, sys
plan = open(sys.argv[1]).read()
ranks = json.load(open(sys.argv[2]))["ranks"]
units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
def field(line, key):
    v, u = re.search(key + r" ([0-9.]+) (\w+)", line).groups()
    return float(v) * units[u], 0.05 * units[u]  # printed to one decimal of its unit
lines = {}  # tensor-parallel rank -> its line; "ranks 0-1" is one line for ranks whose figures are the same
for m in re.finditer(r"tensor-parallel ranks? (\d+)(?:-(\d+))?.*", plan):
    for r in range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1):
        lines[r] = m.group(0)
for r in ranks:
    tp_rank = r["rank"] % len(lines)   # ranks are tp-major within a data-parallel replica
    line = lines[tp_rank]
    for key, got in (("activations", r["planned_activation_bytes"]), ("optimizer state", r["optimizer_state_bytes"]),
                     ("weight copy", r["weight_copy_bytes"])):
        want, tol = field(line, key)
        if abs(want - got) > tol:
            sys.exit(f"FAIL: rank {r['rank']}: plan says {key} {want:.0f} B, the run has {got:.0f} B")
print(f"{sys.argv[1]}: plan matches the run on {len(ranks)} rank(s)")
PY
}
check llama "$SRC/configs/llama/run_llama_tiny.yaml" 4 --set parallel_config.model_parallel=2 \
  --set parallel_config.data_parallel=2 --set parallel.enable_parallel_optimizer=True \
  --set model.model_config.compute_dtype=bfloat16 --set recompute_config.select_recompute=True
check gpt2 "$SRC/configs/gpt2/run_gpt2_tiny.yaml" 2 --set parallel_config.model_parallel=2 \
  --set parallel_config.vocab_emb_dp=False --set recompute_config.recompute=True
# An asynchronous checkpoint save copies the rank's weights and moments (the plan's "checkpoint snapshot");
# a synchronous one writes from the live state (no line). One rank: the snapshot is the checkpoint's bytes,
# which the plan bounds from above by the arena's rounding of each tensor to 16 floats.
ck=(--config "$SRC/configs/gpt2/run_gpt2_tiny.yaml" "${common[@]}")
"$BIN" plan "${ck[@]}" --set "callbacks=[{type: CheckpointMonitor, prefix: a, async_save: False}]" > sync.plan
! grep -q "checkpoint snapshot" sync.plan || { cat sync.plan; fail "a synchronous save planned a snapshot"; }
"$BIN" plan "${ck[@]}" --set "callbacks=[{type: CheckpointMonitor, prefix: a, async_save: True}]" > async.plan
train async "$SRC/configs/gpt2/run_gpt2_tiny.yaml" "${common[@]}" \
  --set "callbacks=[{type: CheckpointMonitor, prefix: a, async_save: True}]"
"$PY" - async.plan async.log <<'PY'
import re, sys
units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
plan, log = open(sys.argv[1]).read(), open(sys.argv[2]).read()
v, u = re.search(r"checkpoint snapshot ([0-9.]+) (\w+) \(async_save\)", plan).groups()
planned = float(v) * units[u]
saved = float(re.search(r"checkpoint saved: \S+ \(step \d+, ([0-9.]+) MiB", log).group(1)) * 2**20
if not saved * 0.999 <= planned <= saved * 1.01 + 0.05 * units[u]:
    sys.exit(f"FAIL: planned snapshot {planned:.0f} B, the save copied {saved:.0f} B")
print(f"checkpoint snapshot: planned {planned / 2**20:.1f} MiB, copied {saved / 2**20:.1f} MiB")
PY
# A layout that splits a key/value head.
refused 2 "n_kv_heads" bad "$BIN" plan --config "$SRC/configs/llama/run_llama_tiny.yaml" --set parallel_config.model_parallel=4
echo "PASS"
