// `gridformer probe --network` (runner/cli/probe_network.h).
#include "runner/cli/probe_network.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "parallel/communicator.h"
#include "runner/cli/rank_start.h"  // kSetupError

namespace gf::cli {
namespace {

constexpr int kTag = 7;

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Round trips of `n` floats between rank 0 and `peer`: rank 0's median one-way time in seconds (0 elsewhere).
double one_way(const Communicator& world, int peer, std::vector<float>& buf, int64_t n, int rounds) {
  const int me = world.rank();
  std::vector<double> times;
  for (int i = -2; i < rounds; ++i) {  // two rounds to warm the path, not timed
    const auto t0 = std::chrono::steady_clock::now();
    if (me == 0) {
      world.send(buf.data(), n, peer, kTag);
      world.recv(buf.data(), n, peer, kTag);
    } else {
      world.recv(buf.data(), n, 0, kTag);
      world.send(buf.data(), n, 0, kTag);
    }
    if (i >= 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return me == 0 ? median(times) / 2 : 0.0;
}

int probe_network(const NetworkProbeRequest& r, const Communicator& world) {
  const int me = world.rank();
  if (world.size() < 2) {
    std::cerr << "error: probe --network measures the link between two ranks: run it as mpirun -np 2 --host A,B "
                 "gridformer probe --network (A and B the two hosts)\n";
    return kSetupError;
  }
  // The peer: the first rank on another host than rank 0's, else rank 1.
  const std::vector<std::string> hosts = world.gather_strings(host_name(), 0);
  int peer = 1;
  if (me == 0)
    for (int q = 1; q < world.size(); ++q)
      if (hosts[static_cast<size_t>(q)] != hosts[0]) {
        peer = q;
        break;
      }
  world.broadcast(&peer, sizeof(peer), 0);
  std::vector<double> sizes, times;
  if (me == 0 || me == peer) {
    std::vector<float> buf(static_cast<size_t>(r.max_bytes / 4), 1.0f);
    for (int64_t bytes = 8; bytes <= r.max_bytes; bytes *= 4) {
      // The large messages, whose round trips are long and steady, take a quarter of the rounds (at least 5).
      const int rounds = bytes <= (int64_t{1} << 20) ? r.rounds : std::max(5, r.rounds / 4);
      const double t = one_way(world, peer, buf, bytes / 4, rounds);
      sizes.push_back(static_cast<double>(bytes));
      times.push_back(t);
      if (me == 0)
        std::printf("%12lld B  one way %10.2f us  %8.3f GB/s\n", static_cast<long long>(bytes), t * 1e6,
                    static_cast<double>(bytes) / t / 1e9);
    }
  }
  int status = 0;
  if (me == 0) {
    const double latency = times.front();
    const double big = times.back() - latency;
    const double gbs = big > 0 ? sizes.back() / big / 1e9 : sizes.back() / times.back() / 1e9;
    const bool same = hosts[static_cast<size_t>(peer)] == hosts[0];
    nlohmann::json j = {{"probe", "network"},
                        {"ranks", {0, peer}},
                        {"world_ranks", world.size()},  // the others wait, spinning, as a run's ranks share cores
                        {"hosts", {hosts[0], hosts[static_cast<size_t>(peer)]}},
                        {"same_host", same},
                        {"latency_us", latency * 1e6},
                        {"bandwidth_gbs", gbs},
                        {"method", "MPI point to point between the two ranks; each size's one-way time the median of "
                                   "its round trips over two; latency the smallest message's one-way time, bandwidth "
                                   "the largest's bytes over its one-way time less the latency"}};
    for (size_t i = 0; i < sizes.size(); ++i)
      j["sizes"].push_back({{"bytes", static_cast<int64_t>(sizes[i])}, {"one_way_us", times[i] * 1e6}});
    std::printf("ranks 0 (%s) and %d (%s)%s: latency %.2f us, bandwidth %.3f GB/s\n", hosts[0].c_str(), peer,
                hosts[static_cast<size_t>(peer)].c_str(),
                same ? ", on one host: a link within the host, not between hosts" : "", latency * 1e6, gbs);
    std::ofstream f(r.out);
    f << j.dump(1) << "\n";
    if (!f) {
      std::cerr << "error: probe --network: cannot write " << r.out << "\n";
      status = kSetupError;
    } else {
      std::printf("written to %s (plan --hosts H --network-probe %s prices the groups that span two hosts at it)\n",
                  r.out.c_str(), r.out.c_str());
    }
  }
  world.broadcast(&status, sizeof(status), 0);
  return status;
}

}  // namespace

CLI::App* add_probe_command(CLI::App& app, NetworkProbeRequest& r) {
  auto* p = app.add_subcommand("probe", "measure what plan needs of the machines: --network, the link between two "
                                        "hosts (run under mpirun -np 2 --host A,B)");
  p->add_flag("--network", r.network, "the latency and bandwidth between rank 0 and the first rank on another host "
                                      "(MPI point to point, 8 B to --max-bytes), written as JSON to --out");
  p->add_option("--out", r.out, "the JSON file the figures go to")->capture_default_str();
  p->add_option("--max-bytes", r.max_bytes, "the largest message, bytes")->check(CLI::Range(int64_t{8}, int64_t{1} << 30))
      ->capture_default_str();
  p->add_option("--rounds", r.rounds, "round trips per message size (a quarter, at least 5, above 1 MiB)")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  return p;
}

int run_probe(const NetworkProbeRequest& r, int argc, char** argv) {
  if (!r.network) {
    std::cerr << "error: probe: say what to probe: --network (the link between two hosts)\n";
    return kSetupError;
  }
  MpiEnvironment env(&argc, &argv);
  const Communicator world = Communicator::world();
  return probe_network(r, world);
}

NetworkLink network_probe_link(const std::string& path) {
  NetworkLink l = read_network_probe(path, "--network-probe");
  if (l.same_host)
    throw std::runtime_error("--network-probe " + path + ": its two ranks ran on one host, so it measured a link " +
                             "within a host, not between hosts; run the probe with ranks on two hosts (mpirun -np 2 " +
                             "--host A,B gridformer probe --network), or give --network-gbs");
  return l;
}

}  // namespace gf::cli
