// Named sizes first, one allocation after. Code that lays out buffers runs twice over one
// BufferPlan: a sizing pass (take() records the size and hands out nullptr; nothing is allocated,
// so `plan` can size a run without building it), then, after allocate(), a placing pass that
// hands out the same buffers in the same order inside one zeroed allocation. Every buffer starts
// on a 64-byte boundary, as an AlignedBuffer of its own would.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/math/aligned_buffer.h"

namespace gf {

class BufferPlan {
 public:
  struct Entry {
    std::string name;
    int64_t floats;
  };

  // A buffer of `floats` floats: nullptr while sizing, its place once allocated.
  float* take(const std::string& name, int64_t floats) {
    const int64_t padded = (floats + 15) / 16 * 16;
    if (!placing_) {
      entries_.push_back({name, floats});
      total_ += padded;
      return nullptr;
    }
    if (next_ >= entries_.size() || entries_[next_].name != name || entries_[next_].floats != floats)
      throw std::logic_error("BufferPlan: buffer '" + name + "' placed out of the order it was sized in");
    ++next_;
    float* p = storage_.data() + cursor_;
    cursor_ += padded;
    return floats > 0 ? p : nullptr;
  }
  // Ends the sizing pass: one allocation of everything taken so far.
  void allocate() {
    storage_ = AlignedBuffer<float>(static_cast<size_t>(total_));
    placing_ = true;
  }
  bool placed_all() const { return placing_ && next_ == entries_.size(); }
  int64_t floats() const { return total_; }  // with alignment padding
  int64_t bytes() const { return 4 * total_; }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
  int64_t total_ = 0, cursor_ = 0;
  size_t next_ = 0;
  bool placing_ = false;
  AlignedBuffer<float> storage_;
};

}  // namespace gf
