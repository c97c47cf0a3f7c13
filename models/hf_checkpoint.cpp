// Loading Hugging Face safetensors weights by the parameters' global names: one file, a directory
// with model.safetensors, or a sharded checkpoint (model.safetensors.index.json and its shards,
// read one at a time). GPT-2: names with or without the `transformer.` prefix, Conv1D [in, out]
// layout (our layout too); Llama: nn.Linear [out, in] (its layout here too). F32/F16/BF16. A tied
// model's `lm_head.weight` and the `attn.bias` / `attn.masked_bias` / `rotary_emb.inv_freq` buffers
// are ignored. Every model parameter must be present with its global shape, and every other
// tensor must be one of the ignored ones.
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
  if (fs::path(given).extension() == ".ckpt")
    throw std::runtime_error("`" + key + ": " + given + "` is a MindSpore .ckpt, which gridformer does not read; "
                             "give a Hugging Face .safetensors file, its directory, or a sharded checkpoint's directory");
  return given;
}

namespace {

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

void CausalLM::load_hf_checkpoint(const std::string& given) {
  const std::string path = resolve_checkpoint_path(given);
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
}

}  // namespace gf
