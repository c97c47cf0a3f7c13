// Where rank 0 writes TensorBoard event files (runner/report/tensorboard.h), from the three ways a config
// can ask for them:
//   - MindFormers' SummaryMonitor callback (mindformers/core/callback/callback.py, SummaryMonitor):
//     `summary_dir` as written (MindFormers hands it to MindSpore's SummaryCollector unchanged, so a
//     relative one is under the working directory), by default <output_dir>/summary/rank_0
//     (MindFormers' get_output_subpath('summary', rank_id), under output_dir; rank 0 writes);
//   - MindFormers' `tensorboard` section (r1.5 on; mindformers/trainer/base_trainer.py and
//     mindformers/utils/tensorboard.py): `tensorboard.tensorboard_dir`/rank_0, as MindFormers joins
//     rank_{rank_id} to it;
//   - Megatron's top-level `tensorboard_dir` (megatron/training/arguments.py --tensorboard-dir, which
//     `gridformer train --tensorboard-dir` sets), as written.
// One event file per run: when several name different directories the first of tensorboard_dir,
// tensorboard.tensorboard_dir, the SummaryMonitor is used and the others are warned about.
#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "runner/config/read.h"

namespace gf::config_read {
namespace {

using config_tree::show;

// The SummaryMonitor keys that mean nothing here, and why (MindSpore's SummaryCollector's arguments).
const std::pair<const char*, const char*> kSummaryIgnored[] = {
    {"collect_freq", "the event file gets every line of metrics.jsonl (each per_print_times step and each evaluation)"},
    {"collect_specified_data", "MindSpore's SummaryCollector collects graphs, tensors and lineage for MindInsight; "
                               "gridformer writes the training scalars only"},
    {"keep_default_action", "it qualifies collect_specified_data; gridformer writes the training scalars only"},
    {"custom_lineage_data", "lineage data is MindInsight's; gridformer writes the training scalars only"},
    {"collect_tensor_freq", "tensors are not collected; gridformer writes the training scalars only"},
    {"max_file_size", "a run writes one event file, which is not split"},
    {"export_options", "tensors are not exported; gridformer writes the training scalars only"},
};

}  // namespace

const std::vector<std::string>& summary_monitor_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = {"summary_dir"};
    for (const auto& [key, why] : kSummaryIgnored) k.push_back(key);
    return k;
  }();
  return keys;
}

void read_summary_monitor(ReadContext& x, const std::string& at) {
  Config& c = x.c;
  if (c.tensorboard_dir_from.rfind("callbacks.", 0) == 0) {
    x.refuse("`" + at + ".type: SummaryMonitor`: a second SummaryMonitor (" + c.tensorboard_dir_from.substr(0, c.tensorboard_dir_from.find(' ')) +
             " is one); a run writes one event file: keep one");
    return;
  }
  const YAML::Node item = config_tree::find(x.rd.root(), at);
  for (const auto& [key, why] : kSummaryIgnored)
    if (item[key].IsDefined())
      x.warn("`" + at + "." + key + ": " + show(x.rd.node(at + "." + key)) + "`: " + why + "; ignored");
  const YAML::Node dir = item["summary_dir"].IsDefined() ? x.rd.node(at + ".summary_dir") : YAML::Node();
  if (dir.IsScalar() && !dir.Scalar().empty()) {
    c.tensorboard_dir = dir.Scalar();
    c.tensorboard_dir_from = at + ".summary_dir";
  } else {
    c.tensorboard_dir = (std::filesystem::path(c.output_dir) / "summary" / "rank_0").string();
    c.tensorboard_dir_from = at + " (SummaryMonitor without summary_dir: <output_dir>/summary/rank_0, as MindFormers)";
  }
}

void read_tensorboard(ReadContext& x) {
  Config& c = x.c;
  KeyReader& rd = x.rd;
  std::vector<std::pair<std::string, std::string>> asked;  // (key, directory), first wins
  if (const std::string top = rd.get<std::string>("tensorboard_dir"); !top.empty()) asked.emplace_back("tensorboard_dir", top);
  if (const std::string mf = rd.get<std::string>("tensorboard.tensorboard_dir"); !mf.empty())
    asked.emplace_back("tensorboard.tensorboard_dir", (std::filesystem::path(mf) / "rank_0").string());
  if (!c.tensorboard_dir.empty()) asked.emplace_back(c.tensorboard_dir_from, c.tensorboard_dir);
  if (!asked.empty()) {
    c.tensorboard_dir_from = asked[0].first;
    c.tensorboard_dir = asked[0].second;
  }
  for (size_t i = 1; i < asked.size(); ++i)
    if (asked[i].second != asked[0].second)
      x.warn("`" + asked[i].first + "` asks for TensorBoard events in " + asked[i].second + "; a run writes one event "
             "file, in " + asked[0].second + " (`" + asked[0].first + "`); remove one of them");
  const int64_t queue = rd.get<int64_t>("tensorboard.tensorboard_queue_size");
  if (queue != 10)
    x.warn("`tensorboard.tensorboard_queue_size: " + std::to_string(queue) + "`: events are not queued: each "
           "metrics.jsonl line's scalars are written to the event file at once; ignored");
  for (const char* k : {"log_loss_scale_to_tensorboard", "log_timers_to_tensorboard", "log_expert_load_to_tensorboard"})
    if (rd.get<bool>(std::string("tensorboard.") + k))
      x.warn("`tensorboard." + std::string(k) + ": True`: every scalar of metrics.jsonl is written (loss scale, "
             "iteration time and throughput, expert load included), whatever this key says");
}

}  // namespace gf::config_read
