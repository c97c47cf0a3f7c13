// The golden tiny models written by PyTorch (tools/make_golden.py: GPT-2; tools/make_llama_golden.py:
// Llama; tools/make_moe_golden.py: GPT-2 with MoE MLPs and Mixtral): their config as a gridformer
// Config, their initial weights, and the batch they replay every step.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/io/safetensors.h"
#include "models/causal_lm.h"
#include "models/weights/hf_config.h"
#include "runner/config/arch_section.h"
#include "runner/train/batch_source.h"
#include "runner/config/config.h"
#include "models/registry.h"

namespace gf::golden_case {

inline std::string golden(const std::string& name) { return std::string(GF_SOURCE_DIR) + "/tests/golden/" + name; }

// max |a - b| / max |b| over the first n elements; a is read with row stride lda (padding skipped).
inline double rel_err(const float* a, const std::vector<float>& b, int64_t rows, int64_t cols, int64_t lda) {
  double diff = 0, ref = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      diff = std::max(diff, std::abs(static_cast<double>(a[r * lda + c]) - b[r * cols + c]));
      ref = std::max(ref, std::abs(static_cast<double>(b[r * cols + c])));
    }
  return diff / ref;
}

// Global tensor of parameter `p` (TP = 1: local == global, plus vocabulary padding rows).
inline double param_rel_err(const TensorPlacement& p, const float* arena, const std::vector<float>& ref) {
  const int64_t cols = p.spec->shape.back();
  return rel_err(arena + p.offset, ref, p.spec->global_numel() / cols, cols, cols);
}

// Replays its batch for every step.
class FixedBatch : public BatchSource {
 public:
  explicit FixedBatch(std::vector<int32_t> tokens) : tokens_(std::move(tokens)) {}
  int64_t samples_per_epoch() const override { return -1; }
  void read(int64_t, int64_t, int32_t* out) const override { std::copy(tokens_.begin(), tokens_.end(), out); }
  std::string describe() const override { return "golden batch"; }

 private:
  std::vector<int32_t> tokens_;
};

struct GoldenCase {
  SafeTensorsFile f;
  Config cfg;
  int64_t B, T, V;

  // overrides: `--set`-style key=value edits of the config (e.g. more steps, another compute dtype).
  explicit GoldenCase(const std::string& file, const std::vector<std::string>& overrides = {})
      : f(SafeTensorsFile::open(golden(file))) {
    const auto& m = f.metadata();
    B = std::stoll(m.at("B"));
    T = std::stoll(m.at("T"));
    V = std::stoll(m.at("vocab_size"));
    const std::string sched = m.at("lr_schedule");
    const std::string runner_yaml = "runner_config: {batch_size: " + m.at("B") + ", train_steps: " + m.at("total_steps") +
                             "}\n"
                             "runner_wrapper: {use_clip_grad: True, max_grad_norm: " +
                             m.at("max_norm") +
                             "}\n"
                             "optimizer: {type: AdamWeightDecay, beta1: " +
                             m.at("beta1") + ", beta2: " + m.at("beta2") + ", eps: " + m.at("adam_eps") +
                             ", weight_decay: " + m.at("weight_decay") +
                             "}\n"
                             "lr_schedule: {type: " +
                             sched + ", learning_rate: " + m.at("learning_rate") + ", lr_end: " + m.at("lr_end") +
                             ", warmup_steps: " + m.at("warmup_steps") + ", total_steps: " + m.at("total_steps") +
                             (sched == "polynomial" ? ", power: " + m.at("lr_power") : std::string()) +
                             "}\n"
                             "train_dataset: {data_loader: {type: RandomTokens}}\n"
                             "callbacks: [{type: MFLossMonitor, per_print_times: 1000}]\n"
                             "output_dir: " +
                             std::string(GF_BINARY_DIR) +
                             "/test_output/golden\n";
    // tools/make_family_golden.py: the model is the Hugging Face config.json the file carries, imported as
    // `gridformer config --from-hf` imports it (model_config_from_hf, then the architecture's YAML section).
    if (m.count("hf_config")) {
      ModelConfig from_hf = model_config_from_hf(nlohmann::json::parse(m.at("hf_config")), file);
      from_hf.seq_length = T;
      const ArchConfigSection* section = find_arch_section(from_hf.type);
      if (section == nullptr || !section->model_yaml) throw std::runtime_error(file + ": no YAML section for " + from_hf.type);
      std::vector<std::string> sets = {"model.model_config.use_flash_attention=False"};
      sets.insert(sets.end(), overrides.begin(), overrides.end());
      cfg = load_config_string(runner_yaml + section->model_yaml(from_hf), sets, file);
      return;
    }
    if (is_llama(m) && std::any_of(overrides.begin(), overrides.end(), [](const std::string& o) {
          return o.starts_with("model.model_config.pet_config=");
        })) {
      // LoRA's targets are checked against the model as the config is read: the Llama (or Mixtral) itself, written
      // as `config --from-hf` writes its YAML, not the GPT-2 stand-in.
      Config stand_in = load_config_string(runner_yaml + llama_stand_in_yaml(m), {}, file);
      set_llama_fields(m, stand_in.model);
      set_moe_fields(m, stand_in.model);
      const ArchConfigSection* section = find_arch_section(stand_in.model.type);
      std::vector<std::string> sets = {"model.model_config.use_flash_attention=False"};
      sets.insert(sets.end(), overrides.begin(), overrides.end());
      cfg = load_config_string(runner_yaml + section->model_yaml(stand_in.model), sets, file);
      set_moe_fields(m, cfg.model);  // what moe_config's YAML does not carry (token_drop_policy)
      return;
    }
    if (is_llama(m)) {
      cfg = load_config_string(runner_yaml + llama_stand_in_yaml(m), overrides, file);
      set_llama_fields(m, cfg.model);
      set_moe_fields(m, cfg.model);
      return;
    }
    const std::string yaml = runner_yaml +
                             "model:\n  arch: {type: GPT2LMHeadModel}\n  model_config:\n    type: GPT2Config\n"
                             "    vocab_size: " +
                             m.at("vocab_size") + "\n    seq_length: " + m.at("T") +
                             "\n    max_position_embeddings: " + m.at("n_positions") +
                             "\n    hidden_size: " + m.at("n_embd") + "\n    num_layers: " + m.at("n_layer") +
                             "\n    num_heads: " + m.at("n_head") + "\n    hidden_act: " + m.at("activation") +
                             "\n    layernorm_epsilon: " + m.at("layer_norm_epsilon") +
                             "\n    hidden_dropout_rate: 0.0\n    attention_dropout_rate: 0.0\n";
    cfg = load_config_string(yaml, overrides, file);
    set_moe_fields(m, cfg.model);
  }

  // A Llama golden file (tools/make_llama_golden.py) says arch: LlamaForCausalLM, a Mixtral one
  // (tools/make_moe_golden.py) MixtralForCausalLM; GPT-2's say GPT2LMHeadModel or have no arch.
  static bool is_llama(const std::map<std::string, std::string>& m) {
    const auto it = m.find("arch");
    return it != m.end() && (it->second == "LlamaForCausalLM" || it->second == "MixtralForCausalLM");
  }

  // Python's str(bool).
  static bool python_bool(const std::map<std::string, std::string>& m, const std::string& key) {
    const std::string v = m.at(key);
    if (v != "True" && v != "False") throw std::runtime_error(key + ": " + v);
    return v == "True";
  }

  // The MoE settings of a tools/make_moe_golden.py file (metadata expert_num, ...) set directly on the
  // model config, not through YAML (moe_config's keys are not read yet); nothing for a dense file.
  static void set_moe_fields(const std::map<std::string, std::string>& m, ModelConfig& c) {
    if (m.find("expert_num") == m.end()) return;
    MoeConfig& moe = c.moe;
    moe.expert_num = std::stoll(m.at("expert_num"));
    moe.num_experts_chosen = std::stoll(m.at("num_experts_chosen"));
    moe.capacity_factor = std::stod(m.at("capacity_factor"));
    moe.aux_loss_factor = std::stod(m.at("aux_loss_factor"));
    moe.z_loss_factor = std::stod(m.at("z_loss_factor"));
    moe.norm_topk_prob = python_bool(m, "norm_topk_prob");
    moe.token_drop_policy = m.at("token_drop_policy") == "probs" ? TokenDropPolicy::kProbs : TokenDropPolicy::kPosition;
    moe.moe_layer_freq = std::stoll(m.at("moe_layer_freq"));
  }

  // The YAML schema knows GPT-2's model keys only: the Llama's sizes go through a GPT-2 stand-in
  // (checked as usual), and set_llama_fields then makes it the Llama.
  static std::string llama_stand_in_yaml(const std::map<std::string, std::string>& m) {
    return "model:\n  arch: {type: GPT2LMHeadModel}\n  model_config:\n    type: GPT2Config\n"
           "    vocab_size: " + m.at("vocab_size") + "\n    seq_length: " + m.at("T") +
           "\n    max_position_embeddings: " + m.at("max_position_embeddings") +
           "\n    hidden_size: " + m.at("hidden_size") + "\n    num_layers: " + m.at("num_layers") +
           "\n    num_heads: " + m.at("num_heads") +
           "\n    hidden_dropout_rate: 0.0\n    attention_dropout_rate: 0.0\n    use_flash_attention: False\n";
  }

  // HF LlamaConfig's fields from the file's metadata (cfg.resolved still shows the GPT-2 stand-in).
  // Mixtral is gridformer's LlamaForCausalLM with MoE layers (as MindFormers builds a LlamaConfig with
  // moe_config.expert_num > 1): set_moe_fields adds them.
  static void set_llama_fields(const std::map<std::string, std::string>& m, ModelConfig& c) {
    c.type = "LlamaConfig";
    c.arch = "LlamaForCausalLM";
    c.num_kv_heads = std::stoll(m.at("num_kv_heads"));
    c.intermediate_size = std::stoll(m.at("intermediate_size"));
    c.rope_theta = std::stod(m.at("rope_theta"));
    c.rms_norm_eps = std::stof(m.at("rms_norm_eps"));
    c.tie_word_embeddings = python_bool(m, "tie_word_embeddings");
    c.hidden_act = m.at("hidden_act");  // silu (SwiGLU's gate); not a GPT-2 activation
    c.hidden_dropout_rate = c.attention_dropout_rate = 0.0f;
    c.use_flash_attention = false;
  }

  // One forward and backward of the golden batch on `model` (its weights loaded): the loss (1e-5 relative) and
  // the logits (1e-5 of the largest) against PyTorch's, then every parameter's gradient (1e-4). Returns the
  // number of gradients checked.
  int expect_forward_backward_match(CausalLM& model) const {
    const std::vector<int32_t> tokens = f.ints("tokens");
    std::fill(model.grads(), model.grads() + model.params().total_floats(), 0.0f);
    const double loss = model.forward(tokens.data(), StepInfo{1, 0, true}) / static_cast<double>(B * T);
    const double ref_loss = f.floats("loss")[0];
    EXPECT_LE(std::abs(loss - ref_loss) / std::abs(ref_loss), 1e-5) << "loss " << loss << " vs PyTorch " << ref_loss;
    EXPECT_LE(rel_err(model.logits(), f.floats("logits"), B * T, V, model.logits_ld()), 1e-5) << "logits";
    model.backward(1.0f / static_cast<float>(B * T));
    int checked = 0;
    for (const TensorPlacement& p : model.params().tensors()) {
      if (!f.has("grads." + p.spec->name) && f.has("buffers." + p.spec->name)) {
        // A buffer in PyTorch's model (DeepSeek-V3's e_score_correction_bias): no gradient reaches it.
        const float* g = model.grads() + p.offset;
        EXPECT_TRUE(std::all_of(g, g + p.numel(), [](float v) { return v == 0.0f; })) << "gradient of " << p.spec->name;
        ++checked;
        continue;
      }
      EXPECT_LE(param_rel_err(p, model.grads(), f.floats("grads." + p.spec->name)), 1e-4) << "gradient of " << p.spec->name;
      ++checked;
    }
    return checked;
  }

  // Trains every step of the golden run on its batch and holds each step's loss (1e-5), learning rate (1e-6)
  // and pre-clip gradient norm (1e-4), relative, to PyTorch's (train.losses, train.lr, train.grad_norms).
  template <typename TrainerT>
  void expect_steps_match(TrainerT& trainer) const {
    const auto losses = f.floats("train.losses"), lrs = f.floats("train.lr"), norms = f.floats("train.grad_norms");
    ASSERT_EQ(trainer.total_steps(), static_cast<int64_t>(losses.size()));
    for (int64_t s = 1; s <= trainer.total_steps(); ++s) {
      const auto r = trainer.train_step(s);
      const size_t i = static_cast<size_t>(s - 1);
      EXPECT_LE(std::abs(r.loss - losses[i]) / std::abs(losses[i]), 1e-5) << "step " << s << ": " << r.loss << " vs "
                                                                          << losses[i];
      EXPECT_LE(std::abs(r.lr - lrs[i]) / lrs[i], 1e-6) << "lr at step " << s;
      EXPECT_LE(std::abs(r.grad_norm - norms[i]) / norms[i], 1e-4) << "grad norm at step " << s;
    }
  }

  // The case's model on one rank of ctx (which must outlive it), its weights not loaded.
  std::unique_ptr<CausalLM> build(const ParallelContext& ctx) const {
    return build_model(cfg.model, model_layout(cfg), B, ctx);
  }

  // The golden batch, every step: a Trainer's batch source.
  std::unique_ptr<FixedBatch> batch() const { return std::make_unique<FixedBatch>(f.ints("tokens")); }

  // The trainer's model given the golden initial weights, then expect_steps_match.
  template <typename TrainerT>
  void load_and_expect_steps_match(TrainerT& trainer) const {
    load_weights(trainer.model());
    expect_steps_match(trainer);
  }

  // TP = 1: each of `names` that the model has (the vocabulary's parameters) is stored [padded vocab, C], the real
  // rows first.
  template <typename Names>
  void expect_vocab_stored_padded(CausalLM& model, const Names& names) const {
    for (const char* name : names)
      if (const TensorPlacement* p = model.params().find(name)) {
        EXPECT_EQ(p->local_shape, (std::vector<int64_t>{cfg.model.padded_vocab(), cfg.model.hidden_size})) << name;
      }
  }

  // The names of the file's tensors under any of `prefixes` ("weights.", "adapter.", ...), each without it.
  std::set<std::string> names_under(std::initializer_list<std::string> prefixes) const {
    std::set<std::string> out;
    for (const auto& [name, t] : f.tensors())
      for (const std::string& prefix : prefixes)
        if (name.rfind(prefix, 0) == 0) out.insert(name.substr(prefix.size()));
    return out;
  }

  // The parameters PyTorch saved after the golden run: each one's name and its tensor's key (train.final.NAME), in
  // the file's order.
  struct FinalWeight {
    std::string name, key;
  };
  std::vector<FinalWeight> final_weights() const {
    const std::string prefix = "train.final.";
    std::vector<FinalWeight> out;
    for (const auto& [key, t] : f.tensors())
      if (key.rfind(prefix, 0) == 0) out.push_back({key.substr(prefix.size()), key});
    return out;
  }

  void load_weights(CausalLM& model) const {
    for (const TensorPlacement& p : model.params().tensors()) {
      // A PyTorch buffer that is a parameter here (DeepSeek-V3's expert bias): its initial value.
      const std::string key = f.has("weights." + p.spec->name) || !f.has("buffers." + p.spec->name) ? "weights." : "buffers.";
      const std::vector<float> w = f.floats(key + p.spec->name);
      Placement::scatter(p, w.data(), model.weights() + p.offset);
    }
  }
};

}  // namespace gf::golden_case
