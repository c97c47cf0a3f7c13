// What parallel/communicator.cpp and parallel/communicator_ring.cpp share (internal to the two): MPI's handles in
// the Communicator's opaque words, the wait loop every MPI wait goes through (and the hook by which it advances the
// rings started in the background), the access to a Communicator's MPI communicator, the tags of the ring messages,
// and the step timeline's span of one call.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <cstring>

#include "core/trace/trace.h"
#include "parallel/communicator.h"

namespace gf {
namespace comm_detail {

// MPI's handles in our opaque words (Open MPI's are pointers, MPICH's ints).
static_assert(sizeof(MPI_Comm) <= sizeof(std::uintptr_t) && sizeof(MPI_Request) <= sizeof(std::uintptr_t));
template <typename H>
inline H from_raw(std::uintptr_t raw) {
  H h;
  std::memcpy(&h, &raw, sizeof h);
  return h;
}
template <typename H>
inline std::uintptr_t to_raw(H h) {
  std::uintptr_t raw = 0;
  std::memcpy(&raw, &h, sizeof h);
  return raw;
}

// Waits for `n` requests as communicator.cpp describes (parallel.hang_timeout's watchdog); `peers[k]`: the group rank
// request k waits for (-1: not known). While it polls it calls progress_rings (set by communicator_ring.cpp once a
// ring runs in the background) with the requests it waits for.
extern void (*progress_rings)(const MPI_Request* waited);
void wait_all(MPI_Request* req, int n, const int* peers, const CallLog* log, uint64_t call);

inline constexpr int kBlockingTag = 7;
inline constexpr int kUserTagBase = 100;

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

}  // namespace comm_detail

// A Communicator's and a Request's MPI handles (friend of both).
struct MpiAccess {
  static MPI_Comm comm(const Communicator& c) { return c.has_comm_ ? comm_detail::from_raw<MPI_Comm>(c.raw_) : MPI_COMM_NULL; }
  static void set(Communicator& c, MPI_Comm m) {
    c.raw_ = comm_detail::to_raw(m);
    c.has_comm_ = true;
  }
  static Request wrap(MPI_Request r, CallLog* log, uint64_t call, int peer) {
    Request q;
    q.raw_ = comm_detail::to_raw(r);
    q.active_ = r != MPI_REQUEST_NULL;
    q.log_ = log;
    q.call_ = call;
    q.peer_ = peer;
    if (!q.active_) log->done(call);
    return q;
  }
};

}  // namespace gf
