// What a block sees while it runs: the tensor-parallel layer (never a communicator), the compute
// dtype, the parameter arena, its gradients and low-precision copy, the micro-batch's sizes and
// step, and the model's shared scratch. Blocks hold arena offsets; the env turns them into
// pointers, so one block object serves every micro-batch slot.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/math/mixed_precision.h"
#include "core/ops/dropout.h"
#include "models/causal_lm.h"
#include "parallel/context_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/tensor_parallel.h"

namespace gf {

// Dropout sites of a layer (the embedding's is layer -1, site 0); with the step, the global
// layer and the global element index they key every mask, so masks do not depend on the layout.
enum DropSite : int64_t { kDropEmbedding = 0, kDropAttnOut = 1, kDropMlpOut = 2, kDropAttnProbs = 3 };

// Context parallel's attention scratch (parallel/context_parallel.h), shared by the layers: q|k|v in
// this rank's rows before the exchange, the exchange's two buffers, the core's output in head-split
// form for backward, and the head-split q|k|v gradient. Null without context parallel.
struct ContextScratch {
  float *local = nullptr, *send = nullptr, *recv = nullptr, *y = nullptr, *dqkv = nullptr;
  RingScratch ring;  // ring attention's blocks and statistics (colossalai_cp)
};

struct BlockEnv {
  const TensorParallel* tp = nullptr;
  const ExpertParallel* ep = nullptr;
  const ContextParallel* cp = nullptr;  // null: one rank on the context axis
  ContextScratch cps;
  ComputeDtype cdt = ComputeDtype::kFloat32;
  float* weights = nullptr;
  float* grads = nullptr;
  const std::byte* low = nullptr;  // the weights' low-precision copy (bf16/fp16 compute)
  // T: the positions of each sample held here (seq_length / context_parallel); N = B T rows.
  int64_t B = 0, T = 0, N = 0, Nl = 0;
  // Tensor-parallel scratch [N, widest row] (null on one rank): gathered rows, partial sums, the
  // full-row input gradient of a column-parallel layer under SP.
  float *gather = nullptr, *partial = nullptr, *dfull = nullptr;
  // [N, q|k|v width]: where RoPE rotates q and k in fp32 before they are rounded into a layer's kept bf16
  // q|k|v (AttentionBlock::keeps_core_bf16; the backward's q|k|v gradient scratch, dead during a forward);
  // null where no layer keeps it so.
  float* qkv_rope = nullptr;
  // MLA's projections' scratch (MlaProjection::scratch_per_row per row; the backward's, dead during a forward,
  // which uses it too); null without MLA.
  float* mla_scratch = nullptr;
  StepInfo info;
  // Documents packed into a sample (ModelConfig::documents): each of the N rows' position (learned
  // table and RoPE) and first visible key (the attention mask); null: row % T and 0.
  const int32_t* positions = nullptr;
  const int32_t* key_lo = nullptr;
  // Windowed layers beside full ones (TransformerSpec::mixed_windows): key_lo holds the windowed layers' bounds,
  // key_lo_full the others' (documents alone; null: causal over the whole prefix).
  const int32_t* key_lo_full = nullptr;
  float grad_scale = 0.0f;  // backward: the loss's gradient scale (the router losses' coefficients)
  // LoRA (models/lora.h): the adapters' arena and its gradients, and [N, 2 r] scratch for their products. The
  // base weights are then frozen: `grads` is null, and no block writes a gradient of them.
  const float* lora_w = nullptr;
  float* lora_g = nullptr;
  float* lora_scratch = nullptr;
  float* lora_drop = nullptr;  // [N, widest adapted input]: the adapters' dropped input (pet_config.lora_dropout)
  bool frozen() const { return grads == nullptr; }

  const float* w(int64_t offset) const { return weights + offset; }
  float* g(int64_t offset) const { return grads ? grads + offset : nullptr; }
  // The weight at `offset` as the products read it (with its low-precision copy under bf16/fp16).
  Weight wt(int64_t offset, bool out_in) const {
    Weight r = cdt == ComputeDtype::kFloat32
                   ? Weight(weights + offset)
                   : Weight(weights + offset, cdt, low + offset * low_copy_element_bytes(cdt));
    r.out_in = out_in;
    return r;
  }
  ops::DropoutKey dropout(int64_t layer, int64_t site, float rate) const {
    ops::DropoutKey k;
    k.rate = info.training ? rate : 0.0f;
    k.seed = 0x6766u;  // fixed salt; the step and the global element index make masks unique
    k.stream = ops::dropout_stream(static_cast<uint64_t>(info.step), static_cast<uint64_t>(layer),
                                   static_cast<uint64_t>(site));
    return k;
  }
  int64_t global_row0() const { return info.sample_offset * T + tp->row_begin(); }
  bool context_parallel() const { return cp != nullptr && cp->on(); }
  // The whole sequence's length (T on every context rank together).
  int64_t seq_full() const { return context_parallel() ? T * cp->size() : T; }
  // Dropout of the residual stream's Nl local rows of `cols`, keyed by each row's global index
  // (sample x seq_full + position), so the masks do not depend on the layout: one run of rows, or
  // under context parallel a run per sample's chunk.
  void dropout_rows(float* x, const ops::DropoutKey& k, int64_t cols) const {
    dropout_row_range(x, k, tp->row_begin(), Nl, cols, 0, cols);
  }
  // The same for rows [r0, r0 + n) of the N rows (a column-parallel layer's gathered input: 0, N), of a block that
  // is columns [col0, col0 + cols) of rows of global_cols (a row-parallel layer's input columns).
  void dropout_row_range(float* x, const ops::DropoutKey& k, int64_t r0, int64_t n, int64_t cols, int64_t col0,
                         int64_t global_cols) const {
    if (k.rate <= 0.0f) return;
    if (!context_parallel()) {
      ops::dropout_apply(x, k, n, cols, info.sample_offset * T + r0, col0, global_cols);
      return;
    }
    const int64_t Tf = seq_full();
    const ops::RowChunks at = cp->rows(T);
    for (int64_t r = r0, end = r0 + n; r < end;) {
      const int64_t b = r / T, t = r % T, run = std::min(end - r, at.chunk - t % at.chunk);
      ops::dropout_apply(x + (r - r0) * cols, k, run, cols, (info.sample_offset + b) * Tf + at.position(t), col0,
                         global_cols);
      r += run;
    }
  }
};

// Which half of a backward runs: both (the fused backward), the input-gradient pass, or the
// weight-gradient pass (which reads what the input pass kept for it).
enum class BwdPass { kBoth, kInput, kWeight };

}  // namespace gf
