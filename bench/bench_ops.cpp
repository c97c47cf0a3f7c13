// The non-GEMM work of one GPT-2 training step (tensor parallel 1, dropout 0 unless a row says
// otherwise), each piece timed on 1 and on 2 OpenMP threads: does it keep both cores busy?
//
//   build/bin/bench_ops [--threads 1,2] [--rounds 7] [--min-ms 20] [--models gpt2-tiny,gpt2-124M]
//                       [--filter TEXT]   (only the rows whose name contains TEXT)
//
// Each row calls what the step calls (core/ops/*, core/optim/adamw.h, GradientSync::global_sq_norm, the
// zeroing of the gradient arena in runner/train/trainer.cpp), on buffers of the step's shapes: B x T
// token rows, hidden C, FFN 4C, L layers, the 50257-token vocabulary padded to 50304, and the
// model's whole parameter arena (GPT2LMHeadModel::make_placement). A few loops that live in
// anonymous namespaces or inline in models/arch/gpt2.cpp and parallel/tensor_parallel.cpp (add_inplace,
// linear_fwd's bias broadcast, the token copy and range check, the loss sum, the memsets of the
// activation gradients before backward accumulates into them, layer_bwd's copy of dres_) are
// reproduced here as the step does them. One row that is not in the step shows what parallel_zero
// would make of the largest of those memsets. The swiglu rows (out of the total: GPT-2 has no gated MLP)
// time Llama's and Mixtral's activation at the same shape (FFN F = 4C, its gate | up product [N, 2F]),
// fp32 and bf16, each beside the scalar std::exp loop that core/ops/swiglu.cpp ran before (kept here).
//
// For each row: one untimed call per thread count, then --rounds rounds; in each round every
// thread count (its order alternating from round to round) runs the row back to back enough times
// to take >= --min-ms, and the per-call time is the median over rounds. "ms/step" is that times the
// row's calls per step; the totals add ms/step over the rows marked in the total (everything but
// the dropout row, which costs nothing at dropout 0, and attention, whose softmax is fused with
// tile GEMMs). Inputs are overwritten or accumulated into across calls (AdamW moves its weights,
// backward ops keep adding); the work per call does not depend on the values.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/optim/adamw.h"
#include "core/math/mixed_precision.h"
#include "core/math/aligned_buffer.h"
#include "core/ops/activation.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/dropout.h"
#include "core/ops/embedding.h"
#include "core/ops/flash_attention.h"
#include "core/ops/layernorm.h"
#include "core/ops/linear.h"
#include "core/ops/swiglu.h"
#include "core/math/parallel_memory.h"
#include "models/arch/gpt2.h"
#include "parallel/grad_sync.h"
#include "parallel/parallel_context.h"

namespace {

using namespace gf::bench;

using gf::AlignedBuffer;
using namespace gf::ops;

struct Model {
  std::string name;
  int64_t B, T, C, L, H;
};

const Model kModels[] = {
    {"gpt2-tiny", 8, 256, 256, 4, 4},
    {"gpt2-124M", 4, 256, 768, 12, 12},
};
constexpr int64_t kVocab = 50257;

struct Row {
  std::string name, shape;
  int64_t calls;  // per step
  bool in_total;
  std::function<void()> run;
};





void fill_normal(float* x, int64_t n, float std, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, std);
  for (int64_t i = 0; i < n; ++i) x[i] = d(g);
}

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t v : d) {
    if (!s.empty()) s += 'x';
    s += std::to_string(v);
  }
  return s;
}

struct Options {
  std::vector<int> threads = {1, 2};
  int rounds = 7;
  double min_ms = 20;
  std::vector<std::string> models = {"gpt2-tiny", "gpt2-124M"};
  std::string filter;  // only rows whose name contains this
};


Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--threads") {
      o.threads.clear();
      for (const auto& t : split(value())) o.threads.push_back(std::max(1, std::stoi(t)));
    } else if (arg == "--rounds") o.rounds = std::max(1, std::stoi(value()));
    else if (arg == "--min-ms") o.min_ms = std::stod(value());
    else if (arg == "--models") o.models = split(value());
    else if (arg == "--filter") o.filter = value();
    else throw std::runtime_error("unknown argument " + arg +
                                  " (--threads 1,2 --rounds N --min-ms X --models a,b --filter TEXT)");
  }
  return o;
}

// Every buffer a step's non-GEMM work touches, at one model's shape.
struct StepBuffers {
  int64_t B, T, C, F, L, H, N, V;
  gf::Placement table;
  AlignedBuffer<float> weights, grads;
  AlignedBuffer<int32_t> tokens, inputs, targets;
  AlignedBuffer<float> x, y, dx, dres, ln_mean, ln_rstd;  // [N, C] and per-row stats
  AlignedBuffer<float> fch, fch_act, dfch, dfch_act;           // [N, F]
  AlignedBuffer<float> gu, dgu;                                 // [N, 2F]: a gated MLP's gate | up product
  std::vector<gf::bf16> gu_low, dgu_low, h_low, dh_low;         // their bf16 forms, and [N, F] ones
  AlignedBuffer<float> qkv, dqkv, atty, datty, lse_attn, flash_ws;
  AlignedBuffer<float> logits, losses, lse;
  std::vector<gf::bf16> low;  // the weights' bf16 copy of a bf16 step
  std::unique_ptr<gf::AdamW> adamw;
  gf::ParallelContext ctx = gf::ParallelContext::single();
  std::unique_ptr<gf::GradientSync> sync;
  FlashWorkspace<float> ws;

  explicit StepBuffers(const Model& m)
      : B(m.B), T(m.T), C(m.C), F(4 * m.C), L(m.L), H(m.H), N(m.B * m.T), table(make_table(m)) {
    V = table.at("wte.weight").local_shape[0];
    const int64_t n = table.total_floats();
    weights = AlignedBuffer<float>(n);
    grads = AlignedBuffer<float>(n);
    low.resize(static_cast<size_t>(n));
    table.initialize(weights.data(), 1);
    table.initialize(grads.data(), 2);
    tokens = AlignedBuffer<int32_t>(static_cast<size_t>(B * (T + 1)));
    inputs = AlignedBuffer<int32_t>(static_cast<size_t>(N));
    targets = AlignedBuffer<int32_t>(static_cast<size_t>(N));
    std::mt19937 g(3);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(g() % kVocab);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        inputs[b * T + t] = tokens[b * (T + 1) + t];
        targets[b * T + t] = tokens[b * (T + 1) + t + 1];
      }
    auto buf = [](int64_t rows, int64_t cols, float std, uint32_t seed) {
      AlignedBuffer<float> a(static_cast<size_t>(rows * cols));
      if (std > 0) fill_normal(a.data(), rows * cols, std, seed);
      return a;
    };
    x = buf(N, C, 1.0f, 4);
    y = buf(N, C, 0, 0);
    dx = buf(N, C, 0, 0);
    dres = buf(N, C, 0.01f, 6);
    ln_mean = buf(N, 1, 0, 0);
    ln_rstd = buf(N, 1, 0, 0);
    fch = buf(N, F, 1.0f, 7);
    fch_act = buf(N, F, 0, 0);
    gu = buf(N, 2 * F, 1.0f, 13);
    dgu = buf(N, 2 * F, 0, 0);
    gu_low.resize(static_cast<size_t>(N * 2 * F));
    dgu_low.resize(gu_low.size());
    h_low.resize(static_cast<size_t>(N * F));
    dh_low.resize(h_low.size());
    for (size_t i = 0; i < gu_low.size(); ++i) gu_low[i] = gf::float_to_bf16(gu[i]);
    for (size_t i = 0; i < dh_low.size(); ++i) dh_low[i] = gf::float_to_bf16(0.01f * fch[i]);
    dfch = buf(N, F, 0, 0);
    dfch_act = buf(N, F, 0.01f, 8);
    qkv = buf(N, 3 * C, 1.0f, 9);
    dqkv = buf(N, 3 * C, 0, 0);
    atty = buf(N, C, 0, 0);
    datty = buf(N, C, 0.01f, 10);
    lse_attn = buf(B * H, T, 0, 0);
    logits = buf(N, V, 1.0f, 11);
    losses = buf(N, 1, 0, 0);
    lse = buf(N, 1, 0, 0);
    adamw = std::make_unique<gf::AdamW>(table, gf::AdamWConfig{0.9, 0.95, 1e-8, 0.1});
    sync = std::make_unique<gf::GradientSync>(table, ctx, 1, false, false);
    // One workspace slice per thread the bench may use (the model plans omp_get_max_threads()).
    ws.threads = omp_get_num_procs() > 2 ? omp_get_num_procs() : 2;
    flash_ws = buf(ws.threads, gf::ops::flash_workspace_per_thread(attention_shape(), ws.tiles), 0, 0);
    ws.data = flash_ws.data();
  }

  static gf::Placement make_table(const Model& m) {
    gf::ModelConfig c;
    c.vocab_size = kVocab;
    c.seq_length = m.T;
    c.hidden_size = m.C;
    c.num_layers = m.L;
    c.num_heads = m.H;
    c.hidden_act = "gelu_new";
    return gf::GPT2LMHeadModel::make_placement(c, gf::ModelLayout{}, 0);
  }
  AttentionShape attention_shape() const { return {B, T, H, C / H, 0, 0, H}; }
};

// SwiGLU as core/ops/swiglu.cpp computed it before it was vectorised (std::exp one element at a time,
// the threads over rows), kept here as the reference its rows are read against: In is float or bf16
// (widened), Out float or bf16 (rounded as written).
float widened(float v) { return v; }
float widened(gf::bf16 v) { return gf::bf16_to_float(v); }
void store(float& d, float v) { d = v; }
void store(gf::bf16& d, float v) { d = gf::float_to_bf16(v); }

template <typename In, typename Out>
void swiglu_fwd_scalar(Out* h, const In* g, const In* u, int64_t rows, int64_t cols, int64_t ld_in) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float gv = widened(g[r * ld_in + c]), uv = widened(u[r * ld_in + c]);
      store(h[r * cols + c], gv / (1.0f + std::exp(-gv)) * uv);
    }
}

template <typename In, typename Out>
void swiglu_bwd_scalar(Out* dg, Out* du, const In* dh, const In* g, const In* u, int64_t rows, int64_t cols,
                       int64_t ld_in) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * ld_in + c;
      const float gv = widened(g[i]), uv = widened(u[i]), hv = widened(dh[r * cols + c]);
      const float s = 1.0f / (1.0f + std::exp(-gv));
      store(du[i], hv * gv * s);
      store(dg[i], hv * uv * (s + gv * s * (1.0f - s)));
    }
}

// The rows of one step, in step order.
std::vector<Row> step_rows(StepBuffers& s) {
  const int64_t B = s.B, T = s.T, C = s.C, F = s.F, L = s.L, N = s.N, V = s.V, arena = s.table.total_floats();
  float* w = s.weights.data();
  float* g = s.grads.data();
  const float* wte = w + s.table.at("wte.weight").offset;
  const float* wpe = w + s.table.at("wpe.weight").offset;
  float* dwte = g + s.table.at("wte.weight").offset;
  float* dwpe = g + s.table.at("wpe.weight").offset;
  const float* lnw = w + s.table.at("h.0.ln_1.weight").offset;
  const float* lnb = w + s.table.at("h.0.ln_1.bias").offset;
  float* dlnw = g + s.table.at("h.0.ln_1.weight").offset;
  float* dlnb = g + s.table.at("h.0.ln_1.bias").offset;
  float* bias_grad = g + s.table.at("h.0.mlp.c_fc.bias").offset;  // F floats: room for every bias width
  const float* fc_b = w + s.table.at("h.0.mlp.c_fc.bias").offset;
  const DropoutKey drop{0.1f, 0x6766u, 12345};
  const float grad_scale = 1.0f / static_cast<float>(N);
  std::vector<Row> rows;
  auto add = [&](std::string name, std::string shape, int64_t calls, bool in_total, std::function<void()> run) {
    rows.push_back({std::move(name), std::move(shape), calls, in_total, std::move(run)});
  };
  const std::string nc = dims({N, C}), nf = dims({N, F});
  // Forward.
  add("tokens: copy + range check (gpt2 forward)", dims({N}), 1, true, [&s, B, T, N] {
    for (int64_t b = 0; b < B; ++b) {
      std::memcpy(s.inputs.data() + b * T, s.tokens.data() + b * (T + 1), sizeof(int32_t) * T);
      std::memcpy(s.targets.data() + b * T, s.tokens.data() + b * (T + 1) + 1, sizeof(int32_t) * T);
    }
    for (int64_t i = 0; i < N; ++i)
      if (s.inputs[i] < 0 || s.inputs[i] >= kVocab || s.targets[i] < 0 || s.targets[i] >= kVocab)
        throw std::out_of_range("token id outside the vocabulary");
  });
  add("embedding fwd", nc, 1, true, [&s, wte, wpe, B, T, C] {
    embedding_fwd(s.y.data(), s.inputs.data(), wte, wpe, B, T, C);
  });
  add("layernorm fwd", nc, 2 * L + 1, true, [&s, lnw, lnb, N, C] {
    layernorm_fwd(s.y.data(), {s.ln_mean.data(), s.ln_rstd.data()}, s.x.data(), lnw, lnb, N, C, 1e-5f);
  });
  // linear_fwd writes the bias into every row before its GEMM (beta 1): c_attn, c_proj, c_fc, c_proj.
  add("bias broadcast (linear_fwd, 4 linears)", dims({N, 3 * C + C + F + C}), L, true, [&s, fc_b, N, C, F] {
    for (int64_t out : {3 * C, C, F, C}) {
      float* y = out == F ? s.fch_act.data() : s.qkv.data();
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < N; ++r)
        for (int64_t j = 0; j < out; ++j) y[r * out + j] = fc_b[j];
    }
  });
  add("gelu_new fwd", nf, L, true, [&s, N, F] { activation_fwd(Activation::kGeluNew, s.fch_act.data(), s.fch.data(), N * F); });
  add("add_inplace (residual)", nc, 2 * L, true, [&s, N, C] {
    float* y = s.y.data();
    const float* x = s.x.data();
    const int64_t n = N * C;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
  });
  add("dropout 0.1 (fwd + bwd sites)", nc, 2 * (2 * L + 1), false, [&s, drop, N, C] {
    dropout_apply(s.y.data(), drop, N, C, 0, 0, C);
  });
  add("flash attention fwd (not in total)", dims({B, s.H, T, C / s.H}), L, false, [&s] {
    flash_attention_fwd(s.atty.data(), s.lse_attn.data(), s.qkv.data(), s.attention_shape(), DropoutKey{}, s.ws);
  });
  add("cross_entropy fwd", dims({N, V}), 1, true, [&s, N, V] {
    cross_entropy_fwd(s.losses.data(), s.lse.data(), s.logits.data(), s.targets.data(), N, V, kVocab);
  });
  add("loss sum (gpt2 head_fwd)", dims({N}), 1, true, [&s, N] {
    double sum = 0.0;
    for (int64_t i = 0; i < N; ++i) sum += s.losses[i];
    volatile double keep = sum;
    (void)keep;
  });
  // Backward.
  add("cross_entropy bwd", dims({N, V}), 1, true, [&s, N, V, grad_scale] {
    cross_entropy_bwd_inplace(s.logits.data(), s.lse.data(), s.targets.data(), N, V, kVocab, grad_scale);
  });
  // Zeroed (memset) before backward accumulates into them: dres_ (head_bwd), dfch_ and dqkv_
  // (layer_bwd), row_parallel_bwd's dx (F wide for mlp.c_proj, C for attn.c_proj),
  // column_parallel_bwd's dx (2 per layer); and layer_bwd's copy of dres_ before the dropout.
  auto memset_row = [&](std::string name, int64_t cols, int64_t calls, AlignedBuffer<float>& b) {
    add(std::move(name), dims({N, cols}), calls, true, [&b] { std::memset(b.data(), 0, sizeof(float) * b.size()); });
  };
  memset_row("zero [N,C] (memset)", C, 3 * L + 1, s.dx);
  memset_row("zero [N,F] (memset)", F, 2 * L, s.dfch);
  memset_row("zero [N,3C] (memset)", 3 * C, L, s.dqkv);
  add("copy dres_ -> dtmp_ (memcpy)", nc, 2 * L, true,
      [&s, N, C] { std::memcpy(s.y.data(), s.dres.data(), sizeof(float) * static_cast<size_t>(N * C)); });
  // What parallel_zero would make of the largest of them (the step does not use it there).
  add("zero [N,F] by parallel_zero (not in step)", nf, 2 * L, false, [&s, N, F] { gf::parallel_zero(s.dfch.data(), N * F); });
  add("gelu_new bwd", nf, L, true, [&s, N, F] {
    activation_bwd(Activation::kGeluNew, s.dfch.data(), s.dfch_act.data(), s.fch.data(), N * F);
  });
  // Llama's and Mixtral's SwiGLU at this shape (FFN F, the gate | up product [N, 2F]); GPT-2 has none,
  // so not in the total. Each beside the scalar loop it replaced.
  add("swiglu fwd (not in total)", nf, L, false, [&s, N, F] {
    swiglu_fwd<float>(s.fch_act.data(), s.gu.data(), s.gu.data() + F, N, F, 2 * F);
  });
  add("swiglu fwd, scalar std::exp (the loop before; not in total)", nf, L, false, [&s, N, F] {
    swiglu_fwd_scalar(s.fch_act.data(), s.gu.data(), s.gu.data() + F, N, F, 2 * F);
  });
  add("swiglu bwd (not in total)", nf, L, false, [&s, N, F] {
    swiglu_bwd<float>(s.dgu.data(), s.dgu.data() + F, s.dfch_act.data(), s.gu.data(), s.gu.data() + F, N, F, 2 * F,
                      false);
  });
  add("swiglu bwd, scalar std::exp (the loop before; not in total)", nf, L, false, [&s, N, F] {
    swiglu_bwd_scalar(s.dgu.data(), s.dgu.data() + F, s.dfch_act.data(), s.gu.data(), s.gu.data() + F, N, F, 2 * F);
  });
  add("swiglu fwd bf16 (not in total)", nf, L, false, [&s, N, F] {
    swiglu_fwd_bf16(s.h_low.data(), s.gu_low.data(), s.gu_low.data() + F, N, F, 2 * F);
  });
  add("swiglu fwd bf16, scalar std::exp (the loop before; not in total)", nf, L, false, [&s, N, F] {
    swiglu_fwd_scalar(s.h_low.data(), s.gu_low.data(), s.gu_low.data() + F, N, F, 2 * F);
  });
  add("swiglu bwd bf16 (not in total)", nf, L, false, [&s, N, F] {
    swiglu_bwd_bf16(s.dgu_low.data(), s.dgu_low.data() + F, s.dh_low.data(), s.gu_low.data(), s.gu_low.data() + F, N,
                    F, 2 * F);
  });
  add("swiglu bwd bf16, scalar std::exp (the loop before; not in total)", nf, L, false, [&s, N, F] {
    swiglu_bwd_scalar(s.dgu_low.data(), s.dgu_low.data() + F, s.dh_low.data(), s.gu_low.data(), s.gu_low.data() + F,
                      N, F, 2 * F);
  });
  add("sum_rows_accumulate (bias grad)", dims({N, 3 * C}), L, true, [&s, bias_grad, N, C] {
    sum_rows_accumulate(bias_grad, s.qkv.data(), N, 3 * C);
  });
  add("sum_rows_accumulate (bias grad)", nc, 2 * L, true, [&s, bias_grad, N, C] {
    sum_rows_accumulate(bias_grad, s.x.data(), N, C);
  });
  add("sum_rows_accumulate (bias grad)", nf, L, true, [&s, bias_grad, N, F] {
    sum_rows_accumulate(bias_grad, s.fch.data(), N, F);
  });
  add("flash attention bwd (not in total)", dims({B, s.H, T, C / s.H}), L, false, [&s] {
    flash_attention_bwd(s.dqkv.data(), s.datty.data(), s.qkv.data(), s.atty.data(), s.lse_attn.data(),
                        s.attention_shape(), DropoutKey{}, s.ws);
  });
  add("layernorm bwd", nc, 2 * L + 1, true, [&s, lnw, dlnw, dlnb, N, C] {
    layernorm_bwd(s.dx.data(), dlnw, dlnb, s.dres.data(), s.x.data(), lnw, {s.ln_mean.data(), s.ln_rstd.data()}, N, C);
  });
  add("embedding bwd", nc, 1, true, [&s, dwte, dwpe, B, T, C] {
    embedding_bwd(dwte, dwpe, s.dres.data(), s.inputs.data(), B, T, C);
  });
  // Optimizer: the trainer's train_step.
  const std::string an = dims({arena});
  add("zero grad arena (parallel_zero)", an, 1, true, [g, arena] { gf::parallel_zero(g, arena); });
  add("global_sq_norm (grad norm)", an, 1, true, [&s] {
    volatile double keep = s.sync->global_sq_norm(s.grads.data());
    (void)keep;
  });
  // Clipping runs inside AdamW's pass (AdamWStepExtras::grad_scale); the separate pass it replaced
  // is timed beside it, out of the total.
  gf::AdamWStepExtras clip;
  clip.grad_scale = 1.0f;
  add("AdamW step, clip in its pass", an, 1, true, [&s, clip] {
    s.adamw->step(s.weights.data(), s.grads.data(), 1e-4, 1, clip);
  });
  add("scale_inplace (the clip pass before; not in total)", an, 1, false,
      [g, arena] { gf::scale_inplace(g, arena, 1.0f); });
  // bf16 steps: AdamW writes the weights' copy in the same pass; make_low_copy is the separate
  // conversion it replaced (still the path under ZeRO). Neither is in the fp32 total.
  gf::AdamWStepExtras with_copy = clip;
  with_copy.low = s.low.data();
  with_copy.low_dtype = gf::ComputeDtype::kBFloat16;
  add("AdamW step, clip and bf16 copy in its pass (bf16; not in total)", an, 1, false, [&s, with_copy] {
    s.adamw->step(s.weights.data(), s.grads.data(), 1e-4, 1, with_copy);
  });
  add("make_low_copy bf16 (the copy pass before; not in total)", an, 1, false, [&s, arena] {
    gf::make_low_copy(gf::ComputeDtype::kBFloat16, s.low.data(), s.weights.data(), arena);
  });
  return rows;
}

void bench_model(const Model& m, const Options& o) {
  StepBuffers s(m);
  // The layernorm row's dy: small values; the layernorm cache from one forward.
  layernorm_fwd(s.y.data(), {s.ln_mean.data(), s.ln_rstd.data()}, s.x.data(), s.weights.data() + s.table.at("h.0.ln_1.weight").offset,
                s.weights.data() + s.table.at("h.0.ln_1.bias").offset, s.N, s.C, 1e-5f);
  std::vector<Row> rows = step_rows(s);
  const size_t nt = o.threads.size();
  std::printf("\n## %s (B %lld, T %lld, C %lld, F %lld, L %lld, heads %lld, vocab %lld padded to %lld, arena %lld floats)\n\n",
              m.name.c_str(), (long long)s.B, (long long)s.T, (long long)s.C, (long long)s.F, (long long)s.L,
              (long long)s.H, (long long)kVocab, (long long)s.V, (long long)s.table.total_floats());
  std::printf("| op | shape | calls/step |");
  for (int t : o.threads) std::printf(" ms/call %dt |", t);
  for (int t : o.threads) std::printf(" ms/step %dt |", t);
  std::printf(" speedup %dt/%dt |\n|---|---|---:|", o.threads.front(), o.threads.back());
  for (size_t i = 0; i < 2 * nt + 1; ++i) std::printf("---:|");
  std::printf("\n");
  const double cpu0 = cpu_seconds(), wall0 = wall_seconds();
  std::vector<double> total(nt, 0.0), total_all(nt, 0.0);
  for (Row& r : rows) {
    if (r.name.find(o.filter) == std::string::npos) continue;
    // Untimed first calls (thread pools, scratch buffers), then the pace on the first thread count.
    for (int t : o.threads) {
      omp_set_num_threads(t);
      r.run();
    }
    omp_set_num_threads(o.threads.front());
    double t0 = wall_seconds();
    r.run();
    const double pace = std::max(wall_seconds() - t0, 1e-7);
    const int reps = std::max(1, static_cast<int>(std::ceil(o.min_ms * 1e-3 / pace)));
    std::vector<std::vector<double>> times(nt);
    for (int round = 0; round < o.rounds; ++round)
      for (size_t i = 0; i < nt; ++i) {
        const size_t k = round % 2 ? nt - 1 - i : i;  // alternate the order of the thread counts
        omp_set_num_threads(o.threads[k]);
        t0 = wall_seconds();
        for (int rep = 0; rep < reps; ++rep) r.run();
        times[k].push_back((wall_seconds() - t0) / reps);
      }
    std::vector<double> ms(nt);
    for (size_t k = 0; k < nt; ++k) ms[k] = 1e3 * median(times[k]);
    std::printf("| %s | %s | %lld |", r.name.c_str(), r.shape.c_str(), (long long)r.calls);
    for (size_t k = 0; k < nt; ++k) std::printf(" %.4f |", ms[k]);
    for (size_t k = 0; k < nt; ++k) std::printf(" %.2f |", ms[k] * r.calls);
    std::printf(" %.2f |\n", ms.front() / ms.back());
    std::fflush(stdout);
    for (size_t k = 0; k < nt; ++k) {
      if (r.in_total) total[k] += ms[k] * r.calls;
      if (r.in_total || r.name.rfind("dropout", 0) == 0) total_all[k] += ms[k] * r.calls;
    }
  }
  // A --filter that keeps no row of the step leaves no total to print.
  if (total.back() > 0) {
    std::printf("| **non-GEMM total, dropout 0** | | |");
    for (size_t k = 0; k < nt; ++k) std::printf(" |");
    for (size_t k = 0; k < nt; ++k) std::printf(" **%.1f** |", total[k]);
    std::printf(" **%.2f** |\n", total.front() / total.back());
  }
  if (total_all.back() > 0) {
    std::printf("| non-GEMM total, dropout 0.1 | | |");
    for (size_t k = 0; k < nt; ++k) std::printf(" |");
    for (size_t k = 0; k < nt; ++k) std::printf(" %.1f |", total_all[k]);
    std::printf(" %.2f |\n", total_all.front() / total_all.back());
  }
  const double wall = wall_seconds() - wall0;
  double mean_threads = 0;
  for (int t : o.threads) mean_threads += static_cast<double>(t) / nt;
  // Spinning threads count as busy, so this is an upper bound on the cores we really had.
  std::printf("\nCPU time / (wall time x mean thread count %.1f) over this model: %.2f\n", mean_threads,
              (cpu_seconds() - cpu0) / (wall * mean_threads));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse_args(argc, argv);
    double load[3] = {0, 0, 0};
    if (getloadavg(load, 3) < 0) load[0] = -1;
    std::string threads;
    for (int t : o.threads) {
      if (!threads.empty()) threads += ',';
      threads += std::to_string(t);
    }
    std::printf("bench_ops: %s, %d cores; threads %s; %d rounds, >= %.0f ms per sample, wall clock; load "
                "average %.2f at start\n",
                cpu_model().c_str(), omp_get_num_procs(), threads.c_str(), o.rounds, o.min_ms, load[0]);
    const double t0 = wall_seconds();
    for (const std::string& name : o.models) {
      const auto it = std::find_if(std::begin(kModels), std::end(kModels), [&](const Model& m) { return m.name == name; });
      if (it == std::end(kModels)) throw std::runtime_error("unknown model " + name + " (gpt2-tiny, gpt2-124M)");
      bench_model(*it, o);
    }
    if (getloadavg(load, 3) < 0) load[0] = -1;
    std::printf("\n(%.0f s; load average %.2f at the end. ms/call: median over rounds; ms/step = ms/call x calls/step;\n"
                "speedup = ms/call on %d thread(s) / on %d.)\n",
                wall_seconds() - t0, load[0], o.threads.front(), o.threads.back());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
