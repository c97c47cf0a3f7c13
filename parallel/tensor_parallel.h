// Tensor (Megatron-style) and sequence parallelism as layers that own their collectives, so the
// model code never calls MPI. A `TensorParallel` describes how the N = B*T token rows of the
// residual stream are held on this rank: all of them (tensor parallel alone), or a contiguous
// 1/tp share (sequence parallel). The collectives come in conjugate forward/backward pairs:
//
//   gather_rows: forward of "enter a column-parallel layer" (SP: all-gather; else identity),
//                backward of "leave a row-parallel layer".
//   reduce_rows: forward of "leave a row-parallel layer" (SP: reduce-scatter; else all-reduce),
//                backward of "enter a column-parallel layer".
//
// With one rank every collective is a no-op and the layers do exactly the single-rank arithmetic.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/math/mixed_precision.h"
#include "parallel/communicator.h"

namespace gf {

class TensorParallel {
 public:
  TensorParallel() = default;  // one rank
  TensorParallel(const Communicator* tp, bool sequence_parallel, int64_t rows);

  int size() const { return tp_ ? tp_->size() : 1; }
  int rank() const { return tp_ ? tp_->rank() : 0; }
  bool sequence_parallel() const { return sp_; }
  int64_t rows() const { return rows_; }                                  // N = B*T
  int64_t local_rows() const { return sp_ ? rows_ / size() : rows_; }    // of the residual stream
  int64_t row_begin() const { return sp_ ? rank() * local_rows() : 0; }  // first global row held here

  // Returns the full [rows, cols]: `x` itself, or (SP) `full` after an all-gather of every
  // rank's local rows.
  const float* gather_rows(const float* x, float* full, int64_t cols) const;
  // The same for bf16 rows (a kept bf16 activation: its bits moved, not converted).
  const bf16* gather_rows(const bf16* x, bf16* full, int64_t cols) const;
  // `partial` [rows, cols] holds this rank's partial sums. Writes the summed local rows to `y`
  // (SP: reduce-scatter; else all-reduce, and y may equal partial). `partial` is clobbered.
  void reduce_rows(float* partial, float* y, int64_t cols) const;
  // Sums a small per-row vector or scalar over the group (the vocabulary-parallel softmax).
  void allreduce_sum(float* x, int64_t n) const;
  void allreduce_sum(double* x, int64_t n) const;
  void allreduce_max(float* x, int64_t n) const;

 private:
  const Communicator* tp_ = nullptr;
  bool sp_ = false;
  int64_t rows_ = 0;
};

// The weights W are `Weight`s: a plain fp32 pointer, or with the low-precision copy that
// model_config.compute_dtype computes in (core/math/mixed_precision.h).
//
// y[rows, out_local] = gather(x) @ W[in, out_local] + b   (W split by columns).
// gather_buf: [rows, in] scratch, used under SP. x_low: x's bf16 copy (local rows, dense) where the caller
// keeps x only so (a bf16 step's norm outputs; x is then null, and SP gathers the bf16 rows), else null.
void column_parallel_fwd(const TensorParallel& tp, float* y, const float* x, const Weight& w, const float* b,
                         int64_t in, int64_t out_local, float* gather_buf, const void* x_low = nullptr);
// The same with y written as its low-precision copy only (ops::linear_fwd_low; bf16 weights).
void column_parallel_fwd_low(const TensorParallel& tp, void* y_low, const float* x, const Weight& w, const float* b,
                             int64_t in, int64_t out_local, float* gather_buf, const void* x_low = nullptr);
// dW += gather(x)^T dy, db += sum dy, dx (local rows, overwritten) = reduce(dy W^T).
// gather_buf, dx_buf: [rows, in] scratch (dx_buf unused without SP).
// dy_low: dy's bf16 copy where the caller keeps dy only so (dy is then null; ops::linear_bwd), else null.
void column_parallel_bwd(const TensorParallel& tp, float* dx, float* dw, float* db, const float* dy,
                         const float* x, const Weight& w, int64_t in, int64_t out_local, float* gather_buf,
                         float* dx_buf, const void* x_low = nullptr, const void* dy_low = nullptr);

// y (local rows) = reduce(x[rows, in_local] @ W[in_local, out]) + b   (W split by rows; the bias
// is added once, by tensor-parallel rank 0). partial_buf: [rows, out] scratch. x_low: x's
// low-precision copy where the caller keeps one (ops::linear_fwd; x may then be null), else null.
void row_parallel_fwd(const TensorParallel& tp, float* y, const float* x, const Weight& w, const float* b,
                      int64_t in_local, int64_t out, float* partial_buf, const void* x_low = nullptr);
// dy_full = gather(dy); dW += x^T dy_full, db += sum dy (local rows), dx (overwritten) = dy_full W^T.
// gather_buf: [rows, out] scratch.
void row_parallel_bwd(const TensorParallel& tp, float* dx, float* dw, float* db, const float* dy,
                      const float* x, const Weight& w, int64_t in_local, int64_t out, float* gather_buf,
                      const void* x_low = nullptr);
// The same with dx written as its bf16 copy only (dense [rows, in_local]; ops::linear_bwd_input_low): the
// rounding of row_parallel_bwd's dx, and its dW and db bit for bit. bf16 weights only.
void row_parallel_bwd_low(const TensorParallel& tp, void* dx_low, float* dw, float* db, const float* dy,
                          const float* x, const Weight& w, int64_t in_local, int64_t out, float* gather_buf,
                          const void* x_low = nullptr);

// The halves of the two backwards, which may run apart (the weight pass of a zero-bubble
// pipeline runs later); each pair gives the fused call's bits. The weight passes gather under SP
// what they read (x for column-parallel, dy for row-parallel) again rather than keep it.
// column: dx (local rows, overwritten) = reduce(dy W^T) | dW += gather(x)^T dy, db += sum dy.
// row:    dx (overwritten) = gather(dy) W^T              | dW += x^T gather(dy), db += sum dy (local rows).
// dy_low: dy's low-precision copy, or null to convert it in the call.
void column_parallel_bwd_input(const TensorParallel& tp, float* dx, const float* dy, const Weight& w, int64_t in,
                               int64_t out_local, float* dx_buf, const void* dy_low = nullptr);
void column_parallel_bwd_weight(const TensorParallel& tp, float* dw, float* db, const float* dy, const float* x,
                                const Weight& w, int64_t in, int64_t out_local, float* gather_buf,
                                const void* dy_low = nullptr, const void* x_low = nullptr);
void row_parallel_bwd_input(const TensorParallel& tp, float* dx, const float* dy, const Weight& w, int64_t in_local,
                            int64_t out, float* gather_buf);
void row_parallel_bwd_input_low(const TensorParallel& tp, void* dx_low, const float* dy, const Weight& w,
                                int64_t in_local, int64_t out, float* gather_buf);
void row_parallel_bwd_weight(const TensorParallel& tp, float* dw, float* db, const float* dy, const float* x,
                             const Weight& w, int64_t in_local, int64_t out, float* gather_buf,
                             const void* x_low = nullptr);

// Token + position embedding over a vocabulary split into row ranges [vocab_begin, vocab_end) per
// rank (one range covering everything when the vocabulary is replicated). y holds the local rows.
// wpe / dwpe may be null: no learned positions (Llama).
// tokens: [rows] global token ids; positions are (global row % seq).
struct EmbeddingShape {
  int64_t rows, seq, dim, vocab_begin, vocab_end;
  bool vocab_parallel;  // wte rows split across the group (else replicated)
  const int32_t* positions = nullptr;  // [rows] each row's learned position (null: row % seq)
};
// ZeRO-2 and 3 (parallel/zero.h): the LM head's weight (and a token embedding tied to it) cut into
// vocabulary chunks that are units of their own, so the head and the lookup hold one chunk at a
// time. `at`: this rank's vocabulary rows where each chunk starts, then the local row count; the
// blocks call enter(c) before they read chunk c's weights and leave(c) after they are done with it
// (and, in the head's backward, with its gradient).
struct VocabChunks {
  std::vector<int64_t> at;
  std::function<void(size_t)> enter, leave;
  size_t count() const { return at.empty() ? 0 : at.size() - 1; }
};

// chunks: the lookup one chunk at a time (null: in one pass); the same values either way.
void embedding_parallel_fwd(const TensorParallel& tp, float* y, const int32_t* tokens, const float* wte,
                            const float* wpe, const EmbeddingShape& s, float* full_buf,
                            const VocabChunks* chunks = nullptr);
// dy: local rows (clobbered under SP is not allowed: it is read only). dwte: this rank's rows.
void embedding_parallel_bwd(const TensorParallel& tp, float* dwte, float* dwpe, const float* dy,
                            const int32_t* tokens, const EmbeddingShape& s, float* full_buf);
// The same, but the token rows' gradients are handed to `rows(ids, dy, n)` instead of added into
// dwte: ids are this rank's vocabulary rows (token - vocab_begin; -1 for a token outside the slice),
// dy the n rows' gradients (ZeRO-2 and 3: a tied embedding's gradient, already reduce-scattered by
// the head's backward, gets its rows added on the ranks that own them).
void embedding_parallel_bwd_rows(const TensorParallel& tp, float* dwpe, const float* dy, const int32_t* tokens,
                                 const EmbeddingShape& s, float* full_buf,
                                 const std::function<void(const int32_t*, const float*, int64_t)>& rows);

// Softmax cross-entropy over logits whose columns are this rank's vocabulary slice
// [vocab_begin, vocab_begin + ld); only `valid` of the ld columns are real tokens. Rows are the
// same on every rank. losses/lse: [rows], equal on every rank afterwards.
void vocab_parallel_cross_entropy_fwd(const TensorParallel& tp, float* losses, float* lse, const float* logits,
                                      const int32_t* targets, int64_t rows, int64_t ld, int64_t vocab_begin,
                                      int64_t valid, float* scratch /* 2*rows */);
// Overwrites logits with d(grad_scale * sum losses)/dlogits for this rank's columns.
void vocab_parallel_cross_entropy_bwd(float* logits, const float* lse, const int32_t* targets, int64_t rows,
                                      int64_t ld, int64_t vocab_begin, int64_t valid, float grad_scale);

}  // namespace gf
