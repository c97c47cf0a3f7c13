// MoE block: in an MoE layer, it takes the MLP's place. A router (logits = x W_r^T, [E, C],
// float32 unless router_dense_type says otherwise) picks k of E experts per token
// (core/ops/router.h: softmax, top-k, gate weights, capacity per sequence, the balancing and z
// losses); each expert is an MLP of the model's kind (GPT-2: c_fc -> GELU -> c_proj with biases;
// Mixtral: w2(silu(w1 x) * w3 x)); the output of token t is sum over its kept choices j of
// w[t, j] expert_{e_j}(x[t]).
//
// Dispatch (the alltoall dispatcher): the kept assignments are laid out by global expert, then
// token, then choice ("send order"); the per-expert counts and then the rows go to the expert-
// parallel rank that holds each expert (ExpertParallel: MPI_Alltoallv); there they are permuted
// into expert-major order (expert, then source rank, then send order), so each local expert's
// rows are one block and the local experts' products run as one grouped call; the outputs travel
// back the same way and are weighted and summed per token in a fixed order (choice 1..k), so a
// token's output does not depend on the layout.
//
// The allgather dispatcher (token_dispatcher: allgather, Megatron's) instead: every rank of the
// expert group gathers the group's rows and choices, runs its experts on the rows routed to them
// (in the same expert-major order, so the experts compute the same products), and the weighted
// outputs are summed over the group by a reduce-scatter; the backward mirrors it. It moves every
// row to every rank (ep - 1 times N C floats each way) where the alltoall moves only the routed ones.
//
// Tensor parallel: every tensor-parallel rank routes the same gathered rows (the router is
// replicated and computed identically); each expert's FFN width is split over the group like the
// dense MLP's (up column-parallel, down row-parallel, its bias added on rank 0), so the weighted
// sum is a partial sum that leaves through the row-parallel reduction. The gradient of each gate
// weight (a dot product with that partial output) is summed over the group.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/params/buffer_plan.h"
#include "core/ops/router.h"
#include "core/params/placement.h"
#include "models/blocks/env.h"
#include "models/blocks/mlp.h"
#include "models/blocks/spec.h"

namespace gf {

class MoeBlock {
 public:
  // Sizes of one rank's buffers.
  struct Dims {
    int64_t N = 0, C = 0, E = 0, k = 1, El = 0, ep = 1, Fl = 0, up = 0;
    int64_t Fs = 0;  // the shared expert's local width (0: none)
    int64_t S = 0;  // rows this rank sends at most (N k)
    int64_t R = 0;  // rows its experts receive at most
    bool allgather = false;  // the allgather dispatcher (S: at least R, its outputs stay here)
    int64_t lora_r = 0;      // LoRA's rank when the model has adapters (the experts' adapter scratch), else 0
  };
  // Kept per layer and micro-batch for the backward.
  struct Acts {
    float* probs = nullptr;       // [N, E]
    float* lse = nullptr;         // [N]
    int32_t* experts = nullptr;   // [N, k]
    float* weights = nullptr;     // [N, k] (0 where dropped)
    uint8_t* kept = nullptr;      // [N, k]
    int32_t* pos = nullptr;       // [N, k]: row in send order (-1: dropped)
    int64_t* counts = nullptr;    // [E]: rows sent per global expert; then [ep El]: rows received per (source, local
                                  // expert); then (allgather) [El + 1]: the local experts' row offsets
    float* xperm = nullptr;       // [R, C]: the experts' inputs, expert-major
    float* h = nullptr;           // [R, up]
    float* act = nullptr;         // [R, Fl]
    float* ret = nullptr;         // [S, C]: the experts' (partial) outputs back in send order
    int32_t* src = nullptr;       // allgather: [R], each expert row's (source rank, token, choice) as s N k + t k + j
    float* row_w = nullptr;       // allgather: [R], each expert row's gate weight
    double* stats = nullptr;      // aux_sum, z_sum, dropped, E tokens per expert, E kept per expert (as doubles), margin
    // The shared expert: its MLP's [N, 2 Fs] and [N, Fs], its output [Nl, C] and gate value per row [Nl].
    float *shared_h = nullptr, *shared_act = nullptr, *shared_out = nullptr, *shared_score = nullptr;
  };
  // Shared by the layers (forward and backward).
  struct Scratch {
    float* send = nullptr;   // [S, C]
    float* recv = nullptr;   // [R, C]
    float* perm = nullptr;   // [R, C]
    float* dact = nullptr;   // [R, Fl]
    float* dh = nullptr;     // [R, up]
    float* dw = nullptr;     // [N, k]
    float* dlogits = nullptr;  // [N, E]
    float* sum = nullptr;    // [N, C]: the weighted sum of partial outputs (forward) or input gradients
    // allgather: the expert group's rows [ep N, C], choices [ep N k] (expert, -1 if dropped) and weights
    float *all = nullptr, *all_experts = nullptr, *all_weights = nullptr;
    // The shared expert's backward: its MLP's gradients [N, Fs], [N, 2 Fs], its output's [Nl, C], its input's [Nl, C].
    float *shared_dact = nullptr, *shared_dh = nullptr, *shared_dout = nullptr, *shared_dx = nullptr;
    float* shared_dz = nullptr;  // [N]: the gate's pre-sigmoid gradient per row
    float* lora = nullptr;       // [R, 2 r]: the experts' adapters' u = x A^T and dv = s dy B (LoRA)
  };
  static int64_t stats_doubles(int64_t E) { return 4 + 2 * E; }
  // The buffers of one layer's Acts (without stats) and the shared Scratch, taken from a plan
  // (core/params/buffer_plan.h) for these dims; tp_size > 1 adds the partial-sum buffer.
  static Acts take_acts(BufferPlan& p, const std::string& name, const Dims& d);
  static Scratch take_scratch(BufferPlan& p, const Dims& d, int tp_size);

  MoeBlock() = default;
  // rows: the micro-batch's N = B T (sizes the buffers).
  MoeBlock(const TransformerSpec& s, int tp_size, int ep_size, int64_t layer, int64_t rows);
  static Dims dims(const TransformerSpec& s, int64_t N, int tp_size, int ep_size);

  void declare(ParamTable& t, const NameMap& names) const;
  void bind(const Placement& t, const NameMap& names);
  // LoRA on the routed experts (models/lora.h): the local experts' adapters in `lora` (the adapters' placement),
  // scaled by s = alpha / r; an expert without them keeps its base alone.
  // The router's adapter and the shared expert's (PEFT's `gate`; `shared_expert.gate_proj`, ...) too.
  void bind_lora(const Placement& lora, const NameMap& names, const AdapterSite& at);
  // The first of this layer's local experts' adapters in the adapters' arena (their ZeRO unit), -1: none.
  int64_t lora_offset() const {
    int64_t o = -1;
    for (const auto& x : adapters_)
      for (const ExpertAdapter& ad : x)
        for (int64_t v : {ad.a, ad.b})
          if (v >= 0 && (o < 0 || v < o)) o = v;
    return o;
  }
  int64_t first_offset() const { return spec_.moe.shared_ffn > 0 ? shared_.first_offset() : router_; }
  // The first of this rank's experts' parameters (the experts' region of the arena).
  int64_t bias_offset() const { return bias_; }  // MoeSpec::expert_bias (-1: none)
  int64_t expert_offset() const {
    int64_t o = -1;
    for (int64_t x : {up_w_, up_b_, down_w_, down_b_})
      if (x >= 0 && (o < 0 || x < o)) o = x;
    return o;
  }

  // out: [Nl, C] (this rank's rows of the block's output); xn: [Nl, C].
  void fwd(const BlockEnv& e, float* out, const float* xn, const Acts& a, const Scratch& sc) const;
  // dxn (overwritten) from dout; accumulates the parameters' gradients. Only the fused pass.
  void bwd(const BlockEnv& e, float* dxn, const float* dout, const float* xn, const Acts& a, const Scratch& sc) const;

 private:
  void experts_fwd(const BlockEnv& e, float* y, const Acts& a, const Scratch& sc, const int64_t* offsets) const;
  void experts_bwd(const BlockEnv& e, float* dx, float* dy, const Acts& a, const Scratch& sc,
                   const int64_t* offsets) const;
  // The experts' adapters (models/blocks/moe_lora.cpp): after the up (gate|up) product, h += s (x A^T) B^T on each
  // adapted projection's columns, and after the down product y += s (act A^T) B^T (a partial sum under tensor
  // parallelism, as the base's); backward: their input gradients added to dact and dx, their A and B gradients.
  void lora_up_fwd(const BlockEnv& e, const Acts& a, float* scratch, const int64_t* off) const;
  void lora_down_fwd(const BlockEnv& e, float* y, const Acts& a, float* scratch, const int64_t* off) const;
  void lora_down_bwd(const BlockEnv& e, const float* dy, const Acts& a, const Scratch& sc, const int64_t* off) const;
  void lora_up_bwd(const BlockEnv& e, float* dx, const Acts& a, const Scratch& sc, const int64_t* off) const;
  struct ExpertAdapter {
    int64_t a = -1, b = -1;  // offsets in the adapters' arena (-1: none)
  };
  // Per local expert: its gate's (SwiGLU; a GELU expert's up), its up's (SwiGLU) and its down's adapters.
  std::vector<std::array<ExpertAdapter, 3>> adapters_;
  ExpertAdapter router_lora_;  // the router's adapter (a < 0: none)
  ExpertAdapter shared_gate_lora_;  // the shared expert's sigmoid gate's (a < 0: none)
  // The router's and the gate's adapters (moe_lora.cpp): y [rows, out] = beta y + s (x A^T) B^T, and its backward
  // from dy into dx and the adapter's gradients.
  void rows_lora_fwd(const BlockEnv& e, const ExpertAdapter& ad, int64_t out, float* y, float beta, const float* x,
                     int64_t rows) const;
  void rows_lora_bwd(const BlockEnv& e, const ExpertAdapter& ad, int64_t out, float* dx, const float* dy,
                     const float* x, int64_t rows) const;

  float lora_scale_ = 0.0f;
  int64_t lora_r_ = 0;
  ops::RouterShape shape(const BlockEnv& e) const;
  // y[t] (rows t < rows, overwritten) = sum over t's kept choices j, in order, of (w[t, j] if
  // weighted, else 1) times row pos[t, j] of rows_in_send_order.
  void sum_choices(float* y, const float* rows_in_send_order, const Acts& a, int64_t rows, int64_t C,
                   bool weighted) const;
  // The allgather dispatcher's halves after routing (y: the rows to reduce over the tensor group).
  void allgather_fwd(const BlockEnv& e, float* y, const float* x, const Acts& a, const Scratch& sc) const;
  void allgather_bwd(const BlockEnv& e, float* dx, const float* dy, const Acts& a, const Scratch& sc) const;
  // The router's backward and its input gradient added to dxn (this rank's rows).
  void router_bwd_and_input(const BlockEnv& e, float* dxn, const float* xn, const Acts& a, const Scratch& sc) const;

  // The shared expert beside the routed ones (TransformerSpec::moe.shared_ffn > 0; models/blocks/moe_shared.cpp):
  // out += gate x shared(xn), the gate sigmoid(xn . w) per row or 1.
  void shared_fwd(const BlockEnv& e, float* out, const float* xn, const Acts& a) const;
  void shared_bwd(const BlockEnv& e, float* dxn, const float* dout, const float* xn, const Acts& a,
                  const Scratch& sc) const;
  NameMap shared_names(const NameMap& names) const;

  TransformerSpec spec_;
  int64_t layer_ = 0;
  Dims d_;
  MlpBlock shared_;
  int64_t shared_gate_ = -1;  // [1, C]
  int64_t router_ = -1;          // [E, C]
  int64_t bias_ = -1;            // [E]: MoeSpec::expert_bias's selection bias (-1: none)
  int64_t up_w_ = -1, up_b_ = -1, down_w_ = -1, down_b_ = -1;  // the first local expert's; experts follow at a stride
  int64_t up_stride_ = 0, down_stride_ = 0;
};

}  // namespace gf
