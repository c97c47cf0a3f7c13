// An RAII MPI environment and a move-only communicator that the library takes as an argument
// (never a global). A default-constructed Communicator is the trivial group of one rank, so
// single-rank code paths need no MPI calls at all.
//
// The collectives are rings over MPI point-to-point messages (reduce-scatter, all-gather, and
// all-reduce as the two in turn), written here rather than taken from MPI_Allreduce for three
// reasons: every rank ends with bitwise the same result (replicated activations stay identical
// across tensor-parallel ranks); the bytes each rank sends are counted exactly, per communicator,
// for the communication report; and an all-reduce can run in the background of the backward pass,
// advanced by `test()` between layers (OpenMPI has no progress thread).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/call_log.h"

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

// What one communicator has sent since construction (or the last reset).
struct CommStats {
  int64_t bytes_sent = 0;
  int64_t messages = 0;
  int64_t collectives = 0;
};

enum class ReduceOp { kSum, kMax };

// Element `i` of an `n`-element buffer split into `parts` balanced contiguous shards: shard k is
// [shard_begin(n, parts, k), shard_begin(n, parts, k + 1)).
int64_t shard_begin(int64_t n, int parts, int k);

// The elements the rank at position `pos` of a ring of `parts` sends for an n-element collective, as the rings
// below move them (parallel/communicator_ring.cpp; collectives: mpi sends through MPI and counts none): a
// reduce-scatter sends every shard but its own, an all-gather every shard but the next position's, an all-reduce
// is the two. What gridformer plan predicts a step's bytes from (runner/report/step_comm.h).
int64_t ring_reduce_scatter_sent(int64_t n, int parts, int pos);
int64_t ring_allgather_sent(int64_t n, int parts, int pos);
inline int64_t ring_allreduce_sent(int64_t n, int parts, int pos) {
  return ring_reduce_scatter_sent(n, parts, pos) + ring_allgather_sent(n, parts, pos);
}

class Communicator;

// A non-blocking point-to-point message in flight (Communicator::isend / irecv). Move-only; a
// default-constructed one is done. The buffer must stay alive and untouched until done. The MPI
// handle is kept opaque: no MPI type or header leaves parallel/. wait() is a loop of MPI_Test that
// ends the job after parallel.hang_timeout without progress (parallel/watchdog.h).
class Request {
 public:
  Request() = default;
  Request(Request&& o) noexcept : raw_(o.raw_), active_(o.active_), log_(o.log_), call_(o.call_), peer_(o.peer_) {
    o.active_ = false;
  }
  Request& operator=(Request&& o) noexcept {
    std::swap(raw_, o.raw_);
    std::swap(active_, o.active_);
    std::swap(log_, o.log_);
    std::swap(call_, o.call_);
    std::swap(peer_, o.peer_);
    return *this;
  }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  bool done() const { return !active_; }
  bool test();  // advances it; returns done()
  void wait();

 private:
  friend struct MpiAccess;
  std::uintptr_t raw_ = 0;
  bool active_ = false;
  CallLog* log_ = nullptr;  // the communicator's call log, and this call's id in it
  uint64_t call_ = 0;
  int peer_ = -1;
};

// A ring all-reduce in flight over one buffer. Started by Communicator::start_allreduce; `test()`
// advances it as far as possible without blocking; `wait()` finishes it. The buffer must stay
// alive and untouched until done.
class PendingAllreduce {
 public:
  PendingAllreduce();
  PendingAllreduce(PendingAllreduce&&) noexcept;
  PendingAllreduce& operator=(PendingAllreduce&&) noexcept;
  ~PendingAllreduce();
  bool done() const;
  bool test();  // returns done()
  void wait();

  struct State;  // defined in communicator.cpp

 private:
  friend class Communicator;
  std::unique_ptr<State> s_;
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
  void allreduce_max(float* data, int64_t n) const;
  void allreduce_max(double* data, int64_t n) const;
  // In place over `n` elements split into size() shards (shard_begin): afterwards this rank's
  // shard holds the sum over ranks; the rest of the buffer is scratch.
  void reduce_scatter_sum(float* data, int64_t n) const;
  // In place: every rank's shard of the `n` elements is copied to all ranks.
  void allgather(float* data, int64_t n) const;
  // The same for 16-bit values (a bf16 activation gathered under sequence parallelism); moved bit for bit.
  void allgather(uint16_t* data, int64_t n) const;
  // Background sum all-reduce of a float buffer; `tag` must differ between those in flight.
  PendingAllreduce start_allreduce_sum(float* data, int64_t n, int tag) const;
  // Background reduce-scatter and all-gather (the sharded optimizer's per-layer collectives): the same
  // shards and sums as reduce_scatter_sum and allgather; `tag` as above, unique among all in flight.
  PendingAllreduce start_reduce_scatter_sum(float* data, int64_t n, int tag) const;
  PendingAllreduce start_allgather(float* data, int64_t n, int tag) const;
  void broadcast(void* data, int64_t bytes, int root) const;
  // Every rank's string, in rank order, on `root` (empty elsewhere): checkpoint index fragments.
  std::vector<std::string> gather_strings(const std::string& s, int root) const;
  // MPI_Alltoall of `per_rank` counts to each rank: recv[r * per_rank + i] = rank r's send[rank() * per_rank + i].
  void alltoall(const int64_t* send, int64_t* recv, int64_t per_rank) const;
  // MPI_Alltoallv of rows of `row_floats` floats: send_rows[r] rows (consecutive in `send`, in
  // rank order) go to rank r; recv_rows[r] rows arrive from rank r, in rank order in `recv`.
  // Counts the bytes sent to other ranks.
  void alltoallv_rows(const float* send, const int64_t* send_rows, float* recv, const int64_t* recv_rows,
                      int64_t row_floats) const;

  // Non-blocking point-to-point of `n` floats (pipeline stages): the returned request must be
  // finished with wait() (or test()) before the buffer is reused. The send's bytes are counted.
  Request isend(const float* data, int64_t n, int dest, int tag) const;
  Request irecv(float* data, int64_t n, int source, int tag) const;
  // Blocking forms of the two.
  void send(const float* data, int64_t n, int dest, int tag) const { isend(data, n, dest, tag).wait(); }
  void recv(float* data, int64_t n, int source, int tag) const { irecv(data, n, source, tag).wait(); }
  // The largest tag MPI allows on this communicator (at least 32767).
  int tag_upper_bound() const;

  // parallel.collectives: mpi: the all-reduce, reduce-scatter and all-gather run as MPI's non-blocking
  // collectives over the same shards (MPI_Ireduce_scatter, then MPI_Iallgatherv: each shard summed on one
  // rank and copied, so identical everywhere), and a started all-reduce (the gradient buckets during
  // backward) as one MPI_Iallreduce (MPI's algorithms give every rank the same sum; the MPI tests check
  // it); the cluster's MPI picks the algorithms. The default rings give bitwise-reproducible sums and
  // exact byte counts (stats().bytes_sent counts the rings' messages only). Split groups inherit it.
  void set_mpi_collectives(bool on) { mpi_collectives_ = on; }
  bool mpi_collectives() const { return mpi_collectives_; }

  const CommStats& stats() const { return *stats_; }
  void reset_stats() const { *stats_ = CommStats{}; }
  // The group's last calls (op, sequence number, bytes, peer), for the hang report (parallel/watchdog.h).
  const CallLog& call_log() const { return *log_; }
  // The group's name in the step timeline's communication spans (core/trace/trace.h): "tp", "dp", ...
  // A string literal (the spans keep the pointer). world() is "world"; a split group is "" until named.
  void set_name(const char* name) { name_ = log_->name = name; }
  const char* name() const { return name_; }

 private:
  friend class PendingAllreduce;
  void ring(void* data, int64_t n, int elem_bytes, ReduceOp op, int first, int last) const;  // elem_bytes 2, 4 or 8
  void describe_log();  // the log's copy of rank, size and handle
  void wait_collective(void* mpi_request, uint64_t call) const;
  friend struct MpiAccess;  // communicator.cpp: converts the opaque handles to MPI's types
  // The MPI communicator, opaque here (communicator.cpp's comm() converts it); none without MPI.
  std::uintptr_t raw_ = 0;
  bool has_comm_ = false;
  bool mpi_collectives_ = false;
  int rank_ = 0, size_ = 1;
  const char* name_ = "";
  std::unique_ptr<CommStats> stats_ = std::make_unique<CommStats>();
  std::unique_ptr<CallLog> log_ = std::make_unique<CallLog>();
};

}  // namespace gf
