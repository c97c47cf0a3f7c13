// The parameter table: every parameter's stable global name (the Hugging Face name), global
// shape, how it is split across tensor-parallel ranks, how it is initialised, and where its local
// slice lives in the flat arena. Gradients and optimizer moments use the same layout, so gradient
// buckets and optimizer sharding are plain slices of one buffer.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/aligned_buffer.h"

namespace gf {

// The parallel axes a parameter dimension can be split over.
enum class Axis {
  kNone,    // not split: every rank holds the whole tensor
  kTensor,  // the tensor-parallel group (model_parallel)
  kVocab,   // the vocabulary: padded to the layout's padded vocabulary, then split over the
            // tensor-parallel group when the layout splits the vocabulary (vocab_emb_dp: False)
  // kExpert (the experts of an MoE layer over the expert-parallel group) comes with MoE.
};

// Which dimension of a parameter is split over which axis. Dimension `dim` is first cut into
// `parts` equal parts (1 normally; 3 for GPT-2's fused q|k|v, whose last dimension is q, k and v
// side by side), then each part is split evenly over the axis: a rank holds its share of every
// part, the shares side by side in part order.
struct SplitSpec {
  int dim = 0;
  Axis axis = Axis::kNone;
  int64_t parts = 1;
  bool operator==(const SplitSpec&) const = default;
};

inline SplitSpec no_split() { return {}; }
// Dimension `dim` over the tensor-parallel group, cut into `parts` first.
inline SplitSpec split_dim(int dim, int64_t parts = 1) { return {dim, Axis::kTensor, parts}; }
// Dimension 0 is the vocabulary.
inline SplitSpec vocab_rows() { return {0, Axis::kVocab, 1}; }

enum class Init { kNormal, kZeros, kOnes };

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;        // global, logical (what a checkpoint holds)
  SplitSpec split;
  Init init = Init::kNormal;
  float std = 0.02f;                 // for kNormal
  bool weight_decay = false;         // AdamW decays 2-D weights only
  // Read in a second place besides its own (GPT-2's wte by the tied LM head). Informational.
  bool tied = false;
  // The next parameter starts right after this one's last element (no alignment gap), so
  // consecutive projections ([out, in] each, like q_proj, k_proj, v_proj) form one matrix.
  bool packed_with_next = false;
  // Filled by ParamTable::finalize:
  std::vector<int64_t> local_shape;  // this rank's storage (vocab rows padded)
  int64_t offset = 0;                // in floats, into the arena
  int64_t numel() const;             // of local_shape
  int64_t global_numel() const;
};

class ParamTable {
 public:
  // tp_rank/tp_size: this rank's position on the tensor-parallel axis; vocab_padded: the padded
  // vocabulary size (the split dim of Axis::kVocab parameters); vocab_split: whether they are split
  // across the tensor-parallel ranks (MindFormers' vocab_emb_dp: False) or replicated.
  ParamTable(int tp_rank = 0, int tp_size = 1, int64_t vocab_padded = 0, bool vocab_split = true);

  void add(ParamSpec spec);
  void finalize();  // lays out local slices, 16-float aligned

  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec& at(const std::string& name) const;
  const ParamSpec* find(const std::string& name) const;
  int64_t total_floats() const { return total_; }
  int tp_rank() const { return tp_rank_; }
  int tp_size() const { return tp_size_; }
  bool vocab_split() const { return vocab_split_; }
  // Whether every tensor-parallel rank holds the whole of `p` (so its gradient norm counts once).
  bool replicated(const ParamSpec& p) const;

  // Global flat index of local element `i` of `p`; -1 for padding (vocab rows past the end).
  int64_t global_index(const ParamSpec& p, int64_t i) const;
  // Fills this rank's slice of every parameter from (seed, name): the same seed gives the same
  // full tensors under any tensor-parallel layout. Padding is zero.
  void initialize(float* arena, uint64_t seed) const;

 private:
  std::vector<ParamSpec> specs_;
  std::unordered_map<std::string, size_t> index_;
  int tp_rank_, tp_size_;
  int64_t vocab_padded_;
  bool vocab_split_;
  int64_t total_ = 0;
  bool finalized_ = false;
};

}  // namespace gf
