// The end of a run's report (Trainer::log_resource_report): per rank its peak RSS beside what plan gives it, the
// bytes each group sent (and a step's beside plan's count, runner/report/step_comm.h), the memory it held, and the
// step time beside the model of it (runner/report/step_time.h); the same in output_dir/resources.json. And the groups
// whose bytes and messages the train loop measures for it (Trainer::group_comms).
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "models/registry.h"
#include "models/transformer_lm.h"
#include "runner/report/logging.h"
#include "runner/report/plan.h"
#include "runner/report/step_comm.h"
#include "runner/report/step_time.h"
#include "runner/train/trainer.h"

namespace gf {

// The communicators of group g, as plan counts its bytes (runner/report/step_comm.h): 0 tensor, 1 data (x context,
// with hybrid sharding's shard and replica groups), 2 pipeline, 3 tied embedding, 4 context (with its Ulysses and ring
// subgroups, hybrid_cp's), 5 expert-data (x context: the experts' gradients, with their hybrid groups), 6 expert (the
// MoE dispatch). A group of one sends nothing.
Trainer::GroupComms Trainer::group_comms(int g) const {
  const ShardLayout& zl = sync_->layout();
  const auto with_hybrid = [&](const Communicator& whole, bool expert) -> GroupComms {
    if (!zl.replicated(expert)) return {&whole};
    return {&whole, &zl.shard_group(expert), &zl.replica_group(expert)};
  };
  switch (g) {
    case 0: return {&ctx_.group(GridAxis::kTp)};
    case 1: return with_hybrid(ctx_.data_like(), false);
    case 2: return {&ctx_.group(GridAxis::kPp)};
    case 3: return {&ctx_.embed()};
    case 4:
      if (ctx_.size(GridAxis::kCp) <= 1) return {};
      return {&ctx_.group(GridAxis::kCp), &ctx_.context_ulysses(), &ctx_.context_ring()};
    case 5: return with_hybrid(ctx_.expert_data_like(), true);
    default: return {&ctx_.group(GridAxis::kEp)};
  }
}

// The bytes group g has sent so far, and the messages of all seven groups.
double Trainer::sent_by(int g) const {
  int64_t n = 0;
  for (const Communicator* c : group_comms(g))
    if (c) n += c->stats().bytes_sent;
  return static_cast<double>(n);
}

double Trainer::messages_sent() const {
  int64_t n = 0;
  for (int g = 0; g < 7; ++g)
    for (const Communicator* c : group_comms(g))
      if (c) n += c->stats().messages;
  return static_cast<double>(n);
}

// The median of the steps after the first (which carries the start-up), or the first alone.
double Trainer::measured_step_seconds() const {
  std::vector<double> s(step_seconds_.size() > 1 ? step_seconds_.begin() + 1 : step_seconds_.begin(), step_seconds_.end());
  if (s.empty()) return 0;
  std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(s.size() / 2), s.end());
  return s[s.size() / 2];
}

// Rank 0's step time beside the model's (runner/report/step_time.h), from this rank's own figures.
StepTime Trainer::log_step_time(const StepComm& sent) const {
  const ModelConfig& m = cfg_.model;
  const double flops = TransformerLM::model_flops(find_model(m.arch, m.type).spec(m), global_batch_) / ctx_.world().size();
  const double shard = static_cast<double>(optimizer_state_bytes()) /
                       (2.0 * static_cast<double>(moment_element_bytes(cfg_.adamw.moment_dtype)));
  const StepTimeInputs in = step_time_inputs(cfg_, flops, shard, sent, pipelined() ? bubble_priced_ : 0.0,
                                             machine_.threads, ranks_on_this_host());
  StepTime t = model_step_time(in, machine_.probe ? &*machine_.probe : nullptr);
  if (t.not_modelled.empty() && !sent.not_modelled.empty())
    t.not_modelled = "the bytes of " + sent.not_modelled + " are not counted yet";
  if (ctx_.world_rank() != 0 || step_seconds_.empty()) return t;
  const double measured = measured_step_seconds();
  const std::string which = step_seconds_.size() > 1 ? fmt::format("the median of steps 2-{}", step_seconds_.size())
                                                     : std::string("step 1, with the start-up");
  if (!t.not_modelled.empty())
    spdlog::info("step time: {:.4f} s ({}); not modelled: {}", measured, which, t.not_modelled);
  else
    spdlog::info("step time: {:.4f} s ({}); modelled {:.4f} s ({:.2f}x the measured: compute {:.4f}, optimizer {:.4f}, "
                 "messages {:.4f}; {})",
                 measured, which, t.seconds, t.seconds / measured, t.compute, t.optimizer, t.communication, t.basis);
  return t;
}

void Trainer::log_resource_report() {
  // Per rank: peak RSS, bytes sent in the tensor, data, world, expert (the MoE all-to-all) and
  // expert-data (the experts' gradients) groups, and under context parallel the context group (the
  // attention's exchanges) and the data x context group (the gradients, a communicator of its own
  // there). Gathered by a sum over
  // the world of vectors in which each rank fills its own slot.
  const int W = ctx_.world().size(), me = ctx_.world_rank();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  constexpr int K = 30;
  std::vector<double> v(static_cast<size_t>(K * W), 0.0);
  // A training step's bytes in the tensor, data, pipeline and tied-embedding groups, measured and as plan counts
  // them (-1: not counted).
  const int stage = ctx_.index(GridAxis::kPp);
  const std::vector<StageOptions> chunks =
      pipelined() ? pipeline_chunk_options(stage_layers_, lists_, shape_, stage) : std::vector<StageOptions>{StageOptions{}};
  const StepComm planned = step_comm(cfg_, model_->params(), chunks, stage, ctx_.group(GridAxis::kTp).rank(),
                                     ctx_.data_like().rank(), data_->has_loss_mask());
  const double counted = static_cast<double>(std::max<int64_t>(1, steps_counted_));
  const bool plan_ok = planned.not_modelled.empty();
  const double plan_of[7] = {planned.tensor,    planned.data,    planned.pipeline,   planned.embedding,
                             planned.context, planned.expert_data, planned.expert};
  for (int g = 0; g < 7; ++g) {  // group g at 13 + 2g (13-20), but the peak RSS plan's total at 21: context at 22, 23,
    const int at = g < 4 ? 13 + 2 * g : 22 + 2 * (g - 4);  // expert-data at 24, 25, expert at 26, 27
    v[K * me + at] = step_sent_[g] / counted;
    v[K * me + at + 1] = plan_ok ? plan_of[g] : -1.0;
  }
  v[K * me + 28] = step_messages_ / counted;
  v[K * me + 29] = plan_ok ? planned.messages : -1.0;
  // What gridformer plan gives this rank (its stage and tensor-parallel rank), to set beside its peak RSS.
  try {
    nlohmann::json pj;
    plan_report(cfg_, W, 0, nullptr, &pj);
    for (const nlohmann::json& r : pj["ranks"])
      if (r["pipeline_stage"].get<int>() == stage && r["tensor_parallel_rank"].get<int>() == ctx_.index(GridAxis::kTp))
        v[K * me + 21] = r["total"].get<double>();
  } catch (const std::exception& e) {
    spdlog::warn("rank {}: plan could not size this run for the peak RSS comparison: {}", me, e.what());
  }
  v[K * me + 0] = 1024.0 * static_cast<double>(ru.ru_maxrss);
  v[K * me + 1] = static_cast<double>(ctx_.group(GridAxis::kTp).stats().bytes_sent);
  v[K * me + 2] = static_cast<double>(ctx_.group(GridAxis::kDp).stats().bytes_sent);
  v[K * me + 3] = static_cast<double>(ctx_.world().stats().bytes_sent);
  v[K * me + 4] = static_cast<double>(optimizer_state_bytes());
  v[K * me + 5] = static_cast<double>(model_->activation_bytes());
  v[K * me + 6] = static_cast<double>(model_->weight_copy_bytes());
  v[K * me + 7] = static_cast<double>(ctx_.group(GridAxis::kEp).stats().bytes_sent);
  v[K * me + 8] = static_cast<double>(ctx_.expert_data_like().stats().bytes_sent);
  const bool cp = ctx_.size(GridAxis::kCp) > 1;
  // hybrid_cp's exchanges run in the context group's Ulysses and ring subgroups (groups of one otherwise).
  v[K * me + 9] = cp ? static_cast<double>(ctx_.group(GridAxis::kCp).stats().bytes_sent +
                                           ctx_.context_ulysses().stats().bytes_sent +
                                           ctx_.context_ring().stats().bytes_sent)
                     : 0.0;
  v[K * me + 10] = cp ? static_cast<double>(ctx_.data_like().stats().bytes_sent) : 0.0;
  // Hybrid sharding: the shard groups' and the replica groups' own communicators (dense and experts').
  const ShardLayout& zl = sync_->layout();
  for (bool x : {false, true}) {
    if (!zl.replicated(x)) continue;
    v[K * me + 11] += static_cast<double>(zl.shard_group(x).stats().bytes_sent);
    v[K * me + 12] += static_cast<double>(zl.replica_group(x).stats().bytes_sent);
  }
  ctx_.world().allreduce_sum(v.data(), static_cast<int64_t>(v.size()));
  if (me != 0) return;
  const double steps = static_cast<double>(std::max<int64_t>(1, total_steps_));
  for (int r = 0; r < W; ++r) {
    const double ep = v[K * r + 7], edp = v[K * r + 8], cpb = v[K * r + 9], dcp = v[K * r + 10],
                 shard = v[K * r + 11], replica = v[K * r + 12];
    spdlog::info("rank {}: peak RSS {}; sent {} in the tensor group, {} in the data group, {} in the world group{}{}{} "
                 "({} per step in all)",
                 r, human_bytes(v[K * r]), human_bytes(v[K * r + 1]), human_bytes(v[K * r + 2]), human_bytes(v[K * r + 3]),
                 ep + edp > 0 ? fmt::format(", {} in the expert group (all-to-all, {} per step), {} in the "
                                            "expert-data group", human_bytes(ep), human_bytes(ep / steps),
                                            human_bytes(edp))
                              : std::string(),
                 cp ? fmt::format(", {} in the context group (attention, {} per step), {} in the data x context group "
                                  "(gradients)", human_bytes(cpb), human_bytes(cpb / steps), human_bytes(dcp))
                    : std::string(),
                 shard + replica > 0 ? fmt::format(", {} in the shard groups and {} across the replicas (hybrid sharding)",
                                                   human_bytes(shard), human_bytes(replica))
                                     : std::string(),
                 human_bytes((v[K * r + 1] + v[K * r + 2] + v[K * r + 3] + ep + edp + cpb + dcp + shard + replica) / steps));
  }
  for (int r = 0; r < W && steps_counted_ > 0; ++r) {
    if (v[K * r + 21] > 0)
      spdlog::info("rank {}: peak RSS {}, {:.2f}x the {} plan gives it (plan leaves out the binary, its libraries and "
                   "the data index)", r, human_bytes(v[K * r]), v[K * r] / v[K * r + 21], human_bytes(v[K * r + 21]));
    const double* x = &v[K * r + 13];  // measured, planned: tensor, data, pipeline, embedding
    const bool cp_on = ctx_.size(GridAxis::kCp) > 1;
    const double* xc = &v[K * r + 22];  // the context group's, measured and planned
    const double* xe = &v[K * r + 24];  // the expert-data group's
    const bool edp_on = xe[0] > 0 || xe[1] > 0;
    const double* xx = &v[K * r + 26];  // the expert group's (the MoE dispatch)
    const bool ep_on = ctx_.size(GridAxis::kEp) > 1;
    const std::string more = (pipelined() ? fmt::format(", {:.0f} B in the pipeline group and {:.0f} B in the tied "
                                                        "embedding's", x[4], x[6])
                                          : std::string()) +
                             (cp_on ? fmt::format(", {:.0f} B in the context group", xc[0]) : std::string()) +
                             (edp_on ? fmt::format(", {:.0f} B in the expert-data group", xe[0]) : std::string()) +
                             (ep_on ? fmt::format(", {:.0f} B in the expert group", xx[0]) : std::string());
    if (x[1] < 0) {
      spdlog::info("rank {}: a training step sent {:.0f} B in the tensor group, {:.0f} B in the data group{} (plan does "
                   "not count {} yet)", r, x[0], x[2], more, planned.not_modelled);
      continue;
    }
    // The all-to-all's count is the one balanced routing would send: its ratio is the routing's, not a miscount.
    const double* xm = &v[K * r + 28];  // messages, measured and counted
    bool same = xc[0] == xc[1] && xe[0] == xe[1] && (planned.expert_expected || xx[0] == xx[1]) && xm[0] == xm[1];
    for (int g = 0; g < 4; ++g) same = same && x[2 * g] == x[2 * g + 1];

    spdlog::info("rank {}: a training step sent {:.0f} B in the tensor group, {:.0f} B in the data group{}, in {:.0f} "
                 "messages; plan counted {:.0f} B and {:.0f} B{}, in {:.0f} messages{}", r, x[0], x[2], more, xm[0], x[1], x[3],
                 (pipelined() ? fmt::format(", {:.0f} B and {:.0f} B", x[5], x[7]) : std::string()) +
                     (cp_on ? fmt::format(", {:.0f} B", xc[1]) : std::string()) +
                     (edp_on ? fmt::format(", {:.0f} B", xe[1]) : std::string()) +
                     (ep_on ? fmt::format(", {:.0f} B{}", xx[1],
                                          planned.expert_expected
                                              ? fmt::format(" (the all-to-all under balanced routing: this routing sent "
                                                            "{:.3f}x)", xx[1] > 0 ? xx[0] / xx[1] : 0.0)
                                              : "")
                            : std::string()),
                 xm[1], same ? "" : " (they differ: the count misses a collective, please report it)");
  }
  const StepTime st = log_step_time(planned);
  // The same, machine-readable, in output_dir/resources.json.
  nlohmann::json j;
  j["steps"] = total_steps_;
  j["layout"] = ctx_.grid().describe();
  if (!step_seconds_.empty()) j["step_seconds_measured"] = measured_step_seconds();
  if (st.not_modelled.empty()) j["step_seconds_modelled"] = {{"total", st.seconds}, {"compute", st.compute},
                                                             {"optimizer", st.optimizer}, {"communication", st.communication}};
  for (int r = 0; r < W; ++r)
    j["ranks"].push_back({{"rank", r}, {"peak_rss_bytes", v[K * r]}, {"tp_bytes_sent", v[K * r + 1]},
                          {"dp_bytes_sent", v[K * r + 2]}, {"world_bytes_sent", v[K * r + 3]},
                          {"optimizer_state_bytes", v[K * r + 4]}, {"planned_activation_bytes", v[K * r + 5]},
                          {"weight_copy_bytes", v[K * r + 6]}, {"ep_bytes_sent", v[K * r + 7]},
                          {"edp_bytes_sent", v[K * r + 8]}, {"cp_bytes_sent", v[K * r + 9]},
                          {"dp_cp_bytes_sent", v[K * r + 10]}, {"shard_bytes_sent", v[K * r + 11]},
                          {"replica_bytes_sent", v[K * r + 12]}, {"tp_bytes_per_step", v[K * r + 13]},
                          {"tp_bytes_per_step_plan", v[K * r + 14]}, {"dp_bytes_per_step", v[K * r + 15]},
                          {"dp_bytes_per_step_plan", v[K * r + 16]}, {"pp_bytes_per_step", v[K * r + 17]},
                          {"pp_bytes_per_step_plan", v[K * r + 18]}, {"embed_bytes_per_step", v[K * r + 19]},
                          {"embed_bytes_per_step_plan", v[K * r + 20]}, {"planned_total_bytes", v[K * r + 21]},
                          {"cp_bytes_per_step", v[K * r + 22]}, {"cp_bytes_per_step_plan", v[K * r + 23]},
                          {"edp_bytes_per_step", v[K * r + 24]}, {"edp_bytes_per_step_plan", v[K * r + 25]},
                          {"ep_bytes_per_step", v[K * r + 26]}, {"ep_bytes_per_step_plan", v[K * r + 27]},
                          {"ep_plan_expected", planned.expert_expected}, {"messages_per_step", v[K * r + 28]},
                          {"messages_per_step_plan", v[K * r + 29]}});
  std::ofstream(std::filesystem::path(cfg_.output_dir) / "resources.json") << j.dump(1) << "\n";
}

}  // namespace gf
