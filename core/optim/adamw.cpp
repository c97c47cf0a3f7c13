#include "core/optim/adamw.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/math/parallel_worth.h"
#include "core/math/scratch.h"

namespace gf {

const char* moment_dtype_name(MomentDtype d) { return d == MomentDtype::kBFloat16 ? "bfloat16" : "float32"; }

bool parse_moment_dtype(const std::string& s, MomentDtype& out) {
  for (const MomentDtype d : {MomentDtype::kFloat32, MomentDtype::kBFloat16})
    if (s == moment_dtype_name(d)) {
      out = d;
      return true;
    }
  return false;
}

AdamW::AdamW(const Placement& params, AdamWConfig cfg, int64_t shard_begin, int64_t shard_end)
    : cfg_(cfg), begin_(shard_begin), end_(shard_end < 0 ? params.total_floats() : shard_end) {
  const size_t n = static_cast<size_t>(end_ - begin_);
  if (cfg_.moment_dtype == MomentDtype::kBFloat16) {
    m16_ = AlignedBuffer<bf16>(n);
    v16_ = AlignedBuffer<bf16>(n);
  } else {
    m_ = AlignedBuffer<float>(n);
    v_ = AlignedBuffer<float>(n);
  }
  for (const TensorPlacement& p : params.tensors())
    ranges_.push_back({p.offset, p.offset + p.numel(), p.spec->weight_decay});
}

void AdamW::read_moments(int k, int64_t i0, int64_t n, float* out) const {
  if (cfg_.moment_dtype == MomentDtype::kBFloat16) {
    const bf16* src = (k == 0 ? m16_ : v16_).data() + i0;
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(src[i]);
  } else {
    const float* src = (k == 0 ? m_ : v_).data() + i0;
    std::copy(src, src + n, out);
  }
}

void AdamW::write_moments(int k, int64_t i0, int64_t n, const float* in) {
  if (cfg_.moment_dtype == MomentDtype::kBFloat16) {
    bf16* dst = (k == 0 ? m16_ : v16_).data() + i0;
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(in[i]);
  } else {
    std::copy(in, in + n, (k == 0 ? m_ : v_).data() + i0);
  }
}

namespace {

// A moment as stored: float32 as is, bfloat16 loaded exactly as fp32 and stored rounded to nearest even.
inline float load_moment(float x) { return x; }
inline float load_moment(bf16 x) { return bf16_to_float(x); }
template <typename M>
inline M store_moment(float x) {
  if constexpr (std::is_same_v<M, bf16>) return float_to_bf16(x);
  else return x;
}

// The update of one parameter's [lo, hi): `store_low(i, p)` writes the low-precision copy (or nothing).
// M: the moments' storage (float or bf16); the arithmetic is float's either way, and the update uses
// the float moments just computed (under bf16, before their rounding for the store).
template <typename M, typename StoreLow>
inline void adamw_range(float* params, const float* grads, M* m, M* v, int64_t lo, int64_t hi, float gscale,
                        float decay, float b1, float b2, float step_size, float inv_sqrt_bc2, float eps,
                        StoreLow store_low) {
  // This file is compiled without FMA contraction (CMakeLists.txt), so the roundings are the ones
  // written here: the decayed weight is rounded before the update is subtracted (as torch's
  // param.mul_(1 - lr * wd) then addcdiv_), and the moments and denominator use one FMA each.
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    const float g = grads[i] * gscale;
    const float p = params[i] * decay;
    const float mi = std::fma(b1, load_moment(m[i]), (1.0f - b1) * g);
    const float vi = std::fma(b2, load_moment(v[i]), (1.0f - b2) * g * g);
    m[i] = store_moment<M>(mi);
    v[i] = store_moment<M>(vi);
    const float denom = std::fma(std::sqrt(vi), inv_sqrt_bc2, eps);
    const float np = p - step_size * mi / denom;
    params[i] = np;
    store_low(i, np);
  }
}

// One thread's share [lo, hi) of a parameter with the moments of storage M.
template <typename M>
inline void adamw_share(float* params, const float* grads, M* m, M* v, int64_t lo, int64_t hi, float gscale,
                        float decay, float b1, float b2, float step_size, float inv_sqrt_bc2, float eps,
                        ComputeDtype low_dtype, bf16* low_bf16, float* low_fp16) {
  switch (low_dtype) {
    case ComputeDtype::kFloat32:
      adamw_range(params, grads, m, v, lo, hi, gscale, decay, b1, b2, step_size, inv_sqrt_bc2, eps,
                  [](int64_t, float) {});
      break;
    case ComputeDtype::kBFloat16:
      adamw_range(params, grads, m, v, lo, hi, gscale, decay, b1, b2, step_size, inv_sqrt_bc2, eps,
                  [low_bf16](int64_t i, float p) { low_bf16[i] = float_to_bf16(p); });
      break;
    case ComputeDtype::kFloat16:
      adamw_range(params, grads, m, v, lo, hi, gscale, decay, b1, b2, step_size, inv_sqrt_bc2, eps,
                  [low_fp16](int64_t i, float p) { low_fp16[i] = round_to_fp16(p); });
      break;
  }
}

}  // namespace

void AdamW::step(float* params, const float* grads, double lr, int64_t step, const AdamWStepExtras& extras) {
  const int64_t begin = begin_, end = end_;
  const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(step));
  const float b1 = static_cast<float>(cfg_.beta1), b2 = static_cast<float>(cfg_.beta2);
  const float step_size = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float eps = static_cast<float>(cfg_.eps);
  const float gscale = extras.grad_scale;
  const bool bf16_moments = cfg_.moment_dtype == MomentDtype::kBFloat16;
  float* m = bf16_moments ? nullptr : m_.data() - begin;  // indexed by arena position
  float* v = bf16_moments ? nullptr : v_.data() - begin;
  bf16* m16 = bf16_moments ? m16_.data() - begin : nullptr;
  bf16* v16 = bf16_moments ? v16_.data() - begin : nullptr;
  const ComputeDtype low_dtype = extras.low ? extras.low_dtype : ComputeDtype::kFloat32;
  bf16* low_bf16 = static_cast<bf16*>(extras.low);
  float* low_fp16 = static_cast<float*>(extras.low);  // fp16 values held in floats
  // One parallel region for the whole shard, each thread updating a contiguous share parameter by
  // parameter. A region per parameter (as before) cost a fork and a barrier per parameter, 148 of
  // them for GPT-2 124M, and each barrier can wait a scheduler time slice when another process holds
  // a core. Every element's update is the same whichever thread does it. Its work per element (a
  // square root and a division, vectorised) is about four streaming adds' (bench_ops: 1.2 ns per
  // element on one thread against 0.4 for the residual add).
#pragma omp parallel if (parallel_worth((end - begin) * 4))
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = ((end - begin + nt - 1) / nt + 15) / 16 * 16;  // whole cache lines
    const int64_t t_begin = std::min(end, begin + t * per), t_end = std::min(end, t_begin + per);
    for (const Range& r : ranges_) {
      const int64_t lo = std::max(t_begin, r.begin), hi = std::min(t_end, r.end);
      if (lo >= hi) continue;
      const float decay = r.decay ? static_cast<float>(std::fma(-lr, cfg_.weight_decay, 1.0)) : 1.0f;
      if (bf16_moments)
        adamw_share(params, grads, m16, v16, lo, hi, gscale, decay, b1, b2, step_size, inv_sqrt_bc2, eps, low_dtype,
                    low_bf16, low_fp16);
      else
        adamw_share(params, grads, m, v, lo, hi, gscale, decay, b1, b2, step_size, inv_sqrt_bc2, eps, low_dtype,
                    low_bf16, low_fp16);
    }
  }
}

namespace {

// grad_sq_sum's order: blocks of kSqBlock floats, each summed in kSqLanes interleaved partial sums,
// then the lanes and the blocks added in order.
constexpr int64_t kSqBlock = int64_t{1} << 14;
constexpr int kSqLanes = 16;

double sq_sum_block(const float* x, int64_t m) {
  double acc[kSqLanes] = {};
  int64_t i = 0;
  for (; i + kSqLanes <= m; i += kSqLanes)
    for (int j = 0; j < kSqLanes; ++j) acc[j] += static_cast<double>(x[i + j]) * x[i + j];
  for (int j = 0; i < m; ++i, ++j) acc[j] += static_cast<double>(x[i]) * x[i];
  double s = 0.0;
  for (int j = 0; j < kSqLanes; ++j) s += acc[j];
  return s;
}

}  // namespace

double grad_sq_sum(const float* g, int64_t n) { return grad_sq_sum(g, {ArenaRange{0, n}}); }

double grad_sq_sum(const float* g, const std::vector<ArenaRange>& ranges) {
  // The order of the additions depends on the ranges alone, not on the number of threads (an
  // OpenMP reduction adds one partial sum per thread). The independent lanes also let the compiler
  // vectorise without reassociating, where a single running sum waits on each add's latency. One
  // parallel region for all ranges (GradientSync passes one per parameter).
  const size_t nr = ranges.size();
  int64_t* first = scratch<int64_t>(nr + 1);  // first[r]: index of range r's first block
  first[0] = 0;
  for (size_t r = 0; r < nr; ++r)
    first[r + 1] = first[r] + (std::max<int64_t>(0, ranges[r].end - ranges[r].begin) + kSqBlock - 1) / kSqBlock;
  const int64_t blocks = first[nr];
  double* part = scratch<double>(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static) if (blocks > 1 && parallel_worth(blocks * kSqBlock))
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t r = static_cast<size_t>(std::upper_bound(first, first + nr + 1, b) - first - 1);
    const int64_t lo = ranges[r].begin + (b - first[r]) * kSqBlock;
    part[b] = sq_sum_block(g + lo, std::min(kSqBlock, ranges[r].end - lo));
  }
  double total = 0.0;
  for (size_t r = 0; r < nr; ++r) {
    double s = 0.0;
    for (int64_t b = first[r]; b < first[r + 1]; ++b) s += part[b];
    total += s;
  }
  return total;
}

double clip_coefficient(double norm, double max_norm) {
  return std::min(1.0, max_norm / (norm + 1e-6));
}

void scale_inplace(float* x, int64_t n, float s) {
#pragma omp parallel for simd schedule(static) if (parallel_worth(n))
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace gf
