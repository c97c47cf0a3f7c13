// LoRA on the routed experts (models/lora.h): each expert's projection y = W x gains s B (A x), s = alpha / r, with
// W frozen, as PEFT's LoraLayer wraps each expert's nn.Linear (Mixtral's experts.E.w1, w3, w2). The experts' rows
// arrive expert-major (models/blocks/moe.h), so each local expert's adapters run on its own block of rows
// [off[j], off[j + 1]), after the grouped products of the base:
//
//   gate | up (column-parallel: A [r, C] whole, B this rank's Fl output rows): u = x_j A^T, h_j[:, cols] += s u B^T;
//     backward from dh_j: dv = s dh_j[:, cols] B, dx_j += dv A, dA += dv^T x_j (partial over the tensor group: the
//     gradient sync sums it, ParamSpec::grad_partial_over_tp), dB += s dh_j[:, cols]^T u.
//   down (row-parallel: A this rank's Fl input columns, B [C, r] whole): u_p = act_j A_p^T, y_j += s u_p B^T, a part
//     of the partial output the base's reduction sums; backward from dy_j: dv = s dy_j B, dact_j += dv A_p,
//     dA_p += dv^T act_j, dB += s dy_j^T u_p (partial, summed).
//
// All in fp32 (LoRA computes in fp32). The adapters' dropout is refused on experts (models/lora.cpp).
//
// The router's adapter (PEFT wraps its nn.Linear as any other): logits [N, E] += s (x A^T) B^T on the gathered rows
// every rank routes; backward from this rank's rows' dlogits: dv = s dl B, dx += dv A, dA += dv^T x, dB += s dl^T (x A^T)
// (under sequence parallel partial over the tensor group and summed by the gradient sync, as the router's own).
#include <stdexcept>

#include "core/math/gemm.h"
#include "models/blocks/moe.h"
#include "models/lora.h"

namespace gf {

void MoeBlock::bind_lora(const Placement& lora, const NameMap& names, const AdapterSite& at) {
  adapters_.clear();
  const float scale = at.scale;
  const int64_t rank = at.rank;
  // The router's adapter (whole on every rank, as the router) and the shared expert's (split as its MLP is).
  router_lora_ = {};
  if (const TensorPlacement* a = lora.find(lora_a_name(names(Role::kRouterW, layer_)))) {
    const TensorPlacement& b = lora.at(lora_b_name(names(Role::kRouterW, layer_)));
    if (a->local_shape != std::vector<int64_t>{rank, d_.C} || b.local_shape != std::vector<int64_t>{d_.E, rank})
      throw std::logic_error("lora: the router's adapter of layer " + std::to_string(layer_) + " does not fit it");
    router_lora_ = {a->offset, b.offset};
    lora_scale_ = scale;
    lora_r_ = rank;
  }
  if (spec_.moe.shared_ffn > 0) shared_.bind_lora(lora, shared_names(names), layer_, at);
  shared_gate_lora_ = {};
  if (spec_.moe.shared_gate)
    if (const TensorPlacement* a = lora.find(lora_a_name(names(Role::kSharedExpertGateW, layer_)))) {
      const TensorPlacement& b = lora.at(lora_b_name(names(Role::kSharedExpertGateW, layer_)));
      if (a->local_shape != std::vector<int64_t>{rank, d_.C} || b.local_shape != std::vector<int64_t>{1, rank})
        throw std::logic_error("lora: the shared expert gate's adapter of layer " + std::to_string(layer_) + " does not fit it");
      shared_gate_lora_ = {a->offset, b.offset};
      lora_scale_ = scale;
      lora_r_ = rank;
    }
  const int64_t l = layer_, e0 = static_cast<int64_t>(lora.ep_rank()) * d_.El;
  const bool swiglu = spec_.mlp == MlpKind::kSwiGLU;
  const Role roles[3] = {swiglu ? Role::kExpertGateW : Role::kExpertUpW, Role::kExpertUpW, Role::kExpertDownW};
  bool any = false;
  std::vector<std::array<ExpertAdapter, 3>> found(static_cast<size_t>(d_.El));
  for (int64_t j = 0; j < d_.El; ++j)
    for (int k = 0; k < 3; ++k) {
      if (k == 1 && !swiglu) continue;
      const std::string w = expert_name(names(roles[k], l), e0 + j);
      const TensorPlacement* a = lora.find(lora_a_name(w));
      if (a == nullptr) continue;
      const TensorPlacement& b = lora.at(lora_b_name(w));
      const int64_t in = k == 2 ? d_.Fl : d_.C, out = k == 2 ? d_.C : d_.Fl;
      if (a->local_shape.at(0) != rank || a->local_shape.at(1) != in || b.local_shape.at(0) != out ||
          b.local_shape.at(1) != rank)
        throw std::logic_error("lora: the adapter of " + w + " does not fit its expert");
      found[static_cast<size_t>(j)][static_cast<size_t>(k)] = {a->offset, b.offset};
      any = true;
    }
  if (!any) return;
  adapters_ = std::move(found);
  lora_scale_ = scale;
  lora_r_ = rank;
  if (d_.lora_r != rank) throw std::logic_error("lora: the experts' adapter scratch is not sized for rank " +
                                                std::to_string(rank));
}

void MoeBlock::lora_up_fwd(const BlockEnv& e, const Acts& a, float* u, const int64_t* off) const {
  const int64_t C = d_.C, Fl = d_.Fl, up = d_.up, r = lora_r_;
  for (int64_t j = 0; j < d_.El; ++j) {
    const int64_t n = off[j + 1] - off[j];
    if (n == 0) continue;
    const float* x = a.xperm + off[j] * C;
    float* h = a.h + off[j] * up;
    for (int k = 0; k < 2; ++k) {
      const ExpertAdapter& ad = adapters_[static_cast<size_t>(j)][static_cast<size_t>(k)];
      if (ad.a < 0) continue;
      gemm(Trans::kNo, Trans::kYes, n, r, C, 1.0f, x, C, e.lora_w + ad.a, C, 0.0f, u, r);
      gemm(Trans::kNo, Trans::kYes, n, Fl, r, lora_scale_, u, r, e.lora_w + ad.b, r, 1.0f, h + k * Fl, up);
    }
  }
}

void MoeBlock::lora_down_fwd(const BlockEnv& e, float* y, const Acts& a, float* u, const int64_t* off) const {
  const int64_t C = d_.C, Fl = d_.Fl, r = lora_r_;
  for (int64_t j = 0; j < d_.El; ++j) {
    const int64_t n = off[j + 1] - off[j];
    const ExpertAdapter& ad = adapters_[static_cast<size_t>(j)][2];
    if (n == 0 || ad.a < 0) continue;
    gemm(Trans::kNo, Trans::kYes, n, r, Fl, 1.0f, a.act + off[j] * Fl, Fl, e.lora_w + ad.a, Fl, 0.0f, u, r);
    gemm(Trans::kNo, Trans::kYes, n, C, r, lora_scale_, u, r, e.lora_w + ad.b, r, 1.0f, y + off[j] * C, C);
  }
}

void MoeBlock::lora_down_bwd(const BlockEnv& e, const float* dy, const Acts& a, const Scratch& sc,
                             const int64_t* off) const {
  const int64_t C = d_.C, Fl = d_.Fl, r = lora_r_;
  float* u = sc.lora;
  float* dv = sc.lora + d_.R * r;
  for (int64_t j = 0; j < d_.El; ++j) {
    const int64_t n = off[j + 1] - off[j];
    const ExpertAdapter& ad = adapters_[static_cast<size_t>(j)][2];
    if (n == 0 || ad.a < 0) continue;
    const float *A = e.lora_w + ad.a, *B = e.lora_w + ad.b, *act = a.act + off[j] * Fl, *dyj = dy + off[j] * C;
    gemm(Trans::kNo, Trans::kNo, n, r, C, lora_scale_, dyj, C, B, r, 0.0f, dv, r);
    gemm(Trans::kNo, Trans::kNo, n, Fl, r, 1.0f, dv, r, A, Fl, 1.0f, sc.dact + off[j] * Fl, Fl);
    if (e.lora_g == nullptr) continue;
    gemm(Trans::kYes, Trans::kNo, r, Fl, n, 1.0f, dv, r, act, Fl, 1.0f, e.lora_g + ad.a, Fl);
    gemm(Trans::kNo, Trans::kYes, n, r, Fl, 1.0f, act, Fl, A, Fl, 0.0f, u, r);
    gemm(Trans::kYes, Trans::kNo, C, r, n, lora_scale_, dyj, C, u, r, 1.0f, e.lora_g + ad.b, r);
  }
}

void MoeBlock::lora_up_bwd(const BlockEnv& e, float* dx, const Acts& a, const Scratch& sc, const int64_t* off) const {
  const int64_t C = d_.C, Fl = d_.Fl, up = d_.up, r = lora_r_;
  float* u = sc.lora;
  float* dv = sc.lora + d_.R * r;
  for (int64_t j = 0; j < d_.El; ++j) {
    const int64_t n = off[j + 1] - off[j];
    if (n == 0) continue;
    const float* x = a.xperm + off[j] * C;
    for (int k = 0; k < 2; ++k) {
      const ExpertAdapter& ad = adapters_[static_cast<size_t>(j)][static_cast<size_t>(k)];
      if (ad.a < 0) continue;
      const float *A = e.lora_w + ad.a, *B = e.lora_w + ad.b, *dh = sc.dh + off[j] * up + k * Fl;
      gemm(Trans::kNo, Trans::kNo, n, r, Fl, lora_scale_, dh, up, B, r, 0.0f, dv, r);
      gemm(Trans::kNo, Trans::kNo, n, C, r, 1.0f, dv, r, A, C, 1.0f, dx + off[j] * C, C);
      if (e.lora_g == nullptr) continue;
      gemm(Trans::kYes, Trans::kNo, r, C, n, 1.0f, dv, r, x, C, 1.0f, e.lora_g + ad.a, C);
      gemm(Trans::kNo, Trans::kYes, n, r, C, 1.0f, x, C, A, C, 0.0f, u, r);
      gemm(Trans::kYes, Trans::kNo, Fl, r, n, lora_scale_, dh, up, u, r, 1.0f, e.lora_g + ad.b, r);
    }
  }
}

// An adapter on a layer whose weight is whole on every rank and whose rows are given (the router: out E, on the
// gathered rows; the shared expert's sigmoid gate: out 1, on this rank's rows): y [rows, out] = beta y + s (x A^T) B^T.
void MoeBlock::rows_lora_fwd(const BlockEnv& e, const ExpertAdapter& ad, int64_t out, float* y, float beta, const float* x,
                             int64_t rows) const {
  const int64_t C = d_.C, r = lora_r_;
  float* u = e.lora_scratch;  // [rows, r]
  gemm(Trans::kNo, Trans::kYes, rows, r, C, 1.0f, x, C, e.lora_w + ad.a, C, 0.0f, u, r);
  gemm(Trans::kNo, Trans::kYes, rows, out, r, lora_scale_, u, r, e.lora_w + ad.b, r, beta, y, out);
}

// Its backward from dy [rows, out]: dv = s dy B, dx += dv A, dA += dv^T x, dB += s dy^T (x A^T). Under sequence parallel
// the rows are this rank's and the gradient sync sums the replicated adapter's gradients, as the weight's.
void MoeBlock::rows_lora_bwd(const BlockEnv& e, const ExpertAdapter& ad, int64_t out, float* dx, const float* dy,
                             const float* x, int64_t rows) const {
  const int64_t C = d_.C, r = lora_r_;
  const float *A = e.lora_w + ad.a, *B = e.lora_w + ad.b;
  float* dv = e.lora_scratch;  // [rows, r]
  float* u = e.lora_scratch + rows * r;
  gemm(Trans::kNo, Trans::kNo, rows, r, out, lora_scale_, dy, out, B, r, 0.0f, dv, r);
  gemm(Trans::kNo, Trans::kNo, rows, C, r, 1.0f, dv, r, A, C, 1.0f, dx, C);
  if (e.lora_g == nullptr) return;
  gemm(Trans::kYes, Trans::kNo, r, C, rows, 1.0f, dv, r, x, C, 1.0f, e.lora_g + ad.a, C);
  gemm(Trans::kNo, Trans::kYes, rows, r, C, 1.0f, x, C, A, C, 0.0f, u, r);
  gemm(Trans::kYes, Trans::kNo, out, r, rows, lora_scale_, dy, out, u, r, 1.0f, e.lora_g + ad.b, r);
}

}  // namespace gf
