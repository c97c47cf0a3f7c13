#include "runner/config/layout_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "parallel/pipeline/partition.h"
#include "parallel/pipeline/schedule_file.h"
#include "runner/config/arch_section.h"

namespace gf {
namespace {

// The model-side rules for a tensor-parallel size (independent of the rank count).
std::vector<std::string> model_split_problems(const Config& cfg, int64_t mp) {
  std::vector<std::string> out;
  const ModelConfig& m = cfg.model;
  auto need = [&](int64_t value, const char* key) {
    if (value % mp != 0)
      out.push_back(fmt::format("`{}` ({}) is not divisible by `parallel_config.model_parallel` ({})", key, value, mp));
  };
  need(m.num_heads, "model.model_config.num_heads");
  // Each rank holds whole key/value heads and the query heads that read them.
  if (m.kv_heads() != m.num_heads && m.kv_heads() % mp != 0)
    out.push_back(fmt::format("`model.model_config.n_kv_heads` ({}) is not divisible by `parallel_config.model_parallel` "
                              "({}): each rank holds whole key/value heads; use a model_parallel that divides "
                              "n_kv_heads",
                              m.kv_heads(), mp));
  need(m.hidden_size, "model.model_config.hidden_size");
  if (m.ffn_hidden() % mp != 0) out.push_back(arch_section_or_base(m.type).ffn_problem(m, mp));
  if (cfg.parallel.use_seq_parallel && m.seq_length % mp != 0)
    out.push_back(fmt::format("`model.model_config.seq_length` ({}) is not divisible by `parallel_config.model_parallel` "
                              "({}), which `parallel_config.use_seq_parallel: True` needs",
                              m.seq_length, mp));
  return out;
}

// What context_parallel needs of the model (models/stage_plan.cpp checks the same when it is built).
std::vector<std::string> context_parallel_problems(const Config& cfg) {
  std::vector<std::string> out;
  const int64_t cp = cfg.parallel.context_parallel, mp = cfg.parallel.model_parallel;
  if (cp <= 1) return out;
  const ModelConfig& m = cfg.model;
  const std::string& algo = cfg.parallel.context_parallel_algo;
  const bool ring = algo == "colossalai_cp" || algo == "hybrid_cp";
  // Ulysses' degree: the whole group (ulysses_cp), ulysses_degree_in_cp (hybrid_cp), none (the ring alone).
  const int64_t U = algo == "ulysses_cp" ? cp : algo == "hybrid_cp" ? cfg.parallel.ulysses_degree_in_cp : 1;
  if (m.seq_length % (ring ? 2 * cp : cp) != 0)
    out.push_back(ring ? fmt::format("`model.model_config.seq_length` ({}) is not divisible by 2 x `parallel_config.context_parallel` "
                                     "({}): {} cuts it into 2 x context_parallel chunks (causal load balance)",
                                     m.seq_length, 2 * cp, algo)
                       : fmt::format("`model.model_config.seq_length` ({}) is not divisible by `parallel_config.context_parallel` ({})",
                                     m.seq_length, cp));
  else if (cfg.parallel.use_seq_parallel && (m.seq_length / cp) % mp != 0)
    out.push_back(fmt::format("`model.model_config.seq_length` / `context_parallel` ({}) is not divisible by "
                              "`parallel_config.model_parallel` ({}), which `use_seq_parallel: True` needs",
                              m.seq_length / cp, mp));
  if (U > 1 && (m.num_heads % (mp * U) != 0 || m.kv_heads() % (mp * U) != 0))
    out.push_back(fmt::format("`model.model_config.num_heads` ({}) and the key/value heads ({}) must be divisible by "
                              "`model_parallel` x `{}` ({} x {}): {} gives each rank of a Ulysses group whole heads",
                              m.num_heads, m.kv_heads(), ring ? "ulysses_degree_in_cp" : "context_parallel", mp, U, algo));
  if (m.moe.expert_num > 1 && m.moe.capacity_factor > 0)
    out.push_back(fmt::format("`parallel_config.context_parallel` ({}) with `moe_config.capacity_factor` {}: capacity drops "
                              "tokens by their place in the whole sequence, which context parallel splits; not built: use "
                              "capacity_factor: 0 (dropless; the balancing loss is summed over the context group)",
                              cp, m.moe.capacity_factor));
  return out;
}

// The largest expert_parallel, not above the one asked for, that divides both `dp` and the expert
// count: a value of expert_parallel that works with data_parallel `dp` (1 for a dense model).
int64_t fitting_expert_parallel(const Config& cfg, int64_t dp) {
  const int64_t experts = cfg.model.moe.expert_num;
  if (experts <= 1 || dp < 1) return 1;
  for (int64_t e = std::min(cfg.parallel.expert_parallel, dp); e > 1; --e)
    if (dp % e == 0 && experts % e == 0) return e;
  return 1;
}

}  // namespace

std::vector<std::string> layout_problems(const Config& cfg, int world_size) {
  const auto& p = cfg.parallel;
  std::vector<std::string> out;
  if (p.data_parallel < 1 || p.model_parallel < 1 || p.pipeline_stage < 1) {
    out.push_back("`parallel_config.data_parallel`, `model_parallel` and `pipeline_stage` must each be >= 1");
    return out;
  }
  const int64_t need = p.ranks();
  if (need != world_size)
    out.push_back(p.context_parallel > 1
                      ? fmt::format("`parallel_config.data_parallel` ({}) x `model_parallel` ({}) x `context_parallel` ({}) x "
                                    "`pipeline_stage` ({}) = {}, but {} rank(s) are running",
                                    p.data_parallel, p.model_parallel, p.context_parallel, p.pipeline_stage, need, world_size)
                      : fmt::format("`parallel_config.data_parallel` ({}) x `model_parallel` ({}) x `pipeline_stage` ({}) = {}, "
                                    "but {} rank(s) are running",
                                    p.data_parallel, p.model_parallel, p.pipeline_stage, need, world_size));
  for (auto& s : context_parallel_problems(cfg)) out.push_back(std::move(s));
  for (auto& s : config_layout_problems(cfg)) out.push_back(std::move(s));
  for (auto& s : model_split_problems(cfg, p.model_parallel)) out.push_back(std::move(s));
  return out;
}

// The schedule file against the layout: placed on the stages, simulated, its live micro-batches within the bound
// (pipeline::check_schedule_file), and its split backward (I and W cells) not under recompute, as ZB-H1's.
static std::vector<std::string> schedule_file_problems(const Config& cfg) {
  const auto& p = cfg.parallel;
  const pipeline::ScheduleFile& f = p.pipeline_file;
  const std::string key = "`parallel.pipeline_config.pipeline_schedule_file: " + f.path + "`: ";
  // Each (micro-batch, chunk) takes a forward and a backward cell on every stage: a micro_batch_num the
  // file cannot hold is refused before the simulator sizes its tables by it.
  size_t cells = 0;
  bool split = false;
  for (const auto& row : f.rows) {
    cells = std::max(cells, row.size());
    for (const pipeline::FileCell& c : row) split = split || c.op == pipeline::Op::kBackwardWeight;
  }
  if (p.micro_batch_num > static_cast<int64_t>(cells / 2) || p.pipeline_chunks > static_cast<int64_t>(cells / 2) ||
      p.micro_batch_num * p.pipeline_chunks > static_cast<int64_t>(cells / 2))
    return {fmt::format("{}its longest row has {} actions, fewer than the forward and backward of each of "
                        "`parallel_config.micro_batch_num` ({}) x {} model chunks on a stage",
                        key, cells, p.micro_batch_num, p.pipeline_chunks)};
  std::vector<std::string> out;
  const pipeline::Shape shape = pipeline::file_shape(
      f, {static_cast<int>(p.pipeline_stage), static_cast<int>(p.micro_batch_num), static_cast<int>(p.pipeline_chunks)});
  const int max_live = static_cast<int>(std::min<int64_t>(p.pipeline_schedule_max_live, 1 << 30));
  if (std::string e = pipeline::check_schedule_file(f, shape, max_live);
      !e.empty())
    out.push_back(key + e);
  if (split && (cfg.recompute || cfg.select_recompute))
    out.push_back(fmt::format("{}its backward-weight cells (W) with `recompute_config.{}: True`: the deferred weight "
                              "pass reads activations that recompute overwrites; use fused backwards (B) with "
                              "recompute, or turn recompute off",
                              key, cfg.recompute ? "recompute" : "select_recompute"));
  return out;
}

std::vector<std::string> pipeline_problems(const Config& cfg) {
  const auto& p = cfg.parallel;
  std::vector<std::string> out;
  if (p.pipeline_stage < 1) {
    out.push_back(fmt::format("`parallel_config.pipeline_stage: {}`: must be >= 1 (1: no pipeline)", p.pipeline_stage));
    return out;
  }
  try {
    partition_layers(cfg.model.num_layers, p.pipeline_stage, p.pipeline_chunks, p.layer_offset);
  } catch (const std::invalid_argument& e) {
    out.push_back(e.what());
  }
  if (p.pipeline_stage == 1) return out;
  const int64_t pp = p.pipeline_stage, m = p.micro_batch_num;
  const std::string batch = "(global batch = batch_size x data_parallel x micro_batch_num)";
  // MindFormers' rule (mindformers/modules/transformer/op_parallel_config.py, _check_config): fewer
  // micro-batches than stages leave stages idle the whole step.
  if (m < pp)
    out.push_back(fmt::format("`parallel_config.micro_batch_num` ({}) is less than `parallel_config.pipeline_stage` ({}): "
                              "every stage needs a micro-batch of its own in flight; use micro_batch_num: {} or more {}",
                              m, pp, pp, batch));
  else if (p.pipeline_scheduler == pipeline::Scheduler::kInterleaved && m % pp != 0) {
    const int64_t below = m / pp * pp, above = below + pp;
    out.push_back(fmt::format("`parallel_config.micro_batch_num` ({}) is not a multiple of `parallel_config.pipeline_stage` "
                              "({}), which the interleaved schedule (`parallel.pipeline_config.pipeline_scheduler`, {} "
                              "model chunks per stage) needs, as Megatron's does; use micro_batch_num: {} {}",
                              m, pp, p.pipeline_chunks, m - below <= above - m ? below : above, batch));
  }
  // MindFormers ignores gradient_accumulation_steps under pipeline parallelism (mindformers/trainer/base_trainer.py,
  // _check_global_batch_size_for_auto_parallel); here it is refused rather than ignored.
  if (cfg.gradient_accumulation_steps > 1)
    out.push_back(fmt::format("`runner_config.gradient_accumulation_steps: {}` with `parallel_config.pipeline_stage: {}`: "
                              "under pipeline parallelism the micro-batches accumulate (parallel_config.micro_batch_num "
                              "per step); set gradient_accumulation_steps: 1 and micro_batch_num: {} for the same global "
                              "batch",
                              cfg.gradient_accumulation_steps, pp, m * cfg.gradient_accumulation_steps));
  if ((p.pipeline_scheduler == pipeline::Scheduler::kZBH1 || p.pipeline_scheduler == pipeline::Scheduler::kZBV) &&
      (cfg.recompute || cfg.select_recompute))
    out.push_back(fmt::format("`parallel.pipeline_config.pipeline_scheduler: {}` with `recompute_config.{}: "
                              "True`: the deferred weight pass reads activations that recompute overwrites; use "
                              "pipeline_scheduler: 1f1b with recompute, or turn recompute off",
                              pipeline::scheduler_name(p.pipeline_scheduler),
                              cfg.recompute ? "recompute" : "select_recompute"));
  if (p.pipeline_scheduler == pipeline::Scheduler::kFile && !p.pipeline_file.path.empty())
    for (auto& s : schedule_file_problems(cfg)) out.push_back(std::move(s));
  return out;
}

std::vector<std::string> expert_parallel_problems(const Config& cfg) {
  const auto& p = cfg.parallel;
  const MoeConfig& moe = cfg.model.moe;
  const int64_t ep = p.expert_parallel;
  std::vector<std::string> out;
  if (ep < 1) {
    out.push_back(fmt::format("`parallel_config.expert_parallel: {}`: must be >= 1 (1: every rank holds every expert)",
                              ep));
    return out;
  }
  if (ep == 1) return out;
  if (moe.expert_num <= 1) {
    out.push_back(fmt::format("`parallel_config.expert_parallel: {}` with `moe_config.expert_num: {}`: expert parallelism "
                              "splits the experts of MoE layers, and this model has none (expert_num 1 is dense); use "
                              "expert_parallel: 1, or an expert_num that is a multiple of {} for a Mixture-of-Experts model",
                              ep, moe.expert_num, ep));
    return out;
  }
  const int64_t fit = fitting_expert_parallel(cfg, p.data_parallel);
  if (moe.expert_num % ep != 0)
    out.push_back(fmt::format("`moe_config.expert_num` ({}) is not divisible by `parallel_config.expert_parallel` ({}): "
                              "each rank of an expert-parallel group holds expert_num / expert_parallel whole experts; "
                              "use expert_parallel: {} (it divides expert_num and data_parallel)",
                              moe.expert_num, ep, fit));
  if (p.data_parallel >= 1 && p.data_parallel % ep != 0)
    out.push_back(fmt::format("`parallel_config.data_parallel` ({}) is not divisible by `parallel_config.expert_parallel` "
                              "({}): expert parallelism is carved from data parallelism (each group of expert_parallel "
                              "data-parallel ranks holds one copy of the experts); use expert_parallel: {}, or a "
                              "data_parallel that is a multiple of {}",
                              p.data_parallel, ep, fit, ep));
  return out;
}

// MindFormers' per-stage select_recompute list against the pipeline: one number per stage, each at
// most the stage's layers; a list per model chunk (interleaved) is not built.
std::vector<std::string> recompute_list_problems(const Config& cfg) {
  const std::vector<int64_t>& n = cfg.select_recompute_per_stage;
  const auto& p = cfg.parallel;
  std::vector<std::string> out;
  if (n.empty()) return out;
  std::string list;
  for (const int64_t v : n) list += (list.empty() ? "" : ", ") + std::to_string(v);
  const std::string key = "`recompute_config.select_recompute: [" + list + "]`";
  if (p.pipeline_chunks > 1) {
    out.push_back(key + " with `model.model_config.pp_interleave_num: " + std::to_string(p.pipeline_chunks) +
                  "`: a list per model chunk is not built; use True, or pp_interleave_num: 1");
    return out;
  }
  if (static_cast<int64_t>(n.size()) != p.pipeline_stage) {
    out.push_back(fmt::format("{}: {} number(s) for `parallel_config.pipeline_stage: {}`; give one per stage (the layers "
                              "to recompute, the first of each stage's)",
                              key, n.size(), p.pipeline_stage));
    return out;
  }
  const std::vector<int64_t> layers = p.stage_layers.empty() ? std::vector<int64_t>{cfg.model.num_layers} : p.stage_layers;
  for (size_t st = 0; st < layers.size() && st < n.size(); ++st)
    if (n[st] > layers[st])
      out.push_back(fmt::format("{}: stage {} holds {} layers, fewer than the {} to recompute there", key, st, layers[st],
                                n[st]));
  return out;
}

std::vector<std::string> shard_problems(const Config& cfg) {
  std::vector<std::string> out;
  const ParallelConfig& p = cfg.parallel;
  const int64_t H = p.shard_degree;
  if (H <= 0 || p.zero_stage == 0) return out;
  // The shard groups cut the data-parallel x context group; the experts' shards cut their own
  // data-parallel group (data_parallel / expert_parallel x context_parallel), so N x expert_parallel
  // may not exceed data_parallel x context_parallel (SMP's rule).
  const int64_t D = p.data_parallel * p.context_parallel;
  const int64_t E = p.expert_parallel > 0 && p.data_parallel % p.expert_parallel == 0 ? D / p.expert_parallel : D;
  const int64_t within = cfg.model.moe.enabled() ? E : D;
  if (within % H == 0) return out;
  int64_t fit = 1;
  for (int64_t h = 1; h <= within; ++h)
    if (within % h == 0 && h <= H) fit = h;
  out.push_back(fmt::format(
      "`parallel_config.hybrid_shard_degree` / `parallel.parallel_optimizer_config.optimizer_weight_shard_size: {}` "
      "does not divide {} ({}); use {} (or 0 / -1: the whole group)",
      H, cfg.model.moe.enabled() ? "the experts' data-parallel group" : "the data-parallel group",
      cfg.model.moe.enabled()
          ? fmt::format("data_parallel {} x context_parallel {} / expert_parallel {} = {}", p.data_parallel,
                        p.context_parallel, p.expert_parallel, within)
          : fmt::format("data_parallel {} x context_parallel {} = {}", p.data_parallel, p.context_parallel, within),
      fit));
  return out;
}

std::vector<std::string> config_layout_problems(const Config& cfg) {
  std::vector<std::string> out;
  for (const auto& [key, v] : {std::pair{"data_parallel", cfg.parallel.data_parallel},
                               std::pair{"model_parallel", cfg.parallel.model_parallel}})
    if (v < 1) out.push_back(fmt::format("`parallel_config.{}: {}`: must be >= 1 (1: no split)", key, v));
  if (!out.empty()) return out;
  out = pipeline_problems(cfg);
  for (auto& s : expert_parallel_problems(cfg)) out.push_back(std::move(s));
  for (auto& s : shard_problems(cfg)) out.push_back(std::move(s));
  for (auto& s : recompute_list_problems(cfg)) out.push_back(std::move(s));
  return out;
}

std::vector<std::string> layout_warnings(const Config& cfg, int world_size) {
  std::vector<std::string> out;
  if (!cfg.use_parallel && world_size > 1)
    out.push_back(fmt::format("`use_parallel: False`, but {} ranks are running: they train together as parallel_config "
                              "lays them out (MindFormers would start {} separate single-device runs)",
                              world_size, world_size));
  return out;
}

std::string suggest_layout(const Config& cfg, int world_size) {
  const auto& p = cfg.parallel;
  if (world_size < 1) return "";
  for (int64_t pp = std::clamp<int64_t>(p.pipeline_stage, 1, world_size); pp >= 1; --pp) {
    // Every virtual stage needs a layer (the chunks count only with more than one stage).
    // A context_parallel asked for is kept (the sequence is what it splits).
    const int64_t cp = p.context_parallel > 1 ? p.context_parallel : 1;
    if (world_size % (pp * cp) != 0 || (pp > 1 && pp * p.pipeline_chunks > cfg.model.num_layers)) continue;
    const int64_t ranks = world_size / (pp * cp);
    for (int64_t mp = std::clamp<int64_t>(p.model_parallel, 1, ranks); mp >= 1; --mp) {
      if (ranks % mp != 0 || !model_split_problems(cfg, mp).empty()) continue;
      const int64_t dp = ranks / mp;
      // With expert_parallel asked for, one that fits this data_parallel and the experts (1 for a dense model).
      const std::string ep =
          p.expert_parallel == 1 ? "" : fmt::format(", expert_parallel: {}", fitting_expert_parallel(cfg, dp));
      const std::string cps = cp > 1 ? fmt::format(", context_parallel: {}", cp) : "";
      return fmt::format("data_parallel: {}, model_parallel: {}{}, pipeline_stage: {}{}", dp, mp, cps, pp, ep);
    }
  }
  return "";
}

std::string layout_error_message(const Config& cfg, int world_size) {
  const auto problems = layout_problems(cfg, world_size);
  if (problems.empty()) return "";
  std::string msg = fmt::format("the parallel layout does not fit {} rank(s):", world_size);
  for (const auto& s : problems) msg += "\n  " + s;
  const std::string fit = suggest_layout(cfg, world_size);
  msg += fit.empty() ? fmt::format("\n  no layout of {} rank(s) splits this model; start a different number of ranks",
                                   world_size)
                     : fmt::format("\n  a layout that fits {} rank(s): parallel_config: {{{}}}", world_size, fit);
  return msg;
}

}  // namespace gf
