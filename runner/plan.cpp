#include "runner/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/mixed_precision.h"
#include "models/registry.h"
#include "models/transformer_lm.h"
#include "parallel/communicator.h"

namespace gf {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, units[u]);
  return buf;
}

std::string plan_report(const Config& cfg, int ranks) {
  const ModelConfig& m = cfg.model;
  const ModelEntry& entry = find_model(m.arch, m.type);
  const TransformerSpec spec = entry.spec(m);
  const int tp = static_cast<int>(cfg.parallel.model_parallel), dp = static_cast<int>(cfg.parallel.data_parallel);
  const bool zero = cfg.parallel.optimizer_shard && dp > 1;
  const ComputeDtype cdt = parse_compute_dtype(m.compute_dtype);
  std::string out = fmt::format("plan: {} ({}) on {} rank(s): data_parallel={} model_parallel={}; micro batch {} x {} "
                                "tokens per rank, {}{}\n",
                                m.arch, m.type, ranks, dp, tp, cfg.batch_size, m.seq_length, m.compute_dtype,
                                m.recompute ? ", full recompute" : m.select_recompute ? ", selective recompute" : "");
  const ParamTable whole = TransformerLM::make_param_table(spec, entry.names, m, 0, 1);
  int64_t global = 0;
  for (const ParamSpec& p : whole.specs()) global += p.global_numel();
  out += fmt::format("parameters: {} in the model ({} layers, hidden {}, {} heads / {} key-value heads, FFN {}, "
                     "vocabulary {})\n",
                     global, spec.layers, spec.hidden, spec.heads, spec.kv_heads, spec.ffn, spec.vocab);
  double worst = 0;
  for (int r = 0; r < tp; ++r) {
    const ParamTable t = TransformerLM::make_param_table(spec, entry.names, m, r, tp);
    const BufferPlan acts = TransformerLM::activation_plan(spec, m, cfg.batch_size, tp, r);
    const int64_t n = t.total_floats();
    int64_t shard = n;
    if (zero) {
      shard = 0;
      for (int k = 0; k < dp; ++k) shard = std::max(shard, shard_begin(n, dp, k + 1) - shard_begin(n, dp, k));
    }
    const double params = 4.0 * static_cast<double>(n), moments = 8.0 * static_cast<double>(shard),
                 copy = static_cast<double>(n * low_copy_element_bytes(cdt)),
                 activations = static_cast<double>(acts.bytes()), total = 2 * params + moments + copy + activations;
    worst = std::max(worst, total);
    out += fmt::format("tensor-parallel rank {}{}: parameters {}, gradients {}, optimizer state {} (AdamW moments{}), "
                       "weight copy {}, activations {}; total {}\n",
                       r, tp > 1 ? fmt::format(" ({} of the {} ranks)", ranks / tp, ranks) : std::string(),
                       human_bytes(params), human_bytes(params), human_bytes(moments),
                       zero ? fmt::format(", a 1/{} ZeRO-1 shard", dp) : std::string(), human_bytes(copy),
                       human_bytes(activations), human_bytes(total));
    if (r == 0) {
      std::vector<BufferPlan::Entry> top = acts.entries();
      std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.floats > b.floats; });
      out += "  largest activation buffers:";
      for (size_t i = 0; i < std::min<size_t>(5, top.size()); ++i)
        out += fmt::format(" {} {}{}", top[i].name, human_bytes(4.0 * static_cast<double>(top[i].floats)),
                           i + 1 < std::min<size_t>(5, top.size()) ? "," : "");
      out += "\n";
    }
  }
  out += fmt::format("largest rank: {} (plus the binary, its libraries and the data index; peak RSS measured "
                     "1.02-1.08x of this, bench/memory_vs_plan.py)\n",
                     human_bytes(worst));
  return out;
}

}  // namespace gf
