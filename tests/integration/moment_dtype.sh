#!/usr/bin/env bash
# optimizer.moment_dtype: bfloat16 (AdamW's two moments stored in bf16, the update in fp32) end to end,
# on a tiny GPT-2 (4 layers, hidden 32) over 16 cycled RandomTokens samples, 20 steps:
#  * it trains: the bf16-moment run's last loss is below its first. Its losses against the float32
#    moments' run are printed (not asserted: the unit test tests/core/adamw_moments_test.cpp bounds
#    the parameters; a loss difference follows from those through the model);
#  * the optimizer state is half: resources.json's optimizer_state_bytes of the bf16 run is half the
#    float32 run's, on one rank and per rank under ZeRO over dp2, and `gridformer plan` says the same;
#  * checkpoints hold the moments as F32 (the format does not change), and a resume is bitwise: the
#    bf16 run resumed from its step-10 checkpoint gives steps 11-20 and final weights bit for bit
#    (bf16 -> f32 -> bf16 is exact), on one rank and with ZeRO over dp2 (moment shards that cut
#    tensors);
#  * a bf16-moment checkpoint resumes under float32 moments and a float32 one under bf16 moments.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
random_gpt2 tiny.yaml batch=8 clip=1.0 samples=16 layers=4 model= ckpt="prefix: tiny, save_checkpoint_steps: 10, keep_checkpoint_max: 3"
BF="--set optimizer.moment_dtype=bfloat16"
DP2Z="--set parallel_config.data_parallel=2 --set runner_config.batch_size=4 --set parallel.enable_parallel_optimizer=True"

ckpt10() { ls -d "$1"/checkpoint/tiny-*_10; }  # RUN's step-10 checkpoint (tiny-<epoch>_<step>)
resume() {  # REF NAME NP [--set ...]: steps 11-20 from REF's step-10 checkpoint, by lib.sh's layout_train
  local ref=$1 name=$2 np=$3; shift 3
  layout_train "$np" "$name" tiny.yaml --set resume_training=True --set load_checkpoint="$(ckpt10 "$ref")" "$@"
  grep -q "resumed from .*tiny-[0-9]*_10: step 10" "$name.log" || { tail -30 "$name.log"; fail "$name did not resume"; }
}
state_bytes() {  # RUN: optimizer_state_bytes of each rank, space-separated
  "$PY" -c 'import json,sys; print(" ".join("%d" % r["optimizer_state_bytes"] for r in json.load(open(sys.argv[1]))["ranks"]))' \
    "$(find "$1" -name resources.json | head -1)"
}

# One rank: float32 and bf16 moments from the same start.
layout_train 1 f32 tiny.yaml
layout_train 1 bf16 tiny.yaml $BF
grep -q "bfloat16 moments" bf16.log || { grep optimizer bf16.log; fail "the log does not say bfloat16 moments"; }
grep -q "float32 moments" f32.log || fail "the log does not say float32 moments"
"$PY" - f32/metrics.jsonl bf16/metrics.jsonl <<'PY' || fail "float32 against bfloat16 moments"
import json, sys
def losses(p): return [r["loss"] for r in map(json.loads, open(p)) if "loss" in r]
f, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(f) == len(b) == 20, (len(f), len(b))
d = [abs(x - y) for x, y in zip(f, b)]
print("loss  float32 moments: first %.6f last %.6f" % (f[0], f[-1]))
print("loss bfloat16 moments: first %.6f last %.6f" % (b[0], b[-1]))
print("|loss difference|: step 1 %.3g, step 2 %.3g, largest %.3g (step %d), step 20 %.3g (%.3g of the loss)"
      % (d[0], d[1], max(d), d.index(max(d)) + 1, d[-1], d[-1] / f[-1]))
assert d[0] == 0.0, "step 1's loss comes before any update: the same weights, the same loss"
assert b[-1] < b[0], "the bf16-moment run does not train: last loss %g, first %g" % (b[-1], b[0])
PY
f=$(state_bytes f32); b=$(state_bytes bf16)
[ "$((f))" -eq "$((2 * b))" ] || fail "optimizer state bytes float32 $f, bfloat16 $b (not half)"
echo "optimizer state on one rank: float32 moments $f bytes, bfloat16 moments $b bytes"

# Checkpoints: F32 moments under either dtype.
"$PY" - "$(ckpt10 bf16)/rank_00000.safetensors" <<'PY' || fail "the bf16-moment run's checkpoint"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
moments = {k: v["dtype"] for k, v in h.items() if k.startswith("optimizer.exp_avg")}
assert moments and set(moments.values()) == {"F32"}, sorted(set(moments.values()))
print("checkpoint of the bf16-moment run: %d moment pieces, all F32" % len(moments))
PY

# Resumes: bitwise under the same dtype; across dtypes they load and train.
resume bf16 bf16_resumed 1 $BF
same_after 10 bf16 bf16_resumed
resume bf16 bf16_to_f32 1
resume f32 f32_to_bf16 1 $BF
"$PY" - bf16/metrics.jsonl bf16_to_f32/metrics.jsonl f32/metrics.jsonl f32_to_bf16/metrics.jsonl <<'PY' || fail "resumes across moment dtypes"
import json, sys
def losses(p): return [r["loss"] for r in map(json.loads, open(p)) if "loss" in r]
bf16, bf16_to_f32, f32, f32_to_bf16 = map(losses, sys.argv[1:])
# Step 11 reads the checkpoint's weights (the same bits under either dtype): the same loss.
assert bf16_to_f32[0] == bf16[10] and f32_to_bf16[0] == f32[10], (bf16_to_f32[0], bf16[10], f32_to_bf16[0], f32[10])
assert len(bf16_to_f32) == len(f32_to_bf16) == 10
print("bf16 checkpoint under float32 moments: step 20 loss %.6f (bf16 run %.6f); float32 checkpoint under bf16 "
      "moments: %.6f (float32 run %.6f)" % (bf16_to_f32[-1], bf16[-1], f32_to_bf16[-1], f32[-1]))
PY

# ZeRO over dp2: each rank's moment shard (cutting tensors) in bf16, saved and resumed bitwise.
layout_train 2 z_f32 tiny.yaml $DP2Z
layout_train 2 z_bf16 tiny.yaml $DP2Z $BF
resume z_bf16 z_bf16_resumed 2 $DP2Z $BF
same_after 10 z_bf16 z_bf16_resumed
zf=($(state_bytes z_f32)); zb=($(state_bytes z_bf16))
for r in 0 1; do
  [ "${zf[$r]}" -eq "$((2 * ${zb[$r]}))" ] || fail "rank $r: ZeRO optimizer state float32 ${zf[$r]}, bfloat16 ${zb[$r]}"
done
echo "optimizer state per rank, ZeRO over dp2: float32 moments ${zf[*]} bytes, bfloat16 moments ${zb[*]} bytes"
# `gridformer plan` says what the run held.
"$BIN" plan --config tiny.yaml $DP2Z $BF --ranks 2 > z_bf16.plan
"$PY" - z_bf16.plan "$(printf '%s\n' "${zb[@]}" | sort -n | tail -1)" <<'PY' || fail "the plan's optimizer state"
import re, sys
plan = open(sys.argv[1]).read()
m = re.search(r"optimizer state ([0-9.]+) (B|KiB|MiB) \(AdamW moments in bfloat16, a 1/2 ZeRO-1 shard\)", plan)
assert m, plan
want = float(m.group(1)) * {"B": 1, "KiB": 2**10, "MiB": 2**20}[m.group(2)]
got = int(sys.argv[2])
assert abs(want - got) <= 0.05 * {"B": 1, "KiB": 2**10, "MiB": 2**20}[m.group(2)], (want, got)
print("plan: optimizer state %s %s per rank in bfloat16, the run's largest %d bytes" % (m.group(1), m.group(2), got))
PY
echo "PASS: moment dtype"
