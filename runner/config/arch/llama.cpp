// LlamaConfig's half of the config room (runner/config/arch_section.h): its schema text (the `model`
// section and trainer.model_name that replace the base schema's), its reader, its FFN-width message and
// the section; its key rules are in runner/config/arch/llama_keys.cpp.
//
// The reader:
// Reading a LlamaConfig model section into ModelConfig (see runner/config/read.h): the keys of MindFormers'
// LlamaConfig that the rules above mark built or checked, with the values MindFormers gives
// their None. MindFormers' Llama has no dropout, so the dropout rates are 0.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/ops/rope_scaling.h"
#include "models/registry.h"
#include "models/weights/hf_config.h"
#include "runner/config/arch/sections.h"
#include "runner/config/keys.h"
#include "runner/config/read.h"

namespace gf {
namespace {

// A LlamaConfig file's `model` section (replacing kConfigDefaults' whole) and trainer.model_name:
// MindFormers r1.0-r1.3 LlamaConfig's keys and defaults, but the dtypes (float32, as for GPT-2:
// MindFormers' default float16 is an Ascend choice; its files say what they want) and
// use_flash_attention (auto, as for GPT-2); plus tie_word_embeddings (r1.3's and Hugging Face's
// name), initializer_range (Hugging Face's; MindFormers' Llama has none), and GPT-2's
// position_embedding_type and add_bias_linear at the only values a Llama has. What each key does:
// the rules below.
const char* const kLlamaDefaults = R"YAML(
trainer:
  model_name: llama
model:
  model_config:
    type: LlamaConfig
    seq_length: 2048
    vocab_size: 32000
    hidden_size: 4096
    num_layers: 32
    num_heads: 32
    n_kv_heads: ~              # None: num_heads (multi-head); fewer: grouped-query attention
    max_position_embedding: ~  # None: seq_length (the RoPE table; must cover seq_length)
    intermediate_size: ~       # None: 2/3 of 4 x hidden_size, x ffn_dim_multiplier, rounded up to multiple_of
    multiple_of: 256
    ffn_dim_multiplier: ~      # None: 1
    rms_norm_eps: 1.0e-5
    theta: 10000.0
    rope_scaling: ~            # Hugging Face's rope_scaling map (rope_type linear, dynamic, yarn, llama3, longrope and their keys); None: RoPE from theta alone
    head_dim: ~                # None: hidden_size / num_heads; else each head's width (Llama 3.2, Qwen3: num_heads x head_dim may differ from hidden_size)
    qk_layernorm: false        # Qwen3's q_norm / k_norm: an RMSNorm on every query and key head before RoPE
    query_pre_attn_scalar: ~   # Gemma's: the scores scaled by its -1/2 power; None: head_dim's
    layer_types: ~             # per layer sliding_attention (sliding_window applies) or full_attention (Hugging Face's, Gemma 3's five local to one global); None: sliding_window on every layer
    q_lora_rank: ~             # DeepSeek-V2/V3's multi-head latent attention (arch DeepseekV2ForCausalLM): the query latent's width; None: q_proj
    kv_lora_rank: ~            # the key/value latent's width (MLA on when set)
    qk_nope_head_dim: ~        # each query/key head's part without RoPE
    qk_rope_head_dim: ~        # each query/key head's RoPE part (one RoPE key shared by the heads)
    v_head_dim: ~              # each value head's width
    rope_local_base_freq: ~    # Gemma 3's: the RoPE base of the sliding_attention layers (default RoPE, no rope_scaling); None: theta
    extend_method: "None"
    scaling_factor: 1.0
    qkv_has_bias: false
    position_embedding_type: rope  # a Llama's only (GPT-2's key, accepted when it says rope)
    add_bias_linear: false     # a Llama's only (GPT-2's key, accepted when False)
    tie_word_embeddings: false
    initializer_range: 0.02
    param_init_type: float32
    embedding_init_type: ~     # None: param_init_type
    layernorm_compute_type: float32
    softmax_compute_type: float32
    rotary_dtype: float32
    compute_dtype: float32
    use_flash_attention: auto  # True, False, or auto: fused from seq_length 128 on where the fused core runs
    sliding_window: ~          # banded attention: each token sees itself and the sliding_window - 1 tokens before it (Hugging Face's, Mistral's); None: the whole prefix
    pre_tokens: ~              # Ascend's flash attention: the tokens before a query that it sees (sliding_window = pre_tokens + 1); sliding_window wins when both are given
    next_tokens: ~             # Ascend's: the tokens after a query that it sees; the model is causal: 0 (a larger value is warned and runs causal)
    checkpoint_name_or_path: ""
    qkv_concat: false
    use_rope_slice: false
    use_attn_mask_compression: false
    use_ring_attention: false
    fused_rms_norm: true
    is_dynamic: false
    fine_grain_interleave: 1
    compute_in_2d: ~
    parallel_optimizer: false
    pp_interleave_num: 1
    offset: 0
    quant: ""
    quant_config: ~
    pet_config: ~
    batch_size: 1
    bos_token_id: 1
    eos_token_id: 2
    pad_token_id: 0
    ignore_token_id: -100
    use_past: false
    use_past_shard: ~
    pretrain_seqlen: ~
    use_kvcache_op: false
    is_flexible_shape: false
    use_paged_attention: false
    use_prompt_flash_attention: false
    use_incre_flash_attention: false
    block_size: 16
    num_blocks: 512
    repetition_penalty: 1.0
    max_decode_length: 1024
    top_k: 5
    top_p: 1.0
    do_sample: true
    temperature: 1.0
    llm_backend: ""
  arch:
    type: LlamaForCausalLM
)YAML";

}  // namespace
}  // namespace gf

namespace gf::config_read {
namespace {

using config_tree::show;

const std::string k = "model.model_config.";

std::string kv(const std::string& key, const std::string& value) { return "`" + k + key + ": " + value + "`"; }

// A key whose None means "derived" (`none_means`): null gives `none`; else a value > 0 (an integer
// for an integral T), refused otherwise.
template <typename T>
T optional_positive(ReadContext& x, const char* key, T none, const char* none_means) {
  const YAML::Node n = x.rd.node(k + key);
  if (n.IsNull()) return none;
  T v{};
  if (n.IsScalar() && YAML::convert<T>::decode(n, v) && v > 0) return v;
  x.refuse(kv(key, show(n)) + ": expects " + (std::is_integral_v<T> ? "an integer" : "a number") + " > 0, or ~ (" +
           none_means + "; YAML's null is MindFormers' None)");
  return none;
}

void read_sizes(ReadContext& x) {
  ModelConfig& m = x.c.model;
  KeyReader& rd = x.rd;
  m.type = rd.get<std::string>(k + "type");
  m.arch = rd.get<std::string>("model.arch.type");
  m.vocab_size = rd.get<int64_t>(k + "vocab_size");
  m.seq_length = rd.get<int64_t>(k + "seq_length");
  m.hidden_size = rd.get<int64_t>(k + "hidden_size");
  m.num_layers = rd.get<int64_t>(k + "num_layers");
  m.num_heads = rd.get<int64_t>(k + "num_heads");
  m.num_kv_heads = optional_positive<int64_t>(x, "n_kv_heads", 0, "num_heads");
  m.intermediate_size = optional_positive<int64_t>(x, "intermediate_size", 0, "derived from hidden_size");
  m.multiple_of = rd.get<int64_t>(k + "multiple_of");
  m.ffn_dim_multiplier = optional_positive<double>(x, "ffn_dim_multiplier", 0.0, "1");
  m.rms_norm_eps = rd.get<float>(k + "rms_norm_eps");
  m.rope_theta = rd.get<double>(k + "theta");
  m.head_dim_explicit = optional_positive<int64_t>(x, "head_dim", 0, "hidden_size / num_heads");
  if (m.head_dim_explicit > 0 && m.num_heads > 0 && m.head_dim_explicit * m.num_heads == m.hidden_size)
    m.head_dim_explicit = 0;  // the derived width: the same model
  m.qk_layernorm = rd.get<bool>(k + "qk_layernorm");
  m.query_pre_attn_scalar = optional_positive<double>(x, "query_pre_attn_scalar", 0.0, "head_dim");
  m.rope_local_theta = optional_positive<double>(x, "rope_local_base_freq", 0.0, "theta");
  m.q_lora_rank = optional_positive<int64_t>(x, "q_lora_rank", 0, "q_proj");
  m.kv_lora_rank = optional_positive<int64_t>(x, "kv_lora_rank", 0, "no latent attention");
  m.qk_nope_head_dim = optional_positive<int64_t>(x, "qk_nope_head_dim", 0, "unset");
  m.qk_rope_head_dim = optional_positive<int64_t>(x, "qk_rope_head_dim", 0, "unset");
  m.v_head_dim = optional_positive<int64_t>(x, "v_head_dim", 0, "unset");
  m.window_layers.clear();
  if (const YAML::Node types = rd.node(k + "layer_types"); types && !types.IsNull()) {
    const std::string want = ": expects a list of sliding_attention / full_attention, one per layer, or ~";
    if (!types.IsSequence()) {
      x.refuse(kv("layer_types", show(types)) + want);
    } else {
      for (const YAML::Node& t : types) {
        const std::string v = t.IsScalar() ? t.Scalar() : show(t);
        if (v != "sliding_attention" && v != "full_attention") {
          x.refuse(kv("layer_types", show(types)) + ": '" + v + "'" + want);
          break;
        }
        m.window_layers.push_back(v == "sliding_attention");
      }
      if (static_cast<int64_t>(m.window_layers.size()) != m.num_layers && m.num_layers > 0)
        x.refuse(kv("layer_types", show(types)) + ": " + std::to_string(m.window_layers.size()) + " entries for `num_layers: " +
                 std::to_string(m.num_layers) + "`" + want);
    }
  }
  const YAML::Node scaling = rd.node(k + "rope_scaling");
  if (scaling && !scaling.IsNull()) {
    if (!scaling.IsMap()) {
      x.refuse(kv("rope_scaling", show(scaling)) + ": expects a map such as {rope_type: llama3, factor: 32.0, "
               "low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position_embeddings: 8192}, or ~");
    } else {
      try {
        nlohmann::json hf{{"rope_scaling", config_tree::to_json(scaling)}, {"rope_theta", m.rope_theta}};
        m.rope_scaling = ops::read_rope_config(hf, m.rope_theta).scaling;
      } catch (const std::exception& e) {
        x.refuse(kv("rope_scaling", show(scaling)) + ": " + e.what());
      }
    }
  }
  m.qkv_has_bias = rd.get<bool>(k + "qkv_has_bias");
  m.tie_word_embeddings = rd.get<bool>(k + "tie_word_embeddings");
  m.initializer_range = rd.get<float>(k + "initializer_range");
  m.hidden_dropout_rate = m.attention_dropout_rate = 0.0f;  // LlamaConfig has no dropout
  // The RoPE table: None is seq_length (LlamaConfig's `max_position_embedding or seq_length`).
  const int64_t table = optional_positive<int64_t>(x, "max_position_embedding", -1, "seq_length");
  m.max_position_embeddings = table < 0 ? m.seq_length : table;
  if (table < 0) rd.root()["model"]["model_config"]["max_position_embedding"] = m.seq_length;  // the dump says what runs
}

void check_sizes(ReadContext& x) {
  const ModelConfig& m = x.c.model;
  try {
    find_model(m.arch, m.type);
  } catch (const std::exception& e) {
    x.refuse(e.what());
  }
  const std::pair<const char*, int64_t> sizes[] = {{"vocab_size", m.vocab_size},   {"seq_length", m.seq_length},
                                                   {"hidden_size", m.hidden_size}, {"num_layers", m.num_layers},
                                                   {"num_heads", m.num_heads},     {"multiple_of", m.multiple_of}};
  for (auto [key, v] : sizes)
    if (v <= 0) x.refuse(kv(key, std::to_string(v)) + ": must be > 0");
  if (m.head_dim_explicit > 0 && m.head_dim_explicit % 2 != 0)
    x.refuse(kv("head_dim", std::to_string(m.head_dim_explicit)) + ": RoPE rotates pairs, so the head width must be even");
  else if (m.head_dim_explicit > 0)
    ;  // heads of their own width: hidden_size need not divide
  else if (m.hidden_size > 0 && m.num_heads > 0 && m.hidden_size % m.num_heads != 0)
    x.refuse(kv("hidden_size", std::to_string(m.hidden_size)) + " is not divisible by `num_heads: " +
             std::to_string(m.num_heads) + "`; pick num_heads dividing hidden_size, or give head_dim");
  else if (m.hidden_size > 0 && m.num_heads > 0 && m.head_dim() % 2 != 0)
    x.refuse(kv("hidden_size", std::to_string(m.hidden_size)) + " / `num_heads: " + std::to_string(m.num_heads) +
             "` gives heads of " + std::to_string(m.head_dim()) + " dimensions; RoPE rotates pairs of them, so the head "
             "size must be even");
  // Hugging Face's Qwen classes always have what the name says.
  if ((m.arch == "Qwen2ForCausalLM" || m.arch == "Qwen2MoeForCausalLM") && !m.qkv_has_bias)
    x.refuse("`model.arch.type: " + m.arch + "` has q/k/v biases: set " + kv("qkv_has_bias", "True") +
             " (or use LlamaForCausalLM)");
  const bool mla_arch = m.arch == "DeepseekV2ForCausalLM" || m.arch == "DeepseekV3ForCausalLM";
  if (mla_arch && (m.kv_lora_rank <= 0 || m.qk_nope_head_dim <= 0 || m.qk_rope_head_dim <= 0 || m.v_head_dim <= 0))
    x.refuse("`model.arch.type: " + m.arch + "` is multi-head latent attention: set `model.model_config.kv_lora_rank`, "
             "`qk_nope_head_dim`, `qk_rope_head_dim` and `v_head_dim` (DeepSeek-V2-Lite: 512, 128, 64, 128)");
  if (!mla_arch && (m.kv_lora_rank > 0 || m.q_lora_rank > 0 || m.qk_nope_head_dim > 0 || m.qk_rope_head_dim > 0 ||
                    m.v_head_dim > 0))
    x.refuse("`model.model_config.kv_lora_rank` and the other latent-attention keys are DeepSeek's: use "
             "`model.arch.type: DeepseekV2ForCausalLM`, or remove them");
  if (mla_arch && m.qk_rope_head_dim % 2 != 0)
    x.refuse(kv("qk_rope_head_dim", std::to_string(m.qk_rope_head_dim)) + ": RoPE rotates pairs, so it must be even");
  if (mla_arch && m.v_head_dim > m.qk_nope_head_dim + m.qk_rope_head_dim)
    x.refuse(kv("v_head_dim", std::to_string(m.v_head_dim)) + ": wider than qk_nope_head_dim + qk_rope_head_dim, not built");
  if (m.arch == "Gemma3ForCausalLM" && !m.qk_layernorm)
    x.refuse("`model.arch.type: " + m.arch + "` has q/k norms: set " + kv("qk_layernorm", "True"));
  if (m.arch == "Gemma3ForCausalLM" && m.sliding_window <= 0)
    x.refuse("`model.arch.type: " + m.arch + "` has local layers with a window: set `model.model_config.sliding_window` "
             "(Gemma 3 1B: 512) and layer_types");
  if (m.sliding_window <= 0 && (m.rope_local_theta > 0 || std::find(m.window_layers.begin(), m.window_layers.end(), true) !=
                                                              m.window_layers.end()))
    x.warn("`model.model_config.layer_types` / `rope_local_base_freq` name the sliding_attention layers, but "
           "`sliding_window` is None: every layer sees the whole prefix with theta's RoPE");
  if ((m.arch == "Qwen3ForCausalLM" || m.arch == "Qwen3MoeForCausalLM") && !m.qk_layernorm)
    x.refuse("`model.arch.type: " + m.arch + "` has q/k norms: set " + kv("qk_layernorm", "True") +
             " (or use LlamaForCausalLM)");
  if (m.num_kv_heads > 0 && m.num_heads > 0 && m.num_heads % m.num_kv_heads != 0)
    x.refuse(kv("n_kv_heads", std::to_string(m.num_kv_heads)) + ": must divide `num_heads` (" +
             std::to_string(m.num_heads) + "): each key/value head serves an equal group of query heads (~: num_heads)");
  if (!(m.rms_norm_eps > 0)) x.refuse(kv("rms_norm_eps", show(x.rd.node(k + "rms_norm_eps"))) + ": must be > 0");
  if (!(m.rope_theta > 0)) x.refuse(kv("theta", show(x.rd.node(k + "theta"))) + ": must be > 0 (RoPE's base)");
  if (m.seq_length > m.max_position_embeddings)
    x.refuse(kv("seq_length", std::to_string(m.seq_length)) + " is longer than the RoPE table `max_position_embedding: " +
             std::to_string(m.max_position_embeddings) + "`; raise max_position_embedding (~: seq_length) or lower "
             "seq_length");
}

// rotary_dtype and embedding_init_type: what MindFormers would compute or store in lower precision.
void read_llama_dtypes(ReadContext& x) {
  const auto dtype = [](const std::string& v) { return v == "float32" || v == "float16" || v == "bfloat16"; };
  const std::string rotary = x.rd.get<std::string>(k + "rotary_dtype");
  if (!dtype(rotary))
    x.refuse(kv("rotary_dtype", rotary) + ": expects float32, float16 or bfloat16");
  else if (rotary != "float32")
    x.warn(kv("rotary_dtype", rotary) + ": RoPE's sin/cos tables and rotation are computed in float32 (more precise "
           "than asked)");
  const YAML::Node emb = x.rd.node(k + "embedding_init_type");
  if (emb.IsNull()) return;  // None: param_init_type's
  const std::string e = emb.IsScalar() ? emb.Scalar() : show(emb);
  if (!dtype(e))
    x.refuse(kv("embedding_init_type", e) + ": expects float32, float16 or bfloat16, or ~ (param_init_type's)");
  else if (e != "float32")
    x.warn(kv("embedding_init_type", e) + ": the embedding, like every master weight, its gradient and optimizer "
           "state, is kept in float32; compute_dtype sets the precision of the matrix products");
}

// GPT-2's position_embedding_type and add_bias_linear, at the only values a Llama has.
void read_llama_fixed(ReadContext& x) {
  ModelConfig& m = x.c.model;
  const std::string pos = x.rd.get<std::string>(k + "position_embedding_type");
  if (pos != "rope")
    x.refuse(kv("position_embedding_type", pos) + ": a Llama's positions are RoPE's (base `theta`); use rope, or "
             "remove the key (learned_absolute is GPT-2's)");
  if (x.rd.get<bool>(k + "add_bias_linear"))
    x.refuse(kv("add_bias_linear", "True") + ": a Llama's linear layers have no biases (qkv_has_bias: True adds them "
             "to q, k and v); use False, or remove the key");
  m.position_embedding_type = "rope";
  m.add_bias_linear = false;
}

}  // namespace

void read_llama_model(ReadContext& x) {
  read_sizes(x);
  ModelConfig& m = x.c.model;
  m.param_init_type = x.rd.get<std::string>(k + "param_init_type");
  m.layernorm_compute_type = x.rd.get<std::string>(k + "layernorm_compute_type");
  m.softmax_compute_type = x.rd.get<std::string>(k + "softmax_compute_type");
  // Grouped-query heads (n_kv_heads < num_heads) take the fused core too: each query head reads its
  // group's key/value head (core/ops/flash_attention.cpp).
  read_flash_attention(x, m.seq_length >= kFlashAttentionAutoMinSeq);
  read_attention_window(x);
  check_sizes(x);
  read_llama_fixed(x);
  read_dtypes(x, k, "RMSNorm");
  read_llama_dtypes(x);
  finish_model(x);
}

}  // namespace gf::config_read

namespace gf {
namespace {
std::string llama_ffn_problem(const ModelConfig& m, int64_t mp) {
  if (m.intermediate_size > 0)
    return fmt::format("the FFN width `model.model_config.intermediate_size` ({}) is not divisible by "
                       "`parallel_config.model_parallel` ({})",
                       m.intermediate_size, mp);
  return fmt::format("the FFN width ({}, derived from `hidden_size` {}{} rounded up to `multiple_of` {}, as "
                     "`intermediate_size` is unset) is not divisible by `parallel_config.model_parallel` ({}); set "
                     "`model.model_config.intermediate_size` to a multiple of it",
                     m.ffn_hidden(), m.hidden_size,
                     m.ffn_dim_multiplier > 0 ? fmt::format(" x `ffn_dim_multiplier` {}", m.ffn_dim_multiplier) : "",
                     m.multiple_of, mp);
}
}  // namespace

namespace {

// The model section (and moe_config) read_llama_model and read_moe read back into `m`.
std::string llama_model_yaml(const ModelConfig& m) {
  std::string y = fmt::format(
      "model:\n"
      "  arch: {{type: {}}}\n"
      "  model_config:\n"
      "    type: LlamaConfig\n"
      "    vocab_size: {}\n    seq_length: {}\n    max_position_embedding: {}\n"
      "    hidden_size: {}\n    num_layers: {}\n    num_heads: {}\n    n_kv_heads: {}\n    intermediate_size: {}\n"
      "    rms_norm_eps: {}\n    theta: {}\n    tie_word_embeddings: {}\n    initializer_range: {}\n"
      "    eos_token_id: {}\n",
      m.arch, m.vocab_size, m.seq_length, m.max_position_embeddings, m.hidden_size, m.num_layers, m.num_heads,
      m.num_kv_heads > 0 ? m.num_kv_heads : m.num_heads, m.intermediate_size, float_decimal(m.rms_norm_eps),
      m.rope_theta, m.tie_word_embeddings ? "True" : "False", float_decimal(m.initializer_range), m.eos_token_id);
  if (m.sliding_window > 0) y += fmt::format("    sliding_window: {}\n", m.sliding_window);
  if (m.qkv_has_bias) y += "    qkv_has_bias: True\n";
  if (m.head_dim_explicit > 0) y += fmt::format("    head_dim: {}\n", m.head_dim_explicit);
  if (m.qk_layernorm) y += "    qk_layernorm: True\n";
  if (m.query_pre_attn_scalar > 0) y += fmt::format("    query_pre_attn_scalar: {}\n", m.query_pre_attn_scalar);
  if (m.kv_lora_rank > 0)
    y += fmt::format("    q_lora_rank: {}\n    kv_lora_rank: {}\n    qk_nope_head_dim: {}\n    qk_rope_head_dim: {}\n"
                     "    v_head_dim: {}\n",
                     m.q_lora_rank > 0 ? std::to_string(m.q_lora_rank) : std::string("~"), m.kv_lora_rank,
                     m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim);
  if (m.rope_local_theta > 0) y += fmt::format("    rope_local_base_freq: {}\n", m.rope_local_theta);
  if (!m.window_layers.empty()) {
    std::vector<std::string> types;
    for (bool w : m.window_layers) types.push_back(w ? "sliding_attention" : "full_attention");
    y += fmt::format("    layer_types: [{}]\n", fmt::join(types, ", "));
  }
  if (m.rope_scaling.rope_type != "default" || m.rope_scaling.partial_rotary_factor != 1.0)
  {
    nlohmann::json r = ops::rope_scaling_json(m.rope_scaling);
    if (r.is_null()) r = {{"rope_type", "default"}};
    if (m.rope_scaling.partial_rotary_factor != 1.0) r["partial_rotary_factor"] = m.rope_scaling.partial_rotary_factor;
    y += fmt::format("    rope_scaling: {}\n", r.dump());
  }
  if (m.moe.expert_num > 1) {
    y += fmt::format("moe_config:\n  expert_num: {}\n  num_experts_chosen: {}\n  capacity_factor: {}\n"
                     "  aux_loss_factor: {}\n  z_loss_factor: {}\n  norm_topk_prob: {}\n  moe_layer_freq: {}\n",
                     m.moe.expert_num, m.moe.num_experts_chosen, m.moe.capacity_factor, m.moe.aux_loss_factor,
                     m.moe.z_loss_factor, m.moe.norm_topk_prob ? "True" : "False", m.moe.moe_layer_freq);
    if (m.moe.expert_ffn > 0) y += fmt::format("  moe_ffn_hidden_size: {}\n", m.moe.expert_ffn);
    if (m.moe.sparse_step > 0) y += fmt::format("  decoder_sparse_step: {}\n", m.moe.sparse_step);
    if (m.moe.shared_expert_ffn > 0)
      y += fmt::format("  moe_shared_expert_intermediate_size: {}\n  use_shared_expert_gating: {}\n",
                       m.moe.shared_expert_ffn, m.moe.shared_expert_gate ? "True" : "False");
    if (!m.moe.dense_layers.empty()) y += fmt::format("  mlp_only_layers: [{}]\n", fmt::join(m.moe.dense_layers, ", "));
    if (m.moe.router_sigmoid) y += "  moe_router_score_function: sigmoid\n";
    if (m.moe.router_groups > 1)
      y += fmt::format("  moe_router_num_groups: {}\n  moe_router_group_topk: {}\n", m.moe.router_groups,
                       m.moe.router_group_topk);
    if (m.moe.router_group_score_topk > 0) y += fmt::format("  moe_router_group_score_topk: {}\n", m.moe.router_group_score_topk);
    if (m.moe.router_scaling != 1.0) y += fmt::format("  moe_router_topk_scaling_factor: {}\n", m.moe.router_scaling);
    if (m.moe.expert_bias)
      y += fmt::format("  moe_router_enable_expert_bias: True\n  moe_router_bias_update_rate: {}\n", m.moe.expert_bias_rate);
  }
  return y;
}

}  // namespace

ArchConfigSection llama_config_section() {
  return {"LlamaConfig", "Llama", kLlamaDefaults, config_keys::llama_model_rules, config_keys::llama_foreign_keys,
          config_read::read_llama_model, llama_ffn_problem, llama_model_yaml};
}

}  // namespace gf
