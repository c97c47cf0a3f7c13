#include "parallel/tensor_parallel.h"

#include "core/math/parallel_worth.h"

#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/ops/cross_entropy.h"
#include "core/ops/embedding.h"
#include "core/ops/linear.h"

namespace gf {

TensorParallel::TensorParallel(const Communicator* tp, bool sequence_parallel, int64_t rows)
    : tp_(tp), sp_(sequence_parallel && tp && tp->size() > 1), rows_(rows) {
  if (sp_ && rows % tp->size() != 0)
    throw std::invalid_argument("sequence parallel: " + std::to_string(rows) + " token rows do not split over " +
                                std::to_string(tp->size()) + " ranks");
}

const float* TensorParallel::gather_rows(const float* x, float* full, int64_t cols) const {
  if (!sp_) return x;
  const int64_t n = local_rows() * cols;
  std::memcpy(full + row_begin() * cols, x, sizeof(float) * static_cast<size_t>(n));
  tp_->allgather(full, rows_ * cols);
  return full;
}

const bf16* TensorParallel::gather_rows(const bf16* x, bf16* full, int64_t cols) const {
  if (!sp_) return x;
  const int64_t n = local_rows() * cols;
  std::memcpy(full + row_begin() * cols, x, sizeof(bf16) * static_cast<size_t>(n));
  tp_->allgather(reinterpret_cast<uint16_t*>(full), rows_ * cols);
  return full;
}

void TensorParallel::reduce_rows(float* partial, float* y, int64_t cols) const {
  if (size() == 1) {
    if (y != partial) std::memcpy(y, partial, sizeof(float) * static_cast<size_t>(rows_ * cols));
    return;
  }
  if (!sp_) {
    tp_->allreduce_sum(partial, rows_ * cols);
    if (y != partial) std::memcpy(y, partial, sizeof(float) * static_cast<size_t>(rows_ * cols));
    return;
  }
  tp_->reduce_scatter_sum(partial, rows_ * cols);
  std::memcpy(y, partial + row_begin() * cols, sizeof(float) * static_cast<size_t>(local_rows() * cols));
}

void TensorParallel::allreduce_sum(float* x, int64_t n) const { if (tp_) tp_->allreduce_sum(x, n); }
void TensorParallel::allreduce_sum(double* x, int64_t n) const { if (tp_) tp_->allreduce_sum(x, n); }
void TensorParallel::allreduce_max(float* x, int64_t n) const { if (tp_) tp_->allreduce_max(x, n); }

namespace {
// A column-parallel layer's input over all rows: x, or its bf16 copy x_low where the caller keeps one
// (x is then null), gathered under SP into gather_buf ([rows, in] floats hold [rows, in] bf16 too).
struct ColumnInput {
  const float* x = nullptr;
  const void* low = nullptr;
  ColumnInput(const TensorParallel& tp, const float* xl, const void* x_low, float* gather_buf, int64_t in) {
    if (x_low) low = tp.gather_rows(static_cast<const bf16*>(x_low), reinterpret_cast<bf16*>(gather_buf), in);
    else x = tp.gather_rows(xl, gather_buf, in);
  }
};
}  // namespace

void column_parallel_fwd(const TensorParallel& tp, float* y, const float* x, const Weight& w, const float* b,
                         int64_t in, int64_t out_local, float* gather_buf, const void* x_low) {
  const ColumnInput xf(tp, x, x_low, gather_buf, in);
  ops::linear_fwd(y, xf.x, w, b, tp.rows(), in, out_local, xf.low);
}

void column_parallel_fwd_low(const TensorParallel& tp, void* y_low, const float* x, const Weight& w, const float* b,
                             int64_t in, int64_t out_local, float* gather_buf, const void* x_low) {
  const ColumnInput xf(tp, x, x_low, gather_buf, in);
  ops::linear_fwd_low(y_low, xf.x, w, b, tp.rows(), in, out_local, xf.low);
}

void column_parallel_bwd(const TensorParallel& tp, float* dx, float* dw, float* db, const float* dy,
                         const float* x, const Weight& w, int64_t in, int64_t out_local, float* gather_buf,
                         float* dx_buf, const void* x_low, const void* dy_low) {
  // Under SP the input is gathered again rather than kept: activation memory stays at the local rows.
  const ColumnInput xf(tp, x, x_low, gather_buf, in);
  float* dfull = tp.sequence_parallel() ? dx_buf : dx;
  // dfull is written, not added to
  ops::linear_bwd(dfull, dw, db, dy, xf.x, w, tp.rows(), in, out_local, 0.0f, xf.low, dy_low);
  tp.reduce_rows(dfull, dx, in);
}

void row_parallel_fwd(const TensorParallel& tp, float* y, const float* x, const Weight& w, const float* b,
                      int64_t in_local, int64_t out, float* partial_buf, const void* x_low) {
  if (tp.size() == 1) {
    ops::linear_fwd(y, x, w, b, tp.rows(), in_local, out, x_low);
    return;
  }
  ops::linear_fwd(partial_buf, x, w, tp.rank() == 0 ? b : nullptr, tp.rows(), in_local, out, x_low);
  tp.reduce_rows(partial_buf, y, out);
}

void row_parallel_bwd(const TensorParallel& tp, float* dx, float* dw, float* db, const float* dy,
                      const float* x, const Weight& w, int64_t in_local, int64_t out, float* gather_buf,
                      const void* x_low) {
  const float* dyf = tp.gather_rows(dy, gather_buf, out);
  ops::linear_bwd(dx, dw, nullptr, dyf, x, w, tp.rows(), in_local, out, 0.0f, x_low);  // dx is written, not added to
  // The bias gradient from this rank's rows: the whole sum without SP, a partial sum under SP
  // (completed by the gradient all-reduce of sequence-parallel replicated parameters).
  if (db) ops::sum_rows_accumulate(db, dy, tp.local_rows(), out);
}

void row_parallel_bwd_low(const TensorParallel& tp, void* dx_low, float* dw, float* db, const float* dy,
                          const float* x, const Weight& w, int64_t in_local, int64_t out, float* gather_buf,
                          const void* x_low) {
  const float* dyf = tp.gather_rows(dy, gather_buf, out);
  // dy feeds both products: converted once, as ops::linear_bwd does.
  const void* dy_low = low_copy_scratch(w.dtype, dyf, tp.rows(), out, 0);
  ops::linear_bwd_input_low(dx_low, dyf, w, tp.rows(), in_local, out, dy_low);
  ops::linear_bwd_weight(dw, nullptr, dyf, x, w, tp.rows(), in_local, out, dy_low, x_low);
  if (db) ops::sum_rows_accumulate(db, dy, tp.local_rows(), out);
}

void column_parallel_bwd_input(const TensorParallel& tp, float* dx, const float* dy, const Weight& w, int64_t in,
                               int64_t out_local, float* dx_buf, const void* dy_low) {
  float* dfull = tp.sequence_parallel() ? dx_buf : dx;
  ops::linear_bwd_input(dfull, dy, w, tp.rows(), in, out_local, 0.0f, dy_low);
  tp.reduce_rows(dfull, dx, in);
}

void column_parallel_bwd_weight(const TensorParallel& tp, float* dw, float* db, const float* dy, const float* x,
                                const Weight& w, int64_t in, int64_t out_local, float* gather_buf, const void* dy_low,
                                const void* x_low) {
  const ColumnInput xf(tp, x, x_low, gather_buf, in);
  ops::linear_bwd_weight(dw, db, dy, xf.x, w, tp.rows(), in, out_local, dy_low, xf.low);
}

void row_parallel_bwd_input(const TensorParallel& tp, float* dx, const float* dy, const Weight& w, int64_t in_local,
                            int64_t out, float* gather_buf) {
  const float* dyf = tp.gather_rows(dy, gather_buf, out);
  ops::linear_bwd_input(dx, dyf, w, tp.rows(), in_local, out, 0.0f);
}

void row_parallel_bwd_input_low(const TensorParallel& tp, void* dx_low, const float* dy, const Weight& w,
                                int64_t in_local, int64_t out, float* gather_buf) {
  ops::linear_bwd_input_low(dx_low, tp.gather_rows(dy, gather_buf, out), w, tp.rows(), in_local, out);
}

void row_parallel_bwd_weight(const TensorParallel& tp, float* dw, float* db, const float* dy, const float* x,
                             const Weight& w, int64_t in_local, int64_t out, float* gather_buf, const void* x_low) {
  const float* dyf = tp.gather_rows(dy, gather_buf, out);
  ops::linear_bwd_weight(dw, nullptr, dyf, x, w, tp.rows(), in_local, out, nullptr, x_low);
  if (db) ops::sum_rows_accumulate(db, dy, tp.local_rows(), out);
}

void embedding_parallel_fwd(const TensorParallel& tp, float* y, const int32_t* tokens, const float* wte,
                            const float* wpe, const EmbeddingShape& s, float* full_buf, const VocabChunks* chunks) {
  const int64_t r0 = tp.row_begin(), nl = tp.local_rows();
  auto lookup = [&](float* out, const int32_t* tok, int64_t n) {
    if (!chunks || chunks->count() == 0) {
      ops::embedding_lookup_fwd(out, tok, wte, n, s.dim, s.vocab_begin, s.vocab_end);
      return;
    }
    ops::embedding_lookup_fwd(out, tok, wte, n, s.dim, s.vocab_begin, s.vocab_begin);  // every row 0
    for (size_t c = 0; c < chunks->count(); ++c) {
      const int64_t a = chunks->at[c], b = chunks->at[c + 1];
      chunks->enter(c);
      ops::embedding_lookup_rows(out, tok, wte + a * s.dim, n, s.dim, s.vocab_begin + a, s.vocab_begin + b);
      chunks->leave(c);
    }
  };
  if (s.vocab_parallel && tp.size() > 1) {
    // Each rank looks up the tokens in its vocabulary slice (zeros elsewhere); the sum over the
    // group is the embedding (SP: reduce-scattered straight to the local rows).
    lookup(full_buf, tokens, s.rows);
    tp.reduce_rows(full_buf, y, s.dim);
  } else {
    lookup(y, tokens + r0, nl);
  }
  if (wpe) ops::position_add_fwd(y, wpe, nl, r0, s.seq, s.dim, s.positions);
}

void embedding_parallel_bwd(const TensorParallel& tp, float* dwte, float* dwpe, const float* dy,
                            const int32_t* tokens, const EmbeddingShape& s, float* full_buf) {
  const int64_t r0 = tp.row_begin(), nl = tp.local_rows();
  if (s.vocab_parallel && tp.size() > 1) {
    const float* dyf = tp.gather_rows(dy, full_buf, s.dim);
    ops::embedding_lookup_bwd(dwte, dyf, tokens, s.rows, s.dim, s.vocab_begin, s.vocab_end);
  } else {
    ops::embedding_lookup_bwd(dwte, dy, tokens + r0, nl, s.dim, s.vocab_begin, s.vocab_end);
  }
  if (dwpe) ops::position_bwd(dwpe, dy, nl, r0, s.seq, s.dim, s.positions);
}

void embedding_parallel_bwd_rows(const TensorParallel& tp, float* dwpe, const float* dy, const int32_t* tokens,
                                 const EmbeddingShape& s, float* full_buf,
                                 const std::function<void(const int32_t*, const float*, int64_t)>& rows) {
  const int64_t r0 = tp.row_begin(), nl = tp.local_rows();
  const bool gathered = s.vocab_parallel && tp.size() > 1;
  const float* d = gathered ? tp.gather_rows(dy, full_buf, s.dim) : dy;
  const int32_t* tok = gathered ? tokens : tokens + r0;
  const int64_t n = gathered ? s.rows : nl;
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[static_cast<size_t>(i)] =
        tok[i] >= s.vocab_begin && tok[i] < s.vocab_end ? static_cast<int32_t>(tok[i] - s.vocab_begin) : -1;
  rows(ids.data(), d, n);
  if (dwpe) ops::position_bwd(dwpe, dy, nl, r0, s.seq, s.dim, s.positions);
}

void vocab_parallel_cross_entropy_fwd(const TensorParallel& tp, float* losses, float* lse, const float* logits,
                                      const int32_t* targets, int64_t rows, int64_t ld, int64_t vocab_begin,
                                      int64_t valid, float* scratch) {
  if (tp.size() == 1) {
    ops::cross_entropy_fwd(losses, lse, logits, targets, rows, ld, valid);
    return;
  }
  using ConstRow = Eigen::Map<const Eigen::ArrayXf>;
  float* mx = lse;  // the global row maxima live in lse until the end
#pragma omp parallel for schedule(static) if (parallel_worth(rows * valid * kTranscendentalWork))
  for (int64_t r = 0; r < rows; ++r)
    mx[r] = valid > 0 ? ConstRow(logits + r * ld, valid).maxCoeff() : -std::numeric_limits<float>::infinity();
  tp.allreduce_max(mx, rows);
  // (sum of exp(x - max) over this slice, the target's logit if it is in this slice)
#pragma omp parallel for schedule(static) if (parallel_worth(rows * valid * kTranscendentalWork))
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * ld;
    scratch[2 * r] = valid > 0 ? (ConstRow(x, valid) - mx[r]).exp().sum() : 0.0f;
    const int64_t t = static_cast<int64_t>(targets[r]) - vocab_begin;
    scratch[2 * r + 1] = t >= 0 && t < valid ? x[t] : 0.0f;
  }
  tp.allreduce_sum(scratch, 2 * rows);
#pragma omp parallel for schedule(static) if (parallel_worth(rows * valid * kTranscendentalWork))
  for (int64_t r = 0; r < rows; ++r) {
    lse[r] = mx[r] + std::log(scratch[2 * r]);
    losses[r] = targets[r] < 0 ? 0.0f : lse[r] - scratch[2 * r + 1];
  }
}

void vocab_parallel_cross_entropy_bwd(float* logits, const float* lse, const int32_t* targets, int64_t rows,
                                      int64_t ld, int64_t vocab_begin, int64_t valid, float grad_scale) {
  ops::cross_entropy_bwd_inplace(logits, lse, targets, rows, ld, valid, grad_scale, vocab_begin);
}

}  // namespace gf
