// MindFormers / HCCL rank tables: the 4-server x 8-device table from MindFormers' GPT2-13B guide
// loads, writes back field for field, every malformed table is refused naming its entry, and
// merging follows merge_hccl.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "runner/launch/rank_table.h"

namespace gf {
namespace {

const std::string kTable4x8 = std::string(GF_SOURCE_DIR) + "/tests/data/rank_table_4x8.json";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The error parse_rank_table gives for `text`, or "" when it is accepted.
std::string error_of(const std::string& text) {
  try {
    parse_rank_table(nlohmann::json::parse(text), "inline.json");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// hccl_tools' output for devices [0,n) of one server, rank ids 0..n-1.
RankTable one_server(const std::string& ip, int n) {
  RankTable t{"1.0", {RankTableServer{ip, {}, "reserve"}}, "completed"};
  for (int d = 0; d < n; ++d) t.servers[0].devices.push_back({d, ip, d});
  return t;
}

TEST(RankTable, Loads4x8Table) {
  const RankTable t = load_rank_table(kTable4x8);
  EXPECT_EQ(t.version, "1.0");
  EXPECT_EQ(t.status, "completed");
  EXPECT_EQ(t.rank_count(), 32);
  ASSERT_EQ(t.servers.size(), 4u);
  EXPECT_EQ(t.servers[0].server_id, "10.155.111.140");
  EXPECT_EQ(t.servers[3].server_id, "10.155.111.143");
  EXPECT_EQ(t.servers[1].host_nic_ip, "reserve");
  ASSERT_EQ(t.servers[2].devices.size(), 8u);
  EXPECT_EQ(t.servers[0].devices[0].device_ip, "192.1.27.6");
  EXPECT_EQ(t.servers[3].devices[7].device_id, 7);
  EXPECT_EQ(t.servers[3].devices[7].rank_id, 31);
  EXPECT_EQ(t.servers[3].devices[7].device_ip, "192.4.27.13");
  EXPECT_EQ(t.servers[1].devices[0].rank_id, 8);

  const RankLocation r19 = t.locate(19);
  EXPECT_EQ(r19.server_index, 2);
  EXPECT_EQ(r19.server_id, "10.155.111.142");
  EXPECT_EQ(r19.device.device_id, 3);
  EXPECT_THROW(t.locate(32), std::out_of_range);
}

TEST(RankTable, RoundTripEqualsTheFile) {
  const std::string text = read_text(kTable4x8);
  const auto original = nlohmann::ordered_json::parse(text);
  const auto written = rank_table_to_json(load_rank_table(kTable4x8));
  // ordered_json compares object members in order: field order and every value (all strings) must match.
  EXPECT_EQ(written, original);
  EXPECT_EQ(written.dump(2), text);  // the guide's file is json.dump(indent=2) text, byte for byte
  for (const auto& server : written["server_list"])
    for (const auto& device : server["device"])
      for (const auto& [key, value] : device.items()) EXPECT_TRUE(value.is_string()) << key;
}

TEST(RankTable, SaveWritesJsonDumpIndent4) {
  const auto path = std::filesystem::temp_directory_path() / "gf_rank_table_save_test.json";
  save_rank_table(one_server("10.0.0.1", 1), path.string());
  EXPECT_EQ(read_text(path.string()),
            "{\n    \"version\": \"1.0\",\n    \"server_count\": \"1\",\n    \"server_list\": [\n        {\n"
            "            \"server_id\": \"10.0.0.1\",\n            \"device\": [\n                {\n"
            "                    \"device_id\": \"0\",\n                    \"device_ip\": \"10.0.0.1\",\n"
            "                    \"rank_id\": \"0\"\n                }\n            ],\n"
            "            \"host_nic_ip\": \"reserve\"\n        }\n    ],\n    \"status\": \"completed\"\n}");
  std::filesystem::remove(path);
}

TEST(RankTable, AcceptsAMinimalTable) {
  EXPECT_EQ(error_of(R"({"version": "1.0", "server_count": "1", "server_list": [{"server_id": "10.0.0.1",
    "device": [{"device_id": "0", "device_ip": "10.0.0.1", "rank_id": "0"},
               {"device_id": "1", "device_ip": "10.0.0.1", "rank_id": "1"}],
    "host_nic_ip": "reserve"}], "status": "completed"})"), "");
}

struct BadTable {
  const char* name;
  const char* json;
  const char* message;  // must appear in the error
};

const BadTable kBadTables[] = {
    {"missing version",
     R"({"server_count": "1", "server_list": [{"server_id": "a", "device": [{"device_id": "0", "device_ip": "a",
        "rank_id": "0"}], "host_nic_ip": "reserve"}], "status": "completed"})",
     "rank table inline.json: version is missing"},
    {"missing rank_id",
     R"({"version": "1.0", "server_count": "1", "server_list": [{"server_id": "a", "device": [{"device_id": "0",
        "device_ip": "a", "rank_id": "0"}, {"device_id": "1", "device_ip": "a"}], "host_nic_ip": "reserve"}],
        "status": "completed"})",
     "server_list[0].device[1].rank_id is missing"},
    {"missing host_nic_ip",
     R"({"version": "1.0", "server_count": "1", "server_list": [{"server_id": "a", "device": [{"device_id": "0",
        "device_ip": "a", "rank_id": "0"}]}], "status": "completed"})",
     "server_list[0].host_nic_ip is missing"},
    {"missing status",
     R"({"version": "1.0", "server_count": "1", "server_list": [{"server_id": "a", "device": [{"device_id": "0",
        "device_ip": "a", "rank_id": "0"}], "host_nic_ip": "reserve"}]})",
     "status is missing"},
    {"number instead of string",
     R"({"version": "1.0", "server_count": "1", "server_list": [{"server_id": "a", "device": [{"device_id": "0",
        "device_ip": "a", "rank_id": 0}], "host_nic_ip": "reserve"}], "status": "completed"})",
     "server_list[0].device[0].rank_id is a number (0), but rank tables hold every value as a string: write \"0\""},
    {"number server_count",
     R"({"version": "1.0", "server_count": 1, "server_list": [{"server_id": "a", "device": [{"device_id": "0",
        "device_ip": "a", "rank_id": "0"}], "host_nic_ip": "reserve"}], "status": "completed"})",
     "server_count is a number (1)"},
    {"non-numeric rank_id",
     R"({"version": "1.0", "server_count": "2", "server_list": [
        {"server_id": "a", "device": [{"device_id": "0", "device_ip": "a", "rank_id": "0"}], "host_nic_ip": "reserve"},
        {"server_id": "b", "device": [{"device_id": "0", "device_ip": "b", "rank_id": "1"},
          {"device_id": "1", "device_ip": "b", "rank_id": "2"}, {"device_id": "2", "device_ip": "b", "rank_id": "3"},
          {"device_id": "3", "device_ip": "b", "rank_id": "x"}], "host_nic_ip": "reserve"}], "status": "completed"})",
     "rank table inline.json: server_list[1].device[3].rank_id \"x\" is not a number"},
    {"negative device_id",
     R"({"version": "1.0", "server_count": "1", "server_list": [{"server_id": "a", "device": [{"device_id": "-1",
        "device_ip": "a", "rank_id": "0"}], "host_nic_ip": "reserve"}], "status": "completed"})",
     "server_list[0].device[0].device_id \"-1\" is not a number"},
    {"non-numeric server_count",
     R"({"version": "1.0", "server_count": "one", "server_list": [{"server_id": "a", "device": [{"device_id": "0",
        "device_ip": "a", "rank_id": "0"}], "host_nic_ip": "reserve"}], "status": "completed"})",
     "server_count \"one\" is not a number"},
    {"duplicate rank id",
     R"({"version": "1.0", "server_count": "1", "server_list": [{"server_id": "a", "device": [
        {"device_id": "0", "device_ip": "a", "rank_id": "0"}, {"device_id": "1", "device_ip": "a", "rank_id": "0"}],
        "host_nic_ip": "reserve"}], "status": "completed"})",
     "server_list[0].device[1].rank_id \"0\" duplicates server_list[0].device[0].rank_id"},
    {"gap in rank ids",
     R"({"version": "1.0", "server_count": "1", "server_list": [{"server_id": "a", "device": [
        {"device_id": "0", "device_ip": "a", "rank_id": "0"}, {"device_id": "1", "device_ip": "a", "rank_id": "2"}],
        "host_nic_ip": "reserve"}], "status": "completed"})",
     "server_list[0].device[1].rank_id \"2\" is out of range: the table has 2 device(s), so rank ids must be 0..1"},
    {"server_count differs",
     R"({"version": "1.0", "server_count": "2", "server_list": [{"server_id": "a", "device": [{"device_id": "0",
        "device_ip": "a", "rank_id": "0"}], "host_nic_ip": "reserve"}], "status": "completed"})",
     "server_count \"2\" but server_list has 1 server(s)"},
    {"status not completed",
     R"({"version": "1.0", "server_count": "1", "server_list": [{"server_id": "a", "device": [{"device_id": "0",
        "device_ip": "a", "rank_id": "0"}], "host_nic_ip": "reserve"}], "status": "initializing"})",
     "status is \"initializing\", expected \"completed\""},
    {"duplicate device_id",
     R"({"version": "1.0", "server_count": "1", "server_list": [{"server_id": "a", "device": [
        {"device_id": "3", "device_ip": "a", "rank_id": "0"}, {"device_id": "3", "device_ip": "a", "rank_id": "1"}],
        "host_nic_ip": "reserve"}], "status": "completed"})",
     "server_list[0].device[1].device_id \"3\" duplicates server_list[0].device[0] on server a"},
    {"empty device list",
     R"({"version": "1.0", "server_count": "1", "server_list": [{"server_id": "a", "device": [],
        "host_nic_ip": "reserve"}], "status": "completed"})",
     "server_list[0].device is empty"},
    {"empty server list",
     R"({"version": "1.0", "server_count": "0", "server_list": [], "status": "completed"})",
     "server_list is empty"},
    {"device list not a list",
     R"({"version": "1.0", "server_count": "1", "server_list": [{"server_id": "a", "device": {"device_id": "0"},
        "host_nic_ip": "reserve"}], "status": "completed"})",
     "server_list[0].device must be a list"},
    {"server_id twice",
     R"({"version": "1.0", "server_count": "2", "server_list": [
        {"server_id": "a", "device": [{"device_id": "0", "device_ip": "a", "rank_id": "0"}], "host_nic_ip": "reserve"},
        {"server_id": "a", "device": [{"device_id": "1", "device_ip": "a", "rank_id": "1"}], "host_nic_ip": "reserve"}],
        "status": "completed"})",
     "server_list[1].server_id \"a\" appears twice"},
    {"not an object", R"(["version", "1.0"])", "the table must be an object"},
};

TEST(RankTable, RefusesMalformedTablesNamingTheEntry) {
  for (const auto& bad : kBadTables) {
    const std::string err = error_of(bad.json);
    EXPECT_NE(err.find(bad.message), std::string::npos) << bad.name << ": got \"" << err << "\"";
  }
}

TEST(RankTable, LoadNamesTheFile) {
  const auto dir = std::filesystem::temp_directory_path();
  const auto path = (dir / "gf_rank_table_bad.json").string();
  std::ofstream(path) << R"({"version": "1.0", "server_count": "1", "server_list": [{"server_id": "a",
    "device": [{"device_id": "zero", "device_ip": "a", "rank_id": "0"}], "host_nic_ip": "reserve"}],
    "status": "completed"})";
  try {
    load_rank_table(path);
    FAIL() << "accepted a non-numeric device_id";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank table " + path + ": server_list[0].device[0].device_id \"zero\" is not a "
                                         "number"),
              std::string::npos)
        << e.what();
  }
  std::ofstream(path) << "{\"version\": \"1.0\",";
  try {
    load_rank_table(path);
    FAIL() << "accepted truncated JSON";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank table " + path + ": not valid JSON"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
  try {
    load_rank_table(path);
    FAIL() << "accepted a missing file";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank table " + path + ": cannot open"), std::string::npos) << e.what();
  }
}

TEST(RankTable, MergeRenumbersInArgumentOrder) {
  const RankTable a = one_server("10.0.0.2", 8), b = one_server("10.0.0.1", 8);
  const RankTable m = merge_rank_tables({a, b});
  ASSERT_EQ(m.servers.size(), 2u);
  EXPECT_EQ(m.rank_count(), 16);
  EXPECT_EQ(m.servers[0].server_id, "10.0.0.2");  // argument order, not address order
  EXPECT_EQ(m.servers[1].server_id, "10.0.0.1");
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(m.servers[0].devices[d].rank_id, d);
    EXPECT_EQ(m.servers[1].devices[d].rank_id, 8 + d);
    EXPECT_EQ(m.servers[1].devices[d].device_id, d);
  }
  const auto j = rank_table_to_json(m);
  EXPECT_EQ(j["server_count"], "2");
  EXPECT_EQ(j["server_list"][1]["device"][7]["rank_id"], "15");
  EXPECT_EQ(j["status"], "completed");
  // The merged table is itself valid.
  EXPECT_EQ(parse_rank_table(j, "merged").rank_count(), 16);
}

TEST(RankTable, MergeRefusesTheSameServerTwice) {
  const RankTable a = one_server("10.0.0.1", 2);
  try {
    merge_rank_tables({a, a});
    FAIL() << "merged a server with itself";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("server 10.0.0.1 is in table 1 and in table 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(merge_rank_tables({}), std::runtime_error);
}

}  // namespace
}  // namespace gf
