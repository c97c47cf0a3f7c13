#!/usr/bin/env bash
# Today's Llama-like families from their Hugging Face config.json under every layout: Llama 3.2's shape
# (llama3 RoPE scaling, tied embeddings, heads wider than hidden_size / num_heads), Qwen2.5's (q/k/v biases)
# Qwen3's (q_norm / k_norm, head_dim x heads != hidden_size), Qwen3-MoE's (4 experts of their own width, top-2
# renormalised), Qwen2-MoE's (top-2 not renormalised, a shared expert under a sigmoid gate) and Gemma 3's (local
# layers with a window of 8 and their own RoPE base beside a global one, four (1 + w) norms per layer, GeGLU, a scaled
# embedding) and DeepSeek-V2-Lite's (multi-head latent attention with yarn RoPE, a dense first layer, then 4 experts
# top-2 beside an ungated shared expert) and DeepSeek-V3's (a query latent, sigmoid routing over groups with the
# aux-loss-free expert bias), each from
# tests/golden/families/FAMILY/config.json through `gridformer config --from-hf`. Per
# family, 10 steps from the same random start (the MoE one also at dp2 x ep2 and dp2 x ep2 x mp2 + sp):
#   dp2, mp2 + sequence parallel (vocabulary split), cp2 ring (colossalai_cp) and Ulysses, dp2 ZeRO-1/2/3,
#   one rank accumulating two micro-batches and pp2 (1F1B): losses within 1e-5 relative of one rank at every
#   step, gathered weights as compare_runs.py holds them; pp2 ZB-H1 bitwise 1F1B;
#   full recompute: bitwise the losses and weights of no recompute (fp32 and bf16);
#   bf16 under dp2: step 1 within 1e-5 of one bf16 rank (the forward is each sample's alone; later steps
#   carry fp32 summation orders through bf16 rounding, which compare_runs' fp32 bound does not cover).
# Then import -> export -> import: `convert --to hf` of a trained checkpoint writes the family's config.json,
# which reads back as the same model (config --from-hf gives the same YAML), and its weights load back bitwise.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_python yaml
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
# Every run's fp32 products on OpenBLAS unless a probe names another backend. `train` would otherwise take the
# machine probe's fastest, and on an AVX2-only EPYC OpenBLAS and oneDNN are within 2% of each other, so the reference
# changed from one probe to the next; and with oneDNN's products as the reference Gemma 3's layouts land at
# 1.05-1.7e-5 there (mp2 + sp on layer 3's up_proj, ring cp2 on layer 0's q_norm) with no probe reaching those tensors,
# an open item of the Proof issue: the floors do not yet cover every backend's reordering on every machine.
export GF_GEMM=blas

GLOBAL_BATCH=4
base() {  # FAMILY FILE: the model section of FAMILY's config.json over a tiny run of random tokens
  local fam=$1 out=$2 lr=0.003
  # Gemma 3 at lr 1e-3: at 3e-3 its ten steps turn rounding into weight differences past the 1e-5 criteria for one
  # rank against itself (the same run on the other GEMM backend: model L2 2.3e-5, the fused core 4.7e-5, where the
  # other families stay below 3e-6): each sublayer's output norm makes its weights' scale free, so AdamW's fixed-size
  # steps (about 15% of a row's norm per step at 3e-3) rotate them fast and the trajectory amplifies any reordering.
  # At 1e-3 one rank agrees with itself within them (the probes' figures below) and so must every layout.
  [ "$fam" = gemma3 ] && lr=${GEMMA_LR:-0.001}
  # Qwen3 at lr 3e-4, for the same reason: q_norm and k_norm normalise each head of q and k, so q_proj's and k_proj's
  # rows have a free scale, and AdamW's fixed-size steps rotate them; ten steps at 3e-3 amplify a reordering into
  # layer 1's q_proj by chance (an AVX2-only EPYC: mp2 + sp 2.7e-5 and cp2 ring 1.2e-5 of max(||a||, sqrt(n) B) on
  # oneDNN's products, while the probes, whose own reorderings missed that tensor there, stayed under 9e-6; on
  # OpenBLAS's the probes themselves moved it by 3.7e-5), though the layouts' step-1 gradients agree with one rank's
  # within 2 x the probes' (mp2 + sp 7.7e-7, ring 8.6e-7, probes 7.1e-7: the step-1 check below). The figure scales
  # with lr (mp2 + sp on oneDNN: 2.7e-5, 8.6e-6, 4.4e-6, 2.7e-6 at 3e-3, 1e-3, 5e-4, 3e-4); at 3e-4 every layout stays
  # under 6.1e-6 on all three GEMM backends. A wrong reduction still moves the weights by a share of lr x steps.
  # Qwen3-MoE has the same q_norm and k_norm: at 3e-3 mp2 + sp moved layer 1's k_proj by 2.1e-5 (OpenBLAS's Zen kernels).
  [[ "$fam" = qwen3 || "$fam" = qwen3_moe ]] && lr=${QWEN3_LR:-0.0003}
  # DeepSeek-V2-Lite on the data of seed 5: at step 9 one rank's group choice for a token is an exact tie (margin 0,
  # compare_runs.py's nearest_tie), which every layout but dp2 resolved the other way. Seed 6's nearest choice is
  # 2.6e-5 from a tie, 26 times the most any layout in the suite moved a run's nearest choice (1.0e-6). Of seeds 6-16
  # (an EPYC, OpenBLAS): 7, 8, 9, 13 and 14 keep theirs over 5e-6 and pass too; 11, 12, 15 and 16 have one within
  # 1.3e-6 to 4.4e-6; 10's ten steps amplify rounding with every choice clear of a tie (one rank on the other GEMM
  # backend moves an expert's down_proj by 2.4e-4, past the floor's ceiling): no seed to prove layouts with.
  local data_seed=5
  [ "$fam" = deepseek_v2_lite ] && data_seed=6
  "$BIN" config --from-hf "$SRC/tests/golden/families/$fam" > "$fam.model.yaml" 2> "$fam.from_hf.err" \
    || { cat "$fam.from_hf.err"; fail "$fam: config --from-hf failed"; }
  "$PY" - "$fam.model.yaml" "$out" "$lr" "$data_seed" <<'EOF'
import sys, yaml
model = yaml.safe_load(open(sys.argv[1]))
run = yaml.safe_load("""
seed: 7
runner_config: {train_steps: 10}
runner_wrapper: {use_clip_grad: True, max_grad_norm: 1.0}
lr_schedule: {type: cosine, learning_rate: 0.003, lr_end: 0.0003, warmup_steps: 2}
optimizer: {type: AdamW, beta1: 0.9, beta2: 0.95, weight_decay: 0.1}
train_dataset: {data_loader: {type: RandomTokens, seed: 5, num_samples: 8}}
callbacks: [{type: MFLossMonitor, per_print_times: 1}]
""")
run.update(model)
run["model"]["model_config"]["seq_length"] = 32
run["lr_schedule"]["learning_rate"] = float(sys.argv[3])
run["lr_schedule"]["lr_end"] = float(sys.argv[3]) / 10
run["train_dataset"]["data_loader"]["seed"] = int(sys.argv[4])
yaml.safe_dump(run, open(sys.argv[2], "w"), sort_keys=False)
EOF
}

# fam_train FAMILY NAME NP [--set ...]: a run of NAME on NP ranks, global batch GLOBAL_BATCH (batch_size = GLOBAL_BATCH /
# (data_parallel x micro_batch_num x gradient_accumulation_steps)), weights saved.
fam_train() {
  local fam=$1 name=$2 np=$3; shift 3
  local split=1 a
  for a in "$@"; do
    case "$a" in
      parallel_config.data_parallel=* | parallel_config.micro_batch_num=* | runner_config.gradient_accumulation_steps=*)
        split=$((split * ${a#*=})) ;;
    esac
  done
  local args=(--save-weights "$fam.$name/weights.safetensors" --set runner_config.batch_size=$((GLOBAL_BATCH / split)) "$@")
  if ((np == 1)); then train "$fam.$name" "$fam.yaml" "${args[@]}"
  else mpi_train "$np" "$fam.$name" "$fam.yaml" "${args[@]}"
  fi
}

S=--set
DP2=($S parallel_config.data_parallel=2)
MP2SP=($S parallel_config.model_parallel=2 $S parallel_config.use_seq_parallel=True $S parallel_config.vocab_emb_dp=False)
PP2=($S parallel_config.pipeline_stage=2 $S parallel_config.micro_batch_num=2)
# FAMILIES: a subset to run (all by default).
for fam in ${FAMILIES:-llama qwen2 qwen3 qwen3_moe qwen2_moe gemma3 deepseek_v2_lite deepseek_v3}; do
  base "$fam" "$fam.yaml"
  fam_train $fam one 1
  fam_train $fam dp2 2 "${DP2[@]}"
  mp=($fam.mp2_sp)
  fam_train $fam mp2_sp 2 "${MP2SP[@]}"
  # A pipeline runs micro-batches, as one rank accumulating two does; with the embedding tied, the first and last
  # stages' copies add their gradients in another order than one rank, so both are held to one rank within 1e-5,
  # and ZB-H1 to 1F1B bitwise.
  fam_train $fam acc2 1 $S runner_config.gradient_accumulation_steps=2
  fam_train $fam pp2 2 "${PP2[@]}"
  fam_train $fam pp2_zbh1 2 "${PP2[@]}" $S parallel.pipeline_config.pipeline_scheduler=zbh1
  same_losses $fam.pp2 $fam.pp2_zbh1
  cmp -s $fam.pp2/weights.safetensors $fam.pp2_zbh1/weights.safetensors || fail "$fam: ZB-H1's weights differ from 1F1B's"
  fam_train $fam cp2_ring 2 $S parallel_config.context_parallel=2 $S parallel_config.context_parallel_algo=colossalai_cp
  fam_train $fam cp2_ulysses 2 $S parallel_config.context_parallel=2 $S parallel_config.context_parallel_algo=ulysses_cp
  for z in 1 2 3; do fam_train $fam dp2_zero$z 2 "${DP2[@]}" $S parallel.zero_stage=$z; done
  ep=()
  if [[ $fam == *moe* || $fam == deepseek* ]]; then  # experts split over 2 ranks, and over 2 ranks with tensor parallel on top (4 ranks)
    fam_train $fam dp2_ep2 2 "${DP2[@]}" $S parallel_config.expert_parallel=2
    ep=($fam.dp2_ep2)
    if ((${#mp[@]})); then
      fam_train $fam dp2_ep2_mp2_sp 4 "${DP2[@]}" $S parallel_config.expert_parallel=2 "${MP2SP[@]}"
      ep+=($fam.dp2_ep2_mp2_sp)
    fi
  fi
  # compare_runs.py --rope: a key bias in rotary pairs that hardly turn over the sequence is held by the model's L2
  # norm alone (its docstring says why).
  rope=$("$PY" -c "import json; c = json.load(open('$SRC/tests/golden/families/$fam/config.json'))
print(f\"{c['rope_theta']},{c.get('head_dim') or c['hidden_size'] // c['num_attention_heads']},32\")")
  # --floor: one rank's own spread, the same run with every fp32 product on the other GEMM backend (GF_GEMM=eigen),
  # with each weight gradient's token sum in two pieces (acc2), and with the attention core's sums in the fused
  # core's order (tiles, online softmax: the reordering ring attention's chunks make too); each tensor held to
  # max(1e-5, twice the largest). Gemma 3 shows why the third: the step-1 gradient of its layer-1 k_proj element 1772
  # is ~1e-6 of the tensor's scale, so AdamW (lr g / (|g| + eps)) turns any reordering of the attention's backward
  # into a visible part of an update: after one step the fused core moves it by 1.2e-4, ring cp2 by 1.3e-4, the
  # GEMM and token-split probes by 3e-6 and 2e-6.
  # The GEMM probe on both other backends (the reference's products are OpenBLAS's, GF_GEMM above): one backend's
  # reordering may miss a tensor another's moves (an AVX2-only EPYC: DeepSeek-V3's mp2 + sp moved layer 1's expert 5
  # down_proj by 1.2e-5 where the Eigen probe did not reach it and the oneDNN one moved it by 7.6e-6).
  GF_GEMM=eigen fam_train $fam eigen 1
  GF_GEMM=onednn fam_train $fam gemm_onednn 1
  fam_train $fam fused 1 $S model.model_config.use_flash_attention=True
  "$PY" "$SRC/tests/integration/compare_runs.py" $fam.one --rope=$rope --floor=$fam.eigen,$fam.gemm_onednn,$fam.acc2,$fam.fused \
    $fam.dp2 "${mp[@]}" $fam.acc2 $fam.pp2 $fam.cp2_ring \
    $fam.cp2_ulysses $fam.dp2_zero1 $fam.dp2_zero2 $fam.dp2_zero3 "${ep[@]}" || fail "$fam: a layout differs from one rank"
  ok "$fam: dp2,${mp:+ mp2+sp,} accumulation, pp2 (ZB-H1 bitwise 1F1B), cp2 ring and Ulysses, ZeRO 1-3${ep:+, ep2}${mp:+${ep:+, ep2 x mp2+sp}} within 1e-5 of one rank"
  if [ "$fam" = qwen3 ]; then
    # Why Qwen3's lr is low (base above): the layouts' step-1 gradients (w1 - w0 under lr 1e9 and eps 1e6: lr g / eps)
    # agree with one rank's within twice the probes' (floor_check.py grad): they compute the same gradient, and only
    # ten AdamW steps at a high lr amplify its rounding.
    G=($S runner_config.train_steps=1 $S runner_wrapper.use_clip_grad=False $S optimizer.weight_decay=0.0
       $S optimizer.eps=1.0e6 $S lr_schedule.type=constant $S lr_schedule.learning_rate=1.0e9 $S lr_schedule.warmup_steps=0)
    fam_train $fam g_w0 1 "${G[@]}" $S lr_schedule.learning_rate=0.0
    fam_train $fam g_one 1 "${G[@]}"
    GF_GEMM=eigen fam_train $fam g_eigen 1 "${G[@]}"
    fam_train $fam g_acc2 1 "${G[@]}" $S runner_config.gradient_accumulation_steps=2
    fam_train $fam g_fused 1 "${G[@]}" $S model.model_config.use_flash_attention=True
    fam_train $fam g_mp2_sp 2 "${G[@]}" "${MP2SP[@]}"
    fam_train $fam g_cp2_ring 2 "${G[@]}" $S parallel_config.context_parallel=2 $S parallel_config.context_parallel_algo=colossalai_cp
    PYTHONPATH="$SRC/tests/integration" "$PY" "$SRC/tests/integration/floor_check.py" grad $fam.g_one \
      $fam.g_eigen,$fam.g_acc2,$fam.g_fused $fam.g_mp2_sp,$fam.g_cp2_ring $fam.g_w0 || fail "$fam: a layout's step-1 gradient"
  fi

  fam_train $fam recompute 1 $S recompute_config.recompute=True
  same_losses $fam.one $fam.recompute
  cmp -s $fam.one/weights.safetensors $fam.recompute/weights.safetensors || fail "$fam: recompute changed the weights"
  BF=($S model.model_config.compute_dtype=bfloat16)
  fam_train $fam bf16 1 "${BF[@]}"
  fam_train $fam bf16_recompute 1 "${BF[@]}" $S recompute_config.recompute=True
  same_losses $fam.bf16 $fam.bf16_recompute
  cmp -s $fam.bf16/weights.safetensors $fam.bf16_recompute/weights.safetensors || fail "$fam: bf16 recompute changed the weights"
  fam_train $fam bf16_dp2 2 "${BF[@]}" "${DP2[@]}"
  a=$(losses $fam.bf16 | sed -n 1p); b=$(losses $fam.bf16_dp2 | sed -n 1p)
  "$PY" -c "import sys; a, b = float('${a#* }'), float('${b#* }'); sys.exit(abs(a - b) > 1e-5 * abs(a))" \
    || fail "$fam: bf16 step 1 on one rank $a, dp2 $b"
  ok "$fam: recompute bitwise (fp32, bf16); bf16 dp2 step 1 ${b#* } vs one rank ${a#* }"

  # Import -> export -> import: the exported directory's config.json is the family's and reads back as the
  # same model section; the exported weights load back bitwise.
  train $fam.saved "$fam.yaml" $S runner_config.train_steps=2 $S runner_config.batch_size=$GLOBAL_BATCH \
    --save-weights "$fam.saved/weights.safetensors"
  [ -s "$fam.saved/config.json" ] || fail "$fam: --save-weights wrote no config.json beside the weights"
  run "$fam.export" "$BIN" convert --from "$fam.saved/weights.safetensors" --to "$fam.hf" --format hf
  ((STATUS == 0)) || { tail -20 "$fam.export.log"; fail "$fam: convert --to hf failed"; }
  "$PY" - "$fam" "$fam.hf/config.json" "$SRC/tests/golden/families/$fam/config.json" <<'EOF' || fail "$fam: exported config.json"
import json, sys
fam, out, ref = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
for k in ("model_type", "architectures", "tie_word_embeddings", "head_dim", "num_key_value_heads", "rope_theta"):
    assert out.get(k) == ref.get(k), f"{k}: exported {out.get(k)!r}, the family's {ref.get(k)!r}"
rs, rr = out.get("rope_scaling"), ref.get("rope_scaling")
if rr is None:
    assert rs is None, f"rope_scaling {rs!r}"
else:
    for k, v in rr.items():
        if k == "type":
            continue
        assert rs.get(k) == v, f"rope_scaling.{k}: exported {rs.get(k)!r}, the family's {v!r}"
print(f"{fam}: config.json is {out['architectures'][0]} ({out['model_type']})")
EOF
  "$BIN" config --from-hf "$fam.hf" 2>/dev/null | grep -v '^#' > "$fam.back.yaml"
  diff <(grep -v '^#' "$fam.model.yaml") "$fam.back.yaml" || fail "$fam: the exported config.json reads back otherwise"
  run "$fam.reimport" "$BIN" convert --from "$fam.hf" --to "$fam.back.safetensors"
  ((STATUS == 0)) || { tail -20 "$fam.reimport.log"; fail "$fam: the exported directory does not load back"; }
  cmp -s "$fam.saved/weights.safetensors" "$fam.back.safetensors" || fail "$fam: weights differ after export and import"
  ok "$fam: import -> export -> import bitwise"
done
echo PASS
