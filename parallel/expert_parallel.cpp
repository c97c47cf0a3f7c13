#include "parallel/expert_parallel.h"

#include <cstring>

namespace gf {

void ExpertParallel::exchange_counts(const int64_t* send, int64_t* recv, int64_t per_rank) const {
  if (ep_ && ep_->size() > 1) ep_->alltoall(send, recv, per_rank);
  else std::memcpy(recv, send, sizeof(int64_t) * static_cast<size_t>(per_rank));
}

void ExpertParallel::exchange_rows(const float* send, const int64_t* send_rows, float* recv, const int64_t* recv_rows,
                                   int64_t cols) const {
  if (ep_ && ep_->size() > 1) ep_->alltoallv_rows(send, send_rows, recv, recv_rows, cols);
  else if (recv != send) std::memcpy(recv, send, sizeof(float) * static_cast<size_t>(send_rows[0] * cols));
}

void ExpertParallel::allgather(float* data, int64_t n) const {
  if (ep_ && ep_->size() > 1) ep_->allgather(data, n);
}

void ExpertParallel::reduce_scatter(float* data, int64_t n) const {
  if (ep_ && ep_->size() > 1) ep_->reduce_scatter_sum(data, n);
}

}  // namespace gf
