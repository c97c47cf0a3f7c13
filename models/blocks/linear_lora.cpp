// ParallelLinear's LoRA paths (models/lora.h): y = W x (+ b) + s B (A x) with W frozen, s = alpha / r.
//
// Column-parallel (outputs split): A [r, in] whole, B this rank's output rows. u = x_full A^T [N, r] (x gathered
// under SP), y[:, adapter's columns] += s u B^T. Backward: dv = s dy_cols B [N, r]; dx_full += dv A before the
// reduction that the base's input gradient goes through; dB += s dy_cols^T u; dA += dv^T x_full (partial over
// the tensor group: summed there by the gradient sync, ParamSpec::grad_partial_over_tp).
// Row-parallel (inputs split): A this rank's input columns, B [out, r] whole. u_p = x A_p^T is this rank's part
// of A x, and s u_p B^T is added to the partial output before its reduction (the sum over ranks is s (A x) B^T).
// Backward from the gathered dy: dv = s dy B; dx += dv A_p; dA_p += dv^T x; dB += s dy^T u_p (partial, summed).
// All in fp32 (the config refuses LoRA with a low-precision compute dtype).
#include <stdexcept>

#include "core/math/gemm.h"
#include "core/ops/linear.h"
#include "models/blocks/linear.h"
#include "models/lora.h"

namespace gf {

namespace {
void fp32_only(const BlockEnv& e, const void* a, const void* b, const void* c) {
  if (e.cdt != ComputeDtype::kFloat32 || a || b || c)
    throw std::logic_error("ParallelLinear: LoRA adapters and a frozen base compute in fp32");
}
}  // namespace

bool bind_adapter(ParallelLinear& lin, const Placement& lora, const std::string& weight, int64_t col0, int64_t cols,
                  const AdapterSite& at) {
  const TensorPlacement* a = lora.find(lora_a_name(weight));
  if (a == nullptr) return false;
  const TensorPlacement& b = lora.at(lora_b_name(weight));
  if (lin.kind == ParallelLinear::Kind::kRow) cols = lin.out, col0 = 0;
  if (b.local_shape.at(0) != cols || a->local_shape.at(1) != lin.in)
    throw std::logic_error("lora: the adapter of " + weight + " does not fit its layer");
  lin.adapters.push_back({a->offset, b.offset, col0, cols, at.site});
  lin.rank = at.rank;
  lin.scale = at.scale;
  lin.dropout = at.dropout;
  lin.layer = at.layer;
  return true;
}

// Sites above the blocks' own (DropSite): each adapter's mask is its own, as each PEFT module has its dropout.
ops::DropoutKey ParallelLinear::adapter_dropout(const BlockEnv& e, const Adapter& ad) const {
  return e.dropout(layer, 16 + ad.site, dropout);
}

const float* ParallelLinear::adapter_input(const BlockEnv& e, const Adapter& ad, const float* x) const {
  const ops::DropoutKey k = adapter_dropout(e, ad);
  if (!k.active()) return x;
  const int64_t N = e.tp->rows();
  std::copy(x, x + N * in, e.lora_drop);
  // A column-parallel layer's input is whole; a row-parallel one's holds this rank's columns of the whole.
  const int64_t col0 = kind == Kind::kColumn ? 0 : e.tp->rank() * in, global = kind == Kind::kColumn ? in : in * e.tp->size();
  e.dropout_row_range(e.lora_drop, k, 0, N, in, col0, global);
  return e.lora_drop;
}

// dx += dropout'(dv A): the adapter's part of the input gradient (through its mask when it has dropout).
void ParallelLinear::add_input_grad(const BlockEnv& e, const Adapter& ad, const float* dv, const float* A, float* dx) const {
  const int64_t N = e.tp->rows();
  const ops::DropoutKey k = adapter_dropout(e, ad);
  if (!k.active()) {
    gemm(Trans::kNo, Trans::kNo, N, in, rank, 1.0f, dv, rank, A, in, 1.0f, dx, in);
    return;
  }
  gemm(Trans::kNo, Trans::kNo, N, in, rank, 1.0f, dv, rank, A, in, 0.0f, e.lora_drop, in);
  const int64_t col0 = kind == Kind::kColumn ? 0 : e.tp->rank() * in, global = kind == Kind::kColumn ? in : in * e.tp->size();
  e.dropout_row_range(e.lora_drop, k, 0, N, in, col0, global);
  const float* t = e.lora_drop;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * in; ++i) dx[i] += t[i];
}

void ParallelLinear::fwd_lora(const BlockEnv& e, float* y, const float* x, const void* x_low) const {
  fp32_only(e, x_low, nullptr, nullptr);
  const TensorParallel& tp = *e.tp;
  const int64_t N = tp.rows(), r = rank;
  const Weight W = e.wt(w, out_in);
  const float* bias = b >= 0 ? e.w(b) : nullptr;
  float* u = e.lora_scratch;
  if (kind == Kind::kColumn) {
    const float* xf = tp.gather_rows(x, e.gather, in);
    ops::linear_fwd(y, xf, W, bias, N, in, out);
    adapters_fwd(e, y, xf);
    return;
  }
  float* part = tp.size() == 1 ? y : e.partial;
  ops::linear_fwd(part, x, W, tp.rank() == 0 ? bias : nullptr, N, in, out);
  for (const Adapter& ad : adapters) {
    gemm(Trans::kNo, Trans::kYes, N, r, in, 1.0f, adapter_input(e, ad, x), in, e.lora_w + ad.a, in, 0.0f, u, r);
    gemm(Trans::kNo, Trans::kYes, N, out, r, scale, u, r, e.lora_w + ad.b, r, 1.0f, part, out);
  }
  if (tp.size() > 1) tp.reduce_rows(part, y, out);
}

void ParallelLinear::adapters_fwd(const BlockEnv& e, float* y, const float* x) const {
  const int64_t N = e.tp->rows(), r = rank;
  float* u = e.lora_scratch;
  for (const Adapter& ad : adapters) {
    gemm(Trans::kNo, Trans::kYes, N, r, in, 1.0f, adapter_input(e, ad, x), in, e.lora_w + ad.a, in, 0.0f, u, r);
    gemm(Trans::kNo, Trans::kYes, N, ad.cols, r, scale, u, r, e.lora_w + ad.b, r, 1.0f, y + ad.col0, out);
  }
}

void ParallelLinear::adapters_bwd(const BlockEnv& e, float* dx, const float* dy, const float* x, bool input,
                                  bool weight) const {
  const int64_t N = e.tp->rows(), r = rank;
  float* u = e.lora_scratch;
  float* dv = e.lora_scratch + N * r;
  for (const Adapter& ad : adapters) {
    const float *A = e.lora_w + ad.a, *B = e.lora_w + ad.b;
    gemm(Trans::kNo, Trans::kNo, N, r, ad.cols, scale, dy + ad.col0, out, B, r, 0.0f, dv, r);
    if (input) add_input_grad(e, ad, dv, A, dx);
    if (weight) {
      const float* xa = adapter_input(e, ad, x);
      gemm(Trans::kNo, Trans::kYes, N, r, in, 1.0f, xa, in, A, in, 0.0f, u, r);
      gemm(Trans::kYes, Trans::kNo, ad.cols, r, N, scale, dy + ad.col0, out, u, r, 1.0f, e.lora_g + ad.b, r);
      gemm(Trans::kYes, Trans::kNo, r, in, N, 1.0f, dv, r, xa, in, 1.0f, e.lora_g + ad.a, in);
    }
  }
}

void ParallelLinear::bwd_frozen(const BlockEnv& e, BwdPass pass, float* dx, const float* dy, const float* x,
                                const void* x_low, const void* dy_low, void* dx_low) const {
  fp32_only(e, x_low, dy_low, dx_low);
  const TensorParallel& tp = *e.tp;
  const int64_t N = tp.rows(), r = rank;
  const Weight W = e.wt(w, out_in);
  const bool input = pass != BwdPass::kWeight, weight = pass != BwdPass::kInput && !adapters.empty();
  float* u = e.lora_scratch;
  float* dv = e.lora_scratch + N * r;
  if (kind == Kind::kColumn) {
    float* dfull = tp.sequence_parallel() ? e.dfull : dx;
    if (input) ops::linear_bwd_input(dfull, dy, W, N, in, out, 0.0f);
    const float* xf = weight ? tp.gather_rows(x, e.gather, in) : nullptr;
    adapters_bwd(e, dfull, dy, xf, input, weight);
    if (input) tp.reduce_rows(dfull, dx, in);
    return;
  }
  const float* dyf = tp.gather_rows(dy, e.gather, out);
  if (input) ops::linear_bwd_input(dx, dyf, W, N, in, out, 0.0f);
  for (const Adapter& ad : adapters) {
    const float *A = e.lora_w + ad.a, *B = e.lora_w + ad.b;
    gemm(Trans::kNo, Trans::kNo, N, r, out, scale, dyf, out, B, r, 0.0f, dv, r);
    if (input) add_input_grad(e, ad, dv, A, dx);
    if (weight) {
      const float* xa = adapter_input(e, ad, x);
      gemm(Trans::kYes, Trans::kNo, r, in, N, 1.0f, dv, r, xa, in, 1.0f, e.lora_g + ad.a, in);
      gemm(Trans::kNo, Trans::kYes, N, r, in, 1.0f, xa, in, A, in, 0.0f, u, r);
      gemm(Trans::kYes, Trans::kNo, out, r, N, scale, dyf, out, u, r, 1.0f, e.lora_g + ad.b, r);
    }
  }
}

}  // namespace gf
