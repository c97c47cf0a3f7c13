// A 64-byte aligned, zero-initialised float buffer (one allocation, owned, move-only).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace gf {

// Bytes held by every AlignedBuffer of the process right now (the tests compare what a model
// allocates with what its plan said).
inline std::atomic<int64_t>& aligned_buffer_live_bytes() {
  static std::atomic<int64_t> bytes{0};
  return bytes;
}

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) : n_(n) {
    if (n == 0) return;
    const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    data_ = static_cast<T*>(std::aligned_alloc(64, bytes));
    if (!data_) throw std::bad_alloc();
    std::memset(static_cast<void*>(data_), 0, bytes);
    aligned_buffer_live_bytes() += static_cast<int64_t>(bytes);
  }
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(n_, o.n_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() {
    if (data_) aligned_buffer_live_bytes() -= static_cast<int64_t>((n_ * sizeof(T) + 63) / 64 * 64);
    std::free(data_);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  void zero() { if (data_) std::memset(static_cast<void*>(data_), 0, n_ * sizeof(T)); }

 private:
  T* data_ = nullptr;
  size_t n_ = 0;
};

}  // namespace gf
