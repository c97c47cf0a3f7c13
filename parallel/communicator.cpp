#include "parallel/communicator.h"

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "core/trace/trace.h"
#include "parallel/watchdog.h"

namespace gf {
namespace {

// MPI's handles in our opaque words (Open MPI's are pointers, MPICH's ints).
static_assert(sizeof(MPI_Comm) <= sizeof(std::uintptr_t) && sizeof(MPI_Request) <= sizeof(std::uintptr_t));
template <typename H>
H from_raw(std::uintptr_t raw) {
  H h;
  std::memcpy(&h, &raw, sizeof h);
  return h;
}
template <typename H>
std::uintptr_t to_raw(H h) {
  std::uintptr_t raw = 0;
  std::memcpy(&raw, &h, sizeof h);
  return raw;
}

// Waits for `n` requests (MPI_Waitall's job) as a loop of MPI_Testall, so that a wait that makes no
// progress for parallel.hang_timeout seconds ends the job with a report (parallel/watchdog.h) instead
// of hanging. The first millisecond spins on MPI_Testall alone (the clock is read every 16 tests), as
// MPI_Waitall would; up to 1 s each test is followed by sched_yield (a shared core goes to the ranks
// that compute); after that by a 100 us sleep. From 100 ms on it looks, every 10 ms, for another
// rank's hang report or its own timeout. `peers[k]`: the group rank request k waits for (-1: not known).
// While a wait polls, the rings started in the background and not yet finished are advanced too
// (progress_rings, set below; never the one whose requests are waited for). A ring advances only
// while every rank of it is inside MPI on its behalf: two ranks each waiting on a different started
// collective (a weight gather on one, an older gradient reduce-scatter on the other: which one a rank
// waits for depends on what its tests found finished) would otherwise wait for each other for good.
void (*progress_rings)(const MPI_Request* waited) = nullptr;

void wait_all(MPI_Request* req, int n, const int* peers, const CallLog* log, uint64_t call) {
  int flag = 0;
  MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE);
  if (flag) return;
  if (progress_rings) progress_rings(req);
  using clock = std::chrono::steady_clock;
  const clock::time_point t0 = clock::now();
  const double timeout = hang::timeout_s();
  double waited = 0, next_look = 0.1;
  for (unsigned i = 1;; ++i) {
    MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE);
    if (flag) return;
    if (progress_rings) progress_rings(req);
    if (waited < 1e-3 && i % 16 != 0) continue;
    waited = std::chrono::duration<double>(clock::now() - t0).count();
    if (waited < 1e-3) continue;
    if (waited < 1.0) sched_yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (timeout <= 0 || waited < next_look) continue;
    next_look = waited + 0.01;
    if (waited < timeout && !hang::report_arrived()) continue;
    hang::Waiting w{log, call, -1, waited};
    for (int k = 0; k < n; ++k) {  // the first request still open names the peer
      int done = 0;
      MPI_Test(&req[k], &done, MPI_STATUS_IGNORE);
      if (!done) {
        w.peer = peers[k];
        break;
      }
    }
    hang::report_and_abort(w);
  }
}

}  // namespace

struct MpiAccess {
  static MPI_Comm comm(const Communicator& c) { return c.has_comm_ ? from_raw<MPI_Comm>(c.raw_) : MPI_COMM_NULL; }
  static void set(Communicator& c, MPI_Comm m) {
    c.raw_ = to_raw(m);
    c.has_comm_ = true;
  }
  static Request wrap(MPI_Request r, CallLog* log, uint64_t call, int peer) {
    Request q;
    q.raw_ = to_raw(r);
    q.active_ = r != MPI_REQUEST_NULL;
    q.log_ = log;
    q.call_ = call;
    q.peer_ = peer;
    if (!q.active_) log->done(call);
    return q;
  }
};

bool Request::test() {
  if (!active_) return true;
  MPI_Request r = from_raw<MPI_Request>(raw_);
  int done = 0;
  MPI_Test(&r, &done, MPI_STATUS_IGNORE);
  raw_ = to_raw(r);
  active_ = done == 0;
  if (!active_ && log_) log_->done(call_);
  return !active_;
}

void Request::wait() {
  if (!active_) return;
  MPI_Request r = from_raw<MPI_Request>(raw_);
  wait_all(&r, 1, &peer_, log_, call_);
  raw_ = to_raw(r);
  active_ = false;
  if (log_) log_->done(call_);
}

MpiEnvironment::MpiEnvironment(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
}

MpiEnvironment::~MpiEnvironment() {
  hang::uninstall();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiEnvironment::abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); std::abort(); }

int64_t shard_begin(int64_t n, int parts, int k) {
  const int64_t base = n / parts, extra = n % parts;
  return k * base + std::min<int64_t>(k, extra);
}

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

constexpr int kBlockingTag = 7;
constexpr int kUserTagBase = 100;

// The step timeline's span of one call on a group of more than one rank (profile_communication):
// its payload bytes, the group's name and size, and, at the end, the bytes this rank sent.
class CommSpan {
 public:
  CommSpan(const char* name, int64_t bytes, const char* group, int ranks, const CommStats& stats)
      : span_("comm", name, trace::kOn | trace::kCommunication), stats_(stats), sent0_(stats.bytes_sent) {
    span_.arg("bytes", static_cast<double>(bytes)).arg("ranks", ranks).arg("group", *group ? group : "unnamed");
  }
  ~CommSpan() { span_.arg("sent", static_cast<double>(stats_.bytes_sent - sent0_)); }
  trace::Span& span() { return span_; }

 private:
  trace::Span span_;
  const CommStats& stats_;
  int64_t sent0_;
};

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

// ---- Communicator ----

Communicator Communicator::world() {
  Communicator c;
  MPI_Comm w;
  MPI_Comm_dup(MPI_COMM_WORLD, &w);
  MpiAccess::set(c, w);
  MPI_Comm_rank(w, &c.rank_);
  MPI_Comm_size(w, &c.size_);
  c.set_name("world");
  c.describe_log();
  return c;
}

Communicator& Communicator::operator=(Communicator&& o) noexcept {
  std::swap(raw_, o.raw_);
  std::swap(has_comm_, o.has_comm_);
  std::swap(rank_, o.rank_);
  std::swap(size_, o.size_);
  std::swap(name_, o.name_);
  std::swap(stats_, o.stats_);
  std::swap(mpi_collectives_, o.mpi_collectives_);
  std::swap(log_, o.log_);
  return *this;
}

Communicator::~Communicator() {
  if (has_comm_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    MPI_Comm c = MpiAccess::comm(*this);
    if (!finalized) MPI_Comm_free(&c);
  }
}

Communicator Communicator::split(int color, int key) const {
  Communicator c;
  if (!has_comm_) return c;
  MPI_Comm s;
  MPI_Comm_split(MpiAccess::comm(*this), color, key, &s);
  MpiAccess::set(c, s);
  MPI_Comm_rank(s, &c.rank_);
  MPI_Comm_size(s, &c.size_);
  c.mpi_collectives_ = mpi_collectives_;
  c.describe_log();
  return c;
}

void Communicator::describe_log() {
  log_->rank = rank_;
  log_->size = size_;
  log_->comm = raw_;
  log_->has_comm = has_comm_;
}

// Waits (wait_all) for one of MPI's non-blocking collectives, started as `req` and begun in the log as `call`.
void Communicator::wait_collective(void* req, uint64_t call) const {
  const int no_peer = -1;
  wait_all(static_cast<MPI_Request*>(req), 1, &no_peer, log_.get(), call);
  log_->done(call);
}

void Communicator::barrier() const {
  if (size_ <= 1) return;
  CommSpan span("barrier", 0, name_, size_, *stats_);
  const uint64_t call = log_->begin(CallLog::Kind::kCollective, "barrier", 0);
  MPI_Request r;
  MPI_Ibarrier(MpiAccess::comm(*this), &r);
  wait_collective(&r, call);
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

void Communicator::broadcast(void* data, int64_t bytes, int root) const {
  if (size_ > 1) {
    CommSpan span("broadcast", bytes, name_, size_, *stats_);
    const uint64_t call = log_->begin(CallLog::Kind::kCollective, "broadcast", bytes);
    MPI_Request r;
    MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, MpiAccess::comm(*this), &r);
    wait_collective(&r, call);
    if (rank_ == root) stats_->bytes_sent += bytes;  // the payload; MPI chooses the tree
    stats_->collectives += 1;
  }
}

std::vector<std::string> Communicator::gather_strings(const std::string& s, int root) const {
  if (size_ == 1) return {s};
  CommSpan span("gather", static_cast<int64_t>(s.size()), name_, size_, *stats_);
  const int n = static_cast<int>(s.size());
  std::vector<int> sizes(rank_ == root ? static_cast<size_t>(size_) : 0), displs(sizes.size());
  const uint64_t call = log_->begin(CallLog::Kind::kCollective, "gather", n);
  MPI_Request r;
  MPI_Igather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, MpiAccess::comm(*this), &r);
  wait_collective(&r, call);
  std::string all;
  if (rank_ == root) {
    int64_t total = 0;
    for (size_t r = 0; r < sizes.size(); ++r) {
      displs[r] = static_cast<int>(total);
      total += sizes[r];
    }
    all.resize(static_cast<size_t>(total));
  }
  MPI_Igatherv(s.data(), n, MPI_CHAR, all.data(), sizes.data(), displs.data(), MPI_CHAR, root, MpiAccess::comm(*this), &r);
  wait_collective(&r, call);
  stats_->bytes_sent += rank_ == root ? 0 : n;
  stats_->collectives += 1;
  std::vector<std::string> out;
  for (size_t r = 0; r < sizes.size(); ++r) out.push_back(all.substr(static_cast<size_t>(displs[r]), static_cast<size_t>(sizes[r])));
  return out;
}

void Communicator::alltoall(const int64_t* send, int64_t* recv, int64_t per_rank) const {
  if (size_ == 1) {
    std::memcpy(recv, send, sizeof(int64_t) * static_cast<size_t>(per_rank));
    return;
  }
  CommSpan span("all-to-all counts", static_cast<int64_t>(sizeof(int64_t)) * per_rank * size_, name_, size_, *stats_);
  const uint64_t call = log_->begin(CallLog::Kind::kCollective, "all-to-all", static_cast<int64_t>(sizeof(int64_t)) * per_rank * size_);
  MPI_Request r;
  MPI_Ialltoall(send, static_cast<int>(per_rank), MPI_INT64_T, recv, static_cast<int>(per_rank), MPI_INT64_T,
                MpiAccess::comm(*this), &r);
  wait_collective(&r, call);
  stats_->bytes_sent += static_cast<int64_t>(sizeof(int64_t)) * per_rank * (size_ - 1);
  stats_->collectives += 1;
}

void Communicator::alltoallv_rows(const float* send, const int64_t* send_rows, float* recv, const int64_t* recv_rows,
                                  int64_t row_floats) const {
  if (size_ == 1) {
    std::memcpy(recv, send, sizeof(float) * static_cast<size_t>(send_rows[0] * row_floats));
    return;
  }
  int64_t rows = 0;
  for (int r = 0; r < size_; ++r) rows += send_rows[r];
  CommSpan span("all-to-all", rows * row_floats * static_cast<int64_t>(sizeof(float)), name_, size_, *stats_);
  // Counts in rows of a contiguous datatype, so that large messages fit MPI's int counts.
  MPI_Datatype row;
  MPI_Type_contiguous(static_cast<int>(row_floats), MPI_FLOAT, &row);
  MPI_Type_commit(&row);
  std::vector<int> sc(static_cast<size_t>(size_)), sd(sc.size()), rc(sc.size()), rd(sc.size());
  int64_t so = 0, ro = 0;
  for (int r = 0; r < size_; ++r) {
    sc[r] = static_cast<int>(send_rows[r]);
    sd[r] = static_cast<int>(so);
    rc[r] = static_cast<int>(recv_rows[r]);
    rd[r] = static_cast<int>(ro);
    so += send_rows[r];
    ro += recv_rows[r];
    if (r != rank_) stats_->bytes_sent += send_rows[r] * row_floats * static_cast<int64_t>(sizeof(float));
  }
  const uint64_t call = log_->begin(CallLog::Kind::kCollective, "all-to-allv", rows * row_floats * static_cast<int64_t>(sizeof(float)));
  MPI_Request r;
  MPI_Ialltoallv(send, sc.data(), sd.data(), row, recv, rc.data(), rd.data(), row, MpiAccess::comm(*this), &r);
  wait_collective(&r, call);
  MPI_Type_free(&row);
  stats_->collectives += 1;
}

Request Communicator::isend(const float* data, int64_t n, int dest, int tag) const {
  MPI_Request r = MPI_REQUEST_NULL;
  if (n > INT32_MAX) throw std::invalid_argument("isend: message of more than 2^31 floats");
  CommSpan span("isend", n * static_cast<int64_t>(sizeof(float)), name_, size_, *stats_);
  span.span().arg("peer", dest).arg("tag", tag);
  const uint64_t call = log_->begin(CallLog::Kind::kSend, "send", n * static_cast<int64_t>(sizeof(float)), dest, tag);
  MPI_Isend(data, static_cast<int>(n), MPI_FLOAT, dest, tag, MpiAccess::comm(*this), &r);
  stats_->bytes_sent += n * static_cast<int64_t>(sizeof(float));
  stats_->messages += 1;
  return MpiAccess::wrap(r, log_.get(), call, dest);
}

Request Communicator::irecv(float* data, int64_t n, int source, int tag) const {
  MPI_Request r = MPI_REQUEST_NULL;
  if (n > INT32_MAX) throw std::invalid_argument("irecv: message of more than 2^31 floats");
  CommSpan span("irecv", n * static_cast<int64_t>(sizeof(float)), name_, size_, *stats_);
  span.span().arg("peer", source).arg("tag", tag);
  const uint64_t call = log_->begin(CallLog::Kind::kRecv, "recv", n * static_cast<int64_t>(sizeof(float)), source, tag);
  MPI_Irecv(data, static_cast<int>(n), MPI_FLOAT, source, tag, MpiAccess::comm(*this), &r);
  return MpiAccess::wrap(r, log_.get(), call, source);
}

int Communicator::tag_upper_bound() const {
  if (!has_comm_) return 32767;
  void* v = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MpiAccess::comm(*this), MPI_TAG_UB, &v, &flag);
  return flag ? *static_cast<int*>(v) : 32767;
}

}  // namespace gf
