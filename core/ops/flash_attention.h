// Fused causal attention (FlashAttention, Dao et al. 2022; backward as in FlashAttention-2): the
// same function as attention_fwd / attention_bwd (core/ops/attention.h), computed in tiles of
// `rows` queries x `cols` keys with an online softmax, so the T x T probabilities are never
// stored. Forward keeps only the log-sum-exp of each score row; backward recomputes each tile's
// probabilities from it. Attention memory is O(T) per head instead of O(T^2).
//
// Dropout on the probabilities uses the same global element index as the unfused path
// (((batch_offset + b) * heads_global + head_offset + h) * T * T + i * T + j), so the masks, and
// hence the results, are the same.
//
// Work is split over (batch, head, query tile) in forward and (batch, head) in backward; each
// output element is written by one thread in a fixed order, so results do not depend on the
// number of threads.
#pragma once
#include <cstdint>

#include "core/math/gemm_bf16.h"
#include "core/ops/attention.h"
#include "core/ops/dropout.h"

namespace gf::ops {

// 64 x 128 measured 0-8% faster than 64 x 64 on one and two threads at T = 256 and 1024, D = 64
// (bench/bench_attention.cpp --tiles 64x64,64x128,128x64,128x128,32x32; bench/README.md).
struct FlashTiles {
  int64_t rows = 64;   // query rows per tile (Br)
  int64_t cols = 128;  // key columns per tile (Bc)
};

// Per-thread scratch of the kernels, planned once by the caller (e.g. at model construction).
template <typename T>
struct FlashWorkspace {
  T* data = nullptr;  // threads * flash_workspace_per_thread(shape, tiles) values; nullptr: the
                      // calling threads' gf::scratch buffers
  int threads = 0;    // thread slices in data: the kernels run on at most this many threads
                      // (and at most omp_get_max_threads())
  FlashTiles tiles;
  // float only: the tiles' products on bf16 inputs with fp32 accumulation (gemm_bf16, AMX or AVX-512
  // BF16 where the CPU has it), as PyTorch's CPU flash attention computes them for bf16 tensors: q, k,
  // v (bf16 values already under mixed precision), the probabilities P and, in backward, the output
  // gradient dY and the score gradient dS rounded to bf16 for the products; softmax and lse in fp32.
  // q, k, v (and dY) are rounded once per call into a head-major bf16 copy in the calling thread's
  // scratch (gf::scratch<bf16> slots 0 and 1: B T (H + 2 kv) D and B T H D values, outside `data`),
  // each P and dS tile once into the working thread's (slots 2 and 3). In backward each working thread
  // also accumulates its head's dq, dk, dv densely in fp32 (gf::scratch<float> slot 3, 3 T D values),
  // added into dqkv once per head and key/value group.
  bool bf16_products = false;
  // Under bf16 products, all of that scratch planned by the caller instead (the layers: the stage plan's
  // "flash.bf16_scratch"): flash_bf16_scratch_floats values for the call's shape and `threads`. Null, or
  // smaller than the call needs: the gf::scratch buffers above.
  float* bf16_scratch = nullptr;
  int64_t bf16_scratch_floats = 0;
};

// The tiles the model's layers use. fp32: 64 x 128. With bf16 products: 128 x 256, where oneDNN's bf16
// matmul pays for its per-call conversion and set-up (B 2, T 1024, 12 heads of 64, 2 threads on an
// AVX-512 BF16 EPYC, fwd+bwd: 64 x 128 85 ms, 128 x 256 66 ms, against 87 ms for fp32 64 x 128;
// bench/bench_attention --products both, bench/README.md).
FlashTiles flash_tiles(bool bf16_products);

// Values of T each thread needs: O(rows * cols + rows * head_dim), independent of seq.
int64_t flash_workspace_per_thread(const AttentionShape& s, FlashTiles tiles);

// Floats of FlashWorkspace::bf16_scratch for a call of shape s on `threads` threads: the head-major
// bf16 q, k, v (B T (H + 2 kv) D) and dy (B T H D), and per thread a bf16 P and dS tile and the dense
// fp32 dq, dk, dv (3 T D), each part 64-byte aligned.
int64_t flash_bf16_scratch_floats(const AttentionShape& s, FlashTiles tiles, int threads);

// y: [B, T, H*D]; lse: [B, H, T] log-sum-exp of each row of scaled scores (kept for backward).
template <typename T>
void flash_attention_fwd(T* y, T* lse, const T* qkv, const AttentionShape& s, const DropoutKey& drop,
                         const FlashWorkspace<T>& ws);

// Accumulates into dqkv. y and lse are the forward's outputs.
template <typename T>
void flash_attention_bwd(T* dqkv, const T* dy, const T* qkv, const T* y, const T* lse, const AttentionShape& s,
                         const DropoutKey& drop, const FlashWorkspace<T>& ws);

// The same with q|k|v and y kept in bf16 alone, as a bf16 step's layers keep the fused core's input and
// output (PyTorch's autocast keeps scaled_dot_product_attention's in bf16), under ws.bf16_products only
// (std::invalid_argument otherwise). The head-major copy is a permutation of these q|k|v, y is the float
// forward's y rounded (float_to_bf16), and the backward computes rowsum(dY * Y) from these y: the results
// are the bits of the float entries given the same values as floats.
void flash_attention_fwd(bf16* y, float* lse, const bf16* qkv, const AttentionShape& s, const DropoutKey& drop,
                         const FlashWorkspace<float>& ws);
void flash_attention_bwd(float* dqkv, const float* dy, const bf16* qkv, const bf16* y, const float* lse,
                         const AttentionShape& s, const DropoutKey& drop, const FlashWorkspace<float>& ws);

}  // namespace gf::ops
