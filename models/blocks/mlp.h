// MLP block: GPT-2's c_fc -> GELU -> c_proj (with biases), or Llama's SwiGLU
// down_proj(silu(gate_proj(x)) * up_proj(x)) with gate and up packed into one column-parallel
// product. The up projection is column-parallel, the down projection row-parallel. Its output is
// the down projection's, before the residual dropout and add.
#pragma once
#include <string>

#include "core/params/placement.h"
#include "models/blocks/env.h"
#include "models/blocks/linear.h"
#include "models/blocks/spec.h"

namespace gf {

class MlpBlock {
 public:
  struct Acts {
    float* h = nullptr;    // [N, up_width()]: the up product (gate | up for SwiGLU); bf16 under keeps_bf16
    float* act = nullptr;  // [N, Fl]: the activation's output; bf16 under keeps_bf16
  };
  // Whether a step computing in `d` keeps the up product and the activation's output in bf16 only,
  // as PyTorch's autocast does (the linear layer's output is bf16, and so the activation computed
  // from it). The up product's fp32 accumulator is rounded as oneDNN writes h, and the activation and
  // its backward read the rounded values; the down projection's products read act as their bf16
  // operand, which they would round it to anyway. So both buffers take 2 bytes an element
  // (act_floats), and neither the down projection nor a backward converts them.
  static bool keeps_bf16(ComputeDtype d) { return d == ComputeDtype::kBFloat16; }
  // The floats a buffer for n such elements takes (n bf16 values in n / 2 floats under keeps_bf16).
  static int64_t act_floats(ComputeDtype d, int64_t n) { return keeps_bf16(d) ? (n + 1) / 2 : n; }
  // Under keeps_bf16 the gradients of act and h are bf16 too (autocast's: the products that write them
  // round their fp32 accumulators, the activation's backward its output), in act_floats each.
  struct Grads {
    float* dact = nullptr;  // [N, Fl]
    float* dh = nullptr;    // [N, up_width()] (kept for the weight pass)
  };
  MlpBlock() = default;
  MlpBlock(const TransformerSpec& s, int tp_size);

  void declare(ParamTable& t, const NameMap& names, int64_t layer) const;
  void bind(const Placement& t, const NameMap& names, int64_t layer);
  // LoRA: the adapters `lora` holds for this layer's projections (gate, up or GPT-2's c_fc; down).
  void bind_lora(const Placement& lora, const NameMap& names, int64_t layer, AdapterSite at);
  int64_t width() const { return Fl_; }
  int64_t first_offset() const { return up_.w; }
  int64_t up_width() const { return gated_mlp(spec_.mlp) ? 2 * Fl_ : Fl_; }

  // xn_low: xn's bf16 copy where the layer keeps the norm's output only so (xn is then null), else null.
  void fwd(const BlockEnv& e, float* out, const float* xn, const Acts& a, const void* xn_low = nullptr) const;
  void activation_fwd(const BlockEnv& e, const Acts& a) const;  // selective recompute
  void bwd(const BlockEnv& e, BwdPass pass, float* dxn, const float* dout, const float* xn, const Acts& a,
           const Grads& g, const void* xn_low = nullptr) const;

 private:
  TransformerSpec spec_;
  int64_t Fl_ = 0;
  ParallelLinear up_, down_;
};

}  // namespace gf
