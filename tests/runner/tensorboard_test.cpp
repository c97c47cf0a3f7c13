// TensorBoard event files (runner/report/tensorboard.h): the TFRecord framing and Event encoding against
// bytes of a real event file, the scalars of metrics.jsonl's lines, and the writer's files.
// The published bytes are from tensorflow/tensorboard (commit 70b76c922822):
// tensorboard/data/server/tf_record.rs, test_success, "Event file with
// `tf.summary.scalar("accuracy", 0.99, step=77)` dumped via `xxd`" (TensorFlow's writer), and
// tensorboard/data/server/masked_crc.rs, test_compute.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/io/crc32c.h"
#include "runner/report/tensorboard.h"
#include "runner/report/proto/tensorboard_event.pb.h"  // generated in the build tree (CMakeLists.txt)

namespace gf {
namespace {

std::string bytes(const char* s, size_t n) { return std::string(s, n); }

// Record 1: the file_version event; record 2: the scalar (a TF 2 tensor summary, Value.tensor and
// Value.metadata, which our subset does not write but must read past).
const std::string kRecord1 = bytes("\x09\x00\x00\x80\x38\x99\xd6\xd7\x41\x1a\x0d" "brain.Event:2", 24);
const std::string kRecord2 = bytes(
    "\x09\xc4\x05\xb7\x3d\x99\xd6\xd7\x41"
    "\x10\x4d\x2a\x25"
    "\x0a\x23\x0a\x08" "accuracy"
    "\x42\x0a\x08\x01\x12\x00\x22\x04\xa4\x70\x7d\x3f\x4a"
    "\x0b\x0a\x09\x0a\x07" "scalars", 50);
const std::string kFile = bytes("\x18\x00\x00\x00\x00\x00\x00\x00" "\xa3\x7f\x4b\x22", 12) + kRecord1 +
                          bytes("\x12\x4b\x36\xab", 4) +
                          bytes("\x32\x00\x00\x00\x00\x00\x00\x00" "\x24\x19\x56\xec", 12) + kRecord2 +
                          bytes("\xa5\x5b\x64\x33", 4);

TEST(TensorBoard, MaskedCrcOfAPublishedRecord) {
  const std::string data = bytes("\x1a\x11" "CRC test, one two", 19);
  EXPECT_EQ(crc32c_masked(crc32c(data.data(), data.size())), 0x5794d08au);
}

TEST(TensorBoard, FramingGivesTheBytesOfTensorFlowsEventFile) {
  EXPECT_EQ(tensorboard::frame_record(kRecord1) + tensorboard::frame_record(kRecord2), kFile);
}

TEST(TensorBoard, FileVersionEventIsTensorFlowsFirstRecord) {
  double wall = 0;
  std::memcpy(&wall, kRecord1.data() + 1, 8);  // the file's wall_time (little-endian double, as we run)
  EXPECT_EQ(tensorboard::file_version_event(wall, ""), kRecord1);
  // With our writer's name the published schema's source_metadata (field 10) follows.
  ::tensorboard::Event e;
  ASSERT_TRUE(e.ParseFromString(tensorboard::file_version_event(wall, "gridformer")));
  EXPECT_EQ(e.file_version(), "brain.Event:2");
  EXPECT_EQ(e.source_metadata().writer(), "gridformer");
  EXPECT_EQ(e.wall_time(), wall);
}

TEST(TensorBoard, OurSchemaReadsTensorFlowsScalarEvent) {
  ::tensorboard::Event e;
  ASSERT_TRUE(e.ParseFromString(kRecord2));
  EXPECT_EQ(e.step(), 77);
  ASSERT_TRUE(e.has_summary());
  ASSERT_EQ(e.summary().value_size(), 1);
  EXPECT_EQ(e.summary().value(0).tag(), "accuracy");
  EXPECT_EQ(e.summary().value(0).value_case(), ::tensorboard::Summary::Value::VALUE_NOT_SET);  // a tensor, not ours
}

TEST(TensorBoard, ScalarEventEncoding) {
  // summary.proto: Value.tag = 1, Value.simple_value = 2 (float, little-endian); event.proto:
  // Event.step = 2, Event.summary = 5. 0.25f is 0x3e800000.
  const std::string got = tensorboard::scalars_event(3, {{"lm loss", 0.25}}, 0.0);
  const std::string value = bytes("\x0a\x07" "lm loss" "\x15\x00\x00\x80\x3e", 14);
  const std::string want = bytes("\x10\x03\x2a\x10\x0a\x0e", 6) + value;
  EXPECT_EQ(got, want);
}

TEST(TensorBoard, FileNameAsTensorBoardsWriter) {
  EXPECT_EQ(tensorboard::event_file_name(1700000000, "node1", 4242, 0), "events.out.tfevents.1700000000.node1.4242.0");
  EXPECT_EQ(tensorboard::event_file_name(12345, "h", 1, 3), "events.out.tfevents.0000012345.h.1.3");
}

std::map<std::string, double> by_tag(const nlohmann::json& line, int64_t& step) {
  std::map<std::string, double> m;
  for (const auto& s : tensorboard::scalars_of_metrics_line(line, step)) {
    EXPECT_EQ(m.count(s.tag), 0u) << s.tag << " twice";
    m[s.tag] = s.value;
  }
  return m;
}

TEST(TensorBoard, ScalarsOfAStepLine) {
  const nlohmann::json line = nlohmann::json::parse(
      R"({"step": 5, "epoch": 1, "loss": 3.5, "lr": 0.001, "grad_norm": null, "loss_scale": 1024.0, "skipped": true,
          "interval_steps": 4, "startup": false, "step_ms": 12.5, "tokens_per_s": 100.0, "samples_per_s": 3.0,
          "tflops": 0.02, "mfu": 0.1, "peak_rss_bytes": [1048576.0, 2097152.0],
          "aux_loss": 1.5, "z_loss": 2.5, "objective": 3.6,
          "moe": [{"layer": 1, "aux_loss": 1.5, "z_loss": 2.5, "tokens_max": 6, "tokens_mean": 4.0, "dropped": 2,
                   "assignments": 16, "tokens_per_expert": [6, 2, 4, 4]}],
          "bubble": 0.25, "bubble_max": 0.3, "bubble_analytic": 0.2})");
  int64_t step = -1;
  const auto m = by_tag(line, step);
  EXPECT_EQ(step, 5);
  const std::map<std::string, double> want = {
      {"lm loss", 3.5}, {"learning-rate", 0.001}, {"loss-scale", 1024.0}, {"iteration-time", 0.0125},
      {"tokens-per-second", 100.0}, {"samples-per-second", 3.0}, {"throughput", 0.02}, {"mfu", 0.1},
      {"load_balancing_loss", 1.5}, {"z_loss", 2.5}, {"objective", 3.6},
      {"moe/load_balancing_loss_layer_1", 1.5}, {"moe/z_loss_layer_1", 2.5}, {"moe/tokens_per_expert_max_layer_1", 6},
      {"moe/tokens_per_expert_mean_layer_1", 4.0}, {"moe/expert_load_max_over_mean_layer_1", 1.5},
      {"moe/dropped_tokens_layer_1", 2}, {"pipeline-bubble", 0.25}, {"pipeline-bubble-max", 0.3},
      {"pipeline-bubble-analytic", 0.2}, {"mem-peak-rss-bytes/rank_0", 1048576.0},
      {"mem-peak-rss-bytes/rank_1", 2097152.0}};
  EXPECT_EQ(m, want);  // grad_norm null (an overflowing step's inf): left out
}

TEST(TensorBoard, ScalarsOfAnEvalLineAndNoneOfRunStart) {
  int64_t step = -1;
  const auto m = by_tag(nlohmann::json::parse(R"({"step": 8, "eval_loss": 2.0, "ppl": 7.38905609893065})"), step);
  EXPECT_EQ(step, 8);
  EXPECT_EQ(m, (std::map<std::string, double>{{"lm loss validation", 2.0}, {"lm loss validation ppl", 7.38905609893065}}));
  EXPECT_TRUE(tensorboard::scalars_of_metrics_line(nlohmann::json{{"event", "run_start"}, {"train_steps", 5}}, step).empty());
}

// The records of a file, each CRC checked.
std::vector<std::string> read_records(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string blob = ss.str();
  std::vector<std::string> out;
  size_t pos = 0;
  auto u32 = [&](size_t at) { uint32_t v; std::memcpy(&v, blob.data() + at, 4); return v; };
  while (pos < blob.size()) {
    EXPECT_GE(blob.size() - pos, 16u);
    if (blob.size() - pos < 16) break;
    uint64_t n;
    std::memcpy(&n, blob.data() + pos, 8);
    EXPECT_EQ(u32(pos + 8), crc32c_masked(crc32c(blob.data() + pos, 8)));
    EXPECT_LE(pos + 16 + n, blob.size());
    if (pos + 16 + n > blob.size()) break;
    out.push_back(blob.substr(pos + 12, n));
    EXPECT_EQ(u32(pos + 12 + n), crc32c_masked(crc32c(blob.data() + pos + 12, n)));
    pos += 16 + n;
  }
  return out;
}

TEST(TensorBoard, EachWriterAddsItsOwnFile) {
  const std::filesystem::path dir = std::filesystem::path(GF_BINARY_DIR) / "tensorboard_test" / "nested";
  std::filesystem::remove_all(dir.parent_path());
  const mode_t old = umask(022);
  std::filesystem::path first, second;
  {
    tensorboard::EventWriter w(dir);
    first = w.path();
    w.write_metrics_line(nlohmann::json{{"event", "run_start"}});  // no scalars: no record
    w.write_metrics_line(nlohmann::json{{"step", 1}, {"loss", 4.25}, {"lr", 0.5}});
    w.write_metrics_line(nlohmann::json{{"step", 2}, {"eval_loss", 4.0}, {"ppl", 54.6}});
  }
  {
    tensorboard::EventWriter w(dir);
    second = w.path();
    w.write_scalars(7, {{"lm loss", 1.0}}, 1.0);
  }
  umask(old);
  ASSERT_NE(first, second);
  EXPECT_EQ(first.filename().string().rfind("events.out.tfevents.", 0), 0u) << first;
  struct stat st {};
  ASSERT_EQ(stat(first.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  const auto recs = read_records(first);
  ASSERT_EQ(recs.size(), 3u);
  ::tensorboard::Event e;
  ASSERT_TRUE(e.ParseFromString(recs[0]));
  EXPECT_EQ(e.file_version(), "brain.Event:2");
  ASSERT_TRUE(e.ParseFromString(recs[1]));
  EXPECT_EQ(e.step(), 1);
  ASSERT_EQ(e.summary().value_size(), 2);
  EXPECT_EQ(e.summary().value(0).tag(), "lm loss");
  EXPECT_EQ(e.summary().value(0).simple_value(), 4.25f);
  EXPECT_EQ(e.summary().value(1).tag(), "learning-rate");
  EXPECT_EQ(e.summary().value(1).simple_value(), 0.5f);
  ASSERT_TRUE(e.ParseFromString(recs[2]));
  EXPECT_EQ(e.step(), 2);
  ASSERT_EQ(e.summary().value_size(), 2);
  EXPECT_EQ(e.summary().value(1).tag(), "lm loss validation ppl");
  EXPECT_EQ(e.summary().value(1).simple_value(), 54.6f);
  EXPECT_EQ(read_records(second).size(), 2u);
  EXPECT_EQ(read_records(first).size(), 3u);  // the second writer left the first file alone
}

TEST(TensorBoard, AnUnwritableDirectoryIsNamed) {
  const std::filesystem::path file = std::filesystem::path(GF_BINARY_DIR) / "tensorboard_test_file";
  std::ofstream(file) << "x";
  try {
    tensorboard::EventWriter w(file / "sub");
    FAIL() << "a directory under a file was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find((file / "sub").string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tensorboard_dir"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gf
