// `gridformer replay`'s driver (runner/cli/rank_start.h declares it; the plan and comparisons are runner/cli/replay.h).
#include "runner/cli/rank_start.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/io/checkpoint.h"
#include "runner/cli/replay.h"
#include "runner/launch/rank_agreement.h"
#include "runner/report/logging.h"
#include "runner/train/trainer.h"

namespace gf::cli {

namespace {

// `gridformer replay` (runner/cli/replay.h): the checkpoint's config and state, the steps re-run one by one with
// the model's finite checks on, each compared with the run's metrics (on every rank alike: the per-rank losses
// are all-reduced), then the verdict. Status 0: every step has the run's bits; 7: a step's bits differ; 2: set-up.
struct ReplayPass {
  std::vector<gf::StepCompare> steps;
  std::string first_nonfinite;  // "rank R: what", of the first step that was not finite
  int64_t nonfinite_step = 0;
  bool low_precision = false;  // the pass computed in bf16/fp16
};

// One pass: a trainer resumed from the checkpoint (fp32: computing in fp32), its steps up to the last asked for
// or the first that is not finite. Returns false after a set-up problem (printed by rank 0).
bool replay_pass(const gf::ReplayPlan& p, const std::map<int64_t, gf::RunStep>& run, bool fp32, ReplayPass& out) {
  std::vector<std::string> sets = p.sets;
  if (fp32) sets.push_back("model.model_config.compute_dtype=float32");
  gf::Config cfg;
  int threads = 1;
  const std::unique_ptr<gf::ParallelContext> ctx = start_rank(p.config_path, sets, "", false, cfg, threads);
  if (!ctx) return false;
  out.low_precision = cfg.compute_dtype != gf::ComputeDtype::kFloat32;
  cfg.checkpoint.enabled = false;  // the replay writes nothing into the run's checkpoints
  cfg.do_eval = false;
  std::unique_ptr<gf::Trainer> trainer;
  std::string problem;
  try {
    trainer = std::make_unique<gf::Trainer>(cfg, *ctx, gf::apply_machine_probe(threads));
  } catch (const std::exception& e) {
    problem = describe(e);
  }
  const int rank = ctx->world_rank();
  if (problem = gf::first_problem(ctx->world(), problem); !problem.empty()) {
    if (rank == 0) spdlog::error("{}", problem);
    return false;
  }
  if (rank == 0)
    spdlog::info("replaying steps {}-{} from {} (step {}){}, compared with {}", p.checkpoint_step + 1, p.last,
                 p.checkpoint, p.checkpoint_step, fp32 ? " in fp32" : "", p.metrics);
  trainer->set_finite_check(true);
  for (int64_t step = p.checkpoint_step + 1; step <= p.last; ++step) {
    const gf::StepResult r = trainer->train_step(step);
    gf::StepCompare c = gf::compare_step(step, run, r.loss, r.grad_norm, trainer->rank_losses(r));
    if (rank == 0) spdlog::info("{}{}", fp32 ? "fp32: " : "", c.line);
    const bool stop = c.nonfinite;  // the run stopped here (status 3): so does the replay
    out.steps.push_back(std::move(c));
    if (!stop) continue;
    out.nonfinite_step = step;
    const std::vector<std::string> found = ctx->world().gather_strings(trainer->first_nonfinite(), 0);
    for (size_t k = 0; k < found.size() && out.first_nonfinite.empty(); ++k)
      if (!found[k].empty()) out.first_nonfinite = fmt::format("rank {}: {}", k, found[k]);
    break;
  }
  return true;
}

}  // namespace

int run_replay(const gf::ReplayRequest& req, int argc, char** argv) {
  gf::MpiEnvironment mpi(&argc, &argv);
  const gf::Communicator world = gf::Communicator::world();
  gf::setup_console_logging(world.rank());
  gf::ReplayPlan p;
  std::string problem;
  try {
    p = gf::plan_replay(req);
  } catch (const std::exception& e) {
    problem = describe(e);
  }
  if (problem = gf::first_problem(world, problem); !problem.empty()) {
    if (world.rank() == 0) spdlog::error("{}", problem);
    return kSetupError;
  }
  const bool rank0 = world.rank() == 0;
  if (!p.damage.empty()) {
    if (rank0)
      spdlog::warn("the checkpoint differs from what was saved: {}; replayed as it is, so that the damage's effect on "
                   "the steps shows", p.damage);
    gf::ckpt::set_crc_checks(false);
  }
  const std::map<int64_t, gf::RunStep> run = gf::read_run_steps(p.metrics);
  ReplayPass main_pass, fp32_pass;
  const bool ok = replay_pass(p, run, false, main_pass);
  const auto differ = std::find_if(main_pass.steps.begin(), main_pass.steps.end(),
                                   [&](const gf::StepCompare& c) { return c.recorded && !c.same && c.step >= p.first; });
  // A step that was not finite with the run's bits: a deterministic fault. In bf16/fp16, again in fp32.
  const bool low_precision = main_pass.low_precision;
  const bool ok32 = !ok || differ != main_pass.steps.end() || main_pass.nonfinite_step == 0 || !low_precision ||
                    replay_pass(p, run, true, fp32_pass);
  std::remove(p.config_path.c_str());
  if (!ok || !ok32) return kSetupError;
  int status = 0;
  std::string verdict;
  if (differ != main_pass.steps.end()) {
    status = 7;
    const std::string ranks =
        differ->ranks.empty() ? std::string() : fmt::format("; the ranks whose own loss differs: {}", fmt::join(differ->ranks, ", "));
    verdict = p.damage.empty()
                  ? fmt::format("DIFFERENT bits from step {}: the same state, data and order gave other numbers, so the "
                                "machine (a transient fault: memory, a core, the network), not the data or the arithmetic{}",
                                differ->step, ranks)
                  : fmt::format("DIFFERENT bits from step {}{}: the checkpoint's bits changed after its save ({}), which the "
                                "steps replayed from it show",
                                differ->step, ranks, p.damage);
  } else {
    verdict = fmt::format("same bits in every compared step ({}-{}): the steps are deterministic, so a fault seen in them is "
                          "the data's or the arithmetic's, not the machine's", p.first, p.last);
    if (main_pass.nonfinite_step > 0)
      verdict += fmt::format("; step {} is not finite again: the first output that is not: {}", main_pass.nonfinite_step,
                             main_pass.first_nonfinite.empty() ? "none found by the layer checks (the optimizer's or the norm's)"
                                                               : main_pass.first_nonfinite);
    if (!fp32_pass.steps.empty())
      verdict += fmt::format("; in fp32: {}", fp32_pass.nonfinite_step > 0
                                                   ? fmt::format("step {} is not finite either, first at {}", fp32_pass.nonfinite_step,
                                                                 fp32_pass.first_nonfinite)
                                                   : std::string("the steps are finite (the fault is the low precision's)"));
  }
  if (rank0) {
    spdlog::info("replay verdict: {}", verdict);
    nlohmann::json j = {{"checkpoint", p.checkpoint}, {"checkpoint_step", p.checkpoint_step}, {"first", p.first},
                        {"last", p.last}, {"metrics", p.metrics}, {"verdict", verdict}, {"status", status},
                        {"damage", p.damage}, {"first_nonfinite", main_pass.first_nonfinite},
                        {"fp32_first_nonfinite", fp32_pass.first_nonfinite}};
    for (const gf::StepCompare& c : main_pass.steps) j["steps"].push_back({{"step", c.step}, {"same", c.same}, {"line", c.line}});
    std::filesystem::create_directories(req.output_dir);
    std::ofstream(std::filesystem::path(req.output_dir) / "replay.json") << j.dump(1) << "\n";
  }
  return status;
}

}  // namespace gf::cli
