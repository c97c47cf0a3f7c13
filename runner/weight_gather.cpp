// Trainer::save_weights: the full weights assembled from the ranks' slices (--save-weights).
#include <vector>

#include "core/safetensors.h"
#include "runner/logging.h"
#include "runner/trainer.h"

namespace gf {

namespace {

// The full tensor `p` (global shape, F32) from the slices of the tensor-parallel group. Collective
// over ctx.tp. Each rank writes its elements at their global indices into zeros (a replicated
// tensor: tensor rank 0 only; padding, global index -1, nowhere) and the group sums: the slices
// are disjoint, so the sum is exact.
std::vector<float> gather_full_tensor(const ParamTable& table, const ParamSpec& p, const float* w,
                                      ParallelContext& ctx) {
  std::vector<float> f(static_cast<size_t>(p.global_numel()), 0.0f);
  if (!table.replicated(p) || ctx.coord.tp == 0)
    for (int64_t i = 0; i < p.numel(); ++i)
      if (const int64_t g = table.global_index(p, i); g >= 0) f[static_cast<size_t>(g)] = w[p.offset + i];
  ctx.tp.allreduce_sum(f.data(), p.global_numel());
  return f;
}

}  // namespace

void Trainer::save_weights(const std::string& path) {
  const ParamTable& table = model_->params();
  const float* w = model_->weights();
  std::vector<std::vector<float>> full;
  std::vector<StWriteTensor> out;
  for (const ParamSpec& p : table.specs()) {
    full.push_back(gather_full_tensor(table, p, w, ctx_));
    out.push_back({p.name, StDtype::kF32, p.shape, full.back().data()});
  }
  if (ctx_.world_rank == 0) {
    write_safetensors(path, out, {{"format", "pt"}});
    spdlog::info("weights written to {}", path);
  }
}

}  // namespace gf
