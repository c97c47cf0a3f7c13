// LoRA's checkpoints on the way in (runner/train/trainer.h): the frozen base from a base model, the base one of our
// LoRA checkpoints names, what its state records of the run's adapters; and a PEFT adapter directory as
// load_checkpoint (load_peft_adapters): adapters trained elsewhere (PEFT's save_pretrained, or `gridformer convert`
// of ours) to train on, evaluate or generate with.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/io/checkpoint.h"
#include "core/io/safetensors.h"
#include "models/registry.h"
#include "runner/train/trainer.h"

namespace gf {

namespace fs = std::filesystem;

// One of our checkpoints of a LoRA run: its adapters, and the base it names (Trainer::checkpoint_state's "lora").
bool holds_lora_adapters(const std::string& path) {
  if (!ckpt::is_checkpoint(path)) return false;
  const ckpt::Reader r = ckpt::Reader::open(path);
  return r.state().contains("lora") && !r.state()["lora"].is_null();
}

// LoRA: the frozen base of every model chunk from `path` (Hugging Face safetensors, a MindSpore .ckpt, a
// Megatron checkpoint, or one of our checkpoints of the base model). Returns a note for the log.
std::string load_lora_base(CausalLM& model, const Config& cfg, const std::string& path) {
  const std::vector<CausalLM*> bases = model.frozen_bases();
  std::string note;
  if (ckpt::is_checkpoint(path)) {
    ckpt::Reader r = ckpt::Reader::open(path);
    if (r.state().contains("lora") && !r.state()["lora"].is_null())
      throw std::runtime_error(path + " holds LoRA adapters, not a base model: give the base model it names (" +
                               r.state()["lora"].value("base", std::string("?")) + ")");
    const ModelEntry& entry = find_model(cfg.model.arch, cfg.model.type);
    const ParamTable whole = TransformerLM::make_base_table(entry.spec(cfg.model), entry.names);
    for (const std::string& n : r.names())
      if (n.rfind("optimizer.", 0) != 0 && !whole.find(n))
        throw std::runtime_error(r.dir() + ": holds tensor '" + n + "', which the configured base model does not have");
    for (CausalLM* b : bases) {
      float* w = b->weights();
      for (const TensorPlacement& t : b->params().tensors()) r.read(t.spec->name, t, w + t.offset);
    }
  } else {
    for (CausalLM* b : bases) note = b->load_hf_checkpoint(path);
  }
  model.frozen_loaded();
  spdlog::info("LoRA: base model loaded from {}{} (frozen); adapters rank {}, alpha {}, scale {:g}", path,
               note.empty() ? "" : " (" + note + ")", cfg.model.lora.rank, cfg.model.lora.alpha, cfg.model.lora.scale());
  return note;
}

std::string lora_base_of(const std::string& path) {
  if (!ckpt::is_checkpoint(path)) return "";
  const ckpt::Reader r = ckpt::Reader::open(path);
  if (!r.state().contains("lora") || r.state()["lora"].is_null()) return "";
  return r.state()["lora"].value("base", std::string());
}

void Trainer::load_lora_base(const std::string& path) {
  gf::load_lora_base(*model_, cfg_, path);
  lora_base_ = fs::absolute(path).lexically_normal().string();
}

// PEFT's fan_in_fan_out: the model stores its projections [in, out] (GPT-2's Conv1D), not [out, in].
bool Trainer::lora_fan_in_fan_out() const {
  return !find_model(cfg_.model.arch, cfg_.model.type).spec(cfg_.model).out_in;
}

nlohmann::json Trainer::lora_targets_json() const {
  const LoraConfig& l = cfg_.model.lora;
  if (!l.peft_names) return nullptr;
  return l.target_is_regex ? nlohmann::json(l.target_regex) : nlohmann::json(l.target_list);
}

bool is_peft_adapter_dir(const std::string& path) {
  return fs::is_directory(path) && fs::exists(fs::path(path) / "adapter_config.json") &&
         fs::exists(fs::path(path) / "adapter_model.safetensors");
}

std::string load_peft_adapters(CausalLM& model, const Config& cfg, const std::string& dir) {
  const fs::path config_path = fs::path(dir) / "adapter_config.json";
  nlohmann::json c;
  try {
    std::ifstream in(config_path);
    c = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(config_path.string() + ": not JSON (" + e.what() + ")");
  }
  const LoraConfig& l = cfg.model.lora;
  if (!l.on)
    throw std::runtime_error(dir + " holds LoRA adapters (PEFT's): set model.model_config.pet_config (r " +
                             c.value("r", nlohmann::json()).dump() + ", lora_alpha " +
                             c.value("lora_alpha", nlohmann::json()).dump() + ", target_modules as its adapter_config.json)");
  // The scale the file's adapters were trained with must be the config's: r, lora_alpha, use_rslora.
  const double r = c.value("r", 0.0), alpha = c.value("lora_alpha", 0.0);
  const bool rs = c.value("use_rslora", false);
  if (c.value("peft_type", std::string()) != "LORA" || r != static_cast<double>(l.rank) || alpha != l.alpha || rs != l.rslora)
    throw std::runtime_error(config_path.string() + ": peft_type " + c.value("peft_type", std::string("?")) + ", r " +
                             fmt::format("{:g}", r) + ", lora_alpha " + fmt::format("{:g}", alpha) + ", use_rslora " +
                             (rs ? "true" : "false") + "; model.model_config.pet_config says r " + std::to_string(l.rank) +
                             ", lora_alpha " + fmt::format("{:g}", l.alpha) + ", use_rslora " + (l.rslora ? "true" : "false") +
                             ": make them the same");
  std::string base = c.value("base_model_name_or_path", std::string());
  if (!base.empty() && fs::path(base).is_relative() && !fs::exists(base) && fs::exists(fs::path(dir) / base))
    base = (fs::path(dir) / base).string();
  if (base.empty() || !fs::exists(base))
    throw std::runtime_error(config_path.string() + ": base_model_name_or_path '" + base +
                             "' is not a local path; write the base model's directory there (its Hugging Face weights, or "
                             "one of our checkpoints)");
  load_lora_base(model, cfg, base);
  // The adapters by PEFT's keys: base_model.model.<module>.lora_A.weight (GPT-2's modules under transformer.).
  const SafeTensorsFile f = SafeTensorsFile::open((fs::path(dir) / "adapter_model.safetensors").string());
  std::map<std::string, std::string> key_of;
  for (const auto& [key, t] : f.tensors()) {
    std::string n = key.rfind("base_model.model.", 0) == 0 ? key.substr(17) : key;
    if (n.rfind("transformer.", 0) == 0) n = n.substr(12);
    key_of[n] = key;
  }
  std::vector<float> full;
  float* w = model.weights();
  size_t used = 0;
  for (const TensorPlacement& t : model.params().tensors()) {
    const auto it = key_of.find(t.spec->name);
    if (it == key_of.end())
      throw std::runtime_error(dir + ": no adapter '" + t.spec->name + "', which pet_config.target_modules gives the model");
    if (f.get(it->second).shape != t.spec->shape)
      throw std::runtime_error(dir + ": adapter '" + it->first + "' has another shape than the model's (r " + std::to_string(l.rank) + ")");
    full.resize(static_cast<size_t>(t.spec->global_numel()));
    f.to_floats(it->second, full.data(), t.spec->global_numel());
    Placement::scatter(t, full.data(), w + t.offset);
    ++used;
  }
  if (model.whole_model() && used != key_of.size())
    for (const auto& [name, key] : key_of)
      if (!model.params().find(name))
        throw std::runtime_error(dir + ": adapter '" + key + "' is on a module pet_config.target_modules does not target");
  spdlog::info("LoRA: adapters loaded from PEFT's {} ({} tensors; base {})", dir, used, base);
  return base;
}

}  // namespace gf
