// What gridformer does with every key of the schema: one rule per leaf (runner/config/schema.h says what
// each KeyUse means). kBuilt and kChecked keys are read in config_read*.cpp; kCpu, kIgnored and
// kRefused keys are handled by config_tree::apply_rules from this table alone, so the loader never
// reads them. tests/runner/config_keys_test.cpp proves every rule against the loader. The sections
// every model shares are here; GPT2Config's model section is in runner/config/arch/gpt2.cpp,
// LlamaConfig's in runner/config/arch/llama.cpp, moe_config's in runner/config/keys_moe.cpp.
#include <algorithm>
#include <utility>

#include "runner/config/arch_section.h"
#include "runner/config/keys.h"
#include "runner/config/schema.h"

namespace gf {
namespace {

using enum KeyUse;
using config_keys::kGeneration;

// Shared reasons: kIgnored keys with the same reason share one warning.
const char* const kTokenizer =
    "the data is read already tokenized (MegatronDataset .bin/.idx, made by the preprocessor with "
    "preprocess_data's tokenizer types); the dataset's tokenizer is not used";
const char* const kProcessor =
    "the processor's other settings: predict and LAMBADA read processor.tokenizer's type (GPT2Tokenizer, LlamaTokenizer), "
    "vocab_file and merge_file";
const char* const kAutotune = "MindSpore's dataset autotuning has no counterpart here";
const char* const kStrategy = "MindSpore's parallel strategy files have no counterpart here (layouts are explicit)";
const char* const kInputColumns =
    "MegatronDataset samples are token ids (and a loss mask beside fine-tuning data): the labels are the ids shifted "
    "by one, and attention is causal (within documents with data_loader.reset_attention_mask)";

std::vector<KeyRule> dataset_rules(const std::string& ds) {
  auto at = [&](const char* key) { return ds + "." + key; };
  const bool train = ds == "train_dataset";
  std::vector<KeyRule> r = {
      {at("data_loader.type"), kBuilt, "train_data/eval_data.loader_type"},
      {at("data_loader.data_path"), kBuilt, "train_data/eval_data.data_path"},
      {at("data_loader.dataset_dir"), kIgnored, "MindDataset's directory: MegatronDataset and RandomTokens read data_path"},
      {at("data_loader.split"), kBuilt, "train_data/eval_data.split"},
      {at("data_loader.shuffle"), kBuilt, "train_data/eval_data.shuffle"},
      {at("data_loader.seed"), kBuilt, "train_data/eval_data.seed"},
      {at("data_loader.num_samples"), kBuilt, "train_data/eval_data.num_samples"},
      {at("tokenizer.type"), kIgnored, kTokenizer},
      {at("tokenizer.max_length"), kIgnored, kTokenizer},
      {at("tokenizer.vocab_file"), kIgnored, kTokenizer},
      {at("tokenizer.merge_file"), kIgnored, kTokenizer},
      {at("input_columns"), kIgnored, kInputColumns},
      {at("num_parallel_workers"), kCpu, ""},
      {at("python_multiprocessing"), kCpu, ""},
      {at("numa_enable"), kCpu, ""},
      {at("prefetch_size"), kCpu, ""},
      {at("drop_remainder"), kIgnored,
       train ? "the last partial global batch of an epoch is always dropped"
             : "evaluation reads eval_iters whole global batches"},
      {at("batch_size"), kChecked, "replaced by runner_config.batch_size (as MindFormers does); warned when it differs"},
      {at("repeat"), kIgnored, "repeating the data: use runner_config.epochs"},
  };
  if (!train) r.push_back({at("eval_iters"), kBuilt, "eval_data.eval_iters"});
  if (train)
    for (const char* k : {"reset_position_ids", "reset_attention_mask", "eod_mask_loss", "eod_token_id"})
      r.push_back({at((std::string("data_loader.") + k).c_str()), kBuilt,
                   "model.documents (Megatron's GPTDatasetConfig key; evaluation reads the same)"});
  r.push_back({ds + "_task.type", kChecked, "CausalLanguageModelDataset only"});
  r.push_back({ds + "_task.dataset_config", kChecked,
               "replaced by " + ds + ", as MindFormers replaces it; warned when it differs from " + ds});
  return r;
}

// The sections every model type shares: everything but model.model_config and model.arch.
std::vector<KeyRule> common_rules() {
  std::vector<KeyRule> r = {
      {"seed", kBuilt, "seed"},
      {"run_mode", kBuilt, "run_mode"},
      {"output_dir", kBuilt, "output_dir"},
      {"log_format", kBuilt, "log_format: the step lines' format (mindformers or megatron)"},
      {"load_checkpoint", kBuilt, "load_checkpoint (checked to exist)"},
      {"src_strategy_path_or_dir", kCpu, kStrategy},
      {"auto_trans_ckpt", kCpu, "MindSpore's distributed-checkpoint transformation has no counterpart here"},
      {"only_save_strategy", kCpu, kStrategy},
      {"resume_training", kBuilt, "resume_training (the trainer resumes from load_checkpoint or its own checkpoint/)"},
      {"use_parallel", kBuilt, "use_parallel (False with several ranks: warned at start)"},
      {"micro_batch_interleave_num", kRefused,
       "interleaving is not built; MindFormers trains batch_size x micro_batch_interleave_num samples per card: set "
       "runner_config.batch_size to that product and micro_batch_interleave_num: 1"},
      {"remote_save_url", kCpu, "ObsMonitor uploads to OBS on ModelArts only"},
      {"do_eval", kBuilt, "do_eval"},
      {"use_skip_data_by_global_norm", kBuilt,
       "skip_data.enabled (MindFormers' data skip: a step whose global gradient norm exceeds "
       "monitor_config.global_norm_spike_threshold makes no update; global_norm_spike_count_threshold such steps in a "
       "row stop the run with a checkpoint, status 5)"},
      {"monitor_config.monitor_on", kIgnored,
       "MindFormers' switch for its TrainingStateMonitor's extra records; the data skip reads the thresholds below either way"},
      {"monitor_config.check_for_global_norm", kIgnored,
       "MindFormers' fast fault recovery (exclusive with the data skip there) has no counterpart here"},
      {"monitor_config.global_norm_spike_threshold", kBuilt, "skip_data.threshold (> 0)"},
      {"monitor_config.global_norm_spike_count_threshold", kBuilt,
       "skip_data.count_threshold (>= 1; also ends a run whose running-statistic spikes are skipped that many times in a row)"},
      {"monitor_config.loss_spike_factor", kBuilt,
       "spikes.loss_factor (ours; >= 0, 0 off): a loss above this x the mean of the last spike_window steps' is a spike"},
      {"monitor_config.grad_norm_spike_factor", kBuilt,
       "spikes.grad_norm_factor (ours; >= 0, 0 off): the same for the global gradient norm"},
      {"monitor_config.spike_window", kBuilt, "spikes.window (ours; >= 1 steps without a spike)"},
      {"monitor_config.spike_action", kBuilt, "spikes.action (ours): warn | skip (no update, counted) | stop (with a checkpoint, status 5)"},
      {"resume_healthy_only", kBuilt,
       "resume_healthy_only (ours): resume without load_checkpoint takes the newest checkpoint recorded healthy (no "
       "spike since the one before) whose files pass their CRCs"},
      {"eval_step_interval", kBuilt, "eval_step_interval"},
      {"eval_epoch_interval", kBuilt, "eval_epoch_interval"},
      {"layer_scale", kRefused, "layer-wise learning-rate decay (layer_decay) is not built yet; set layer_scale: False"},
      {"layer_decay", kIgnored, "used only with layer_scale: True (not built)"},
      {"lr_scale", kRefused,
       "scaling the learning rate by the device count is not built; set lr_schedule.learning_rate to learning_rate x "
       "ranks x batch_size / lr_scale_factor yourself, and lr_scale: False"},
      {"lr_scale_factor", kIgnored, "used only with lr_scale: True (not built)"},
      {"auto_tune", kCpu, kAutotune},
      {"filepath_prefix", kCpu, kAutotune},
      {"autotune_per_step", kCpu, kAutotune},
      {"profile", kBuilt, "profile.enabled (a Chrome trace of the profiled steps under <output_dir>/profile)"},
      {"profile_start_step", kBuilt, "profile.start_step"},
      {"profile_stop_step", kBuilt, "profile.stop_step"},
      {"init_start_profile", kBuilt, "profile.init_start (profiling from step 1)"},
      {"profile_communication", kBuilt, "profile.communication (collectives and messages in the trace)"},
      {"profile_memory", kBuilt, "profile.memory (RSS and planned activation counters in the trace)"},
      {"profile_ops", kBuilt, "profile.ops (ours: a span per op, GEMMs, attention, norms, elementwise; bench/step_breakdown.py)"},
      {"context.mode", kCpu, ""},
      {"context.device_target", kCpu, ""},
      {"context.device_id", kCpu, ""},
      {"context.enable_graph_kernel", kCpu, ""},
      {"context.graph_kernel_flags", kCpu, ""},
      {"context.max_call_depth", kCpu, ""},
      {"context.max_device_memory", kCpu, ""},
      {"context.save_graphs", kCpu, ""},
      {"context.save_graphs_path", kCpu, ""},
      {"context.runtime_num_threads", kCpu,
       "MindSpore's runtime threads; here OMP_NUM_THREADS sets them (default: the host's cores shared among its ranks)"},
      {"context.jit_config.jit_level", kCpu, "MindSpore's graph compiler level"},
      {"context.memory_optimize_level", kCpu, ""},
      {"context.mempool_block_size", kCpu, ""},
      {"context.ascend_config.precision_mode", kCpu, ""},
      {"runner_config.epochs", kBuilt, "epochs"},
      {"runner_config.batch_size", kBuilt, "batch_size"},
      {"runner_config.sink_mode", kCpu, ""},
      {"runner_config.sink_size", kCpu, ""},
      {"runner_config.train_steps", kBuilt, "train_steps"},
      {"runner_config.peak_tflops", kBuilt, "peak_tflops"},
      {"runner_config.exit_interval", kBuilt,
       "exit_interval (Megatron's --exit-interval; ours, MindFormers has none): stop after the step divisible by it, "
       "with a checkpoint saved (CheckpointMonitor), status 0; 0: never"},
      {"runner_config.exit_duration_in_mins", kBuilt,
       "exit_duration_in_mins (Megatron's --exit-duration-in-mins): stop after the first step that ends this many minutes "
       "after training started (the slowest rank's clock), with a checkpoint saved, status 0; 0: never"},
      {"runner_config.gradient_accumulation_steps", kBuilt,
       "gradient_accumulation_steps (>= 1): at pipeline_stage 1 a step runs that many micro-batches of batch_size and "
       "accumulates their gradients (global batch = batch_size x data_parallel x gradient_accumulation_steps); with "
       "pipeline_stage > 1 it must be 1 (micro_batch_num accumulates there; the layout check)"},
      {"runner_wrapper.type", kChecked, "MFTrainOneStepCell only"},
      {"runner_wrapper.scale_sense", kBuilt, "loss_scale"},
      {"runner_wrapper.use_clip_grad", kBuilt, "use_clip_grad"},
      {"runner_wrapper.max_grad_norm", kBuilt, "max_grad_norm"},
      {"runner_wrapper.enable_check_overflow", kIgnored,
       "MindFormers r1.1-r1.3 ignores it too (MFTrainOneStepCell takes it in **kwargs); overflow is checked when "
       "runner_wrapper.scale_sense is a DynamicLossScaleUpdateCell"},
      {"parallel.parallel_mode", kCpu, ""},
      {"parallel.gradients_mean", kChecked,
       "warned when False in data-parallel mode (parallel_mode 0), where MindSpore would sum the gradients"},
      {"parallel.loss_repeated_mean", kIgnored, "the loss is computed once per global batch, so no repeats are averaged"},
      {"parallel.full_batch", kCpu, ""},
      {"parallel.search_mode", kCpu, ""},
      {"parallel.enable_parallel_optimizer", kBuilt, "parallel.zero_stage 1 (True; with parallel.zero_stage 2 or 3 it may stay True)"},
      {"parallel.zero_stage", kBuilt,
       "ours (DeepSpeed's stages): 0 nothing sharded, 1 the AdamW moments, 2 also the gradients (reduce-scattered layer "
       "by layer during the last micro-batch's backward), 3 also the weights (each layer's gathered before its forward "
       "and its backward, the next one prefetched, and freed after); -1 (default): 1 when enable_parallel_optimizer"},
      {"parallel.zero_prefetch", kBuilt,
       "ours: ZeRO-3 gathers the next block's weights while a block computes (true, default) or each block's only when "
       "it runs (false; DeepSpeed's stage3_prefetch_bucket_size 0). Without spare cores or an MPI progress thread a "
       "gather advances only inside MPI calls, and bench/zero.py measured false faster on 2 busy cores"},
      {"parallel.collectives", kBuilt,
       "parallel.mpi_collectives (ring: our rings, bitwise-reproducible; mpi: MPI_Ireduce_scatter / MPI_Iallgatherv, "
       "the cluster's MPI algorithms)"},
      {"parallel.hang_timeout", kBuilt,
       "parallel.hang_timeout (seconds, default 300; 0: none): a wait on a group without progress for this long makes every "
       "rank report its last calls and one line name the rank(s) that did not arrive and at which call; exit status 6 "
       "(torch's init_process_group timeout, NCCL's watchdog)"},
      {"parallel.strategy_ckpt_save_file", kCpu, kStrategy},
      {"parallel.enable_alltoall", kCpu, ""},
      {"parallel.strategy_ckpt_config.save_file", kCpu, kStrategy},
      {"parallel.strategy_ckpt_config.only_trainable_params", kCpu, kStrategy},
      {"parallel.parallel_optimizer_config.gradient_accumulation_shard", kIgnored,
       "the accumulated gradient (gradient_accumulation_steps, or micro_batch_num under pipeline_stage > 1) is held whole "
       "until the last micro-batch, whose backward reduce-scatters it (zero_stage 2 and 3) or all-reduces it: MindSpore's "
       "False; True (a reduce-scatter per micro-batch) is not built"},
      {"parallel.parallel_optimizer_config.parallel_optimizer_threshold", kIgnored,
       "ZeRO-1 here shards the flat parameter arena evenly over data parallel, small parameters included"},
      {"parallel.parallel_optimizer_config.optimizer_weight_shard_size", kBuilt,
       "parallel.shard_degree (-1: the whole data-parallel group; N: groups of N, replicated across them; the same as "
       "parallel_config.hybrid_shard_degree)"},
      {"parallel.pipeline_config.pipeline_interleave", kBuilt,
       "parallel.pipeline_chunks, with model_config.pp_interleave_num: True gives pp_interleave_num model chunks "
       "(virtual stages) per stage under pipeline_stage > 1; warned where it means nothing (pipeline_stage 1, "
       "pp_interleave_num 1)"},
      {"parallel.pipeline_config.pipeline_scheduler", kBuilt,
       "parallel.pipeline_scheduler, case-insensitive: 1f1b (default; with pipeline chunks > 1 it becomes interleaved), "
       "gpipe, interleaved (needs pipeline_interleave: True and pp_interleave_num > 1, and micro_batch_num a multiple "
       "of pipeline_stage), zero_bubble_h1 (zbh1, zb-h1, zero_bubble; not with recompute). MindSpore's seqpipe, seqvpp, "
       "seqsmartvpp and zero_bubble_v are refused; warned at pipeline_stage 1 (nothing to schedule); file: the lists of "
       "pipeline_schedule_file"},
      {"parallel.pipeline_config.pipeline_schedule_file", kBuilt,
       "parallel.pipeline_file (ours): a pipeline schedule in torch.distributed.pipelining's CSV form, one row of "
       "actions per stage (parallel/pipeline/schedule_file.h); read, placed and simulated before any work (deadlock, "
       "unmatched messages, order, every forward and backward once, live micro-batches within "
       "pipeline_schedule_max_live); pipeline_scheduler becomes file; warned at pipeline_stage 1"},
      {"parallel.pipeline_config.pipeline_schedule_max_live", kBuilt,
       "parallel.pipeline_schedule_max_live (ours, >= 0): with pipeline_schedule_file, the most micro-batch "
       "activations a stage may hold at once (summed over its chunks); 0: what the built-in schedule of the shape "
       "holds at its fullest stage (1F1B's min(pipeline_stage, micro_batch_num), interleaved's with chunks)"},
      {"parallel.auto_pipeline", kRefused,
       "MindSpore's automatic search for pipeline stages is not built; set parallel_config.pipeline_stage (and "
       "model.model_config.offset for an uneven split) yourself, and auto_pipeline: False"},
      {"parallel_config.data_parallel", kBuilt, "parallel.data_parallel"},
      {"parallel_config.model_parallel", kBuilt, "parallel.model_parallel"},
      {"parallel_config.pipeline_stage", kBuilt,
       "parallel.pipeline_stage, and parallel.stage_layers (the layers of each stage; the layout check: at most "
       "num_layers stages, micro_batch_num >= pipeline_stage)"},
      {"parallel_config.expert_parallel", kBuilt,
       "parallel.expert_parallel (the layout check: it must divide data_parallel and moe_config.expert_num)"},
      {"parallel_config.use_seq_parallel", kBuilt, "parallel.use_seq_parallel"},
      {"parallel_config.context_parallel", kBuilt,
       "parallel.context_parallel: each sample's seq_length positions split over that many ranks (ranks = data x model x "
       "context x pipeline), the attention core as context_parallel_algo says; MoE layers dropless only (a capacity is "
       "refused)"},
      {"parallel_config.context_parallel_algo", kBuilt,
       "colossalai_cp (MindFormers' default): ring attention, the sequence in 2 x context_parallel chunks, rank c holding "
       "chunks c and 2 cp - 1 - c (causal load balance); ulysses_cp: contiguous chunks, all-to-all to whole heads "
       "(num_heads and the key/value heads divisible by model_parallel x context_parallel); hybrid_cp (MindSpeed's "
       "USP): Ulysses groups of ulysses_degree_in_cp neighbouring context ranks, each all-to-all to 1 / U of the heads, and "
       "ring attention across the groups on the ring's chunks (heads divisible by model_parallel x U, seq_length by "
       "2 x context_parallel); U = context_parallel is ulysses_cp, U = 1 colossalai_cp"},
      {"parallel_config.ulysses_degree_in_cp", kBuilt,
       "hybrid_cp's Ulysses degree U: must divide context_parallel; the ring spans context_parallel / U groups"},
      {"parallel_config.micro_batch_num", kBuilt,
       "parallel.micro_batch_num: micro-batches of batch_size per step per data-parallel rank under pipeline_stage > 1 "
       "(global batch = batch_size x data_parallel x micro_batch_num); warned and ignored at pipeline_stage 1, as "
       "MindFormers ignores it"},
      {"parallel_config.vocab_emb_dp", kBuilt, "parallel.vocab_emb_dp"},
      {"parallel_config.gradient_aggregation_group", kBuilt, "parallel.gradient_aggregation_group"},
      {"parallel_config.optimizer_shard", kBuilt, "parallel.zero_stage 1 (True)"},
      {"parallel_config.hybrid_shard_degree", kBuilt,
       "parallel.shard_degree (SMP's hybrid sharding): the sharded state over groups of N consecutive data-parallel "
       "ranks, replicated across the groups (gradients reduce-scattered in the group, then all-reduced across the "
       "replicas); N divides data_parallel x context_parallel, and with experts their data-parallel group "
       "(N x expert_parallel <= data_parallel x context_parallel); 0: the whole group"},
      {"parallel_config.mem_coeff", kCpu, "a coefficient of MindSpore's strategy search"},
      {"recompute_config.recompute", kBuilt, "recompute"},
      {"recompute_config.select_recompute", kBuilt, "select_recompute (True, False, MindFormers' list: layers to recompute per pipeline stage, the first "
       "n of each stage's, or its dict {operation pattern: True | list}: patterns on the attention core's operations "
       "(attention.softmax, batch_matmul_q_k, batch_matmul, flash_attention) are our selective recompute, others refused)"},
      {"recompute_config.recompute_num_layers", kBuilt, "recompute_num_layers"},
      {"recompute_config.parallel_optimizer_comm_recompute", kCpu, ""},
      {"recompute_config.mp_comm_recompute", kCpu, ""},
      {"recompute_config.recompute_slice_activation", kCpu, ""},
      {"recompute_config.select_comm_recompute", kCpu, ""},
      {"trainer.type", kChecked, "CausalLanguageModelingTrainer only"},
      {"trainer.model_name", kBuilt, "model_name"},
      {"lr_schedule.type", kBuilt, "lr.type"},
      {"lr_schedule.learning_rate", kBuilt, "lr.learning_rate"},
      {"lr_schedule.lr_end", kBuilt, "lr.lr_end"},
      {"lr_schedule.warmup_steps", kBuilt, "lr.warmup_steps"},
      {"lr_schedule.warmup_ratio", kBuilt, "lr.warmup_ratio"},
      {"lr_schedule.total_steps", kBuilt, "lr.total_steps"},
      {"lr_schedule.power", kBuilt, "lr.power"},
      {"lr_schedule.override_opt_param_scheduler", kBuilt, "lr_override_scheduler"},
      {"lr_schedule.from_steps_done", kBuilt, "lr.from_steps_done"},
      {"lr_schedule.use_checkpoint_opt_param_scheduler", kBuilt, "lr_use_checkpoint_scheduler"},
      {"optimizer.type", kBuilt, "optimizer_type"},
      {"optimizer.beta1", kBuilt, "adamw.beta1"},
      {"optimizer.beta2", kBuilt, "adamw.beta2"},
      {"optimizer.betas", kBuilt, "adamw.beta1, adamw.beta2"},
      {"optimizer.eps", kBuilt, "adamw.eps"},
      {"optimizer.weight_decay", kBuilt, "adamw.weight_decay"},
      {"optimizer.moment_dtype", kBuilt,
       "adamw.moment_dtype (ours; Megatron's --exp-avg-dtype/--exp-avg-sq-dtype): float32 | bfloat16, the storage of "
       "AdamW's two moments; bfloat16 halves their bytes (2 per moment element instead of 4), the update computed in "
       "float32 from them; checkpoints hold float32 moments either way"},
      {"optimizer.learning_rate", kBuilt, "lr (constant) when the file has no lr_schedule; else warned if it differs"},
      {"callbacks.*.type", kBuilt, "per_print_times, checkpoint, tensorboard_dir (MFLossMonitor, CheckpointMonitor, "
                                   "SummaryMonitor, ObsMonitor: a no-op off ModelArts as in MindFormers; others warned)"},
      {"callbacks.*.per_print_times", kBuilt, "per_print_times"},
      {"callbacks.*.summary_dir", kBuilt, "tensorboard_dir (SummaryMonitor; runner/config/read_tensorboard.cpp)"},
      {"tensorboard_dir", kBuilt, "tensorboard_dir (Megatron's; runner/config/read_tensorboard.cpp)"},
      {"tensorboard.tensorboard_dir", kBuilt, "tensorboard_dir, + /rank_0 as MindFormers (runner/config/read_tensorboard.cpp)"},
      {"tensorboard.tensorboard_queue_size", kChecked, "warned when not 10: events are written at each line, not queued"},
      {"tensorboard.log_loss_scale_to_tensorboard", kChecked, "warned when True: every scalar is written anyway"},
      {"tensorboard.log_timers_to_tensorboard", kChecked, "warned when True: every scalar is written anyway"},
      {"tensorboard.log_expert_load_to_tensorboard", kChecked, "warned when True: every scalar is written anyway"},
      {"eval_callbacks.*.type", kChecked, "ObsMonitor (a no-op off ModelArts, as in MindFormers); others warned"},
      {"metric.type", kChecked, "PerplexityMetric (evaluation reports loss and perplexity); others warned"},
      {"metric.eval_type", kIgnored, "classification metrics are not built"},
      {"processor.type", kIgnored, kProcessor},
      {"processor.return_tensors", kIgnored, kProcessor},
  };
  r.push_back({"callbacks.*.megatron_format", kBuilt,
               "ours: each checkpoint also in Megatron-LM's layout, with its optimizer state (runner/train/megatron_state.cpp)"});
  r.push_back({"callbacks.*.megatron_transformer_impl", kBuilt,
               "ours: Megatron-core's norm names in that layout (--transformer-impl transformer_engine or local)"});
  r.push_back({"callbacks.*.megatron_moe_grouped_gemm", kBuilt,
               "ours: experts written as GroupedMLP's weight1 / weight2 in that layout (--moe-grouped-gemm)"});
  r.push_back({"callbacks.*.megatron_ddp_bucket_size", kBuilt,
               "ours: the grad buckets of the distributed optimizer's distrib_optim.pt in that layout (0: one)"});
  r.push_back({"callbacks.*.megatron_use_mcore_models", kBuilt,
               "ours: GPT-2 written in Megatron-core's layout too (--use-mcore-models)"});
  for (const char* k : {"prefix", "save_checkpoint_steps", "keep_checkpoint_max", "async_save", "directory"})
    r.push_back({std::string("callbacks.*.") + k, kBuilt, "checkpoint (CheckpointMonitor; runner/train/checkpointing.cpp)"});
  for (const char* k : {"integrated_save", "save_network_params", "save_trainable_params"})
    r.push_back({std::string("callbacks.*.") + k, kChecked,
                 "CheckpointMonitor: warned, it changes nothing (the boxes load under any layout)"});
  for (const char* k : {"collect_freq", "collect_specified_data", "keep_default_action", "custom_lineage_data",
                        "collect_tensor_freq", "max_file_size", "export_options"})
    r.push_back({std::string("callbacks.*.") + k, kChecked, "SummaryMonitor: warned, it means nothing here"});
  for (const char* k : {"unk_token", "bos_token", "eos_token", "pad_token", "add_bos_token", "add_eos_token"})
    r.push_back({std::string("processor.tokenizer.") + k, kIgnored, kProcessor});
  for (const char* k : {"type", "vocab_file", "merge_file"})
    r.push_back({std::string("processor.tokenizer.") + k, kBuilt, "generation (the GPT-2 BPE files predict encodes and decodes with)"});
  for (const char* ds : {"train_dataset", "eval_dataset"})
    for (KeyRule& k : dataset_rules(ds)) r.push_back(std::move(k));
  for (KeyRule& k : config_keys::moe_rules()) r.push_back(std::move(k));
  return r;
}

}  // namespace


std::vector<KeyRule> key_rules_of(const std::string& model_config_type) {
  std::vector<KeyRule> r = common_rules();
  // The type's model section, and the shared keys whose rule it changes (a rule with the path of a shared one).
  for (KeyRule& k : arch_section_or_base(model_config_type).model_rules()) {
    auto same = std::find_if(r.begin(), r.end(), [&](const KeyRule& c) { return c.path == k.path; });
    if (same != r.end()) *same = std::move(k);
    else r.push_back(std::move(k));
  }
  return r;
}

std::vector<std::pair<std::string, std::string>> foreign_keys_of(const std::string& model_config_type) {
  const ArchConfigSection& s = arch_section_or_base(model_config_type);
  return s.foreign_keys ? s.foreign_keys() : std::vector<std::pair<std::string, std::string>>{};
}

const std::vector<KeyRule>& key_rules() { return config_schema(arch_sections().front().config_type).rules(); }

const KeyRule* rule_for(const std::string& path) { return config_schema(arch_sections().front().config_type).rule_for(path); }

}  // namespace gf
