// `gridformer probe --network`: the link between two ranks measured (runner/cli/probe_network.cpp), for
// `plan --hosts H --network-probe FILE` to price the groups that span two hosts.
//
// Run as `mpirun -np 2 --host a,b gridformer probe --network`: rank 0 and the first rank on another host than rank 0
// (rank 1 when every rank is on rank 0's host, which the file then says) send each other messages of 8 bytes to
// --max-bytes (a factor of 4 apart) back and forth (MPI point to point, as the pipeline's sends go); each size's
// one-way time is the median of its round trips over two. The file holds the table, the latency (the smallest
// message's one-way time) and the bandwidth (the largest message's bytes over its one-way time less the latency).
#pragma once
#include <cstdint>
#include <string>

#include "runner/report/network_link.h"

namespace CLI {
class App;
}

namespace gf::cli {

struct NetworkProbeRequest {
  bool network = false;                 // --network (the one probe there is)
  std::string out = "network_probe.json";
  int64_t max_bytes = int64_t{64} << 20;
  int rounds = 20;                      // round trips per size (fewer for the large ones: see the .cpp)
};

CLI::App* add_probe_command(CLI::App& app, NetworkProbeRequest& r);
int run_probe(const NetworkProbeRequest& r, int argc, char** argv);

// What `plan --network-probe FILE` reads: the link between hosts (its bandwidth in GB/s and latency). Throws
// std::runtime_error naming the file and the key for a file that is not a probe's, a figure that is not a positive
// number, or a probe whose two ranks were on one host (not a link between hosts).
NetworkLink network_probe_link(const std::string& path);

}  // namespace gf::cli
