#include "runner/report/tensorboard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "core/io/crc32c.h"
#include "runner/report/logging.h"
#include "runner/report/proto/tensorboard_event.pb.h"  // generated in the build tree (CMakeLists.txt)

namespace gf::tensorboard {
namespace {

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

// TensorBoard's EventFileWriter numbers the writers of a process from 0 (its _global_uid).
std::atomic<int> g_writers{0};

}  // namespace

std::string frame_record(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, crc32c_masked(crc32c(out.data(), 8)), 4);
  out.append(data);
  put_le(out, crc32c_masked(crc32c(data.data(), data.size())), 4);
  return out;
}

std::string file_version_event(double wall_time, const std::string& writer) {
  ::tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_file_version("brain.Event:2");
  if (!writer.empty()) e.mutable_source_metadata()->set_writer(writer);
  return e.SerializeAsString();
}

std::string scalars_event(int64_t step, const std::vector<Scalar>& scalars, double wall_time) {
  ::tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  ::tensorboard::Summary* s = e.mutable_summary();
  for (const Scalar& x : scalars) {
    ::tensorboard::Summary::Value* v = s->add_value();
    v->set_tag(x.tag);
    v->set_simple_value(static_cast<float>(x.value));
  }
  return e.SerializeAsString();
}

std::string event_file_name(int64_t unix_seconds, const std::string& host, long pid, int n) {
  return fmt::format("events.out.tfevents.{:010d}.{}.{}.{}", unix_seconds, host, pid, n);
}

std::vector<Scalar> scalars_of_metrics_line(const nlohmann::json& line, int64_t& step) {
  std::vector<Scalar> out;
  if (!line.is_object() || !line.contains("step") || !line["step"].is_number_integer()) return out;
  step = line["step"].get<int64_t>();
  auto add = [&](const nlohmann::json& obj, const char* key, std::string tag, double divisor = 1.0) {
    const auto it = obj.find(key);
    if (it != obj.end() && it->is_number()) out.push_back({std::move(tag), it->get<double>() / divisor});
  };
  // The training step line (runner/train/trainer.cpp, log_step).
  add(line, "loss", "lm loss");
  add(line, "lr", "learning-rate");
  add(line, "grad_norm", "grad-norm");
  add(line, "loss_scale", "loss-scale");
  add(line, "step_ms", "iteration-time", 1000.0);  // Megatron's is in seconds
  add(line, "tokens_per_s", "tokens-per-second");
  add(line, "samples_per_s", "samples-per-second");
  add(line, "tflops", "throughput");  // Megatron's "throughput" is TFLOP/s per GPU; ours per rank
  add(line, "mfu", "mfu");
  add(line, "aux_loss", "load_balancing_loss");
  add(line, "z_loss", "z_loss");
  add(line, "objective", "objective");
  if (const auto moe = line.find("moe"); moe != line.end() && moe->is_array()) {
    for (const nlohmann::json& m : *moe) {
      if (!m.is_object() || !m.contains("layer")) continue;
      const std::string l = std::to_string(m["layer"].get<int64_t>());
      add(m, "aux_loss", "moe/load_balancing_loss_layer_" + l);
      add(m, "z_loss", "moe/z_loss_layer_" + l);
      add(m, "tokens_max", "moe/tokens_per_expert_max_layer_" + l);
      add(m, "tokens_mean", "moe/tokens_per_expert_mean_layer_" + l);
      // The log line's "tokens per expert max/mean": 1 when the router balances perfectly.
      if (m.contains("tokens_max") && m.contains("tokens_mean") && m["tokens_mean"].is_number() &&
          m["tokens_mean"].get<double>() > 0)
        out.push_back({"moe/expert_load_max_over_mean_layer_" + l,
                       m["tokens_max"].get<double>() / m["tokens_mean"].get<double>()});
      add(m, "dropped", "moe/dropped_tokens_layer_" + l);
    }
  }
  add(line, "consumed_samples", "consumed-samples");
  add(line, "bubble", "pipeline-bubble");
  add(line, "bubble_max", "pipeline-bubble-max");
  add(line, "bubble_analytic", "pipeline-bubble-analytic");
  if (const auto rss = line.find("peak_rss_bytes"); rss != line.end() && rss->is_array())
    for (size_t r = 0; r < rss->size(); ++r)
      if ((*rss)[r].is_number()) out.push_back({"mem-peak-rss-bytes/rank_" + std::to_string(r), (*rss)[r].get<double>()});
  // The evaluation line (runner/train/trainer.cpp, run): Megatron's "<loss name> validation" and its "ppl".
  add(line, "eval_loss", "lm loss validation");
  add(line, "ppl", "lm loss validation ppl");
  // A checkpoint's save (runner/train/checkpointing.cpp): what it cost the run.
  if (line.value("event", "") == "checkpoint") {
    add(line, "snapshot_s", "checkpoint/snapshot-seconds");
    add(line, "write_s", "checkpoint/write-seconds");
    add(line, "bytes", "checkpoint/bytes");
  }
  return out;
}

EventWriter::EventWriter(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error(fmt::format("TensorBoard directory {}: cannot create it ({}); set the SummaryMonitor's "
                                         "summary_dir, tensorboard_dir or --tensorboard-dir to a directory this user "
                                         "can write", dir.string(), ec.message()));
  const double now = unix_now();
  const std::string host = host_name();
  for (int tries = 0;; ++tries) {
    path_ = dir / event_file_name(static_cast<int64_t>(now), host, static_cast<long>(getpid()), g_writers++);
    // O_EXCL: a file of another writer is never appended to or truncated.
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
    if (fd_ >= 0) break;
    if (errno != EEXIST || tries >= 100)
      throw std::runtime_error(fmt::format("TensorBoard event file {}: cannot create it ({}); set the SummaryMonitor's "
                                           "summary_dir, tensorboard_dir or --tensorboard-dir to a directory this user "
                                           "can write", path_.string(), std::strerror(errno)));
  }
  append(frame_record(file_version_event(now, "gridformer")));
}

EventWriter::~EventWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void EventWriter::append(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::runtime_error(fmt::format("TensorBoard event file {}: write failed ({})", path_.string(),
                                           n < 0 ? std::strerror(errno) : "nothing written"));
    done += static_cast<size_t>(n);
  }
}

void EventWriter::write_scalars(int64_t step, const std::vector<Scalar>& scalars, double wall_time) {
  append(frame_record(scalars_event(step, scalars, wall_time)));
}

void EventWriter::write_metrics_line(const nlohmann::json& line) {
  if (failed_) return;
  int64_t step = 0;
  const std::vector<Scalar> scalars = scalars_of_metrics_line(line, step);
  if (scalars.empty()) return;
  try {
    write_scalars(step, scalars, unix_now());
  } catch (const std::exception& e) {
    failed_ = true;
    spdlog::error("{}; no more TensorBoard events are written (metrics.jsonl still gets every line)", e.what());
  }
}

}  // namespace gf::tensorboard
