// model.model_config.pet_config into ModelConfig::lora (models/lora_config.h): MindFormers' LoraConfig keys
// (mindformers/pet/pet_config.py: pet_type lora, lora_rank 8, lora_alpha 16, lora_dropout 0.01, lora_a_init
// 'normal', lora_b_init 'zero', target_modules a regex matched from the start of each layer's own name,
// exclude_layers, freeze_include / freeze_exclude, param_init_type / compute_dtype) or PEFT's LoraConfig names
// (peft/tuners/lora/config.py: peft_type LORA, r, lora_alpha, lora_dropout, target_modules a regex on the whole
// module name or a list of names, use_rslora, bias 'none', modules_to_save, init_lora_weights, fan_in_fan_out,
// task_type), plus ours: base_dtype, loss_vocab_chunk. A map that mixes the two sets' rank keys is refused.
#include <cmath>
#include <set>

#include "models/lora.h"
#include "models/registry.h"
#include "models/transformer_lm.h"
#include "runner/config/read.h"

namespace gf::config_read {

using config_tree::show;

namespace {

const std::set<std::string>& known_keys() {
  static const std::set<std::string> k = {
      // MindFormers
      "pet_type", "lora_rank", "lora_alpha", "lora_dropout", "lora_a_init", "lora_b_init", "param_init_type",
      "compute_dtype", "target_modules", "exclude_layers", "freeze_include", "freeze_exclude",
      // PEFT
      "peft_type", "r", "use_rslora", "bias", "modules_to_save", "init_lora_weights", "fan_in_fan_out", "task_type",
      "base_model_name_or_path", "inference_mode", "revision", "layers_to_transform", "layers_pattern", "rank_pattern",
      "alpha_pattern", "use_dora", "lora_bias",
      // ours
      "base_dtype", "loss_vocab_chunk"};
  return k;
}

}  // namespace

void read_lora(ReadContext& x) {
  const std::string key = "model.model_config.pet_config";
  LoraConfig& l = x.c.model.lora;
  l = LoraConfig{};
  const YAML::Node n = x.rd.node(key);
  if (!n || n.IsNull()) return;
  auto at = [&](const std::string& k) { return "`" + key + "." + k; };
  if (!n.IsMap()) {
    x.refuse("`" + key + ": " + show(n) + "`: expects a map such as {pet_type: lora, lora_rank: 8, lora_alpha: 16, "
             "lora_dropout: 0.0, target_modules: '.*wq|.*wk|.*wv|.*wo'}, or ~");
    return;
  }
  for (const auto& kvp : n) {
    const std::string k = kvp.first.as<std::string>();
    if (!known_keys().count(k))
      x.refuse(at(k) + "`: not a key of MindFormers' or PEFT's LoraConfig (rank: lora_rank or r; lora_alpha, "
               "lora_dropout, target_modules, use_rslora, exclude_layers)");
  }
  // Read through a const node (yaml-cpp's non-const operator[] would add the key); absent or null: undefined.
  const YAML::Node cn = n;
  auto scalar = [&](const char* k) -> YAML::Node {
    const YAML::Node v = cn[k];
    return v && !v.IsNull() ? v : YAML::Node(YAML::NodeType::Undefined);
  };
  const std::string type = scalar("pet_type") ? scalar("pet_type").as<std::string>()
                           : scalar("peft_type") ? scalar("peft_type").as<std::string>()
                                                 : std::string("lora");
  if (type != "lora" && type != "LORA") {
    x.refuse(at(scalar("pet_type") ? "pet_type" : "peft_type") + ": " + type + "`: only LoRA is built (pet_type: lora)");
    return;
  }
  const bool mf = static_cast<bool>(scalar("lora_rank")), peft = static_cast<bool>(scalar("r"));
  if (mf && peft) {
    x.refuse(at("lora_rank") + "` and `r` both given: one is MindFormers' name, the other PEFT's; give one");
    return;
  }
  l.on = true;
  l.peft_names = peft || (!mf && (scalar("peft_type") || scalar("use_rslora") || scalar("init_lora_weights")));
  // MindFormers' defaults (LoraConfig) unless the keys are PEFT's (r 8, lora_alpha 8, lora_dropout 0).
  l.rank = 8;
  l.alpha = l.peft_names ? 8.0 : 16.0;
  double dropout = l.peft_names ? 0.0 : 0.01;
  l.a_init = l.peft_names ? "kaiming" : "normal";
  auto number = [&](const char* k, auto& out, bool positive) {
    const YAML::Node v = scalar(k);
    if (!v) return;
    using T = std::decay_t<decltype(out)>;
    T t{};
    if (!v.IsScalar() || !YAML::convert<T>::decode(v, t) || (positive && t <= 0) || t < 0)
      x.refuse(at(k) + ": " + show(v) + "`: expects a number" + (positive ? " > 0" : " >= 0"));
    else
      out = t;
  };
  number(l.peft_names ? "r" : "lora_rank", l.rank, true);
  number("lora_alpha", l.alpha, true);
  number("lora_dropout", dropout, false);
  if (dropout >= 1.0) x.refuse(at("lora_dropout") + ": " + std::to_string(dropout) + "`: expects a rate in [0, 1)");
  l.dropout = static_cast<float>(dropout);
  if (const YAML::Node v = scalar("use_rslora")) {
    if (!YAML::convert<bool>::decode(v, l.rslora)) x.refuse(at("use_rslora") + ": " + show(v) + "`: expects True or False");
  }
  // target_modules: a regex (both), or a list (PEFT's names or suffixes; MindFormers' layer names).
  const YAML::Node t = scalar("target_modules");
  if (!t) {
    x.refuse(at("target_modules") + "` is required: the layers that get adapters, e.g. '.*wq|.*wk|.*wv|.*wo' "
             "(MindFormers' names) or [q_proj, k_proj, v_proj, o_proj] (PEFT's)");
  } else if (t.IsScalar()) {
    l.target_is_regex = true;
    l.target_regex = t.as<std::string>();
  } else if (t.IsSequence()) {
    l.target_is_regex = false;
    for (const YAML::Node& e : t) l.target_list.push_back(e.IsScalar() ? e.Scalar() : show(e));
  } else {
    x.refuse(at("target_modules") + ": " + show(t) + "`: expects a regex or a list of module names");
  }
  if (const YAML::Node v = scalar("exclude_layers")) {
    if (v.IsScalar()) l.exclude.push_back(v.Scalar());
    else if (v.IsSequence())
      for (const YAML::Node& e : v) l.exclude.push_back(e.IsScalar() ? e.Scalar() : show(e));
    if (l.peft_names) x.refuse(at("exclude_layers") + "`: MindFormers' key; PEFT's names select by target_modules");
  }
  // A's initialisation: MindFormers' lora_a_init (normal; Normal(0.01)) or PEFT's init_lora_weights (True: kaiming).
  if (const YAML::Node v = scalar("lora_a_init")) {
    const std::string s = v.as<std::string>();
    if (s == "normal") l.a_init = "normal";
    else if (s == "he_uniform" || s == "HeUniform" || s == "kaiming_uniform") l.a_init = "kaiming";
    else x.refuse(at("lora_a_init") + ": " + s + "`: normal (MindSpore's Normal(0.01)) or he_uniform (PEFT's) only");
  }
  if (const YAML::Node v = scalar("lora_b_init"); v && v.as<std::string>() != "zero" && v.as<std::string>() != "zeros")
    x.refuse(at("lora_b_init") + ": " + show(v) + "`: zero only (B starts at zero, so training starts from the base)");
  if (const YAML::Node v = scalar("init_lora_weights")) {
    bool b = false;
    if (YAML::convert<bool>::decode(v, b) && b) l.a_init = "kaiming";
    else if (v.IsScalar() && v.Scalar() == "gaussian") x.refuse(at("init_lora_weights") + ": gaussian`: not built; use True");
    else x.refuse(at("init_lora_weights") + ": " + show(v) + "`: True only (A Kaiming-uniform, B zero)");
  }
  if (const YAML::Node v = scalar("bias"); v && v.as<std::string>() != "none")
    x.refuse(at("bias") + ": " + show(v) + "`: none only (the biases stay frozen)");
  // PEFT's modules_to_save: a list of module names (or their last dotted parts); which are built, lora_saved_roles says.
  if (const YAML::Node v = scalar("modules_to_save")) {
    if (!v.IsSequence())
      x.refuse(at("modules_to_save") + ": " + show(v) + "`: expects a list of module names, such as [lm_head, embed_tokens]");
    else
      for (const YAML::Node& e : v) {
        if (!e.IsScalar() || e.Scalar().empty())
          x.refuse(at("modules_to_save") + ": " + show(v) + "`: expects a list of module names, such as [lm_head, embed_tokens]");
        else
          l.modules_to_save.push_back(e.Scalar());
      }
  }
  for (const char* k : {"freeze_include", "freeze_exclude", "layers_to_transform", "layers_pattern",
                        "rank_pattern", "alpha_pattern"}) {
    const YAML::Node v = scalar(k);
    if (v && !(v.IsSequence() && v.size() == 0) && !(v.IsMap() && v.size() == 0))
      x.refuse(at(k) + ": " + show(v) + "`: not built (every targeted layer gets an adapter of one rank, and nothing "
               "else trains); remove it");
  }
  for (const char* k : {"use_dora", "fan_in_fan_out", "lora_bias"}) {
    bool b = false;
    if (const YAML::Node v = scalar(k); v && (!YAML::convert<bool>::decode(v, b) || b))
      x.refuse(at(k) + ": " + show(v) + "`: False only");
  }
  for (const char* k : {"param_init_type", "compute_dtype"})
    if (const YAML::Node v = scalar(k); v && v.as<std::string>() != "float32")
      x.warn(at(k) + ": " + v.as<std::string>() + "`: the adapters and their products are float32 here (MindFormers' "
             "default float16 is an Ascend setting)");
  if (const YAML::Node v = scalar("base_dtype")) {
    const std::string s = v.as<std::string>();
    if (s == "bfloat16") l.base_bf16 = true;
    else if (s != "float32") x.refuse(at("base_dtype") + ": " + s + "`: float32 (default) or bfloat16 (the frozen layers held in bf16)");
  }
  if (const YAML::Node v = scalar("loss_vocab_chunk")) {
    int64_t c = -1;
    if (!YAML::convert<int64_t>::decode(v, c) || c < 0)
      x.refuse(at("loss_vocab_chunk") + ": " + show(v) + "`: the vocabulary rows of one chunk of the frozen head's "
               "logits (e.g. 4096), or 0 for the whole logits at once");
    else
      l.loss_chunk = c;
    if (c > 0 && model_layout(x.c).vocab_parallel())
      x.refuse(at("loss_vocab_chunk") + ": " + show(v) + "` with a vocabulary-parallel head (model_parallel " +
               std::to_string(x.c.parallel.model_parallel) + "): not built; set parallel_config.vocab_emb_dp: True "
               "(the head whole on every tensor-parallel rank) or loss_vocab_chunk: 0");
  }
  // MindFormers' own LoRA configs (lora_llama2_7b.yaml) set compute_dtype bfloat16 or float16 with param_init_type
  // float32: taken as they are, the products then run in float32 (the adapters' and the frozen base's paths are
  // fp32 here), which the log says; pet_config.base_dtype: bfloat16 is what keeps the base's memory low.
  if (x.c.compute_dtype != ComputeDtype::kFloat32) {
    x.warn("`model.model_config.compute_dtype: " + std::string(compute_dtype_name(x.c.compute_dtype)) + "` with `" + key +
           "`: LoRA's products run in float32 here (the adapters and the frozen base compute in fp32), so this run "
           "computes in float32; `" + key + ".base_dtype: bfloat16` holds the frozen base in bf16");
    x.c.compute_dtype = ComputeDtype::kFloat32;
  }
  // The targets against the model itself: a name that matches nothing, or a layer that cannot carry an adapter.
  try {
    const ModelEntry& entry = find_model(x.c.model.arch, x.c.model.type);
    if (model_sizes_within_bounds(x.c.model) && x.errors.empty()) {
      const TransformerSpec s = entry.spec(x.c.model);
      lora_targets(l, entry.names, TransformerLM::make_base_table(s, entry.names), s.layers, true);
      lora_saved_roles(l, entry.names);
    }
  } catch (const std::invalid_argument& e) {
    x.refuse(e.what());
  }
}

}  // namespace gf::config_read
