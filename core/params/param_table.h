// The parameter table: a model's parameters described once, whatever the layout. For each, in
// arena order: its stable global name (the Hugging Face name), its global shape, which dimension
// is split over which parallel axis (SplitSpec), how it is initialised, whether AdamW decays it,
// whether it is read in a second place (tied) and whether the next parameter is packed right
// after it. No rank is inside: where a rank's share of each parameter lies, its local shape and
// its arena offset are a Placement of the table under a layout (core/params/placement.h), so one table
// serves every layout (tensor parallel 1, 2, 4; the vocabulary split or replicated).
//
// The initial values are a property of the description too: element g (row-major in the global
// shape) of a parameter is a function of (seed, name, g) only (InitialValues), so every layout
// starts from the same full tensors.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace gf {

// The parallel axes a parameter dimension can be split over.
enum class Axis {
  kNone,    // not split: every rank holds the whole tensor
  kTensor,  // the tensor-parallel group (model_parallel)
  kVocab,   // the vocabulary: padded to the layout's padded vocabulary, then split over the
            // tensor-parallel group when the layout splits the vocabulary (vocab_emb_dp: False)
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

// kUniform: uniform in [-std, std) (LoRA's A, PEFT's kaiming_uniform_ with a = sqrt(5): bound 1/sqrt(fan_in)).
enum class Init { kNormal, kZeros, kOnes, kUniform };

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;  // global, logical (what a checkpoint holds)
  SplitSpec split;
  Init init = Init::kNormal;
  float std = 0.02f;           // for kNormal; kUniform's bound
  bool weight_decay = false;   // AdamW decays 2-D weights only
  // Read in a second place besides its own (GPT-2's wte by the tied LM head). Informational.
  bool tied = false;
  // The next parameter starts right after this one's last element (no alignment gap), so
  // consecutive projections ([out, in] each, like q_proj, k_proj, v_proj) form one matrix.
  bool packed_with_next = false;
  // An MoE layer's expert `expert` of `experts` (-1: not an expert's). The experts of a layer are
  // divided over the expert-parallel group in contiguous runs: a rank holds experts
  // [r E / ep, (r + 1) E / ep) and no other expert's parameters.
  int64_t expert = -1, experts = 0;
  // Held whole by every tensor-parallel rank but read by that rank's share of the heads alone (Qwen3's
  // q_norm, k_norm): its gradient is partial and summed over the tensor group, with or without sequence parallel.
  bool grad_partial_over_tp = false;
  bool is_expert() const { return expert >= 0; }
  int64_t global_numel() const;  // of shape
};

// The initial values of one parameter: element `global_index` (row-major in the global shape)
// from (seed, name, global_index) alone.
class InitialValues {
 public:
  InitialValues(const ParamSpec& p, uint64_t seed);
  float operator()(int64_t global_index) const;
  // out[k] = (*this)(global_index + k) for k < n, the stream's key computed once.
  void fill(float* out, int64_t global_index, int64_t n) const;

 private:
  Init init_;
  float std_;
  uint64_t key_;  // counter_key(seed, hash_name(name))
};

class ParamTable {
 public:
  // Appends `spec` (names are unique; a split names a dim of the shape that cuts into its parts).
  void add(ParamSpec spec);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec& at(const std::string& name) const;
  const ParamSpec* find(const std::string& name) const;
  // Position of `name` in specs(); -1 if there is none.
  int64_t index_of(const std::string& name) const;

 private:
  std::vector<ParamSpec> specs_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace gf
