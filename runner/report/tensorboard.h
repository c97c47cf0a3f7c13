// TensorBoard event files (README "TensorBoard"): what rank 0 writes to metrics.jsonl, also as
// TensorBoard scalars. An event file is a TFRecord file (each record: uint64 length, masked CRC-32C
// of those 8 bytes, the data, masked CRC-32C of the data; all little-endian) of serialized `Event`
// messages (runner/report/proto/tensorboard_event.proto, from TensorBoard's event.proto and summary.proto).
// The framing is that of tensorflow/tensorboard's tensorboard/summary/writer/record_writer.py, the
// file name and first record those of its event_file_writer.py (PyTorch's SummaryWriter writes the
// same). The scalar tags are Megatron-LM's where it has one (megatron/training/training.py,
// training_log and evaluate_and_print_results; megatron/core/transformer/moe/moe_logging.py).
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace gf::tensorboard {

// One TFRecord: the 12-byte header, `data`, the 4-byte footer.
std::string frame_record(std::string_view data);

// events.out.tfevents.<unix time, 10 digits>.<host>.<pid>.<n>: TensorBoard's EventFileWriter's
// name (TensorFlow's C++ writer stops after the host; the pid and a per-process counter keep two
// writers started in the same second apart). TensorBoard reads every file whose name contains
// "tfevents", in name order, so a later run's file sorts after an earlier one's.
std::string event_file_name(int64_t unix_seconds, const std::string& host, long pid, int n);

struct Scalar {
  std::string tag;
  double value;  // written as float32 (Summary.Value.simple_value)
};

// The serialized Event of a file's first record: file_version "brain.Event:2" at `wall_time`, with
// source_metadata naming `writer` unless it is empty (TensorFlow's own writer names none).
std::string file_version_event(double wall_time, const std::string& writer);
// The serialized Event of `scalars` at `step`: one Summary, one Value per scalar.
std::string scalars_event(int64_t step, const std::vector<Scalar>& scalars, double wall_time);

// The scalars of one metrics.jsonl line (runner/train/trainer.cpp's step and evaluation lines) with their
// step; none for the run_start line. Values that are not numbers are left out (an overflowing fp16
// step's grad_norm is inf, which JSON writes as null). The tags (docs: README "TensorBoard"):
//   step line:   lm loss, learning-rate, grad-norm, loss-scale, iteration-time (seconds),
//                tokens-per-second, samples-per-second, throughput (TFLOP/s per rank), mfu;
//                MoE: load_balancing_loss, z_loss, objective, and per MoE layer l
//                moe/{load_balancing_loss,z_loss,tokens_per_expert_max,tokens_per_expert_mean,
//                expert_load_max_over_mean,dropped_tokens}_layer_l;
//                pipeline: pipeline-bubble, pipeline-bubble-max, pipeline-bubble-analytic;
//                memory: mem-peak-rss-bytes/rank_r for every rank r;
//   eval line:   lm loss validation, lm loss validation ppl.
std::vector<Scalar> scalars_of_metrics_line(const nlohmann::json& line, int64_t& step);

class EventWriter {
 public:
  // Creates `dir` (and its parents) and a new event file in it, mode 0640, whose first record is
  // the Event TensorBoard identifies a file by: file_version "brain.Event:2". An existing file is
  // never reused or truncated: each run adds its own. Throws naming the directory or file.
  explicit EventWriter(const std::filesystem::path& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One Event at `step` whose Summary holds `scalars`, as one write to the file (no buffering in
  // this process, so a crash after it loses nothing). Throws naming the file when the write fails.
  void write_scalars(int64_t step, const std::vector<Scalar>& scalars, double wall_time);
  // The scalars of a metrics.jsonl line at its step, now. A write that fails is logged once and the
  // writer stops (training goes on; metrics.jsonl still has every line).
  void write_metrics_line(const nlohmann::json& line);

  const std::filesystem::path& path() const { return path_; }

 private:
  void append(const std::string& bytes);

  std::filesystem::path path_;
  int fd_ = -1;
  bool failed_ = false;
};

}  // namespace gf::tensorboard
