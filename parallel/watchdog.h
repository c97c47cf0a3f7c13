// A hang names its rank (parallel.hang_timeout). Every wait of the communicators (parallel/communicator.h)
// is a loop of MPI_Test calls; a wait that makes no progress for hang_timeout seconds starts the report:
//
//  1. the rank writes what it waits for (group, op, sequence number, bytes, the peer when known) and
//     its last calls on every group (parallel/call_log.h), and sends the same facts to every other rank
//     over a side channel: a duplicate of MPI_COMM_WORLD that no other traffic uses, so the report never
//     matches the stuck messages, with non-blocking sends (a stopped rank never answers);
//  2. a rank whose own wait has not timed out yet sees that message in its wait loop (it looks after
//     100 ms of waiting) and reports too, so every live rank that waits reports within about 100 ms;
//  3. each reporter collects the others' reports until every rank has reported or is one of those not
//     arriving (a member of a group a reporter waits in, that did not report) and no report has come
//     for 1 s, or for a grace period (hang_timeout, between 2 and 30 s); the lowest reporting rank then prints one line naming the
//     rank(s) that did not arrive and at which call (the call the ranks that wait for it are in), and
//     MPI_Abort ends the job with exit status kExitStatus. The others stand by for that abort, and
//     abort themselves after another grace period if it does not come.
//
// What is not covered: MPI_Init, the communicator splits and duplicates at start-up, and the few
// collectives before hang_timeout is known (the config checks): they run before install().
//
// The watchdog is one per process (like MPI itself): install() once on every rank after the config is read.
#pragma once
#include <functional>
#include <string>

#include "parallel/call_log.h"

namespace gf::hang {

// The job's exit status after a hang (README "Exit status").
constexpr int kExitStatus = 6;

// Collective over MPI_COMM_WORLD: the side channel and every rank's host name. timeout_s 0: no
// watchdog (waits never time out). Safe to call once per process.
void install(double timeout_s);
// Frees the side channel (before MPI_Finalize; MpiEnvironment's destructor calls it).
void uninstall();
// The installed timeout in seconds (0: none).
double timeout_s();

// Where the report's lines go (each call one line, without a newline). Default: stderr, prefixed
// "[rank N] ". The runner sends them to the rank's log as well.
void set_report_sink(std::function<void(const std::string&)> sink);

// What a timed-out wait was waiting for (communicator.cpp fills it).
struct Waiting {
  const CallLog* log = nullptr;  // the group's log
  uint64_t id = 0;               // the call (log->find(id)), 0 when not known
  int peer = -1;                 // the group rank waited for when known (rings and point-to-point), else -1
  double waited_s = 0;           // since the wait last made progress
};

// Whether another rank's hang report has arrived on the side channel (false without install()).
bool report_arrived();
// Reports as above, then ends the job (MPI_Abort with kExitStatus). Called by the wait loop after
// timeout_s() without progress, or when report_arrived().
[[noreturn]] void report_and_abort(const Waiting& w);

}  // namespace gf::hang
