#!/usr/bin/env bash
# gridformer replay (the Resilience issue's item 2), on 2 ranks (dp2, dropout on):
#  (a) steps 9-12 replayed from the run's step-8 checkpoint: "same bits" for each, status 0.
#  (b) one mantissa bit of a saved weight (h.1.mlp.c_fc.weight) flipped: the replay names the damaged
#      tensor (its piece's CRC-32C), replays it as it is, and reports DIFFERENT bits from step 9 on with the
#      ranks whose own loss differs: status 7. The flipped bit is the top mantissa bit (the element moves
#      by a quarter to a half of itself). With the bit worth 2^-7 of the element, rank 0's step-9 loss came
#      out bitwise the same once the exact GELU's rounding changed (Eigen's vectorised erf): a change of
#      the loss below half a unit in its last place, by chance, not a fault of the replay.
#  (c) a NaN planted in h.1.mlp.c_fc.weight of the step-8 checkpoint with its CRCs rewritten (memory
#      corrupted before the save): resumed in bf16, the run stops at step 9 (status 3) and suggests the
#      replay; replayed, step 9 is again not finite with the same bits (a deterministic fault), the first
#      output that is not finite is layer 1's output (its MLP: the attention before it is finite), and the
#      fp32 re-run finds the same.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
random_gpt2 tiny.yaml seed=3 steps=12 batch=2 lr_end= optimizer= samples=400 top="parallel_config: {data_parallel: 2}" \
  ckpt="prefix: tiny, save_checkpoint_steps: 4, keep_checkpoint_max: 3"
mp() { mpirun -np 2 --oversubscribe "$BIN" "$@"; }
# Edits element 37 of the first piece of h.1.mlp.c_fc.weight in a checkpoint's rank-0 shard: MODE flip (one
# mantissa bit, CRCs left as saved) or nan (a NaN, the piece's and the file's CRC-32C rewritten in index.json).
edit() {  # CHECKPOINT_DIR MODE
  "$PY" - "$1" "$2" <<'PY' || fail "editing $1"
import json, struct, sys
d, mode = sys.argv[1], sys.argv[2]
def crc32c(data, crc=0):
    table = []
    for i in range(256):
        c = i
        for _ in range(8): c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    crc ^= 0xFFFFFFFF
    for b in data: crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
path = d + "/rank_00000.safetensors"
b = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
key = "h.1.mlp.c_fc.weight@0"
lo, hi = (8 + n + x for x in h[key]["data_offsets"])
o = lo + 4 * 37
if mode == "flip": b[o + 2] ^= 0x40  # the top mantissa bit: see the header
else: b[o:o + 4] = struct.pack("<f", float("nan"))
open(path, "wb").write(b)
if mode == "nan":
    index = json.load(open(d + "/index.json"))
    index["files"]["rank_00000.safetensors"]["crc32c"] = "%08x" % crc32c(b)
    for p in index["tensors"]["h.1.mlp.c_fc.weight"]["pieces"]:
        if p["file"] == "rank_00000.safetensors" and p["key"] == key: p["crc32c"] = "%08x" % crc32c(b[lo:hi])
    json.dump(index, open(d + "/index.json", "w"))
PY
}

mpi_train 2 run tiny.yaml

# (a)
run a mp replay --checkpoint run/checkpoint/tiny-1_8 --steps 9-12 --output_dir rp_a
((STATUS == 0)) || fail "(a) status $STATUS: $(tail -3 a.log)"
[ "$(grep -c "same bits as the run" a.log)" = 4 ] || fail "(a) $(grep 'step [0-9]*:' a.log)"
grep -q "replay verdict: same bits in every compared step (9-12)" a.log || fail "(a) verdict: $(grep verdict a.log)"
"$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["status"] == 0 and all(s["same"] for s in j["steps"]), j' rp_a/replay.json \
  || fail "(a) replay.json"
echo "(a) steps 9-12 from the step-8 checkpoint: same bits"

# (b)
cp -r run flipped
edit flipped/checkpoint/tiny-1_8 flip
run b mp replay --checkpoint flipped/checkpoint/tiny-1_8 --steps 9-12 --metrics run/metrics.jsonl --output_dir rp_b
((STATUS == 7)) || fail "(b) status $STATUS, expected 7: $(tail -3 b.log)"
grep -q "the checkpoint differs from what was saved: .*damaged: tensor h.1.mlp.c_fc.weight box" b.log || fail "(b) the tensor is not named: $(grep -m1 warn b.log)"
[ "$(grep -c "step [0-9]*: DIFFERENT bits: .*the ranks whose own loss differs: 0, 1" b.log)" = 4 ] || fail "(b) $(grep 'step [0-9]*:' b.log)"
grep -q "replay verdict: DIFFERENT bits from step 9.*: the checkpoint's bits changed after its save" b.log || fail "(b) verdict: $(grep verdict b.log)"
echo "(b) a flipped bit: $(grep -o 'damaged: tensor h.1.mlp.c_fc.weight box[^)]*)' b.log | head -1); different bits from step 9, status 7"

# (c)
cp -r run nan
edit nan/checkpoint/tiny-1_8 nan
run nan mp train --config tiny.yaml --set output_dir=nan --set resume_training=True --set load_checkpoint=nan/checkpoint/tiny-1_8 \
  --set model.model_config.compute_dtype=bfloat16
((STATUS == 3)) || fail "(c) the resumed run: status $STATUS, expected 3: $(tail -3 nan.log)"
grep -q "gridformer replay --checkpoint .* --steps 9" nan.log || fail "(c) the error does not suggest the replay"
run c mp replay --checkpoint nan/checkpoint/tiny-1_8 --steps 9 --set model.model_config.compute_dtype=bfloat16 --output_dir rp_c
((STATUS == 0)) || fail "(c) replay status $STATUS: $(tail -3 c.log)"
grep -q "step 9: loss nan grad_norm nan: same bits as the run" c.log || fail "(c) $(grep 'step [0-9]*:' c.log)"
grep -q "step 9 is not finite again: the first output that is not: rank 0: layer 1's output (MLP + residual)" c.log || fail "(c) verdict: $(grep verdict c.log)"
grep -q "in fp32: step 9 is not finite either, first at rank 0: layer 1's output (MLP + residual)" c.log || fail "(c) fp32: $(grep verdict c.log)"
echo "(c) a planted NaN: step 9 not finite in the run (status 3) and in the replay with the same bits; first at layer 1's output, in bf16 and in fp32"
echo "PASS: replay"
