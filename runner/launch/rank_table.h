// MindFormers / HCCL rank tables (version "1.0", as mindformers/tools/hccl_tools.py and
// merge_hccl.py write them): reading with validation, writing in the same field order and
// all-string form, and merging single-server tables into one cluster table.
//
//   {"version": "1.0", "server_count": "1",
//    "server_list": [{"server_id": "10.0.0.1",
//                     "device": [{"device_id": "0", "device_ip": "10.0.0.1", "rank_id": "0"}, ...],
//                     "host_nic_ip": "reserve"}],
//    "status": "completed"}
//
// On a CPU host a "device" is a core slot and device_ip is the host's address.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace gf {

struct RankTableDevice {
  int device_id = 0;
  std::string device_ip;
  int rank_id = 0;  // global across servers
};

struct RankTableServer {
  std::string server_id;  // the host's address (mpirun's host name for it)
  std::vector<RankTableDevice> devices;
  std::string host_nic_ip;  // "reserve" in every table hccl_tools writes
};

// Where a global rank lives.
struct RankLocation {
  int server_index = 0;
  std::string server_id;
  RankTableDevice device;
};

struct RankTable {
  std::string version;
  std::vector<RankTableServer> servers;
  std::string status;

  int rank_count() const;  // devices over all servers
  // The server and device of global rank `rank`; throws std::out_of_range when no device has it.
  RankLocation locate(int rank) const;
};

// Reads and validates a rank table file. Throws std::runtime_error naming the file and the entry:
//   rank table hccl.json: server_list[1].device[3].rank_id "x" is not a number
RankTable load_rank_table(const std::string& path);
// Validates an already parsed table; `source` names it in error messages.
RankTable parse_rank_table(const nlohmann::json& j, const std::string& source);
RankTable parse_rank_table(const nlohmann::ordered_json& j, const std::string& source);

// The table as MindFormers writes it: hccl_tools' field order, every value a string.
// rank_table_to_json(t).dump(4) gives the text json.dump(table, f, indent=4) writes.
nlohmann::ordered_json rank_table_to_json(const RankTable& table);
// Writes rank_table_to_json(table).dump(4) to `path` (no trailing newline, like json.dump).
void save_rank_table(const RankTable& table, const std::string& path);

// merge_hccl.py: the servers of every table in argument order, server_count summed, rank ids
// renumbered 0.. in that order. Refuses an empty list and a server_id that appears twice.
RankTable merge_rank_tables(const std::vector<RankTable>& tables);

}  // namespace gf
