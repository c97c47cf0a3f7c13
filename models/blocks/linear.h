// A tensor-parallel linear layer as the blocks use it: column-parallel (the output features split,
// the input rows gathered under SP) or row-parallel (the input features split, the output reduced),
// its weight in either storage layout, with an optional bias. Arena offsets only: the env supplies
// the weights, gradients and scratch.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <string>

#include "core/params/placement.h"
#include "models/blocks/env.h"
#include "parallel/tensor_parallel.h"

namespace gf {

struct ParallelLinear {
  enum class Kind { kColumn, kRow };
  Kind kind = Kind::kColumn;
  int64_t in = 0, out = 0;  // local: column [in, out_local], row [in_local, out]
  bool out_in = false;      // weight stored [out, in]
  int64_t w = -1, b = -1;   // arena offsets (b < 0: no bias)
  // LoRA adapters (models/lora.h) on runs of this layer's local outputs: offsets of A and B in the adapters'
  // arena (BlockEnv::lora_w), and (column-parallel) the local output columns [col0, col0 + cols) they add to
  // (q, k, v of one q|k|v product; a row-parallel layer's adapter covers every output). The base weight is
  // then frozen (BlockEnv::frozen).
  struct Adapter {
    int64_t a = -1, b = -1, col0 = 0, cols = 0;
    int64_t site = 0;  // its dropout site (BlockEnv::dropout's, with the layer)
  };
  std::vector<Adapter> adapters;
  int64_t rank = 0;    // r
  float scale = 0.0f;  // alpha / r (alpha / sqrt(r) with rsLoRA)
  float dropout = 0.0f;  // on the adapters' input (PEFT's B(A(dropout(x)))), a mask per adapter
  int64_t layer = 0;

  // x_low: x's bf16 copy where the block keeps x only so (x is then null; a column-parallel layer
  // gathers it under SP in bf16), else null.
  void fwd(const BlockEnv& e, float* y, const float* x, const void* x_low = nullptr) const {
    if (!adapters.empty()) return fwd_lora(e, y, x, x_low);
    const float* bias = b >= 0 ? e.w(b) : nullptr;
    if (kind == Kind::kColumn) column_parallel_fwd(*e.tp, y, x, e.wt(w, out_in), bias, in, out, e.gather, x_low);
    else row_parallel_fwd(*e.tp, y, x, e.wt(w, out_in), bias, in, out, e.partial, x_low);
  }
  // Column-parallel only: y written as its bf16 copy alone (column_parallel_fwd_low).
  void fwd_low(const BlockEnv& e, void* y_low, const float* x, const void* x_low = nullptr) const {
    if (kind != Kind::kColumn) throw std::logic_error("ParallelLinear::fwd_low: column-parallel layers only");
    if (!adapters.empty()) throw std::logic_error("ParallelLinear::fwd_low: LoRA adapters compute in fp32");
    column_parallel_fwd_low(*e.tp, y_low, x, e.wt(w, out_in), b >= 0 ? e.w(b) : nullptr, in, out, e.gather, x_low);
  }
  // A column-parallel layer's adapters on an input that holds every row already (no gather; latent attention's
  // q_b_proj and kv_b_proj): y [N, out] += s B (A x) on each adapter's columns; backward from dy: dx [N, in] += the
  // adapters' input gradient (input), and their A and B gradients (weight; x may be null without). fwd_lora and
  // bwd_frozen run their column-parallel adapters through these.
  void adapters_fwd(const BlockEnv& e, float* y, const float* x) const;
  void adapters_bwd(const BlockEnv& e, float* dx, const float* dy, const float* x, bool input, bool weight) const;
  // kBoth / kInput write dx (local rows for column-parallel); kBoth / kWeight accumulate the
  // weight and bias gradients. Under bf16 weights a gradient may be kept as its bf16 copy alone (the
  // MLP's, MlpBlock::keeps_bf16): dy_low, a column-parallel layer's dy (dy is then null;
  // column_parallel_bwd's dy_low), or dx_low, where a row-parallel layer writes its dx (dx is then
  // null; row_parallel_bwd_low).
  void bwd(const BlockEnv& e, BwdPass pass, float* dx, const float* dy, const float* x, const void* x_low = nullptr,
           const void* dy_low = nullptr, void* dx_low = nullptr) const {
    if (e.frozen()) return bwd_frozen(e, pass, dx, dy, x, x_low, dy_low, dx_low);
    const Weight wt = e.wt(w, out_in);
    float* db = b >= 0 ? e.g(b) : nullptr;
    if (kind == Kind::kColumn) {
      if (dx_low) throw std::logic_error("ParallelLinear::bwd: a bf16 dx is a row-parallel layer's");
      if (pass == BwdPass::kBoth)
        column_parallel_bwd(*e.tp, dx, e.g(w), db, dy, x, wt, in, out, e.gather, e.dfull, x_low, dy_low);
      if (pass == BwdPass::kInput) column_parallel_bwd_input(*e.tp, dx, dy, wt, in, out, e.dfull, dy_low);
      if (pass == BwdPass::kWeight)
        column_parallel_bwd_weight(*e.tp, e.g(w), db, dy, x, wt, in, out, e.gather, dy_low, x_low);
    } else {
      if (dy_low) throw std::logic_error("ParallelLinear::bwd: a kept bf16 dy is a column-parallel layer's");
      if (pass == BwdPass::kBoth) {
        if (dx_low) row_parallel_bwd_low(*e.tp, dx_low, e.g(w), db, dy, x, wt, in, out, e.gather, x_low);
        else row_parallel_bwd(*e.tp, dx, e.g(w), db, dy, x, wt, in, out, e.gather, x_low);
      }
      if (pass == BwdPass::kInput) {
        if (dx_low) row_parallel_bwd_input_low(*e.tp, dx_low, dy, wt, in, out, e.gather);
        else row_parallel_bwd_input(*e.tp, dx, dy, wt, in, out, e.gather);
      }
      if (pass == BwdPass::kWeight) row_parallel_bwd_weight(*e.tp, e.g(w), db, dy, x, wt, in, out, e.gather, x_low);
    }
  }

 private:
  // With adapters (models/blocks/linear_lora.cpp): y = W x (+ b) + scale B (A x), one reduction for both.
  void fwd_lora(const BlockEnv& e, float* y, const float* x, const void* x_low) const;
  // The base frozen: its input gradient (kBoth, kInput) with the adapters' added before the reduction, and
  // the adapters' weight gradients (kBoth, kWeight); no gradient of W or b.
  void bwd_frozen(const BlockEnv& e, BwdPass pass, float* dx, const float* dy, const float* x, const void* x_low,
                  const void* dy_low, void* dx_low) const;
  // The adapter's input: x itself, or (dropout) x with its mask applied in e.lora_drop; rows: all N.
  const float* adapter_input(const BlockEnv& e, const Adapter& ad, const float* x) const;
  void add_input_grad(const BlockEnv& e, const Adapter& ad, const float* dv, const float* A, float* dx) const;
  ops::DropoutKey adapter_dropout(const BlockEnv& e, const Adapter& ad) const;
};

// LoRA: binds the adapter of the module whose base weight is named `weight`, where the adapters' placement
// `lora` holds one (models/lora.h names), to output columns [col0, col0 + cols) of `lin` (a row-parallel
// layer's: all of them). Returns whether it had one.
// Its dropout (pet_config.lora_dropout) keys the masks by (layer, site).
struct AdapterSite {
  int64_t rank = 0;
  float scale = 0.0f, dropout = 0.0f;
  int64_t layer = 0, site = 0;
};
bool bind_adapter(ParallelLinear& lin, const Placement& lora, const std::string& weight, int64_t col0, int64_t cols,
                  const AdapterSite& at);

}  // namespace gf
