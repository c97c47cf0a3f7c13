// Multi-head latent attention's projections (DeepSeek-V2/V3; Hugging Face's DeepseekV2Attention, transcribed in
// tools/torch_hf_deepseek.py): the q|k|v rows the attention core reads, made from x through latents.
//   q    = q_proj(x), or q_b_proj(q_a_layernorm(q_a_proj(x)))          [H, nope + rope] per token
//   kv_a = kv_a_proj_with_mqa(x) = [c | k_pe]                            c: kv_rank, k_pe: rope (one head)
//   kv   = kv_b_proj(kv_a_layernorm(c))                                  [H, nope + v] per token
//   key_h = [k_nope_h | k_pe], query_h = [q_nope_h | q_pe_h], value_h = v_h; RoPE on q_pe and k_pe.
// The core (AttentionBlock's, every variant: unfused, fused, ring, Ulysses) sees heads of D = nope + rope: a query
// or key head is laid out [pe | nope], its RoPE part first with its pairs de-interleaved (DeepSeek rotates the
// pairs (2i, 2i + 1); as the evens then the odds they are the rotate-half pairs (i, i + rope/2) of the RoPE table
// with head stride D and rotary_dim rope, and a dot product does not see one permutation applied to both q and k);
// a value head is [v | 0] (D - v zeros), so the core's output head is [y_v | 0] and the output projection reads
// the y_v part. The norms' epsilon is 1e-6 (DeepseekV2RMSNorm's default; the config's rms_norm_eps is not theirs).
// Tensor parallel: q_proj / q_b_proj and kv_b_proj split by heads (column-parallel), the latents' projections and
// norms (q_a_proj, q_a_layernorm, kv_a_proj_with_mqa, kv_a_layernorm) whole on every rank; those read every token's
// rows (gathered under SP), and their gradients, partial (each rank's heads' share), are summed over the group
// (ParamSpec::grad_partial_over_tp), as is their input's (the column-parallel layer's reduction).
#pragma once
#include <cstdint>
#include <vector>

#include "core/ops/rope.h"
#include "core/params/placement.h"
#include "models/blocks/env.h"
#include "models/blocks/kv_cache.h"
#include "models/blocks/linear.h"
#include "models/blocks/spec.h"

namespace gf {

class MlaProjection {
 public:
  MlaProjection() = default;
  MlaProjection(const TransformerSpec& s, int tp_size);
  void declare(ParamTable& t, const NameMap& names, int64_t layer) const;
  void bind(const Placement& t, const NameMap& names, int64_t layer);
  // LoRA (models/lora.h): the adapters `lora` holds for q_proj, or q_a_proj and q_b_proj, kv_a_proj_with_mqa and
  // kv_b_proj. q_b_proj's and kv_b_proj's run on the latents' rows (every token's, as their base products).
  void bind_lora(const Placement& lora, const NameMap& names, int64_t layer, AdapterSite at);
  int64_t first_offset() const { return q_.w >= 0 ? q_.w : qa_.w; }

  // What a layer keeps per token for the backward (kv_a, c, its norm and 1/rms; with a query latent its output,
  // norm and 1/rms), and the scratch a forward or backward uses per token.
  static int64_t kept_per_row(const TransformerSpec& s);
  static int64_t scratch_per_row(const TransformerSpec& s);

  // qkv [N, 3 H D]: the assembled q|k|v before RoPE. kept: N kept_per_row() floats; scratch: N scratch_per_row().
  void fwd(const BlockEnv& e, float* qkv, const float* xn, float* kept, float* scratch, const void* xn_low) const;
  // From dqkv (the gradient of the assembled q|k|v before RoPE): dxn [N, C] written, every weight's gradient added.
  void bwd(const BlockEnv& e, float* dxn, const float* dqkv, const float* xn, const float* kept, float* scratch,
           const void* xn_low) const;

  // Generation against a cache of the latent (DeepSeek's inference form): per position and layer the normed latent
  // c and the rotated RoPE key, kv_rank + rope floats, where full attention keeps 2 x heads x head_dim. Each row's
  // latent is written at its position, then each head attends in the latent space: its query's nope part taken
  // through kv_b_proj's key rows (q_abs = W_UK^T q_nope, kv_rank wide), scores scale (q_abs . c_t + q_pe . k_pe_t),
  // the probabilities' sum of latents taken through kv_b_proj's value rows into y_v [N, H v]. The same attention
  // as the training forward's, its products in another order. kept, scratch: cached_kept_per_row and
  // cached_scratch_per_row floats per row; rope: the model's table (head stride nope + rope, rope rotated).
  static int64_t cached_floats_per_position(const TransformerSpec& s) { return s.mla.kv_rank + s.mla.rope; }
  static int64_t cached_scratch_per_row(const TransformerSpec& s);
  void fwd_cached(const BlockEnv& e, float* y_v, const float* xn, float* kept, float* scratch, const KvCache& kv,
                  const RowPositions& rp, const ops::RopeTable<float>& rope, float scale, const void* xn_low) const;

 private:
  // The per-token layout of `kept`: kv_a | c | c normed | (q_a | q_a normed) | 1/rms of c | (1/rms of q_a).
  struct Kept {
    float *kv_a, *c, *cn, *qa, *qan, *c_rstd, *qa_rstd;
  };
  Kept kept_of(float* kept, int64_t N) const;
  TransformerSpec spec_;
  MlaSpec m_;
  int64_t H_ = 0, D_ = 0;
  ParallelLinear q_, qa_, qb_, kva_, kvb_;
  const float* kv_b_weight(const BlockEnv& e) const;
  mutable std::vector<float> kvb_merged_;  // generation: kv_b_proj with its adapters merged (kv_b_weight)
  int64_t qa_norm_ = -1, kva_norm_ = -1;
};

}  // namespace gf
