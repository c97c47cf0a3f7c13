// Trainer::save_weights: the full weights assembled from the ranks' slices (--save-weights).
#include <vector>

#include "core/safetensors.h"
#include "runner/logging.h"
#include "runner/trainer.h"

namespace gf {

namespace {

// The full tensor `p` (global shape, F32) from the slices of the tensor-parallel group. Collective
// over ctx.tp. Each rank gathers its boxes into zeros (a replicated tensor: tensor rank 0 only;
// padding is in no box) and the group sums: the slices are disjoint, so the sum is exact.
std::vector<float> gather_full_tensor(const TensorPlacement& p, const float* w, ParallelContext& ctx) {
  const int64_t n = p.spec->global_numel();
  std::vector<float> f(static_cast<size_t>(n), 0.0f);
  if (!p.replicated || ctx.coord.tp == 0) Placement::gather(p, w + p.offset, f.data());
  ctx.tp.allreduce_sum(f.data(), n);
  return f;
}

}  // namespace

void Trainer::save_weights(const std::string& path) {
  const float* w = model_->weights();
  std::vector<std::vector<float>> full;
  std::vector<StWriteTensor> out;
  for (const TensorPlacement& p : model_->params().tensors()) {
    full.push_back(gather_full_tensor(p, w, ctx_));
    out.push_back({p.spec->name, StDtype::kF32, p.spec->shape, full.back().data()});
  }
  if (ctx_.world_rank == 0) {
    write_safetensors(path, out, {{"format", "pt"}});
    spdlog::info("weights written to {}", path);
  }
}

}  // namespace gf
