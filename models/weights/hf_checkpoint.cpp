// Loading Hugging Face safetensors weights by the parameters' global names: one file, a directory
// with model.safetensors, or a sharded checkpoint (model.safetensors.index.json and its shards,
// read one at a time). GPT-2: names with or without the `transformer.` prefix, Conv1D [in, out]
// layout (our layout too); Llama: nn.Linear [out, in] (its layout here too). F32/F16/BF16. A tied
// model's `lm_head.weight` and the `attn.bias` / `attn.masked_bias` / `rotary_emb.inv_freq` buffers
// are ignored. Every model parameter must be present with its global shape, and every other
// tensor must be one of the ignored ones.
//
// A Megatron-LM checkpoint directory (models/weights/megatron_checkpoint.h) is read by its own loader.
//
// A MindSpore .ckpt holding MindFormers' GPT-2 (models/weights/mindspore_checkpoint.h maps its names and
// layouts to the ones above) goes through the same checks: every parameter present with its global
// shape, every weight of the file a parameter of the model.
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/io/safetensors.h"
#include "core/io/torch_pickle.h"
#include "models/causal_lm.h"
#include "models/registry.h"
#include "models/weights/hf_checkpoint.h"
#include "models/weights/megatron_checkpoint.h"
#include "models/weights/mindspore_checkpoint.h"

namespace gf {

bool hf_ignored_tensor(const std::string& n) {
  // GPT-2's attention-mask buffers; Llama's rotary inv_freq buffers (older transformers saved
  // them). A tied lm_head is the caller's decision: an untied lm_head.weight is a parameter.
  return n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias") || n.ends_with(".rotary_emb.inv_freq");
}

std::string hf_param_name(const std::string& name) {
  return name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
}

std::string resolve_checkpoint_path(const std::string& given, const std::string& key) {
  namespace fs = std::filesystem;
  if (is_megatron_checkpoint(given)) return given;  // its reader finds the iteration and the shards
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
  const ModelEntry& entry = find_model(c.arch, c.type);
  if (!entry.reads_mindformers_gpt2_ckpt || c.moe.enabled())
    throw std::runtime_error(path + ": a MindSpore .ckpt is read for a dense GPT-2 only (MindFormers' GPT-2 names, "
                             "as mindformers/models/gpt2/convert_weight.py maps them); this model is " +
                             (c.moe.enabled() ? "an MoE " : "a ") + entry.family +
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

}  // namespace

// A sharded checkpoint's shards are listed before any is read, and a converter plans its output
// from the shapes: reading the headers alone keeps that to a few kilobytes per file.
std::vector<StHeaderEntry> read_safetensors_header(const std::string& path) {
  std::vector<StHeaderEntry> entries;
  std::ifstream in(path, std::ios::binary);
  uint8_t len[8] = {};
  bool ok = false;
  if (in && in.read(reinterpret_cast<char*>(len), 8)) {
    uint64_t hlen = 0;
    for (int i = 0; i < 8; ++i) hlen |= static_cast<uint64_t>(len[i]) << (8 * i);
    in.seekg(0, std::ios::end);
    const uint64_t size = static_cast<uint64_t>(in.tellg());
    if (hlen <= size - 8) {
      std::string text(static_cast<size_t>(hlen), '\0');
      in.seekg(8);
      if (in.read(text.data(), static_cast<std::streamsize>(hlen))) {
        const auto header = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
        ok = header.is_object();
        for (auto it = header.begin(); ok && it != header.end(); ++it) {
          if (it.key() == "__metadata__") continue;
          const auto& v = it.value();
          ok = v.is_object() && v.contains("dtype") && v["dtype"].is_string() && v.contains("shape") &&
               v["shape"].is_array();
          for (size_t d = 0; ok && d < v["shape"].size(); ++d) ok = v["shape"][d].is_number_integer();
          if (ok) entries.push_back({it.key(), v["dtype"].get<std::string>(), v["shape"].get<std::vector<int64_t>>()});
        }
      }
    }
  }
  if (ok) return entries;
  entries.clear();
  const SafeTensorsFile f = SafeTensorsFile::open(path);  // throws naming what is wrong
  for (const auto& [name, t] : f.tensors()) entries.push_back({name, dtype_name(t.dtype), t.shape});
  return entries;
}

std::vector<HfTensorFile> hf_checkpoint_tensors(const std::string& path) {
  namespace fs = std::filesystem;
  if (is_megatron_checkpoint(path))
    throw std::runtime_error(path + ": a Megatron-LM checkpoint, not Hugging Face safetensors: its tensors are read by "
                             "loading it into a model of its shape (load_checkpoint)");
  std::vector<HfTensorFile> out;
  if (!path.ends_with(".index.json")) {
    for (StHeaderEntry& e : read_safetensors_header(path)) out.push_back({std::move(e.name), path});
    return out;
  }
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read");
  nlohmann::ordered_json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not a JSON index: " + e.what());
  }
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    throw std::runtime_error(path + ": no \"weight_map\" object (a Hugging Face sharded checkpoint index has one)");
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw std::runtime_error(path + ": weight_map[\"" + name + "\"] is not a file name");
    const std::string f = (fs::path(path).parent_path() / file.get<std::string>()).string();
    if (!fs::exists(f)) throw std::runtime_error(path + ": shard " + f + " (holding '" + name + "') is missing");
    out.push_back({name, f});
  }
  return out;
}

std::string CausalLM::load_hf_checkpoint(const std::string& given) {
  const std::string path = resolve_checkpoint_path(given);
  if (is_megatron_checkpoint(path)) return load_megatron(*this, path);
  if (is_mindspore_ckpt(path)) return load_mindformers_gpt2(*this, path);
  const ParamTable& table = params().table();
  // Every tensor of the checkpoint is a parameter (or a buffer we ignore); every parameter is there.
  std::map<std::string, std::string> where;  // parameter -> file and the tensor's name in it
  std::map<std::string, std::string> stored;
  for (const auto& [name, file] : hf_checkpoint_tensors(path)) {
    const std::string n = hf_param_name(name);
    if (hf_ignored_tensor(n) || (n == "lm_head.weight" && !table.find(n))) continue;  // tied: the embedding
    if (!table.find(n)) {
      if (!whole_model()) continue;  // another pipeline stage's
      throw std::runtime_error(file + ": tensor '" + name + "' is not a parameter of the configured model");
    }
    where[n] = file;
    stored[n] = name;
  }
  for (const ParamSpec& p : table.specs())
    if (!where.count(p.name))
      throw std::runtime_error(path + ": tensor '" + p.name + "' is missing (the configured model needs " +
                               shape_str(p.shape) + ")");
  std::set<std::string> files;  // each read once, one at a time
  for (const auto& [n, file] : where) files.insert(file);
  std::vector<float> full;
  for (const std::string& file : files) {
    const SafeTensorsFile f = SafeTensorsFile::open(file);
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
      f.drop_pages(key);  // the copy is in `full`: the file's pages need not stay
      Placement::scatter(placed, full.data(), weights() + placed.offset);  // padding rows zero
    }
  }
  return "";
}

}  // namespace gf
