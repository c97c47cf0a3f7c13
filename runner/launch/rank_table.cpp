#include "runner/launch/rank_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

namespace gf {

namespace {

// One error type, one message shape: "rank table SOURCE: ENTRY PROBLEM".
[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw std::runtime_error(fmt::format("rank table {}: {}", source, what));
}

// How a JSON value that should have been a string looks, for the message.
template <class Json>
std::string describe(const Json& v) {
  if (v.is_number()) return fmt::format("a number ({}), but rank tables hold every value as a string: write \"{}\"",
                                        v.dump(), v.dump());
  if (v.is_boolean()) return fmt::format("a boolean ({}); rank tables hold every value as a string", v.dump());
  if (v.is_null()) return "null; rank tables hold every value as a string";
  if (v.is_array()) return "a list, not a string";
  if (v.is_object()) return "an object, not a string";
  return "not a string";
}

// Reads object members by name, naming the full path of anything wrong.
template <class Json>
class Reader {
 public:
  Reader(const std::string& source) : source_(source) {}

  const Json& member(const Json& obj, const std::string& path, const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end()) fail(source_, fmt::format("{} is missing (every {} needs \"{}\")", join(path, key),
                                                    path.empty() ? "table" : "entry of " + strip_index(path), key));
    return *it;
  }

  std::string string(const Json& obj, const std::string& path, const char* key) const {
    const Json& v = member(obj, path, key);
    if (!v.is_string()) fail(source_, fmt::format("{} is {}", join(path, key), describe(v)));
    return v.template get<std::string>();
  }

  // A non-negative integer written as a string ("7").
  int number(const Json& obj, const std::string& path, const char* key) const {
    const std::string s = string(obj, path, key);
    const bool digits = !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (!digits)
      fail(source_, fmt::format("{} \"{}\" is not a number (expected a non-negative integer in a string, such as \"3\")",
                                join(path, key), s));
    return std::stoi(s);
  }

  const Json& array(const Json& obj, const std::string& path, const char* key) const {
    const Json& v = member(obj, path, key);
    if (!v.is_array()) fail(source_, fmt::format("{} must be a list", join(path, key)));
    if (v.empty()) fail(source_, fmt::format("{} is empty; it needs at least one entry", join(path, key)));
    return v;
  }

  void require_object(const Json& v, const std::string& path) const {
    if (!v.is_object()) fail(source_, fmt::format("{} must be an object {{...}}", path.empty() ? "the table" : path));
  }

 private:
  static std::string join(const std::string& path, const char* key) { return path.empty() ? key : path + "." + key; }
  // "server_list[1].device[3]" -> "device"
  static std::string strip_index(const std::string& path) {
    std::string last = path.substr(path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1);
    return last.substr(0, last.find('['));
  }
  const std::string& source_;
};

// The checks that need the whole table: rank ids exactly 0..N-1, one server per server_id.
void check_whole_table(const RankTable& t, const std::string& source) {
  std::set<std::string> server_ids;
  for (size_t s = 0; s < t.servers.size(); ++s)
    if (!server_ids.insert(t.servers[s].server_id).second)
      fail(source, fmt::format("server_list[{}].server_id \"{}\" appears twice; each server is listed once, with all "
                               "its devices", s, t.servers[s].server_id));
  const int n = t.rank_count();
  std::map<int, std::string> seen;  // rank id -> entry path
  for (size_t s = 0; s < t.servers.size(); ++s) {
    for (size_t d = 0; d < t.servers[s].devices.size(); ++d) {
      const int r = t.servers[s].devices[d].rank_id;
      const std::string path = fmt::format("server_list[{}].device[{}].rank_id", s, d);
      auto [it, fresh] = seen.emplace(r, path);
      if (!fresh) fail(source, fmt::format("{} \"{}\" duplicates {}; every rank id appears once", path, r, it->second));
      if (r >= n)
        fail(source, fmt::format("{} \"{}\" is out of range: the table has {} device(s), so rank ids must be 0..{} "
                                 "without gaps", path, r, n, n - 1));
    }
  }
  // n distinct ids all below n: there are no gaps. (Kept as a guard should the checks above change.)
  if (static_cast<int>(seen.size()) != n) fail(source, fmt::format("rank ids must be exactly 0..{}", n - 1));
}

template <class Json>
RankTable parse_any(const Json& j, const std::string& source) {
  const Reader<Json> rd(source);
  rd.require_object(j, "");
  RankTable t;
  t.version = rd.string(j, "", "version");
  const int server_count = rd.number(j, "", "server_count");
  const Json& list = rd.array(j, "", "server_list");
  for (size_t s = 0; s < list.size(); ++s) {
    const std::string spath = fmt::format("server_list[{}]", s);
    const Json& sj = list[s];
    rd.require_object(sj, spath);
    RankTableServer server;
    server.server_id = rd.string(sj, spath, "server_id");
    if (server.server_id.empty()) fail(source, spath + ".server_id is empty; it is the server's address");
    const Json& devs = rd.array(sj, spath, "device");
    std::map<int, size_t> device_ids;
    for (size_t d = 0; d < devs.size(); ++d) {
      const std::string dpath = fmt::format("{}.device[{}]", spath, d);
      rd.require_object(devs[d], dpath);
      RankTableDevice dev;
      dev.device_id = rd.number(devs[d], dpath, "device_id");
      dev.device_ip = rd.string(devs[d], dpath, "device_ip");
      dev.rank_id = rd.number(devs[d], dpath, "rank_id");
      auto [it, fresh] = device_ids.emplace(dev.device_id, d);
      if (!fresh)
        fail(source, fmt::format("{}.device_id \"{}\" duplicates {}.device[{}] on server {}; a device is listed once",
                                 dpath, dev.device_id, spath, it->second, server.server_id));
      server.devices.push_back(std::move(dev));
    }
    server.host_nic_ip = rd.string(sj, spath, "host_nic_ip");
    t.servers.push_back(std::move(server));
  }
  if (server_count != static_cast<int>(t.servers.size()))
    fail(source, fmt::format("server_count \"{}\" but server_list has {} server(s); set server_count to \"{}\"",
                             server_count, t.servers.size(), t.servers.size()));
  t.status = rd.string(j, "", "status");
  if (t.status != "completed")
    fail(source, fmt::format("status is \"{}\", expected \"completed\" (the table is not finished)", t.status));
  check_whole_table(t, source);
  return t;
}

}  // namespace

int RankTable::rank_count() const {
  int n = 0;
  for (const auto& s : servers) n += static_cast<int>(s.devices.size());
  return n;
}

RankLocation RankTable::locate(int rank) const {
  for (size_t s = 0; s < servers.size(); ++s)
    for (const auto& d : servers[s].devices)
      if (d.rank_id == rank) return RankLocation{static_cast<int>(s), servers[s].server_id, d};
  throw std::out_of_range(fmt::format("rank {} is not in the rank table ({} ranks)", rank, rank_count()));
}

RankTable parse_rank_table(const nlohmann::json& j, const std::string& source) { return parse_any(j, source); }
RankTable parse_rank_table(const nlohmann::ordered_json& j, const std::string& source) { return parse_any(j, source); }

RankTable load_rank_table(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(path, "cannot open the file (check the path; RANK_TABLE_FILE or --rank_table names it)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, fmt::format("not valid JSON: {}", e.what()));
  }
  return parse_rank_table(j, path);
}

nlohmann::ordered_json rank_table_to_json(const RankTable& t) {
  nlohmann::ordered_json j;
  j["version"] = t.version;
  j["server_count"] = std::to_string(t.servers.size());
  j["server_list"] = nlohmann::ordered_json::array();
  for (const auto& s : t.servers) {
    nlohmann::ordered_json sj;
    sj["server_id"] = s.server_id;
    sj["device"] = nlohmann::ordered_json::array();
    for (const auto& d : s.devices) {
      nlohmann::ordered_json dj;
      dj["device_id"] = std::to_string(d.device_id);
      dj["device_ip"] = d.device_ip;
      dj["rank_id"] = std::to_string(d.rank_id);
      sj["device"].push_back(std::move(dj));
    }
    sj["host_nic_ip"] = s.host_nic_ip;
    j["server_list"].push_back(std::move(sj));
  }
  j["status"] = t.status;
  return j;
}

void save_rank_table(const RankTable& table, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error(fmt::format("cannot write the rank table {} (does its directory exist?)", path));
  // Python's json.dump(indent=4) escapes non-ASCII (ensure_ascii) and ends without a newline.
  out << rank_table_to_json(table).dump(4, ' ', true);
  if (!out) throw std::runtime_error(fmt::format("writing the rank table {} failed", path));
}

RankTable merge_rank_tables(const std::vector<RankTable>& tables) {
  if (tables.empty()) throw std::runtime_error("merging rank tables: no tables given");
  RankTable merged;
  merged.version = "1.0";
  merged.status = "completed";
  std::map<std::string, size_t> first_table;  // server_id -> index of the table that has it
  int rank = 0;
  for (size_t i = 0; i < tables.size(); ++i) {
    for (const auto& server : tables[i].servers) {
      auto [it, fresh] = first_table.emplace(server.server_id, i);
      if (!fresh)
        throw std::runtime_error(fmt::format(
            "merging rank tables: server {} is in table {} and in table {} (counting from 1); each server's table "
            "is merged once (generate the tables on different hosts, or with different --server_ip)",
            server.server_id, it->second + 1, i + 1));
      RankTableServer copy = server;
      for (auto& d : copy.devices) d.rank_id = rank++;
      merged.servers.push_back(std::move(copy));
    }
  }
  return merged;
}

}  // namespace gf
