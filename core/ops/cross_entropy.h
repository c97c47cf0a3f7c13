// Softmax cross-entropy over a vocabulary stored padded: logits rows are `ld` wide (the padded
// vocabulary) but only the first `valid` columns are real tokens; the padding is masked out of
// the softmax, so the loss equals the loss over the unpadded vocabulary.
#pragma once
#include <cstdint>

namespace gf::ops {

// losses[r] = logsumexp(logits[r, :valid]) - logits[r, target[r]]; lse[r] keeps the logsumexp
// for backward. A negative target (a row that is not trained: a prompt token of fine-tuning data,
// an end of document under eod_mask_loss) has loss 0 and, in backward, a zero gradient row.
template <typename T>
void cross_entropy_fwd(T* losses, T* lse, const T* logits, const int32_t* targets, int64_t rows,
                       int64_t ld, int64_t valid);

// Overwrites logits with d(loss_scale * sum_r losses[r])/dlogits, i.e.
// (softmax - onehot) * grad_scale for the valid columns and 0 for the padding, with the lse
// that forward wrote. The columns are vocabulary ids [vocab_begin, vocab_begin + ld) (a
// vocabulary-parallel slice); a target outside them contributes no one-hot term here.
template <typename T>
void cross_entropy_bwd_inplace(T* logits, const T* lse, const int32_t* targets, int64_t rows, int64_t ld,
                               int64_t valid, float grad_scale, int64_t vocab_begin = 0);

}  // namespace gf::ops
