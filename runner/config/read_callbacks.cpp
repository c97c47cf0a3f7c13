// The `callbacks` and `eval_callbacks` lists (MindFormers' callbacks: MFLossMonitor, CheckpointMonitor and its keys,
// SummaryMonitor, ...) and `metric.type`, read into the Config (read.h).
#include <algorithm>
#include <string>
#include <vector>

#include "runner/config/read.h"
#include "runner/config/schema.h"

namespace gf::config_read {

using config_tree::show;

void read_callbacks(ReadContext& x) {
  const struct { const char* type; std::vector<std::string> keys; } kinds[] = {
      {"MFLossMonitor", {"per_print_times"}},
      {"CheckpointMonitor", {"prefix", "save_checkpoint_steps", "keep_checkpoint_max", "integrated_save",
                             "save_network_params", "save_trainable_params", "async_save", "directory",
                             "megatron_format", "megatron_transformer_impl", "megatron_moe_grouped_gemm",
                             "megatron_use_mcore_models", "megatron_ddp_bucket_size"}},
      {"ObsMonitor", {}}, {"SummaryMonitor", summary_monitor_keys()}, {"ProfileMonitor", {}}, {"EvalCallBack", {}}};
  Config& c = x.c;
  const YAML::Node cbs = config_tree::find(x.rd.root(), "callbacks");
  for (size_t i = 0; i < cbs.size(); ++i) {
    const std::string at = "callbacks." + std::to_string(i);
    std::string type = cbs[i]["type"] ? x.rd.get<std::string>(at + ".type") : "";
    const std::string written = type;
    if (type == "CheckpointMointor") type = "CheckpointMonitor";  // MindFormers' own spelling, kept as an alias
    const auto* kind = std::find_if(std::begin(kinds), std::end(kinds), [&](const auto& k) { return type == k.type; });
    if (kind == std::end(kinds)) {
      x.refuse("`" + at + ".type: " + written + "`: unknown type; registered: MFLossMonitor, CheckpointMonitor "
               "(or CheckpointMointor), ObsMonitor, SummaryMonitor, ProfileMonitor, EvalCallBack");
      continue;
    }
    for (auto it = cbs[i].begin(); it != cbs[i].end(); ++it) {
      const std::string key = it->first.as<std::string>();
      if (key == "type") continue;
      if (std::find(kind->keys.begin(), kind->keys.end(), key) == kind->keys.end()) {
        std::string known;
        for (const auto& k : kind->keys) known += (known.empty() ? "" : ", ") + k;
        x.refuse("`" + at + "." + key + "`: " + written + " takes no key " + key +
                 (known.empty() ? " (it takes none)" : " (its keys: " + known + ")"));
        continue;
      }
      const YAML::Node v = x.rd.node(at + "." + key);
      if (key == "per_print_times") c.per_print_times = v.as<int64_t>();
      else if (key == "prefix") c.checkpoint.prefix = v.as<std::string>();
      else if (key == "save_checkpoint_steps") c.checkpoint.save_steps = v.as<int64_t>();
      else if (key == "keep_checkpoint_max") c.checkpoint.keep_max = v.as<int64_t>();
      else if (key == "directory") c.checkpoint.directory = v.as<std::string>();
      else if (key == "async_save") c.checkpoint.async_save = v.as<bool>();
      else if (key == "megatron_format") c.checkpoint.megatron_format = v.as<bool>();
      else if (key == "megatron_transformer_impl") {
        c.checkpoint.megatron_transformer_impl = v.as<std::string>();
        if (v.as<std::string>() != "transformer_engine" && v.as<std::string>() != "local")
          x.refuse("`" + at + ".megatron_transformer_impl: " + v.as<std::string>() + "`: Megatron's --transformer-impl is "
                   "transformer_engine or local");
      }
      else if (key == "megatron_moe_grouped_gemm") c.checkpoint.megatron_moe_grouped_gemm = v.as<bool>();
      else if (key == "megatron_use_mcore_models") c.checkpoint.megatron_use_mcore_models = v.as<bool>();
      else if (key == "megatron_ddp_bucket_size") c.checkpoint.megatron_ddp_bucket_size = v.as<int64_t>();
      else if (key == "integrated_save" || key == "save_network_params" || key == "save_trainable_params")
        // MindSpore's integrated_save merges the sliced parameters into whole ones when saving; ours are
        // saved as boxes of the global tensors and load under any layout, so none of these changes the files.
        x.warn("`" + at + "." + key + ": " + show(v) + "`: ignored: a checkpoint holds every tensor's slices as boxes of "
               "the global tensor, loads under any layout, and `gridformer convert` writes one whole file");
    }
    // The resolved config (gridformer config) shows what runs: the keys of this callback that are read, with their
    // defaults where the file leaves them out (save_checkpoint_steps 1 is a checkpoint every step).
    static const YAML::Node templates = YAML::Load(kItemTemplates)["callbacks"];
    for (const char* key : {"per_print_times", "prefix", "save_checkpoint_steps", "keep_checkpoint_max", "async_save", "directory"})
      if (std::find(kind->keys.begin(), kind->keys.end(), key) != kind->keys.end() && !cbs[i][key] && templates[key]) {
        YAML::Node item = cbs[i];  // a handle on the resolved tree's item
        item[key] = YAML::Clone(templates[key]);
      }
    if (type == "CheckpointMonitor") {
      c.checkpoint.enabled = true;
      if (c.checkpoint.save_steps <= 0)
        x.refuse("`" + at + ".save_checkpoint_steps: " + std::to_string(c.checkpoint.save_steps) +
                 "`: must be > 0 (a checkpoint every that many steps)");
      if (c.checkpoint.megatron_ddp_bucket_size < 0)
        x.refuse("`" + at + ".megatron_ddp_bucket_size: " + std::to_string(c.checkpoint.megatron_ddp_bucket_size) +
                 "`: must be >= 0 (0: one grad bucket)");
      if (c.checkpoint.keep_max < 0)  // MindSpore's CheckpointConfig refuses a negative one too
        x.refuse("`" + at + ".keep_checkpoint_max: " + std::to_string(c.checkpoint.keep_max) +
                 "`: must be >= 0 (the newest that many checkpoints are kept; 0: all)");
    } else if (type == "SummaryMonitor") {
      read_summary_monitor(x, at);
    } else if (type != "MFLossMonitor" && type != "ObsMonitor") {
      x.warn("`" + at + ".type: " + written + "`: this callback is not built yet; ignored");
    }
  }
  if (c.per_print_times <= 0) x.refuse("`callbacks.*.per_print_times`: must be > 0");
  const YAML::Node ecbs = config_tree::find(x.rd.root(), "eval_callbacks");
  for (size_t i = 0; i < ecbs.size(); ++i) {
    const std::string at = "eval_callbacks." + std::to_string(i) + ".type";
    const std::string type = ecbs[i]["type"] ? x.rd.get<std::string>(at) : "";
    if (type != "ObsMonitor")  // ObsMonitor uploads to OBS on ModelArts only: elsewhere MindFormers' does nothing either
      x.warn("`" + at + ": " + type + "`: evaluation callbacks other than ObsMonitor are not built; ignored");
  }
  const std::string metric = x.rd.get<std::string>("metric.type");
  if (metric != "PerplexityMetric")
    x.warn("`metric.type: " + metric + "`: not built; evaluation reports loss and perplexity (PerplexityMetric)");
}

}  // namespace gf::config_read
