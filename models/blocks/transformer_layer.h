// A pre-norm transformer layer composed of the blocks:
//   res2 = x + dropout(attention(norm1(x))),   out = res2 + dropout(mlp(norm2(res2))),
// or with TransformerSpec::sandwich_norm (Gemma 2 and 3) a norm on each sublayer's output as well:
//   res2 = x + dropout(norm3(attention(norm1(x)))), out = res2 + dropout(norm4(mlp(norm2(res2)))).
// Its activations live in planned storage (TransformerLayer::Acts, laid out by the model for its
// recompute mode); its backward runs fused or as an input pass and a later weight pass.
#pragma once
#include <functional>
#include <string>

#include "core/params/placement.h"
#include "models/blocks/attention.h"
#include "models/blocks/env.h"
#include "models/blocks/mlp.h"
#include "models/blocks/moe.h"
#include "models/blocks/norm.h"
#include "models/blocks/spec.h"

namespace gf {

enum class Recompute { kNone, kSelective, kFull };

class TransformerLayer {
 public:
  struct Acts {
    NormBlock::Acts n1, n2;
    // ln1, ln2: the norms' outputs; bf16 alone where only bf16 products read them (ln1_keeps_bf16, ln2_keeps_bf16).
    float *ln1 = nullptr, *res2 = nullptr, *ln2 = nullptr, *out = nullptr;
    // TransformerSpec::sandwich_norm: the attention's and the MLP's outputs before their norms, and those norms'.
    float *attn_out = nullptr, *mlp_out = nullptr;
    NormBlock::Acts n3, n4;
    AttentionBlock::Acts attn;
    MlpBlock::Acts mlp;
    MoeBlock::Acts moe;         // an MoE layer's, in place of mlp
    MoeBlock::Scratch moe_sc;   // shared by the MoE layers
  };
  // Backward buffers. dres [Nl, C] carries the residual gradient in and out. The rest is scratch
  // of the fused backward; what the weight pass reads (the two dropout-masked output gradients,
  // the two norm-output gradients, dqkv, the MLP's dh) must stay untouched until it has run.
  struct Grads {
    float* dres = nullptr;
    float *dout_mlp = nullptr, *dout_attn = nullptr, *dln1 = nullptr, *dln2 = nullptr;
    // sandwich_norm: the sublayers' output gradients out of their norms (the MLP's and the attention's weight
    // passes read them)
    float *dpost_mlp = nullptr, *dpost_attn = nullptr;
    AttentionBlock::Grads attn;
    MlpBlock::Grads mlp;
  };

  TransformerLayer() = default;
  // ep_size, rows: an MoE layer's expert-parallel size and micro-batch rows N = B T.
  // rope_local: the table of the windowed layers where they have their own (TransformerSpec::local_rope).
  TransformerLayer(const TransformerSpec& s, int tp_size, int64_t layer, const ops::RopeTable<float>* rope,
                   const ops::FlashWorkspace<float>* flash, int ep_size = 1, int64_t rows = 0,
                   const ops::RopeTable<float>* rope_local = nullptr);
  bool is_moe() const { return spec_.moe.is_moe(layer_); }
  // Under bf16 compute a norm output that only bf16 products read is kept as its bf16 rounding alone, as
  // autocast keeps the bf16 cast a linear layer saves: ln1 (the q|k|v projection's input) always, ln2 in a
  // dense layer (an MoE layer's router reads ln2 in fp32). The bits are the same: each product rounded
  // the fp32 output to bf16 itself before.
  static bool ln1_keeps_bf16(ComputeDtype d) { return MlpBlock::keeps_bf16(d); }
  bool ln2_keeps_bf16(ComputeDtype d) const { return MlpBlock::keeps_bf16(d) && !is_moe(); }
  void declare(ParamTable& t, const NameMap& names) const;
  void bind(const Placement& t, const NameMap& names);
  // LoRA (models/lora.h): this layer's adapters in the adapters' placement `lora`.
  void bind_lora(const Placement& lora, const NameMap& names, const LoraConfig& c) {
    const AdapterSite at{c.rank, static_cast<float>(c.scale()), c.dropout, layer_, 0};
    attn_.bind_lora(lora, names, layer_, at);
    if (!is_moe()) mlp_.bind_lora(lora, names, layer_, at);
    else moe_.bind_lora(lora, names, at);
  }
  int64_t first_offset() const { return norm1_.first_offset(); }
  // The second half's first parameter (the second norm, then the MLP or the MoE router): ZeRO-2 and 3
  // cut a layer there into two units, its attention's and its MLP's.
  int64_t mlp_offset() const { return norm2_.first_offset(); }
  // An MoE layer's experts' first parameter (-1 for a dense layer).
  int64_t expert_offset() const { return is_moe() ? moe_.expert_offset() : -1; }
  // LoRA: the first of its experts' adapters in the adapters' arena (bind_lora's), -1: none.
  int64_t lora_expert_offset() const { return is_moe() ? moe_.lora_offset() : -1; }
  int64_t expert_bias_offset() const { return is_moe() ? moe_.bias_offset() : -1; }  // -1: none
  int64_t layer() const { return layer_; }

  // between (ZeRO-3's layer halves): called after the attention's residual sum, before the second
  // norm reads anything of the MLP half.
  void fwd(const BlockEnv& e, const float* x, const Acts& a, const std::function<void()>* between = nullptr) const;
  // Generation (no dropout, no sequence parallel): the forward with attention against the KV cache
  // (AttentionBlock::fwd_cached); writes a.out.
  void fwd_cached(const BlockEnv& e, const float* x, const Acts& a, const KvCache& kv, const RowPositions& rp) const;
  // Before the backward: what the forward did not keep under `mode`, computed again bitwise.
  void recompute(const BlockEnv& e, Recompute mode, const float* x, const Acts& a, float* y_scratch) const;
  // between (fused or input pass): called when the MLP half's backward is done (its gradients final in
  // the fused pass), before the attention's reads anything of its half.
  void bwd(const BlockEnv& e, BwdPass pass, const float* x, const Acts& a, const Grads& g,
           const std::function<void()>* between = nullptr) const;

 private:
  // A sublayer's output gradient as its backward reads it: dres itself where nothing would change the copy (no
  // dropout at `site`) and nothing reads it after the norm's backward has added into dres (the fused pass: the
  // weight pass of a split backward reads it later); else dres copied into `copy`, the dropout mask applied.
  const float* output_grad(const BlockEnv& e, BwdPass pass, float* copy, const float* dres, int64_t site) const;

  TransformerSpec spec_;
  int64_t layer_ = 0;
  NormBlock norm1_, norm2_;
  NormBlock post_attn_, post_mlp_;  // sandwich_norm
  AttentionBlock attn_;
  MlpBlock mlp_;
  MoeBlock moe_;
};

}  // namespace gf
