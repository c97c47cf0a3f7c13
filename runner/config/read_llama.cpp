// Reading a LlamaConfig model section into ModelConfig (see runner/config/read.h): the keys of MindFormers'
// LlamaConfig that runner/config/keys_llama.cpp marks built or checked, with the values MindFormers gives
// their None. MindFormers' Llama has no dropout, so the dropout rates are 0.
#include <string>
#include <type_traits>

#include "models/registry.h"
#include "runner/config/read.h"

namespace gf::config_read {
namespace {

using config_tree::show;

const std::string k = "model.model_config.";

// The fused attention core refuses grouped-query shapes (kv heads < heads) until it reads them
// (core/ops/flash_attention.cpp), so they run on the unfused core: auto picks it, and True is
// warned about and replaced. When the fused core reads them, set this true.
constexpr bool kFusedAttentionReadsGroupedQuery = false;

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
  if (m.hidden_size > 0 && m.num_heads > 0 && m.hidden_size % m.num_heads != 0)
    x.refuse(kv("hidden_size", std::to_string(m.hidden_size)) + " is not divisible by `num_heads: " +
             std::to_string(m.num_heads) + "`; pick num_heads dividing hidden_size");
  else if (m.hidden_size > 0 && m.num_heads > 0 && m.head_dim() % 2 != 0)
    x.refuse(kv("hidden_size", std::to_string(m.hidden_size)) + " / `num_heads: " + std::to_string(m.num_heads) +
             "` gives heads of " + std::to_string(m.head_dim()) + " dimensions; RoPE rotates pairs of them, so the head "
             "size must be even");
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
  const bool grouped = m.kv_heads() != m.num_heads;
  read_flash_attention(x, m.seq_length >= kFlashAttentionAutoMinSeq && (!grouped || kFusedAttentionReadsGroupedQuery));
  if (m.use_flash_attention && grouped && !kFusedAttentionReadsGroupedQuery) {
    x.warn("`" + k + "use_flash_attention: True` with `n_kv_heads: " + std::to_string(m.kv_heads()) + "` < `num_heads: " +
           std::to_string(m.num_heads) + "`: the fused attention core does not read grouped-query attention yet; the "
           "unfused core runs (the same numbers, with the T x T probabilities in memory)");
    m.use_flash_attention = false;
    x.rd.root()["model"]["model_config"]["use_flash_attention"] = false;  // the dump says what runs
  }
  check_sizes(x);
  read_llama_fixed(x);
  read_dtypes(x, k, "RMSNorm");
  read_llama_dtypes(x);
  finish_model(x);
}

}  // namespace gf::config_read
