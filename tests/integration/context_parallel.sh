#!/usr/bin/env bash
# Context parallel (parallel_config.context_parallel): each sample's positions split over the context
# ranks. Two cores: ulysses_cp (contiguous chunks, an all-to-all to whole heads) and colossalai_cp (ring
# attention: chunks c and 2cp-1-c per rank, key/value blocks passed around the ring, online softmax).
# Every layout trains the same 20 steps as one rank: losses within 1e-5 relative at every step and the
# gathered weights as compare_runs.py checks them.
#  Llama (RoPE at global positions): under each core cp2, cp4, cp2 x mp2 + sp, cp2 x dp2 with ZeRO,
#    cp2 x pp2, grouped-query cp2, cp2 with packed documents and a sliding window (held to one rank's
#    floor under other summation orders, floor_check.py: see the documents below), Mixtral-style MoE
#    (dropless) at cp2 under each core and ring cp2 x ep2 with ZeRO; full recompute
#    bitwise equal to cp2 without; hybrid_cp with ulysses_degree_in_cp 2 (1) bitwise the ulysses_cp
#    (colossalai_cp) run. hybrid_cp between its ends (Ulysses groups of U neighbours, a ring across
#    them): 2 x 2 (cp4, U 2) alone, with full recompute (bitwise equal), GQA, packed documents and a
#    window, MoE, and x mp2 + sp; 4 x 2 (cp8, U 4).
#  GPT-2 (learned positions, unfused core, dropout on the embedding, residuals and probabilities, whose
#    masks are keyed by global position): cp2 under each core, selective recompute bitwise equal;
#    hybrid 2 x 2; held to one rank's floor (floor_check.py, as the documents).
#  The context group's bytes per rank equal the analytic counts of the cores' exchanges.
#  A checkpoint does not depend on the context degree: cp2's step-10 checkpoint (exit_interval 10)
#    resumes at cp1 and one rank's at cp2 (ring), each giving the uninterrupted run's steps 11-20 within 1e-5, and
#    its weights after step 20 as compare_runs.py holds a layout's.
#  Refused before any work (status 2), naming the key: hybrid_cp with a Ulysses degree that does not divide
#    context_parallel, or whose heads do not split over it, ulysses_cp with heads not
#    divisible by model_parallel x context_parallel, a ring whose sequence does not cut into 2 cp chunks,
#    an MoE capacity (it drops by place in the whole sequence).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
random_llama llama.yaml batch=4 samples=16 seq=32 kv=4 theta=10000.0 model="use_flash_attention: True"
random_gpt2 gpt2.yaml seed=7 batch=4 clip= lr=0.002 lr_end=0.0002 optimizer="{type: AdamW, weight_decay: 0.1}" data_seed=3 \
  samples=16 vocab=96 seq=32 hidden=64 model="hidden_dropout_rate: 0.1, attention_dropout_rate: 0.1, use_flash_attention: False"

# cp_ ALGO N: the --set arguments of context parallel N under ALGO (u: ulysses_cp, r: colossalai_cp)
cp_() { local a=ulysses_cp; [ "$1" = r ] && a=colossalai_cp; echo "--set parallel_config.context_parallel=$2 --set parallel_config.context_parallel_algo=$a"; }
# hy_ N U: hybrid_cp over N ranks, Ulysses groups of U
hy_() { echo "--set parallel_config.context_parallel=$1 --set parallel_config.context_parallel_algo=hybrid_cp --set parallel_config.ulysses_degree_in_cp=$2"; }

# ---- Llama -------------------------------------------------------------------------------------
layout_train 1 one llama.yaml
layout_train 1 gqa_one llama.yaml --set model.model_config.n_kv_heads=2 --set model.model_config.use_flash_attention=False
# Packed documents (eod 7: each document's positions from 0, attention inside it, the eod's target
# untrained) and a 12-token sliding window: positions and bounds found over the whole sequence.
DOCS=(--set train_dataset.data_loader.reset_position_ids=True --set train_dataset.data_loader.reset_attention_mask=True
      --set train_dataset.data_loader.eod_mask_loss=True --set train_dataset.data_loader.eod_token_id=7
      --set model.model_config.sliding_window=12)
layout_train 1 docs_one llama.yaml "${DOCS[@]}"
# Its floor: the same run under three other summation orders of what context parallel reorders
# (the unfused core; that with Eigen's GEMMs; each weight gradient's token sum in two partial sums,
# 2 accumulated micro-batches), and each layout held by floor_check.py to max(1e-5, twice the largest
# probe's figure) per tensor, loss and model L2 (tests/integration/context_parallel_rows.sh derives
# the rule). With packed documents and eod_mask_loss an embedding row is trained by few tokens whose
# gradient terms nearly cancel, so AdamW turns rounding into a visible fraction of a step there, and
# which reordering moves it most is luck: on an AMD EPYC with OpenBLAS's Haswell kernels
# (GF_GEMM=blas) the probes reach 1.6e-5 (embed_tokens) and ring cp2 2.0e-5, over the plain 1e-5,
# while their step-1 gradients agree with one rank's within 2 x the probes' 5.8e-7.
layout_train 1 docs_unf llama.yaml "${DOCS[@]}" --set model.model_config.use_flash_attention=False
GF_GEMM=eigen layout_train 1 docs_eu llama.yaml "${DOCS[@]}" --set model.model_config.use_flash_attention=False
layout_train 1 docs_acc llama.yaml "${DOCS[@]}" --set runner_config.batch_size=2 --set runner_config.gradient_accumulation_steps=2
docs_check() { "$PY" "$SRC/tests/integration/floor_check.py" train docs_one docs_unf,docs_eu,docs_acc "$1" || fail "$1"; }
for a in u r; do
  layout_train 2 ${a}_cp2 llama.yaml $(cp_ $a 2)
  layout_train 4 ${a}_cp4 llama.yaml $(cp_ $a 4)
  layout_train 4 ${a}_cp2_mp2_sp llama.yaml $(cp_ $a 2) --set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=True
  layout_train 4 ${a}_cp2_dp2_zero llama.yaml $(cp_ $a 2) --set parallel_config.data_parallel=2 --set runner_config.batch_size=2 \
    --set parallel.enable_parallel_optimizer=True
  layout_train 4 ${a}_cp2_pp2 llama.yaml $(cp_ $a 2) --set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 \
    --set runner_config.batch_size=2
  layout_train 2 ${a}_cp2_recompute llama.yaml $(cp_ $a 2) --set recompute_config.recompute=True
  same_bits ${a}_cp2 ${a}_cp2_recompute
  # Grouped-query attention (4 heads on 2 key/value heads): under Ulysses each rank holds 2 heads on 1 kv head.
  layout_train 2 ${a}_gqa_cp2 llama.yaml $(cp_ $a 2) --set model.model_config.n_kv_heads=2 --set model.model_config.use_flash_attention=False
  layout_train 2 ${a}_docs_cp2 llama.yaml $(cp_ $a 2) "${DOCS[@]}"
  "$PY" "$SRC/tests/integration/compare_runs.py" one ${a}_cp2 ${a}_cp4 ${a}_cp2_mp2_sp ${a}_cp2_dp2_zero ${a}_cp2_pp2
  "$PY" "$SRC/tests/integration/compare_runs.py" gqa_one ${a}_gqa_cp2
  docs_check ${a}_docs_cp2
done
# The context group's bytes (resources.json) are the exchanges' analytic counts, per rank, for 20 steps of
# 2 layers (B 4, T 32, 4 heads of 16, q|k|v 192 floats a row, attention output 64), with N ranks in all,
# U in a Ulysses group and R = N / U in a ring:
#  ring: per layer (R-1) key|value blocks forward, (R-1) blocks and R gradient blocks backward, each
#    B T U / N rows of 128 / U floats (the Ulysses group's rows, 1 / U of the heads);
#  Ulysses: per layer q|k|v and the output forward, the output gradient, the output and the q|k|v
#    gradient backward, each sending (U-1)/U of its B T/N rows to the other ranks of its group.
check_bytes() {
"$PY" - "$@" <<'PY'
import json, sys
for d in sys.argv[1:]:
    algo, N = d[0], int(d.split("_cp")[1].split("_")[0])
    U = {"r": 1, "u": N, "h": int(d.split("_u")[1]) if "_u" in d else 2}[algo]
    R, rows = N // U, 4 * 32 // N
    per_layer = (3 * R - 2) * rows * U * 128 // U if R > 1 else 0
    per_layer += rows * (U - 1) // U * (2 * 192 + 3 * 64)
    want = 20 * 2 * per_layer * 4
    got = {r["cp_bytes_sent"] for r in json.load(open(d + "/resources.json"))["ranks"]}
    assert got == {want}, f"{d}: context group sent {sorted(got)} bytes per rank, the exchanges count {want}"
    print(f"{d}: {want} bytes per rank in the context group, as counted")
PY
}
check_bytes u_cp2 u_cp4 r_cp2 r_cp4
HY="--set parallel_config.context_parallel=2 --set parallel_config.context_parallel_algo=hybrid_cp"
layout_train 2 hybrid_u2 llama.yaml $HY --set parallel_config.ulysses_degree_in_cp=2
layout_train 2 hybrid_u1 llama.yaml $HY --set parallel_config.ulysses_degree_in_cp=1
same_bits u_cp2 hybrid_u2
same_bits r_cp2 hybrid_u1
# hybrid_cp between its ends: Ulysses groups of U neighbouring ranks, a ring of cp / U across them.
layout_train 4 h_cp4 llama.yaml $(hy_ 4 2)
layout_train 8 h_cp8_u4 llama.yaml $(hy_ 8 4)
layout_train 8 h_cp4_mp2_sp llama.yaml $(hy_ 4 2) --set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=True
layout_train 4 h_cp4_recompute llama.yaml $(hy_ 4 2) --set recompute_config.recompute=True
same_bits h_cp4 h_cp4_recompute
layout_train 4 h_gqa_cp4 llama.yaml $(hy_ 4 2) --set model.model_config.n_kv_heads=2 --set model.model_config.use_flash_attention=False
layout_train 4 h_docs_cp4 llama.yaml $(hy_ 4 2) "${DOCS[@]}"
"$PY" "$SRC/tests/integration/compare_runs.py" one h_cp4 h_cp8_u4 h_cp4_mp2_sp
"$PY" "$SRC/tests/integration/compare_runs.py" gqa_one h_gqa_cp4
docs_check h_docs_cp4
grep -q "context_parallel=4 (hybrid_cp: Ulysses 2 x ring 2)" h_cp4.log && grep -q "context_parallel=2 (ulysses_cp)" u_cp2.log || fail "the layout line does not name hybrid_cp's degrees"
grep -q "context_parallel=2" u_cp2_mp2_sp.log || fail "the layout line does not name context_parallel"
check_bytes h_cp4 h_cp8_u4

# ---- Mixtral-style MoE (dropless, 4 experts top-2, balancing and z losses): each sequence's
# balancing loss from its whole counts (summed over the context group), expert gradients over the
# expert-data x context ranks; with expert parallel and ZeRO too.
MOE=(--set moe_config.expert_num=4 --set moe_config.num_experts_chosen=2 --set moe_config.aux_loss_factor=0.05
     --set moe_config.z_loss_factor=0.001 --set moe_config.capacity_factor=-1)
layout_train 1 moe_one llama.yaml "${MOE[@]}"
layout_train 2 moe_r_cp2 llama.yaml $(cp_ r 2) "${MOE[@]}"
layout_train 2 moe_u_cp2 llama.yaml $(cp_ u 2) "${MOE[@]}"
layout_train 4 moe_r_cp2_ep2_zero llama.yaml $(cp_ r 2) "${MOE[@]}" --set parallel_config.data_parallel=2 \
  --set parallel_config.expert_parallel=2 --set runner_config.batch_size=2 --set parallel.enable_parallel_optimizer=True
layout_train 4 moe_h_cp4 llama.yaml $(hy_ 4 2) "${MOE[@]}"
"$PY" "$SRC/tests/integration/compare_runs.py" moe_one moe_r_cp2 moe_u_cp2 moe_r_cp2_ep2_zero moe_h_cp4

# ---- GPT-2: learned positions, unfused core, dropout ------------------------------------------------
layout_train 1 g_one gpt2.yaml
# Held to its floor as the documents are (floor_check.py; probes: the fused core, that with Eigen's
# GEMMs, 2 accumulated micro-batches). Dropout makes the weights' figures a lottery too: on the EPYC
# with OpenBLAS's Haswell kernels (GF_GEMM=blas) the probes reach 1.0e-5 (h.0.mlp.c_proj) and the
# layouts 7.1e-6 - 1.5e-5, while every layout's step-1 gradients agree with one rank's within 2 x the
# probes' 5.1e-7.
layout_train 1 g_fl gpt2.yaml --set model.model_config.use_flash_attention=True
GF_GEMM=eigen layout_train 1 g_eu gpt2.yaml --set model.model_config.use_flash_attention=True
layout_train 1 g_acc gpt2.yaml --set runner_config.batch_size=2 --set runner_config.gradient_accumulation_steps=2
for a in u r; do
  layout_train 2 g_${a}_cp2 gpt2.yaml $(cp_ $a 2)
  layout_train 2 g_${a}_cp2_sel gpt2.yaml $(cp_ $a 2) --set recompute_config.select_recompute=True
  same_bits g_${a}_cp2 g_${a}_cp2_sel
done
layout_train 4 g_h_cp4 gpt2.yaml $(hy_ 4 2)
"$PY" "$SRC/tests/integration/floor_check.py" train g_one g_fl,g_eu,g_acc g_u_cp2,g_r_cp2,g_h_cp4 || fail "GPT-2 layouts"

# ---- checkpoints across context degrees --------------------------------------------------------------
CK=(--set callbacks='[{type: MFLossMonitor, per_print_times: 1}, {type: CheckpointMonitor, prefix: cp, save_checkpoint_steps: 10}]')
layout_train 2 ck_cp2 llama.yaml $(cp_ u 2) "${CK[@]}" --set runner_config.exit_interval=10
layout_train 1 ck_one llama.yaml "${CK[@]}" --set runner_config.exit_interval=10
layout_train 1 res_cp1 llama.yaml --set load_checkpoint="$WORK/ck_cp2/checkpoint" --set resume_training=True
layout_train 2 res_cp2 llama.yaml $(cp_ r 2) --set load_checkpoint="$WORK/ck_one/checkpoint" --set resume_training=True
close_after 10 1e-5 one res_cp1 res_cp2
# ... and their weights after step 20 as compare_runs.py holds a layout's (it compares a resumed run's logged steps).
"$PY" "$SRC/tests/integration/compare_runs.py" one res_cp1 res_cp2 || fail "a resumed run's weights differ"

# ---- refusals -----------------------------------------------------------------------------------------
mpi_refused 4 hybrid 'ulysses_degree_in_cp: 3`: the Ulysses degree must divide context_parallel' llama.yaml $(hy_ 4 3)
mpi_refused 4 hybrid_heads 'model_parallel` x `ulysses_degree_in_cp' llama.yaml $(hy_ 4 2) --set model.model_config.n_kv_heads=1 \
  --set model.model_config.use_flash_attention=False
mpi_refused 4 heads 'model_parallel` x `context_parallel' llama.yaml $(cp_ u 4) --set model.model_config.n_kv_heads=2
mpi_refused 4 chunks '2 x `parallel_config.context_parallel' llama.yaml $(cp_ r 4) --set model.model_config.seq_length=36
mpi_refused 2 capacity "capacity_factor" llama.yaml $(cp_ r 2) --set moe_config.expert_num=4 --set moe_config.capacity_factor=1.5
echo "PASS"
