#!/usr/bin/env bash
# Context parallel at long rows (seq_length 256: every key tile of the fused and the ring cores is
# 64-128 keys wide, so their vectorised paths and the ring's cross-block online softmax all run),
# fp32 and bf16, held to a bound derived from one rank's own spread. A 2-layer, 64-wide Llama
# (4 heads of 16, fused core), batch 2 x 256, 10 AdamW steps, one thread per rank.
#
# What cp changes. Ring (colossalai_cp) and Ulysses (ulysses_cp) compute the same function as one
# rank; only the order of fp32 sums moves: (a) the attention core's (the ring's online softmax over
# other key blocks, maxima found in another order, dq/dk/dv accumulated block by block; Ulysses runs
# the fused core itself on whole heads) and (b) every weight gradient's sum over tokens, now P
# partial sums (one per context rank) added by the all-reduce, and the loss's sum likewise.
#
# The yardstick (the bound, derived). One rank against itself under other summation orders of the
# same kinds, four probes, each an established floor of compare_runs.py's docstring or the
# attention core's counterpart:
#   unf: the unfused attention core (use_flash_attention False: softmax normalised before P V,
#        no online rescaling): another fp32 order of (a);
#   eu:  that, and every fp32 product on the other GEMM backend (GF_GEMM=eigen): (a) and (b);
#   e:   every fp32 product on the other GEMM backend (GF_GEMM=eigen), the fused core: (b), and the
#        products inside (a);
#   acc: 2 micro-batches of 1 sample accumulated (gradient_accumulation_steps 2): each weight
#        gradient's token sum in two partial sums, as cp2 makes it: (b).
# For each figure compare_runs.py defines (step loss relative; per tensor ||a - b|| /
# max(||a||, sqrt(n) B), B the sum of the logged lr; the whole model's L2 relative) the floor F is
# the largest over the probes, and a layout is held to max(1e-5, 2 F): two independent reorderings,
# the layout's and the probe's, as compare_runs.py --floor holds one (there: one probe; here the
# largest of four, because a single probe is one draw of a lottery, see below). In fp32 every loss
# and L2 figure of the probes is ~1e-8 / ~1e-6, so those stay at compare_runs.py's 1e-5.
#
# Why one probe is not enough, and why 1e-5 alone fails at this length (measured here, AMD EPYC,
# OpenBLAS Haswell kernels, the vectorised ring kernel): each tensor's figure is set by a single
# element whose gradient sums nearly cancel at some step, so that its rounding is a large fraction of
# it and AdamW (dividing by the element's own magnitude) turns that into a fraction of a step, and
# which reordering hits it hardest is a lottery. At seed 11: layers.0.self_attn.o_proj.weight, its
# element [1192] 74-99% of the difference in every run: unf 3.5e-6, Eigen GEMMs alone 5.3e-7, eu
# 1.8e-5, acc 1.2e-5; ring cp2 1.5e-6, Ulysses cp2 1.2e-5, ring cp4 3.1e-6, Ulysses cp4 3.1e-6.
# layers.0.mlp.down_proj.weight, element [858] 99%: unf 9.7e-7, eu 1.5e-5, ring cp2 1.2e-5. One
# rank is already 1.8e-5 from itself, so 1e-5 is no bound here; the unfused core alone as the floor
# (F 3.5e-6) would fail Ulysses, whose core is exactly one rank's. Seeds 1-4 (the test run with
# another `seed`) all pass: one-rank probes up to 5.8e-5 (seed 1, v_proj), layouts up to 4.3e-5
# (Ulysses cp2, seed 1) on the same tensor; the tightest figure of any check 0.86 of its allowance.
#
# The fourth probe (e) came with the vectorised SwiGLU (core/ops/swiglu.cpp: Eigen's exp in place of
# std::exp, the last bits of Llama's MLP moved). With three probes (unf, eu, acc) the test then failed:
# Ulysses cp2 1.2e-5, ring cp4 1.7e-5, Ulysses cp4 1.4e-5 against an allowance of 1e-5, all on
# layers.0.self_attn.o_proj.weight, element [1192] 99% of each. Those layout figures were what the
# binary before the change gave (1.7e-5, 1.9e-5, 1.3e-5, the same element; it passed); what moved
# was the probes' draw: eu 1.3e-5 -> 4.0e-6, unf 5.2e-6 -> 1.8e-6. One rank against itself, the
# same element, after the change (Xeon, OpenBLAS Cooperlake kernels): Eigen GEMMs alone 1.5e-5,
# eu with acc 1.2e-5 (before: 5.7e-6 and 2.4e-5). So one rank's own spread on that element is
# 1.2-2.4e-5 under either binary, and three draws had not sampled it; e is the GEMM-backend
# reordering apart from the core's, the one factor of eu that had no probe of its own. The allowances
# it raises: after the change layers.0.self_attn.o_proj 1e-5 -> 3.0e-5 and layers.1's 1e-5 -> 1.2e-5;
# before it layers.0.mlp.down_proj 1e-5 -> 1.04e-5; no bf16 figure's tightest ratio moved (b_r2 0.70,
# b_u2 0.30 with and without it). The fp32 10-step figures are then at most 0.56 of their allowances
# after the change and 0.87 before. The fp32 bugs injected below are 700 x and more beyond the old allowances,
# which grew by 3x at most.
#
# Gradients first, without AdamW (step 1). One step with optimizer eps 1e6, lr 1e9, no decay,
# no clipping makes the update 1e3 g to 1 part in 1e6, so (w1 - w0) / 1e3 is each tensor's gradient
# with ~1e-7 resolution. Every layout's step-1 gradient is held, tensor by tensor, to 2 x the largest
# probe figure (no 1e-5 here: all are ~1e-7 - 1e-6). Measured at seed 11: probes up to 7.1e-7,
# layouts up to 7.2e-7 (relative, per tensor; worst the RMSNorm gains); at most 0.56 of the allowance.
# This is the direct statement that cp's sums are one rank's up to rounding: a wrong sum is off
# by orders of magnitude here, with no optimizer in between.
#
# bf16 (model.model_config.compute_dtype bfloat16): q, k, v and every product's inputs rounded to
# bf16, attention cores, softmax and accumulations in fp32. cp again changes only fp32 summation
# orders; the next bf16 rounding turns a one-ulp fp32 change into a 2^-8 change of the element
# whenever it crosses a rounding boundary, and it does so alike for a layout's reordering and for a
# probe's, so the one-rank bf16 run against itself under the same probes is the yardstick, with
# the same rule (max(1e-5, 2 F) per figure, F the largest probe). Measured at seed 11: bf16 probes
# loss 2.8e-6 (acc) - 1.1e-5 (eu), tensors up to 3.5e-3 (unf, layers.0.mlp.up_proj), model L2
# 6.1e-4; ring cp2 loss 6.4e-6, tensors 4.5e-3 (the same up_proj), L2 7.1e-4, its tightest figure
# 0.74 of its allowance; Ulysses cp2 loss 7.9e-6, tensors 4.2e-4, L2 9.0e-5. (With the scalar-exp
# ring kernel before it, ring cp2 was at 9.9e-4: which reordering lands where is the lottery above.)
# No fp32 tolerance is loosened: the fp32 checks above stand as they are, and 1e-5 is the least
# any figure is allowed. Each probe figure has a ceiling (floor_check.py's CEILINGS): past it the probe is named
# as wrong instead of widening an allowance; the fp32 loss and model L2 are never floored (held to 1e-5);
# tests/integration/proof_faults.sh shows both failing.
#
# It fails on real bugs (injected into core/ops/ring_attention.cpp, then its scalar-exp version,
# measured, not committed), ring cp2:
#  - a wrong reduction, dK of each tile overwritten instead of accumulated (beta 0 in its product):
#    step-1 gradient of layers.1.self_attn.k_proj 0.90 relative (7.5e5 x its allowance); 10 steps fp32
#    k_proj 0.41 (4.1e4 x), bf16 0.41 (102 x). (The step losses alone moved only 2.6e-5 / 4.6e-5.)
#  - the online softmax's rescale of the running output forgotten when a later block raises a row's
#    maximum: step-1 gradients 5.4e-3 (5.1e3 x, layers.1.self_attn.o_proj); 10 steps fp32 7.9e-3
#    (the tightest figure 700 x its allowance); bf16 7.7e-3, 4.8 x (the bf16 case is the coarse one).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
unset GF_GEMM
random_llama llama.yaml steps=10 batch=2 samples=16 seq=256 kv=4 theta=10000.0 model="use_flash_attention: True"

# cp_ ALGO N: the --set arguments of context parallel N under ALGO (u: ulysses_cp, r: colossalai_cp)
cp_() { local a=ulysses_cp; [ "$1" = r ] && a=colossalai_cp; echo "--set parallel_config.context_parallel=$2 --set parallel_config.context_parallel_algo=$a"; }
# probes PREFIX [--set ...]: the reference PREFIXone and its four reorderings PREFIXunf, PREFIXe, PREFIXeu, PREFIXacc.
probes() {
  local p=$1; shift
  layout_train 1 ${p}one llama.yaml "$@"
  layout_train 1 ${p}unf llama.yaml "$@" --set model.model_config.use_flash_attention=False
  GF_GEMM=eigen layout_train 1 ${p}e llama.yaml "$@"
  GF_GEMM=eigen layout_train 1 ${p}eu llama.yaml "$@" --set model.model_config.use_flash_attention=False
  layout_train 1 ${p}acc llama.yaml "$@" --set runner_config.batch_size=1 --set runner_config.gradient_accumulation_steps=2
}

check() { "$PY" "$SRC/tests/integration/floor_check.py" "$@"; }

# ---- step-1 gradients, fp32 -----------------------------------------------------------------------
G=(--set runner_config.train_steps=1 --set runner_wrapper.use_clip_grad=False --set optimizer.weight_decay=0.0
   --set optimizer.eps=1.0e6 --set lr_schedule.type=constant --set lr_schedule.learning_rate=1.0e9
   --set lr_schedule.warmup_steps=0)
layout_train 1 g_w0 llama.yaml "${G[@]}" --set lr_schedule.learning_rate=0.0
probes g_ "${G[@]}"
for a in r u; do for n in 2 4; do layout_train $n g_${a}${n} llama.yaml "${G[@]}" $(cp_ $a $n); done; done
check grad g_one g_unf,g_e,g_eu,g_acc g_r2,g_u2,g_r4,g_u4 g_w0

# ---- 10 steps, fp32 ----------------------------------------------------------------------------------
probes ""
for a in r u; do for n in 2 4; do layout_train $n ${a}${n} llama.yaml $(cp_ $a $n); done; done
check train one unf,e,eu,acc r2,u2,r4,u4

# ---- 10 steps, bf16 ----------------------------------------------------------------------------------
BF=(--set model.model_config.compute_dtype=bfloat16)
probes b_ "${BF[@]}"
for a in r u; do layout_train 2 b_${a}2 llama.yaml "${BF[@]}" $(cp_ $a 2); done
check train-bf16 b_one b_unf,b_e,b_eu,b_acc b_r2,b_u2
grep -q '"compute_dtype":"bfloat16"' b_r2/metrics.jsonl || fail "b_r2 did not run in bfloat16"
echo "PASS"
