// Expert parallelism as the MoE block sees it (never a communicator): the experts of each MoE layer
// divided over the ep ranks of the expert-parallel group in contiguous runs (rank r holds global
// experts [r E_local, (r + 1) E_local)), and the two exchanges of the alltoall dispatcher: the
// per-expert counts, then the token rows (MPI_Alltoallv). With one rank both are copies.
#pragma once
#include <cstdint>

#include "parallel/communicator.h"

namespace gf {

class ExpertParallel {
 public:
  ExpertParallel() = default;  // one rank
  explicit ExpertParallel(const Communicator* ep) : ep_(ep) {}
  int size() const { return ep_ ? ep_->size() : 1; }
  int rank() const { return ep_ ? ep_->rank() : 0; }
  // send[r * per_rank + i] goes to rank r; recv[r * per_rank + i] comes from rank r.
  void exchange_counts(const int64_t* send, int64_t* recv, int64_t per_rank) const;
  // Rows of `cols` floats: send_rows[r] consecutive rows to rank r, recv_rows[r] from rank r.
  void exchange_rows(const float* send, const int64_t* send_rows, float* recv, const int64_t* recv_rows,
                     int64_t cols) const;
  // The allgather dispatcher's collectives, in place over size() equal chunks of n / size()
  // floats (this rank's chunk at rank() * n / size()): every chunk to every rank; the chunks'
  // sum over the ranks left in this rank's chunk.
  void allgather(float* data, int64_t n) const;
  void reduce_scatter(float* data, int64_t n) const;

 private:
  const Communicator* ep_ = nullptr;
};

}  // namespace gf
