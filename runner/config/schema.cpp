// The schema of the YAML config: every known key with its default value and type. The resolved
// config is this tree overlaid with the user's file and the --set overrides; `gridformer config`
// prints it. A key whose default is null (~) takes any value (the loader checks it). Lists take
// their item keys from kItemTemplates. What each key does: runner/config/keys.cpp (runner/config/arch/*.cpp,
// runner/config/keys_moe.cpp).
// kConfigDefaults is the schema of a GPT2Config file; a LlamaConfig file's has its section's
// `model` section instead (and its trainer.model_name: runner/config/arch/llama.cpp).
#include "runner/config/schema.h"

#include <map>
#include <memory>

#include "runner/config/arch_section.h"

#include <algorithm>

namespace gf {

const char* const kConfigDefaults = R"YAML(
seed: 0
run_mode: train
output_dir: ./output
log_format: mindformers  # ours: the step lines as MindFormers' MFLossMonitor prints them, or megatron (Megatron-LM's training_log)
load_checkpoint: ""
src_strategy_path_or_dir: ""
auto_trans_ckpt: false
only_save_strategy: false
resume_training: false
use_parallel: true  # MindFormers writes it; the ranks mpirun starts train together either way
micro_batch_interleave_num: 1
remote_save_url: ""
do_eval: false
use_skip_data_by_global_norm: false
monitor_config:
  monitor_on: false
  check_for_global_norm: false
  global_norm_spike_threshold: 3.0
  global_norm_spike_count_threshold: 10
  loss_spike_factor: 0.0  # ours: the running-statistic spike check (0: off)
  grad_norm_spike_factor: 0.0
  spike_window: 100
  spike_action: warn
resume_healthy_only: true  # ours
eval_step_interval: 100
eval_epoch_interval: -1
layer_scale: false
layer_decay: 0.65
lr_scale: false
lr_scale_factor: 256
auto_tune: false
filepath_prefix: ./autotune
autotune_per_step: 10
profile: false
profile_start_step: 1
profile_stop_step: 10
init_start_profile: false
profile_communication: false
profile_memory: false
profile_ops: false
context:
  mode: 0
  device_target: CPU
  device_id: 0
  enable_graph_kernel: false
  graph_kernel_flags: ""
  max_call_depth: 10000
  max_device_memory: ""
  save_graphs: false
  save_graphs_path: ./graph
  runtime_num_threads: 0
  jit_config:
    jit_level: ""
  memory_optimize_level: O0
  mempool_block_size: 1GB
  ascend_config:
    precision_mode: ""
runner_config:
  epochs: 1
  batch_size: 1
  sink_mode: false
  sink_size: 1
  train_steps: -1
  peak_tflops: 0.0
  gradient_accumulation_steps: 1
  exit_interval: 0
  exit_duration_in_mins: 0.0
runner_wrapper:
  type: MFTrainOneStepCell
  scale_sense: 1.0
  use_clip_grad: false
  max_grad_norm: 1.0
  enable_check_overflow: false
parallel:
  parallel_mode: 0
  gradients_mean: true
  loss_repeated_mean: true
  full_batch: false
  search_mode: sharding_propagation
  enable_parallel_optimizer: false
  zero_stage: -1   # ours: 0 none, 1 AdamW moments, 2 + gradients, 3 + weights sharded over data parallel; -1: 1 when enable_parallel_optimizer
  zero_prefetch: true   # ours: ZeRO-3 gathers the next block's weights while a block computes (false: each when needed)
  collectives: ring   # ours: ring (bitwise-reproducible sums, exact byte counts) or mpi (MPI's own non-blocking collectives)
  hang_timeout: 300.0   # ours: seconds a wait may go without progress before the hang report and exit status 6; 0: never
  strategy_ckpt_save_file: ./ckpt_strategy.ckpt
  enable_alltoall: false
  strategy_ckpt_config:
    save_file: ./ckpt_strategy.ckpt
    only_trainable_params: false
  parallel_optimizer_config:
    gradient_accumulation_shard: false
    parallel_optimizer_threshold: 64
    optimizer_weight_shard_size: -1
  pipeline_config:
    pipeline_interleave: false
    pipeline_scheduler: 1f1b
    pipeline_schedule_file: ""   # ours: a schedule in torch.distributed.pipelining's CSV form (docs/distributed.md); pipeline_scheduler becomes file
    pipeline_schedule_max_live: 0   # ours: with a schedule file, the most micro-batch activations a stage may hold; 0: the built-in schedule's
  auto_pipeline: false
parallel_config:
  data_parallel: 1
  model_parallel: 1
  pipeline_stage: 1
  expert_parallel: 1
  context_parallel: 1
  context_parallel_algo: colossalai_cp   # MindFormers' default: ring attention; or ulysses_cp, hybrid_cp
  ulysses_degree_in_cp: 1
  use_seq_parallel: false
  micro_batch_num: 1
  vocab_emb_dp: true
  gradient_aggregation_group: 4
  optimizer_shard: false
  hybrid_shard_degree: 0   # SMP's: the shard group's size inside data parallel (0: all of it); = optimizer_weight_shard_size
  mem_coeff: 0.1
moe_config:  # MindFormers' MoEConfig (r0.8-r1.3) with its defaults, r0.8's router jitter, and three keys of ours
  expert_num: 1              # 1: dense; > 1: MoE layers of expert_num experts (a LlamaConfig's: Mixtral-style)
  num_experts_chosen: 1      # top-k
  capacity_factor: 1.1       # per sequence, ceil(capacity_factor x seq_length x k / expert_num) tokens an expert; <= 0: dropless
  aux_loss_factor: 0.05      # the load-balancing loss's weight
  z_loss_factor: 0.0         # the router z-loss's weight
  norm_topk_prob: true       # the k chosen probabilities renormalised to sum 1
  routing_policy: TopkRouterV1  # or TopkRouterV2: the same top-k routing here
  router_dense_type: float32    # or bfloat16
  enable_sdrop: false
  use_fused_ops_topkrouter: false
  group_wise_a2a: false
  expert_group_size: ~
  comp_comm_parallel: false
  comp_comm_parallel_degree: 2
  save_token_distribution: false
  max_router_load: 131072
  cur_layer: 0
  moe_module_name: ""
  noisy_policy: ~
  noisy_epsilon: ~
  shared_expert_num: 0
  use_shared_expert_gating: false
  routed_scaling_factor: 1.0
  topk_method: greedy
  topk_group: ~
  n_group: ~
  first_k_dense_replace: ~   # MindFormers' default True; DeepSeek files give a layer count
  moe_intermediate_size: 1407
  aux_loss_types: []         # MindFormers' None; its files also write []
  aux_loss_factors: []
  enable_cold_hot_expert: false
  update_step: 10000
  hot_expert_num: 0
  cold_token_percent: 1.0
  token_drop_policy: position  # ours (Megatron's moe_token_drop_policy): position or probs
  moe_layer_freq: 1            # ours (Megatron's --moe-layer-freq N): layer i is MoE when i % N == 0
  token_dispatcher: alltoall   # ours (Megatron's moe_token_dispatcher_type): alltoall or allgather
  moe_shared_expert_intermediate_size: 0  # ours (Megatron's --moe-shared-expert-intermediate-size, Qwen2-MoE's shared_expert_intermediate_size): a shared expert's width; 0: none
  moe_ffn_hidden_size: ~       # ours (Megatron's --moe-ffn-hidden-size, Hugging Face's moe_intermediate_size): each expert's FFN width; None: the model's
  decoder_sparse_step: 0       # ours (Hugging Face's Qwen-MoE): > 0: layer i is MoE when (i + 1) % N == 0, instead of moe_layer_freq
  mlp_only_layers: []          # ours (Hugging Face's Qwen-MoE): layers that stay dense
  moe_router_score_function: softmax  # ours (Megatron's): softmax over the experts, or sigmoid of each (DeepSeek-V3)
  moe_router_num_groups: 1     # ours (Megatron's; DeepSeek's n_group): the experts in this many equal groups
  moe_router_group_topk: 1     # ours (Megatron's; DeepSeek's topk_group): the groups open to each token
  moe_router_group_score_topk: ~  # ours: a group's score is the sum of its best N scores (Hugging Face's DeepSeek-V2 1, V3 2); None: Megatron's num_experts_chosen / moe_router_group_topk
  moe_router_topk_scaling_factor: 1.0  # ours (Megatron's; DeepSeek's routed_scaling_factor): the routed experts' weights times this
  moe_router_enable_expert_bias: false  # ours (Megatron's): DeepSeek-V3's aux-loss-free balancing bias (e_score_correction_bias), added to the scores for the choice alone
  moe_router_bias_update_rate: 1.0e-3  # ours (Megatron's): after each step the bias moves by this x sign(mean load - the expert's load)
recompute_config:
  recompute: false
  select_recompute: false
  recompute_num_layers: -1
  parallel_optimizer_comm_recompute: false
  mp_comm_recompute: true
  recompute_slice_activation: false
  select_comm_recompute: false
trainer:
  type: CausalLanguageModelingTrainer
  model_name: gpt2
train_dataset:
  data_loader:
    type: MegatronDataset
    data_path: ~
    dataset_dir: ""
    split: "949,50,1"
    shuffle: true
    seed: 1234
    num_samples: -1
    reset_position_ids: false    # Megatron's --reset-position-ids: positions restart after each end-of-document token
    reset_attention_mask: false  # Megatron's --reset-attention-mask: tokens attend within their own document
    eod_mask_loss: false         # Megatron's --eod-mask-loss: no loss for the prediction made at an end of document
    eod_token_id: -1             # the end-of-document id of those three (-1: model_config.eos_token_id)
  tokenizer:
    type: GPT2Tokenizer
    max_length: -1
    vocab_file: ""
    merge_file: ""
  input_columns: [input_ids]
  num_parallel_workers: 8
  python_multiprocessing: false
  drop_remainder: true
  batch_size: -1
  repeat: 1
  numa_enable: false
  prefetch_size: 1
train_dataset_task:
  type: CausalLanguageModelDataset
  dataset_config: ~
eval_dataset:
  data_loader:
    type: MegatronDataset
    data_path: ~
    dataset_dir: ""
    split: "949,50,1"
    shuffle: false
    seed: 1234
    num_samples: -1
  tokenizer:
    type: GPT2Tokenizer
    max_length: -1
    vocab_file: ""
    merge_file: ""
  input_columns: [input_ids]
  num_parallel_workers: 8
  python_multiprocessing: false
  drop_remainder: false
  batch_size: -1
  repeat: 1
  numa_enable: false
  prefetch_size: 1
  eval_iters: 10
eval_dataset_task:
  type: CausalLanguageModelDataset
  dataset_config: ~
model:
  model_config:
    type: GPT2Config
    seq_length: 1024
    vocab_size: 50257
    hidden_size: 768
    num_layers: 12
    num_heads: 12
    expand_ratio: 4
    hidden_act: gelu
    hidden_dropout_rate: 0.1
    attention_dropout_rate: 0.1
    max_position_embeddings: -1  # -1: seq_length (MindFormers sizes the position table by it)
    initializer_range: 0.02
    layernorm_epsilon: 1.0e-5
    param_init_type: float32
    layernorm_compute_type: float32
    softmax_compute_type: float32
    compute_dtype: float32
    use_flash_attention: auto  # True, False, or auto: fused from seq_length 128 on (bench/README.md)
    sliding_window: ~          # banded attention: each token sees itself and the sliding_window - 1 tokens before it (Hugging Face's, Mistral's); None: the whole prefix
    pre_tokens: ~              # Ascend's flash attention: the tokens before a query that it sees (sliding_window = pre_tokens + 1); sliding_window wins when both are given
    next_tokens: ~             # Ascend's: the tokens after a query that it sees; the model is causal: 0 (a larger value is warned and runs causal)
    position_embedding_type: learned_absolute  # or rope (Megatron's --position-embedding-type)
    rope_theta: 10000.0        # RoPE's base, with position_embedding_type: rope
    add_bias_linear: true      # False: no biases in the linear layers (Megatron's --disable-bias-linear)
    offset: 0                  # layers moved between pipeline stages: an int, a list per stage, or [chunk][stage] lists
    pp_interleave_num: 1       # model chunks per stage with parallel.pipeline_config.pipeline_interleave (LlamaConfig's key)
    checkpoint_name_or_path: ""
    eos_token_id: 50256
    bos_token_id: 50256
    pad_token_id: 50256
    repetition_penalty: 1.0
    max_decode_length: 1024
    top_k: 5
    top_p: 1.0
    do_sample: false
    use_past: false
    batch_size: 1
    use_prompt_flash_attention: false
    num_labels: 2
    pet_config: ~
  arch:
    type: GPT2LMHeadModel
lr_schedule:
  type: polynomial
  learning_rate: 1.0e-4
  lr_end: 0.0
  warmup_steps: 0
  warmup_ratio: 0.0
  total_steps: -1
  power: 1.0
  # A resumed run whose schedule differs from the checkpoint's (learning_rate, lr_end, warm-up, total, type, power)
  # is refused unless one of these says which wins (Megatron's flags of the same names):
  override_opt_param_scheduler: false        # this config's schedule (--override-opt_param-scheduler)
  use_checkpoint_opt_param_scheduler: false  # the checkpoint's schedule (--use-checkpoint-opt_param-scheduler)
  from_steps_done: false  # ours: step s runs at the rate for s - 1 steps done, as Megatron's scheduler (0 at its first warm-up step)
optimizer:
  type: AdamWeightDecay
  beta1: 0.9
  beta2: 0.999
  eps: 1.0e-8
  weight_decay: 0.0
  moment_dtype: float32  # ours: float32 | bfloat16, how AdamW stores its two moments (Megatron's --exp-avg-dtype)
  betas: ~          # [beta1, beta2] (MindFormers' AdamW)
  learning_rate: ~  # used when the file has no lr_schedule (as in MindFormers)
callbacks:
  - type: MFLossMonitor
    per_print_times: 1
eval_callbacks: []
tensorboard_dir: ""  # Megatron's --tensorboard-dir (gridformer train --tensorboard-dir)
tensorboard:         # MindFormers r1.5 on
  tensorboard_dir: ""
  tensorboard_queue_size: 10
  log_loss_scale_to_tensorboard: false
  log_timers_to_tensorboard: false
  log_expert_load_to_tensorboard: false
metric:
  type: PerplexityMetric
  eval_type: ""
processor:
  type: GPT2Processor
  return_tensors: ms
  tokenizer:
    type: GPT2Tokenizer
    unk_token: "<|endoftext|>"
    bos_token: "<|endoftext|>"
    eos_token: "<|endoftext|>"
    pad_token: "<|endoftext|>"
    vocab_file: ""
    merge_file: ""
    add_bos_token: ~
    add_eos_token: ~
)YAML";

// Keys of list items, by the list's path.
const char* const kItemTemplates = R"YAML(
callbacks:
  type: MFLossMonitor
  per_print_times: 1
  prefix: gridformer
  save_checkpoint_steps: 1
  keep_checkpoint_max: 5
  integrated_save: true
  save_network_params: true
  save_trainable_params: false
  async_save: false
  directory: ""
  megatron_format: false
  megatron_transformer_impl: transformer_engine
  megatron_moe_grouped_gemm: false
  megatron_use_mcore_models: false
  megatron_ddp_bucket_size: 0
  summary_dir: ~  # SummaryMonitor's (MindSpore's SummaryCollector's arguments)
  collect_freq: 10
  collect_specified_data: ~
  keep_default_action: true
  custom_lineage_data: ~
  collect_tensor_freq: ~
  max_file_size: ~
  export_options: ~
eval_callbacks:
  type: ObsMonitor
)YAML";

// Paths whose value may have another shape than their default (a scalar for a map, a list for a
// boolean): the loader checks them. model_config.offset may be a list (layers per pipeline stage) or a
// list of lists ([chunk][stage]), LlamaConfig's scaling_factor a mapping (YaRN's, Llama 3's).
const std::vector<std::string>& polymorphic_keys() {
  static const std::vector<std::string> keys = {"runner_wrapper.scale_sense", "recompute_config.select_recompute",
                                                "recompute_config.select_comm_recompute", "model.model_config.offset",
                                                "model.model_config.scaling_factor"};
  return keys;
}

namespace {

std::vector<std::string> split(const std::string& path) {
  std::vector<std::string> parts;
  for (size_t b = 0;;) {
    const size_t e = path.find('.', b);
    parts.push_back(path.substr(b, e - b));
    if (e == std::string::npos) return parts;
    b = e + 1;
  }
}

// The shared schema with the type's own `model` section and trainer.model_name in place of the base's.
YAML::Node defaults_of(const ArchConfigSection& section) {
  YAML::Node d = YAML::Load(kConfigDefaults);
  if (section.model_defaults == nullptr) return d;
  const YAML::Node own = YAML::Load(section.model_defaults);
  d["model"] = YAML::Clone(own["model"]);
  d["trainer"]["model_name"] = YAML::Clone(own["trainer"]["model_name"]);
  return d;
}

}  // namespace

ConfigSchema::ConfigSchema(const std::string& model_config_type)
    : type_(arch_section_or_base(model_config_type).config_type),
      defaults_(defaults_of(arch_section_or_base(type_))),
      templates_(YAML::Load(kItemTemplates)),
      rules_(key_rules_of(type_)),
      foreign_(foreign_keys_of(type_)) {
  for (const KeyRule& r : rules_) patterns_.push_back(split(r.path));
}

const KeyRule* ConfigSchema::rule_for(const std::string& path) const {
  const auto parts = split(path);
  for (size_t k = 0; k < patterns_.size(); ++k) {
    const auto& pat = patterns_[k];
    if (pat.size() != parts.size()) continue;
    bool ok = true;
    for (size_t i = 0; i < parts.size() && ok; ++i) ok = pat[i] == "*" || pat[i] == parts[i];
    if (ok) return &rules_[k];
  }
  return nullptr;
}

bool ConfigSchema::polymorphic(const std::string& path) const {
  const auto& p = polymorphic_keys();
  return std::find(p.begin(), p.end(), path) != p.end();
}

const std::string* ConfigSchema::foreign_key(const std::string& path) const {
  for (const auto& [key, why] : foreign_)
    if (key == path) return &why;
  return nullptr;
}

const ConfigSchema& config_schema(const std::string& model_config_type) {
  // Built once per registered type (config loading runs on one thread).
  static std::map<std::string, std::unique_ptr<ConfigSchema>> built;
  const std::string& type = arch_section_or_base(model_config_type).config_type;
  auto it = built.find(type);
  if (it == built.end()) it = built.emplace(type, std::make_unique<ConfigSchema>(type)).first;
  return *it->second;
}

}  // namespace gf
