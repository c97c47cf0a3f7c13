#!/usr/bin/env bash
# LoRA adapters out and in, checked by PyTorch (tools/check_peft_adapter.py, a transcription of PEFT v0.20.0's
# LoRA layer and adapter format; tools/torch_peft_lora.py):
#  * the adapters of tests/models/lora_golden_test.cpp's ten steps (both variants: PEFT's target list at r 4,
#    alpha 8; a regex with rsLoRA), exported by `gridformer convert` as PEFT's adapter directory: its keys, shapes,
#    dtype and adapter_config.json are PEFT's, and applied to the golden's base by the reference they give the
#    golden's final logits within 1e-5;
#  * `convert --merge-lora` of that directory into the base (a Hugging Face directory of the golden's weights):
#    the plain model with the merged weights gives those logits within 1e-5 (fp32), and a bf16 base is merged in
#    fp32 and written back in bf16 (the base's dtype);
#  * refused, nothing written: --merge-lora of weights without adapters, adapters on a base that lacks their
#    modules, --base without --merge-lora.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_python torch
GOLD="$SRC/tests/golden/lora"
GF_LORA_EXPORT=$WORK/export "$BUILD/bin/gf_tests" --gtest_filter='Peft/LoraGolden.TenAdamW*' > gtest.log 2>&1 ||
  { tail -30 gtest.log; fail "lora_golden_test failed"; }
for v in llama_lora llama_lora_qv_rslora; do
  [[ -s export/$v/adapter_model.safetensors ]] || fail "no export of $v"
  "$PY" "$SRC/tools/check_peft_adapter.py" "export/$v" --golden "$GOLD/$v.safetensors" > check_$v.log 2>&1 ||
    { cat check_$v.log; fail "$v: the exported adapter is not PEFT's, or not the golden's model"; }
  ok "$v: $(tail -1 check_$v.log)"
done

# The golden's base as a Hugging Face directory (model.safetensors + config.json), fp32 and bf16.
export PYTHONPATH="$SRC/tests/integration"
"$PY" - "$GOLD/llama_lora.safetensors" <<'EOF'
import os, sys
import torch
import st_io
t, meta = st_io.read(sys.argv[1])
w = {k[len("weights."):]: v for k, v in t.items() if k.startswith("weights.")}
for d, dt in (("base_f32", torch.float32), ("base_bf16", torch.bfloat16)):
    os.makedirs(d)
    st_io.write(d + "/model.safetensors", {k: v.to(dt) for k, v in w.items()})
    open(d + "/config.json", "w").write(meta["hf_config"])
EOF
run merge "$BIN" convert --from export/llama_lora --merge-lora --base base_f32 --to merged
((STATUS == 0)) || { cat merge.log; fail "convert --merge-lora failed"; }
grep -q "with the LoRA adapters of export/llama_lora merged (14 weights)" merge.log || { cat merge.log; fail "merge: summary"; }
"$PY" "$SRC/tools/check_peft_adapter.py" --merged merged/model.safetensors --golden "$GOLD/llama_lora.safetensors" \
  > check_merged.log 2>&1 || { cat check_merged.log; fail "the merged weights do not give the adapter model's logits"; }
ok "merged: $(tail -1 check_merged.log)"
run merge_bf16 "$BIN" convert --from export/llama_lora --merge-lora --base base_bf16 --to merged_bf16
((STATUS == 0)) || { cat merge_bf16.log; fail "convert --merge-lora of a bf16 base failed"; }
"$PY" - <<'EOF' || fail "the bf16 merge is not W + s B A in fp32 rounded to bf16"
import torch
import st_io
m, _ = st_io.read("merged_bf16/model.safetensors")
b, _ = st_io.read("base_bf16/model.safetensors")
a, _ = st_io.read("export/llama_lora/adapter_model.safetensors")
n = "model.layers.1.mlp.down_proj"
A, B = a[f"base_model.model.{n}.lora_A.weight"].double(), a[f"base_model.model.{n}.lora_B.weight"].double()
want = (b[n + ".weight"].float() + (2.0 * (B @ A)).float()).to(torch.bfloat16)  # W + float(s B A), then bf16
got = m[n + ".weight"]
assert got.dtype == torch.bfloat16, got.dtype
assert torch.equal(got, want), (got.float() - want.float()).abs().max()
assert torch.equal(m["model.norm.weight"], b["model.norm.weight"])
print("ok: bf16 base merged in fp32 and rounded to bf16 once; the untouched tensors bit for bit")
EOF
refused 2 "holds no LoRA adapters" no_adapters "$BIN" convert --from base_f32 --merge-lora --to x1
refused 2 "--base names the base model of --merge-lora" base_alone "$BIN" convert --from base_f32 --base base_f32 --to x2
"$PY" - <<'EOF'
import os
import st_io
t, meta = st_io.read("base_f32/model.safetensors")
del t["model.layers.1.mlp.down_proj.weight"]
os.makedirs("base_short")
st_io.write("base_short/model.safetensors", t)
open("base_short/config.json", "w").write(open("base_f32/config.json").read())
EOF
refused 2 "has no 'model.layers.1.mlp.down_proj.weight' for the adapter" short "$BIN" convert --from export/llama_lora \
  --merge-lora --base base_short --to x3
[[ ! -e x1 && ! -e x2 && ! -e x3 ]] || fail "a refused convert wrote something"
ok "PEFT adapters out, merged in fp32 and bf16, refusals"
