// The typed model configuration shared by every model (YAML model.model_config): the architectures'
// keys only (GPT-2's, Llama's, MoE's). Each model reads what it needs.
#pragma once
#include <cstdint>
#include <algorithm>
#include <string>
#include <vector>

#include "core/ops/rope_scaling.h"
#include "models/lora_config.h"

namespace gf {

// `use_flash_attention: auto` (the default) uses the fused attention from this seq_length on: it
// measured faster at T 256 and 1024 in every run and at T 128 in the undisturbed ones, and slower
// without dropout below (one tile, where its backward recomputes the probabilities for nothing);
// see bench/README.md.
inline constexpr int64_t kFlashAttentionAutoMinSeq = 128;

// Mixture of Experts (YAML moe_config, MindFormers' MoEConfig keys, plus Megatron's that it lacks).
// expert_num > 1 makes MoE layers: a router (x . W^T in fp32, softmax, top-k) and expert MLPs of
// the model's own kind (GPT-2: GELU with biases; Llama/Mixtral: SwiGLU), their outputs weighted
// by the router's probabilities. See models/blocks/moe.h for the arithmetic.
// moe_config's choices, parsed once where the config is read (runner/config/read_moe.cpp); their YAML
// names are token_drop_policy_name / token_dispatcher_name's.
enum class TokenDropPolicy { kPosition, kProbs };
enum class TokenDispatcher { kAllToAll, kAllGather };
inline const char* token_drop_policy_name(TokenDropPolicy p) { return p == TokenDropPolicy::kProbs ? "probs" : "position"; }
inline const char* token_dispatcher_name(TokenDispatcher d) {
  return d == TokenDispatcher::kAllGather ? "allgather" : "alltoall";
}

struct MoeConfig {
  int64_t expert_num = 1;            // experts per MoE layer (1: dense)
  int64_t num_experts_chosen = 1;    // top-k
  double capacity_factor = 1.1;      // per sequence, ceil(cf * T * k / E) tokens per expert; <= 0: dropless
  double aux_loss_factor = 0.05;     // the load-balancing loss's weight (Megatron's seq_aux_loss form)
  double z_loss_factor = 0.0;        // the router z-loss's weight
  bool norm_topk_prob = true;        // the k chosen probabilities renormalised to sum 1 (Mixtral)
  std::string routing_policy = "TopkRouterV1";  // MindFormers' name; both routers do the same top-k here
  bool router_bf16 = false;  // router_dense_type: bfloat16 (the router product in the compute dtype); float32 else
  // Which assignments an expert over capacity drops: "position" (later tokens of the sequence
  // first) or "probs" (lowest router probability first), Megatron's moe_token_drop_policy.
  TokenDropPolicy token_drop_policy = TokenDropPolicy::kPosition;
  // Which layers are MoE: layer i when i % moe_layer_freq == 0 (Megatron's --moe-layer-freq N).
  int64_t moe_layer_freq = 1;
  // "alltoall" (MPI_Alltoallv of the routed tokens) or "allgather" (every rank of the expert group
  // sees every token), Megatron's moe_token_dispatcher_type.
  TokenDispatcher token_dispatcher = TokenDispatcher::kAllToAll;
  // Hugging Face's Qwen2-MoE / Qwen3-MoE keys: each expert's SwiGLU width (moe_intermediate_size; 0: the model's
  // FFN width), and which layers are MoE: with decoder_sparse_step S > 0, layer i when (i + 1) % S == 0, instead of
  // moe_layer_freq's rule; never the layers of mlp_only_layers.
  int64_t expert_ffn = 0;
  // A shared expert of this width beside the routed ones (Megatron's --moe-shared-expert-intermediate-size,
  // Hugging Face's shared_expert_intermediate_size; 0: none), its output gated by sigmoid(x . w) when
  // shared_expert_gate (MindFormers' use_shared_expert_gating, Qwen2-MoE's shared_expert_gate).
  int64_t shared_expert_ffn = 0;
  bool shared_expert_gate = false;
  int64_t sparse_step = 0;
  std::vector<int64_t> dense_layers;
  // DeepSeek's routing, Megatron's keys: moe_router_score_function sigmoid (else softmax), the experts in
  // moe_router_num_groups groups of which moe_router_group_topk are open to each token (a group scored by the sum
  // of its group_score_topk best scores: Hugging Face's V2 1, V3 2; 0: Megatron's k / group_topk),
  // moe_router_topk_scaling_factor on the weights, and moe_router_enable_expert_bias: a per-expert bias added to
  // the scores for the choice alone, moved after every step by moe_router_bias_update_rate x sign(mean load -
  // expert's load) (the aux-loss-free balancing of DeepSeek-V3).
  bool router_sigmoid = false;
  int64_t router_groups = 1, router_group_topk = 1, router_group_score_topk = 0;
  double router_scaling = 1.0;
  bool expert_bias = false;
  double expert_bias_rate = 1e-3;
  bool enabled() const { return expert_num > 1; }
  bool dropless() const { return capacity_factor <= 0.0; }
  bool is_moe_layer(int64_t layer) const {
    if (!enabled() || std::find(dense_layers.begin(), dense_layers.end(), layer) != dense_layers.end()) return false;
    return sparse_step > 0 ? (layer + 1) % sparse_step == 0 : layer % std::max<int64_t>(1, moe_layer_freq) == 0;
  }
  bool operator==(const MoeConfig&) const = default;
};

// Documents packed into one training sample, as Megatron's get_ltor_masks_and_position_ids treats
// them (its --reset-position-ids, --reset-attention-mask, --eod-mask-loss): a document ends with the
// end-of-document token eod_token_id (-1: the model's eos_token_id) in the inputs, and the token after
// it starts the next one.
//  * reset_position_ids: positions (learned table and RoPE) count from 0 in each document;
//  * reset_attention_mask: a token attends only to the earlier tokens of its own document;
//  * eod_mask_loss: the prediction made at an end-of-document input is not trained.
struct DocumentConfig {
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  bool eod_mask_loss = false;
  int64_t eod_token_id = -1;
  bool resets() const { return reset_position_ids || reset_attention_mask; }
  bool operator==(const DocumentConfig&) const = default;
};

// A token of a training batch with this bit set is read as an input like any other, but it is not a
// target: its prediction has no loss and no gradient (a prompt token of fine-tuning data, whose loss
// mask is 0). The data loader sets it (core/data/gpt_dataset.h); token ids stay below it.
inline constexpr int32_t kNotTrainedBit = 1 << 30;

struct ModelConfig {
  std::string type = "GPT2Config";   // model.model_config.type
  std::string arch = "GPT2LMHeadModel";  // model.arch.type
  int64_t vocab_size = 50257;
  int64_t seq_length = 1024;
  int64_t max_position_embeddings = 1024;
  int64_t hidden_size = 768;
  int64_t num_layers = 12;
  int64_t num_heads = 12;
  int64_t expand_ratio = 4;
  std::string hidden_act = "gelu";
  float hidden_dropout_rate = 0.1f;
  float attention_dropout_rate = 0.1f;
  float initializer_range = 0.02f;
  float layernorm_epsilon = 1e-5f;
  // Fused causal attention (core/ops/flash_attention.h): keeps a log-sum-exp per row instead of
  // the T x T probabilities; the same numbers within float rounding. The YAML default `auto`
  // turns it on from kFlashAttentionAutoMinSeq tokens.
  bool use_flash_attention = false;
  int64_t vocab_pad_multiple = 128;
  std::string param_init_type = "float32";
  std::string layernorm_compute_type = "float32";
  std::string softmax_compute_type = "float32";
  int64_t eos_token_id = 50256;
  // Llama (LlamaConfig, MindFormers' names): grouped-query attention with num_kv_heads key/value
  // heads (n_kv_heads; 0 = num_heads), RoPE base rope_theta (theta), RMSNorm epsilon
  // rms_norm_eps, and the SwiGLU width: intermediate_size when > 0, else derived from
  // multiple_of and ffn_dim_multiplier (0 = None) as MindFormers' LlamaFeedForward does (ffn_hidden).
  // tie_word_embeddings: the LM head reads the token embedding (GPT-2 always does).
  int64_t num_kv_heads = 0;
  double rope_theta = 10000.0;
  float rms_norm_eps = 1e-5f;
  int64_t intermediate_size = 0;
  int64_t multiple_of = 256;
  double ffn_dim_multiplier = 0.0;
  bool tie_word_embeddings = false;
  bool qkv_has_bias = false;
  // MindSpeed's GPT MoE on GPT-2 blocks (Megatron's --position-embedding-type rope
  // --disable-bias-linear): model_config.position_embedding_type "learned_absolute" | "rope"
  // (GPT-2 only; Llama is always rope) and model_config.add_bias_linear.
  std::string position_embedding_type = "learned_absolute";
  bool add_bias_linear = true;
  MoeConfig moe;
  DocumentConfig documents;
  // Banded attention (Hugging Face's sliding_window, Mistral's): a token attends to itself and the
  // sliding_window - 1 tokens before it (keys j with i - j < sliding_window); 0: the whole prefix.
  // Ascend's pre_tokens P is sliding_window P + 1 (runner/config reads both).
  int64_t sliding_window = 0;
  // The layers sliding_window applies to (Hugging Face's layer_types: "sliding_attention" true, "full_attention"
  // false; Gemma 3's five local layers to one global); empty: every layer.
  std::vector<bool> window_layers;
  // The windowed layers' RoPE base (Gemma 3's rope_local_base_freq: default RoPE, no rope_scaling); 0: theta.
  double rope_local_theta = 0.0;
  // Gemma's query_pre_attn_scalar: the scores are scaled by its -1/2 power instead of head_dim's; 0: head_dim.
  double query_pre_attn_scalar = 0.0;
  // Multi-head latent attention (DeepSeek-V2/V3; MindFormers' and Hugging Face's keys): q_lora_rank (0: q_proj),
  // kv_lora_rank (0: no MLA), qk_nope_head_dim, qk_rope_head_dim, v_head_dim.
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  // Heads of an explicit width (Hugging Face's head_dim, Megatron's kv_channels): Llama 3.2 3B, Qwen3 and
  // Gemma have num_heads x head_dim != hidden_size; q, k, v project to heads x head_dim and o back to
  // hidden_size. 0: hidden_size / num_heads.
  int64_t head_dim_explicit = 0;
  // Qwen3's q_norm and k_norm (Megatron's --qk-layernorm): an RMSNorm of head_dim with its own weight on
  // each query head and each key head after the projection, before RoPE.
  bool qk_layernorm = false;
  // Hugging Face's rope_scaling (modeling_rope_utils.py: linear, dynamic, yarn, llama3, longrope) and
  // partial_rotary_factor; the default leaves RoPE as rope_theta alone gives it.
  ops::RopeScaling rope_scaling;
  // model_config.pet_config: LoRA (models/lora.h); off by default.
  LoraConfig lora;
  int64_t eod_id() const { return documents.eod_token_id >= 0 ? documents.eod_token_id : eos_token_id; }
  // How the run splits and recomputes the model, and the dtype of its products, are not here: they are
  // the run's ModelLayout (models/layout.h), passed beside this config.
  bool operator==(const ModelConfig&) const = default;

  int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  // The FFN width of its architecture (the registry's spec: models/registry.cpp): GPT-2's hidden_size x
  // expand_ratio, Llama's intermediate_size or MindFormers' derivation (models/arch/llama.cpp).
  int64_t ffn_hidden() const;
  int64_t head_dim() const {
    return kv_lora_rank > 0 ? qk_nope_head_dim + qk_rope_head_dim
                            : head_dim_explicit > 0 ? head_dim_explicit : hidden_size / num_heads;
  }
  // Vocabulary padded up to a multiple of vocab_pad_multiple * tp (so each rank's share is a
  // multiple of vocab_pad_multiple).
  int64_t padded_vocab(int tp = 1) const {
    const int64_t m = vocab_pad_multiple * tp;
    return (vocab_size + m - 1) / m * m;
  }
};

}  // namespace gf
