// What one communicator call costs, per op and size, on the ranks of mpirun: the figure that says
// whether a change to parallel/communicator.cpp (the call log and the MPI_Test wait loop of
// parallel.hang_timeout, say) costs anything on the hot path, and how our rings compare with MPI's
// collectives (parallel.collectives: ring | mpi; bench/collectives_ring_vs_mpi.sh).
//
//   mpirun -np 2 build/bin/bench_collectives [--rounds 7] [--calls 2000] [--min-time S] [--collectives ring|mpi]
//                                            [--cases NAME,NAME,...]
//
// Each round times --calls calls back to back of: the blocking all-reduce (the ring) of 1, 256, 4096
// and 65536 floats, a started all-reduce of 4096 floats advanced by test() then waited, a ping-pong
// of 4096 floats between ranks 0 and 1 (isend / irecv / wait), a barrier, a 64-byte broadcast and an
// all-to-allv of 256 floats per rank. Rank 0 prints the median over rounds of the microseconds per
// call, one JSON line. The source uses only Communicator's public API, so the same file builds against
// another checkout's libraries (compare two builds on one machine, interleaved).
//
// --cases picks cases by name, among them also gradient-sized ones not run by default: allreduce_262144 and
// allreduce_4194304 (1 and 16 MiB), started_allreduce_262144, reduce_scatter_262144, allgather_262144.
// --min-time S: each case's call count is what takes about S seconds (by the median of 3 calls, the same on
// every rank; at least 3), instead of --calls. --collectives mpi: MPI's collectives instead of our rings
// (Communicator::set_mpi_collectives). The JSON line also gives each case's bytes sent per call by the
// communicator's own count, the largest over ranks (the rings' messages; 0 for MPI's collectives, which
// bench/collectives_ring_vs_mpi.sh counts with Open MPI's pml monitoring instead) and the calls timed.
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
  double min_time = 0;
  std::string collectives = "ring", only;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--calls")) calls = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--min-time")) min_time = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--collectives")) collectives = argv[i + 1];
    if (!std::strcmp(argv[i], "--cases")) only = argv[i + 1];
  }
  if (collectives != "ring" && collectives != "mpi") {
    std::fprintf(stderr, "bench_collectives: --collectives %s: expected ring or mpi\n", collectives.c_str());
    return 2;
  }
  gf::Communicator world = gf::Communicator::world();
  world.set_mpi_collectives(collectives == "mpi");
  const int p = world.size(), rank = world.rank();
  std::vector<float> buf(4194304, 1.0f), other(65536, 0.0f);
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
  // Gradient-sized cases, run only when --cases names them.
  std::vector<Case> big;
  for (int64_t n : {262144, 4194304})
    big.push_back({"allreduce_" + std::to_string(n), [&, n] { world.allreduce_sum(buf.data(), n); }});
  big.push_back({"started_allreduce_262144", [&] {
                   gf::PendingAllreduce r = world.start_allreduce_sum(buf.data(), 262144, 0);
                   r.test();
                   r.wait();
                 }});
  big.push_back({"reduce_scatter_262144", [&] { world.reduce_scatter_sum(buf.data(), 262144); }});
  big.push_back({"allgather_262144", [&] { world.allgather(buf.data(), 262144); }});
  if (!only.empty()) {
    std::vector<Case> picked;
    size_t at = 0;
    while (at <= only.size()) {
      const size_t comma = std::min(only.find(',', at), only.size());
      const std::string name = only.substr(at, comma - at);
      at = comma + 1;
      bool found = false;
      for (auto* list : {&cases, &big})
        for (const Case& c : *list)
          if (c.name == name) picked.push_back(c), found = true;
      if (!found) {
        if (rank == 0) std::fprintf(stderr, "bench_collectives: no case %s\n", name.c_str());
        return 2;
      }
    }
    cases = picked;
  }
  std::string out = "{\"ranks\": " + std::to_string(p) + ", \"collectives\": \"" + collectives +
                    "\", \"calls\": " + std::to_string(calls) + ", \"rounds\": " + std::to_string(rounds) +
                    ", \"us_per_call\": {";
  std::string bytes_out = ", \"bytes_sent_per_call\": {", calls_out = ", \"calls_timed\": {";
  for (size_t c = 0; c < cases.size(); ++c) {
    int n_calls = calls;
    if (min_time > 0) {  // the median of 3 calls, the slowest rank's time, sets the count for every rank
      std::vector<double> one;
      for (int k = 0; k < 3; ++k) {
        world.barrier();
        const double t0 = now_s();
        cases[c].call();
        double t = now_s() - t0, worst = 0;
        MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        one.push_back(worst);
      }
      std::sort(one.begin(), one.end());
      n_calls = std::max(3, static_cast<int>(min_time / std::max(one[1], 1e-7)));
    }
    std::vector<double> us;
    long long bytes = 0;
    for (int r = 0; r < rounds; ++r) {
      world.barrier();
      world.reset_stats();
      const double t0 = now_s();
      for (int i = 0; i < n_calls; ++i) cases[c].call();
      double t = (n_calls ? (now_s() - t0) * 1e6 / n_calls : 0), worst = 0;
      MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  // the slowest rank's figure
      long long mine = n_calls ? world.stats().bytes_sent / n_calls : 0, most = 0;
      MPI_Allreduce(&mine, &most, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
      us.push_back(worst);
      bytes = most;
    }
    std::sort(us.begin(), us.end());
    char b[160];
    std::snprintf(b, sizeof b, "%s\"%s\": %.2f", c ? ", " : "", cases[c].name.c_str(), us.empty() ? 0.0 : us[us.size() / 2]);
    out += b;
    std::snprintf(b, sizeof b, "%s\"%s\": %lld", c ? ", " : "", cases[c].name.c_str(), bytes);
    bytes_out += b;
    std::snprintf(b, sizeof b, "%s\"%s\": %d", c ? ", " : "", cases[c].name.c_str(), n_calls);
    calls_out += b;
  }
  out += "}" + bytes_out + "}" + calls_out + "}}";
  if (rank == 0) std::printf("%s\n", out.c_str());
  return 0;
}
