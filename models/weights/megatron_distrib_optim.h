// Megatron-LM's distributed optimizer state (distrib_optim.pt) read for a resume: megatron_optimizer.cpp's
// load_megatron_training calls it for a shard whose 'optimizer' holds no per-parameter state.
//
// What Megatron writes (DistributedOptimizer.save_parameter_state, gathered on data-parallel rank 0 of each tensor x
// pipeline rank, into the directory of that rank's model_optim_rng.pt): for each grad buffer g = 0, 1, ... (every model
// chunk's dense buffer, then its expert-parallel buffer when it has one: core_r0.6.0's `self.buffers`; one per chunk
// before experts), a dict with one entry, keyed by the buffer's dtype (285068c-era) or its (param dtype, grad dtype)
// pair (core_r0.7+), holding "param" (the fp32 main parameters), "exp_avg", "exp_avg_sq" as
//   - a list of per-bucket tensors, each the bucket's whole buffer with its padding to a multiple of the data-parallel
//     size (megatron/optimizer/distrib_optimizer.py late 2023 and core_r0.6.0, beside "per_bucket_numel" or
//     "bucket_sizes" and, from core_r0.6.0, "per_bucket_numel_unpadded"), or
//   - one tensor of the buffer's unpadded elements, the buckets' paddings left out ("buckets_coalesced": True,
//     core_r0.7.0 on, with "numel_unpadded").
// Under expert parallelism core_r0.6.0 chains two distributed optimizers (ChainedOptimizer.save_parameter_state): the
// file holds the list [the dense parameters' state as above, the experts'], each saved by its own data-parallel group's
// rank 0 and None elsewhere: each expert rank's directory holds its experts' buffers (padded for the dp / ep
// data-modulo-expert-parallel ranks), expert rank 0's (_000) alone the dense ones, read from there for the others.
// A buffer holds its parameters in reverse named_parameters() order (ParamAndGradBuffer walks params[::-1], "roughly
// the backward's order"), each contiguous, a bucket closing after the parameter that fills it. Megatron from core_r0.9
// on (with the coalesced form) starts each parameter at a multiple of 64 elements of its bucket; a coalesced buffer
// whose parameters do not add up contiguously is read that way when the aligned layout adds up to its numel_unpadded.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "models/weights/megatron_checkpoint.h"

namespace gf {

struct MegatronDistribParam {
  std::string name;             // the model state dict's name
  std::vector<int64_t> shape;
  size_t chunk = 0;             // the model chunk (virtual pipeline stage) it belongs to
  bool expert_buffer = false;   // in the chunk's expert-parallel buffer (an expert's parameter with EP > 1)
};

struct MegatronDistribState {
  std::vector<MegatronFlat> master, exp_avg, exp_avg_sq;  // per chunk, in the order `params` gave them
  std::deque<PickleValue> views;                          // what the flats point at
  std::string form;                                       // "per-bucket" or "coalesced", for the log
};

// Reads distrib_optim.pt in the directory of `model_file` (a shard's model_optim_rng.pt): each parameter's slice of
// its buffer, as a tensor of its shape (a view of the file's mapped storage: nothing is copied). Throws naming the
// file and what does not fit: a missing file, a buffer whose sizes do not add up to its parameters', a tensor that is
// not a flat float buffer.
// `bucket_size`: the DDP bucket size of the run that saved (0: one bucket per buffer), which only the aligned
// layout needs (megatron_optimizer.cpp derives it from the checkpoint's args).
MegatronDistribState read_distrib_optim(const std::string& model_file, const std::vector<MegatronDistribParam>& params,
                                        size_t chunks, int64_t bucket_size = 0);

}  // namespace gf

namespace gf {

// Megatron-LM from 2022 to mid-2023, 285068c (January 2023) among them (the distributed optimizer's
// megatron/checkpointing.py get_checkpoint_names gave `model_rng.pt` in mp_rank_TT[_PPP] and each data-parallel rank d
// its own mp_rank_TT[_PPP]_DDD/optim.pt; megatron/optimizer/distrib_optimizer.py of that time): optim.pt holds
// {'optimizer': DistributedOptimizer.state_dict(), 'opt_param_scheduler': ...}, that state dict being
// {'optimizer': the inner (apex FusedAdam or torch Adam) state dict over rank d's shards, 'grad_scaler' (fp16),
//  'shard_fp32_from_float16_groups': per inner group, the fp32 main copies of its shards (empty lists in fp32)}.
// Each model chunk has one grad buffer of all its parameters, laid out in reverse parameters() order (DDP gives the
// first parameter the buffer's last elements); rank d owns the elements [d m, min(n, (d + 1) m)) of it, m = ceil(n /
// dp); a parameter overlapping that range is a 1-D shard of its flattened elements there. The inner optimizer's groups
// are Megatron's param groups (weight decay, then no weight decay) with those of no shard on rank d left out, each
// listing the shards in model chunk order, then parameters() order; torch numbers them 0, 1, ... through the groups.
// fp16's DynamicGradScaler.state_dict() ({'scale', 'growth_tracker', 'hysteresis_tracker'}), as a state dict holds it.
struct MegatronGradScaler {
  bool present = false;
  double scale = 1.0;
  int64_t growth = 0, hysteresis = 0;
};
// `gs` read (throws naming `where` for a scale that is missing or not a number).
MegatronGradScaler megatron_grad_scaler(const PickleValue& gs, const std::string& where);

// A parameter's Adam step, from its state (torch's) or its param group (apex FusedAdam's), into `step`: throws naming
// `at` when neither has one, or when it differs from `step` already read (>= 0): bias correction needs one count.
void megatron_adam_step(const PickleValue& state, const PickleValue& group, const std::string& at, double& step);

struct MegatronDpRankState {
  MegatronDistribState tensors;  // each parameter's whole master (when saved), exp_avg and exp_avg_sq, assembled
  double step = -1;              // Adam's step (apex's per group, or torch's per parameter)
  MegatronGradScaler scaler;     // fp16's, from the first file that holds one
};

// Reads the `dp` optim.pt files beside `model_file` (a model_rng.pt). `params`: the model state dict's parameters in
// order (their chunks; no expert buffers in that era). Throws naming the file for a missing rank's file, groups that
// are not this model's on that rank, a shard of the wrong size, step counts that differ.
MegatronDpRankState read_dp_rank_optim(const std::string& model_file, const std::vector<MegatronDistribParam>& params,
                                       size_t chunks, int64_t dp);

// A number as Megatron stores it (a Python int or float, or a one-element tensor); `d[key]`, present and not None.
// Both throw naming `where`.
double megatron_number(const PickleValue& v, const std::string& where);
const PickleValue& megatron_need(const PickleValue& d, const char* key, const std::string& where);

// The path of data-parallel rank `d`'s optim.pt beside `model_file`: mp_rank_TT[_PPP]_DDD.
std::string megatron_dp_rank_optim_path(const std::string& model_file, int64_t d);

}  // namespace gf
