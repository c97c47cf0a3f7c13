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
    float* h = nullptr;    // [N, up_width()]: the up product (gate | up for SwiGLU)
    float* act = nullptr;  // [N, Fl]: the activation's output; bf16 elements under act_in_bf16
  };
  // Whether a step computing in `d` keeps the activation's output in bf16 only (act_floats says its
  // size). Under bf16 compute nothing reads it but the down projection's products, which round their
  // operands to bf16: keeping that rounding instead of the fp32 values gives the same bits with half
  // the memory, and neither product converts it again. (PyTorch's autocast keeps it in bf16 as well.)
  static bool act_in_bf16(ComputeDtype d) { return d == ComputeDtype::kBFloat16; }
  // The floats a buffer for n activation elements takes (n bf16 values in n / 2 floats under act_in_bf16).
  static int64_t act_floats(ComputeDtype d, int64_t n) { return act_in_bf16(d) ? (n + 1) / 2 : n; }
  struct Grads {
    float* dact = nullptr;  // [N, Fl]
    float* dh = nullptr;    // [N, up_width()] (kept for the weight pass)
  };
  MlpBlock() = default;
  MlpBlock(const TransformerSpec& s, int tp_size);

  void declare(ParamTable& t, const NameMap& names, int64_t layer) const;
  void bind(const Placement& t, const NameMap& names, int64_t layer);
  int64_t width() const { return Fl_; }
  int64_t up_width() const { return spec_.mlp == MlpKind::kSwiGLU ? 2 * Fl_ : Fl_; }

  void fwd(const BlockEnv& e, float* out, const float* xn, const Acts& a) const;
  void activation_fwd(const BlockEnv& e, const Acts& a) const;  // selective recompute
  void bwd(const BlockEnv& e, BwdPass pass, float* dxn, const float* dout, const float* xn, const Acts& a,
           const Grads& g) const;

 private:
  TransformerSpec spec_;
  int64_t Fl_ = 0;
  ParallelLinear up_, down_;
};

}  // namespace gf
