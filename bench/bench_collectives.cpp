// What one communicator call costs, per op and size, on the ranks of mpirun: the figure that says
// whether a change to parallel/communicator.cpp (the call log and the MPI_Test wait loop of
// parallel.hang_timeout, say) costs anything on the hot path.
//
//   mpirun -np 2 build/bin/bench_collectives [--rounds 7] [--calls 2000]
//
// Each round times --calls calls back to back of: the blocking all-reduce (the ring) of 1, 256, 4096
// and 65536 floats, a started all-reduce of 4096 floats advanced by test() then waited, a ping-pong
// of 4096 floats between ranks 0 and 1 (isend / irecv / wait), a barrier, a 64-byte broadcast and an
// all-to-allv of 256 floats per rank. Rank 0 prints the median over rounds of the microseconds per
// call, one JSON line. The source uses only Communicator's public API, so the same file builds against
// another checkout's libraries (compare two builds on one machine, interleaved).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  gf::MpiEnvironment env(&argc, &argv);
  int rounds = 7, calls = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--calls")) calls = std::atoi(argv[i + 1]);
  }
  gf::Communicator world = gf::Communicator::world();
  const int p = world.size(), rank = world.rank();
  std::vector<float> buf(65536, 1.0f), other(65536, 0.0f);
  std::vector<int64_t> rows(static_cast<size_t>(p), 1);
  std::vector<float> a2a_in(static_cast<size_t>(p) * 256, 1.0f), a2a_out(a2a_in.size());
  struct Case {
    std::string name;
    std::function<void()> call;
  };
  std::vector<Case> cases;
  for (int64_t n : {1, 256, 4096, 65536})
    cases.push_back({"allreduce_" + std::to_string(n), [&, n] { world.allreduce_sum(buf.data(), n); }});
  cases.push_back({"started_allreduce_4096", [&] {
                     gf::PendingAllreduce r = world.start_allreduce_sum(buf.data(), 4096, 0);
                     r.test();
                     r.wait();
                   }});
  cases.push_back({"pingpong_4096", [&] {
                     if (p < 2 || rank > 1) return;
                     const int peer = 1 - rank;
                     if (rank == 0) {
                       world.isend(buf.data(), 4096, peer, 3).wait();
                       world.irecv(other.data(), 4096, peer, 4).wait();
                     } else {
                       world.irecv(other.data(), 4096, peer, 3).wait();
                       world.isend(buf.data(), 4096, peer, 4).wait();
                     }
                   }});
  cases.push_back({"barrier", [&] { world.barrier(); }});
  cases.push_back({"broadcast_64B", [&] { world.broadcast(buf.data(), 64, 0); }});
  cases.push_back({"alltoallv_256", [&] {
                     world.alltoallv_rows(a2a_in.data(), rows.data(), a2a_out.data(), rows.data(), 256);
                   }});
  std::string out = "{\"ranks\": " + std::to_string(p) + ", \"calls\": " + std::to_string(calls) +
                    ", \"rounds\": " + std::to_string(rounds) + ", \"us_per_call\": {";
  for (size_t c = 0; c < cases.size(); ++c) {
    std::vector<double> us;
    for (int r = 0; r < rounds; ++r) {
      world.barrier();
      const double t0 = now_s();
      for (int i = 0; i < calls; ++i) cases[c].call();
      double t = (now_s() - t0) * 1e6 / calls, worst = 0;
      MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  // the slowest rank's figure
      us.push_back(worst);
    }
    std::sort(us.begin(), us.end());
    char b[128];
    std::snprintf(b, sizeof b, "%s\"%s\": %.2f", c ? ", " : "", cases[c].name.c_str(), us[us.size() / 2]);
    out += b;
  }
  out += "}}";
  if (rank == 0) std::printf("%s\n", out.c_str());
  return 0;
}
