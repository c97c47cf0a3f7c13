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
#include "parallel/communicator_detail.h"
#include "parallel/watchdog.h"

namespace gf {
namespace comm_detail {

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

}  // namespace comm_detail

using namespace comm_detail;

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

namespace {
// Whether a launcher started this process (Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; PMIx and PMI-1/2 launchers,
// srun among them, set PMIX_RANK or PMI_RANK / PMI_FD).
bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_FD"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}
}  // namespace

MpiEnvironment::MpiEnvironment(int* argc, char*** argv) {
  // A process started without a launcher (no mpirun, srun or PMIx around it) is an Open MPI singleton, which by
  // default forks a supporting daemon (orted) so that it could spawn processes later: about 0.1 s of every one-rank
  // start, and a second process. gridformer never spawns, so the singleton runs alone. Under a launcher the
  // parameter names a component that is not used; a value the user set is kept.
  setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
  // A singleton has no peer to reach, yet Open MPI 4.1 brings up UCX to choose its point-to-point layer: 0.19 s of
  // a 0.27 s one-rank start on this project's 2-core machines. ob1 (over shared memory and self) is picked for it
  // instead. Only without a launcher: under one, UCX may be the fast path between hosts; a value the user set is kept.
  if (!launched_by_mpi()) setenv("OMPI_MCA_pml", "ob1", 0);
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

namespace {
int64_t shard_size(int64_t n, int parts, int k) { return shard_begin(n, parts, k + 1) - shard_begin(n, parts, k); }
}  // namespace

int64_t ring_reduce_scatter_sent(int64_t n, int parts, int pos) {
  return parts <= 1 ? 0 : n - shard_size(n, parts, pos);
}

int64_t ring_allgather_sent(int64_t n, int parts, int pos) {
  return parts <= 1 ? 0 : n - shard_size(n, parts, (pos + 1) % parts);
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
  stats_->messages += size_ - 1;  // one to each other rank
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
  stats_->messages += size_ - 1;  // one to each other rank (an empty one too: MPI posts it)
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
