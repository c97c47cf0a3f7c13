#include "runner/report/plan.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <tuple>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "core/math/mixed_precision.h"
#include "models/registry.h"
#include "models/transformer_lm.h"
#include "parallel/communicator.h"
#include "parallel/zero.h"
#include "engine/step_engine.h"
#include "runner/report/machine_probe.h"
#include "runner/report/step_comm.h"
#include "runner/report/step_time.h"

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

namespace {

// The run's layout in one or two lines: ranks, parallel degrees, micro batch, dtype, recompute, and
// the pipeline or gradient accumulation.
std::string layout_lines(const Config& cfg, int ranks) {
  const ModelConfig& m = cfg.model;
  const ParallelConfig& pc = cfg.parallel;
  const ModelLayout L = model_layout(cfg);
  // Under context parallel a rank holds seq_length / context_parallel positions of each sample.
  const std::string cp = pc.context_parallel > 1
                             ? fmt::format(" context_parallel={} ({}{})", pc.context_parallel, pc.context_parallel_algo,
                                           pc.context_parallel_algo == "hybrid_cp"
                                               ? fmt::format(": Ulysses {} x ring {}", pc.ulysses_degree_in_cp,
                                                             pc.context_parallel / pc.ulysses_degree_in_cp)
                                               : std::string())
                             : std::string();
  const std::string tokens = pc.context_parallel > 1 ? fmt::format("{} of {}", m.seq_length / pc.context_parallel, m.seq_length)
                                                     : std::to_string(m.seq_length);
  std::string out = fmt::format("plan: {} ({}) on {} rank(s): data_parallel={} model_parallel={}{}{}; micro batch {} x {} "
                                "tokens per rank, {}{}\n",
                                m.arch, m.type, ranks, pc.data_parallel, pc.model_parallel,
                                pc.expert_parallel > 1 ? fmt::format(" expert_parallel={}", pc.expert_parallel) : std::string(),
                                cp, cfg.batch_size, tokens, compute_dtype_name(L.compute),
                                L.recompute == RecomputePolicy::kFull        ? ", full recompute"
                                : L.recompute == RecomputePolicy::kSelective ? ", selective recompute"
                                                                             : "");
  if (pc.pipeline_stage > 1) {
    std::string layers;
    for (int64_t n : pc.stage_layers) layers += (layers.empty() ? "" : ", ") + std::to_string(n);
    out += fmt::format("pipeline: {} stages{}, layers per {}stage [{}], schedule {}, {} micro-batches per step (global "
                       "batch {} samples)\n",
                       pc.pipeline_stage, pc.pipeline_chunks > 1 ? fmt::format(" x {} model chunks", pc.pipeline_chunks) : "",
                       pc.pipeline_chunks > 1 ? "virtual " : "", layers, pipeline::scheduler_name(pc.pipeline_scheduler), pc.micro_batch_num,
                       global_batch_size(cfg));
  } else if (cfg.gradient_accumulation_steps > 1) {
    out += fmt::format("gradient accumulation: {} micro-batches of {} per step per data-parallel rank (global batch {} "
                       "samples)\n",
                       cfg.gradient_accumulation_steps, cfg.batch_size, global_batch_size(cfg));
  }
  return out;
}

// The MoE line: which layers, experts, routing, and what the expert buffers are sized for.
std::string moe_line(const Config& cfg, const TransformerSpec& spec) {
  const ModelConfig& m = cfg.model;
  const int tp = static_cast<int>(cfg.parallel.model_parallel), ep = static_cast<int>(cfg.parallel.expert_parallel);
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < spec.layers; ++l) moe_layers += spec.moe.is_moe(l);
  const MoeBlock::Dims md = MoeBlock::dims(spec, cfg.batch_size * m.seq_length, tp, ep);
  return fmt::format("MoE: {} of {} layers, {} experts, top-{}, {}; expert_parallel={}: {} experts per rank; "
                     "expert buffers sized for {} rows per layer ({})\n",
                     moe_layers, spec.layers, spec.moe.experts, spec.moe.topk,
                     m.moe.dropless() ? std::string("dropless")
                                      : fmt::format("capacity factor {} ({} per expert per sequence)", m.moe.capacity_factor,
                                                    ops::expert_capacity({1, m.seq_length, spec.moe.experts, spec.moe.topk},
                                                                         m.moe.capacity_factor)),
                     ep, spec.moe.experts / ep, md.R,
                     m.moe.dropless() && ep > 1 ? "dropless: every token of the expert-parallel group may come here"
                                                : "every assignment that can reach this rank's experts");
}

// What a rank holds of an arena of `n` floats under parallel.zero_stage (parallel/zero.h): the
// weights, gradients and AdamW moments, in floats. Units (stages 2 and 3) start at `cuts`; a rank
// owns the largest 1/N slice of each (N: the shard group, the data-parallel x context group or the
// hybrid shard degree; the experts' over their own data-parallel group).
struct ShardFloats {
  int64_t weights = 0, grads = 0, moments = 0, slices = 0, working = 0;
  int shard = 1, expert_shard = 1;
};
ShardFloats shard_floats(const Config& cfg, int64_t n, int64_t expert_begin, std::vector<int64_t> cuts) {
  const ParallelConfig& p = cfg.parallel;
  ShardFloats f;
  const int64_t D = p.data_parallel * p.context_parallel, E = D / std::max<int64_t>(1, p.expert_parallel);
  const int stage = D > 1 ? p.zero_stage : 0;
  f.shard = static_cast<int>(p.shard_degree > 0 ? std::min(p.shard_degree, D) : D);
  f.expert_shard = static_cast<int>(p.shard_degree > 0 ? std::min(p.shard_degree, E) : E);
  if (stage == 0) {
    f.weights = f.grads = f.moments = n;
    return f;
  }
  std::vector<int64_t> at{0, expert_begin};
  if (stage >= 2) at.insert(at.end(), cuts.begin(), cuts.end());
  std::sort(at.begin(), at.end());
  at.erase(std::unique(at.begin(), at.end()), at.end());
  at.push_back(n);
  std::vector<int64_t> sizes;
  for (size_t i = 0; i + 1 < at.size(); ++i) {
    const int64_t len = at[i + 1] - at[i];
    if (len <= 0) continue;
    const int parts = at[i] >= expert_begin ? f.expert_shard : f.shard;
    f.slices += shard_begin(len, parts, 1);  // the largest slice
    sizes.push_back(len);
  }
  std::sort(sizes.rbegin(), sizes.rend());
  // Stage 3's working set: the unit a block reads and the next one, fetched meanwhile.
  f.working = sizes[0] + (sizes.size() > 1 ? sizes[1] : 0);
  f.moments = f.slices;
  // Stage 2 and 3: a unit's gradient is whole from its backward to its reduce-scatter (two at once),
  // but accumulated micro-batches and pipeline stages hold the whole gradient until the last backward.
  const bool whole_grads = p.pipeline_stage > 1 || micro_batches_per_step(cfg) > 1;
  f.grads = stage >= 2 && !whole_grads ? f.slices + f.working : n;
  f.weights = stage >= 3 ? f.slices + f.working : n;
  return f;
}

// One rank's memory: tensor-parallel rank r of pipeline stage `st` holding `chunks`. Appends its
// lines (with the stage's layers, and for the first rank the largest activation buffers); returns its total bytes.
double rank_lines(const Config& cfg, const ModelEntry& entry, const TransformerSpec& spec,
                  const std::vector<StageOptions>& chunks, size_t st, int r, int ranks, std::string& out,
                  nlohmann::json* bytes) {
  const ModelConfig& m = cfg.model;
  const ModelLayout L = model_layout(cfg);
  const int tp = static_cast<int>(cfg.parallel.model_parallel), dp = static_cast<int>(cfg.parallel.data_parallel),
            pp = static_cast<int>(cfg.parallel.pipeline_stage);
  const Placement t(TransformerLM::make_param_table(spec, entry.names, chunks), TransformerLM::param_layout(m, L), r);
  BufferPlan acts;
  std::string layers;
  for (const StageOptions& c : chunks) {
    const BufferPlan a = TransformerLM::activation_plan(spec, m, L, cfg.batch_size, r, c);
    for (const BufferPlan::Entry& e : a.entries()) acts.take(e.name, e.floats);
    layers += fmt::format("{}[{}, {}) x {} slot(s)", layers.empty() ? "" : ", ", c.layer_begin,
                          c.layer_end < 0 ? spec.layers : c.layer_end, c.slots);
  }
  if (pp > 1 && r == 0) out += fmt::format("pipeline stage {}: layers {}\n", st, layers);
  const int64_t n = t.total_floats();
  const int stage = dp * cfg.parallel.context_parallel > 1 ? cfg.parallel.zero_stage : 0;
  const ShardFloats f =
      shard_floats(cfg, n, std::min(n, t.expert_begin()),
                   TransformerLM::unit_starts(spec, entry.names, t, tp, static_cast<int>(cfg.parallel.expert_parallel), chunks));
  const double params = 4.0 * static_cast<double>(f.weights), grads = 4.0 * static_cast<double>(f.grads),
               moments = 2.0 * static_cast<double>(moment_element_bytes(cfg.adamw.moment_dtype)) *
                         static_cast<double>(f.moments),
               copy = static_cast<double>(f.weights * low_copy_element_bytes(L.compute)),
               activations = static_cast<double>(acts.bytes());
  // An asynchronous checkpoint save copies what this rank writes (its weights and both moments, saved
  // as F32) so that training goes on meanwhile; a synchronous one writes from the live state.
  const double snapshot = cfg.checkpoint.enabled && cfg.checkpoint.async_save
                              ? 4.0 * static_cast<double>(f.weights) + 8.0 * static_cast<double>(f.moments)
                              : 0.0;
  // LoRA: the frozen base, whole on every data-parallel rank (its tensor-parallel share), fp32 or (base_dtype
  // bfloat16) bf16 for the layers with fp32 embedding, final norm and head; the arena above is the adapters'.
  double frozen = 0;
  if (spec.lora.on) {
    const Placement b(TransformerLM::make_base_table(spec, entry.names, chunks.front()), TransformerLM::param_layout(m, L), r);
    for (size_t c = 1; c < chunks.size(); ++c) {
      const Placement more(TransformerLM::make_base_table(spec, entry.names, chunks[c]), TransformerLM::param_layout(m, L), r);
      frozen += 4.0 * static_cast<double>(more.total_floats());
    }
    frozen += 4.0 * static_cast<double>(b.total_floats());
    if (spec.lora.base_bf16) {
      double layer_floats = 0;
      for (const StageOptions& c : chunks) {
        const Placement p(TransformerLM::make_base_table(spec, entry.names, c), TransformerLM::param_layout(m, L), r);
        for (const TensorPlacement& x : p.tensors())
          if (x.spec->name.find("layers.") != std::string::npos) layer_floats += static_cast<double>(x.numel());
      }
      frozen -= 2.0 * layer_floats;
    }
  }
  const double total = params + grads + moments + copy + activations + snapshot + frozen;
  if (bytes)
    *bytes = {{"pipeline_stage", st}, {"tensor_parallel_rank", r}, {"parameters", params}, {"gradients", grads},
              {"optimizer_state", moments}, {"weight_copy", copy}, {"activations", activations},
              {"checkpoint_snapshot", snapshot}, {"frozen_base", frozen}, {"total", total}};
  std::string zero;
  if (stage >= 1) {
    zero = stage == 1 ? fmt::format(", a 1/{} ZeRO-1 shard", f.shard)
                      : fmt::format(", ZeRO-{}: 1/{} slices", stage, f.shard);
    if (cfg.parallel.shard_degree > 0) zero += " (hybrid: replicated across the shard groups)";
    if (stage >= 2)
      zero += fmt::format("; {} gathered or reduced at once (the largest unit and the next)",
                          human_bytes(4.0 * static_cast<double>(f.working)));
  }
  out += fmt::format("{}tensor-parallel rank {}{}: parameters {}, gradients {}, optimizer state {} (AdamW moments{}{}), "
                     "weight copy {}, activations {}{}{}; total {}\n",
                     pp > 1 ? "  " : "", r, tp > 1 ? fmt::format(" ({} of the {} ranks)", ranks / tp / pp, ranks) : std::string(),
                     human_bytes(params), human_bytes(grads), human_bytes(moments),
                     cfg.adamw.moment_dtype == MomentDtype::kBFloat16 ? " in bfloat16" : "", zero, human_bytes(copy),
                     human_bytes(activations),
                     snapshot > 0 ? fmt::format(", checkpoint snapshot {} (async_save)", human_bytes(snapshot)) : std::string(),
                     frozen > 0 ? fmt::format(", frozen base {} (LoRA{})", human_bytes(frozen),
                                              spec.lora.base_bf16 ? "; its layers in bf16" : "")
                                : std::string(),
                     human_bytes(total));
  if (r == 0 && st == 0) {
    std::vector<BufferPlan::Entry> top = acts.entries();
    std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.floats > b.floats; });
    out += "  largest activation buffers:";
    for (size_t i = 0; i < std::min<size_t>(5, top.size()); ++i)
      out += fmt::format(" {} {}{}", top[i].name, human_bytes(4.0 * static_cast<double>(top[i].floats)),
                         i + 1 < std::min<size_t>(5, top.size()) ? "," : "");
    out += "\n";
  }
  return total;
}

// Tensor-parallel ranks whose memory lines are the same but for the rank are one line, "tensor-parallel ranks 0-7".
std::string merge_equal_ranks(const std::vector<std::string>& lines) {
  const auto label = [](int r) { return fmt::format("tensor-parallel rank {}", r); };
  const auto rank_line = [&](size_t r) {  // the line after the label (rank 0 has others before and after it)
    const std::string& s = lines[r];
    const size_t at = s.find(label(static_cast<int>(r))) + label(static_cast<int>(r)).size();
    return s.substr(at, s.find('\n', at) - at);
  };
  std::string out;
  for (size_t r = 0; r < lines.size();) {
    size_t e = r + 1;
    while (e < lines.size() && rank_line(e) == rank_line(r) && lines[e].find('\n') + 1 == lines[e].size()) ++e;
    std::string s = lines[r];
    if (e - r > 1) {
      const size_t at = s.find(label(static_cast<int>(r)));
      s.replace(at, label(static_cast<int>(r)).size(), fmt::format("tensor-parallel ranks {}-{}", r, e - 1));
    }
    out += s;
    r = e;
  }
  return out;
}

}  // namespace

bool group_spans_hosts(int ranks, int per_host, int stride, int size) {
  if (size <= 1 || per_host <= 0 || per_host >= ranks) return false;
  for (int r = 0; r < ranks; ++r) {
    const int base = r - ((r / stride) % size) * stride;  // the group's first rank
    for (int k = 1; k < size; ++k)
      if ((base + k * stride) / per_host != base / per_host) return true;
  }
  return false;
}

std::string plan_report(const Config& cfg, int ranks, double memory_per_rank, bool* fits, nlohmann::json* json,
                        const PlanHosts& where) {
  const ModelConfig& m = cfg.model;
  const ModelEntry& entry = find_model(m.arch, m.type);
  const TransformerSpec spec = entry.spec(m);
  std::string out = layout_lines(cfg, ranks);
  const ParamTable whole = TransformerLM::make_param_table(spec, entry.names);
  int64_t global = 0;
  for (const ParamSpec& p : whole.specs()) global += p.global_numel();
  std::string trained;
  if (spec.lora.on) {  // the parameters that train are the adapters; the model's own are the base's
    const int64_t adapters = global;
    global = 0;
    const ParamTable base = TransformerLM::make_base_table(spec, entry.names);
    for (const ParamSpec& p : base.specs()) global += p.global_numel();
    trained = fmt::format("; LoRA trains {} ({:.2f}%): r {}, alpha {}", adapters,
                          100.0 * static_cast<double>(adapters) / static_cast<double>(global), spec.lora.rank, spec.lora.alpha);
  }
  out += fmt::format("parameters: {} in the model ({} layers, hidden {}, {} heads / {} key-value heads, FFN {}, "
                     "vocabulary {}){}\n",
                     global, spec.layers, spec.hidden, spec.heads, spec.kv_heads, spec.ffn, spec.vocab, trained);
  if (spec.moe.experts > 1) out += moe_line(cfg, spec);
  // The step's compute: Megatron's model FLOPs (what MFU divides by the step time and the peak), for the global
  // batch; each rank runs about 1/ranks of it (data, tensor, pipeline and context parallel split the work).
  // (the trainer's global batch: trainer_setup.cpp)
  const int64_t micro = cfg.parallel.pipeline_stage > 1 ? cfg.parallel.micro_batch_num : cfg.gradient_accumulation_steps;
  const int64_t global_batch = cfg.batch_size * cfg.parallel.data_parallel * micro;
  const double flops = TransformerLM::model_flops(spec, global_batch);
  out += fmt::format("compute: {:.4g} TFLOP a step (Megatron's model FLOPs, forward and backward, of the global batch of {} "
                     "x {} tokens; the MFU numerator), {:.4g} TFLOP a rank{}\n",
                     flops / 1e12, global_batch, spec.seq, flops / 1e12 / ranks,
                     recompute_share(cfg) > 0
                         ? fmt::format("; {} recompute runs {:.1f}% more (the recomputed layers' forwards again{})",
                                       cfg.recompute ? "full" : "selective", 100 * recompute_share(cfg),
                                       cfg.recompute ? "" : ", the attention's core alone")
                         : std::string());
  // Pipeline stages: each holds its chunks' parameters and their micro-batch slots' activations.
  const int pp = static_cast<int>(cfg.parallel.pipeline_stage), tp = static_cast<int>(cfg.parallel.model_parallel);
  std::vector<std::vector<StageOptions>> stages(1, std::vector<StageOptions>{StageOptions{}});
  double bubble = 0;  // the schedule's analytic (or simulated) bubble, at equal stages
  double priced = 0;  // the same lists simulated with each virtual stage's FLOPs (the step-time model's)
  if (pp > 1) {
    const pipeline::Scheduler sched = cfg.parallel.pipeline_scheduler;
    pipeline::Shape shape = pipeline::schedule_shape(sched, pp, static_cast<int>(cfg.parallel.micro_batch_num),
                                                     static_cast<int>(cfg.parallel.pipeline_chunks));
    if (sched == pipeline::Scheduler::kFile) shape = pipeline::file_shape(cfg.parallel.pipeline_file, shape);
    // A schedule file's lists (the layout check has simulated them), or the built-in schedule's.
    pipeline::StageLists lists;
    if (const std::string e = pipeline::stage_lists(sched, shape, cfg.parallel.pipeline_file,
                                                    cfg.parallel.pipeline_schedule_max_live, &lists, &bubble);
        !e.empty())
      throw std::invalid_argument(e);
    priced = priced_bubble(cfg, lists, shape);
    out += fmt::format("schedule {}{}: {} bubble {:.1f}% of the step (equal stages), {:.1f}% simulated with each "
                       "virtual stage's FLOPs (the step time below); each stage below holds its chunks' parameters and "
                       "activation slots\n",
                       pipeline::scheduler_name(sched),
                       sched == pipeline::Scheduler::kFile ? " " + cfg.parallel.pipeline_file.path : std::string(),
                       pipeline::bubble_is_simulated(sched) ? "simulated" : "analytic", 100.0 * bubble, 100.0 * priced);
    stages.clear();
    for (int st = 0; st < pp; ++st) stages.push_back(pipeline_chunk_options(cfg.parallel.stage_layers, lists, shape, st));
  }
  double worst = 0;
  for (size_t st = 0; st < stages.size(); ++st) {
    std::vector<std::string> lines(static_cast<size_t>(tp));
    for (int r = 0; r < tp; ++r) {
      nlohmann::json b;
      worst = std::max(worst, rank_lines(cfg, entry, spec, stages[st], st, r, ranks, lines[r], json ? &b : nullptr));
      if (json) (*json)["ranks"].push_back(std::move(b));
    }
    out += merge_equal_ranks(lines);
  }
  // The bytes a step sends, for tensor-parallel rank 0 at data-parallel position 0 of each stage (other positions
  // differ by the scalars' few bytes); the trainer logs the same count beside what its communicators measured.
  std::vector<std::string> sent;  // each stage's line, merged below where consecutive stages send the same
  StepComm first;                 // stage 0's, for the step time below
  int64_t first_floats = 0;       // stage 0's tensor rank 0's arena
  int64_t first_dense = 0;        // of it, before the experts' region
  for (size_t st = 0; st < stages.size(); ++st) {
    const Placement t0(TransformerLM::make_param_table(spec, entry.names, stages[st]), TransformerLM::param_layout(m, model_layout(cfg)), 0);
    const StepComm c = step_comm(cfg, t0, stages[st], static_cast<int>(st), 0, 0);
    if (st == 0) {
      first = c;
      first_floats = t0.total_floats();
      first_dense = std::min(t0.expert_begin(), first_floats);
    }
    if (!c.not_modelled.empty()) {
      out += fmt::format("sent per step: not counted for {} yet\n", c.not_modelled);
      if (json) (*json)["sent_per_step"].push_back({{"not_modelled", c.not_modelled}});
      break;
    }
    sent.push_back(fmt::format(
        "sent per step by a rank: {} in the tensor-parallel group, {} in the data-parallel group{}{}{} (as counted by the "
        "run's log)\n",
        human_bytes(c.tensor), human_bytes(c.data),
        (c.expert_data > 0 ? fmt::format(", {} in the expert-data group (the experts' gradients)", human_bytes(c.expert_data))
                           : std::string()) +
            (c.expert > 0 ? fmt::format(", {} in the expert-parallel group (the MoE dispatch{})", human_bytes(c.expert),
                                        c.expert_expected ? "'s all-to-all under balanced routing" : "")
                          : std::string()),
        cfg.parallel.context_parallel > 1 ? fmt::format(", {} in the context-parallel group", human_bytes(c.context))
                                          : std::string(),
        pp > 1 ? fmt::format(", {} in the pipeline group{}", human_bytes(c.pipeline),
                             c.embedding > 0 ? fmt::format(", {} summing the tied embedding's copies", human_bytes(c.embedding))
                                             : std::string())
               : std::string()));
    if (json)
      (*json)["sent_per_step"].push_back({{"stage", st}, {"tensor", c.tensor}, {"data", c.data}, {"pipeline", c.pipeline},
                                          {"embedding", c.embedding}, {"context", c.context},
                                          {"expert_data", c.expert_data}, {"expert", c.expert},
                                          {"expert_expected", c.expert_expected}, {"data_shard", c.data_shard},
                                          {"data_replica", c.data_replica}, {"messages", c.messages}});
  }
  std::string step_line;
  // The modelled step time (runner/report/step_time.h) of stage 0's tensor rank 0, on this machine's probe, at
  // OMP_NUM_THREADS threads a rank or this machine's cores shared among the ranks.
  {
    const char* env = std::getenv("OMP_NUM_THREADS");
    const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    const int threads = env && std::atoi(env) > 0 ? std::atoi(env) : std::max(1, hw / std::min(ranks, hw));
    const std::optional<MachineProbe> probe = machine_probe_for_this_cpu(machine_probe_path());
    const int64_t dc = cfg.parallel.data_parallel * cfg.parallel.context_parallel;
    // The optimizer's shard: under ZeRO the dense parameters over the shard group (data x context, or hybrid sharding's
    // H of it), the experts' over theirs (data x context / ep, or H of it).
    double shard = static_cast<double>(first_floats);
    if (cfg.parallel.zero_stage >= 1 && dc > 1) {
      const int edc = static_cast<int>(dc / std::max<int64_t>(1, cfg.parallel.expert_parallel));
      shard = static_cast<double>(first_dense) / shard_group_size(cfg.parallel.shard_degree, static_cast<int>(dc)) +
              static_cast<double>(first_floats - first_dense) / shard_group_size(cfg.parallel.shard_degree, edc);
    }
    StepTimeInputs in = step_time_inputs(cfg, flops / ranks, shard, first, priced, threads, ranks / std::max(1, where.hosts));
    if (where.hosts > 1) {  // the groups that span hosts send at the bandwidth given between them
      const ParallelConfig& p = cfg.parallel;
      const int mp = static_cast<int>(p.model_parallel), cp = static_cast<int>(p.context_parallel),
                dp = static_cast<int>(p.data_parallel), pps = static_cast<int>(p.pipeline_stage),
                ep = static_cast<int>(p.expert_parallel), per = ranks / where.hosts;
      const int H = shard_group_size(p.shard_degree, cp * dp);
      const StepComm::Messages& n = first.group_messages;
      const std::tuple<double, double, bool> groups[] = {
          {first.tensor, n.tensor, group_spans_hosts(ranks, per, 1, mp)},
          {first.context, n.context, group_spans_hosts(ranks, per, mp, cp)},
          // the gradients' data x context group; under hybrid sharding its shard groups of H consecutive ranks of it,
          // and its replica groups (the ranks H apart)
          {first.data - first.data_shard - first.data_replica, n.data - n.data_shard - n.data_replica,
           group_spans_hosts(ranks, per, mp, cp * dp)},
          {first.data_shard, n.data_shard, group_spans_hosts(ranks, per, mp, H)},
          {first.data_replica, n.data_replica, group_spans_hosts(ranks, per, mp * H, cp * dp / H)},
          {first.pipeline + first.embedding, n.pipeline + n.embedding, group_spans_hosts(ranks, per, mp * cp * dp, pps)},
          {first.expert_data, n.expert_data, group_spans_hosts(ranks, per, mp * cp * ep, dp / std::max(1, ep))},
          {first.expert, n.expert, group_spans_hosts(ranks, per, mp * cp, ep)}};
      for (const auto& [bytes, messages, spans] : groups)
        if (spans) {
          in.sent_bytes -= bytes;
          in.cross_bytes += bytes;
          in.messages -= messages;
          in.cross_messages += messages;
        }
      in.cross_gbs = where.gbs;
      in.cross_latency_us = where.latency_us;
      in.cross_source = where.source;
      if (json) {
        (*json)["cross_host_bytes_per_step"] = in.cross_bytes;
        (*json)["cross_host_messages_per_step"] = in.cross_messages;
      }
    }
    const StepTime st = model_step_time(in, probe ? &*probe : nullptr);
    std::string why =
        !first.not_modelled.empty() ? "the bytes of " + first.not_modelled + " are not counted yet" : st.not_modelled;
    step_line = why.empty() ? fmt::format("modelled step time: {:.4g} s (compute {:.4g}, optimizer {:.4g}, messages {:.4g}; "
                                          "{}; on this machine's probe, {} thread(s) a rank{}; the run logs it beside the "
                                          "measured one)\n",
                                          st.seconds, st.compute, st.optimizer, st.communication, st.basis, threads,
                                          where.hosts > 1 ? fmt::format(", {} hosts of {} ranks: {} a step between them",
                                                                        where.hosts, ranks / where.hosts,
                                                                        human_bytes(in.cross_bytes))
                                                          : std::string())
                            : fmt::format("modelled step time: none ({})\n", why);
    if (json && why.empty())
      (*json)["step_seconds_modelled"] = {{"total", st.seconds}, {"compute", st.compute}, {"optimizer", st.optimizer},
                                          {"communication", st.communication}, {"threads", threads}};
  }
  for (size_t a = 0; a < sent.size();) {
    size_t b = a + 1;
    while (b < sent.size() && sent[b] == sent[a]) ++b;
    out += (pp == 1 ? "" : b - a == 1 ? fmt::format("stage {}: ", a) : fmt::format("stages {}-{}: ", a, b - 1)) + sent[a];
    a = b;
  }
  out += step_line;
  out += fmt::format("largest rank: {} (plus the binary, its libraries and the data index; peak RSS measured "
                     "1.02-1.08x of this, bench/memory_vs_plan.py)\n",
                     human_bytes(worst));
  if (memory_per_rank > 0) {
    const bool ok = worst <= memory_per_rank;
    out += ok ? fmt::format("fits: the largest rank needs {} of the {} a rank has ({:.0f}%)\n", human_bytes(worst),
                            human_bytes(memory_per_rank), 100.0 * worst / memory_per_rank)
              : fmt::format("does not fit: the largest rank needs {}, {} more than the {} a rank has\n", human_bytes(worst),
                            human_bytes(worst - memory_per_rank), human_bytes(memory_per_rank));
    if (fits) *fits = ok;
  }
  if (json) {
    (*json)["world_size"] = ranks;
    (*json)["layout"] = {{"data_parallel", cfg.parallel.data_parallel}, {"model_parallel", cfg.parallel.model_parallel},
                         {"pipeline_stage", cfg.parallel.pipeline_stage}, {"context_parallel", cfg.parallel.context_parallel},
                         {"expert_parallel", cfg.parallel.expert_parallel}};
    (*json)["parameters"] = global;
    (*json)["global_batch"] = global_batch;
    (*json)["flops_per_step"] = flops;
    (*json)["largest_rank_bytes"] = worst;
    if (memory_per_rank > 0) {
      (*json)["memory_per_rank"] = memory_per_rank;
      (*json)["fits"] = worst <= memory_per_rank;
    }
  }
  return out;
}

}  // namespace gf
