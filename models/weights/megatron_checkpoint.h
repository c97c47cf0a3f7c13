// Megatron-LM's checkpoints (the `torch` format its save_checkpoint writes) as a weights source: the
// shards of one saved iteration are read (core/io/torch_file.h: torch.save's zip or legacy format,
// through the restricted unpickler), their tensor-parallel pieces joined, their pipeline stages' layer
// numbers made global, and the full tensors loaded under our parameter names and layouts, with the
// checks of the safetensors path (every parameter present with its global shape, every weight of the
// files a parameter of the model).
//
// On disk (megatron/checkpointing.py at 285068c, megatron/training/checkpointing.py at core_r0.6.0):
//   DIR/latest_checkpointed_iteration.txt      an iteration number, or `release`
//   DIR/iter_NNNNNNN/ (7 digits) or DIR/release/
//     mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt   TT the tensor-parallel rank; _PPP the pipeline rank
//                                                  when pipeline_model_parallel_size > 1; _EEE the
//                                                  expert-parallel rank when expert_model_parallel_size > 1
//                                                  (model_rng.pt: 285068c's distributed optimizer)
// each a dict {'args': argparse.Namespace, 'checkpoint_version', 'iteration', 'model' (or 'model0',
// 'model1', ... under a virtual pipeline), 'optimizer', 'rng_state', ...}; only args, the version and
// the model state dicts are read.
//
// Both layouts of the model state dict are read: the legacy megatron/model (nested dicts
// language_model.embedding / encoder (transformer before version 3.0) / output_layer and
// word_embeddings_for_head; layers.N.input_layernorm, self_attention.query_key_value, ...) and
// Megatron-core's flat GPTModel dict (embedding.*, decoder.layers.N.self_attention.linear_qkv, mlp.*,
// output_layer; Transformer Engine's fused layer_norm_weight names or the local spec's; MoE routers and
// experts, per expert or GroupedMLP's weight1 / weight2). megatron_checkpoint.cpp finds the files and
// checks the args; megatron_checkpoint_map.cpp holds the table of names and the layout of each,
// megatron_checkpoint_map_join.cpp how the pieces of a tensor are joined.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/blocks/spec.h"
#include "models/model_config.h"

namespace gf {

class CausalLM;
class PickleValue;
class TorchFile;
struct TensorPlacement;

// Whether `path` is a Megatron checkpoint: a directory holding latest_checkpointed_iteration.txt, an
// iter_NNNNNNN or release directory holding mp_rank_* directories, an mp_rank_* directory holding
// model_optim_rng.pt (or model_rng.pt), or such a file inside an mp_rank_* directory. Looks at names
// only; reads nothing.
bool is_megatron_checkpoint(const std::string& path);

// One shard file: its path and the model-parallel ranks it was saved by.
struct MegatronShard {
  std::string file;
  int64_t tp = 0, pp = 0, ep = 0;
};

// The shard files of the iteration `path` names (the one the tracker file names, for a top directory).
struct MegatronCheckpointFiles {
  std::string dir;                    // iter_NNNNNNN or release, the directory the shards are in
  std::string iteration;              // "release", or the number as the tracker file gives it
  int64_t tp = 1, pp = 1, ep = 1;     // the args' tensor / pipeline / expert model-parallel sizes
  std::vector<MegatronShard> shards;  // tp fastest, then pp, then ep
};

// Finds the files: reads the tracker file, opens rank 0's shard for its args (the parallel sizes), and
// lists every file those sizes make (get_checkpoint_name's names). Throws std::runtime_error naming the
// path for a tracker that names no iteration, a missing iteration directory, and every missing shard.
MegatronCheckpointFiles find_megatron_shards(const std::string& path);

// PickleOptions::enum_classes for Megatron's pickles: the Enum classes its args hold members of.
std::vector<std::string> megatron_enum_classes();

// The differences between a checkpoint's args (argparse.Namespace) and the configured model, as
// Megatron's check_checkpoint_args compares them (num_layers, hidden_size, num_attention_heads,
// max_position_embeddings, padded_vocab_size against vocab_size padded to a multiple of
// make_vocab_size_divisible_by x TP) plus what decides the meaning of the weights here (query groups,
// ffn_hidden_size, kv_channels, normalization and its epsilon, swiglu, positions and rotary base,
// linear biases, tied output layer, experts and top-k) and what gridformer does not run
// (apply_residual_connection_post_layernorm, apply_layernorm_1p, qk_layernorm, rotary_percent < 1,
// rotary_interleaved, standalone_embedding_stage, squared_relu). One line per difference, each naming the
// args key, both values and the model_config key; empty when they agree. Keys an older Megatron did not
// write take its defaults (arguments.py).
std::vector<std::string> megatron_args_differences(const PickleValue& args, const ModelConfig& config,
                                                   const TransformerSpec& spec, int64_t tp);

// Loads the checkpoint `path` (any path is_megatron_checkpoint accepts) into the model's weights, the way
// CausalLM::load_hf_checkpoint loads a safetensors file (the vocabulary's own padding applied by
// Placement::scatter; a pipeline stage takes its share by name). Returns a note for the log. Throws
// std::runtime_error naming the file, the key and the fix: args that differ from the model (every
// difference in one message), a tensor of a file that maps to no parameter, a parameter no tensor gives,
// shards that do not fit together, a missing shard file, and whatever the pickle reader refuses (a
// global outside its allow-list, named).
std::string load_megatron(CausalLM& model, const std::string& path);

// A Megatron-LM run's training state beside its weights, for a resume (model_optim_rng.pt's 'iteration',
// args.consumed_train_samples, 'optimizer' and 'opt_param_scheduler'; megatron/checkpointing.py at 285068c,
// megatron/training/checkpointing.py at core_r0.6.0, megatron/optimizer/optimizer.py's state_dict). The optimizer
// is Megatron's non-distributed one: torch's (or apex's FusedAdam's) Adam state dict, its parameters numbered in
// the order of Megatron's get_param_groups (named_parameters order, split into the weight-decay and no-decay groups
// the file's param_groups name), wrapped with 'grad_scaler' and 'fp32_from_fp16_params' under fp16 / bf16.
struct MegatronTrainingState {
  std::string dir, note;               // the iteration directory; a line for the log
  int64_t iteration = 0;               // the file's 'iteration': the steps done
  int64_t consumed_samples = 0;        // args.consumed_train_samples
  int64_t global_batch = 0;            // args.global_batch_size (0 when absent)
  int64_t adam_step = 0;               // Adam's step count (torch's per-parameter 'step', apex's group 'step')
  bool master_weights = false;         // the weights came from fp32_from_fp16_params
  bool grad_scaler = false;            // fp16's DynamicGradScaler state was read
  double loss_scale = 1.0;
  int64_t growth_tracker = 0, hysteresis_tracker = 0;
  bool scheduler = false;              // opt_param_scheduler (or lr_scheduler) was read; its figures in samples
  double max_lr = 0, min_lr = 0;
  int64_t warmup_samples = 0, decay_samples = 0, scheduler_samples = 0;
  std::string decay_style;
};

// Loads the weights (the fp32 master copies where the optimizer holds them) as load_megatron does, and hands every
// parameter's Adam moments, full tensors in our layout, to `moment` (k 0: exp_avg, 1: exp_avg_sq) with the
// parameter's placement on this rank (nullptr-free: only this rank's parameters). Throws std::runtime_error naming
// the file and what to do for: a `release` checkpoint (weights only), a checkpoint saved without its optimizer
// (--no-save-optim), param groups that do not number the model's parameters, moments whose shapes are not their
// parameters', step counts that differ, a distributed optimizer's file missing or not this model's. The distributed
// optimizer's state is read from distrib_optim.pt beside each shard file (megatron_distrib_optim.cpp), or, for
// mid-2023's model_rng.pt, from each data-parallel rank's mp_rank_TT[_PPP]_DDD/optim.pt (megatron_dp_optim.cpp).
using MegatronMomentSink = std::function<void(int k, const TensorPlacement& t, const std::vector<float>& full)>;
MegatronTrainingState load_megatron_training(CausalLM& model, const std::string& path, const MegatronMomentSink& moment);

// ---- the mapping of names and layouts (megatron_checkpoint_map.cpp), which load_megatron drives ----

// The checkpoint's model-parallel sizes and what numbers its layers and experts.
struct MegatronSizes {
  int64_t tp = 1, pp = 1, vp = 1, ep = 1;  // vp: model chunks per stage ('model0', 'model1', ...)
  int64_t layers = 0;                      // args.num_layers
  int64_t experts = 1;                     // args.num_experts (1: dense)
};

// One model chunk's state dict as one shard file holds it.
struct MegatronChunk {
  std::string file;
  const PickleValue* state_dict = nullptr;  // the file's 'model' (or 'model<vp>') entry
  int64_t tp = 0, pp = 0, vp = 0, ep = 0;
  double version = 0.0;  // the file's checkpoint_version
};

// Our parameters that one Megatron tensor (its tensor-parallel shards joined) becomes: one, or q, k
// and v from a query_key_value for a model that keeps them apart.
struct MegatronTensorGroup {
  std::string source;  // Megatron's name and file, for messages
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;  // global, in our layout
  // Reads the shards (only now) and returns names' tensors in order, row-major in `shapes`.
  std::function<std::vector<std::vector<float>>()> values;
};

struct MegatronMapStats {
  int64_t extra_state = 0;         // `_extra_state` entries (Transformer Engine's fp8 metadata, or None)
  int64_t tied_head_copies = 0;    // word_embeddings_for_head / output_layer copies of a tied embedding
  int64_t expert_rank_copies = 0;  // dense tensors of expert-parallel ranks > 0 (rank 0's are read)
  int64_t rotary_buffers = 0;      // rotary_pos_emb.inv_freq (a buffer, recomputed by the model)
};

// A model state dict's tensors in its order, under their dotted names (nested dicts joined with '.'), without
// `_extra_state` entries and rotary_pos_emb.inv_freq buffers: the parameters, in the order named_parameters()
// gives them (the order Megatron's optimizer numbers them in). Throws for a non-string key or a non-tensor value.
using MegatronFlat = std::vector<std::pair<std::string, const PickleValue*>>;
MegatronFlat megatron_flatten(const PickleValue& state_dict, const std::string& file);

// Megatron's tensors, by the table of names in megatron_checkpoint_map.cpp, collected from every chunk
// and joined into our parameters. The spec and names are the configured model's (its registry entry).
class MegatronTensorMap {
 public:
  MegatronTensorMap(const TransformerSpec& spec, const NameMap& names, const MegatronSizes& sizes);
  // Collects a chunk's tensors (views; nothing is converted). Throws std::runtime_error naming the file
  // and the key for a tensor no rule maps or whose role the architecture lacks, a layer or expert number
  // outside the chunk, a shape its layout cannot have, and two tensors giving one parameter.
  void add(const MegatronChunk& chunk);
  // The same for a chunk's tensors given flat (megatron_flatten's names; the values may be other tensors of those
  // shapes, such as the optimizer's moments of each parameter).
  void add(const MegatronChunk& chunk, const MegatronFlat& tensors);
  // After every add: the groups, one per full tensor. Throws for shards missing or not fitting together.
  std::vector<MegatronTensorGroup> groups() const;
  const MegatronMapStats& stats() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// What load_megatron_parts reads: for each shard file, given it and its model chunks, the tensors of each chunk
// (MegatronFlat: the model state dict's names, with these values); `read` empty: the model state dicts themselves.
// Each tensor, joined whole, is handed to `place` with this rank's placement of the parameter.
struct MegatronPart {
  std::string what;  // for messages: "weights", "exp_avg", ...
  std::function<std::vector<MegatronFlat>(const TorchFile& f, const std::vector<const PickleValue*>& chunks)> read;
  std::function<void(const TensorPlacement& t, const std::vector<float>& full)> place;
};
// load_megatron's steps for several parts at once: the files found, the args checked, every shard file opened once
// (`on_file` sees each first), each part's tensors mapped, checked (every parameter given, with its shape) and
// placed. Returns load_megatron's note.
std::string load_megatron_parts(CausalLM& model, const std::string& path, const std::vector<MegatronPart>& parts,
                                const std::function<void(const TorchFile&, const MegatronCheckpointFiles&)>& on_file = {});

}  // namespace gf
