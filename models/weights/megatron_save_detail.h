// What models/weights/megatron_save.cpp (megatron/model's GPT-2 layout) and megatron_save_core.cpp (Megatron-core's)
// share: a float matrix and its tensor-parallel cuts, the shard directories' names, the args namespace.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/io/torch_pickle.h"
#include "core/io/torch_save.h"
#include "models/blocks/spec.h"
#include "models/weights/megatron_checkpoint_map_detail.h"
#include "models/weights/megatron_save.h"

namespace gf::megatron_save_detail {

using Source = std::function<std::vector<float>(const std::string&)>;

struct Mat {
  std::vector<int64_t> shape;
  std::vector<float> v;
  int64_t rows() const { return shape[0]; }
  int64_t cols() const { return shape.size() > 1 ? shape[1] : 1; }
};

// [in, out] (GPT-2's Conv1D) -> [out, in] (nn.Linear), with the reader's transpose.
inline Mat transposed(const Mat& m) {
  return Mat{{m.cols(), m.rows()}, megatron_detail::transpose2d(m.v, m.rows(), m.cols())};
}

// torch.chunk(m, n, dim=0)[k] and [..., dim=1][k], for n dividing the dimension (checked by the caller).
inline Mat row_chunk(const Mat& m, int64_t n, int64_t k) {
  const int64_t rows = m.rows() / n, width = m.cols();
  Mat out{m.shape, {}};
  out.shape[0] = rows;
  out.v.assign(m.v.begin() + k * rows * width, m.v.begin() + (k + 1) * rows * width);
  return out;
}
inline Mat col_chunk(const Mat& m, int64_t n, int64_t k) {
  const int64_t cols = m.cols() / n;
  Mat out{{m.rows(), cols}, {}};
  out.v.reserve(static_cast<size_t>(m.rows() * cols));
  for (int64_t r = 0; r < m.rows(); ++r)
    out.v.insert(out.v.end(), m.v.begin() + r * m.cols() + k * cols, m.v.begin() + r * m.cols() + (k + 1) * cols);
  return out;
}

inline int64_t padded_vocab(int64_t vocab, int64_t multiple) { return (vocab + multiple - 1) / multiple * multiple; }

// megatron/training/checkpointing.py (core_r0.6.0) get_checkpoint_name: mp_rank_TT, then _PPP when pipeline-parallel
// and _EEE when expert-parallel.
inline std::string rank_dir(int64_t tp, int64_t pp, int64_t pp_size, int64_t ep = 0, int64_t ep_size = 1) {
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "mp_rank_%02lld", static_cast<long long>(tp));
  if (pp_size > 1) n += std::snprintf(buf + n, sizeof buf - n, "_%03lld", static_cast<long long>(pp));
  if (ep_size > 1) std::snprintf(buf + n, sizeof buf - n, "_%03lld", static_cast<long long>(ep));
  return buf;
}

inline TorchOut state_dict_of(std::vector<std::pair<std::string, TorchOut>> entries) {
  TorchOut d = TorchOut::dict(TorchOut::Kind::kOrderedDict);
  for (auto& [k, v] : entries) d.set(k, std::move(v));
  return d;
}

// The args namespace: what Megatron's check_checkpoint_args compares (num_layers, hidden_size, num_attention_heads,
// add_position_embedding, max_position_embeddings, make_vocab_size_divisible_by, padded_vocab_size, tokenizer_type,
// the parallel sizes) and what its model builders read, as megatron/arguments.py leaves them for this model; with
// `core`, Megatron-core's (megatron/training/arguments.py at core_r0.6.0: --use-mcore-models and the model's
// position, norm, MLP, attention and expert arguments) after them.
TorchOut megatron_args(const ModelConfig& m, const TransformerSpec& s, const MegatronSaveOptions& opt, int64_t padded,
                       bool core);

// `name` from `src` as a tensor of `shape` (its size checked); with `f16`, a value beyond float16's range refused by
// the tensor's name.
Mat read_weight(const Source& src, const std::string& name, std::vector<int64_t> shape, bool f16);

// Whether `m` is written in Megatron-core's layout (any model but megatron/model's GPT-2, or --use-mcore-models).
bool writes_core(const TransformerSpec& s, const MegatronSaveOptions& opt);
// Why Megatron-core's layout cannot hold `m` under `opt` ("" when it can); and the writer.
std::string core_problem(const ModelConfig& m, const TransformerSpec& s, const MegatronSaveOptions& opt);
std::vector<std::string> save_core(const std::string& dir, const ModelConfig& m, const Source& weight,
                                   const MegatronSaveOptions& opt);

// The optimizer's state_dict() for one shard file from its model state dicts of the fp32 weights and of the two
// moments (megatron_save_optim.cpp): megatron/model's param groups, or with `core` core_r0.6.0's, the expert-parallel
// ones (experts under EP > 1) in an optimizer of their own (ChainedOptimizer's list). And OptimizerParamScheduler's.
TorchOut optimizer_state(const MegatronTrainState& tr, TorchDtype dtype, const TorchOut& master, const TorchOut& m,
                         const TorchOut& v, bool core, bool expert_parallel);
TorchOut scheduler_state(const MegatronTrainState& tr);
// Megatron's distributed optimizer (--use-distributed-optimizer) as core_r0.6.0 saves it for one shard file:
// `optimizer`, DistributedOptimizer.state_dict() (the param groups, no per-parameter state), and `distrib`,
// save_parameter_state's distrib_optim.pt beside it (the grad buffer gathered over `dp` data-parallel ranks, in
// buckets of `bucket_size` elements (0: one), each a padded list entry: "per_bucket_numel", "per_bucket_numel_unpadded"
// and {0: {grad dtype: {"param", "exp_avg", "exp_avg_sq"}}}); the fp32 main parameters are its "param".
// With experts under expert parallelism (`ep` > 1) core_r0.6.0 chains two distributed optimizers: `optimizer` is the list
// of the dense parameters' state dict and the experts', `distrib` the list of their buffers, the dense one (over `dp`
// ranks) on expert rank `ep_rank` 0 only (None elsewhere), the experts' over their dp / ep data-parallel ranks.
// `shared_embedding` (a tied head at pp > 1): the first stage's word embeddings and the last stage's output layer each
// take a bucket of their own, as core_r0.6.0's ParamAndGradBuffer gives a shared_embedding parameter.
struct MegatronDistributedOut {
  TorchOut optimizer, distrib;
};
MegatronDistributedOut distributed_optimizer_state(const MegatronTrainState& tr, TorchDtype dtype, const TorchOut& master,
                                                   const TorchOut& m, const TorchOut& v, int64_t dp, int64_t bucket_size,
                                                   int64_t ep, int64_t ep_rank, bool shared_embedding);

// 285068c's distributed optimizer (megatron/optimizer/distrib_optimizer.py at 285068c; megatron_distrib_optim.h has the
// format) for one model file of megatron/model's layout: per data-parallel rank d < `dp`, DistributedOptimizer's
// state_dict() over its shards of the one grad buffer (the parameters in reverse order, rank d's elements [d m,
// min(n, (d + 1) m)), m = ceil(n / dp)): the inner (apex FusedAdam's) state dict over the decay then no-decay group,
// one left out where rank d has no shard of it, the step in each group; fp16's grad_scaler; the fp32 main shards per
// group under fp16 / bf16 (empty lists in fp32). Saved as mp_rank_TT[_PPP]_DDD/optim.pt with the scheduler.
std::vector<TorchOut> dp_rank_optimizer_states(const MegatronTrainState& tr, TorchDtype dtype, const TorchOut& master,
                                               const TorchOut& m, const TorchOut& v, int64_t dp);

// `dir`/iter_NNNNNNN (or release/) emptied and created; and latest_checkpointed_iteration.txt written.
std::string iteration_dir(const std::string& dir, int64_t iteration);
void write_tracker(const std::string& dir, int64_t iteration);

}  // namespace gf::megatron_save_detail
