#include "runner/report/network_link.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

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
  l.path = path;
  return l;
}

std::string host_network_probe_path() {
  if (const char* e = std::getenv("GF_NETWORK_PROBE"); e && *e) return std::string(e) == "off" ? std::string() : e;
  const std::string m = machine_probe_path();
  if (m.empty()) return "";
  return (std::filesystem::path(m).parent_path() / "network_probe_host.json").string();
}

std::optional<NetworkLink> host_network_link(std::string* note) {
  struct Read {
    std::optional<NetworkLink> link;
    std::string why;
  };
  static const Read once = [] {
    Read r;
    const std::string path = host_network_probe_path();
    if (path.empty()) {
      r.why = "GF_NETWORK_PROBE=off";
      return r;
    }
    if (!std::filesystem::exists(path)) {
      r.why = "no network probe of this host at " + path + " (scripts/setup.sh runs mpirun -np 2 gridformer probe "
              "--network --out " + path + ")";
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
  }();
  if (note) *note = once.why;
  return once.link;
}

}  // namespace gf
