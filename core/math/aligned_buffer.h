// A 64-byte aligned, zero-initialised float buffer (one allocation, owned, move-only).
//
// An on-demand buffer (AlignedBuffer(n, kOnDemand)) is mapped from the kernel's zero pages instead:
// nothing is resident until written, and release(begin, end) gives the whole pages of a range back
// (they read as zeros again). The sharded arenas (ZeRO-2/3, parallel/grad_sync.h) hold the weights
// and gradients of a layer only while it runs this way, so the resident set, not the address
// space, is what the shards save.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

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

enum OnDemand { kOnDemand };

// The whole pages inside bytes [lo, hi) of a private mapping are given back to the kernel: an on-demand
// (anonymous) one reads them as zeros again, a read-only one of a file reads the file's bytes again (the
// safetensors and torch.save readers drop what they have copied out). Pages that hold a byte outside the
// range stay.
inline void release_pages(const void* lo, const void* hi) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto a = (reinterpret_cast<uintptr_t>(lo) + page - 1) / page * page;
  const auto b = reinterpret_cast<uintptr_t>(hi) / page * page;
  if (a < b) madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(size_t n, OnDemand) : n_(n), mapped_(true) {
    if (n == 0) return;
    void* p = mmap(nullptr, mapped_bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<T*>(p);
    aligned_buffer_live_bytes() += static_cast<int64_t>((n * sizeof(T) + 63) / 64 * 64);
  }
  explicit AlignedBuffer(size_t n) : n_(n) {
    if (n == 0) return;
    const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    data_ = static_cast<T*>(std::aligned_alloc(64, bytes));
    if (!data_) throw std::bad_alloc();
    std::memset(static_cast<void*>(data_), 0, bytes);
    aligned_buffer_live_bytes() += static_cast<int64_t>(bytes);
  }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), n_(std::exchange(o.n_, 0)), mapped_(std::exchange(o.mapped_, false)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(n_, o.n_);
    std::swap(mapped_, o.mapped_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() {
    if (data_) aligned_buffer_live_bytes() -= static_cast<int64_t>((n_ * sizeof(T) + 63) / 64 * 64);
    if (mapped_) {
      if (data_) munmap(data_, mapped_bytes());
    } else {
      std::free(data_);
    }
  }

  bool on_demand() const { return mapped_; }
  // On-demand buffers: the whole pages inside elements [begin, end) are given back and read as zeros
  // again (a page that holds an element outside the range stays). A no-op on other buffers.
  void release(int64_t begin, int64_t end) {
    if (mapped_ && begin < end) release_pages(data_ + begin, data_ + end);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  void zero() { if (data_) std::memset(static_cast<void*>(data_), 0, n_ * sizeof(T)); }

 private:
  size_t mapped_bytes() const {
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return (n_ * sizeof(T) + page - 1) / page * page;
  }
  T* data_ = nullptr;
  size_t n_ = 0;
  bool mapped_ = false;
};

}  // namespace gf
