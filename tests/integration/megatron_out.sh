#!/usr/bin/env bash
# Megatron checkpoints out (the Megatron issue's item 4): `convert --format megatron` writes Megatron-LM's layout
# (release/mp_rank_TT[_PPP]/model_optim_rng.pt, checkpoint version 3.0, models/weights/megatron_save.h) from one of
# our checkpoints, and
#   - PyTorch's torch.load reads every shard, and each holds exactly what tools/make_megatron_golden.py's
#     transcription of Megatron's layout makes of the same weights (megatron_out_check.py: keys in Megatron's
#     order, dtypes, shapes, bits; the args check_checkpoint_args compares), at TP2 x PP2 in float32, TP1 in
#     bfloat16 and TP4 in float16;
#   - read back as load_checkpoint, it evaluates to bitwise the loss of the checkpoint it came from, on one rank
#     and at model_parallel 2 (ours -> Megatron -> ours);
#   - Llama and Mixtral (and GPT-2 with --use-mcore-models) in Megatron-core's layout: Transformer Engine's and the
#     local spec's names, TP 2 x PP 2, experts over EP 2 per expert and grouped, each shard what the transcription's
#     core flavour makes of the same weights, and evaluating to ours' loss bit for bit; Qwen2 (q, k, v biases alone)
#     from its Hugging Face weights to the same loss;
#   - what Megatron's layout cannot hold is refused by name before anything is written, and a weight beyond
#     float16's range by its name, with nothing left behind.
# (tests/integration/megatron_jobs.sh runs Ascend's LAMBADA script on such a checkpoint.)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_vocab
need_corpus
need_python torch
tiny_config gpt2 gpt2.yaml
train run gpt2.yaml
run hf "$BIN" convert --from run --to hf.safetensors
((STATUS == 0)) || { cat hf.log; fail "convert to Hugging Face"; }

# out NAME TP PP DTYPE: converted, then checked with PyTorch.
out() {
  run "$1" "$BIN" convert --from run --to "$1" --format megatron --tensor-model-parallel-size "$2" \
    --pipeline-model-parallel-size "$3" --dtype "$4"
  ((STATUS == 0)) || { cat "$1.log"; fail "$1: convert --format megatron"; }
  grep -qF "to Megatron-LM checkpoint $1/release ($4, TP $2 x PP $3, checkpoint version 3.0)" "$1.log" || { cat "$1.log"; fail "$1: the summary line"; }
  "$PY" "$SRC/tests/integration/megatron_out_check.py" "$1" hf.safetensors 4 "$2" "$3" "$4" || fail "$1: not Megatron's layout"
}
out meg22 2 2 float32
out meg_bf16 1 1 bfloat16
out meg_f16 4 1 float16

# ours -> Megatron -> ours: the same evaluation loss, bit for bit (the float32 shards hold the weights exactly).
eval_loss() { "$PY" -c "
import json, sys
print(repr([json.loads(l) for l in open(sys.argv[1]) if 'eval_loss' in l][-1]['eval_loss']))" "$1/metrics.jsonl"; }
for np in 1 2; do
  layout=(); [ "$np" = 2 ] && layout=(--set parallel_config.model_parallel=2)
  for src in run meg22; do
    run "ev${np}_$src" mpirun -np "$np" --oversubscribe "$BIN" train --config gpt2.yaml --set output_dir="ev${np}_$src" \
      --set run_mode=eval --set load_checkpoint="$src" "${layout[@]}"
    ((STATUS == 0)) || { tail -20 "ev${np}_$src.log"; fail "ev${np}_$src: evaluation"; }
  done
  grep -q "loaded weights from meg22 (Megatron-LM checkpoint" "ev${np}_meg22.log" || fail "ev${np}_meg22 did not read the Megatron checkpoint"
  [ "$(eval_loss "ev${np}_run")" = "$(eval_loss "ev${np}_meg22")" ] ||
    fail "$np rank(s): eval loss $(eval_loss "ev${np}_meg22") from the Megatron checkpoint, $(eval_loss "ev${np}_run") from ours"
  ok "$np rank(s): the Megatron checkpoint evaluates to ours' loss bit for bit: $(eval_loss "ev${np}_run")"
done

# Megatron-core's layout (megatron_save_core.cpp), checked against the transcription's "core" flavour of the same
# weights: Llama (8 heads in 2 query groups, SwiGLU, RMSNorm, RoPE, an untied head) at TP 2 with Transformer Engine's
# names (core_r0.6.0's default) and at TP 2 x PP 2 in bfloat16 with the local spec's; Mixtral's 4 experts over EP 2,
# as local_experts and as GroupedMLP's weight1/weight2; GPT-2 with --use-mcore-models at TP 2.
# core_out NAME FROM HF HEADS TP PP DTYPE [convert's Megatron flags] -- [the check's flags]
core_out() {
  local name=$1 from=$2 hf=$3 heads=$4 tp=$5 pp=$6 dtype=$7 conv=() check=()
  shift 7
  while (($#)) && [ "$1" != -- ]; do conv+=("$1"); shift; done
  (($#)) && shift
  check=("$@")
  run "$name" "$BIN" convert --from "$from" --to "$name" --format megatron --tensor-model-parallel-size "$tp" \
    --pipeline-model-parallel-size "$pp" --dtype "$dtype" "${conv[@]}"
  ((STATUS == 0)) || { cat "$name.log"; fail "$name: convert --format megatron"; }
  grep -qF "Megatron-core's layout" "$name.log" || { cat "$name.log"; fail "$name: the summary line does not name core's layout"; }
  "$PY" "$SRC/tests/integration/megatron_out_check.py" "$name" "$hf" "$heads" "$tp" "$pp" "$dtype" --core "${check[@]}" ||
    fail "$name: not Megatron-core's layout"
}
tiny_config llama llama.yaml
train lrun llama.yaml
run lhf "$BIN" convert --from lrun --to lhf.safetensors
((STATUS == 0)) || { cat lhf.log; fail "convert the Llama run to Hugging Face"; }
core_out lcore_te lrun lhf.safetensors 8 2 1 float32 -- --te
core_out lcore_local lrun lhf.safetensors 8 2 2 bfloat16 --transformer-impl local --
tiny_config mixtral mixtral.yaml
train mrun mixtral.yaml
run mhf "$BIN" convert --from mrun --to mhf.safetensors
((STATUS == 0)) || { cat mhf.log; fail "convert the Mixtral run to Hugging Face"; }
core_out mcore_ep2 mrun mhf.safetensors 8 1 1 float32 --expert-model-parallel-size 2 --transformer-impl local -- --ep 2
core_out mcore_grouped mrun mhf.safetensors 8 1 1 float32 --expert-model-parallel-size 2 --transformer-impl local \
  --moe-grouped-gemm -- --ep 2 --grouped
core_out gcore run hf.safetensors 4 2 1 float32 --use-mcore-models --transformer-impl local --

# ours -> Megatron-core -> ours: the same evaluation loss, bit for bit, on one rank and at model_parallel 2.
for np in 1 2; do
  layout=(); [ "$np" = 2 ] && layout=(--set parallel_config.model_parallel=2)
  for pair in "llama.yaml lrun lcore_te" "mixtral.yaml mrun mcore_grouped" "gpt2.yaml run gcore"; do
    read -r cfg ours meg <<< "$pair"
    for src in "$ours" "$meg"; do
      run "cev${np}_$src" mpirun -np "$np" --oversubscribe "$BIN" train --config "$cfg" --set output_dir="cev${np}_$src" \
        --set run_mode=eval --set load_checkpoint="$src" "${layout[@]}"
      ((STATUS == 0)) || { tail -20 "cev${np}_$src.log"; fail "cev${np}_$src: evaluation"; }
    done
    grep -q "loaded weights from $meg (Megatron-LM checkpoint" "cev${np}_$meg.log" || fail "cev${np}_$meg did not read the Megatron checkpoint"
    [ "$(eval_loss "cev${np}_$ours")" = "$(eval_loss "cev${np}_$meg")" ] ||
      fail "$np rank(s): eval loss $(eval_loss "cev${np}_$meg") from $meg, $(eval_loss "cev${np}_$ours") from ours"
    ok "$np rank(s): $meg (Megatron-core) evaluates to ours' loss bit for bit: $(eval_loss "cev${np}_$ours")"
  done
done

# Qwen2's biases on q, k and v alone (core's --add-qkv-bias; tied, 4 heads in 2 groups, RoPE base 1e6): its Hugging
# Face weights (tests/golden/families/) to Megatron-core at TP 2 evaluate to the loss of the weights themselves.
# (The golden file holds the family test's inputs and outputs beside its weights, which are prefixed `weights.`.)
mkdir -p q2hf && cp "$SRC/tests/golden/families/qwen2/config.json" q2hf/
"$PY" - "$SRC/tests/integration" "$SRC/tests/golden/families/qwen2.safetensors" q2hf/model.safetensors <<'PY' ||
import sys
sys.path.insert(0, sys.argv[1])
import st_io
t, _ = st_io.read(sys.argv[2])
st_io.write(sys.argv[3], {k[len("weights."):]: v for k, v in t.items() if k.startswith("weights.")})
PY
  fail "Qwen2's golden weights"
"$BIN" config --from-hf q2hf > q2.model.yaml 2> q2.err || { cat q2.err; fail "config --from-hf of Qwen2"; }
"$PY" - q2.model.yaml q2.yaml <<'PY' || fail "the Qwen2 run's YAML"
import sys, yaml
run = yaml.safe_load(open(sys.argv[1]))
run.update(yaml.safe_load("""
runner_config: {train_steps: 1, batch_size: 2}
train_dataset: {data_loader: {type: RandomTokens, seed: 5, num_samples: 8}}
"""))
run["model"]["model_config"]["seq_length"] = 32
yaml.safe_dump(run, open(sys.argv[2], "w"), sort_keys=False)
PY
run q2meg "$BIN" convert --from q2hf --to q2meg --format megatron --tensor-model-parallel-size 2
((STATUS == 0)) || { cat q2meg.log; fail "Qwen2 to Megatron-core"; }
"$PY" - q2meg <<'PY' || fail "Qwen2's Megatron-core shards"
import sys, torch
d = torch.load(f"{sys.argv[1]}/release/mp_rank_00/model_optim_rng.pt", map_location="cpu")
a, m = vars(d["args"]), d["model"]
assert a["add_qkv_bias"] is True and a["add_bias_linear"] is False, (a["add_qkv_bias"], a["add_bias_linear"])
assert a["rotary_base"] == 1000000 and a["num_query_groups"] == 2, (a["rotary_base"], a["num_query_groups"])
assert tuple(m["decoder.layers.0.self_attention.linear_qkv.bias"].shape) == (64,)  # (4 + 2 x 2) x 16 / TP 2
assert not any(k.endswith("linear_proj.bias") or k.endswith("linear_fc1.bias") for k in m), "a bias beyond q, k, v"
print("ok: Qwen2 in core's layout: add_qkv_bias, linear_qkv.bias [64] on each TP rank, no other bias")
PY
for src in q2hf q2meg; do
  run "q2ev_$src" "$BIN" train --config q2.yaml --set output_dir="q2ev_$src" --set run_mode=eval --set load_checkpoint="$src"
  ((STATUS == 0)) || { tail -20 "q2ev_$src.log"; fail "q2ev_$src: evaluation"; }
done
[ "$(eval_loss q2ev_q2hf)" = "$(eval_loss q2ev_q2meg)" ] ||
  fail "Qwen2: eval loss $(eval_loss q2ev_q2meg) from Megatron-core, $(eval_loss q2ev_q2hf) from its Hugging Face weights"
ok "Qwen2 (q, k, v biases alone) through Megatron-core evaluates to its Hugging Face weights' loss bit for bit: $(eval_loss q2ev_q2hf)"

# Refused before anything is written.
refused 2 "num_experts 4 is not divisible by the expert-parallel size 3" ep3 "$BIN" convert --from mrun --to m_ep3 \
  --format megatron --expert-model-parallel-size 3
[ ! -e m_ep3 ] || fail "the refused EP 3 conversion wrote $(ls m_ep3)"
refused 2 "the 2 query groups (key/value heads) are not divisible by the tensor-parallel size 4" l_tp4 "$BIN" convert \
  --from lrun --to l_tp4 --format megatron --tensor-model-parallel-size 4
refused 2 "--expert-model-parallel-size 2 needs experts" l_ep2 "$BIN" convert --from lrun --to l_ep2 --format megatron \
  --expert-model-parallel-size 2
refused 2 "num_heads 4 is not divisible by the tensor-parallel size 3" tp3 "$BIN" convert --from run --to m3 --format megatron \
  --tensor-model-parallel-size 3
# A weight float16 cannot hold (70000; its largest is 65504) is refused by its name, not written as inf.
# (Doctored in Hugging Face form, whose shards carry no checksum, with the config.json beside it.)
run big_hf "$BIN" convert --from run --to big_hf
((STATUS == 0)) || { cat big_hf.log; fail "convert to a Hugging Face directory"; }
"$PY" - big_hf/model.safetensors <<'PY' || fail "doctoring the weights"
import json, struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    t = json.loads(f.read(n))["transformer.h.0.mlp.c_fc.weight"]
    assert t["dtype"] == "F32", t
    f.seek(8 + n + t["data_offsets"][0] + 4 * 5)
    f.write(struct.pack("<f", 70000.0))
PY
run big "$BIN" convert --from big_hf --to big
((STATUS == 0)) || { cat big.log; fail "the doctored weights to a checkpoint"; }
refused 2 "h.0.mlp.c_fc.weight: element 5 is 70000, beyond float16's range" f16_overflow \
  "$BIN" convert --from big --to big_meg --format megatron --dtype float16
[ ! -e big_meg ] || fail "the refused float16 conversion wrote $(ls -R big_meg)"
refused 2 "add --format megatron" tp_without "$BIN" convert --from run --to m4 --tensor-model-parallel-size 2
echo PASS
