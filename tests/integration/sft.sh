#!/usr/bin/env bash
# Supervised fine-tuning data end to end:
#  1. preprocess_data --sft alpaca and --sft chat (GPT-2 BPE) write the ids and a loss mask whose
#     every document equals, id for id and bit for bit, a transcription in Python: Stanford Alpaca's
#     prompt / ChatML turns through the reference GPT-2 encoder (tools/gpt2_encoder_reference.py),
#     the prompt's tokens 0, the answers' tokens and the end-of-document token 1, read back with
#     Megatron's .bin/.idx layout;
#  2. a tiny Llama trains on the alpaca data with the loss mask and both resets
#     (reset_position_ids, reset_attention_mask): step 1's loss and gradient norm equal, within 1e-5
#     relative, PyTorch's (tools/torch_llama.py, Hugging Face semantics: per-document position_ids,
#     a block-diagonal causal 4D mask and labels -100 where the mask is 0; the mean over the trained
#     targets of the global batch), from the same initial weights;
#     and the weights after one AdamW step with eps 1 give PyTorch's masked gradients element by element;
#     with a sliding window (sliding_window, or Ascend's pre_tokens) too;
#  3. the same 4 steps on 1 rank, dp2, mp2 + sequence parallel and pp2 give losses within 1e-5 relative
#     (compare_runs.py).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_vocab
need_python torch regex
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"

"$PY" - <<'EOF'
import json, random
random.seed(7)
words = "the a model data train answer question river blue seven quick fox jumps over lazy dog caf\u00e9 na\u00efve \u4e2d\u6587 42 3.14".split()
def text(n):
    return " ".join(random.choice(words) for _ in range(n))
with open("alpaca.jsonl", "w", encoding="utf-8") as f:
    for i in range(40):
        ex = {"instruction": text(random.randint(2, 6)).capitalize() + "?", "output": text(random.randint(1, 12)) + "."}
        if i % 3:
            ex["input"] = text(random.randint(1, 5))
        f.write(json.dumps(ex, ensure_ascii=False) + "\n")
with open("chat.jsonl", "w", encoding="utf-8") as f:
    for i in range(12):
        if i % 2:
            turns = [{"from": "human", "value": text(4)}, {"from": "gpt", "value": text(5)},
                     {"from": "human", "value": text(3)}, {"from": "gpt", "value": text(2)}]
            f.write(json.dumps({"conversations": turns}, ensure_ascii=False) + "\n")
        else:
            msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text(3)},
                    {"role": "assistant", "content": text(4)}]
            f.write(json.dumps({"messages": msgs}, ensure_ascii=False) + "\n")
EOF

for fmt in alpaca chat; do
  preprocess "$fmt" --input "$fmt.jsonl" --vocab-file "$VOCAB" --merge-file "$MERGES" --sft "$fmt"
  grep -h "loss mask" "$fmt.out" "$fmt.err"
done

PYTHONPATH="$SRC/tests/integration" "$PY" - "$SRC" "$VOCAB" "$MERGES" <<'EOF'
import json, sys
import lib
sys.path.insert(0, sys.argv[1] + "/tools")
from gpt2_encoder_reference import Encoder
enc = Encoder.from_files(sys.argv[2], sys.argv[3])
EOD = 50256

# Stanford Alpaca's PROMPT_DICT (tatsu-lab/stanford_alpaca train.py)
NO_INPUT = ("Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
            "### Instruction:\n{instruction}\n\n### Response:\n")
WITH_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further context. Write a "
              "response that appropriately completes the request.\n\n### Instruction:\n{instruction}\n\n### Input:\n{input}"
              "\n\n### Response:\n")
def alpaca(ex):
    prompt = (WITH_INPUT if ex.get("input") else NO_INPUT).format(**ex)
    p, a = enc.encode(prompt), enc.encode(ex["output"])
    return p + a + [EOD], [0] * len(p) + [1] * len(a) + [1]
def chat(ex):
    ids, mask = [], []
    turns = ex.get("conversations") or ex["messages"]
    for t in turns:
        role = {"human": "user", "gpt": "assistant"}.get(t.get("from", t.get("role")), t.get("from", t.get("role")))
        content = t.get("value", t.get("content"))
        h, c = enc.encode("<|im_start|>" + role + "\n"), enc.encode(content + "<|im_end|>\n")
        ids += h + c
        mask += [0] * len(h) + [1 if role == "assistant" else 0] * len(c)
    return ids + [EOD], mask + [1]
for fmt, fn in (("alpaca", alpaca), ("chat", chat)):
    docs, _ = lib.read(f"{fmt}_text_document", 8)  # Megatron's layout: uint16 ids, uint8 mask
    masks, _ = lib.read(f"{fmt}_text_document_loss_mask", 1)
    exs = [json.loads(l) for l in open(f"{fmt}.jsonl", encoding="utf-8")]
    assert len(docs) == len(masks) == len(exs), (len(docs), len(masks), len(exs))
    trained = 0
    for i, (d, m, ex) in enumerate(zip(docs, masks, exs)):
        want_ids, want_mask = fn(ex)
        assert d == want_ids, f"{fmt} example {i + 1}: ids {d} != {want_ids}"
        assert m == want_mask, f"{fmt} example {i + 1}: mask {m} != {want_mask}"
        trained += sum(m)
    assert 0 < trained < sum(map(len, docs))
    print(f"{fmt}: {len(docs)} examples, ids and loss mask equal to the Python transcription ({trained} trained tokens)")
EOF

# 2. A tiny Llama over GPT-2 ids from weights made in PyTorch; step 1 against PyTorch.
T=96; GB=4
"$PY" - "$SRC" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1] + "/tests/integration")
sys.path.insert(0, sys.argv[1] + "/tools")
import sft_reference
from make_golden import write_safetensors
m = sft_reference.model(sys.argv[1])
write_safetensors("init.safetensors", {n: p.detach().contiguous() for n, p in m.named_parameters()}, {"format": "pt"})
EOF
cat > sft.yaml <<YAML
seed: 5
run_mode: finetune
load_checkpoint: init.safetensors
runner_config: {train_steps: 4, batch_size: $GB}
runner_wrapper: {use_clip_grad: False}
lr_schedule: {type: cosine, learning_rate: 0.003, lr_end: 0.0003, warmup_steps: 1}
optimizer: {type: AdamW, beta1: 0.9, beta2: 0.95, weight_decay: 0.0}
train_dataset:
  data_loader: {type: MegatronDataset, data_path: alpaca_text_document, split: "1,0,0", shuffle: False,
                reset_position_ids: True, reset_attention_mask: True}
callbacks: [{type: MFLossMonitor, per_print_times: 1}]
model:
  arch: {type: LlamaForCausalLM}
  model_config: {type: LlamaConfig, vocab_size: 50257, seq_length: $T, hidden_size: 32, num_layers: 2, num_heads: 4,
                 n_kv_heads: 2, intermediate_size: 48, theta: 10000.0, rms_norm_eps: 1.0e-5, eos_token_id: 50256,
                 use_flash_attention: False}
YAML
layout_train 1 one sft.yaml
grep -q "with a loss mask" one.log || { grep -m3 MegatronDataset one.log; fail "the run did not read the loss mask"; }

"$PY" - "$SRC" "$T" "$GB" <<'EOF'
import sys, torch
sys.path.insert(0, sys.argv[1] + "/tests/integration")
import sft_reference as ref
T, GB, EOD = int(sys.argv[2]), int(sys.argv[3]), ref.EOD
m, loss, gnorm, (inputs, labels) = ref.step1(sys.argv[1], T, GB)
step1 = ref.logged_step1("one")
got_loss, got_norm = step1["loss"], step1["grad_norm"]
for name, got, want in (("loss", got_loss, loss.item()), ("grad_norm", got_norm, gnorm)):
    rel = abs(got - want) / abs(want)
    print(f"step 1 {name}: gridformer {got:.8f}, PyTorch {want:.8f}, relative difference {rel:.2e}")
    assert rel <= 1e-5, f"{name} differs from PyTorch by {rel:.2e} > 1e-5"
# The check can fail: without the resets (plain causal attention, positions 0..T-1) the loss differs by
# more than the tolerance.
with torch.no_grad():
    _, plain = m(inputs, labels)
moved = abs(plain.item() - loss.item()) / abs(loss.item())
print(f"without the resets PyTorch's loss moves by {moved:.2e} relative")
assert moved > 1e-5, "the resets change nothing in this batch"
trained = int((labels != -100).sum())
assert 0 < trained < GB * T
print(f"step 1 trains {trained} of {GB * T} targets; {int((inputs == EOD).sum())} documents end inside the batch")
EOF

# 2b. The gradients themselves, element by element: one AdamW step with eps 1 and lr 1 moves each weight by
# g / (|g| + 1) (step 1's bias-corrected moments are g and g^2), so the weights after it give PyTorch's
# masked gradient. Each tensor is held to 1e-5 of its largest update, plus the float32 rounding of the
# new weight (2 ulp of its largest element).
layout_train 1 grads sft.yaml --set runner_config.train_steps=1 --set optimizer.eps=1.0 --set lr_schedule.learning_rate=1.0 \
  --set lr_schedule.lr_end=1.0 --set lr_schedule.warmup_steps=0
"$PY" - "$SRC" "$T" "$GB" <<'EOF'
import sys, numpy as np
sys.path.insert(0, sys.argv[1] + "/tests/integration")
sys.path.insert(0, sys.argv[1] + "/tools")
import sft_reference as ref
from check_golden import read_safetensors
m, loss, _, _ = ref.step1(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
lr = ref.logged_step1("grads")["lr"]
assert lr == 1.0, lr
got, _, _ = read_safetensors("grads/weights.safetensors")
worst, checked, zero_rows = 0.0, 0, 0
for name, p in m.named_parameters():
    w0 = p.detach().double().numpy()
    g = p.grad.double().numpy()
    upd = lr * g / (np.abs(g) + 1.0)
    want = w0 - upd
    have = got[name].astype(np.float64)
    bound = 1e-5 * np.abs(upd).max() + 2 * np.spacing(np.float32(np.abs(w0).max()))
    err = np.abs(have - want).max()
    assert err <= bound, f"{name}: |w1 - (w0 - g/(|g|+1))| = {err:.3e} > {bound:.3e}"
    worst = max(worst, err / bound)
    checked += g.size
    if name == "model.embed_tokens.weight":  # rows of tokens never read have no gradient, here and there
        zero_rows = int((np.abs(g).sum(1) == 0).sum())
print(f"step 1 gradients: {checked} elements equal to PyTorch's masked gradients (worst {worst:.2f} of the bound); "
      f"{zero_rows} embedding rows untouched")
EOF

# 2c. A sliding window (model_config.sliding_window: 8, Hugging Face's: keys j with i - j < 8) on top of the
# document mask, and Ascend's pre_tokens: 7 for the same band: step 1 against PyTorch with that 4D mask.
layout_train 1 window sft.yaml --set runner_config.train_steps=1 --set model.model_config.sliding_window=8
layout_train 1 pre_tokens sft.yaml --set runner_config.train_steps=1 --set model.model_config.pre_tokens=7 --set model.model_config.next_tokens=0
"$PY" - "$SRC" "$T" "$GB" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1] + "/tests/integration")
import sft_reference as ref
_, loss, gnorm, _ = ref.step1(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), window=8)
base = ref.logged_step1("one")["loss"]
assert abs(base - loss.item()) > 1e-5 * abs(loss.item()), "the window changes nothing in this batch"
for run in ("window", "pre_tokens"):
    step1 = ref.logged_step1(run)
    for name, got, want in (("loss", step1["loss"], loss.item()), ("grad_norm", step1["grad_norm"], gnorm)):
        rel = abs(got - want) / abs(want)
        assert rel <= 1e-5, f"{run}: {name} {got} differs from PyTorch's {want} by {rel:.2e}"
print(f"sliding_window 8 and pre_tokens 7: step 1 loss {loss.item():.8f} and gradient norm {gnorm:.8f} equal PyTorch's "
      f"within 1e-5 (without the window the loss is {base:.8f})")
EOF

# 3. The same steps under other layouts.
layout_train 2 dp2 sft.yaml --set parallel_config.data_parallel=2 --set runner_config.batch_size=$((GB / 2))
layout_train 2 mp2_sp sft.yaml --set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=True
layout_train 2 pp2 sft.yaml --set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 --set runner_config.batch_size=$((GB / 2))
"$PY" "$SRC/tests/integration/compare_runs.py" one dp2 mp2_sp pp2
echo "PASS"
