// Context parallelism as the model sees it (never a communicator): each sample's T positions are
// cut into `size()` contiguous chunks of T / size(), and rank c of the context group holds chunk c
// (global positions [c T/size(), (c+1) T/size())) of every sample of the micro-batch. Everything but
// the attention core works on those rows alone; the core runs DeepSpeed-Ulysses style (MindFormers'
// `context_parallel_algo: ulysses_cp`): an all-to-all turns the sequence-split q|k|v of all heads into
// the whole sequence of 1/size() of the heads, the causal core runs unchanged on it, and a second
// all-to-all turns its output back. With one rank every exchange is a copy.
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/communicator.h"

namespace gf {

class ContextParallel {
 public:
  ContextParallel() = default;  // one rank
  explicit ContextParallel(const Communicator* cp) : cp_(cp != nullptr && cp->size() > 1 ? cp : nullptr) {}
  int size() const { return cp_ ? cp_->size() : 1; }
  int rank() const { return cp_ ? cp_->rank() : 0; }
  bool on() const { return cp_ != nullptr; }

  // A row of q|k|v (or of the core's output) is `segments` runs of whole heads, each `widths[s]`
  // floats; every width is divisible by size(), and rank j's share of a segment is its j-th
  // 1/size() slice (its heads).
  //
  // seq_to_heads: local [B, Tl, sum(widths)] (this rank's chunk of every sample, all heads) ->
  // heads [B, Tl * size(), sum(widths) / size()] (every position, this rank's heads, each segment's
  // slice in segment order). `send` and `recv` are scratch of B Tl sum(widths) floats each.
  void seq_to_heads(const float* local, float* heads, int64_t B, int64_t Tl, const std::vector<int64_t>& widths,
                    float* send, float* recv) const;
  // The inverse: heads [B, Tl * size(), sum(widths) / size()] -> local [B, Tl, sum(widths)].
  void heads_to_seq(const float* heads, float* local, int64_t B, int64_t Tl, const std::vector<int64_t>& widths,
                    float* send, float* recv) const;

 private:
  const Communicator* cp_ = nullptr;
};

}  // namespace gf
