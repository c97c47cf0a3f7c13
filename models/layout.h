// The run's layout as the model sees it: how its parameters and activations are split over the
// tensor (and sequence) and expert parallel ranks, whether the vocabulary is split, what is
// recomputed and the dtype of the matrix products. Built once from the run settings
// (runner/config/config.h: model_layout) and passed beside the ModelConfig, which holds the
// architecture's keys only. A model never reads these from anywhere else.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/math/mixed_precision.h"

namespace gf {

// What backward recomputes (recompute_config): nothing, the attention core and the activation
// function (select_recompute), or each layer's whole forward (recompute).
enum class RecomputePolicy { kNone, kSelective, kFull };

struct ModelLayout {
  int tp = 1;                     // tensor-parallel ranks (parallel_config.model_parallel)
  bool sequence_parallel = false; // use_seq_parallel: LayerNorm, dropout and residuals split by tokens
  bool vocab_split = false;       // vocab_emb_dp: False: embedding and LM head split by vocabulary
  int ep = 1;                     // expert_parallel: each MoE layer's experts over this many ranks
  int cp = 1;                     // context_parallel: each sample's positions split over this many ranks
  bool cp_ring = false;           // the attention core is ring attention (colossalai_cp, hybrid_cp)
  int cp_ulysses = 1;             // Ulysses' degree inside cp: cp (ulysses_cp), 1 (colossalai_cp), between (hybrid_cp)
  RecomputePolicy recompute = RecomputePolicy::kNone;
  int64_t recompute_num_layers = -1;  // recomputed layers from the first (-1: all)
  // MindFormers' per-stage list (select_recompute: [n0, n1, ...]), as a flag per layer of the model:
  // the first n_s layers of stage s. Empty: recompute_num_layers decides.
  std::vector<bool> recompute_mask;
  ComputeDtype compute = ComputeDtype::kFloat32;  // model_config.compute_dtype

  // Whether layer `l` (of the model) is recomputed.
  bool recomputes(int64_t l) const {
    if (recompute == RecomputePolicy::kNone) return false;
    if (!recompute_mask.empty()) return l < static_cast<int64_t>(recompute_mask.size()) && recompute_mask[l];
    return recompute_num_layers < 0 || l < recompute_num_layers;
  }
  // How many of the model's `layers` are recomputed.
  int64_t recomputed_layers(int64_t layers) const {
    int64_t n = 0;
    for (int64_t l = 0; l < layers; ++l) n += recomputes(l);
    return n;
  }
  // Under tensor parallel with vocab_emb_dp False the vocabulary is split (a no-op on one rank).
  bool vocab_parallel() const { return vocab_split && tp > 1; }
  bool low_precision() const { return compute != ComputeDtype::kFloat32; }
  bool operator==(const ModelLayout&) const = default;
};

}  // namespace gf
