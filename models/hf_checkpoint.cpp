// Loading Hugging Face safetensors weights by the parameters' global names: one file, a directory
// with model.safetensors, or a sharded checkpoint (model.safetensors.index.json and its shards,
// read one at a time). GPT-2: names with or without the `transformer.` prefix, Conv1D [in, out]
// layout (our layout too); Llama: nn.Linear [out, in] (its layout here too). F32/F16/BF16. A tied
// model's `lm_head.weight` and the `attn.bias` / `attn.masked_bias` / `rotary_emb.inv_freq` buffers
// are ignored. Every model parameter must be present with its global shape, and every other
// tensor must be one of the ignored ones.
//
// A MindSpore .ckpt holding MindFormers' GPT-2 (models/mindspore_checkpoint.h maps its names and
// layouts to the ones above) goes through the same checks: every parameter present with its global
// shape, every weight of the file a parameter of the model.
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/causal_lm.h"
#include "models/mindspore_checkpoint.h"

namespace gf {
namespace {

bool ignored_tensor(const std::string& n) {
  auto ends_with = [&](const char* s) {
    const std::string suf(s);
    return n.size() >= suf.size() && n.compare(n.size() - suf.size(), suf.size(), suf) == 0;
  };
  // GPT-2's tied lm_head and attention-mask buffers; Llama's rotary inv_freq buffers (older
  // transformers saved them). An untied lm_head.weight is a parameter and is loaded.
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias") || ends_with(".rotary_emb.inv_freq");
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

}  // namespace

std::string resolve_checkpoint_path(const std::string& given, const std::string& key) {
  namespace fs = std::filesystem;
  if (fs::is_directory(given)) {
    const fs::path one = fs::path(given) / "model.safetensors", index = fs::path(given) / "model.safetensors.index.json";
    if (fs::exists(one)) return one.string();
    if (fs::exists(index)) return index.string();
    throw std::runtime_error("`" + key + ": " + given +
                             "` is a directory without model.safetensors or model.safetensors.index.json");
  }
  return given;
}

namespace {

bool is_mindspore_ckpt(const std::string& path) { return std::filesystem::path(path).extension() == ".ckpt"; }

// Whether `part` could be an even cut of `whole` (what one rank of a MindSpore model-parallel run
// saves without integrated_save).
bool is_slice_of(const std::vector<int64_t>& part, const std::vector<int64_t>& whole) {
  if (part.size() != whole.size() || part == whole) return false;
  for (size_t i = 0; i < part.size(); ++i)
    if (part[i] <= 0 || part[i] > whole[i] || whole[i] % part[i] != 0) return false;
  return true;
}

// A MindFormers GPT-2 .ckpt: its weights under Hugging Face names, then the checks and the scatter
// of the safetensors path below.
std::string load_mindformers_gpt2(CausalLM& model, const std::string& path) {
  const ModelConfig& c = model.config();
  if (c.is_llama() || c.moe.enabled())
    throw std::runtime_error(path + ": a MindSpore .ckpt is read for a dense GPT-2 only (MindFormers' GPT-2 names, "
                             "as mindformers/models/gpt2/convert_weight.py maps them); this model is " +
                             std::string(c.is_llama() ? "a Llama" : "an MoE GPT-2") +
                             ": give its weights as a Hugging Face .safetensors file or directory");
  const ParamTable& table = model.params().table();
  const bool whole = model.whole_model();
  const MindFormersGpt2Weights w =
      read_mindformers_gpt2(path, [&](const std::string& n) { return whole || table.find(n) != nullptr; });
  for (const auto& [name, t] : w.tensors)
    if (!table.find(name))
      throw std::runtime_error(path + ": tensor '" + t.source + "' (GPT-2's " + name +
                               ") is not a parameter of the configured model");
  for (const ParamSpec& p : table.specs())
    if (!w.tensors.count(p.name)) {
      const std::string ms = mindformers_gpt2_name(p.name);
      const std::string what = ms.empty() ? "'" + p.name + "'" : "'" + ms + "' (GPT-2's " + p.name + ")";
      throw std::runtime_error(path + ": tensor " + what + " is missing (the configured model needs " + shape_str(p.shape) + ")");
    }
  for (const TensorPlacement& placed : model.params().tensors()) {
    const ParamSpec& p = *placed.spec;
    const MappedTensor& t = w.tensors.at(p.name);
    if (t.shape != p.shape) {
      std::string hint;
      if (p.name == "wpe.weight" && t.shape.size() == 2 && p.shape.size() == 2 && t.shape[1] == p.shape[1])
        hint = " (MindFormers' position table has seq_length rows: set max_position_embeddings: " +
               std::to_string(t.shape[0]) + ")";
      else if (is_slice_of(t.shape, p.shape))
        hint = " (one rank's slice of a distributed checkpoint? merge the slices with MindSpore's transform_checkpoints first)";
      throw std::runtime_error(path + ": tensor '" + t.source + "' (GPT-2's " + p.name + ") has shape " +
                               shape_str(t.shape) + ", the configured model needs " + shape_str(p.shape) + hint);
    }
    Placement::scatter(placed, t.values.data(), model.weights() + placed.offset);  // padding rows zero
  }
  return "MindSpore .ckpt, MindFormers' GPT-2 names; skipped " + std::to_string(w.non_weights) +
         " optimizer-state and training-counter entries and " + std::to_string(w.mask_buffers) + " attention-mask buffers";
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Which file holds each tensor: one file, or the shards a model.safetensors.index.json maps.
std::map<std::string, std::vector<std::string>> shards_of(const std::string& path) {
  namespace fs = std::filesystem;
  if (!ends_with(path, ".index.json")) return {{path, {}}};
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not a JSON index: " + e.what());
  }
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    throw std::runtime_error(path + ": no \"weight_map\" object (a Hugging Face sharded checkpoint index has one)");
  std::map<std::string, std::vector<std::string>> files;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw std::runtime_error(path + ": weight_map[\"" + name + "\"] is not a file name");
    const std::string f = (fs::path(path).parent_path() / file.get<std::string>()).string();
    if (!fs::exists(f)) throw std::runtime_error(path + ": shard " + f + " (holding '" + name + "') is missing");
    files[f].push_back(name);
  }
  return files;
}

}  // namespace

std::string CausalLM::load_hf_checkpoint(const std::string& given) {
  const std::string path = resolve_checkpoint_path(given);
  if (is_mindspore_ckpt(path)) return load_mindformers_gpt2(*this, path);
  const auto files = shards_of(path);
  const ParamTable& table = params().table();
  auto param_name = [](const std::string& name) { return name.rfind("transformer.", 0) == 0 ? name.substr(12) : name; };
  // Every tensor of the checkpoint is a parameter (or a buffer we ignore); every parameter is there.
  std::map<std::string, std::string> where;  // parameter -> file and the tensor's name in it
  std::map<std::string, std::string> stored;
  std::optional<SafeTensorsFile> single;  // one file is opened once
  for (const auto& [file, listed] : files) {
    std::vector<std::string> names = listed;
    if (names.empty()) {
      single = SafeTensorsFile::open(file);
      for (const auto& [name, t] : single->tensors()) names.push_back(name);
    }
    for (const std::string& name : names) {
      const std::string n = param_name(name);
      if (ignored_tensor(n) || (n == "lm_head.weight" && !table.find(n))) continue;  // tied: the embedding
      if (!table.find(n)) {
        if (!whole_model()) continue;  // another pipeline stage's
        throw std::runtime_error(file + ": tensor '" + name + "' is not a parameter of the configured model");
      }
      where[n] = file;
      stored[n] = name;
    }
  }
  for (const ParamSpec& p : table.specs())
    if (!where.count(p.name))
      throw std::runtime_error(path + ": tensor '" + p.name + "' is missing (the configured model needs " +
                               shape_str(p.shape) + ")");
  std::vector<float> full;
  for (const auto& [file, listed] : files) {
    const SafeTensorsFile f = single ? std::move(*single) : SafeTensorsFile::open(file);
    for (const TensorPlacement& placed : params().tensors()) {
      const ParamSpec& p = *placed.spec;
      if (where.at(p.name) != file) continue;
      const std::string& key = stored.at(p.name);
      if (!f.has(key)) throw std::runtime_error(file + ": tensor '" + key + "' is in the index but not in this shard");
      const StTensor& t = f.get(key);
      if (t.shape != p.shape)
        throw std::runtime_error(file + ": tensor '" + key + "' has shape " + shape_str(t.shape) +
                                 ", the configured model needs " + shape_str(p.shape));
      full.resize(static_cast<size_t>(p.global_numel()));
      f.to_floats(key, full.data(), p.global_numel());
      Placement::scatter(placed, full.data(), weights() + placed.offset);  // padding rows zero
    }
  }
  return "";
}

}  // namespace gf
