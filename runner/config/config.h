// The typed configuration: the MindFormers-style YAML checked against the schema
// (runner/config/schema.cpp), defaults filled in, --set overrides applied, then read into structs. Every
// key of the schema has a disposition (runner/config/keys.cpp): read into a field here, warned about, or
// refused; nothing is dropped without a word.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/optim/adamw.h"
#include "core/optim/lr_schedule.h"
#include "core/math/mixed_precision.h"
#include "models/layout.h"
#include "models/model_config.h"
#include "parallel/pipeline/partition.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/schedule_file.h"

namespace gf {

// Every problem found in a config, one per line, each naming its key path and the fix.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& msg) : std::runtime_error(msg) {}
};

struct ParallelConfig {
  int64_t data_parallel = 1, model_parallel = 1, pipeline_stage = 1, expert_parallel = 1;
  // parallel_config.context_parallel: each sample's positions split over this many ranks; the attention
  // core runs as context_parallel_algo says: colossalai_cp (ring attention, MindFormers' default),
  // ulysses_cp (all-to-all to whole heads) or hybrid_cp (Ulysses over ulysses_degree_in_cp ranks
  // inside, ring attention across them); hybrid_cp at its two ends is read as one of the others.
  int64_t context_parallel = 1;
  std::string context_parallel_algo = "colossalai_cp";
  int64_t ulysses_degree_in_cp = 1;
  // The ranks the layout needs: data x model x context x pipeline (expert parallel is carved from data).
  int64_t ranks() const { return data_parallel * model_parallel * context_parallel * pipeline_stage; }
  // parallel.collectives: mpi: the groups' all-reduce, reduce-scatter and all-gather through MPI's own
  // collectives (parallel/communicator.h set_mpi_collectives); ring (false): ours.
  bool mpi_collectives = false;
  // parallel.hang_timeout: seconds a wait on a group may go without progress before every rank reports
  // its last calls, one line names the rank(s) that did not arrive, and the job ends with status 6
  // (parallel/watchdog.h); 0: never.
  double hang_timeout = 300.0;
  bool use_seq_parallel = false;
  // Micro-batches of batch_size samples per step per data-parallel rank under pipeline_stage > 1
  // (global batch = batch_size x data_parallel x micro_batch_num, as MindFormers counts it); at
  // pipeline_stage 1 warned and ignored, as MindFormers ignores it (gradient_accumulation_steps is the
  // count there). micro_batches_per_step() below says which.
  int64_t micro_batch_num = 1;
  bool vocab_emb_dp = true;
  int64_t gradient_aggregation_group = 4;
  // parallel.zero_stage (ours; DeepSpeed's stages): what each data-parallel rank holds only a shard of.
  // 0 nothing; 1 the AdamW moments (ZeRO-1: MindFormers' parallel.enable_parallel_optimizer: True or
  // parallel_config.optimizer_shard: True); 2 the gradients too, reduce-scattered layer by layer during the
  // backward; 3 the weights too, each layer's gathered before its forward and its backward and freed after.
  int zero_stage = 0;
  bool optimizer_shard() const { return zero_stage >= 1; }
  // The shard group's size inside the data-parallel (x context) group: SMP's
  // parallel_config.hybrid_shard_degree, MindSpore's parallel_optimizer_config.optimizer_weight_shard_size.
  // The state is sharded over groups of this many consecutive data-parallel ranks and replicated across
  // the groups; 0: the whole group (no replicas).
  int64_t shard_degree = 0;
  // parallel.zero_prefetch (ours): ZeRO-3 gathers the next block's weights while a block computes
  // (DeepSpeed's stage3_prefetch_bucket_size 0 turns that off there).
  bool zero_prefetch = true;
  // parallel.pipeline_config.pipeline_scheduler, parsed (pipeline::parse_scheduler: gpipe, 1f1b,
  // interleaved, which 1f1b becomes with pipeline_chunks > 1, zero_bubble_h1 and its aliases).
  pipeline::Scheduler pipeline_scheduler = pipeline::Scheduler::k1F1B;
  // parallel.pipeline_config.pipeline_schedule_file, parsed (pipeline_scheduler is then kFile): its rows
  // of actions, placed and simulated by the layout check (pipeline::check_schedule_file) against
  // pipeline_schedule_max_live (0: pipeline::default_live_bound). path empty: no file.
  pipeline::ScheduleFile pipeline_file;
  int64_t pipeline_schedule_max_live = 0;
  // Model chunks per stage (virtual stages): model.model_config.pp_interleave_num when
  // parallel.pipeline_config.pipeline_interleave is True and pipeline_stage > 1, else 1.
  int64_t pipeline_chunks = 1;
  // model.model_config.offset as written (an int, a list per stage, or [chunk][stage] lists).
  LayerOffset layer_offset;
  // Resolved by the loader: the layers of each virtual stage, pipeline_stage x pipeline_chunks entries,
  // virtual stage k = chunk x pipeline_stage + stage (parallel/pipeline/partition.h); {num_layers} at
  // pipeline_stage 1. Empty only when the split fails, which config_layout_problems refuses
  // (runner/config/layout_check.h), so a run never starts with it empty.
  std::vector<int64_t> stage_layers;
  bool operator==(const ParallelConfig&) const = default;
};

struct LossScaleConfig {
  bool dynamic = false;
  double value = 1.0, factor = 2.0;
  int64_t window = 1000;
  bool operator==(const LossScaleConfig&) const = default;
};

// MindFormers' data skip (use_skip_data_by_global_norm, monitor_config.global_norm_spike_*): a step whose
// global gradient norm (before clipping) exceeds `threshold` updates nothing and is counted; a normal
// step resets the count; `count_threshold` in a row stop the run with a checkpoint (status 5).
struct SkipDataConfig {
  bool enabled = false;
  double threshold = 3.0;
  int64_t count_threshold = 10;
  bool operator==(const SkipDataConfig&) const = default;
};

// Spikes against a running statistic (ours, beside MindFormers' absolute data skip; the idea of
// llm-foundry's KillLossSpike and Megatron's spiky-loss check): once `window` steps are recorded, a step
// whose loss exceeds loss_factor x the mean loss of the last `window` steps without a spike, or whose
// global gradient norm exceeds grad_norm_factor x their mean norm, is a spike (factor 0: not checked).
// It is logged with its samples; `action` then: warn (the update is made), skip (no update, counted
// as a skipped step; the next step reads the next batch), stop (the run ends with a checkpoint of the
// step before, status 5). A spike is not added to the window.
enum class SpikeAction { kWarn, kSkip, kStop };
const char* spike_action_name(SpikeAction a);
bool parse_spike_action(const std::string& s, SpikeAction& out);
struct SpikeConfig {
  double loss_factor = 0, grad_norm_factor = 0;
  int64_t window = 100;
  SpikeAction action = SpikeAction::kWarn;
  bool enabled() const { return loss_factor > 0 || grad_norm_factor > 0; }
  bool operator==(const SpikeConfig&) const = default;
};

struct DatasetConfig {
  std::string loader_type = "MegatronDataset";
  std::vector<std::pair<double, std::string>> data_path;  // (weight, prefix)
  std::string split = "949,50,1";
  bool shuffle = true;
  uint64_t seed = 1234;
  int64_t num_samples = -1;  // RandomTokens: distinct samples, cycled (-1: every sample new)
  int64_t eval_iters = 10;
  bool operator==(const DatasetConfig&) const = default;
};

// What a CheckpointMonitor callback asks for (MindFormers' keys): a checkpoint every save_steps
// steps under `directory` (default <output_dir>/checkpoint), the newest keep_max kept, written from a
// background thread when async_save (runner/train/checkpointing.cpp).
struct CheckpointConfig {
  bool enabled = false;
  std::string prefix = "gridformer";
  int64_t save_steps = 1, keep_max = 5;
  std::string directory;
  bool async_save = false;
  // megatron_format (ours; pretrain_gpt --save sets it): beside each checkpoint, rank 0 writes the same state in
  // Megatron-LM's layout (iter_NNNNNNN/mp_rank_*/model_optim_rng.pt with the optimizer, and its tracker file) in
  // `directory` (runner/train/megatron_state.cpp). Megatron-core's layout (every model but GPT-2, or GPT-2 with
  // megatron_use_mcore_models) takes its job's --transformer-impl (the norms' names) and --moe-grouped-gemm (the
  // experts as GroupedMLP's weight1 / weight2): pretrain_gpt sets these three from its arguments.
  bool megatron_format = false;
  std::string megatron_transformer_impl = "transformer_engine";  // or local
  bool megatron_moe_grouped_gemm = false, megatron_use_mcore_models = false;
  // Megatron's grad bucket size for the distributed optimizer's distrib_optim.pt (0: one bucket; --overlap-grad-reduce
  // makes it max(40000000, 1000000 x dp) elements).
  int64_t megatron_ddp_bucket_size = 0;
  bool operator==(const CheckpointConfig&) const = default;
};

// Text generation (run_mode: predict, `gridformer predict`; runner/infer/generate.h): model_config's decoding
// keys as MindFormers means them, and the processor's GPT-2 BPE files.
struct GenerationConfig {
  int64_t max_decode_length = 1024;  // prompt + generated tokens
  int64_t top_k = 5;                 // 0: no top-k filter
  double top_p = 1.0, temperature = 1.0, repetition_penalty = 1.0;
  bool do_sample = false;
  bool use_past = false;             // the KV cache; False recomputes the whole prefix for every token
  int64_t eos_token_id = 50256;      // < 0: none
  std::string tokenizer_type;          // processor.tokenizer.type ("" when the file has no processor)
  std::string vocab_file, merge_file;  // processor.tokenizer.vocab_file / merge_file
  bool operator==(const GenerationConfig&) const = default;
};

// The step timeline (MindFormers' top-level profile keys; runner/train/trainer.cpp, core/trace/trace.h): Chrome
// trace JSON of steps [start_step, stop_step] under <output_dir>/profile. init_start_profile: from
// the first step, as MindFormers' profiler started at its initialisation (start_step has no effect).
struct ProfileConfig {
  bool enabled = false;
  int64_t start_step = 1, stop_step = 10;
  bool init_start = false, communication = false, memory = false, ops = false;
  int64_t first_step() const { return init_start ? 1 : start_step; }
  bool operator==(const ProfileConfig&) const = default;
};

// run_mode (MindFormers' key): what `gridformer train` does with the config. train and finetune
// train (from load_checkpoint's weights when it is set), eval reports the loss and perplexity of the
// weights, predict belongs to `gridformer predict` (generation).
enum class RunMode { kTrain, kFinetune, kEval, kPredict };
const char* run_mode_name(RunMode m);
// The mode `s` names (its run_mode_name); false for another text.
bool parse_run_mode(const std::string& s, RunMode& out);

// optimizer.type: the names MindFormers gives its AdamW; every one runs AdamW (core/optim/adamw.h) with
// the moments optimizer.moment_dtype says (float32 by default; FP32StateAdamWeightDecay refuses
// bfloat16), so the type is kept for the log and the resolved config only.
enum class OptimizerType { kAdamWeightDecay, kFusedAdamWeightDecay, kFP32StateAdamWeightDecay, kAdamW };
const char* optimizer_type_name(OptimizerType t);
bool parse_optimizer_type(const std::string& s, OptimizerType& out);
// The names parse_optimizer_type takes, comma-separated (for the error that lists them).
std::string optimizer_type_names();

// Everything the run is built from. `operator==` lets the config tests prove that a key reaches
// a field: change the key alone, and the settings must differ.
struct Settings {
  int64_t seed = 0;
  RunMode run_mode = RunMode::kTrain;
  std::string output_dir = "./output";
  std::string load_checkpoint;  // the weights to start from (load_checkpoint, or in run_mode eval a path in
                                // model_config.checkpoint_name_or_path); checked to exist at load time
  std::string model_name;       // trainer.model_name: the run's label in the log
  bool use_parallel = true;     // False with several ranks: warned at start (the ranks still train together)
  bool resume_training = false;
  ParallelConfig parallel;
  // runner_config.gradient_accumulation_steps: at pipeline_stage 1 a step runs this many micro-batches
  // of batch_size and accumulates their gradients (global batch = batch_size x data_parallel x
  // gradient_accumulation_steps); with pipeline_stage > 1 it must be 1 (micro_batch_num counts there).
  int64_t gradient_accumulation_steps = 1;
  bool recompute = false, select_recompute = false;
  int64_t recompute_num_layers = -1;
  // select_recompute as MindFormers' per-stage list: the first n_s layers of pipeline stage s are
  // recomputed (selectively). Empty: select_recompute is True or False.
  std::vector<int64_t> select_recompute_per_stage;
  int64_t epochs = 1, batch_size = 1, train_steps = -1;
  double peak_tflops = 0.0;  // MFU peak per rank; 0: the machine probe's (runner/report/machine_probe.h)
  // Megatron's clean exits (runner/train/trainer.cpp): after the step divisible by exit_interval, or the
  // first step ending exit_duration_in_mins after training started, the run stops with a checkpoint; 0: never.
  int64_t exit_interval = 0;
  double exit_duration_in_mins = 0.0;
  SkipDataConfig skip_data;
  SpikeConfig spikes;
  // Resume without load_checkpoint takes the newest checkpoint recorded healthy (ours): True; False
  // takes the newest whatever its record.
  bool resume_healthy_only = true;
  LossScaleConfig loss_scale;
  bool use_clip_grad = false;
  double max_grad_norm = 1.0;
  OptimizerType optimizer_type = OptimizerType::kAdamWeightDecay;
  AdamWConfig adamw;
  LrScheduleConfig lr;
  bool megatron_log = false;  // log_format: megatron (the step lines as Megatron-LM's training_log prints them)
  // A resume whose schedule differs from the checkpoint's: this config's wins (override), the checkpoint's wins
  // (use_checkpoint), or neither is set and the run is refused, as Megatron's OptimizerParamScheduler does.
  bool lr_override_scheduler = false, lr_use_checkpoint_scheduler = false;
  DatasetConfig train_data, eval_data;
  bool do_eval = false;
  int64_t eval_step_interval = 100;  // -1: not by steps
  int64_t eval_epoch_interval = -1;  // -1: not by epochs
  ModelConfig model;
  // model_config.compute_dtype, parsed: the dtype of the matrix products (a run setting: the model's
  // keys are in `model`, how the run lays it out in model_layout(*this)).
  ComputeDtype compute_dtype = ComputeDtype::kFloat32;
  int64_t per_print_times = 1;
  CheckpointConfig checkpoint;
  // TensorBoard (runner/report/tensorboard.h): the directory rank 0 writes this run's event file to ("": none)
  // and the key that named it, for the log (runner/config/read_tensorboard.cpp decides between them).
  std::string tensorboard_dir, tensorboard_dir_from;
  GenerationConfig generation;
  ProfileConfig profile;
  bool operator==(const Settings&) const = default;
};

// The run's layout as the model sees it (models/layout.h), from parallel_config, recompute_config and
// compute_dtype: the one place it is derived.
inline ModelLayout model_layout(const Settings& s) {
  ModelLayout l;
  l.tp = static_cast<int>(s.parallel.model_parallel);
  l.sequence_parallel = s.parallel.use_seq_parallel;
  l.vocab_split = !s.parallel.vocab_emb_dp;
  l.ep = static_cast<int>(s.parallel.expert_parallel);
  l.cp = static_cast<int>(s.parallel.context_parallel);
  const std::string& algo = s.parallel.context_parallel_algo;
  l.cp_ring = algo == "colossalai_cp" || algo == "hybrid_cp";
  l.cp_ulysses = algo == "ulysses_cp" ? l.cp : algo == "hybrid_cp" ? static_cast<int>(s.parallel.ulysses_degree_in_cp) : 1;
  l.recompute = s.recompute ? RecomputePolicy::kFull : s.select_recompute ? RecomputePolicy::kSelective : RecomputePolicy::kNone;
  l.recompute_num_layers = s.recompute_num_layers;
  // A per-stage list: each stage's first n_s layers, over the resolved split (one stage: all layers).
  if (!s.recompute && !s.select_recompute_per_stage.empty()) {
    const std::vector<int64_t> layers = s.parallel.stage_layers.empty() ? std::vector<int64_t>{s.model.num_layers}
                                                                        : s.parallel.stage_layers;
    l.recompute_mask.assign(static_cast<size_t>(s.model.num_layers), false);
    int64_t begin = 0;
    for (size_t st = 0; st < layers.size() && st < s.select_recompute_per_stage.size(); ++st) {
      for (int64_t k = 0; k < std::min(layers[st], s.select_recompute_per_stage[st]); ++k)
        l.recompute_mask[static_cast<size_t>(begin + k)] = true;
      begin += layers[st];
    }
  }
  l.compute = s.compute_dtype;
  return l;
}

// Micro-batches of batch_size samples per step per data-parallel rank: micro_batch_num under
// pipeline parallelism, gradient_accumulation_steps without it.
inline int64_t micro_batches_per_step(const Settings& s) {
  return s.parallel.pipeline_stage > 1 ? s.parallel.micro_batch_num : s.gradient_accumulation_steps;
}
// Samples per step over all ranks: batch_size x data_parallel x micro_batches_per_step.
inline int64_t global_batch_size(const Settings& s) {
  return s.batch_size * s.parallel.data_parallel * micro_batches_per_step(s);
}

struct Config : Settings {
  YAML::Node resolved;                // the full resolved tree
  std::vector<std::string> warnings;  // keys that mean nothing here, and what was done instead
  std::set<std::string> consumed;     // key paths the loader read (list items by index)
};

// Reads `path`, applies `overrides` ("a.b.c=value", a YAML scalar or flow value), validates and
// resolves. Throws ConfigError listing every problem: those of the file name the file, those an
// override brings name the override (`--set a.b=c: ...`). An empty file is refused.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
Config load_config_string(const std::string& yaml, const std::vector<std::string>& overrides = {},
                          const std::string& source = "<string>");
std::string dump_resolved(const Config& cfg);

// Levenshtein distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace gf
