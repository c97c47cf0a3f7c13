// Each communicator's recent calls, for the hang report (parallel/watchdog.h): op, sequence number,
// bytes, peer, in a fixed ring of the last kKept calls. Recording a call is a few stores, no
// allocation and no clock: the ring collectives are on the hot path.
//
// Sequence numbers: the group's collectives (all-reduce, reduce-scatter, all-gather, started
// all-reduces, broadcast, barrier, gather, all-to-all) share one count, 1, 2, 3, ... which is the
// same on every rank of the group (every rank calls them in the same order), so "tp all-reduce #12"
// names one call across the group. Sends and receives are counted apart (this rank's n-th send on
// the group, its n-th receive): a pipeline stage's sends and its neighbour's receives pair up per
// (peer, tag), not by a shared count.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace gf {

struct CallRecord {
  const char* op = "";  // a string literal: "all-reduce", "send", ...
  int64_t seq = 0;      // see above
  int64_t bytes = 0;    // the call's payload (a send's or receive's message; a collective's buffer)
  int peer = -1;        // group rank of a send's destination or a receive's source; -1 for collectives
  int tag = -1;         // a point-to-point message's tag (or a started all-reduce's); -1 otherwise
  uint64_t id = 0;      // the log's running index of the call (0: an empty slot)
  bool done = false;    // finished on this rank
};

class CallLog {
 public:
  static constexpr int kKept = 8;
  enum class Kind { kCollective, kSend, kRecv };

  CallLog();  // registers itself (for_each_log); not copyable or movable: Communicator holds it by pointer
  ~CallLog();
  CallLog(const CallLog&) = delete;
  CallLog& operator=(const CallLog&) = delete;

  // A call starts: returns its id, for done().
  uint64_t begin(Kind kind, const char* op, int64_t bytes, int peer = -1, int tag = -1) {
    CallRecord& r = ring_[count_ % kKept];
    r.op = op;
    r.seq = kind == Kind::kCollective ? ++collectives_ : kind == Kind::kSend ? ++sends_ : ++recvs_;
    r.bytes = bytes;
    r.peer = peer;
    r.tag = tag;
    r.id = ++count_;
    r.done = false;
    return r.id;
  }
  void done(uint64_t id) {
    CallRecord& r = ring_[(id - 1) % kKept];
    if (r.id == id) r.done = true;
  }
  // The record of call `id` while it is among the last kKept (else nullptr).
  const CallRecord* find(uint64_t id) const {
    const CallRecord& r = ring_[(id - 1) % kKept];
    return id != 0 && r.id == id ? &r : nullptr;
  }

  // The last min(kKept, calls()) calls, oldest first.
  template <typename F>
  void for_each(F&& f) const {
    for (uint64_t i = count_ > kKept ? count_ - kKept : 0; i < count_; ++i) f(ring_[i % kKept]);
  }
  uint64_t calls() const { return count_; }
  int64_t collectives() const { return collectives_; }
  int64_t sends() const { return sends_; }
  int64_t recvs() const { return recvs_; }

  // The owning communicator's group: its name, size, this rank, and the MPI handle (opaque; 0 for a
  // one-rank group), kept here so that the report can name groups and map their ranks to world ranks.
  const char* name = "";
  int rank = 0, size = 1;
  std::uintptr_t comm = 0;
  bool has_comm = false;

  // Every live log of this process (the report lists them all), in creation order.
  template <typename F>
  static void for_each_log(F&& f) {
    for (const CallLog* l = first(); l; l = l->next_) f(*l);
  }

 private:
  static const CallLog* first();
  std::array<CallRecord, kKept> ring_{};
  uint64_t count_ = 0;
  int64_t collectives_ = 0, sends_ = 0, recvs_ = 0;
  CallLog *prev_ = nullptr, *next_ = nullptr;
};

// One record as the report prints it: "all-reduce #12 (4096 bytes) done", "send #3 to rank 1 tag 5 (64 bytes) in flight".
std::string describe_call(const CallRecord& r);

}  // namespace gf
