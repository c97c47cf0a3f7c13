#include "runner/layout_check.h"

#include <fmt/format.h>

namespace gf {
namespace {

// The FFN width that does not split over `mp` ranks, said in the keys that set it.
std::string ffn_problem(const ModelConfig& m, int64_t mp) {
  if (!m.is_llama())
    return fmt::format("the FFN width `hidden_size` x `expand_ratio` ({} x {} = {}) is not divisible by "
                       "`parallel_config.model_parallel` ({})",
                       m.hidden_size, m.expand_ratio, m.ffn_hidden(), mp);
  if (m.intermediate_size > 0)
    return fmt::format("the FFN width `model.model_config.intermediate_size` ({}) is not divisible by "
                       "`parallel_config.model_parallel` ({})",
                       m.intermediate_size, mp);
  return fmt::format("the FFN width ({}, derived from `hidden_size` {}{} rounded up to `multiple_of` {}, as "
                     "`intermediate_size` is unset) is not divisible by `parallel_config.model_parallel` ({}); set "
                     "`model.model_config.intermediate_size` to a multiple of it",
                     m.ffn_hidden(), m.hidden_size,
                     m.ffn_dim_multiplier > 0 ? fmt::format(" x `ffn_dim_multiplier` {}", m.ffn_dim_multiplier) : "",
                     m.multiple_of, mp);
}

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
  if (m.ffn_hidden() % mp != 0) out.push_back(ffn_problem(m, mp));
  if (cfg.parallel.use_seq_parallel && m.seq_length % mp != 0)
    out.push_back(fmt::format("`model.model_config.seq_length` ({}) is not divisible by `parallel_config.model_parallel` "
                              "({}), which `parallel_config.use_seq_parallel: True` needs",
                              m.seq_length, mp));
  return out;
}

}  // namespace

std::vector<std::string> layout_problems(const Config& cfg, int world_size) {
  const auto& p = cfg.parallel;
  std::vector<std::string> out;
  if (p.data_parallel < 1 || p.model_parallel < 1 || p.pipeline_stage < 1) {
    out.push_back("`parallel_config.data_parallel`, `model_parallel` and `pipeline_stage` must each be >= 1");
    return out;
  }
  const int64_t need = p.data_parallel * p.model_parallel * p.pipeline_stage;
  if (need != world_size)
    out.push_back(fmt::format("`parallel_config.data_parallel` ({}) x `model_parallel` ({}) x `pipeline_stage` ({}) = {}, "
                              "but {} rank(s) are running",
                              p.data_parallel, p.model_parallel, p.pipeline_stage, need, world_size));
  for (auto& s : unbuilt_parallelism(cfg)) out.push_back(std::move(s));
  for (auto& s : model_split_problems(cfg, p.model_parallel)) out.push_back(std::move(s));
  return out;
}

std::vector<std::string> unbuilt_parallelism(const Config& cfg) {
  const auto& p = cfg.parallel;
  std::vector<std::string> out;
  if (p.pipeline_stage > 1)
    out.push_back(fmt::format("`parallel_config.pipeline_stage: {}`: pipeline parallelism is not built yet; use 1",
                              p.pipeline_stage));
  if (p.expert_parallel > 1)
    out.push_back(fmt::format("`parallel_config.expert_parallel: {}`: expert parallelism is not built yet (MoE issue); "
                              "use 1",
                              p.expert_parallel));
  else if (p.expert_parallel < 1)
    out.push_back(fmt::format("`parallel_config.expert_parallel: {}`: must be >= 1", p.expert_parallel));
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
  for (int64_t mp = std::min<int64_t>(cfg.parallel.model_parallel, world_size); mp >= 1; --mp) {
    if (world_size % mp != 0 || !model_split_problems(cfg, mp).empty()) continue;
    return fmt::format("data_parallel: {}, model_parallel: {}, pipeline_stage: 1", world_size / mp, mp);
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
