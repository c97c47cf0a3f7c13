// Attention block: q|k|v projection (column-parallel: this rank's heads and kv heads), optional
// RoPE on q and k, the causal attention core (multi-head or grouped-query; probabilities kept, or
// the fused core's log-sum-exp), and the output projection (row-parallel). Its output is the
// projection's, before the residual dropout and add.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/ops/attention.h"
#include "core/ops/flash_attention.h"
#include "core/ops/ring_attention.h"
#include "core/ops/rope.h"
#include "core/params/placement.h"
#include "models/blocks/env.h"
#include "models/blocks/kv_cache.h"
#include "models/blocks/linear.h"
#include "models/blocks/mla.h"
#include "models/blocks/spec.h"

namespace gf {

// The RoPE table of `rows` positions for a model: rope_theta alone, or with its rope_scaling
// (core/ops/rope_scaling.h), whose frequencies are fixed at the run's seq_length (dynamic NTK's length).
ops::RopeTable<float> rope_table(const TransformerSpec& s, int64_t rows);
// The windowed layers' own table where they have one (TransformerSpec::local_rope_theta: default RoPE, no scaling).
ops::RopeTable<float> rope_table_local(const TransformerSpec& s, int64_t rows);

class AttentionBlock {
 public:
  struct Acts {
    float* qkv = nullptr;    // [N, qkv_width()] after RoPE (context parallel: [B, cp T, qkv_width() / cp], head-split;
                             // bf16 under keeps_core_bf16)
    float* probs = nullptr;  // [B, Hl, T, T] (unfused core; context parallel: [B, Hl / cp, cp T, cp T])
    float* lse = nullptr;    // [B, Hl, T] (fused core; context parallel: [B, Hl / cp, cp T])
    float* y = nullptr;      // [N, Hl D], the core's output (bf16 under keeps_core_bf16)
    // q_norm/k_norm (TransformerSpec::qk_norm): q's and k's heads before the norm [N, Hl + Hkvl, D] and
    // their 1/rms [N, Hl + Hkvl].
    float* qk_pre = nullptr;
    float* qk_rstd = nullptr;
    // MLA (TransformerSpec::mla): the latents the projections' backward reads (MlaProjection::kept_per_row per
    // token), and the core's output's value part [N, Hl v] that the output projection reads.
    float* mla = nullptr;
    float* y_v = nullptr;
  };
  // Backward scratch: the core's output gradient and the q|k|v gradient (kept for the weight pass).
  struct Grads {
    float* dy = nullptr;
    float* dqkv = nullptr;
  };
  AttentionBlock() = default;
  // layer: the model's layer (its window: TransformerSpec::layer_window); -1: the spec's window.
  AttentionBlock(const TransformerSpec& s, int tp_size, const ops::RopeTable<float>* rope,
                 const ops::FlashWorkspace<float>* flash, int64_t layer = -1);

  void declare(ParamTable& t, const NameMap& names, int64_t layer) const;
  void bind(const Placement& t, const NameMap& names, int64_t layer);
  // LoRA: the adapters `lora` holds for this layer's projections (q, k, v or GPT-2's c_attn; o).
  void bind_lora(const Placement& lora, const NameMap& names, int64_t layer, AdapterSite at);

  int64_t qkv_width() const { return (Hl_ + 2 * Hkvl_) * D_; }
  // Floats of Acts::qk_pre and qk_rstd (0 without q/k norms).
  int64_t qk_pre_floats(int64_t N) const { return spec_.qk_norm ? N * (Hl_ + Hkvl_) * D_ : 0; }
  int64_t qk_rstd_floats(int64_t N) const { return spec_.qk_norm ? N * (Hl_ + Hkvl_) : 0; }
  // Under bf16 compute the fused core's input and output (no context parallel) are kept in bf16 alone, as
  // PyTorch's autocast keeps scaled_dot_product_attention's (Acts::qkv and Acts::y then hold bf16). q|k|v:
  // the core's bf16 products read nothing else of it, and the rounded values are what the layer kept as
  // floats before, so the bits are the same; without RoPE the projection writes it in bf16 itself, with
  // RoPE the projection and the rotation run in fp32 in BlockEnv::qkv_rope first. y: the core writes it
  // rounded, the output projection reads it as its low operand (it rounded y itself before), and the
  // core's backward computes rowsum(dY * Y) from the rounded values, as autocast's does.
  // Not for MLA, whose q|k|v the projections assemble in fp32 and whose output projection reads y's value part.
  static bool keeps_core_bf16(bool flash, ComputeDtype d, bool context_parallel, bool mla = false) {
    return flash && d == ComputeDtype::kBFloat16 && !context_parallel && !mla;
  }
  bool keeps_core_bf16(const BlockEnv& e) const {
    return keeps_core_bf16(spec_.flash, e.cdt, e.context_parallel(), spec_.mla.on());
  }
  int64_t width() const { return Hl_ * D_; }
  // MLA: floats of Acts::mla and Acts::y_v for N rows (0 without), of BlockEnv::mla_scratch.
  int64_t mla_kept_floats(int64_t N) const { return spec_.mla.on() ? N * MlaProjection::kept_per_row(spec_) : 0; }
  int64_t y_v_floats(int64_t N) const { return spec_.mla.on() ? N * Hl_ * spec_.mla.v : 0; }

  // out [Nl, C] = o_proj(core(rope(qkv_proj(xn)))). xn_low: xn's bf16 copy where the layer keeps the norm's
  // output only so (xn is then null; TransformerLayer::ln1_keeps_bf16), else null; the same in fwd_cached and bwd.
  void fwd(const BlockEnv& e, int64_t layer, float* out, const float* xn, const Acts& a,
           const void* xn_low = nullptr) const;
  // Generation: row r (of e.N) is the token at position pos[r] of sequence slot seq[r]. Its key and
  // value are written to the cache at that position, then it attends to positions [0, pos[r]] of
  // its sequence there, so a prompt's rows may come in one call (in position order) or several,
  // and a decode step is one row per sequence. No dropout. out [N, C], xn [N, C] (no sequence
  // parallel); a.qkv and a.y are scratch of N rows.
  void fwd_cached(const BlockEnv& e, float* out, const float* xn, const Acts& a, const KvCache& kv,
                  const RowPositions& rp, const void* xn_low = nullptr) const;
  // Selective recompute: the probabilities again from the kept q|k|v (the fused core needs nothing).
  void recompute_core(const BlockEnv& e, int64_t layer, const Acts& a, float* y_scratch) const;
  // dxn [Nl, C] (written) from dout [Nl, C]; the weight pass reads dout and g.dqkv again.
  void bwd(const BlockEnv& e, BwdPass pass, int64_t layer, float* dxn, const float* dout, const float* xn,
           const Acts& a, const Grads& g, const void* xn_low = nullptr) const;
  int64_t first_offset() const { return spec_.mla.on() ? mla_.first_offset() : qkv_.w; }

 private:
  ops::AttentionShape shape(const BlockEnv& e) const;
  // The q|k|v row's three runs of heads (context parallel's exchange splits each by heads).
  std::vector<int64_t> qkv_segments() const;
  // Ring attention's view of this rank's rows (context_parallel_algo colossalai_cp).
  ops::RingShape ring_shape(const BlockEnv& e) const;
  // The core (fused or not) on a.qkv into y: the local rows, or under context parallel the head-split whole sequence.
  void core_fwd(const BlockEnv& e, int64_t layer, const Acts& a, float* y) const;
  // The fused core's workspace for this pass: under bf16 compute its tile products take bf16 inputs.
  ops::FlashWorkspace<float> flash_ws(const BlockEnv& e) const;
  ops::DropoutKey probs_dropout(const BlockEnv& e, int64_t layer) const {
    return e.dropout(layer, kDropAttnProbs, spec_.attention_dropout);
  }

  // q_norm and k_norm on the q and k heads of q|k|v rows at `qkv` (fwd: in place, kept in a when given;
  // bwd: the gradient in place, the weights' gradients accumulated).
  void qk_norm_fwd(const BlockEnv& e, float* qkv, int64_t rows, const Acts* a) const;
  void qk_norm_bwd(const BlockEnv& e, float* dqkv, const Acts& a) const;
  // q_norm's and k_norm's weights as they scale: the parameters, or (TransformerSpec::norm_offset) offset + w.
  std::pair<const float*, const float*> qk_weights(const BlockEnv& e) const;
  // MLA: y_v [N, Hl v] from the core's output y [N, Hl D] (each head's first v columns); returns y_v.
  const float* values_of(int64_t N, const float* y, float* y_v) const;

  TransformerSpec spec_;
  int64_t Hl_ = 0, Hkvl_ = 0, D_ = 0;
  ParallelLinear qkv_, o_;
  MlaProjection mla_;  // TransformerSpec::mla: in place of qkv_
  int64_t q_norm_ = -1, k_norm_ = -1;  // arena offsets of q_norm and k_norm (-1: none)
  mutable std::vector<float> qk_w_;    // norm_offset: offset + q_norm, offset + k_norm ([2 D], refreshed per call)
  int64_t window_ = 0;                 // this layer's sliding window (0: the whole prefix)
  bool full_bounds_ = false;           // windowed layers beside it: its bounds are BlockEnv::key_lo_full
  const ops::RopeTable<float>* rope_ = nullptr;
  const ops::FlashWorkspace<float>* flash_ = nullptr;
};

}  // namespace gf
