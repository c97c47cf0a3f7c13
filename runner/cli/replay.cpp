#include "runner/cli/replay.h"

#include <unistd.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <yaml-cpp/yaml.h>

#include "core/io/checkpoint.h"
#include "runner/report/logging.h"

namespace gf {

namespace fs = std::filesystem;

namespace {

bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }

std::string show(double v) { return std::isfinite(v) ? fmt::format("{:.17g}", v) : fmt::format("{}", v); }

void parse_steps(const std::string& s, int64_t& first, int64_t& last) {
  try {
    size_t used = 0;
    first = std::stoll(s, &used);
    last = first;
    if (used < s.size()) {
      if (s[used] != '-') throw std::invalid_argument(s);
      size_t used2 = 0;
      last = std::stoll(s.substr(used + 1), &used2);
      if (used + 1 + used2 != s.size()) throw std::invalid_argument(s);
    }
  } catch (const std::logic_error&) {
    throw std::runtime_error("--steps " + s + ": give a step (12) or a range of steps (12-15)");
  }
  if (first < 1 || last < first) throw std::runtime_error("--steps " + s + ": steps count from 1, and N-M needs M >= N");
}

}  // namespace

ReplayPlan plan_replay(const ReplayRequest& req) {
  ReplayPlan p;
  parse_steps(req.steps, p.first, p.last);
  p.checkpoint = ckpt::resolve(req.checkpoint);
  ckpt::Reader r = ckpt::Reader::open(p.checkpoint);
  const nlohmann::json& st = r.state();
  if (!st.contains("config") || !st.contains("global_batch"))
    throw std::runtime_error(p.checkpoint + ": holds weights only, not a training run's state: replay needs one of a run's own checkpoints");
  p.checkpoint_step = st.at("step").get<int64_t>();
  if (p.first <= p.checkpoint_step)
    throw std::runtime_error(fmt::format("{} is the state after step {}: it replays steps {} on; for step {} give an "
                                         "earlier checkpoint of the run",
                                         p.checkpoint, p.checkpoint_step, p.checkpoint_step + 1, p.first));
  p.damage = r.verify();
  const std::string text = st.at("config").get<std::string>();
  const YAML::Node cfg = YAML::Load(text);
  // The run's metrics: beside the checkpoint root (output_dir/checkpoint/<name>), else its config's output_dir.
  if (!req.metrics.empty()) {
    p.metrics = req.metrics;
  } else {
    const fs::path beside = fs::path(p.checkpoint).parent_path().parent_path() / "metrics.jsonl";
    const fs::path configured = fs::path(cfg["output_dir"].as<std::string>("./output")) / "metrics.jsonl";
    p.metrics = fs::exists(beside) ? beside.string() : configured.string();
  }
  if (!fs::exists(p.metrics))
    throw std::runtime_error("the run's metrics " + p.metrics + " do not exist: give them with --metrics FILE");
  p.config_path = (fs::temp_directory_path() / fmt::format("gridformer_replay_{}.yaml", getpid())).string();
  std::ofstream(p.config_path) << text;
  p.sets = req.sets;
  p.sets.push_back("load_checkpoint=\"" + p.checkpoint + "\"");
  p.sets.push_back("resume_training=True");
  p.sets.push_back("runner_config.train_steps=" + std::to_string(p.last));
  // The run's learning rates: the schedule the checkpoint saved, not one rebuilt for the replay's fewer steps (a
  // cosine over `last` steps would give step `last` another rate than the run's, and every replayed update after it).
  p.sets.push_back("lr_schedule.use_checkpoint_opt_param_scheduler=True");
  p.sets.push_back("output_dir=\"" + req.output_dir + "\"");
  return p;
}

std::map<int64_t, RunStep> read_run_steps(const std::string& metrics_path) {
  std::map<int64_t, RunStep> out;
  std::ifstream in(metrics_path);
  std::string line;
  auto number = [](const nlohmann::json& j, const char* key, bool& finite) {
    const nlohmann::json& v = j.value(key, nlohmann::json());
    finite = v.is_number() && std::isfinite(v.get<double>());
    return v.is_number() ? v.get<double>() : std::nan("");
  };
  while (std::getline(in, line)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      continue;  // a line cut by a kill
    }
    if (!j.is_object() || !j.contains("step") || !j.contains("loss") || j.contains("event") || !j["step"].is_number_integer())
      continue;
    RunStep s;
    s.loss = number(j, "loss", s.loss_finite);
    s.grad_norm = number(j, "grad_norm", s.grad_norm_finite);
    if (j.contains("rank_loss_sum") && j["rank_loss_sum"].is_array())
      for (const nlohmann::json& v : j["rank_loss_sum"]) s.rank_loss.push_back(v.is_number() ? v.get<double>() : std::nan(""));
    out[j["step"].get<int64_t>()] = std::move(s);
  }
  return out;
}

StepCompare compare_step(int64_t step, const std::map<int64_t, RunStep>& run, double loss, double grad_norm,
                         const std::vector<double>& rank_loss) {
  StepCompare c;
  c.step = step;
  c.nonfinite = !std::isfinite(loss) || !std::isfinite(grad_norm);
  const std::string mine = fmt::format("loss {} grad_norm {}", show(loss), show(grad_norm));
  const auto it = run.find(step);
  if (it == run.end()) {
    c.line = fmt::format("step {}: {}; the run's metrics have no line for this step (not compared)", step, mine);
    return c;
  }
  c.recorded = true;
  const RunStep& s = it->second;
  // A value that is not finite is compared by being so (metrics.jsonl writes NaN as null).
  const bool loss_same = s.loss_finite ? same_bits(loss, s.loss) : !std::isfinite(loss);
  const bool norm_same = s.grad_norm_finite ? same_bits(grad_norm, s.grad_norm) : !std::isfinite(grad_norm);
  if (s.rank_loss.size() == rank_loss.size())
    for (size_t i = 0; i < rank_loss.size(); ++i)
      if (!(std::isfinite(s.rank_loss[i]) ? same_bits(s.rank_loss[i], rank_loss[i]) : !std::isfinite(rank_loss[i])))
        c.ranks.push_back(static_cast<int>(i));
  c.same = loss_same && norm_same && c.ranks.empty();
  if (c.same) {
    c.line = fmt::format("step {}: {}: same bits as the run", step, mine);
    return c;
  }
  c.line = fmt::format("step {}: DIFFERENT bits: the run had loss {} grad_norm {}, the replay {}", step, show(s.loss),
                       show(s.grad_norm), mine);
  if (!c.ranks.empty()) c.line += fmt::format("; the ranks whose own loss differs: {}", fmt::join(c.ranks, ", "));
  else if (!s.rank_loss.empty()) c.line += "; every rank's own loss agrees (the difference is in the backward or the reductions)";
  return c;
}

// `gridformer replay`'s options.
CLI::App* add_replay_command(CLI::App& app, ReplayRequest& r) {
  auto* rep = app.add_subcommand(
      "replay", "re-run steps of a run from one of its checkpoints (same samples, dropout masks and order) and compare "
                "each step's loss, gradient norm and per-rank losses bit for bit with the run's metrics.jsonl: same bits "
                "(a deterministic fault: the data or the arithmetic; a step that is not finite is traced to the first "
                "layer output that is not, and re-run in fp32 when the run was in bf16/fp16) or different bits (the "
                "machine, status 7, with the ranks that differ). Run under mpirun with the run's rank count");
  rep->add_option("--checkpoint", r.checkpoint, "one of the run's checkpoints (its directory, the run's "
                                                        "checkpoint/ or output_dir: the latest)")->required();
  rep->add_option("--steps", r.steps, "N or N-M: the steps to compare (the checkpoint's step < N; the steps "
                                             "between are run too)")->required();
  rep->add_option("--set", r.sets, "override a key of the checkpoint's config (repeatable)");
  rep->add_option("--metrics", r.metrics, "the run's metrics.jsonl (default: the one of the output_dir the "
                                                 "checkpoint is in, else of the config's output_dir)");
  rep->add_option("--output_dir", r.output_dir, "the replay's log and replay.json (default output/replay)");
  return rep;
}

}  // namespace gf
