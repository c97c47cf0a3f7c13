// The point-to-point between pipeline stages, the one training and generation share: a stage's
// hidden state goes forward to the next stage and its gradient back to the previous one, over the
// pipeline group (rank = stage). The neighbours are on a ring (the last stage's next is stage 0):
// the interleaved schedule passes a micro-batch from the last stage's chunk c to the first stage's
// chunk c + 1. Tags are the caller's (the step engine numbers its messages by direction,
// micro-batch and chunk; generation has one message in flight).
#pragma once
#include <cstdint>

#include "parallel/communicator.h"

namespace gf {

class StageLink {
 public:
  explicit StageLink(const Communicator& pp) : pp_(&pp) {}
  int stage() const { return pp_->rank(); }
  int stages() const { return pp_->size(); }
  int prev() const { return (stage() + stages() - 1) % stages(); }
  int next() const { return (stage() + 1) % stages(); }
  // To and from any stage (the step engine routes by virtual stage: ZB-V's V is not a ring).
  Request send_to(int stage, const float* buf, int64_t n, int tag) const { return pp_->isend(buf, n, stage, tag); }
  Request recv_from(int stage, float* buf, int64_t n, int tag) const { return pp_->irecv(buf, n, stage, tag); }
  // The largest tag the group allows.
  int tag_upper_bound() const { return pp_->tag_upper_bound(); }

  // Forward: the hidden state from the previous stage, to the next.
  Request recv_forward(float* buf, int64_t n, int tag) const { return pp_->irecv(buf, n, prev(), tag); }
  Request send_forward(const float* buf, int64_t n, int tag) const { return pp_->isend(buf, n, next(), tag); }
  // Backward: the gradient of this stage's output from the next stage, its input's to the previous.
  Request recv_backward(float* buf, int64_t n, int tag) const { return pp_->irecv(buf, n, next(), tag); }
  Request send_backward(const float* buf, int64_t n, int tag) const { return pp_->isend(buf, n, prev(), tag); }

 private:
  const Communicator* pp_;
};

}  // namespace gf
