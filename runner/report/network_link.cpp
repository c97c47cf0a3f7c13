#include "runner/report/network_link.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <thread>

#include "runner/report/machine_probe.h"

namespace gf {

NetworkLink read_network_probe(const std::string& path, const std::string& what) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(what + " " + path + ": cannot be read");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw std::runtime_error(what + " " + path + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object() || j.value("probe", "") != "network")
    throw std::runtime_error(what + " " + path + ": not a probe --network file (no \"probe\": \"network\")");
  const auto number = [&](const char* key, bool zero_ok) {
    const auto x = j.find(key);
    if (x == j.end() || !x->is_number() || !std::isfinite(x->get<double>()) || x->get<double>() < 0 ||
        (!zero_ok && x->get<double>() == 0))
      throw std::runtime_error(what + " " + path + ": \"" + key + "\" is not a " + (zero_ok ? "non-negative" : "positive") +
                               " number");
    return x->get<double>();
  };
  NetworkLink l;
  l.gbs = number("bandwidth_gbs", false);
  l.latency_us = number("latency_us", true);
  const auto same = j.find("same_host");
  if (same == j.end() || !same->is_boolean())
    throw std::runtime_error(what + " " + path + ": \"same_host\" is not true or false");
  l.same_host = same->get<bool>();
  if (const auto w = j.find("world_ranks"); w != j.end() && w->is_number_integer() && w->get<int>() >= 2)
    l.world_ranks = w->get<int>();
  l.path = path;
  return l;
}

std::string host_network_probe_path(int ranks) {
  if (const char* e = std::getenv("GF_NETWORK_PROBE"); e && *e) return std::string(e) == "off" ? std::string() : e;
  const std::string m = machine_probe_path();
  if (m.empty()) return "";
  const std::string name = ranks > 2 ? "network_probe_host_" + std::to_string(ranks) + ".json" : "network_probe_host.json";
  return (std::filesystem::path(m).parent_path() / name).string();
}

namespace {

struct HostRead {
  std::optional<NetworkLink> link;
  std::string why;
};

HostRead read_host(const std::string& path) {
  HostRead r;
  if (path.empty()) {
    r.why = "GF_NETWORK_PROBE=off";
    return r;
  }
  if (!std::filesystem::exists(path)) {
    r.why = "no network probe of this host at " + path;
    return r;
  }
  try {
    NetworkLink l = read_network_probe(path, "the host's network probe");
    if (!l.same_host) r.why = path + " measured two hosts, not a link within one";
    else r.link = l;
  } catch (const std::exception& e) {
    r.why = e.what();
  }
  return r;
}

}  // namespace

std::optional<NetworkLink> host_network_link(int ranks, std::string* note) {
  static std::map<std::string, HostRead> read;  // by path: a search plans thousands of layouts
  const auto get = [&](const std::string& path) -> const HostRead& {
    auto it = read.find(path);
    if (it == read.end()) it = read.emplace(path, read_host(path)).first;
    return it->second;
  };
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const bool env = std::getenv("GF_NETWORK_PROBE") && *std::getenv("GF_NETWORK_PROBE");
  if (ranks > cores && !env) {
    const HostRead& many = get(host_network_probe_path(ranks));
    if (many.link) {
      if (note) note->clear();
      return many.link;
    }
  }
  const HostRead& two = get(host_network_probe_path(2));
  if (note) {
    *note = two.why;
    if (two.link && ranks > cores && !env)
      *note = std::to_string(ranks) + " ranks share " + std::to_string(cores) + " cores, but the latency is two ranks' "
              "(mpirun -np " + std::to_string(ranks) + " --oversubscribe gridformer probe --network --out " +
              host_network_probe_path(ranks) + " measures it with as many)";
    else if (!two.link)
      *note += " (scripts/setup.sh runs mpirun -np 2 gridformer probe --network --out " + host_network_probe_path(2) + ")";
  }
  return two.link;
}

}  // namespace gf
