// The communicator's rings (parallel/communicator.h): the reduce-scatter / all-gather state machine over a group's
// ranks (MPI point-to-point messages between neighbours, or collectives: mpi, MPI's non-blocking collectives over the
// same shards), the rings started in the background and advanced by every wait, and the Communicator's reductions
// and gathers built on it. The rest of the communicator is parallel/communicator.cpp.
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/communicator_detail.h"

namespace gf {

using namespace comm_detail;

// ---- the ring state machine ----

namespace {

// kBits16: 16-bit values (bf16) that are only moved (all-gather), never reduced.
enum class Dtype { kFloat, kDouble, kBits16 };

size_t elem_size(Dtype t) {
  return t == Dtype::kFloat ? sizeof(float) : t == Dtype::kDouble ? sizeof(double) : sizeof(uint16_t);
}
MPI_Datatype mpi_type(Dtype t) {
  return t == Dtype::kFloat ? MPI_FLOAT : t == Dtype::kDouble ? MPI_DOUBLE : MPI_UINT16_T;
}

template <typename T>
void reduce_typed(T* dst, const T* src, int64_t n, ReduceOp op) {
  if (op == ReduceOp::kSum) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i] + dst[i];
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = std::max(dst[i], src[i]);
  }
}

void reduce_into(void* dst, const void* src, int64_t n, Dtype t, ReduceOp op) {
  if (t == Dtype::kBits16) throw std::logic_error("communicator: 16-bit values are gathered, never reduced");
  if (t == Dtype::kFloat) reduce_typed(static_cast<float*>(dst), static_cast<const float*>(src), n, op);
  else reduce_typed(static_cast<double*>(dst), static_cast<const double*>(src), n, op);
}

}  // namespace

struct PendingAllreduce::State {
  enum Phase { kReduceScatter, kAllGather, kDone };
  MPI_Comm comm;
  int rank, size, tag;
  CommStats* stats;
  CallLog* log;
  uint64_t call;  // this all-reduce's id in `log`
  char* data;
  int64_t n;
  Dtype dtype;
  ReduceOp op;
  Phase phase, last;  // the phases to run: [phase, last]
  int step = 0;
  int recv_chunk = 0;
  std::vector<char> tmp;
  MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  // collectives: mpi (Communicator::set_mpi_collectives): each phase is one of MPI's non-blocking
  // collectives over the same shards (MPI_Ireduce_scatter, then MPI_Iallgatherv), so each shard's sum
  // is computed on one rank and copied to the others: identical on every rank, as with the ring.
  // A started (background) all-reduce is one MPI_Iallreduce instead: MPI wants the collectives of a
  // communicator started in the same order on every rank, and the second phase of a chained pair
  // would start whenever each rank's test() got to it.
  bool mpi = false, mpi_single = false;
  std::vector<int> counts, displs;

  int64_t begin(int k) const { return shard_begin(n, size, ((k % size) + size) % size); }
  int64_t count(int k) const {
    const int c = ((k % size) + size) % size;
    return shard_begin(n, size, c + 1) - shard_begin(n, size, c);
  }
  char* at(int k) const { return data + begin(k) * static_cast<int64_t>(elem_size(dtype)); }

  void post_mpi() {
    if (counts.empty()) {
      for (int r = 0; r < size; ++r) {
        counts.push_back(static_cast<int>(count(r)));
        displs.push_back(static_cast<int>(begin(r)));
      }
    }
    const MPI_Datatype t = mpi_type(dtype);
    if (mpi_single) {
      MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), t, op == ReduceOp::kSum ? MPI_SUM : MPI_MAX, comm, &req[0]);
    } else if (phase == kReduceScatter) {
      // In place: the input is the whole buffer, this rank's shard sum lands at its start (moved in advance()).
      MPI_Ireduce_scatter(MPI_IN_PLACE, data, counts.data(), t, op == ReduceOp::kSum ? MPI_SUM : MPI_MAX, comm, &req[0]);
    } else {
      MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(), displs.data(), t, comm, &req[0]);
    }
    req[1] = MPI_REQUEST_NULL;
    stats->messages += 1;
  }

  void post() {
    if (mpi) return post_mpi();
    const int next = (rank + 1) % size, prev = (rank - 1 + size) % size;
    int send_chunk;
    void* recv_buf;
    if (phase == kReduceScatter) {
      send_chunk = rank - step - 1;
      recv_chunk = rank - step - 2;
      recv_buf = tmp.data();
    } else {
      send_chunk = rank - step;
      recv_chunk = rank - step - 1;
      recv_buf = at(recv_chunk);
    }
    const int64_t sc = count(send_chunk), rc = count(recv_chunk);
    MPI_Irecv(recv_buf, static_cast<int>(rc), mpi_type(dtype), prev, tag, comm, &req[0]);
    MPI_Isend(at(send_chunk), static_cast<int>(sc), mpi_type(dtype), next, tag, comm, &req[1]);
    stats->bytes_sent += sc * static_cast<int64_t>(elem_size(dtype));
    stats->messages += 1;
  }

  // The posted step has completed: apply it and post the next one (or finish).
  void advance() {
    if (mpi_single) {
      phase = kDone;
      log->done(call);
      return;
    }
    if (mpi) {
      if (phase == kReduceScatter && begin(rank) > 0)
        std::memmove(at(rank), data, static_cast<size_t>(count(rank)) * elem_size(dtype));
      phase = phase == last ? kDone : static_cast<Phase>(phase + 1);
      if (phase != kDone) post();
      else log->done(call);
      return;
    }
    if (phase == kReduceScatter) reduce_into(at(recv_chunk), tmp.data(), count(recv_chunk), dtype, op);
    if (++step == size - 1) {
      step = 0;
      // The receive buffer is the reduce-scatter's alone: given back as soon as it ends, not when the
      // handle goes (ZeRO-2 and 3 keep every unit's handle until the next step: a quarter of the arena
      // at dp4 otherwise).
      if (phase == kReduceScatter) std::vector<char>().swap(tmp);
      phase = phase == last ? kDone : static_cast<Phase>(phase + 1);
    }
    if (phase != kDone) post();
    else log->done(call);
  }

  // The ring's step waits for the previous rank's message (req[0]) and its own to the next (req[1]);
  // MPI's collectives name no one peer.
  void wait_step() {
    const int peers[2] = {mpi ? -1 : (rank - 1 + size) % size, mpi ? -1 : (rank + 1) % size};
    wait_all(req, 2, peers, log, call);
  }
};

namespace {

// The ring collectives posted and not finished (MPI's own collectives progress themselves).
std::vector<PendingAllreduce::State*>& active_rings() {
  static std::vector<PendingAllreduce::State*> v;
  return v;
}

void forget_ring(PendingAllreduce::State* s) {
  auto& v = active_rings();
  v.erase(std::remove(v.begin(), v.end(), s), v.end());
}

// Each active ring but the one waited for: its posted step tested, and applied if it completed.
void progress_active_rings(const MPI_Request* waited) {
  auto& v = active_rings();
  for (size_t i = 0; i < v.size();) {
    PendingAllreduce::State* s = v[i];
    if (s->req == waited) {
      ++i;
      continue;
    }
    int flag = 0;
    MPI_Testall(2, s->req, &flag, MPI_STATUSES_IGNORE);
    if (flag) s->advance();
    if (s->phase == PendingAllreduce::State::kDone) forget_ring(s);  // v shrank: the same i is the next
    else ++i;
  }
}

}  // namespace

PendingAllreduce::PendingAllreduce() = default;
PendingAllreduce::PendingAllreduce(PendingAllreduce&&) noexcept = default;
PendingAllreduce& PendingAllreduce::operator=(PendingAllreduce&& o) noexcept {
  if (this != &o) {
    if (s_ && s_->phase != State::kDone) wait();
    if (s_) forget_ring(s_.get());
    s_ = std::move(o.s_);
  }
  return *this;
}
PendingAllreduce::~PendingAllreduce() {
  if (s_ && s_->phase != State::kDone) wait();
  if (s_) forget_ring(s_.get());
}

bool PendingAllreduce::done() const { return !s_ || s_->phase == State::kDone; }

bool PendingAllreduce::test() {
  while (!done()) {
    int flag = 0;
    MPI_Testall(2, s_->req, &flag, MPI_STATUSES_IGNORE);
    if (!flag) return false;
    s_->advance();
  }
  forget_ring(s_.get());
  return true;
}

void PendingAllreduce::wait() {
  while (!done()) {
    s_->wait_step();
    s_->advance();
  }
  if (s_) forget_ring(s_.get());
}

namespace {

PendingAllreduce::State* make_state(MPI_Comm comm, int rank, int size, int tag, CommStats* stats, CallLog* log,
                                    const char* name, void* data, int64_t n, Dtype t, ReduceOp op, int first, int last,
                                    bool mpi, bool background = false) {
  auto* s = new PendingAllreduce::State{};
  s->log = log;
  s->call = log->begin(CallLog::Kind::kCollective, name, n * static_cast<int64_t>(elem_size(t)), -1,
                       background ? tag - kUserTagBase : -1);
  s->mpi = mpi;
  s->mpi_single = mpi && background && first != last;  // a started all-reduce: one MPI_Iallreduce
  s->comm = comm;
  s->rank = rank;
  s->size = size;
  s->tag = tag;
  s->stats = stats;
  s->data = static_cast<char*>(data);
  s->n = n;
  s->dtype = t;
  s->op = op;
  s->phase = static_cast<PendingAllreduce::State::Phase>(first);
  s->last = static_cast<PendingAllreduce::State::Phase>(last);
  if (first == PendingAllreduce::State::kReduceScatter && !mpi)
    s->tmp.resize(static_cast<size_t>(shard_begin(n, size, 1)) * elem_size(t));  // the largest shard
  stats->collectives += 1;
  s->post();
  if (!mpi) {
    active_rings().push_back(s);
    progress_rings = progress_active_rings;
  }
  return s;
}

}  // namespace

// A blocking ring over phases [first, last] (0: reduce-scatter, 1: all-gather).
void Communicator::ring(void* data, int64_t n, int elem_bytes, ReduceOp op, int first, int last) const {
  if (size_ <= 1) return;
  const char* what = first == last ? (first == 0 ? "reduce-scatter" : "all-gather") : "all-reduce";
  const Dtype t = elem_bytes == 8 ? Dtype::kDouble : elem_bytes == 2 ? Dtype::kBits16 : Dtype::kFloat;
  CommSpan span(what, n * static_cast<int64_t>(elem_size(t)), name_, size_, *stats_);
  PendingAllreduce p;
  p.s_.reset(make_state(MpiAccess::comm(*this), rank_, size_, kBlockingTag, stats_.get(), log_.get(), what, data, n, t,
                        op, first, last, mpi_collectives_));
  p.wait();
}

void Communicator::allreduce_sum(float* data, int64_t n) const { ring(data, n, 4, ReduceOp::kSum, 0, 1); }
void Communicator::allreduce_sum(double* data, int64_t n) const { ring(data, n, 8, ReduceOp::kSum, 0, 1); }
void Communicator::allreduce_max(float* data, int64_t n) const { ring(data, n, 4, ReduceOp::kMax, 0, 1); }
void Communicator::allreduce_max(double* data, int64_t n) const { ring(data, n, 8, ReduceOp::kMax, 0, 1); }
void Communicator::reduce_scatter_sum(float* data, int64_t n) const { ring(data, n, 4, ReduceOp::kSum, 0, 0); }
void Communicator::allgather(float* data, int64_t n) const { ring(data, n, 4, ReduceOp::kSum, 1, 1); }
void Communicator::allgather(uint16_t* data, int64_t n) const { ring(data, n, 2, ReduceOp::kSum, 1, 1); }

PendingAllreduce Communicator::start_allreduce_sum(float* data, int64_t n, int tag) const {
  PendingAllreduce p;
  if (size_ <= 1) return p;
  // The ring runs in the background (advanced between layers); this span is its first messages' posting.
  CommSpan span("all-reduce start", n * static_cast<int64_t>(sizeof(float)), name_, size_, *stats_);
  span.span().arg("tag", tag);
  p.s_.reset(make_state(MpiAccess::comm(*this), rank_, size_, kUserTagBase + tag, stats_.get(), log_.get(), "all-reduce",
                        data, n, Dtype::kFloat, ReduceOp::kSum, 0, 1, mpi_collectives_, true));
  return p;
}

PendingAllreduce Communicator::start_reduce_scatter_sum(float* data, int64_t n, int tag) const {
  PendingAllreduce p;
  if (size_ <= 1) return p;
  CommSpan span("reduce-scatter start", n * static_cast<int64_t>(sizeof(float)), name_, size_, *stats_);
  span.span().arg("tag", tag);
  p.s_.reset(make_state(MpiAccess::comm(*this), rank_, size_, kUserTagBase + tag, stats_.get(), log_.get(),
                        "reduce-scatter", data, n, Dtype::kFloat, ReduceOp::kSum, 0, 0, mpi_collectives_, true));
  return p;
}

PendingAllreduce Communicator::start_allgather(float* data, int64_t n, int tag) const {
  PendingAllreduce p;
  if (size_ <= 1) return p;
  CommSpan span("all-gather start", n * static_cast<int64_t>(sizeof(float)), name_, size_, *stats_);
  span.span().arg("tag", tag);
  p.s_.reset(make_state(MpiAccess::comm(*this), rank_, size_, kUserTagBase + tag, stats_.get(), log_.get(), "all-gather",
                        data, n, Dtype::kFloat, ReduceOp::kSum, 1, 1, mpi_collectives_, true));
  return p;
}

}  // namespace gf
