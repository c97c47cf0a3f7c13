#include "parallel/communicator.h"

#include <stdexcept>

namespace gf {

MpiEnvironment::MpiEnvironment(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
}

MpiEnvironment::~MpiEnvironment() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiEnvironment::abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); std::abort(); }

Communicator Communicator::world() {
  Communicator c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c.comm_);
  MPI_Comm_rank(c.comm_, &c.rank_);
  MPI_Comm_size(c.comm_, &c.size_);
  return c;
}

Communicator& Communicator::operator=(Communicator&& o) noexcept {
  std::swap(comm_, o.comm_);
  std::swap(rank_, o.rank_);
  std::swap(size_, o.size_);
  return *this;
}

Communicator::~Communicator() {
  if (comm_ != MPI_COMM_NULL) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
}

Communicator Communicator::split(int color, int key) const {
  Communicator c;
  if (comm_ == MPI_COMM_NULL) return c;
  MPI_Comm_split(comm_, color, key, &c.comm_);
  MPI_Comm_rank(c.comm_, &c.rank_);
  MPI_Comm_size(c.comm_, &c.size_);
  return c;
}

void Communicator::barrier() const {
  if (size_ > 1) MPI_Barrier(comm_);
}

void Communicator::allreduce_sum(float* data, int64_t n) const {
  if (size_ > 1) MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_);
}
void Communicator::allreduce_sum(double* data, int64_t n) const {
  if (size_ > 1) MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, comm_);
}
void Communicator::allreduce_max(double* data, int64_t n) const {
  if (size_ > 1) MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_DOUBLE, MPI_MAX, comm_);
}
void Communicator::broadcast(void* data, int64_t bytes, int root) const {
  if (size_ > 1) MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_);
}

}  // namespace gf
