// rank_table: writes a MindFormers / HCCL rank table for this host (like mindformers'
// tools/hccl_tools.py), merges single-server tables into one (like merge_hccl.py), and checks one.
//
//   rank_table --device_num "[0,8)" [--server_ip IP] [--visible_devices "0,1,..."] [--output_dir DIR]
//   rank_table merge OUT.json IN1.json IN2.json ...
//   rank_table check TABLE.json
#include <CLI/CLI.hpp>
#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <filesystem>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>

#include "runner/launch/rank_table.h"

namespace {

// "[a,b)" or "[a,b]": devices a..b-1. Both brackets mean the same half-open range, as in
// hccl_tools.py (its pattern ^\[(\d+),(\d+)[\]\)]$ and range(a, b)) and MindFormers'
// run_distribute.sh (for i = START; i < END). Spaces after the comma are allowed.
std::pair<int, int> parse_device_range(const std::string& text) {
  static const std::regex pattern(R"(^\s*\[\s*(\d{1,6})\s*,\s*(\d{1,6})\s*[\]\)]\s*$)");
  std::smatch m;
  if (!std::regex_match(text, m, pattern))
    throw std::runtime_error(fmt::format("--device_num \"{}\": expected \"[FIRST,END)\" such as \"[0,8)\" (devices "
                                         "FIRST..END-1; \"[0,8]\" means the same, as in hccl_tools.py)", text));
  const int first = std::stoi(m[1]), end = std::stoi(m[2]);
  if (first >= end)
    throw std::runtime_error(fmt::format("--device_num \"{}\": the range is empty; END must be greater than FIRST, "
                                         "e.g. \"[{},{})\"", text, first, first + 1));
  return {first, end};
}

// "0,1,2,3" -> {0,1,2,3}
std::vector<int> parse_visible_devices(const std::string& text) {
  std::vector<int> ids;
  std::set<int> seen;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 6)
      throw std::runtime_error(fmt::format("--visible_devices \"{}\": \"{}\" is not a device number; expected a comma "
                                           "list such as \"0,1,2,3\"", text, item));
    const int id = std::stoi(item);
    if (!seen.insert(id).second)
      throw std::runtime_error(fmt::format("--visible_devices \"{}\": device {} is listed twice", text, id));
    ids.push_back(id);
  }
  if (ids.empty()) throw std::runtime_error("--visible_devices is empty; expected a comma list such as \"0,1,2,3\"");
  return ids;
}

// {0,1,2} -> "0,1,2"
template <class Range, class Field>
std::string comma_list(const Range& items, Field field) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out.push_back(',');
    out.append(std::to_string(field(item)));
  }
  return out;
}
int device_id_of(const gf::RankTableDevice& d) { return d.device_id; }
int rank_id_of(const gf::RankTableDevice& d) { return d.rank_id; }

// The first non-loopback IPv4 address of an interface that is up (getifaddrs order).
std::string first_host_ipv4() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw std::runtime_error("getifaddrs failed; pass --server_ip");
  std::string found;
  for (ifaddrs* a = list; a && found.empty(); a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_LOOPBACK) || !(a->ifa_flags & IFF_UP)) continue;
    char buf[INET_ADDRSTRLEN];
    const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf)) found = buf;
  }
  freeifaddrs(list);
  if (found.empty())
    throw std::runtime_error("this host has no non-loopback IPv4 address that is up; pass --server_ip ADDRESS");
  return found;
}

int generate(const std::string& device_num, std::string server_ip, const std::string& visible_text,
             const std::string& output_dir) {
  const auto [first, end] = parse_device_range(device_num);
  std::vector<int> visible;
  if (!visible_text.empty()) {
    visible = parse_visible_devices(visible_text);
    if (end > static_cast<int>(visible.size()))
      throw std::runtime_error(fmt::format(
          "--device_num \"{}\" uses logical devices {}..{}, but --visible_devices \"{}\" has only {} entries (logical "
          "ids 0..{}); --device_num counts positions in --visible_devices", device_num, first, end - 1, visible_text,
          visible.size(), visible.size() - 1));
  }
  if (server_ip.empty()) server_ip = first_host_ipv4();

  gf::RankTable table;
  table.version = "1.0";
  table.status = "completed";
  gf::RankTableServer server;
  server.server_id = server_ip;
  server.host_nic_ip = "reserve";
  std::string ids;  // hccl_tools names the file after the logical ids, concatenated: 01234567
  for (int logical = first; logical < end; ++logical) {
    const int device_id = visible.empty() ? logical : visible[logical];
    server.devices.push_back({device_id, server_ip, logical - first});
    ids += std::to_string(logical);
  }
  table.servers.push_back(std::move(server));

  const int n = end - first;
  const std::filesystem::path dir = output_dir.empty() ? std::filesystem::current_path() : std::filesystem::path(output_dir);
  std::filesystem::create_directories(dir);
  const auto path = dir / fmt::format("hccl_{}p_{}_{}.json", n, ids, server_ip);
  gf::save_rank_table(table, path.string());
  std::cout << fmt::format("wrote {}: {} rank(s) 0..{} on server {}, device_id {}\n", path.string(), n, n - 1,
                           server_ip, comma_list(table.servers[0].devices, device_id_of));
  return 0;
}

int merge(const std::string& out, const std::vector<std::string>& inputs) {
  std::vector<gf::RankTable> tables;
  for (const auto& in : inputs) tables.push_back(gf::load_rank_table(in));
  const gf::RankTable merged = gf::merge_rank_tables(tables);
  gf::save_rank_table(merged, out);
  std::cout << fmt::format("wrote {}: {} rank(s) on {} server(s)\n", out, merged.rank_count(), merged.servers.size());
  for (const auto& s : merged.servers)
    std::cout << fmt::format("  server {}: rank_id {}..{}\n", s.server_id, s.devices.front().rank_id,
                             s.devices.back().rank_id);
  return 0;
}

// One summary line, then one line per server, fields separated by single spaces (scripts/run_distribute.sh
// reads them):  server INDEX SERVER_ID devices COUNT rank_ids R0,R1,... device_ids D0,D1,...
int check(const std::string& path) {
  const gf::RankTable t = gf::load_rank_table(path);
  std::cout << fmt::format("rank table {}: {} rank(s) on {} server(s)\n", path, t.rank_count(), t.servers.size());
  for (size_t s = 0; s < t.servers.size(); ++s) {
    const auto& devs = t.servers[s].devices;
    std::cout << fmt::format("server {} {} devices {} rank_ids {} device_ids {}\n", s, t.servers[s].server_id,
                             devs.size(), comma_list(devs, rank_id_of), comma_list(devs, device_id_of));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "rank_table: writes a MindFormers/HCCL rank table (hccl_tools.py's format and file name) for this host, where a "
      "device is a core slot and device_ip is the host address; `merge` joins tables of several servers "
      "(merge_hccl.py), `check` validates one."};
  std::string device_num = "[0,8)", server_ip, visible_devices, output_dir;
  app.add_option("--device_num", device_num,
                 "devices FIRST..END-1 as \"[FIRST,END)\"; \"[FIRST,END]\" means the same, as in hccl_tools.py. Any "
                 "width: \"[0,8)\", \"[8,16)\", \"[0,12)\"")
      ->capture_default_str();
  app.add_option("--server_ip", server_ip,
                 "server_id and device_ip of the table (default: this host's first non-loopback IPv4 address)");
  app.add_option("--visible_devices", visible_devices,
                 "device ids by logical position, e.g. \"4,5,6,7\": logical device i gets device_id visible[i] "
                 "(default: device_id = logical id)");
  app.add_option("--output_dir", output_dir, "directory for hccl_{N}p_{ids}_{server_ip}.json (default: the current one)");

  std::string merge_out;
  std::vector<std::string> merge_in;
  auto* merge_cmd = app.add_subcommand(
      "merge", "merge_hccl.py: OUT.json gets the servers of IN1.json IN2.json ... in that order, rank ids renumbered "
               "0.. in that order, server_count summed");
  merge_cmd->add_option("OUT", merge_out, "the merged table to write")->required();
  merge_cmd->add_option("IN", merge_in, "single-server (or any) tables, in rank order")
      ->required()
      ->check(CLI::ExistingFile);

  std::string check_path;
  auto* check_cmd = app.add_subcommand(
      "check", "validate a table and print its servers: `server INDEX SERVER_ID devices N rank_ids ... device_ids ...`");
  check_cmd->add_option("TABLE", check_path, "rank table JSON")->required();
  app.require_subcommand(0, 1);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // Bad arguments are bad input, status 2 as every other refusal here (CLI11's own codes are 105-113).
    std::cerr << "error: " << e.what() << " (rank_table --help)\n";
    return 2;
  }
  try {
    if (*merge_cmd) return merge(merge_out, merge_in);
    if (*check_cmd) return check(check_path);
    return generate(device_num, server_ip, visible_devices, output_dir);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}
