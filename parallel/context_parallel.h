// Context parallelism as the model sees it (never a communicator): each sample's T positions are
// split over the `size()` ranks of the context group, T / size() per rank. Everything but the
// attention core works on a rank's rows alone; the core runs in one of two ways (MindFormers'
// `context_parallel_algo`):
//  - ulysses_cp (DeepSpeed-Ulysses): rank c holds the contiguous chunk c of every sample; an
//    all-to-all turns the sequence-split q|k|v of all heads into the whole sequence of 1/size() of
//    the heads, the causal core runs unchanged on it, and a second all-to-all turns its output back.
//  - colossalai_cp (ring attention): the sequence is cut into 2 size() chunks and rank c holds chunks
//    c and 2 size() - 1 - c (Megatron's causal load balance: every rank gets the same share of the
//    causal triangle); each rank keeps its queries and passes its keys and values around the ring,
//    one block per step, combining the partial results with the online softmax
//    (core/ops/ring_attention.h); the next block's transfer overlaps the current block's products.
//    Backward passes the blocks around again; each rank adds its share of a block's key/value
//    gradient to what the previous visitors summed, which arrives while it computes that share,
//    and the sums arrive home after the last step.
//  - hybrid_cp (MindSpeed's USP) with Ulysses degree U and R = size() / U ring groups: context rank
//    c = u + U r sits in Ulysses group r (its U neighbours) and ring group u. The sequence is cut into
//    2R ring chunks, and ring rank r's chunks r and 2R - 1 - r are each cut into U pieces: rank c holds
//    piece u of both. Ulysses' all-to-all gathers the group's pieces into the ring rank's two whole
//    chunks for 1/U of the heads, ring attention runs on those across the R groups, and a second
//    all-to-all brings the output back.
// With one rank every exchange is a copy.
#pragma once
#include <cstdint>
#include <vector>

#include "core/ops/dropout.h"
#include "core/ops/ring_attention.h"
#include "parallel/communicator.h"

namespace gf {

// The ring's scratch: two key|value blocks [rows, 2 Hkv D] (the one in use and the one in flight),
// two blocks of their gradients (this step's, and the last step's in flight to the next rank), the
// gradient arriving from the previous rank, and per-row statistics [B, H, rows] (running maxima,
// rowsum(dy y)).
struct RingScratch {
  float *kv[2] = {nullptr, nullptr}, *dkv[2] = {nullptr, nullptr}, *dkv_in = nullptr;
  float *m = nullptr, *di = nullptr;
};

class ContextParallel {
 public:
  ContextParallel() = default;  // one rank
  // The context group `cp`, and the groups its attention core exchanges in: `ulysses` for the
  // all-to-all (null: none), `ring` for the ring (null: none). ulysses_cp: (cp, cp, null);
  // colossalai_cp: (cp, null, cp); hybrid_cp: the subgroups (ParallelContext::context_ulysses/_ring).
  ContextParallel(const Communicator* cp, const Communicator* ulysses, const Communicator* ring);
  int size() const { return cp_ ? cp_->size() : 1; }
  int rank() const { return cp_ ? cp_->rank() : 0; }
  bool on() const { return cp_ != nullptr; }
  // Whether the core is ring attention (colossalai_cp, hybrid_cp), and whether Ulysses' all-to-all
  // surrounds it (ulysses_cp, hybrid_cp).
  bool ring() const { return ring_ != nullptr; }
  bool ulysses() const { return uly_ != nullptr; }
  // The Ulysses group's size and this rank's place in it (1 and 0 without one): the core sees the
  // heads [ulysses_rank() H / U, (ulysses_rank() + 1) H / U) of this tensor-parallel rank's H.
  int ulysses_size() const { return uly_ ? uly_->size() : 1; }
  int ulysses_rank() const { return uly_ ? uly_->rank() : 0; }
  // Where rank `c`'s `rows` rows per sample sit in the sequence (one chunk, or the ring's two).
  ops::RowChunks rows_of(int c, int64_t rows) const;
  ops::RowChunks rows(int64_t n) const { return rows_of(rank(), n); }
  // Sums a small vector over the context group (MoE's per-sequence statistics).
  void allreduce_sum(double* x, int64_t n) const {
    if (cp_) cp_->allreduce_sum(x, n);
  }

  // Ring attention over q|k|v rows [B rows, W] of this ring rank (q heads at column 0, then the kv
  // heads' keys, then their values; s.rows rows per sample, the ring's chunks r and 2R - 1 - r of the
  // sequence: this rank's own rows, or under hybrid_cp its Ulysses group's gathered ones):
  // y [B rows, H D] and lse [B, H, rows].
  void ring_fwd(const float* qkv, int64_t W, float* y, float* lse, const ops::RingShape& s, const ops::DropoutKey& drop,
                const RingScratch& sc) const;
  // Its backward: dqkv [B rows, W] (zeroed by the caller) gets the q, k and v gradients of these rows.
  void ring_bwd(float* dqkv, const float* dy, const float* qkv, int64_t W, const float* y, const float* lse,
                const ops::RingShape& s, const ops::DropoutKey& drop, const RingScratch& sc) const;

  // A row of q|k|v (or of the core's output) is `segments` runs of whole heads, each `widths[s]`
  // floats; every width is divisible by size(), and rank j's share of a segment is its j-th
  // 1/size() slice (its heads).
  //
  // These exchange in the Ulysses group, whose size P is size() under ulysses_cp.
  // seq_to_heads: local [B, Tl, sum(widths)] (this rank's rows of every sample, all heads) ->
  // heads [B, Tl * P, sum(widths) / P] (the group's rows in sequence order: under ulysses_cp every
  // position, under hybrid_cp the ring rank's two chunks; this rank's heads, each segment's slice in
  // segment order). `send` and `recv` are scratch of B Tl sum(widths) floats each.
  void seq_to_heads(const float* local, float* heads, int64_t B, int64_t Tl, const std::vector<int64_t>& widths,
                    float* send, float* recv) const;
  // The inverse: heads [B, Tl * P, sum(widths) / P] -> local [B, Tl, sum(widths)].
  void heads_to_seq(const float* heads, float* local, int64_t B, int64_t Tl, const std::vector<int64_t>& widths,
                    float* send, float* recv) const;

 private:
  // The all-to-all of both exchanges: `rows` rows of w floats to each rank, as many from each.
  void exchange(const float* send, float* recv, int64_t rows, int64_t w) const;
  // Where ring rank `r`'s `rows` rows per sample sit among the ring's 2 R chunks (R: the ring's size).
  ops::RowChunks ring_rows_of(int r, int64_t rows) const;
  // Where a row of Ulysses rank i (t of Tl per sample) goes among the group's gathered rows:
  // i Tl + t, or under hybrid_cp piece by piece (each of the two chunks' U pieces in order).
  int64_t gathered_row(int i, int64_t t, int64_t Tl) const;
  const Communicator* cp_ = nullptr;
  const Communicator* uly_ = nullptr;
  const Communicator* ring_ = nullptr;
};

}  // namespace gf
