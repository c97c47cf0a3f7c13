// Reading the pipeline keys into ParallelConfig (see runner/config/read.h): the schedule
// (parallel.pipeline_config), the model chunks per stage (pipeline_interleave with
// model_config.pp_interleave_num, MindFormers' keys) and the layers of each stage (num_layers split
// by parallel/pipeline/partition.h with model_config.offset). What only the whole layout can say
// (more stages than layers, too few micro-batches, a split the offset cannot make) is the layout
// check's (runner/config/layout_check.cpp), so `gridformer config` and the ranks refuse it alike.
#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "parallel/pipeline/partition.h"
#include "parallel/pipeline/schedule_file.h"
#include "runner/config/read.h"

namespace gf::config_read {
namespace {

using config_tree::show;

const std::string kScheduler = "parallel.pipeline_config.pipeline_scheduler";
const std::string kFileKey = "parallel.pipeline_config.pipeline_schedule_file";
const std::string kMaxLive = "parallel.pipeline_config.pipeline_schedule_max_live";
const std::string kInterleave = "parallel.pipeline_config.pipeline_interleave";
const std::string kChunks = "model.model_config.pp_interleave_num";
const std::string kOffsetKey = "model.model_config.offset";
const char* const kSchedulers =
    "1f1b (the default), gpipe, interleaved, zero_bubble_h1 (or zbh1, zb-h1, zero_bubble), zero_bubble_v (or zbv, "
    "zb-v, ZBVZeroBubble; two model chunks per stage), or file (with "
    "parallel.pipeline_config.pipeline_schedule_file)";

// A YAML list of ints into `out`; false for anything else.
bool int_list(const YAML::Node& n, std::vector<int64_t>& out) {
  if (!n.IsSequence()) return false;
  for (const YAML::Node& e : n) {
    int64_t v = 0;
    if (!e.IsScalar() || !YAML::convert<int64_t>::decode(e, v)) return false;
    out.push_back(v);
  }
  return true;
}

// model_config.offset: an int, a list of ints (one per stage) or a list of lists of ints ([chunk][stage]).
bool read_offset(ReadContext& x, LayerOffset& out) {
  const YAML::Node n = x.rd.node(kOffsetKey);
  int64_t v = 0;
  if (n.IsScalar() && YAML::convert<int64_t>::decode(n, v)) {
    out = LayerOffset::of_int(v);
    return true;
  }
  std::vector<int64_t> flat;
  if (int_list(n, flat)) {
    out = LayerOffset::per_stage(std::move(flat));
    return true;
  }
  std::vector<std::vector<int64_t>> rows;
  bool ok = n.IsSequence() && n.size() > 0;
  for (size_t i = 0; ok && i < n.size(); ++i) ok = int_list(n[i], rows.emplace_back());
  if (ok) {
    out = LayerOffset::per_chunk_stage(std::move(rows));
    return true;
  }
  x.refuse(kv(kOffsetKey, show(n)) + ": expects an int (MindFormers' default 0), a list of ints (one per pipeline "
           "stage, e.g. [1, 0, 0, -1]) or a list of such lists (one per model chunk, with pp_interleave_num)");
  return false;
}

// pipeline_interleave and pp_interleave_num: the model chunks per stage, and what they mean nothing for.
int64_t read_chunks(ReadContext& x) {
  const int64_t pp = x.c.parallel.pipeline_stage;
  const bool interleave = x.rd.get<bool>(kInterleave);
  const int64_t v = x.rd.get<int64_t>(kChunks);
  if (v < 1) {
    x.refuse(kv(kChunks, std::to_string(v)) + ": must be >= 1 (model chunks per pipeline stage; 1: no interleaving)");
    return 1;
  }
  if (v > 1 && !interleave) {
    x.warn(kv(kChunks, std::to_string(v)) + " without " + kv(kInterleave, "True") + " means nothing (MindFormers' "
           "LayerSetting reads it only when MindSpore's pipeline_interleave is on): one model chunk per stage; set "
           "pipeline_interleave: True for " + std::to_string(v) + " chunks per stage");
    return 1;
  }
  if (!interleave) return 1;
  if (pp == 1) {
    x.warn(kv(kInterleave, "True") + " with `parallel_config.pipeline_stage: 1`: one stage holds the whole model, so "
           "there is nothing to interleave (MindFormers does nothing with it either); one model chunk, ignored");
    return 1;
  }
  if (v == 1)
    x.warn(kv(kInterleave, "True") + " with " + kv(kChunks, "1") + ": one model chunk per stage, nothing to "
           "interleave; set pp_interleave_num to the chunks (virtual stages) per stage, e.g. 2");
  return v;
}

// pipeline_schedule_file and pipeline_schedule_max_live: the file read and parsed into
// ParallelConfig::pipeline_file (its placement and simulation are the layout check's, which knows the
// whole shape); the scheduler `s` becomes kFile. `raw`: pipeline_scheduler as resolved.
void read_schedule_file(ReadContext& x, const std::string& raw, pipeline::Scheduler& s) {
  auto& p = x.c.parallel;
  p.pipeline_schedule_max_live = x.rd.get<int64_t>(kMaxLive);
  if (p.pipeline_schedule_max_live < 0)
    x.refuse(kv(kMaxLive, std::to_string(p.pipeline_schedule_max_live)) + ": must be >= 0 (the most micro-batch "
             "activations a stage may hold under pipeline_schedule_file; 0: the built-in schedule's bound)");
  const std::string path = x.rd.get<std::string>(kFileKey);
  if (path.empty()) {
    if (s == pipeline::Scheduler::kFile)
      x.refuse(kv(kScheduler, raw) + " needs " + kv(kFileKey, "PATH") + ": a schedule in torch.distributed."
               "pipelining's CSV form, one row of actions per stage (docs/distributed.md, Schedules from a file)");
    return;
  }
  const YAML::Node written = config_tree::find(x.user, kScheduler);
  if (s != pipeline::Scheduler::kFile && written.IsDefined() && !written.IsNull()) {
    x.refuse(kv(kScheduler, raw) + " with " + kv(kFileKey, path) + ": the file is the schedule; set "
             "pipeline_scheduler: file (or leave it out), or drop pipeline_schedule_file");
    return;
  }
  if (p.pipeline_stage == 1) {  // the scheduler stays as written (1f1b unless told otherwise, warned then)
    p.pipeline_file.path = path;  // named, not read: nothing runs it
    x.warn(kv(kFileKey, path) + " with `parallel_config.pipeline_stage: 1`: there is no pipeline to schedule; "
           "ignored");
    return;
  }
  s = pipeline::Scheduler::kFile;
  try {
    p.pipeline_file = pipeline::read_schedule_file(path);
  } catch (const std::invalid_argument& e) {
    x.refuse(kv(kFileKey, path) + ": " + e.what());
  }
}

// pipeline_scheduler, normalised; "1f1b" over several chunks is "interleaved" (written back, so the
// resolved config says what runs).
void read_scheduler(ReadContext& x) {
  auto& p = x.c.parallel;
  const std::string raw = x.rd.get<std::string>(kScheduler);
  std::string lower = raw;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (lower == "seqpipe" || lower == "seqvpp" || lower == "seqsmartvpp") {
    x.refuse(kv(kScheduler, raw) + ": MindSpore's " + lower + " schedule is not built; gridformer schedules " +
             kSchedulers);
    return;
  }
  using pipeline::Scheduler;
  Scheduler s = Scheduler::k1F1B;
  try {
    s = pipeline::parse_scheduler(raw);  // the one list of names and aliases
  } catch (const std::invalid_argument&) {
    x.refuse(kv(kScheduler, raw) + ": unknown pipeline schedule; expects " + kSchedulers);
    return;
  }
  if (s == Scheduler::k1F1B && p.pipeline_chunks > 1) s = Scheduler::kInterleaved;
  read_schedule_file(x, raw, s);
  const std::string name = pipeline::scheduler_name(s);
  if (p.pipeline_stage == 1) {
    if (s != Scheduler::k1F1B)
      x.warn(kv(kScheduler, raw) + " with `parallel_config.pipeline_stage: 1`: there is no pipeline to schedule; "
             "ignored");
  } else if (s == Scheduler::kInterleaved && p.pipeline_chunks == 1) {
    x.refuse(kv(kScheduler, raw) + " needs several model chunks per stage: set " + kv(kInterleave, "True") + " and " +
             kv(kChunks, "2") + " (or more), or use pipeline_scheduler: 1f1b");
  } else if (s == Scheduler::kZBV && p.pipeline_chunks != 2) {
    // MindSpore's zero_bubble_v, as MindFormers configures it: pipeline_interleave with pp_interleave_num 2.
    x.refuse(kv(kScheduler, raw) + " runs two model chunks per stage, in a V: set " + kv(kInterleave, "True") +
             " and " + kv(kChunks, "2") + " (got " + std::to_string(p.pipeline_chunks) + " chunk(s) per stage)");
  } else if (s != Scheduler::kInterleaved && s != Scheduler::kZBV && s != Scheduler::kFile && p.pipeline_chunks > 1) {
    x.refuse(kv(kScheduler, raw) + " runs one model chunk per stage, but " + kv(kInterleave, "True") + " and " +
             kv(kChunks, std::to_string(p.pipeline_chunks)) + " ask for " + std::to_string(p.pipeline_chunks) +
             ": use pipeline_scheduler: interleaved (or 1f1b, which interleaves then), or pipeline_interleave: False");
  }
  p.pipeline_scheduler = s;
  if (name != raw) x.rd.root()["parallel"]["pipeline_config"]["pipeline_scheduler"] = name;
}

}  // namespace

void read_pipeline(ReadContext& x) {
  auto& p = x.c.parallel;
  p.pipeline_chunks = read_chunks(x);
  read_scheduler(x);
  if (!read_offset(x, p.layer_offset)) return;
  // The split; when it fails, config_layout_problems says why with the numbers (stage_layers stays empty).
  const int64_t layers = x.c.model.num_layers;
  if (!model_sizes_within_bounds(x.c.model)) return;  // refused by read_model; partitioning 2^31 layers would spin
  try {
    p.stage_layers = partition_layers(layers, p.pipeline_stage, p.pipeline_chunks, p.layer_offset);
  } catch (const std::invalid_argument&) {
    p.stage_layers.clear();
    return;
  }
  if (p.pipeline_stage == 1 && !p.layer_offset.is_zero())
    x.warn(kv(kOffsetKey, p.layer_offset.str()) + " with `parallel_config.pipeline_stage: 1`: one stage holds all " +
           std::to_string(layers) + " layers, so there is nothing to move; ignored");
}

}  // namespace gf::config_read
