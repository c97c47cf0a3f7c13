// A bf16 step keeps the MLP's up product and activation in bf16 only, as PyTorch's autocast does
// (MlpBlock::keeps_bf16): the activation is computed in fp32 from the widened bf16 up product and
// written rounded, its backward reads the same widened values, and the down projection's products
// read the kept activation instead of rounding an fp32 copy per call. The norms' outputs that only bf16
// products read are kept the same way (TransformerLayer::ln1_keeps_bf16): the norm writes its fp32 output
// rounded. Each must give the bits the fp32 arithmetic on those values gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/math/aligned_buffer.h"
#include "core/math/mixed_precision.h"
#include "core/ops/activation.h"
#include "core/ops/layernorm.h"
#include "core/ops/linear.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/swiglu.h"
#include "models/arch/gpt2.h"
#include "tests/random_values.h"
#include "tests/tiny_model.h"

namespace gf {
namespace {

using test_values::normal_values;

// Bits of the bf16 values of an fp32 buffer, and of a bf16 buffer.
std::vector<uint16_t> rounded_bits(const float* x, int64_t n) {
  std::vector<uint16_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = float_to_bf16(x[i]).bits;
  return out;
}
std::vector<uint16_t> bits(const bf16* x, int64_t n) {
  std::vector<uint16_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = x[i].bits;
  return out;
}

// The up product written in bf16 by oneDNN is the rounding of the fp32 product with the bias in the
// accumulator (gemm_bf16_bias), in both layouts of the weight and without a bias, on the model's kind
// of shapes (rows x ffn from rows x hidden) and an odd one.
TEST(Bf16Activation, AProductWrittenInBf16IsTheFp32ProductRounded) {
  struct Shape {
    int64_t M, N, K;
  };
  for (const Shape sh : {Shape{256, 512, 128}, Shape{37, 96, 53}}) {
    const std::vector<float> a = normal_values(sh.M * sh.K, 1.0f, 31), w = normal_values(sh.K * sh.N, 0.2f, 32),
                             bias = normal_values(sh.N, 0.5f, 33);
    std::vector<bf16> a16(a.size()), w16(w.size());
    make_low_copy(ComputeDtype::kBFloat16, a16.data(), a.data(), static_cast<int64_t>(a.size()));
    make_low_copy(ComputeDtype::kBFloat16, w16.data(), w.data(), static_cast<int64_t>(w.size()));
    for (const Trans tw : {Trans::kNo, Trans::kYes}) {
      for (const bool with_bias : {true, false}) {
        const int64_t ldw = tw == Trans::kNo ? sh.N : sh.K;
        std::vector<float> c32(static_cast<size_t>(sh.M * sh.N));
        std::vector<bf16> c16(c32.size());
        if (with_bias) {
          gemm_bf16_bias(Trans::kNo, tw, sh.M, sh.N, sh.K, 1.0f, a16.data(), sh.K, w16.data(), ldw, bias.data(),
                         c32.data(), sh.N);
        } else {
          gemm_bf16(Trans::kNo, tw, sh.M, sh.N, sh.K, 1.0f, a16.data(), sh.K, w16.data(), ldw, 0.0f, c32.data(), sh.N);
        }
        gemm_bf16_to_bf16(Trans::kNo, tw, sh.M, sh.N, sh.K, a16.data(), sh.K, w16.data(), ldw,
                          with_bias ? bias.data() : nullptr, c16.data());
        EXPECT_EQ(bits(c16.data(), sh.M * sh.N), rounded_bits(c32.data(), sh.M * sh.N))
            << sh.M << "x" << sh.N << "x" << sh.K << (tw == Trans::kYes ? " [out, in]" : " [in, out]")
            << (with_bias ? " with bias" : "");
      }
    }
  }
}

// From bf16 inputs (the kept up product, and in the backward the bf16 output gradient): forward and backward
// are the fp32 ones on the widened values, written rounded.
TEST(Bf16Activation, FromBf16InputsTheyAreTheFp32OpsOnTheWidenedValues) {
  const int64_t n = 3 * 4096 + 37;
  const std::vector<float> x = normal_values(n, 2.0f, 13), dy = normal_values(n, 1.0f, 14);
  std::vector<bf16> x16(static_cast<size_t>(n)), dy16(static_cast<size_t>(n));
  std::vector<float> xw(static_cast<size_t>(n)), dyw(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    x16[k] = float_to_bf16(x[k]);
    xw[k] = bf16_to_float(x16[k]);
    dy16[k] = float_to_bf16(dy[k]);
    dyw[k] = bf16_to_float(dy16[k]);
  }
  for (const ops::Activation a : {ops::Activation::kGelu, ops::Activation::kGeluNew, ops::Activation::kFastGelu}) {
    AlignedBuffer<float> y32(static_cast<size_t>(n));
    std::vector<bf16> y16(static_cast<size_t>(n));
    ops::activation_fwd<float>(a, y32.data(), xw.data(), n);
    ops::activation_fwd_bf16(a, y16.data(), x16.data(), n);
    EXPECT_EQ(bits(y16.data(), n), rounded_bits(y32.data(), n)) << ops::activation_name(a) << " forward";
    // The float backward writes into a 64-byte aligned gradient, as the bf16 one into its aligned block: Eigen
    // computes the elements before an output's first 64-byte boundary on its scalar path, whose exp and erf
    // can differ from the vector ones in the last bit, so two outputs of different alignment need not agree.
    AlignedBuffer<float> d32(static_cast<size_t>(n));
    std::vector<bf16> d16(static_cast<size_t>(n));
    ops::activation_bwd<float>(a, d32.data(), dyw.data(), xw.data(), n, false);
    ops::activation_bwd_bf16(a, d16.data(), dy16.data(), x16.data(), n);
    EXPECT_EQ(bits(d16.data(), n), rounded_bits(d32.data(), n)) << ops::activation_name(a) << " backward";
    EXPECT_GT(std::count_if(d16.begin(), d16.end(), [](bf16 v) { return (v.bits & 0x7fffu) != 0; }), n / 2)
        << "the backward wrote mostly zeros";
  }
  const int64_t rows = 37, cols = 200;
  std::vector<bf16> gu16(static_cast<size_t>(rows * 2 * cols)), dh16(static_cast<size_t>(rows * cols));
  std::vector<float> guw(gu16.size()), dhw(dh16.size());
  const std::vector<float> gu = normal_values(rows * 2 * cols, 2.0f, 16), dh = normal_values(rows * cols, 1.0f, 17);
  for (size_t i = 0; i < gu.size(); ++i) {
    gu16[i] = float_to_bf16(gu[i]);
    guw[i] = bf16_to_float(gu16[i]);
  }
  for (size_t i = 0; i < dh.size(); ++i) {
    dh16[i] = float_to_bf16(dh[i]);
    dhw[i] = bf16_to_float(dh16[i]);
  }
  AlignedBuffer<float> h32(static_cast<size_t>(rows * cols));
  std::vector<bf16> h16(static_cast<size_t>(rows * cols));
  ops::swiglu_fwd<float>(h32.data(), guw.data(), guw.data() + cols, rows, cols, 2 * cols);
  ops::swiglu_fwd_bf16(h16.data(), gu16.data(), gu16.data() + cols, rows, cols, 2 * cols);
  EXPECT_EQ(bits(h16.data(), rows * cols), rounded_bits(h32.data(), rows * cols)) << "swiglu forward";
  std::vector<float> dgu32(gu.size(), std::nanf(""));
  std::vector<bf16> dgu16(gu.size(), bf16{0x7fc0});
  ops::swiglu_bwd<float>(dgu32.data(), dgu32.data() + cols, dhw.data(), guw.data(), guw.data() + cols, rows, cols,
                         2 * cols, false);
  ops::swiglu_bwd_bf16(dgu16.data(), dgu16.data() + cols, dh16.data(), gu16.data(), gu16.data() + cols, rows, cols,
                       2 * cols);
  EXPECT_EQ(bits(dgu16.data(), rows * 2 * cols), rounded_bits(dgu32.data(), rows * 2 * cols)) << "swiglu backward";
  EXPECT_EQ(std::count_if(dgu16.begin(), dgu16.end(), [](bf16 v) { return (v.bits & 0x7fffu) > 0x7f80u; }), 0)
      << "a NaN left: the backward did not write every gradient";
}

// The fp32 MLP's backward has the activation write dh (accumulate false) instead of zeroing dh and adding
// into it. Writing must give what adding into zeros gives, value for value (a zero's sign aside: +0
// plus -0 is +0), and must not read dh: it starts as NaN here. Some gradients are exactly zero (dy 0).
TEST(Bf16Activation, Fp32BackwardsWritingGiveTheValuesOfAddingIntoZeros) {
  const auto same_values = [](const float* a, const float* b, int64_t n, const std::string& what) {
    int64_t differ = 0, zeros = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (a[i] == 0.0f) ++zeros;
      const bool same = a[i] == 0.0f ? b[i] == 0.0f : std::memcmp(&a[i], &b[i], sizeof(float)) == 0;
      if (!same) ++differ;
    }
    EXPECT_EQ(differ, 0) << what;
    EXPECT_GT(zeros, 0) << what << ": no zero gradient tried";
    EXPECT_LT(zeros, n / 4) << what << ": mostly zeros";
  };
  const float nan = std::nanf("");
  const int64_t n = 3 * 4096 + 123;
  std::vector<float> x = normal_values(n, 2.0f, 41), dy = normal_values(n, 1.0f, 42);
  for (int64_t i = 0; i < n; i += 97) dy[static_cast<size_t>(i)] = 0.0f;
  for (const ops::Activation a : {ops::Activation::kGelu, ops::Activation::kGeluNew, ops::Activation::kFastGelu}) {
    AlignedBuffer<float> added(static_cast<size_t>(n)), written(static_cast<size_t>(n));
    std::fill(added.data(), added.data() + n, 0.0f);
    std::fill(written.data(), written.data() + n, nan);
    ops::activation_bwd<float>(a, added.data(), dy.data(), x.data(), n);
    ops::activation_bwd<float>(a, written.data(), dy.data(), x.data(), n, false);
    same_values(added.data(), written.data(), n, std::string(ops::activation_name(a)) + " fp32");
  }
  const int64_t rows = 37, cols = 200;
  const std::vector<float> gu = normal_values(rows * 2 * cols, 2.0f, 43);
  std::vector<float> dh = normal_values(rows * cols, 1.0f, 44);
  for (int64_t i = 0; i < rows * cols; i += 89) dh[static_cast<size_t>(i)] = 0.0f;
  std::vector<float> added(gu.size(), 0.0f), written(gu.size(), nan);
  ops::swiglu_bwd<float>(added.data(), added.data() + cols, dh.data(), gu.data(), gu.data() + cols, rows, cols,
                         2 * cols);
  ops::swiglu_bwd<float>(written.data(), written.data() + cols, dh.data(), gu.data(), gu.data() + cols, rows, cols,
                         2 * cols, false);
  same_values(added.data(), written.data(), rows * 2 * cols, "swiglu fp32");
}

// LayerNorm and RMSNorm with a bf16 output write the rounding of their fp32 output, and the same statistics,
// on the model's widths and odd ones, with rows of large and of tiny values (where rounding to bf16 meets
// subnormals and the +-Inf of an overflow).
TEST(Bf16Activation, NormsWriteTheirFp32OutputRounded) {
  for (const int64_t dim : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{100}, int64_t{768}, int64_t{1031}}) {
    const int64_t rows = 37;
    std::vector<float> x = normal_values(rows * dim, 1.0f, 31 + static_cast<uint64_t>(dim));
    for (int64_t i = 0; i < dim; ++i) {
      x[static_cast<size_t>(i)] *= 3e4f;           // row 0: large values
      x[static_cast<size_t>(dim + i)] *= 1e-30f;  // row 1: tiny values
    }
    std::vector<float> w = normal_values(dim, 1.0f, 41), b = normal_values(dim, 0.5f, 42);
    if (dim > 3) {
      w[0] = 3e38f;     // an output that overflows to +-Inf
      w[1] = 1e-39f;    // subnormal outputs
      b[1] = 0.0f;
    }
    const std::string what = "dim " + std::to_string(dim);
    std::vector<float> y(static_cast<size_t>(rows * dim)), mean(rows), rstd(rows), mean2(rows), rstd2(rows);
    std::vector<bf16> y16(y.size());
    ops::layernorm_fwd<float>(y.data(), {mean.data(), rstd.data()}, x.data(), w.data(), b.data(), rows, dim, 1e-5f);
    ops::layernorm_fwd_bf16(y16.data(), {mean2.data(), rstd2.data()}, x.data(), w.data(), b.data(), rows, dim, 1e-5f);
    EXPECT_EQ(bits(y16.data(), rows * dim), rounded_bits(y.data(), rows * dim)) << what << ": layernorm";
    EXPECT_EQ(mean, mean2) << what;
    EXPECT_EQ(rstd, rstd2) << what;
    ops::rmsnorm_fwd<float>(y.data(), rstd.data(), x.data(), w.data(), rows, dim, 1e-6f);
    ops::rmsnorm_fwd_bf16(y16.data(), rstd2.data(), x.data(), w.data(), rows, dim, 1e-6f);
    EXPECT_EQ(bits(y16.data(), rows * dim), rounded_bits(y.data(), rows * dim)) << what << ": rmsnorm";
    EXPECT_EQ(rstd, rstd2) << what;
    if (dim > 3) {  // the cases are covered: some output of column 0 overflows, some of column 1 is subnormal
      int inf = 0, subnormal = 0;
      for (int64_t row = 0; row < rows; ++row) {
        inf += std::isinf(y[static_cast<size_t>(row * dim)]);
        subnormal += std::fpclassify(y[static_cast<size_t>(row * dim + 1)]) == FP_SUBNORMAL;
      }
      EXPECT_GT(inf, 0) << what;
      EXPECT_GT(subnormal, 0) << what;
    }
  }
}

// The down projection with its input given as the kept bf16 copy (x null) against the same layer
// rounding the fp32 input per call: forward, the fused backward and the weight pass, in both weight
// layouts, with and without a bias.
TEST(Bf16Activation, ALinearReadingAKeptBf16InputGivesTheSameBits) {
  const ComputeDtype d = ComputeDtype::kBFloat16;
  const int64_t n = 48, in = 96, out = 40;
  const std::vector<float> x = normal_values(n * in, 1.0f, 21), w = normal_values(in * out, 0.2f, 22),
                           b = normal_values(out, 0.1f, 23), dy = normal_values(n * out, 1.0f, 24);
  std::vector<bf16> x_low(static_cast<size_t>(n * in)), w_low(static_cast<size_t>(in * out));
  make_low_copy(d, x_low.data(), x.data(), n * in);
  make_low_copy(d, w_low.data(), w.data(), in * out);
  for (const bool out_in : {false, true}) {
    for (const bool bias : {false, true}) {
      const std::string what = std::string(out_in ? "[out, in]" : "[in, out]") + (bias ? " with bias" : "");
      const Weight wt = Weight(w.data(), d, w_low.data()).transposed_layout(out_in);
      const float* bp = bias ? b.data() : nullptr;
      std::vector<float> y_a(static_cast<size_t>(n * out)), y_b(y_a.size());
      ops::linear_fwd(y_a.data(), x.data(), wt, bp, n, in, out);
      ops::linear_fwd(y_b.data(), nullptr, wt, bp, n, in, out, x_low.data());
      EXPECT_EQ(std::memcmp(y_a.data(), y_b.data(), y_a.size() * sizeof(float)), 0) << what << ": forward";

      // Gradients accumulate onto nonzero values, as a step's second micro-batch does.
      const std::vector<float> dw0 = normal_values(in * out, 0.5f, 25), db0 = normal_values(out, 0.5f, 26);
      std::vector<float> dx_a(static_cast<size_t>(n * in)), dx_b(dx_a.size()), dw_a = dw0, dw_b = dw0, db_a = db0,
                                                                                 db_b = db0;
      ops::linear_bwd(dx_a.data(), dw_a.data(), bias ? db_a.data() : nullptr, dy.data(), x.data(), wt, n, in, out, 0.0f);
      ops::linear_bwd(dx_b.data(), dw_b.data(), bias ? db_b.data() : nullptr, dy.data(), nullptr, wt, n, in, out, 0.0f,
                      x_low.data());
      EXPECT_EQ(std::memcmp(dx_a.data(), dx_b.data(), dx_a.size() * sizeof(float)), 0) << what << ": fused dx";
      EXPECT_EQ(std::memcmp(dw_a.data(), dw_b.data(), dw_a.size() * sizeof(float)), 0) << what << ": fused dW";
      EXPECT_EQ(std::memcmp(db_a.data(), db_b.data(), db_a.size() * sizeof(float)), 0) << what << ": fused db";
      EXPECT_NE(std::memcmp(dw_a.data(), dw0.data(), dw0.size() * sizeof(float)), 0) << what << ": dW unchanged";

      dw_a = dw_b = dw0;
      ops::linear_bwd_weight(dw_a.data(), nullptr, dy.data(), x.data(), wt, n, in, out);
      ops::linear_bwd_weight(dw_b.data(), nullptr, dy.data(), nullptr, wt, n, in, out, nullptr, x_low.data());
      EXPECT_EQ(std::memcmp(dw_a.data(), dw_b.data(), dw_a.size() * sizeof(float)), 0) << what << ": weight pass";
    }
  }
}

// The plan holds each layer's up product and activation, and its two norm outputs, at 2 bytes an element
// under bf16, and the backward's scratch for their gradients (dact, dh: one N x ffn each, shared by the
// layers) too: a bf16 model's activations are an fp32 one's less half of every layer's two N x ffn and two
// N x C buffers and of the two N x ffn gradients, plus the bf16 copy of the logits' gradient that only
// low-precision steps take (each buffer padded to 16 floats, BufferPlan). oneDNN writes the up product in
// bf16 itself: no fp32 buffer holds it.
TEST(Bf16Activation, ThePlanKeepsTheMlpAndNormBuffersAtTwoBytesAnElement) {
  const ModelConfig c = test::tiny_model({.vocab = 97, .seq = 24, .hidden = 32, .layers = 3, .heads = 4});
  const int64_t B = 2, N = B * c.seq_length, F = 4 * c.hidden_size;
  ParallelContext ctx = ParallelContext::single();
  ModelLayout bf;
  bf.compute = ComputeDtype::kBFloat16;
  GPT2LMHeadModel f32(c, ModelLayout{}, B, ctx), b16(c, bf, B, ctx);
  auto pad = [](int64_t floats) { return (floats + 15) / 16 * 16; };
  const int64_t C = c.hidden_size;
  const int64_t kept_saved = 2 * c.num_layers * (pad(N * F) - pad((N * F + 1) / 2)) * 4 +
                             2 * c.num_layers * (pad(N * C) - pad((N * C + 1) / 2)) * 4 +
                             2 * (pad(N * F) - pad((N * F + 1) / 2)) * 4;
  const int64_t dlogits_low = pad((N * f32.logits_ld() * 2 + 3) / 4) * 4;
  EXPECT_EQ(f32.activation_bytes() - b16.activation_bytes(), kept_saved - dlogits_low);
}

}  // namespace
}  // namespace gf
