// A link between two ranks as `gridformer probe --network` measured it (runner/cli/probe_network.h): its latency per
// message and its bandwidth, and whether the two ranks were on one host. The step-time model (step_time.h) prices each
// message a step sends at a link's latency: within a host the link of network_probe_host.json, beside the machine
// probe (scripts/setup.sh measures it with two ranks of this host), between hosts the file plan --network-probe names.
#pragma once
#include <optional>
#include <string>

namespace gf {

struct NetworkLink {
  double latency_us = 0, gbs = 0;
  bool same_host = false;
  int world_ranks = 2;  // the ranks the probe ran (the others spinning while two exchange)
  std::string path;
};

// Reads a probe --network file. Throws std::runtime_error naming `what` (the option that named it), the file and the
// key, for a file that is not a probe's or a figure that is not a positive number (a latency may be 0).
NetworkLink read_network_probe(const std::string& path, const std::string& what);

// Where the link within this host is read: $GF_NETWORK_PROBE ("off": nowhere), or beside the machine probe (build/):
// network_probe_host.json (two ranks), or for `ranks` ranks on a host of fewer cores network_probe_host_<ranks>.json,
// the probe run with that many ranks (mpirun -np R --oversubscribe): a message then waits for its peer to get a core,
// which two ranks on an idle host never do.
std::string host_network_probe_path(int ranks = 2);
// The link within this host for `ranks` ranks on it, each file read once a process; none (and why, in *note) when the
// file is missing, is not a probe's, or measured two hosts. With more ranks than cores and no probe of that many, the
// two-rank link, and *note says so.
std::optional<NetworkLink> host_network_link(int ranks, std::string* note = nullptr);

}  // namespace gf
