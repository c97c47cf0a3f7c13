// Hugging Face's config.json (models/weights/hf_config.h) against files we did not write: the
// config.json files published with GPT-2 (openai-community/gpt2), Llama 2 7B (meta-llama/Llama-2-7b-hf)
// and Mixtral 8x7B (mistralai/Mixtral-8x7B-v0.1), tests/data/hf_configs, read beside MindFormers' own
// YAML files for the same models (tests/data/mindformers): each pair must describe the same model, and
// what we write for MindFormers' config must carry the published file's values under
// transformers' key names. Then our own exports read back, and the differences and refusals a user
// meets, by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>

#include "models/weights/hf_config.h"
#include "runner/config/arch_section.h"
#include "runner/config/config.h"

namespace gf {
namespace {

std::string src(const std::string& f) { return std::string(GF_SOURCE_DIR) + "/" + f; }

nlohmann::json published(const std::string& name) {
  std::ifstream in(src("tests/data/hf_configs/" + name));
  return nlohmann::json::parse(in);
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += x + "\n";
  return s;
}

bool has(const std::vector<std::string>& v, const std::string& needle) {
  for (const std::string& x : v)
    if (x.find(needle) != std::string::npos) return true;
  return false;
}

// The keys of `ours` that `theirs` also has, compared value by value (numbers as numbers).
void expect_same_keys(const nlohmann::json& ours, const nlohmann::json& theirs, const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    ASSERT_TRUE(ours.contains(k)) << k;
    ASSERT_TRUE(theirs.contains(k)) << k;
    if (theirs[k].is_number())
      EXPECT_DOUBLE_EQ(ours[k].get<double>(), theirs[k].get<double>()) << k;
    else
      EXPECT_EQ(ours[k], theirs[k]) << k;
  }
}

TEST(HfConfig, MindFormersLlama2IsMetasLlama2) {
  const Config c = load_config(src("tests/data/mindformers/r1.3/pretrain_llama2_7b.yaml"));
  const nlohmann::json meta = published("llama2_7b.json");
  const HfConfigCheck check = check_hf_config(meta, c.model, "config.json");
  EXPECT_TRUE(check.errors.empty()) << joined(check.errors);
  const nlohmann::json ours = hf_config_json(c.model);
  expect_same_keys(ours, meta,
                   {"architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads", "num_key_value_heads", "hidden_act", "max_position_embeddings",
                    "rms_norm_eps", "tie_word_embeddings", "initializer_range"});
  EXPECT_DOUBLE_EQ(ours["rope_theta"].get<double>(), 10000.0);  // LlamaConfig's default: Meta's file leaves it out
}

TEST(HfConfig, MindFormersMixtralIsMistralsMixtral) {
  const Config c = load_config(src("tests/data/mindformers/r1.3/pretrain_mixtral-8x7b.yaml"));
  const nlohmann::json mistral = published("mixtral_8x7b.json");
  const HfConfigCheck check = check_hf_config(mistral, c.model, "config.json");
  EXPECT_TRUE(check.errors.empty()) << joined(check.errors);
  expect_same_keys(hf_config_json(c.model), mistral,
                   {"architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads", "num_key_value_heads", "hidden_act", "rms_norm_eps", "rope_theta",
                    "num_local_experts", "num_experts_per_tok", "tie_word_embeddings", "initializer_range"});
}

TEST(HfConfig, MindFormersGpt2IsOpenAIsGpt2UpToTheGeluVariant) {
  const Config c = load_config(src("tests/data/mindformers/run_gpt2.yaml"));
  const nlohmann::json openai = published("gpt2.json");
  const HfConfigCheck check = check_hf_config(openai, c.model, "config.json");
  EXPECT_TRUE(check.errors.empty()) << joined(check.errors);
  // MindFormers' file says hidden_act: gelu (erf); Hugging Face's GPT-2 runs gelu_new (tanh): said, not refused.
  EXPECT_TRUE(has(check.warnings, "MLP activation: gelu in the config")) << joined(check.warnings);
  Config tanh = load_config(src("tests/data/mindformers/run_gpt2.yaml"), {"model.model_config.hidden_act=gelu_new"});
  const nlohmann::json ours = hf_config_json(tanh.model);
  expect_same_keys(ours, openai,
                   {"architectures", "model_type", "vocab_size", "n_positions", "n_embd", "n_layer", "n_head",
                    "activation_function", "layer_norm_epsilon", "initializer_range", "eos_token_id"});
  EXPECT_EQ(ours["n_inner"], 4 * 768);  // the published file's null: 4 n_embd
  const HfConfigCheck same = check_hf_config(openai, tanh.model, "config.json");
  EXPECT_TRUE(same.errors.empty() && same.warnings.empty()) << joined(same.errors) << joined(same.warnings);
}

TEST(HfConfig, OurTinyConfigsReadBackWithoutADifference) {
  for (const char* f : {"configs/gpt2/run_gpt2_tiny.yaml", "configs/llama/run_llama_tiny.yaml",
                        "configs/moe/run_mixtral_tiny.yaml"}) {
    const Config c = load_config(src(f));
    const HfConfigCheck check = check_hf_config(hf_config_json(c.model), c.model, "config.json");
    EXPECT_TRUE(check.errors.empty()) << f << ": " << joined(check.errors);
    EXPECT_TRUE(check.warnings.empty()) << f << ": " << joined(check.warnings);
  }
}

// `gridformer config --from-hf`: the published config.json -> the model section printed -> read as a
// config -> written as config.json again: the published file's values under its own keys.
TEST(HfConfig, FromHfPrintsASectionThatReadsBackAsThePublishedModel) {
  const std::pair<const char*, std::vector<std::string>> files[] = {
      {"gpt2.json", {"architectures", "model_type", "vocab_size", "n_positions", "n_embd", "n_layer", "n_head",
                     "activation_function", "layer_norm_epsilon", "initializer_range", "eos_token_id", "resid_pdrop",
                     "attn_pdrop"}},
      {"llama2_7b.json", {"architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size",
                          "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_act",
                          "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings", "initializer_range",
                          "eos_token_id"}},
      {"mixtral_8x7b.json", {"architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size",
                             "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_act",
                             "max_position_embeddings", "rms_norm_eps", "rope_theta", "num_local_experts",
                             "num_experts_per_tok", "tie_word_embeddings", "eos_token_id"}},
      // Today's families' published files (tests/data/hf_configs/README.md says where each came from): Llama 3.2's
      // llama3 RoPE and head_dim, Qwen2.5's q/k/v biases, Qwen3's q/k norms and head_dim, and a Qwen3 file written
      // by transformers 5 (rope_parameters, layer_types, dtype).
      {"llama3.2_1b_instruct.json", {"architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size",
                                     "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                                     "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling",
                                     "tie_word_embeddings", "eos_token_id"}},
      {"qwen2.5_3b_instruct.json", {"architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size",
                                    "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                    "max_position_embeddings", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
                                    "use_sliding_window", "eos_token_id"}},
      {"qwen3_0.6b.json", {"architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size",
                           "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                           "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling", "attention_bias",
                           "tie_word_embeddings", "eos_token_id"}},
      // Gemma 3 1B: local and global layers by sliding_window_pattern, query_pre_attn_scalar, rope_local_base_freq.
      {"gemma3_1b_it.json", {"architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size",
                             "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                             "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling",
                             "query_pre_attn_scalar", "sliding_window", "sliding_window_pattern",
                             "rope_local_base_freq", "hidden_activation", "attention_bias",
                             "attn_logit_softcapping", "final_logit_softcapping"}},
      {"qwen3_1.7b_transformers5.json", {"architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size",
                                         "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                                         "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings", "eos_token_id"}},
  };
  for (const auto& [name, keys] : files) {
    const nlohmann::json hf = published(name);
    const ModelConfig m = model_config_from_hf(hf, name);
    const ArchConfigSection* section = find_arch_section(m.type);
    ASSERT_TRUE(section != nullptr && section->model_yaml) << name;
    const std::string yaml = section->model_yaml(m);
    const Config back = load_config_string(yaml + "train_dataset: {data_loader: {type: RandomTokens}}\n", {}, name);
    const HfConfigCheck check = check_hf_config(hf, back.model, name);
    EXPECT_TRUE(check.errors.empty() && check.warnings.empty()) << name << "\n" << yaml << joined(check.errors)
                                                               << joined(check.warnings);
    expect_same_keys(hf_config_json(back.model), hf, keys);
    EXPECT_EQ(back.model.seq_length, std::min<int64_t>(4096, back.model.max_position_embeddings)) << name;
    // transformers adds router_aux_loss_coef x its balancing loss only under output_router_logits (absent in
    // Mixtral's file: false), and routes every token: the imported run trains the same loss, dropless.
    if (back.model.moe.enabled()) {
      EXPECT_EQ(back.model.moe.aux_loss_factor, 0.0) << name;
      EXPECT_TRUE(back.model.moe.dropless()) << name;
    }
  }
  EXPECT_THROW((void)model_config_from_hf(nlohmann::json{{"model_type", "bert"}}, "bert.json"), std::runtime_error);
}

// Mistral's band: a Mixtral-style config.json with a sliding_window reads as model_config.sliding_window,
// prints it in the section, writes it back, and a config without it differs, naming the key.
TEST(HfConfig, SlidingWindowComesInAndGoesOut) {
  nlohmann::json hf = published("mixtral_8x7b.json");
  hf["sliding_window"] = 4096;
  const ModelConfig m = model_config_from_hf(hf, "mixtral_window.json");
  EXPECT_EQ(m.sliding_window, 4096);
  const std::string yaml = find_arch_section(m.type)->model_yaml(m);
  EXPECT_NE(yaml.find("sliding_window: 4096"), std::string::npos) << yaml;
  const Config back = load_config_string(yaml + "train_dataset: {data_loader: {type: RandomTokens}}\n", {}, "w");
  EXPECT_EQ(back.model.sliding_window, 4096);
  EXPECT_EQ(hf_config_json(back.model)["sliding_window"], 4096);
  ModelConfig none = back.model;
  none.sliding_window = 0;
  const HfConfigCheck check = check_hf_config(hf, none, "w/config.json");
  EXPECT_NE(joined(check.errors).find("sliding window: 0 in the config (model_config.sliding_window), 4096 in w/config.json"),
            std::string::npos) << joined(check.errors);
}

// Qwen's sliding window on the layers from max_window_layers on (Qwen2Config / Qwen3Config, transformers >= 4.53:
// or by layer_types), the others full: read as model_config.layer_types, printed in the section, written back (both
// keys), and no window at all unless use_sliding_window, whatever layer_types says.
TEST(HfConfig, QwenWindowedAndFullLayersComeInAndGoOut) {
  nlohmann::json hf = published("qwen3_0.6b.json");
  const int64_t L = hf["num_hidden_layers"].get<int64_t>();
  hf["use_sliding_window"] = true;
  hf["sliding_window"] = 64;
  hf["max_window_layers"] = 20;
  const ModelConfig m = model_config_from_hf(hf, "qwen3_window.json");
  ASSERT_EQ(static_cast<int64_t>(m.window_layers.size()), L);
  for (int64_t l = 0; l < L; ++l) EXPECT_EQ(m.window_layers[static_cast<size_t>(l)], l >= 20) << l;
  EXPECT_EQ(m.sliding_window, 64);
  const std::string yaml = find_arch_section(m.type)->model_yaml(m);
  const Config back = load_config_string(yaml + "train_dataset: {data_loader: {type: RandomTokens}}\n", {}, "w");
  EXPECT_EQ(back.model.window_layers, m.window_layers);
  const nlohmann::json out = hf_config_json(back.model);
  EXPECT_EQ(out["max_window_layers"], 20);
  EXPECT_EQ(out["layer_types"][19], "full_attention");
  EXPECT_EQ(out["layer_types"][20], "sliding_attention");
  EXPECT_TRUE(check_hf_config(hf, back.model, "w").errors.empty()) << joined(check_hf_config(hf, back.model, "w").errors);
  // The same by layer_types (transformers 5 writes them), and with use_sliding_window false: no window.
  nlohmann::json typed = hf;
  typed.erase("max_window_layers");
  typed["layer_types"] = out["layer_types"];
  EXPECT_EQ(model_config_from_hf(typed, "typed.json").window_layers, m.window_layers);
  typed["use_sliding_window"] = false;
  const ModelConfig off = model_config_from_hf(typed, "off.json");
  EXPECT_EQ(off.sliding_window, 0);
  EXPECT_TRUE(off.window_layers.empty());
  // A windowed layer before a full one is not Qwen's rule (transformers before 4.53 read max_window_layers alone).
  ModelConfig odd = back.model;
  odd.window_layers[0] = true;
  EXPECT_THROW((void)hf_config_json(odd), std::invalid_argument);
}

TEST(HfConfig, DifferencesNameTheKeyAndBothValues) {
  const Config c = load_config(src("configs/llama/run_llama_tiny.yaml"), {"model.model_config.num_layers=2"});
  const nlohmann::json file = hf_config_json(load_config(src("configs/llama/run_llama_tiny.yaml")).model);
  const HfConfigCheck check = check_hf_config(file, c.model, "w/config.json");
  ASSERT_EQ(check.errors.size(), 1u) << joined(check.errors);
  EXPECT_EQ(check.errors[0], "layers: 2 in the config (model_config.num_layers), 4 in w/config.json");
  // Another architecture altogether.
  const Config g = load_config(src("configs/gpt2/run_gpt2_tiny.yaml"));
  const HfConfigCheck other = check_hf_config(file, g.model, "w/config.json");
  EXPECT_TRUE(has(other.errors, "describes a LlamaForCausalLM")) << joined(other.errors);
  EXPECT_TRUE(has(check_hf_config(nlohmann::json{{"architectures", {"BertForMaskedLM"}}}, g.model, "f").errors,
                  "BertForMaskedLM, which gridformer does not run"));
}

TEST(HfConfig, WhatTheModelDoesNotRunIsRefusedByName) {
  const Config llama = load_config(src("configs/llama/run_llama_tiny.yaml"));
  nlohmann::json j = hf_config_json(llama.model);
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_TRUE(has(check_hf_config(j, llama.model, "f").errors, "rope_scaling")) << joined(check_hf_config(j, llama.model, "f").errors);
  j = hf_config_json(llama.model);
  j["head_dim"] = 64;  // heads of 64 where the config's are hidden_size / num_heads wide
  EXPECT_TRUE(has(check_hf_config(j, llama.model, "f").errors, "head width")) << joined(check_hf_config(j, llama.model, "f").errors);
  j = hf_config_json(llama.model);
  j["attention_bias"] = true;
  EXPECT_TRUE(has(check_hf_config(j, llama.model, "f").errors, "attention_bias"));
  // What Hugging Face's classes cannot express is refused when writing.
  const Config rope_gpt2 = load_config(src("configs/gpt2/run_gpt2_tiny.yaml"),
                                       {"model.model_config.position_embedding_type=rope"});
  try {
    hf_config_json(rope_gpt2.model);
    ADD_FAILURE() << "a GPT-2 with rotary positions has no GPT2Config";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("position_embedding_type"), std::string::npos) << e.what();
  }
}

TEST(HfConfig, LoadCheckpointWithAnotherModelsConfigJsonStopsTheConfig) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("gf_hf_config_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "model.safetensors") << "";
  nlohmann::json j = hf_config_json(load_config(src("configs/llama/run_llama_tiny.yaml")).model);
  j["num_hidden_layers"] = 6;
  std::ofstream(dir / "config.json") << j.dump(2);
  std::string error;
  try {
    load_config(src("configs/llama/run_llama_tiny.yaml"), {"load_checkpoint=" + dir.string()});
  } catch (const ConfigError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("config.json describes another model than this config: layers: 4 in the config "
                       "(model_config.num_layers), 6 in"), std::string::npos) << error;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gf
