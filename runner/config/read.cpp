// Reading the run's keys into Settings: training, parallel layout, optimizer and learning rate,
// callbacks, datasets. Each function reads only kBuilt and kChecked keys (runner/config/keys.cpp) and
// says what it cannot honour.
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdio>
#include <regex>
#include <string>

#include "core/optim/lr_schedule.h"
#include "runner/config/read.h"
#include "runner/config/schema.h"

namespace gf::config_read {
namespace {

using config_tree::show;

// The loss scale multiplies the fp32 loss before the backward and divides the gradients after it, as an
// fp32 number: above FLT_MAX (3.4e38) it is infinite there and so is every gradient. A fixed scale that
// large would skip every step; a dynamic one is divided by scale_factor at each overflow, so it costs
// the steps it takes to come down, which are said.
void check_loss_scale(ReadContext& x) {
  const LossScaleConfig& l = x.c.loss_scale;
  const double max = std::numeric_limits<float>::max();
  if (!(l.value > 0 && std::isfinite(l.value)) || (!l.dynamic && l.value > max))
    x.refuse("`runner_wrapper.scale_sense` loss scale " + show(YAML::Node(l.value)) + ": must be in (0, 3.4e38], a finite "
             "float32 (MindFormers' default 65536, Megatron's initial 2^32; 1 for none)" +
             std::string(l.dynamic ? "" : ": a fixed scale above it overflows every step"));
  if (l.dynamic && !(l.factor > 1 && l.factor <= max))
    x.refuse("`runner_wrapper.scale_sense.scale_factor: " + show(YAML::Node(l.factor)) + "`: must be in (1, 3.4e38] (the "
             "dynamic scale is divided by it after an overflow and multiplied after scale_window good steps; 2 by default)");
  if (l.window < 1) x.refuse("`runner_wrapper.scale_sense.scale_window: " + std::to_string(l.window) + "`: must be >= 1");
  if (l.dynamic && std::isfinite(l.value) && l.value > max && l.factor > 1 && std::isfinite(l.factor))
    x.warn("`runner_wrapper.scale_sense.loss_scale_value: " + show(YAML::Node(l.value)) + "` is above float32's largest "
           "number (3.4e38): the first " + std::to_string(static_cast<int64_t>(std::ceil(std::log(l.value / max) / std::log(l.factor)))) +
           " step(s) will overflow and be skipped while the dynamic scale comes down by scale_factor " +
           show(YAML::Node(l.factor)) + " each");
}

void read_scale_sense(ReadContext& x) {
  Config& c = x.c;
  const YAML::Node s = x.rd.node("runner_wrapper.scale_sense");
  if (s.IsScalar()) {
    c.loss_scale.value = s.as<double>();
    check_loss_scale(x);
    return;
  }
  const std::string type = s["type"] ? s["type"].as<std::string>() : "";
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    if (key != "type" && key != "loss_scale_value" && key != "scale_factor" && key != "scale_window")
      x.refuse("`runner_wrapper.scale_sense." + key + "`: unknown key; known: type, loss_scale_value, scale_factor, scale_window");
  }
  if (type == "DynamicLossScaleUpdateCell") c.loss_scale.dynamic = true;
  else if (type != "FixedLossScaleUpdateCell")
    x.refuse("`runner_wrapper.scale_sense.type: " + type + "`: registered: DynamicLossScaleUpdateCell, FixedLossScaleUpdateCell");
  if (s["loss_scale_value"]) c.loss_scale.value = s["loss_scale_value"].as<double>();
  if (s["scale_factor"]) c.loss_scale.factor = s["scale_factor"].as<double>();
  if (s["scale_window"]) c.loss_scale.window = s["scale_window"].as<int64_t>();
  check_loss_scale(x);
}

// MindFormers' names of the attention core's operations, the part our selective recompute keeps
// out of memory and computes again (the scores, softmax, dropout and the product with the values):
// its LLamaAttention's (softmax, batch_matmul_q_k, batch_matmul, flash_attention) and its GPT-2
// MultiHeadAttention's (softmax, prob_dropout, batch_matmul, dense products excluded).
const std::vector<std::string>& attention_core_names() {
  static const std::vector<std::string> names = {
      "attention.softmax", "attention.batch_matmul_q_k", "attention.batch_matmul", "attention.flash_attention",
      "attention.prob_dropout", "attention.softmax.softmax"};
  return names;
}
// The other operations of a layer, by MindFormers' names: a pattern that selects any of them asks
// for a recompute that is not built here.
const std::vector<std::string>& other_layer_names() {
  static const std::vector<std::string> names = {
      "attention_norm.norm", "ffn_norm.norm", "attention.wq", "attention.wk", "attention.wv", "attention.wo",
      "attention.w_qkv", "attention.apply_rotary_emb", "attention.dense1", "attention.dense2", "attention.dense3",
      "attention.projection", "feed_forward.w1", "feed_forward.w1.activation.silu", "feed_forward.w1.matmul",
      "feed_forward.w2", "feed_forward.w3", "feed_forward.mul", "feed_forward.w3.matmul", "output.mapping",
      "output.projection", "output.activation", "layernorm1", "layernorm2", "feed_forward"};
  return names;
}

// select_recompute's dict form, {pattern: True | False | [layers per stage]}: each pattern (a Python
// regular expression on MindFormers' operation names, read here as ECMAScript, which agrees on the
// escapes and classes these patterns use) must select attention-core operations only.
void read_select_recompute_patterns(ReadContext& x, const YAML::Node& n) {
  const std::string key = "recompute_config.select_recompute";
  bool all = false;
  std::vector<int64_t> per_stage;
  for (const auto& it : n) {
    const std::string pattern = it.first.as<std::string>();
    std::regex re;
    try {
      re = std::regex(pattern);
    } catch (const std::regex_error& e) {
      x.refuse("`" + key + "`: pattern '" + pattern + "' is not a regular expression: " + e.what());
      continue;
    }
    std::string others, core;
    for (const std::string& name : other_layer_names())
      if (std::regex_search(name, re)) others += (others.empty() ? std::string() : std::string(", ")) + name;
    for (const std::string& name : attention_core_names())
      if (std::regex_search(name, re)) core += (core.empty() ? std::string() : std::string(", ")) + name;
    if (!others.empty()) {
      x.refuse("`" + key + "`: pattern '" + pattern + "' selects " + others +
               ": recomputing those operations is not built; selective recompute here is the attention core's "
               "(patterns such as 'attention\\.softmax' or 'attention\\.flash_attention'), and "
               "recompute_config.recompute recomputes whole layers");
      continue;
    }
    if (core.empty()) {
      x.refuse("`" + key + "`: pattern '" + pattern + "' selects no operation of a layer (MindFormers' names, e.g. "
               "attention.softmax, attention.flash_attention, feed_forward.mul)");
      continue;
    }
    const YAML::Node v = it.second;
    bool on = false;
    if (v.IsSequence()) {
      std::vector<int64_t> counts;
      for (const YAML::Node& item : v) {
        int64_t c = -1;
        if (!item.IsScalar() || !YAML::convert<int64_t>::decode(item, c) || c < 0) {
          x.refuse("`" + key + "`: pattern '" + pattern + "': " + show(v) +
                   " expects True, False or a number of layers (>= 0) per pipeline stage; a list per model chunk "
                   "(pp_interleave_num > 1) is not built");
          counts.clear();
          break;
        }
        counts.push_back(c);
      }
      if (!per_stage.empty() && !counts.empty() && counts.size() != per_stage.size())
        x.refuse("`" + key + "`: the patterns give lists of different lengths (" + std::to_string(per_stage.size()) +
                 " and " + std::to_string(counts.size()) + ")");
      if (per_stage.empty()) per_stage = counts;
      else
        for (size_t i = 0; i < std::min(per_stage.size(), counts.size()); ++i) per_stage[i] = std::max(per_stage[i], counts[i]);
    } else if (YAML::convert<bool>::decode(v, on)) {
      all = all || on;
    } else {
      x.refuse("`" + key + "`: pattern '" + pattern + "': " + show(v) + " expects True, False or a list per stage");
    }
  }
  // True for one pattern recomputes every layer's core, whatever the others' lists say.
  x.c.select_recompute_per_stage = all ? std::vector<int64_t>{} : per_stage;
  x.c.select_recompute = all;
  for (const int64_t v : x.c.select_recompute_per_stage) x.c.select_recompute = x.c.select_recompute || v > 0;
}

// recompute_config.select_recompute: a boolean, MindFormers' list of layer counts per pipeline stage,
// or its dict of operation-name patterns (read_select_recompute_patterns).
void read_select_recompute(ReadContext& x) {
  const YAML::Node n = x.rd.node("recompute_config.select_recompute");
  if (n.IsMap()) return read_select_recompute_patterns(x, n);
  if (n.IsSequence()) {  // MindFormers' per-stage list: the number of layers to recompute on each pipeline stage
    for (const YAML::Node& item : n) {
      int64_t v = -1;
      if (!item.IsScalar() || !YAML::convert<int64_t>::decode(item, v) || v < 0) {
        x.refuse(kv("recompute_config.select_recompute", show(n)) +
                 ": a list holds a number of layers (>= 0) per pipeline stage; a list per model chunk "
                 "(pp_interleave_num > 1) is not built");
        x.c.select_recompute_per_stage.clear();
        return;
      }
      x.c.select_recompute_per_stage.push_back(v);
    }
    x.c.select_recompute = false;
    for (const int64_t v : x.c.select_recompute_per_stage) x.c.select_recompute = x.c.select_recompute || v > 0;
    return;
  }
  if (!YAML::convert<bool>::decode(n, x.c.select_recompute))
    x.refuse(kv("recompute_config.select_recompute", show(n)) + ": expects True or False");
}

void check_runner(ReadContext& x) {
  const std::string trainer = x.rd.get<std::string>("trainer.type");
  if (trainer != "CausalLanguageModelingTrainer")
    x.refuse(kv("trainer.type", trainer) + ": gridformer trains causal language models only (CausalLanguageModelingTrainer)");
  const std::string wrapper = x.rd.get<std::string>("runner_wrapper.type");
  if (wrapper != "MFTrainOneStepCell")
    x.refuse(kv("runner_wrapper.type", wrapper) + ": registered: MFTrainOneStepCell (gradient clipping and loss "
             "scaling: use_clip_grad, max_grad_norm, scale_sense)");
  // Accumulation over micro-batches: with pipeline_stage > 1 micro_batch_num counts them instead, and the layout
  // check refuses both at once.
  const int64_t gas = x.c.gradient_accumulation_steps = x.rd.get<int64_t>("runner_config.gradient_accumulation_steps");
  if (gas < 1)
    x.refuse(kv("runner_config.gradient_accumulation_steps", std::to_string(gas)) +
             ": must be >= 1 (micro-batches of runner_config.batch_size accumulated per step; 1: none)");
}

// MindFormers' top-level profile keys, as its trainer hands them to ProfileMonitor
// (mindformers/trainer/base_trainer.py, _build_profile_cb; mindformers/core/callback/callback.py,
// ProfileMonitor): steps [profile_start_step, profile_stop_step], or from the start with
// init_start_profile (the profiler then starts at its initialisation and profile_start_step has no
// effect). MindFormers also turns init_start_profile and profile_communication on whenever there are
// several devices (what Ascend's profiler needs to see HCCL); here each key means what it says.
void read_profile(ReadContext& x) {
  ProfileConfig& p = x.c.profile;
  p.enabled = x.rd.get<bool>("profile");
  p.start_step = x.rd.get<int64_t>("profile_start_step");
  p.stop_step = x.rd.get<int64_t>("profile_stop_step");
  p.init_start = x.rd.get<bool>("init_start_profile");
  p.communication = x.rd.get<bool>("profile_communication");
  p.memory = x.rd.get<bool>("profile_memory");
  p.ops = x.rd.get<bool>("profile_ops");
  if (p.start_step < 1) x.refuse(kv("profile_start_step", std::to_string(p.start_step)) + ": must be >= 1 (steps count from 1)");
  if (p.stop_step < p.first_step())
    x.refuse(kv("profile_stop_step", std::to_string(p.stop_step)) + ": must be >= the first profiled step " +
             std::to_string(p.first_step()) + (p.init_start ? " (init_start_profile: True profiles from step 1)" : " (profile_start_step)"));
  if (!p.enabled && (p.communication || p.memory || p.ops || p.init_start))
    x.warn("`" + std::string(p.communication ? "profile_communication" : p.memory ? "profile_memory" : p.ops ? "profile_ops" : "init_start_profile") +
           ": True` without `profile: True`: nothing is profiled (set profile: True for a trace under <output_dir>/profile)");
}

}  // namespace

void read_training(ReadContext& x) {
  Config& c = x.c;
  KeyReader& rd = x.rd;
  c.seed = rd.get<int64_t>("seed");
  const std::string run_mode = rd.get<std::string>("run_mode");
  if (!parse_run_mode(run_mode, c.run_mode)) x.refuse("`run_mode: " + run_mode + "`: expects train, finetune, eval or predict");
  c.output_dir = rd.get<std::string>("output_dir");
  const std::string log_format = rd.get<std::string>("log_format");
  c.megatron_log = log_format == "megatron";
  if (log_format != "megatron" && log_format != "mindformers")
    x.refuse("`log_format: " + log_format + "`: expects mindformers (MFLossMonitor's line) or megatron (Megatron-LM's "
             "` iteration N/M | consumed samples: ... |` line)");
  c.resume_training = rd.get<bool>("resume_training");
  c.use_parallel = rd.get<bool>("use_parallel");
  c.model_name = rd.get<std::string>("trainer.model_name");
  c.epochs = rd.get<int64_t>("runner_config.epochs");
  c.batch_size = rd.get<int64_t>("runner_config.batch_size");
  c.train_steps = rd.get<int64_t>("runner_config.train_steps");
  c.peak_tflops = rd.get<double>("runner_config.peak_tflops");
  c.exit_interval = rd.get<int64_t>("runner_config.exit_interval");
  c.exit_duration_in_mins = rd.get<double>("runner_config.exit_duration_in_mins");
  if (c.exit_interval < 0)
    x.refuse(kv("runner_config.exit_interval", std::to_string(c.exit_interval)) + ": must be >= 0 (0: never)");
  if (!(c.exit_duration_in_mins >= 0))
    x.refuse("`runner_config.exit_duration_in_mins`: must be >= 0 (0: never)");
  c.use_clip_grad = rd.get<bool>("runner_wrapper.use_clip_grad");
  c.max_grad_norm = rd.get<double>("runner_wrapper.max_grad_norm");
  c.recompute = rd.get<bool>("recompute_config.recompute");
  read_select_recompute(x);
  c.recompute_num_layers = rd.get<int64_t>("recompute_config.recompute_num_layers");
  c.do_eval = rd.get<bool>("do_eval");
  c.skip_data.enabled = rd.get<bool>("use_skip_data_by_global_norm");
  c.skip_data.threshold = rd.get<double>("monitor_config.global_norm_spike_threshold");
  c.skip_data.count_threshold = rd.get<int64_t>("monitor_config.global_norm_spike_count_threshold");
  if (!(c.skip_data.threshold > 0))
    x.refuse(kv("monitor_config.global_norm_spike_threshold", std::to_string(c.skip_data.threshold)) + ": must be > 0");
  if (c.skip_data.count_threshold < 1)
    x.refuse(kv("monitor_config.global_norm_spike_count_threshold", std::to_string(c.skip_data.count_threshold)) +
             ": must be >= 1");
  c.spikes.loss_factor = rd.get<double>("monitor_config.loss_spike_factor");
  c.spikes.grad_norm_factor = rd.get<double>("monitor_config.grad_norm_spike_factor");
  c.spikes.window = rd.get<int64_t>("monitor_config.spike_window");
  for (const char* k : {"monitor_config.loss_spike_factor", "monitor_config.grad_norm_spike_factor"})
    if (!(rd.get<double>(k) >= 0)) x.refuse("`" + std::string(k) + "`: must be >= 0 (0: off)");
  if (c.spikes.window < 1)
    x.refuse(kv("monitor_config.spike_window", std::to_string(c.spikes.window)) + ": must be >= 1 steps");
  if (const std::string a = rd.get<std::string>("monitor_config.spike_action"); !parse_spike_action(a, c.spikes.action))
    x.refuse("`monitor_config.spike_action: " + a + "`: must be warn, skip or stop");
  c.resume_healthy_only = rd.get<bool>("resume_healthy_only");
  c.eval_step_interval = rd.get<int64_t>("eval_step_interval");
  c.eval_epoch_interval = rd.get<int64_t>("eval_epoch_interval");
  if (c.batch_size <= 0) x.refuse("`runner_config.batch_size: " + std::to_string(c.batch_size) + "`: must be > 0");
  if (c.epochs <= 0) x.refuse("`runner_config.epochs: " + std::to_string(c.epochs) + "`: must be > 0");
  if (c.train_steps == 0 || c.train_steps < -1)
    x.refuse("`runner_config.train_steps: " + std::to_string(c.train_steps) + "`: must be > 0, or -1 for epochs x dataset size");
  if (c.max_grad_norm <= 0) x.refuse("`runner_wrapper.max_grad_norm`: must be > 0");
  if (c.peak_tflops < 0) x.refuse("`runner_config.peak_tflops`: must be >= 0 (0: the machine probe's measured peak)");
  for (auto [key, v] :
       {std::pair{"eval_step_interval", c.eval_step_interval}, {"eval_epoch_interval", c.eval_epoch_interval}})
    if (v == 0 || v < -1) x.refuse(kv(key, std::to_string(v)) + ": must be > 0, or -1 for never");
  check_runner(x);
  read_scale_sense(x);
  read_profile(x);
}

// MindFormers' context-parallel keys: the degree, and which algorithm splits the attention core.
void read_context_parallel(ReadContext& x) {
  KeyReader& rd = x.rd;
  auto& p = x.c.parallel;
  p.context_parallel = rd.get<int64_t>("parallel_config.context_parallel");
  const std::string algo = p.context_parallel_algo = rd.get<std::string>("parallel_config.context_parallel_algo");
  const int64_t ulysses = p.ulysses_degree_in_cp = rd.get<int64_t>("parallel_config.ulysses_degree_in_cp");
  const std::string cp_kv = kv("parallel_config.context_parallel", std::to_string(p.context_parallel));
  if (p.context_parallel < 1) {
    x.refuse(cp_kv + ": must be >= 1 (1: no context parallel)");
    return;
  }
  if (algo != "colossalai_cp" && algo != "ulysses_cp" && algo != "hybrid_cp") {
    x.refuse(kv("parallel_config.context_parallel_algo", algo) + ": expects colossalai_cp, ulysses_cp or hybrid_cp");
    return;
  }
  if (p.context_parallel == 1) return;
  // MindSpeed's rule for hybrid_cp: the Ulysses degree divides the context degree.
  if (algo == "hybrid_cp" && (ulysses < 1 || p.context_parallel % ulysses != 0)) {
    std::string fits;
    for (int64_t u = 1; u <= p.context_parallel; ++u)
      if (p.context_parallel % u == 0) {
        if (!fits.empty()) fits += ", ";
        fits += std::to_string(u);
      }
    x.refuse(cp_kv + " with `context_parallel_algo: hybrid_cp` and " +
             kv("parallel_config.ulysses_degree_in_cp", std::to_string(ulysses)) +
             ": the Ulysses degree must divide context_parallel (Ulysses groups of that many ranks, a ring across them); "
             "use one of " + fits);
    return;
  }
  // hybrid_cp at its two ends is one of the others.
  if (algo == "hybrid_cp" && ulysses == p.context_parallel) p.context_parallel_algo = "ulysses_cp";
  if (algo == "hybrid_cp" && ulysses == 1) p.context_parallel_algo = "colossalai_cp";
}

// parallel.zero_stage, MindFormers' optimizer sharding keys and the shard group's size (hybrid sharding).
void read_zero_stage(ReadContext& x) {
  KeyReader& rd = x.rd;
  auto& p = x.c.parallel;
  const bool mf = rd.get<bool>("parallel_config.optimizer_shard") || rd.get<bool>("parallel.enable_parallel_optimizer");
  const int64_t stage = rd.get<int64_t>("parallel.zero_stage");
  const std::string stage_kv = kv("parallel.zero_stage", std::to_string(stage));
  if (stage < -1 || stage > 3) {
    x.refuse(stage_kv + ": expects 0 (nothing sharded), 1 (the AdamW moments), 2 (and the gradients) or 3 (and the "
             "weights)");
  } else if (stage == 0 && mf) {
    x.refuse(stage_kv + " with optimizer sharding on (parallel.enable_parallel_optimizer or "
             "parallel_config.optimizer_shard: True, which mean zero_stage 1): drop one of them");
  }
  p.zero_stage = stage >= 0 ? static_cast<int>(stage) : mf ? 1 : 0;
  p.zero_prefetch = rd.get<bool>("parallel.zero_prefetch");
  const int64_t shard = rd.get<int64_t>("parallel.parallel_optimizer_config.optimizer_weight_shard_size");
  const int64_t hybrid = rd.get<int64_t>("parallel_config.hybrid_shard_degree");
  const std::string shard_kv = kv("parallel.parallel_optimizer_config.optimizer_weight_shard_size", std::to_string(shard));
  const std::string hybrid_kv = kv("parallel_config.hybrid_shard_degree", std::to_string(hybrid));
  if (shard == 0 || shard < -1) x.refuse(shard_kv + ": must be -1 (all data-parallel ranks) or > 0");
  if (hybrid < 0) x.refuse(hybrid_kv + ": must be 0 (all data-parallel ranks) or > 0");
  const int64_t a = shard > 0 ? shard : 0, b = hybrid > 0 ? hybrid : 0;
  if (a > 0 && b > 0 && a != b)
    x.refuse(shard_kv + " and " + hybrid_kv + " name two shard group sizes; set one");
  p.shard_degree = a > 0 ? a : b;
  if (p.shard_degree > 0 && p.zero_stage == 0)
    x.warn((a > 0 ? shard_kv : hybrid_kv) + ": has no effect without sharding (parallel.zero_stage or "
           "parallel.enable_parallel_optimizer); ignored");
}

void read_parallel(ReadContext& x) {
  KeyReader& rd = x.rd;
  auto& p = x.c.parallel;
  p.data_parallel = rd.get<int64_t>("parallel_config.data_parallel");
  p.model_parallel = rd.get<int64_t>("parallel_config.model_parallel");
  p.pipeline_stage = rd.get<int64_t>("parallel_config.pipeline_stage");
  p.expert_parallel = rd.get<int64_t>("parallel_config.expert_parallel");
  read_context_parallel(x);
  p.use_seq_parallel = rd.get<bool>("parallel_config.use_seq_parallel");
  p.micro_batch_num = rd.get<int64_t>("parallel_config.micro_batch_num");
  p.vocab_emb_dp = rd.get<bool>("parallel_config.vocab_emb_dp");
  p.gradient_aggregation_group = rd.get<int64_t>("parallel_config.gradient_aggregation_group");
  if (p.gradient_aggregation_group < 1)
    x.refuse("`parallel_config.gradient_aggregation_group: " + std::to_string(p.gradient_aggregation_group) +
             "`: must be >= 1 (about that many gradient buckets, each all-reduced as backward completes it)");
  read_zero_stage(x);
  const std::string coll = rd.get<std::string>("parallel.collectives");
  if (coll != "ring" && coll != "mpi")
    x.refuse("`parallel.collectives: " + coll + "`: expects ring (our rings: bitwise-reproducible sums) or mpi (MPI's "
             "own collectives)");
  p.mpi_collectives = coll == "mpi";
  p.hang_timeout = rd.get<double>("parallel.hang_timeout");
  if (!(p.hang_timeout >= 0))
    x.refuse("`parallel.hang_timeout`: must be >= 0 (seconds a collective or message may wait; 0: no limit)");
  const std::string mbn = kv("parallel_config.micro_batch_num", std::to_string(p.micro_batch_num));
  if (p.micro_batch_num < 1)
    x.refuse(mbn + ": must be >= 1");
  else if (p.micro_batch_num > 1 && p.pipeline_stage == 1)
    x.warn(mbn + " with `pipeline_stage: 1`: micro-batches only split the batch for pipeline parallelism; MindFormers ignores "
           "it here too (global batch = batch_size x data_parallel x runner_config.gradient_accumulation_steps, the "
           "count of accumulated micro-batches without a pipeline); ignored");
  // parallel_mode is read raw: it stays a CPU-meaningless key, it only decides what gradients_mean would mean.
  const YAML::Node mode = config_tree::find(rd.root(), "parallel.parallel_mode");
  const bool data_parallel_mode = mode.IsScalar() && (mode.Scalar() == "0" || mode.Scalar() == "data_parallel");
  if (!rd.get<bool>("parallel.gradients_mean") && data_parallel_mode)
    x.warn("`parallel.gradients_mean: False` in data-parallel mode (parallel_mode 0): MindSpore would sum the "
           "data-parallel gradients; gridformer averages them (the loss is the mean over the global batch)");
}

void read_optimizer(ReadContext& x) {
  Config& c = x.c;
  KeyReader& rd = x.rd;
  const std::string type = rd.get<std::string>("optimizer.type");
  if (!parse_optimizer_type(type, c.optimizer_type))
    x.refuse("`optimizer.type: " + type + "`: unknown type; registered: " + optimizer_type_names());
  c.adamw.beta1 = rd.get<double>("optimizer.beta1");
  c.adamw.beta2 = rd.get<double>("optimizer.beta2");
  c.adamw.eps = rd.get<double>("optimizer.eps");
  c.adamw.weight_decay = rd.get<double>("optimizer.weight_decay");
  const YAML::Node betas = rd.node("optimizer.betas");
  if (!betas.IsNull()) {
    double b[2];
    if (!betas.IsSequence() || betas.size() != 2 || !YAML::convert<double>::decode(betas[0], b[0]) ||
        !YAML::convert<double>::decode(betas[1], b[1])) {
      x.refuse(kv("optimizer.betas", show(betas)) + ": expects [beta1, beta2]");
    } else {
      // beta1/beta2 away from their defaults were given too: they must say the same.
      const YAML::Node def = x.schema["optimizer"];
      const double given[] = {c.adamw.beta1, c.adamw.beta2};
      for (int i = 0; i < 2; ++i) {
        const std::string key = i == 0 ? "beta1" : "beta2";
        if (given[i] != def[key].as<double>() && given[i] != b[i])
          x.refuse(kv("optimizer.betas", show(betas)) + " and " + kv("optimizer." + key, show(rd.node("optimizer." + key))) +
                   " disagree; give one of them (betas for type AdamW, beta1 and beta2 for the AdamWeightDecay family)");
      }
      c.adamw.beta1 = b[0];
      c.adamw.beta2 = b[1];
    }
  }
  for (auto [key, v] : {std::pair{"optimizer.beta1", c.adamw.beta1}, {"optimizer.beta2", c.adamw.beta2}})
    if (!(v > 0.0 && v < 1.0)) x.refuse(kv(key, std::to_string(v)) + ": must be in (0, 1)");
  if (!(c.adamw.eps > 0.0)) x.refuse("`optimizer.eps`: must be > 0");
  if (c.adamw.weight_decay < 0.0) x.refuse("`optimizer.weight_decay`: must be >= 0");
  if (const std::string d = rd.get<std::string>("optimizer.moment_dtype"); !parse_moment_dtype(d, c.adamw.moment_dtype)) {
    x.refuse(kv("optimizer.moment_dtype", d) + ": must be float32 or bfloat16 (how AdamW stores its two moments)");
  } else if (c.adamw.moment_dtype == MomentDtype::kBFloat16) {
    if (c.optimizer_type == OptimizerType::kFP32StateAdamWeightDecay)
      x.refuse(kv("optimizer.moment_dtype", d) + " and `optimizer.type: FP32StateAdamWeightDecay` disagree: that type keeps "
               "its state in float32; use AdamWeightDecay or AdamW for bfloat16 moments");
    // A step moves a moment by (1 - beta) of its distance to the step's new term. bf16 keeps 8
    // significant bits: half the spacing next to a value x is between 2^-9 |x| (x a power of two,
    // below it) and 2^-8 |x|. A move smaller than that rounds back to x, so with 1 - beta < 2^-8 a
    // moment follows only new terms several times larger, and with 1 - beta < 2^-9 its magnitude
    // never shrinks.
    const bool pair = !rd.node("optimizer.betas").IsNull();
    for (auto [i, b] : {std::pair{1, c.adamw.beta1}, {2, c.adamw.beta2}})
      if (b > 0.0 && b < 1.0 && 1.0 - b < 1.0 / 256) {
        char text[160];
        std::snprintf(text, sizeof text, " with beta%d %.6g (optimizer.%s): a step moves the moment by 1 - beta%d = %.3g", i,
                      b, pair ? "betas" : (i == 1 ? "beta1" : "beta2"), i, 1.0 - b);
        x.warn(kv("optimizer.moment_dtype", d) + text +
               " of its distance to the new term, less than half of bfloat16's spacing next to it (2^-9 to 2^-8 of its "
               "magnitude), so the stored moment rounds back to itself unless the new term is several times larger" +
               (1.0 - b < 1.0 / 512 ? std::string(", and its magnitude never shrinks (1 - beta < 2^-9)") : std::string()) +
               "; beta <= 0.996 (1 - 2^-8) lets it shrink; float32 moments do not have this");
      }
  }

  c.lr.type = rd.get<std::string>("lr_schedule.type");
  c.lr.learning_rate = rd.get<double>("lr_schedule.learning_rate");
  c.lr.lr_end = rd.get<double>("lr_schedule.lr_end");
  c.lr.warmup_steps = rd.get<int64_t>("lr_schedule.warmup_steps");
  c.lr.warmup_ratio = rd.get<double>("lr_schedule.warmup_ratio");
  c.lr.total_steps = rd.get<int64_t>("lr_schedule.total_steps");
  if (c.lr.total_steps < -1)
    x.refuse("`lr_schedule.total_steps: " + std::to_string(c.lr.total_steps) +
             "`: expects the schedule's steps (>= 1), or -1 (or 0): the run's steps");
  c.lr.power = rd.get<double>("lr_schedule.power");
  c.lr.from_steps_done = rd.get<bool>("lr_schedule.from_steps_done");
  c.lr_override_scheduler = rd.get<bool>("lr_schedule.override_opt_param_scheduler");
  c.lr_use_checkpoint_scheduler = rd.get<bool>("lr_schedule.use_checkpoint_opt_param_scheduler");
  if (c.lr_override_scheduler && c.lr_use_checkpoint_scheduler)
    x.refuse("`lr_schedule.override_opt_param_scheduler` and `lr_schedule.use_checkpoint_opt_param_scheduler` are both "
             "True: a resume takes its schedule from the config or from the checkpoint, not both (as in Megatron)");
  if (c.lr.type == "CosineWithWarmUpLR") c.lr.type = "cosine";  // MindFormers' name: linear warmup, half cosine to lr_end
  try {
    check_lr_schedule_type(c.lr.type);
  } catch (const std::exception& e) {
    x.refuse(std::string(e.what()) + ", and MindFormers' CosineWithWarmUpLR (= cosine)");
  }
  if (!(c.lr.learning_rate >= 0 && std::isfinite(c.lr.learning_rate)))
    x.refuse("`lr_schedule.learning_rate: " + show(x.rd.node("lr_schedule.learning_rate")) + "`: must be a finite number >= 0");
  // A schedule decaying to a negative rate would step up the gradient (ascent) past the point it crosses 0.
  if (!(c.lr.lr_end >= 0 && std::isfinite(c.lr.lr_end)))
    x.refuse("`lr_schedule.lr_end: " + show(x.rd.node("lr_schedule.lr_end")) + "`: must be a finite number >= 0 (the "
             "rate the schedule decays to; below 0 the steps would climb the loss)");
  if (c.lr.warmup_steps < 0) x.refuse("`lr_schedule.warmup_steps`: must be >= 0");
  if (!(c.lr.warmup_ratio >= 0 && c.lr.warmup_ratio <= 1))
    x.refuse("`lr_schedule.warmup_ratio: " + show(x.rd.node("lr_schedule.warmup_ratio")) + "`: must be in [0, 1] (the "
             "part of the total steps spent warming up)");
  if (!(c.lr.power >= 0 && std::isfinite(c.lr.power)))
    x.refuse("`lr_schedule.power: " + show(x.rd.node("lr_schedule.power")) + "`: must be a finite number >= 0");

  // optimizer.learning_rate: MindFormers builds the optimizer with the lr_schedule when there is one
  // (build_optim's default_args replace the optimizer's own learning_rate), else with this rate.
  const YAML::Node olr = rd.node("optimizer.learning_rate");
  double rate = 0;
  if (olr.IsNull()) return;
  if (!olr.IsScalar() || !YAML::convert<double>::decode(olr, rate) || rate < 0) {
    x.refuse(kv("optimizer.learning_rate", show(olr)) + ": expects a number >= 0");
  } else if (x.lr_schedule_given) {
    if (rate != c.lr.learning_rate)
      x.warn(kv("optimizer.learning_rate", olr.Scalar()) + " is not used: lr_schedule sets the learning rate (its "
             "learning_rate: " + show(rd.root()["lr_schedule"]["learning_rate"]) + "), as in MindFormers, whose "
             "lr_schedule replaces the optimizer's learning_rate; remove one of them");
  } else {
    c.lr = LrScheduleConfig{};
    c.lr.type = "constant";
    c.lr.learning_rate = rate;
    YAML::Node lr = rd.root()["lr_schedule"];  // the resolved config says what runs
    lr["type"] = "constant";
    lr["learning_rate"] = olr;
    lr["lr_end"] = 0.0;
    lr["warmup_steps"] = 0;
    lr["warmup_ratio"] = 0.0;
  }
}

}  // namespace gf::config_read
