// Megatron-LM checkpoints out: a model's weights written in the layout Megatron-LM's save_checkpoint writes
// (megatron/checkpointing.py and megatron/model/gpt_model.py at 285068c, the version the Ascend reference
// scripts run), so that Megatron-LM and its tools/checkpoint converters load what gridformer trained:
//   DIR/latest_checkpointed_iteration.txt                  `release`, or the iteration
//   DIR/release/ (or iter_NNNNNNN/)mp_rank_TT[_PPP]/model_optim_rng.pt
// each a torch.save'd dict {'args': argparse.Namespace, 'checkpoint_version': 3.0, 'iteration', 'model':
// {'language_model': {'embedding': {'word_embeddings': {'weight'}, 'position_embeddings': {'weight'}},
// 'encoder': {'layers.N.input_layernorm.weight', ..., 'final_layernorm.bias'}}, 'word_embeddings_for_head':
// {'weight'} on a last pipeline stage that is not also the first}}. Tensors as Megatron holds them
// (nn.Linear's [out, in]; query_key_value's rows per head [np, 3, hn], checkpoint version 3.0's order), cut
// for tensor parallelism as tools/checkpoint/saver_megatron.py cuts them (column-parallel weights and biases
// and the padded vocabulary by rows, row-parallel weights by columns, the rest whole), layers numbered from 0
// on each pipeline stage. The vocabulary is padded to a multiple of make_vocab_size_divisible_by x TP with
// copies of its last row (saver_megatron.py's rule). `release/` (the default) is what NVIDIA publishes its
// GPT-345M as: Megatron loads it with the model alone (no optimizer or RNG state is needed or written).
// The args hold what Megatron's check_checkpoint_args compares and what its model builder reads.
//
// Written: GPT-2 (learned positions, LayerNorm, GELU MLP, biases, tied head) as megatron/model's GPTModel; every
// other model, and GPT-2 with `core`, in Megatron-core's layout (megatron_save_core.cpp: decoder.layers.N.
// self_attention.linear_qkv ..., Transformer Engine's or the local spec's norm names, experts split over _EEE shard
// directories): rotary positions, RMSNorm, SwiGLU, grouped-query attention, untied heads, biases everywhere, on q, k
// and v alone (--add-qkv-bias) or none, experts
// under core_r0.6.0's top-k router. Refused, naming what differs: what neither holds (latent attention, q/k norms,
// sandwich norms, sliding windows, RoPE scaling, shared experts, DeepSeek's routing, ...), fast_gelu (Megatron has no
// such activation), sizes Megatron cannot split (heads, query groups or the FFN width not divisible by TP, layers not
// divisible by PP, experts not divisible by EP).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/io/torch_pickle.h"
#include "models/model_config.h"

namespace gf {

// The training state written beside the weights (save_checkpoint without --no-save-optim), so that Megatron-LM (and
// gridformer) resume from it: 'optimizer' as Megatron's optimizer.state_dict() gives it (megatron/optimizer/
// optimizer.py at 285068c): torch's Adam state dict {'state': {i: {'exp_avg', 'exp_avg_sq', 'step'}}, 'param_groups':
// [decay group, no-decay group]} numbering the parameters as get_param_groups does (named_parameters order; '.bias'
// or 1-D: no decay), also holding apex FusedAdam's group 'step'; under fp16 / bf16 wrapped as Float16Optimizer's
// {'optimizer', 'grad_scaler' (fp16), 'fp32_from_fp16_params' (the fp32 weights, the file's model holding them
// rounded)}; and 'opt_param_scheduler' (OptimizerParamScheduler.state_dict(), in samples). No 'rng_state': Megatron
// resumes from it with --no-load-rng. In Megatron-core's layout the groups are core_r0.6.0's (megatron_save_optim.cpp):
// in the order their first parameter comes, and under expert parallelism the experts' groups in an optimizer of their
// own ('optimizer' is then ChainedOptimizer's list of the two state dicts).
struct MegatronTrainState {
  // A parameter's AdamW moment by our name, in our layout like `weight`: k 0 exp_avg, 1 exp_avg_sq.
  std::function<std::vector<float>(int k, const std::string& name)> moment;
  int64_t adam_step = 0;  // Adam's steps (the iteration less the steps skipped for overflow)
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;  // the param groups' values
  bool grad_scaler = false;  // fp16's DynamicGradScaler state
  double loss_scale = 1;
  int64_t growth_tracker = 0, hysteresis_tracker = 2;
  double max_lr = 0, min_lr = 0;  // opt_param_scheduler, its steps in samples
  int64_t warmup_samples = 0, decay_samples = 0, num_samples = 0, wd_incr_samples = 0;
  std::string decay_style = "linear";
  int64_t global_batch = 0;  // args.global_batch_size
};

struct MegatronSaveOptions {
  int64_t tp = 1, pp = 1;                    // --tensor-model-parallel-size, --pipeline-model-parallel-size
  TorchDtype dtype = TorchDtype::kF32;       // the weights' dtype (args.fp16 / args.bf16 say which)
  int64_t iteration = -1;                    // -1: release/; else iter_NNNNNNN with that iteration
  int64_t consumed_train_samples = 0;        // args.consumed_train_samples
  int64_t make_vocab_size_divisible_by = 128;
  std::string tokenizer_type = "GPT2BPETokenizer";  // args.tokenizer_type (check_checkpoint_args compares it)
  const MegatronTrainState* train = nullptr;         // with the optimizer state (iteration >= 0)
  // Megatron-core's layout (megatron_save_core.cpp), which every model but megatron/model's GPT-2 is written in:
  int64_t ep = 1;                   // --expert-model-parallel-size: experts split over _EEE shard directories
  bool core = false;                // --use-mcore-models: GPT-2 in core's layout too
  bool transformer_engine = true;   // --transformer-impl transformer_engine (core_r0.6.0's default) or local's names
  bool grouped_gemm = false;        // --moe-grouped-gemm: experts as GroupedMLP's weight1 / weight2
  // --use-distributed-optimizer (with `train`): in Megatron-core's layout the optimizer state as core_r0.6.0's
  // DistributedOptimizer saves it, its moments and fp32 main parameters in distrib_optim.pt beside each shard file, the
  // grad buffer padded for `dp` data-parallel ranks in buckets of `bucket_size` elements (0: one bucket; Megatron's
  // --overlap-grad-reduce makes them max(40000000, 1000000 x dp)); in megatron/model's layout as 285068c saves it,
  // model_rng.pt and each of the `dp` ranks' shards in mp_rank_TT[_PPP]_DDD/optim.pt. See megatron_distributed_problem.
  bool distributed_optimizer = false;
  int64_t dp = 1, bucket_size = 0;
  int64_t cp = 1;  // the context-parallel size inside `dp` (core_r0.6.0 refuses it beside expert parallelism)
};

// Why the distributed optimizer's form cannot be written for `model` under `opt` ("" when it can): a data-parallel size
// that the expert-parallel size does not divide, or expert with context parallelism. The non-distributed form is
// written instead, which Megatron loads without --use-distributed-optimizer. (Experts under expert parallelism are
// written as core_r0.6.0's ChainedOptimizer of two distributed optimizers; a tied head at pp > 1 with its copies in
// buckets of their own.)
std::string megatron_distributed_problem(const ModelConfig& model, const MegatronSaveOptions& opt);

// Whether `model` is written in Megatron-core's layout (megatron_save_core.cpp) rather than megatron/model's.
bool megatron_writes_core(const ModelConfig& model, const MegatronSaveOptions& opt);

// Why `model` cannot be written in Megatron's layout ("" when it can).
std::string megatron_save_problem(const ModelConfig& model, const MegatronSaveOptions& opt);

// Writes the checkpoint under `dir` (created; its iteration directory and tracker file replaced). `weight`
// returns a parameter of the model by our name (Hugging Face's), row-major float32 in our layout. Returns
// the shard files written. Throws std::invalid_argument for what megatron_save_problem names, and
// std::runtime_error for a file that cannot be written.
std::vector<std::string> save_megatron(const std::string& dir, const ModelConfig& model,
                                       const std::function<std::vector<float>(const std::string& name)>& weight,
                                       const MegatronSaveOptions& opt);

}  // namespace gf
