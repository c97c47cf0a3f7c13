// A tensor-parallel linear layer as the blocks use it: column-parallel (the output features split,
// the input rows gathered under SP) or row-parallel (the input features split, the output reduced),
// its weight in either storage layout, with an optional bias. Arena offsets only: the env supplies
// the weights, gradients and scratch.
#pragma once
#include <cstdint>
#include <stdexcept>

#include "models/blocks/env.h"
#include "parallel/tensor_parallel.h"

namespace gf {

struct ParallelLinear {
  enum class Kind { kColumn, kRow };
  Kind kind = Kind::kColumn;
  int64_t in = 0, out = 0;  // local: column [in, out_local], row [in_local, out]
  bool out_in = false;      // weight stored [out, in]
  int64_t w = -1, b = -1;   // arena offsets (b < 0: no bias)

  // x_low: x's bf16 copy where the block keeps x only so (x is then null; a column-parallel layer
  // gathers it under SP in bf16), else null.
  void fwd(const BlockEnv& e, float* y, const float* x, const void* x_low = nullptr) const {
    const float* bias = b >= 0 ? e.w(b) : nullptr;
    if (kind == Kind::kColumn) column_parallel_fwd(*e.tp, y, x, e.wt(w, out_in), bias, in, out, e.gather, x_low);
    else row_parallel_fwd(*e.tp, y, x, e.wt(w, out_in), bias, in, out, e.partial, x_low);
  }
  // Column-parallel only: y written as its bf16 copy alone (column_parallel_fwd_low).
  void fwd_low(const BlockEnv& e, void* y_low, const float* x, const void* x_low = nullptr) const {
    if (kind != Kind::kColumn) throw std::logic_error("ParallelLinear::fwd_low: column-parallel layers only");
    column_parallel_fwd_low(*e.tp, y_low, x, e.wt(w, out_in), b >= 0 ? e.w(b) : nullptr, in, out, e.gather, x_low);
  }
  // kBoth / kInput write dx (local rows for column-parallel); kBoth / kWeight accumulate the
  // weight and bias gradients. Under bf16 weights a gradient may be kept as its bf16 copy alone (the
  // MLP's, MlpBlock::keeps_bf16): dy_low, a column-parallel layer's dy (dy is then null;
  // column_parallel_bwd's dy_low), or dx_low, where a row-parallel layer writes its dx (dx is then
  // null; row_parallel_bwd_low).
  void bwd(const BlockEnv& e, BwdPass pass, float* dx, const float* dy, const float* x, const void* x_low = nullptr,
           const void* dy_low = nullptr, void* dx_low = nullptr) const {
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
};

}  // namespace gf
