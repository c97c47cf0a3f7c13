// GPT2Config's half of the config room (runner/config/arch_section.h): its model section's key rules,
// its reader into ModelConfig, and its FFN-width message. Its schema text is the base schema's own
// model section (runner/config/schema.cpp, kConfigDefaults), which the other types replace.
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "core/ops/activation.h"
#include "models/registry.h"
#include "models/weights/hf_config.h"
#include "runner/config/arch/sections.h"
#include "runner/config/keys.h"
#include "runner/config/read.h"

namespace gf {
namespace config_keys {
namespace {

using enum KeyUse;

// GPT2Config's model section.
std::vector<KeyRule> gpt2_model_rules() {
  return {
      {"model.model_config.type", kBuilt, "model.type"},
      {"model.model_config.seq_length", kBuilt, "model.seq_length"},
      {"model.model_config.vocab_size", kBuilt, "model.vocab_size"},
      {"model.model_config.hidden_size", kBuilt, "model.hidden_size"},
      {"model.model_config.num_layers", kBuilt, "model.num_layers"},
      {"model.model_config.num_heads", kBuilt, "model.num_heads"},
      {"model.model_config.expand_ratio", kBuilt, "model.expand_ratio"},
      {"model.model_config.hidden_act", kBuilt, "model.hidden_act"},
      {"model.model_config.hidden_dropout_rate", kBuilt, "model.hidden_dropout_rate"},
      {"model.model_config.attention_dropout_rate", kBuilt, "model.attention_dropout_rate"},
      {"model.model_config.max_position_embeddings", kBuilt, "model.max_position_embeddings"},
      {"model.model_config.initializer_range", kBuilt, "model.initializer_range"},
      {"model.model_config.layernorm_epsilon", kBuilt, "model.layernorm_epsilon"},
      {"model.model_config.param_init_type", kBuilt, "model.param_init_type"},
      {"model.model_config.layernorm_compute_type", kBuilt, "model.layernorm_compute_type"},
      {"model.model_config.softmax_compute_type", kBuilt, "model.softmax_compute_type"},
      {"model.model_config.compute_dtype", kBuilt, "model.compute_dtype"},
      {"model.model_config.use_flash_attention", kBuilt, "model.use_flash_attention"},
      {"model.model_config.sliding_window", kBuilt, "model.sliding_window (banded attention)"},
      {"model.model_config.pre_tokens", kBuilt, "model.sliding_window = pre_tokens + 1 (Ascend's flash attention; sliding_window wins)"},
      {"model.model_config.next_tokens", kChecked, "0 (causal); a larger value is warned: the model stays causal"},
      {"model.model_config.position_embedding_type", kBuilt,
       "model.position_embedding_type (learned_absolute or rope; Megatron's --position-embedding-type)"},
      {"model.model_config.rope_theta", kBuilt, "model.rope_theta (RoPE's base with position_embedding_type: rope)"},
      {"model.model_config.add_bias_linear", kBuilt, "model.add_bias_linear (False: Megatron's --disable-bias-linear)"},
      {"model.model_config.offset", kBuilt, config_keys::kOffset},
      {"model.model_config.pp_interleave_num", kBuilt, config_keys::kInterleaveNum},
      {"model.model_config.checkpoint_name_or_path", kChecked,
       "run_mode eval/predict: a path loads like load_checkpoint, a hub name is refused, and a given load_checkpoint wins "
       "(warned, as MindFormers lets it win); train/finetune: warned (MindFormers does not load it there)"},
      {"model.model_config.eos_token_id", kBuilt,
       "generation.eos_token_id (predict stops a sequence there); in training the end of document of "
       "train_dataset.data_loader's reset_position_ids, reset_attention_mask and eod_mask_loss (when eod_token_id is -1); "
       "without them every token, end-of-text included, is a target (MindFormers' GPT-2 masks tokens equal to "
       "eos_token_id out of its loss: eod_mask_loss masks the prediction made at one)"},
      {"model.model_config.bos_token_id", kIgnored, kGeneration},
      {"model.model_config.pad_token_id", kIgnored, kGeneration},
      {"model.model_config.repetition_penalty", kBuilt, config_keys::kGenerationBuilt},
      {"model.model_config.max_decode_length", kBuilt, config_keys::kGenerationBuilt},
      {"model.model_config.top_k", kBuilt, config_keys::kGenerationBuilt},
      {"model.model_config.top_p", kBuilt, config_keys::kGenerationBuilt},
      {"model.model_config.do_sample", kBuilt, config_keys::kGenerationBuilt},
      {"model.model_config.use_past", kBuilt, config_keys::kGenerationBuilt},
      {"model.model_config.batch_size", kIgnored,
       "MindFormers' batch size for prediction; the training batch is runner_config.batch_size"},
      {"model.model_config.use_prompt_flash_attention", kCpu, "an Ascend kernel for prediction"},
      {"model.model_config.num_labels", kIgnored, "sequence classification (GPT2ForSequenceClassification) is not built"},
      {"model.model_config.pet_config", kBuilt,
       "model.lora: LoRA adapters (PEFT's names c_attn, c_proj, c_fc; models/lora.h), the rest frozen"},
      {"model.arch.type", kBuilt, "model.arch"},
  };
}

}  // namespace
}  // namespace config_keys

namespace config_read {
namespace {

using config_tree::show;

void check_model(ReadContext& x, const std::string& k) {
  const ModelConfig& m = x.c.model;
  try {
    find_model(m.arch, m.type);
  } catch (const std::exception& e) {
    x.refuse(e.what());
  }
  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0) x.refuse("`" + k + key + ": " + std::to_string(v) + "`: must be > 0");
  };
  positive("vocab_size", m.vocab_size);
  positive("seq_length", m.seq_length);
  positive("hidden_size", m.hidden_size);
  positive("num_layers", m.num_layers);
  positive("num_heads", m.num_heads);
  positive("expand_ratio", m.expand_ratio);
  if (m.hidden_size > 0 && m.num_heads > 0 && m.hidden_size % m.num_heads != 0)
    x.refuse("`" + k + "hidden_size: " + std::to_string(m.hidden_size) + "` is not divisible by `num_heads: " +
             std::to_string(m.num_heads) + "`; pick num_heads dividing hidden_size");
  const std::pair<const char*, float> rates[] = {{"hidden_dropout_rate", m.hidden_dropout_rate},
                                                {"attention_dropout_rate", m.attention_dropout_rate}};
  for (auto [key, v] : rates)
    if (!(v >= 0.0f && v < 1.0f)) x.refuse("`" + k + key + ": " + std::to_string(v) + "`: must be in [0, 1)");
  try {
    ops::parse_activation(m.hidden_act);
  } catch (const std::exception& e) {
    x.refuse("`" + k + "hidden_act`: " + e.what());
  }
}

// GPT-2's positions: its learned table (learned_absolute), or RoPE as MindSpeed's GPT MoE runs GPT-2
// blocks (Megatron's --position-embedding-type rope), with base rope_theta.
void check_positions(ReadContext& x, const std::string& k) {
  const ModelConfig& m = x.c.model;
  const std::string type = m.position_embedding_type;
  if (type != "learned_absolute" && type != "rope") {
    x.refuse("`" + k + "position_embedding_type: " + type + "`: expects learned_absolute (GPT-2's learned position "
             "table) or rope (rotary embeddings on q and k, Megatron's --position-embedding-type rope)");
    return;
  }
  const std::string theta = show(x.rd.node(k + "rope_theta"));
  if (type == "learned_absolute") {
    if (m.rope_theta != 10000.0)
      x.warn("`" + k + "rope_theta: " + theta + "` has no effect with `position_embedding_type: learned_absolute` "
             "(GPT-2's learned position table); set position_embedding_type: rope for rotary embeddings; ignored");
    return;
  }
  if (!(m.rope_theta > 0) || !std::isfinite(m.rope_theta))
    x.refuse("`" + k + "rope_theta: " + theta + "`: must be > 0 (RoPE's base; 10000 as in Megatron's --rotary-base)");
  if (m.hidden_size > 0 && m.num_heads > 0 && m.hidden_size % m.num_heads == 0 && m.head_dim() % 2 != 0)
    x.refuse("`" + k + "hidden_size: " + std::to_string(m.hidden_size) + "` / `num_heads: " + std::to_string(m.num_heads) +
             "` gives heads of " + std::to_string(m.head_dim()) + " dimensions; `position_embedding_type: rope` rotates "
             "pairs of them, so the head size must be even");
}

void read_gpt2_model(ReadContext& x) {
  ModelConfig& m = x.c.model;
  KeyReader& rd = x.rd;
  const std::string k = "model.model_config.";
  m.type = rd.get<std::string>(k + "type");
  m.arch = rd.get<std::string>("model.arch.type");
  m.vocab_size = rd.get<int64_t>(k + "vocab_size");
  m.seq_length = rd.get<int64_t>(k + "seq_length");
  m.max_position_embeddings = rd.get<int64_t>(k + "max_position_embeddings");
  m.hidden_size = rd.get<int64_t>(k + "hidden_size");
  m.num_layers = rd.get<int64_t>(k + "num_layers");
  m.num_heads = rd.get<int64_t>(k + "num_heads");
  m.expand_ratio = rd.get<int64_t>(k + "expand_ratio");
  m.hidden_act = rd.get<std::string>(k + "hidden_act");
  m.hidden_dropout_rate = rd.get<float>(k + "hidden_dropout_rate");
  m.attention_dropout_rate = rd.get<float>(k + "attention_dropout_rate");
  m.initializer_range = rd.get<float>(k + "initializer_range");
  m.layernorm_epsilon = rd.get<float>(k + "layernorm_epsilon");
  m.param_init_type = rd.get<std::string>(k + "param_init_type");
  m.layernorm_compute_type = rd.get<std::string>(k + "layernorm_compute_type");
  m.softmax_compute_type = rd.get<std::string>(k + "softmax_compute_type");
  m.position_embedding_type = rd.get<std::string>(k + "position_embedding_type");
  m.rope_theta = rd.get<double>(k + "rope_theta");
  m.add_bias_linear = rd.get<bool>(k + "add_bias_linear");
  YAML::Node mc = rd.root()["model"]["model_config"];  // resolved values are written back, so the dump says what runs
  read_flash_attention(x, m.seq_length >= kFlashAttentionAutoMinSeq);
  read_attention_window(x);
  if (m.max_position_embeddings == 0 || m.max_position_embeddings < -1) {
    x.refuse("`" + k + "max_position_embeddings: " + std::to_string(m.max_position_embeddings) +
             "`: expects the position table's length (>= seq_length), or -1: seq_length");
  } else if (m.max_position_embeddings < 0) {
    m.max_position_embeddings = m.seq_length;  // MindFormers' GPT-2 sizes its position table by seq_length
    mc["max_position_embeddings"] = m.seq_length;
  } else if (m.seq_length > m.max_position_embeddings) {
    x.refuse("`" + k + "seq_length: " + std::to_string(m.seq_length) +
             "` is larger than the position table `max_position_embeddings: " + std::to_string(m.max_position_embeddings) +
             "`; lower seq_length or raise max_position_embeddings");
  }
  check_model(x, k);
  check_positions(x, k);
  read_dtypes(x, k, "LayerNorm");
  finish_model(x);
}

}  // namespace
}  // namespace config_read

namespace {
std::string gpt2_ffn_problem(const ModelConfig& m, int64_t mp) {
  return fmt::format("the FFN width `hidden_size` x `expand_ratio` ({} x {} = {}) is not divisible by "
                     "`parallel_config.model_parallel` ({})",
                     m.hidden_size, m.expand_ratio, m.ffn_hidden(), mp);
}
}  // namespace

namespace {

// The model section read_gpt2_model reads back into `m` (floats as the decimals they were written as).
std::string gpt2_model_yaml(const ModelConfig& m) {
  return fmt::format(
      "model:\n"
      "  arch: {{type: {}}}\n"
      "  model_config:\n"
      "    type: GPT2Config\n"
      "    vocab_size: {}\n    seq_length: {}\n    max_position_embeddings: {}\n"
      "    hidden_size: {}\n    num_layers: {}\n    num_heads: {}\n    expand_ratio: {}\n"
      "    hidden_act: {}\n    hidden_dropout_rate: {}\n    attention_dropout_rate: {}\n"
      "    layernorm_epsilon: {}\n    initializer_range: {}\n    eos_token_id: {}\n",
      m.arch, m.vocab_size, m.seq_length, m.max_position_embeddings, m.hidden_size, m.num_layers, m.num_heads,
      m.expand_ratio, m.hidden_act, float_decimal(m.hidden_dropout_rate), float_decimal(m.attention_dropout_rate),
      float_decimal(m.layernorm_epsilon), float_decimal(m.initializer_range), m.eos_token_id);
}

}  // namespace

ArchConfigSection gpt2_config_section() {
  return {"GPT2Config", "GPT-2", nullptr, config_keys::gpt2_model_rules, nullptr, config_read::read_gpt2_model,
          gpt2_ffn_problem, gpt2_model_yaml};
}

}  // namespace gf
