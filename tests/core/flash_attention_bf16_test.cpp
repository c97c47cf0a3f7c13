// The fused attention with bf16 products (FlashWorkspace::bf16_products, the model's path under
// compute_dtype: bfloat16) against exact attention in double on the same bf16 q, k, v and output
// gradient, held to bounds derived from where it rounds:
//
// The products take bf16 inputs and accumulate in fp32. q, k, v and dy are bf16 values already, so
// rounding them is exact except dy, which the test gives as fp32 values the kernel must round (as
// the model's gradient is). What is rounded is one factor of each product term: the probabilities P
// (y = P V, dv = P^T dy), dy (dP = dy v^T, dv = P^T dy), and the score gradient dS (dq = dS k,
// dk = dS^T q). bf16 keeps 8 significand bits (7 stored), so rounding to nearest carries a relative
// error of at most u = 2^-8; a product of two rounded factors at most 2u + u^2. So, per element:
//   |y - y*|   <= u Sum_j P_ij |v_jd|                                  (P rounded, v exact)
//   |dv - dv*| <= (2u + u^2) Sum_i P_ij |dy_id|                       (P and dy rounded)
//   dS_ij = P_ij (dP_ij - D_i) scale with dP_ij off by at most u A_ij, A_ij = Sum_d |dy_id| |v_jd|,
//   and D_i = Sum_d dy_id y_id off by at most u Sum_d |dy_id| (|y_id| + 2u B_id), B = Sum_j P|v|,
//   then dS itself rounded (u |dS_ij|):
//   |dq - dq*| <= Sum_j |k_jd| E_ij,  |dk - dk*| <= Sum_i |q_id| E_ij,
//   E_ij = u |dS*_ij| + P_ij scale (u A_ij + u Sum_d |dy_id| (|y_id| + 2u B_id)),
// each checked at twice its value for what it leaves out (the fp32 accumulation's K 2^-24, about
// 2^-16 of a term here, P's own fp32 rounding, and products of two first-order errors). The check also asserts that
// the results are not the fp32 kernel's: the bf16 path rounded something.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/math/gemm_bf16.h"
#include "core/ops/attention.h"
#include "core/ops/flash_attention.h"

namespace gf::ops {
namespace {

float to_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

struct Exact {
  std::vector<double> y, dq, dk, dv, bound_y, bound_dq, bound_dk, bound_dv;
};

// Causal attention of one batch row of packed qkv [T, (H + 2 KV) D] in double (query head h reads key/value
// head h / (H / KV); row i sees keys lo[i]..i, lo empty: 0..i), its gradients for dy, and the bounds above.
// dq and y are [T, H D]; dk and dv [T, KV D], summed over each group's query heads.
Exact exact(const float* qkv, const float* dy, int64_t T, int64_t H, int64_t KV, int64_t D,
            const std::vector<int32_t>& lo = {}) {
  const int64_t C = H * D, CK = KV * D, W = C + 2 * CK, G = H / KV;
  const double u = std::ldexp(1.0, -8), scale = 1.0 / std::sqrt(static_cast<double>(D));
  Exact e;
  for (auto* v : {&e.y, &e.dq, &e.bound_y, &e.bound_dq}) v->assign(static_cast<size_t>(T * C), 0.0);
  for (auto* v : {&e.dk, &e.dv, &e.bound_dk, &e.bound_dv}) v->assign(static_cast<size_t>(T * CK), 0.0);
  const auto first = [&](int64_t i) { return lo.empty() ? int64_t{0} : static_cast<int64_t>(lo[i]); };
  for (int64_t h = 0; h < H; ++h) {
    const int64_t kh = h / G;
    const auto q = [&](int64_t i, int64_t d) { return static_cast<double>(qkv[i * W + h * D + d]); };
    const auto k = [&](int64_t i, int64_t d) { return static_cast<double>(qkv[i * W + C + kh * D + d]); };
    const auto v = [&](int64_t i, int64_t d) { return static_cast<double>(qkv[i * W + C + CK + kh * D + d]); };
    const auto g = [&](int64_t i, int64_t d) { return static_cast<double>(dy[i * C + h * D + d]); };
    std::vector<double> P(static_cast<size_t>(T * T), 0.0), Bs(static_cast<size_t>(T * D), 0.0);
    for (int64_t i = 0; i < T; ++i) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = first(i); j <= i; ++j) {
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += q(i, d) * k(j, d);
        P[i * T + j] = s * scale;
        mx = std::max(mx, P[i * T + j]);
      }
      double sum = 0;
      for (int64_t j = first(i); j <= i; ++j) sum += P[i * T + j] = std::exp(P[i * T + j] - mx);
      for (int64_t j = first(i); j <= i; ++j) P[i * T + j] /= sum;
      for (int64_t d = 0; d < D; ++d) {
        double y = 0, b = 0;
        for (int64_t j = first(i); j <= i; ++j) y += P[i * T + j] * v(j, d), b += P[i * T + j] * std::abs(v(j, d));
        e.y[i * C + h * D + d] = y;
        Bs[i * D + d] = b;
        e.bound_y[i * C + h * D + d] = 2 * u * b;
      }
    }
    for (int64_t i = 0; i < T; ++i) {
      double Di = 0, Di_err = 0;
      for (int64_t d = 0; d < D; ++d) {
        Di += g(i, d) * e.y[i * C + h * D + d];
        Di_err += u * std::abs(g(i, d)) * (std::abs(e.y[i * C + h * D + d]) + 2 * u * Bs[i * D + d]);
      }
      for (int64_t j = first(i); j <= i; ++j) {
        double dP = 0, A = 0;
        for (int64_t d = 0; d < D; ++d) dP += g(i, d) * v(j, d), A += std::abs(g(i, d)) * std::abs(v(j, d));
        const double p = P[i * T + j], dS = p * (dP - Di) * scale;
        const double E = 2 * (u * std::abs(dS) + p * scale * (u * A + Di_err));
        for (int64_t d = 0; d < D; ++d) {
          e.dq[i * C + h * D + d] += dS * k(j, d);
          e.dk[j * CK + kh * D + d] += dS * q(i, d);
          e.dv[j * CK + kh * D + d] += p * g(i, d);
          e.bound_dq[i * C + h * D + d] += std::abs(k(j, d)) * E;
          e.bound_dk[j * CK + kh * D + d] += std::abs(q(i, d)) * E;
          e.bound_dv[j * CK + kh * D + d] += 2 * (2 * u + u * u) * p * std::abs(g(i, d));
        }
      }
    }
  }
  return e;
}

// max |got - want| / bound over the elements (<= 1: within the bound).
double worst(const float* got, int64_t stride, int64_t off, const std::vector<double>& want,
             const std::vector<double>& bound, int64_t T, int64_t C) {
  double w = 0;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t c = 0; c < C; ++c) {
      const double err = std::abs(static_cast<double>(got[i * stride + off + c]) - want[i * C + c]);
      w = std::max(w, err / std::max(bound[i * C + c], 1e-30));
    }
  return w;
}

TEST(FlashAttentionBf16, WithinTheBoundsOfItsRoundingAndNotTheFp32Result) {
  if (!gemm_bf16_available()) GTEST_SKIP() << "built without oneDNN: gemm_bf16 is the fp32 gemm";
  const int64_t T = 200, H = 2, D = 64, C = H * D, W = 3 * C;
  std::mt19937 gen(21);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> qkv(static_cast<size_t>(T * W)), dy(static_cast<size_t>(T * C));
  for (float& x : qkv) x = to_bf16(nd(gen));  // mixed precision hands the core bf16 values
  for (float& x : dy) x = 0.01f * nd(gen);    // a gradient in fp32
  std::vector<float> dy_rounded(dy);
  for (float& x : dy_rounded) x = to_bf16(x);
  // The bound's dy is the unrounded one, which the kernel rounds: its error is in the bound's u A terms.
  const Exact e = exact(qkv.data(), dy.data(), T, H, H, D);
  const AttentionShape s{1, T, H, D};
  for (const FlashTiles tiles : {flash_tiles(true), FlashTiles{32, 48}}) {  // the model's; several key tiles
    SCOPED_TRACE(::testing::Message() << "tiles " << tiles.rows << "x" << tiles.cols);
    const int threads = omp_get_max_threads();
    std::vector<float> work(static_cast<size_t>(threads * flash_workspace_per_thread(s, tiles)));
    const FlashWorkspace<float> ws16{work.data(), threads, tiles, true}, ws32{work.data(), threads, tiles, false};
    std::vector<float> y(static_cast<size_t>(T * C)), lse(static_cast<size_t>(H * T)), dqkv(qkv.size(), 0.0f);
    std::vector<float> y32(y.size()), lse32(lse.size()), dqkv32(qkv.size(), 0.0f);
    const DropoutKey none{0.0f, 0, 0};
    flash_attention_fwd(y.data(), lse.data(), qkv.data(), s, none, ws16);
    flash_attention_bwd(dqkv.data(), dy.data(), qkv.data(), y.data(), lse.data(), s, none, ws16);
    flash_attention_fwd(y32.data(), lse32.data(), qkv.data(), s, none, ws32);
    flash_attention_bwd(dqkv32.data(), dy.data(), qkv.data(), y32.data(), lse32.data(), s, none, ws32);
    const double wy = worst(y.data(), C, 0, e.y, e.bound_y, T, C), wq = worst(dqkv.data(), W, 0, e.dq, e.bound_dq, T, C),
                 wk = worst(dqkv.data(), W, C, e.dk, e.bound_dk, T, C),
                 wv = worst(dqkv.data(), W, 2 * C, e.dv, e.bound_dv, T, C);
    std::printf("bf16 products, tiles %lldx%lld: error / bound: y %.3f, dq %.3f, dk %.3f, dv %.3f\n",
                static_cast<long long>(tiles.rows), static_cast<long long>(tiles.cols), wy, wq, wk, wv);
    EXPECT_LE(wy, 1.0);
    EXPECT_LE(wq, 1.0);
    EXPECT_LE(wk, 1.0);
    EXPECT_LE(wv, 1.0);
    // The fp32 kernel on the same inputs lies well inside the bounds too; the bf16 one must differ from it.
    EXPECT_NE(y, y32);
    EXPECT_NE(dqkv, dqkv32);
    // ... by about the rounding: the fp32 results are far closer to the exact ones.
    EXPECT_LT(worst(y32.data(), C, 0, e.y, e.bound_y, T, C), 0.05);
    EXPECT_LT(worst(dqkv32.data(), W, 2 * C, e.dv, e.bound_dv, T, C), 0.05);
  }
}

// The backward's bookkeeping under bf16 products (dense fp32 accumulators added into dqkv's strided columns
// once per query head and once per key/value group): grouped-query heads (4 query heads on 2 key/value
// heads, so dk and dv sum two heads' products), two batch rows, packed documents in the second
// (AttentionShape::key_lo), several key tiles, and a dqkv that is not zero on entry (flash_attention_bwd
// accumulates). Same bounds as above; what dqkv held before is subtracted, which adds at most one fp32
// rounding of the sum and one of the difference: 2^-23 (|before| + |after|) per element, added to the bound.
TEST(FlashAttentionBf16, GroupedHeadsPackedDocumentsAndAccumulation) {
  if (!gemm_bf16_available()) GTEST_SKIP() << "built without oneDNN: gemm_bf16 is the fp32 gemm";
  const int64_t B = 2, T = 150, H = 4, KV = 2, D = 64, C = H * D, CK = KV * D, W = C + 2 * CK;
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> qkv(static_cast<size_t>(B * T * W)), dy(static_cast<size_t>(B * T * C));
  for (float& x : qkv) x = to_bf16(nd(gen));
  for (float& x : dy) x = 0.01f * nd(gen);
  std::vector<int32_t> lo(static_cast<size_t>(B * T), 0);  // batch row 1: documents [0, 40), [40, 97), [97, 150)
  for (int64_t i = 0; i < T; ++i) lo[static_cast<size_t>(T + i)] = i < 40 ? 0 : i < 97 ? 40 : 97;
  std::vector<float> before(qkv.size());
  for (float& x : before) x = 0.001f * nd(gen);
  AttentionShape s{B, T, H, D};
  s.kv_heads = KV;
  s.key_lo = lo.data();
  const FlashTiles tiles{32, 48};
  const int threads = omp_get_max_threads();
  std::vector<float> work(static_cast<size_t>(threads * flash_workspace_per_thread(s, tiles)));
  const FlashWorkspace<float> ws{work.data(), threads, tiles, true};
  std::vector<float> y(static_cast<size_t>(B * T * C)), lse(static_cast<size_t>(B * H * T)), dqkv(before);
  const DropoutKey none{0.0f, 0, 0};
  flash_attention_fwd(y.data(), lse.data(), qkv.data(), s, none, ws);
  flash_attention_bwd(dqkv.data(), dy.data(), qkv.data(), y.data(), lse.data(), s, none, ws);
  for (int64_t b = 0; b < B; ++b) {
    SCOPED_TRACE(::testing::Message() << "batch row " << b);
    const std::vector<int32_t> doc = b == 0 ? std::vector<int32_t>{} : std::vector<int32_t>(lo.begin() + T, lo.end());
    Exact e = exact(qkv.data() + b * T * W, dy.data() + b * T * C, T, H, KV, D, doc);
    std::vector<float> got(static_cast<size_t>(T * W));
    for (int64_t i = 0; i < T * W; ++i) {
      const float x = dqkv[static_cast<size_t>(b * T * W + i)], x0 = before[static_cast<size_t>(b * T * W + i)];
      got[static_cast<size_t>(i)] = x - x0;
      const int64_t r = i / W, c = i % W;
      const double slack = std::ldexp(1.0, -23) * (std::abs(x) + std::abs(x0));
      if (c < C) e.bound_dq[static_cast<size_t>(r * C + c)] += slack;
      else if (c < C + CK) e.bound_dk[static_cast<size_t>(r * CK + c - C)] += slack;
      else e.bound_dv[static_cast<size_t>(r * CK + c - C - CK)] += slack;
    }
    const double wy = worst(y.data() + b * T * C, C, 0, e.y, e.bound_y, T, C);
    const double wq = worst(got.data(), W, 0, e.dq, e.bound_dq, T, C);
    const double wk = worst(got.data(), W, C, e.dk, e.bound_dk, T, CK);
    const double wv = worst(got.data(), W, C + CK, e.dv, e.bound_dv, T, CK);
    std::printf("grouped heads, batch row %lld: error / bound: y %.3f, dq %.3f, dk %.3f, dv %.3f\n",
                static_cast<long long>(b), wy, wq, wk, wv);
    EXPECT_LE(wy, 1.0);
    EXPECT_LE(wq, 1.0);
    EXPECT_LE(wk, 1.0);
    EXPECT_LE(wv, 1.0);
  }
}

// FlashWorkspace::bf16_scratch: a planned area of flash_bf16_scratch_floats takes the place of the
// gf::scratch buffers, bitwise the same results (the same roundings and products, elsewhere in memory),
// and the area is written; one value short of that, the area is left alone and the results are the same.
TEST(FlashAttentionBf16, PlannedScratchGivesTheSameResults) {
  if (!gemm_bf16_available()) GTEST_SKIP() << "built without oneDNN: gemm_bf16 is the fp32 gemm";
  const int64_t B = 2, T = 150, H = 4, KV = 2, D = 64, C = H * D, W = C + 2 * KV * D;
  std::mt19937 gen(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> qkv(static_cast<size_t>(B * T * W)), dy(static_cast<size_t>(B * T * C));
  for (float& x : qkv) x = to_bf16(nd(gen));
  for (float& x : dy) x = 0.01f * nd(gen);
  AttentionShape s{B, T, H, D};
  s.kv_heads = KV;
  const FlashTiles tiles{32, 48};
  const int threads = omp_get_max_threads();
  std::vector<float> work(static_cast<size_t>(threads * flash_workspace_per_thread(s, tiles)));
  const DropoutKey none{0.0f, 0, 0};
  const int64_t need = flash_bf16_scratch_floats(s, tiles, threads);
  struct Out {
    std::vector<float> y, lse, dqkv;
  };
  auto run = [&](float* area, int64_t floats) {
    FlashWorkspace<float> ws{work.data(), threads, tiles, true};
    ws.bf16_scratch = area;
    ws.bf16_scratch_floats = floats;
    Out o{std::vector<float>(static_cast<size_t>(B * T * C)), std::vector<float>(static_cast<size_t>(B * H * T)),
          std::vector<float>(qkv.size(), 0.0f)};
    flash_attention_fwd(o.y.data(), o.lse.data(), qkv.data(), s, none, ws);
    flash_attention_bwd(o.dqkv.data(), dy.data(), qkv.data(), o.y.data(), o.lse.data(), s, none, ws);
    return o;
  };
  const Out ref = run(nullptr, 0);
  const auto untouched = [](const std::vector<float>& a) {
    return std::all_of(a.begin(), a.end(), [](float x) { return std::isnan(x); });
  };
  std::vector<float> area(static_cast<size_t>(need), std::numeric_limits<float>::quiet_NaN());
  const Out planned = run(area.data(), need);
  EXPECT_FALSE(untouched(area));
  EXPECT_EQ(planned.y, ref.y);
  EXPECT_EQ(planned.lse, ref.lse);
  EXPECT_EQ(planned.dqkv, ref.dqkv);
  std::vector<float> short_area(static_cast<size_t>(need - 1), std::numeric_limits<float>::quiet_NaN());
  const Out fallback = run(short_area.data(), need - 1);
  EXPECT_TRUE(untouched(short_area));
  EXPECT_EQ(fallback.dqkv, ref.dqkv);
}

// q|k|v and y kept in bf16 (as a bf16 step's layers keep them) give the bits of the float entries given the
// same values as floats: y is the float forward's y rounded, lse the same, and the backward from the bf16 y
// is the float backward given that y widened; grouped heads, two batch rows, dropout, packed documents, a
// non-zero dqkv on entry, on the planned scratch and on gf::scratch. Without bf16 products the bf16 entry refuses.
TEST(FlashAttentionBf16, QkvAndOutputKeptInBf16GiveTheBitsOfTheSameValuesAsFloats) {
  if (!gemm_bf16_available()) GTEST_SKIP() << "built without oneDNN: gemm_bf16 is the fp32 gemm";
  const int64_t B = 2, T = 150, H = 4, KV = 2, D = 64, C = H * D, W = C + 2 * KV * D;
  std::mt19937 gen(19);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> qkv(static_cast<size_t>(B * T * W)), dy(static_cast<size_t>(B * T * C)),
      dqkv0(static_cast<size_t>(B * T * W));
  for (float& x : qkv) x = to_bf16(nd(gen));
  for (float& x : dy) x = 0.01f * nd(gen);
  for (float& x : dqkv0) x = 0.1f * nd(gen);
  std::vector<bf16> qkv16(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) qkv16[i] = float_to_bf16(qkv[i]);
  std::vector<int32_t> key_lo(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) key_lo[static_cast<size_t>(b * T + t)] = static_cast<int32_t>(t < 61 + b ? 0 : 61 + b);
  const FlashTiles tiles{32, 48};
  const int threads = omp_get_max_threads();
  std::vector<float> work(static_cast<size_t>(threads * flash_workspace_per_thread({B, T, H, D}, tiles)));
  for (const bool docs : {false, true})
    for (const bool planned : {false, true}) {
      AttentionShape s{B, T, H, D};
      s.kv_heads = KV;
      if (docs) s.key_lo = key_lo.data();
      const DropoutKey drop{0.1f, 5, 7};
      std::vector<float> area(static_cast<size_t>(flash_bf16_scratch_floats(s, tiles, threads)));
      FlashWorkspace<float> ws{work.data(), threads, tiles, true};
      if (planned) {
        ws.bf16_scratch = area.data();
        ws.bf16_scratch_floats = static_cast<int64_t>(area.size());
      }
      const std::string what = std::string(docs ? "packed documents" : "causal") + (planned ? ", planned" : "");
      std::vector<float> y_a(static_cast<size_t>(B * T * C)), lse_a(static_cast<size_t>(B * H * T)), lse_b(lse_a.size()),
          dqkv_a = dqkv0, dqkv_b = dqkv0;
      std::vector<bf16> y_b(y_a.size());
      flash_attention_fwd(y_a.data(), lse_a.data(), qkv.data(), s, drop, ws);
      flash_attention_fwd(y_b.data(), lse_b.data(), qkv16.data(), s, drop, ws);
      int64_t y_wrong = 0;
      for (size_t i = 0; i < y_a.size(); ++i) y_wrong += y_b[i].bits != float_to_bf16(y_a[i]).bits;
      EXPECT_EQ(y_wrong, 0) << what;
      EXPECT_EQ(lse_a, lse_b) << what;
      std::vector<float> y_widened(y_a.size());
      for (size_t i = 0; i < y_a.size(); ++i) y_widened[i] = bf16_to_float(y_b[i]);
      EXPECT_NE(y_widened, y_a) << what << ": y is rounded";
      flash_attention_bwd(dqkv_a.data(), dy.data(), qkv.data(), y_widened.data(), lse_a.data(), s, drop, ws);
      flash_attention_bwd(dqkv_b.data(), dy.data(), qkv16.data(), y_b.data(), lse_a.data(), s, drop, ws);
      EXPECT_EQ(dqkv_a, dqkv_b) << what;
      EXPECT_NE(dqkv_a, dqkv0) << what;
    }
  FlashWorkspace<float> fp32_products{work.data(), threads, tiles, false};
  std::vector<bf16> y(static_cast<size_t>(B * T * C));
  std::vector<float> lse(static_cast<size_t>(B * H * T));
  AttentionShape s{B, T, H, D};
  s.kv_heads = KV;
  EXPECT_THROW(flash_attention_fwd(y.data(), lse.data(), qkv16.data(), s, DropoutKey{0.0f, 0, 0}, fp32_products),
               std::invalid_argument);
}

}  // namespace
}  // namespace gf::ops
