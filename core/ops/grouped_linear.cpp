#include "core/ops/grouped_linear.h"
#include "core/trace/trace.h"

#include "core/math/parallel_worth.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ops/linear.h"

namespace gf::ops {

namespace {

void check_args(const int64_t* offsets, int64_t groups, int64_t in, int64_t out, const GroupedTiles& tiles) {
  if (groups < 0 || in < 0 || out < 0) throw std::invalid_argument("grouped_linear: negative groups, in or out");
  if (tiles.rows <= 0 || tiles.weight_rows <= 0)
    throw std::invalid_argument("grouped_linear: tile sizes must be positive");
  if (groups > 0 && offsets == nullptr) throw std::invalid_argument("grouped_linear: offsets is null");
  for (int64_t g = 0; g < groups; ++g)
    if (offsets[g + 1] < offsets[g] || offsets[g] < 0)
      throw std::invalid_argument("grouped_linear: offsets must be non-negative and must not decrease (group " +
                                  std::to_string(g) + ": " + std::to_string(offsets[g]) + " -> " +
                                  std::to_string(offsets[g + 1]) + ")");
}

// A slice of a low-precision copy laid out like its fp32 matrix: `elements` elements in.
const void* low_at(ComputeDtype d, const void* low, int64_t elements) {
  if (low == nullptr) return nullptr;
  return static_cast<const char*>(low) + elements * low_copy_element_bytes(d);
}

// One unit of work: group g, and [begin, end) of its rows (forward, backward-input) or of dW_g's
// rows (backward-weight). cost orders the list, largest first, for the dynamic schedule.
struct Tile {
  int64_t g, begin, end, cost;
};

// The tiles of one call, in a per-thread vector reused from call to call.
std::vector<Tile>& tile_list() {
  thread_local std::vector<Tile> tiles;
  tiles.clear();
  return tiles;
}

void sort_largest_first(std::vector<Tile>& tiles) {
  std::stable_sort(tiles.begin(), tiles.end(), [](const Tile& a, const Tile& b) { return a.cost > b.cost; });
}

// Each group's rows in ceil(n / rows_per_tile) blocks of equal size (up to one row): a group of 130
// rows is two blocks of 65, not 128 and 2 (a product of 2 rows still packs all of W_g).
std::vector<Tile>& row_tiles(const int64_t* offsets, int64_t groups, int64_t rows_per_tile) {
  std::vector<Tile>& tiles = tile_list();
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t n = offsets[g + 1] - offsets[g], blocks = (n + rows_per_tile - 1) / rows_per_tile;
    for (int64_t k = 0; k < blocks; ++k) {
      const int64_t b = offsets[g] + n * k / blocks, e = offsets[g] + n * (k + 1) / blocks;
      tiles.push_back({g, b, e, e - b});
    }
  }
  sort_largest_first(tiles);
  return tiles;
}

// Blocks of `per_tile` rows of every group's dW (of `rows` rows), empty groups included, and one
// empty block for a dW of no rows: db is added to in every case, as by the per-group loop (whose
// sum of no rows turns a -0 into +0).
std::vector<Tile>& weight_tiles(const int64_t* offsets, int64_t groups, int64_t rows, int64_t per_tile) {
  std::vector<Tile>& tiles = tile_list();
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t p = 0; p < std::max<int64_t>(rows, 1); p += per_tile) {
      const int64_t e = std::min(rows, p + per_tile);
      tiles.push_back({g, p, e, (offsets[g + 1] - offsets[g]) * (e - p)});
    }
  sort_largest_first(tiles);
  return tiles;
}

// db[c0, c1) += the sum of dy's n rows (row stride ld) over those columns: each column summed in
// row order from 0 and then added, the arithmetic of sum_rows_accumulate (core/ops/linear.h).
void column_sums_accumulate(float* db, const float* dy, int64_t n, int64_t ld, int64_t c0, int64_t c1) {
  for (int64_t b0 = c0; b0 < c1; b0 += 64) {
    const int64_t b1 = std::min(c1, b0 + 64);
    float acc[64] = {0};
    for (int64_t r = 0; r < n; ++r) {
      const float* row = dy + r * ld;
      for (int64_t c = b0; c < b1; ++c) acc[c - b0] += row[c];
    }
    for (int64_t c = b0; c < b1; ++c) db[c] += acc[c - b0];
  }
}

// The weight gradient's products read dW_g[p, :] += sum_r A[r, p] B[r, :] over the group's rows r:
// A = dy and B = x when out_in (dW [out, in]), A = x and B = dy otherwise (dW [in, out]). Each tile
// computes a block of dW's rows, dense, as one product with K = the group's rows.
//
// Under bf16/fp16 the operands are low-precision copies made once per call (instead of converting
// x in every tile, as gemm_mixed would), dense for every product, so gemm_bf16 runs oneDNN's fast
// kernels on them without copying them again into its per-shape plan buffers:
//   A in chunks of `width` of its columns: chunk c holds A[:, c0:c0+w] for all groups' padded
//     rows (row stride w); the tile's product reads it transposed (TN, as linear_bwd_weight's);
//   B dense, each group's rows from its padded base row.
// (Copying A transposed instead, for NN products, made the products up to 13% faster, 3% slower on
// one shape, but the copy, then a transposition, 3.4-4.5x slower: 4.9 against 1.1 ms for x of
// 4096 x 1024 on one core, more than the products gained.)
// Each group's rows are padded with zero rows to a multiple of kPadRows, so K takes one of
// R / kPadRows + 1 values whatever the routing: gemm_bf16 caches a primitive per shape and thread,
// and without the padding every new expert row count of every step would JIT a new one (1-2 ms
// each, measured) and keep it. The zero rows add exact zeros to the sums.
constexpr int64_t kPadRows = 32;

struct LowOperands {
  ColumnChunks a;  // A's chunks (chunk c: base[groups] x a.cols(c) elements)
  const std::byte* a_data = nullptr;
  const std::byte* b_data = nullptr;
  int64_t b_cols = 0;
  std::vector<int64_t> base;  // group g's first padded row; base[groups] = the total
};

int64_t padded(int64_t n) { return (n + kPadRows - 1) / kPadRows * kPadRows; }

// dst[0, cols) = src's row converted (or, when src_low is given, that copy of the same values
// copied); a pad row (src null) is zeros.
template <typename E, typename To>
void low_row(E* dst, const float* src, const E* src_low, int64_t cols, To to) {
  if (src_low)
    std::copy(src_low, src_low + cols, dst);
  else if (src)
    for (int64_t c = 0; c < cols; ++c) dst[c] = to(src[c]);
  else
    std::fill(dst, dst + cols, E{});
}

// Fills `o` (its base and chunks already set) from A and B (fp32, or, for the one given as a_low or
// b_low, the low-precision copy of the same values: dy_low), in the calling thread's buffers,
// parallel over the padded rows.
template <typename E, typename To>
void make_low_operands(LowOperands& o, std::vector<std::byte>& a_buf, std::vector<std::byte>& b_buf,
                       const float* a, const void* a_low, const float* b, const void* b_low, const int64_t* offsets,
                       int64_t groups, To to) {
  const int64_t total = o.base[groups], a_cols = o.a.ld, b_cols = o.b_cols;
  a_buf.resize(std::max(a_buf.size(), static_cast<size_t>(total * a_cols) * sizeof(E)));
  b_buf.resize(std::max(b_buf.size(), static_cast<size_t>(total * b_cols) * sizeof(E)));
  E* ad = reinterpret_cast<E*>(a_buf.data());
  E* bd = reinterpret_cast<E*>(b_buf.data());
  const E* al = static_cast<const E*>(a_low);
  const E* bl = static_cast<const E*>(b_low);
#pragma omp parallel for schedule(static) if (parallel_worth(total * (a_cols + b_cols)))
  for (int64_t p = 0; p < total; ++p) {
    const int64_t g = std::upper_bound(o.base.begin(), o.base.begin() + groups + 1, p) - o.base.begin() - 1;
    const int64_t r = offsets[g] + p - o.base[g];  // the source row,
    const bool pad = r >= offsets[g + 1];           // none in the padding
    for (int64_t c = 0; c < o.a.count(); ++c) {
      const int64_t w = o.a.cols(c), c0 = o.a.begin(c);
      low_row(ad + o.a.offset(c) + p * w, pad ? nullptr : a + r * a_cols + c0,
              pad || !al ? nullptr : al + r * a_cols + c0, w, to);
    }
    low_row(bd + p * b_cols, pad ? nullptr : b + r * b_cols, pad || !bl ? nullptr : bl + r * b_cols, b_cols, to);
  }
  o.a_data = a_buf.data();
  o.b_data = b_buf.data();
}

LowOperands low_operands(ComputeDtype d, const float* a, const void* a_low, int64_t a_cols, const float* b,
                         const void* b_low, int64_t b_cols, const int64_t* offsets, int64_t groups, int64_t width) {
  thread_local std::vector<std::byte> a_buf, b_buf;
  LowOperands o;
  o.base.assign(1, 0);
  for (int64_t g = 0; g < groups; ++g) o.base.push_back(o.base.back() + padded(offsets[g + 1] - offsets[g]));
  o.a = ColumnChunks{o.base.back(), a_cols, width};
  o.b_cols = b_cols;
  const auto to_bf16 = [](float v) { return float_to_bf16(v); };
  const auto to_fp16 = [](float v) { return round_to_fp16(v); };
  if (d == ComputeDtype::kBFloat16)
    make_low_operands<bf16>(o, a_buf, b_buf, a, a_low, b, b_low, offsets, groups, to_bf16);
  else
    make_low_operands<float>(o, a_buf, b_buf, a, a_low, b, b_low, offsets, groups, to_fp16);
  return o;
}

// dW_g[p0:p1, :] += A_g[:, p0:p1]^T B_g (see above) over the group's n rows (r0 its first), into
// dW_g's rows (b_cols wide).
void weight_gradient_rows(float* dw_g, const float* a, int64_t a_cols, const float* b, int64_t b_cols,
                          const LowOperands* low, ComputeDtype d, int64_t g, int64_t r0, int64_t n, int64_t p0,
                          int64_t p1) {
  const int64_t m = p1 - p0;
  float* c = dw_g + p0 * b_cols;
  if (d == ComputeDtype::kFloat32) {
    gemm(Trans::kYes, Trans::kNo, m, b_cols, n, 1.0f, a + r0 * a_cols + p0, a_cols, b + r0 * b_cols, b_cols, 1.0f, c,
         b_cols);
    return;
  }
  const int64_t base = low->base[g], kp = low->base[g + 1] - base;
  const int64_t e = low_copy_element_bytes(d);
  const void* a_low = low->a_data + (low->a.offset(p0 / low->a.width) + base * m) * e;
  const void* b_low = low->b_data + base * b_cols * e;
  gemm_mixed(d, Trans::kYes, Trans::kNo, m, b_cols, kp, 1.0f, nullptr, a_low, m, nullptr, b_low, b_cols, 1.0f, c,
             b_cols, false);
}

}  // namespace

Weight expert_weight(const Weight& w, int64_t w_stride, int64_t g) {
  Weight r = w;
  r.f32 = w.f32 + g * w_stride;
  r.low = low_at(w.dtype, w.low, g * w_stride);
  return r;
}

void grouped_linear_fwd(float* y, const float* x, const Weight& w, int64_t w_stride, const float* b,
                        const int64_t* offsets, int64_t groups, int64_t in, int64_t out, GroupedTiles tiles) {
  GF_OP_SPAN("gemm", "grouped linear fwd");
  check_args(offsets, groups, in, out, tiles);
  const std::vector<Tile>& ts = row_tiles(offsets, groups, tiles.rows);
  const int64_t nt = static_cast<int64_t>(ts.size());
  // Not gated by parallel_worth: each item calls a GEMM, which outside a team could take threads of its own
  // (core/math/parallel_worth.h).
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < nt; ++i) {
    const Tile& t = ts[i];
    linear_fwd(y + t.begin * out, x + t.begin * in, expert_weight(w, w_stride, t.g), b ? b + t.g * out : nullptr,
               t.end - t.begin, in, out);
  }
}

void grouped_linear_bwd_input(float* dx, const float* dy, const Weight& w, int64_t w_stride, const int64_t* offsets,
                              int64_t groups, int64_t in, int64_t out, const void* dy_low, GroupedTiles tiles) {
  GF_OP_SPAN("gemm", "grouped linear bwd input");
  check_args(offsets, groups, in, out, tiles);
  const std::vector<Tile>& ts = row_tiles(offsets, groups, tiles.rows);
  const int64_t nt = static_cast<int64_t>(ts.size());
  // Not gated by parallel_worth: each item calls a GEMM, which outside a team could take threads of its own
  // (core/math/parallel_worth.h).
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < nt; ++i) {
    const Tile& t = ts[i];
    linear_bwd_input(dx + t.begin * in, dy + t.begin * out, expert_weight(w, w_stride, t.g), t.end - t.begin, in, out,
                     0.0f, low_at(w.dtype, dy_low, t.begin * out));
  }
}

void grouped_linear_bwd_weight(float* dw, float* db, const float* dy, const float* x, const Weight& w,
                               int64_t w_stride, const int64_t* offsets, int64_t groups, int64_t in, int64_t out,
                               const void* dy_low, GroupedTiles tiles) {
  GF_OP_SPAN("gemm", "grouped linear bwd weight");
  check_args(offsets, groups, in, out, tiles);
  const ComputeDtype d = w.dtype;
  // dW_g[p, :] += sum_r A[r, p] B[r, :]: A = dy, B = x for [out, in]; A = x, B = dy for [in, out].
  const float* a = w.out_in ? dy : x;
  const float* b = w.out_in ? x : dy;
  const int64_t a_cols = w.out_in ? out : in, b_cols = w.out_in ? in : out;
  LowOperands low;
  if (d != ComputeDtype::kFloat32)
    low = low_operands(d, a, w.out_in ? dy_low : nullptr, a_cols, b, w.out_in ? nullptr : dy_low, b_cols, offsets,
                       groups, tiles.weight_rows);
  const std::vector<Tile>& ts = weight_tiles(offsets, groups, a_cols, tiles.weight_rows);
  const int64_t nt = static_cast<int64_t>(ts.size());
  // Not gated by parallel_worth: each item calls a GEMM, which outside a team could take threads of its own
  // (core/math/parallel_worth.h).
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < nt; ++i) {
    const Tile& t = ts[i];
    const int64_t r0 = offsets[t.g], n = offsets[t.g + 1] - r0;
    weight_gradient_rows(dw + t.g * w_stride, a, a_cols, b, b_cols, &low, d, t.g, r0, n, t.begin, t.end);
    // db_g: with dW [out, in] a tile's rows are output columns; with [in, out] the first tile sums
    // all of them (n x out additions against its product's 2 n x out x tiles.weight_rows FLOPs).
    if (db && w.out_in) column_sums_accumulate(db + t.g * out, dy + r0 * out, n, out, t.begin, t.end);
    if (db && !w.out_in && t.begin == 0) column_sums_accumulate(db + t.g * out, dy + r0 * out, n, out, 0, out);
  }
}

void grouped_linear_fwd_loop(float* y, const float* x, const Weight& w, int64_t w_stride, const float* b,
                             const int64_t* offsets, int64_t groups, int64_t in, int64_t out) {
  check_args(offsets, groups, in, out, GroupedTiles{});
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t r = offsets[g];
    linear_fwd(y + r * out, x + r * in, expert_weight(w, w_stride, g), b ? b + g * out : nullptr, offsets[g + 1] - r,
               in, out);
  }
}

void grouped_linear_bwd_input_loop(float* dx, const float* dy, const Weight& w, int64_t w_stride,
                                   const int64_t* offsets, int64_t groups, int64_t in, int64_t out,
                                   const void* dy_low) {
  check_args(offsets, groups, in, out, GroupedTiles{});
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t r = offsets[g];
    linear_bwd_input(dx + r * in, dy + r * out, expert_weight(w, w_stride, g), offsets[g + 1] - r, in, out, 0.0f,
                     low_at(w.dtype, dy_low, r * out));
  }
}

void grouped_linear_bwd_weight_loop(float* dw, float* db, const float* dy, const float* x, const Weight& w,
                                    int64_t w_stride, const int64_t* offsets, int64_t groups, int64_t in, int64_t out,
                                    const void* dy_low) {
  check_args(offsets, groups, in, out, GroupedTiles{});
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t r = offsets[g];
    linear_bwd_weight(dw + g * w_stride, db ? db + g * out : nullptr, dy + r * out, x + r * in,
                      expert_weight(w, w_stride, g), offsets[g + 1] - r, in, out, low_at(w.dtype, dy_low, r * out));
  }
}

}  // namespace gf::ops
