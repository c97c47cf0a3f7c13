// What the two halves of the Megatron mapping (megatron_checkpoint.h) share; internal to them.
// models/weights/megatron_checkpoint_map.cpp holds the table of names and the collection of every
// shard's pieces by (role, layer, expert) (MegatronTensorMap); megatron_checkpoint_map_join.cpp the
// layouts: strided views of a piece (no data is read), and the shards joined into our tensors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/io/torch_pickle.h"
#include "models/blocks/spec.h"

namespace gf {
namespace megatron_detail {

// How a tensor's tensor-parallel shards make the full tensor.
enum class Join { kWhole, kRows, kCols };

// What the full Megatron tensor needs to become ours.
enum class Layout {
  kPlain,     // as it is (norms, biases, the router, the position table)
  kLinear,    // an nn.Linear [out, in] weight: transposed for a model that stores [in, out] (GPT-2's Conv1D)
  kVocab,     // vocabulary rows: Megatron's padding rows (past our vocab_size) dropped
  kHead,      // the output layer: lm_head (as kVocab) when untied; the tied embedding's copy skipped
  kQkv,       // q, k, v rows per query group (assemble, megatron_checkpoint_map_join.cpp), split into ours
  kFc1,       // the MLP's first projection: SwiGLU's gate and up halves of each shard (kLinear)
  kGrouped1,  // GroupedMLP's weight1: the local experts' fc1, packed (add_grouped, megatron_checkpoint_map.cpp)
  kGrouped2,  // GroupedMLP's weight2: their fc2
};

inline constexpr Join kWhole = Join::kWhole, kRows = Join::kRows, kCols = Join::kCols;
inline constexpr Layout kPlain = Layout::kPlain, kLinear = Layout::kLinear, kVocab = Layout::kVocab, kHead = Layout::kHead,
                        kQkv = Layout::kQkv, kFc1 = Layout::kFc1;

// One tensor-parallel shard of a tensor: a view whose row-major elements are `shape`'s.
struct Piece {
  TorchTensor view;
  std::vector<int64_t> shape;
  std::string where;  // "'key' in FILE"
};

// The pieces of one full tensor, and what it becomes (megatron_checkpoint_map.cpp collects them).
struct Entry {
  Join join = kWhole;
  Layout layout = kPlain;                    // kPlain, kLinear, kVocab or kQkv by now
  std::vector<std::string> names;            // ours, in the order the layout makes them
  std::vector<std::optional<Piece>> shards;  // by tensor-parallel rank
};

// The functions below are defined in megatron_checkpoint_map_join.cpp.

// ---- strided views (no data is read) ----
TorchTensor rows_of(TorchTensor t, int64_t begin, int64_t n);
TorchTensor transposed(TorchTensor t);
// A contiguous tensor seen with another shape of the same element count (torch's view).
TorchTensor viewed(TorchTensor t, std::vector<int64_t> shape);
TorchTensor permuted(const TorchTensor& t, const std::vector<size_t>& order);

// ---- joining the shards ----
// The full tensor's shape (checking that the shards fit together).
std::vector<int64_t> joined_shape(const Entry& e, const std::string& what);
// Our tensors from the full Megatron tensor (group()'s names and shapes, in order).
// A row-major rows x cols matrix transposed (tiled: the reader's and megatron_save.cpp's [out, in] <-> [in, out]).
std::vector<float> transpose2d(const std::vector<float>& v, int64_t rows, int64_t cols);

std::vector<std::vector<float>> assemble(const Entry& e, const std::vector<int64_t>& full, const TransformerSpec& s);

}  // namespace megatron_detail
}  // namespace gf
