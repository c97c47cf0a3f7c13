// Where a rank's slice of each parameter lies in the global tensor, as boxes: the description
// that checkpoints, resharding, Hugging Face import/export and `plan` can share instead of each
// re-deriving the split. A slice is one box, or several when the split is per part (the fused
// q|k|v weight: one box per projection); vocabulary padding rows lie outside every box.
// Built from a finalized ParamTable; parameters are 1-D or 2-D (row-major).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/param_table.h"

namespace gf {

struct Box {
  std::vector<int64_t> offset, extent;  // per dim
  int64_t numel() const;
};

// One rectangular piece of a local slice: the global box it holds and where it starts in the local
// tensor (per dim).
struct SlicePiece {
  Box global;
  std::vector<int64_t> local_offset;
};

struct TensorPlacement {
  const ParamSpec* spec = nullptr;  // name, global and local shapes, arena offset
  std::vector<SlicePiece> pieces;
  bool replicated = false;  // every tensor-parallel rank holds the whole tensor
};

class Placement {
 public:
  explicit Placement(const ParamTable& table);
  const std::vector<TensorPlacement>& tensors() const { return tensors_; }
  const TensorPlacement& at(const std::string& name) const;

  // The local slice of `t` from the whole global tensor `full` (row-major, global shape); local
  // elements in no piece (vocabulary padding) are set to zero.
  static void scatter(const TensorPlacement& t, const float* full, float* local);
  // The local slice's pieces written into their places in the whole tensor `full`.
  static void gather(const TensorPlacement& t, const float* local, float* full);

 private:
  std::vector<TensorPlacement> tensors_;
};

}  // namespace gf
