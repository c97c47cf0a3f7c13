// An RAII MPI environment and a move-only communicator that the library takes as an argument
// (never a global). A default-constructed Communicator is the trivial group of one rank, so
// single-rank code paths need no MPI calls at all.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <utility>

namespace gf {

class MpiEnvironment {
 public:
  MpiEnvironment(int* argc, char*** argv);  // MPI_Init_thread(FUNNELED)
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;
  // Stops every rank with `code` (for a failure one rank found after start-up).
  [[noreturn]] static void abort(int code);
};

class Communicator {
 public:
  Communicator() = default;            // the one-rank group, no MPI involved
  static Communicator world();         // a duplicate of MPI_COMM_WORLD
  Communicator(Communicator&& o) noexcept { *this = std::move(o); }
  Communicator& operator=(Communicator&& o) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ranks with the same color form a group, ordered by key.
  Communicator split(int color, int key) const;

  void barrier() const;
  void allreduce_sum(float* data, int64_t n) const;
  void allreduce_sum(double* data, int64_t n) const;
  void allreduce_max(double* data, int64_t n) const;
  void broadcast(void* data, int64_t bytes, int root) const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace gf
