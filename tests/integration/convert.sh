#!/usr/bin/env bash
# `gridformer convert` end to end: Hugging Face weights (the sharded golden Llama, the tiny GPT-2
# state dict with its buffers and tied head) -> our checkpoint -> Hugging Face shards / one file
# give every tensor back byte for byte (read here with the safetensors spec, not our reader); a
# training run from the export starts from the same loss as one from the original file; progress
# goes to stderr and the summary to stdout; bad input ends with one `error:` line and status 2. A
# converted checkpoint trains from the same loss too, and is refused for resume_training.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
GOLDEN="$SRC/tests/golden"

# Every tensor of the Hugging Face weights $2 (file, directory or index) has the bytes, dtype and shape
# it has in $1, and $2 holds nothing else but what $3 (a regex) says $1 may lose.
same_tensors() {
  "$PY" - "$@" <<'PY'
import json, os, re, struct, sys

def files_of(path):
    if os.path.isdir(path):
        one = os.path.join(path, "model.safetensors")
        path = one if os.path.exists(one) else os.path.join(path, "model.safetensors.index.json")
    if path.endswith(".index.json"):
        with open(path) as f:
            index = json.load(f)
        return sorted({os.path.join(os.path.dirname(path), v) for v in index["weight_map"].values()}), index
    return [path], None

def tensors(path):
    out = {}
    files, index = files_of(path)
    for fn in files:
        with open(fn, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = f.read()
        meta = header.pop("__metadata__", {})
        assert meta.get("format") == "pt", (fn, meta)
        for name, t in header.items():
            b, e = t["data_offsets"]
            out[name] = (t["dtype"], t["shape"], data[b:e])
            if index is not None:
                assert os.path.basename(fn) == index["weight_map"][name], name
    if index is not None:
        assert set(index["weight_map"]) == set(out), "weight_map and the shards name different tensors"
        assert index["metadata"]["total_size"] == sum(len(v[2]) for v in out.values())
    return out

a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
dropped = re.compile(sys.argv[3]) if len(sys.argv) > 3 else None
for name in a:
    if name not in b:
        assert dropped and dropped.search(name), f"{name} is missing from {sys.argv[2]}"
        continue
    assert a[name] == b[name], f"{name} differs"
assert set(b) <= set(a), f"{sys.argv[2]} adds {set(b) - set(a)}"
print(f"{len(b)} tensors identical ({len(a) - len(b)} dropped)")
PY
}

# 1. The sharded Llama -> checkpoint (the default from Hugging Face) -> shards of at most 100 kB.
"$BIN" convert --from "$GOLDEN/llama_tiny_sharded" --to ckpt > o1.txt 2> e1.txt || { cat o1.txt e1.txt; fail "to checkpoint"; }
grep -q "^converted 21 tensors" o1.txt || fail "summary on stdout: $(cat o1.txt)"
grep -q "convert: 100% (21 of 21 tensors" e1.txt || fail "progress on stderr: $(cat e1.txt)"
[ -f ckpt/latest ] && [ -f ckpt/converted/index.json ] || fail "no checkpoint written: $(ls -R ckpt)"
"$PY" - <<'PY' || fail "the checkpoint's state"
import json
state = json.load(open("ckpt/converted/index.json"))["state"]
assert state["weights_only"] is True and state["step"] == 0, state
assert state["converted_from"].endswith("llama_tiny_sharded/model.safetensors.index.json"), state
PY
"$BIN" convert --from ckpt --to hf --max-shard-size 100KB > o2.txt 2> e2.txt || { cat o2.txt e2.txt; fail "to shards"; }
ls hf/model-00001-of-0000*.safetensors > /dev/null 2>&1 || fail "no shards: $(ls hf)"
[ -f hf/model.safetensors.index.json ] || fail "no index"
same_tensors "$GOLDEN/llama_tiny_sharded" hf || fail "shards differ from the input"
# ... and to one full file from either.
"$BIN" convert --from ckpt --to full.safetensors > /dev/null 2>&1 || fail "to one file"
same_tensors "$GOLDEN/llama_tiny_sharded" full.safetensors || fail "one file differs from the input"
"$BIN" convert --from hf --to merged.safetensors > /dev/null 2>&1 || fail "shards to one file"
same_tensors "$GOLDEN/llama_tiny_sharded" merged.safetensors || fail "merged file differs from the input"
"$BIN" convert --from ckpt --to bf16.safetensors --dtype bfloat16 > /dev/null 2>&1 || fail "to bf16"
"$PY" - <<'PY' || fail "bf16 export"
import json, struct
f = open("bf16.safetensors", "rb"); h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
h.pop("__metadata__")
assert len(h) == 21 and all(t["dtype"] == "BF16" for t in h.values()), h
PY

# 2. GPT-2 (transformer. names, attn.bias buffers, the tied lm_head) -> checkpoint -> Hugging Face:
# the export drops the buffers and the head and keeps the prefix, as save_pretrained writes it; a
# run loading it starts from the loss of a run loading the original.
"$BIN" convert --from "$GOLDEN/hf_tiny_f32.safetensors" --to gpt2_ckpt > o3.txt 2>&1 || { cat o3.txt; fail "GPT-2 to checkpoint"; }
grep -q "skipped 2 tensors: buffers" o3.txt || fail "the attention buffers not reported: $(cat o3.txt)"
grep -q "skipped 1 tensor: tied lm_head" o3.txt || fail "the tied head not reported: $(cat o3.txt)"
"$BIN" convert --from gpt2_ckpt --to gpt2_hf > /dev/null 2>&1 || fail "GPT-2 to Hugging Face"
same_tensors "$GOLDEN/hf_tiny_f32.safetensors" gpt2_hf '\.attn\.bias$|^lm_head\.weight$' || fail "GPT-2 export"
golden_gpt2 gpt2.yaml out=./run steps=1 samples=4
# The original, its export, and the checkpoint converted from it (loaded as weights) start alike.
for w in "$GOLDEN/hf_tiny_f32.safetensors" gpt2_hf gpt2_ckpt; do
  train "from_$(basename "$w")" gpt2.yaml --set "load_checkpoint=$w"
  losses "from_$(basename "$w")" | head -1 | cut -d' ' -f2 >> losses.txt
done
[ "$(wc -l < losses.txt)" -eq 3 ] && [ "$(sort -u losses.txt | wc -l)" -eq 1 ] ||
  fail "the export or the converted checkpoint trains from another loss: $(cat losses.txt)"
# A converted checkpoint holds weights only (state weights_only, no optimizer moments): no resuming from it.
run t "$BIN" train --config gpt2.yaml --set load_checkpoint=gpt2_ckpt --set resume_training=True
((STATUS == 2)) && ! grep -q "step:\[" t.log || fail "resumed from a converted checkpoint: $(cat t.log)"

# 3. Bad input: one error line naming what is wrong, status 2, nothing half-written.
expect() {
  local msg=$1; shift
  run out "$BIN" "$@"; local status=$STATUS
  [ "$status" -eq 2 ] || fail "$*: exit status $status, expected 2: $(cat out.log)"
  grep -qF -- "$msg" out.log || fail "$*: no '$msg' in: $(cat out.log)"
  [ "$(grep -c '^error:' out.log)" -eq 1 ] || fail "$*: expected one error line: $(cat out.log)"
  for crash in "terminate called" "Aborted" "what():" "core dumped"; do
    ! grep -qF -- "$crash" out.log || fail "$*: output shows '$crash'"
  done
  echo "ok: $(grep -m1 '^error:' out.log | cut -c1-150)"
}
expect "no_such: no such file or directory" convert --from no_such --to x
expect "--to" convert --from ckpt
expect "is a directory that is not empty" convert --from ckpt --to hf
expect "--dtype float64" convert --from ckpt --to y.safetensors --dtype float64
expect "our checkpoints hold float32" convert --from "$GOLDEN/llama_tiny_sharded" --to c2 --dtype float16
expect "is where --from's weights are" convert --from hf --to hf --overwrite
# float16 cannot hold a finite weight of 70000 (its largest is 65504): refused by the tensor's name, for
# Hugging Face output (megatron_out.sh: Megatron's), rather than written as inf. 65510 rounds to 65504 and is written.
"$PY" - "$GOLDEN/hf_tiny_f32.safetensors" <<'PY' || fail "doctoring the GPT-2 weights"
import json, shutil, struct, sys
for out, value in (("big.safetensors", 70000.0), ("edge.safetensors", 65510.0)):
    shutil.copy(sys.argv[1], out)
    with open(out, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        t = json.loads(f.read(n))["transformer.h.1.mlp.c_fc.weight"]
        f.seek(8 + n + t["data_offsets"][0] + 4 * 5)
        f.write(struct.pack("<f", value))
PY
expect "transformer.h.1.mlp.c_fc.weight: element 5 is 70000, beyond float16's range" \
  convert --from big.safetensors --to big16 --format hf --dtype float16
[ ! -e big16 ] || fail "a refused float16 export left output behind: $(ls -R big16)"
"$BIN" convert --from edge.safetensors --to edge16.safetensors --dtype float16 > /dev/null 2>&1 || fail "65510 to float16"
cp -r ckpt broken
truncate -s 1000 broken/converted/rank_00000.safetensors
expect "rank_00000.safetensors" convert --from broken --to z
[ ! -e z ] || fail "a damaged checkpoint left output behind: $(ls -R z)"
"$BIN" convert --from ckpt --to hf --overwrite > /dev/null 2>&1 || fail "--overwrite"
[ -f hf/model.safetensors ] && [ ! -f hf/model.safetensors.index.json ] || fail "--overwrite left the old shards: $(ls hf)"
same_tensors "$GOLDEN/llama_tiny_sharded" hf || fail "overwritten export differs"
echo "PASS"
