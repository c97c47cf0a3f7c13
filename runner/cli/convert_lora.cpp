// `gridformer convert` for LoRA adapters (runner/cli/convert.h):
//  * one of our LoRA checkpoints (its state names the base; models/lora.h) -> PEFT's adapter directory:
//    adapter_model.safetensors with PEFT's keys (base_model.model.<module>.lora_A.weight [r, in], lora_B.weight
//    [out, r]; GPT-2's modules under transformer.), float32, metadata {"format": "pt"}, and adapter_config.json
//    (peft/tuners/lora/config.py's fields that PEFT since 0.9 reads: peft_type LORA, r, lora_alpha, lora_dropout,
//    target_modules as the list of module names adapted, use_rslora, fan_in_fan_out true for GPT-2's Conv1D,
//    task_type CAUSAL_LM, base_model_name_or_path the base it names), as PEFT's save_pretrained writes them;
//  * --merge-lora: the base (--base, or the one the checkpoint or adapter_config.json names) written with every
//    adapted weight W + scale B A (Conv1D: its transpose), summed in float32, then written in --dtype (by default
//    the base file's own dtype, as PEFT's merge keeps W's). --from is our LoRA checkpoint or a PEFT directory.
//  * PEFT's modules_to_save (lm_head, embed_tokens): the trained copies, saved under the module's own key
//    (base_model.model.lm_head.weight, as get_peft_model_state_dict strips modules_to_save.default), and in a merge
//    written instead of the base's.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/io/safetensors.h"
#include "models/lora.h"
#include "runner/cli/convert.h"
#include "runner/cli/convert_source.h"

namespace gf {

namespace fs = std::filesystem;
using convert_detail::fail;

namespace {

constexpr const char* kPeftPrefix = "base_model.model.";

std::string module_of(const std::string& adapter) {  // x.lora_A.weight -> x
  for (const char* s : {".lora_A.weight", ".lora_B.weight"})
    if (adapter.ends_with(s)) return adapter.substr(0, adapter.size() - std::string(s).size());
  return "";
}

// A PEFT adapter directory: adapter_config.json beside adapter_model.safetensors.
bool is_peft_dir(const std::string& p) {
  return fs::is_directory(p) && fs::exists(fs::path(p) / "adapter_config.json") &&
         fs::exists(fs::path(p) / "adapter_model.safetensors");
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) fail(p.string() + ": cannot be read");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(p.string() + ": not JSON (" + e.what() + ")");
  }
}

}  // namespace

// PEFT's 'all-linear', which PEFT saves as what it became: the full names of the modules adapted.
static bool all_linear(const nlohmann::json& t) { return t.is_string() && is_all_linear(t.get<std::string>()); }

// PEFT's rule for modules_to_save (and a list target_modules): the module's name, or its last dotted parts.
static bool names_module(const nlohmann::json& list, const std::string& weight) {
  if (!list.is_array()) return false;
  const std::string m = weight.ends_with(".weight") ? weight.substr(0, weight.size() - 7) : weight;
  for (const nlohmann::json& e : list)
    if (e.is_string() && peft_names_module(e.get<std::string>(), m)) return true;
  return false;
}

bool LoraAdapters::load(const std::string& from) {
  adapters.clear();
  saved.clear();
  saved_list_ = nullptr;
  if (is_peft_dir(from)) {
    const nlohmann::json c = read_json(fs::path(from) / "adapter_config.json");
    if (c.value("peft_type", std::string()) != "LORA")
      fail(from + "/adapter_config.json: peft_type " + c.value("peft_type", std::string("?")) + ", not LORA");
    if (c.value("use_dora", false)) fail(from + "/adapter_config.json: use_dora: DoRA adapters are not read");
    const double r = c.at("r").get<double>(), alpha = c.at("lora_alpha").get<double>();
    if (r <= 0) fail(from + "/adapter_config.json: r " + std::to_string(r));
    scale = c.value("use_rslora", false) ? alpha / std::sqrt(r) : alpha / r;
    if (!c.value("rank_pattern", nlohmann::json::object()).empty() || !c.value("alpha_pattern", nlohmann::json::object()).empty())
      fail(from + "/adapter_config.json: rank_pattern / alpha_pattern (per-module ranks) are not read");
    fan_in_fan_out = c.value("fan_in_fan_out", false);
    base = c.value("base_model_name_or_path", std::string());
    if (!base.empty() && fs::path(base).is_relative() && !fs::exists(base) && fs::exists(fs::path(from) / base))
      base = (fs::path(from) / base).string();
    if (c.contains("modules_to_save") && !c["modules_to_save"].is_null()) saved_list_ = c["modules_to_save"];
    const SafeTensorsFile f = SafeTensorsFile::open((fs::path(from) / "adapter_model.safetensors").string());
    for (const auto& [key, t] : f.tensors()) {
      std::string name = key.starts_with(kPeftPrefix) ? key.substr(std::string(kPeftPrefix).size()) : key;
      if (name.starts_with("transformer.")) name = name.substr(12);  // GPT-2's modules are ours without it
      if (!module_of(name).empty()) adapters[name] = {t.shape, f.floats(key)};
      else if (names_module(saved_list_, name)) saved[name] = {t.shape, f.floats(key)};
      else fail(from + ": tensor '" + key + "' is not a LoRA A or B, nor a module adapter_config.json's modules_to_save names");
    }
    return true;
  }
  if (!ConvertSource::is_ours(from)) return false;
  ckpt::Reader r = ckpt::Reader::open(from);
  const nlohmann::json st = r.state();
  if (!st.contains("lora") || st["lora"].is_null()) return false;
  const nlohmann::json& l = st["lora"];
  const double rank = l.at("rank").get<double>(), alpha = l.at("alpha").get<double>();
  scale = l.value("use_rslora", false) ? alpha / std::sqrt(rank) : alpha / rank;
  base = l.at("base").get<std::string>();
  fan_in_fan_out = l.value("fan_in_fan_out", false);  // the base stores [in, out] (GPT-2's Conv1D)
  rank_ = static_cast<int64_t>(rank);
  alpha_ = alpha;
  rslora_ = l.value("use_rslora", false);
  targets_ = l.value("target_modules", nlohmann::json());
  saved_list_ = l.value("modules_to_save", nlohmann::json());
  for (const std::string& n : r.names()) {
    if (n.starts_with("optimizer.")) continue;
    (module_of(n).empty() ? saved : adapters)[n] = {r.shape(n), r.read_full(n)};
  }
  return true;
}

// W + scale B A into `w` (the base weight `weight`, shape `shape`): [out, in] as nn.Linear stores it, or (Conv1D,
// fan_in_fan_out) [in, out]. The sum in float32, B A's elements accumulated in double then rounded once.
void LoraAdapters::merge_into(const std::string& weight, const std::vector<int64_t>& shape, std::vector<float>& w) const {
  if (const auto s = saved.find(weight); s != saved.end()) {  // modules_to_save: the trained copy replaces the base's
    if (s->second.shape != shape) fail(weight + ": the trained copy (modules_to_save) has another shape than the base's");
    w = s->second.data;
    ++replaced;
    return;
  }
  const std::string module = weight.ends_with(".weight") ? weight.substr(0, weight.size() - 7) : weight;
  const auto a = adapters.find(module + ".lora_A.weight"), b = adapters.find(module + ".lora_B.weight");
  if (a == adapters.end() || b == adapters.end()) return;
  const int64_t r = a->second.shape.at(0), in = a->second.shape.at(1), out = b->second.shape.at(0);
  if (b->second.shape.at(1) != r) fail(module + ": lora_B's shape does not follow lora_A's rank");
  const bool transposed = fan_in_fan_out;
  if (shape.size() != 2 || shape[0] != (transposed ? in : out) || shape[1] != (transposed ? out : in))
    fail(module + ": the base weight's shape does not fit its adapter (A [" + std::to_string(r) + ", " +
         std::to_string(in) + "], B [" + std::to_string(out) + ", " + std::to_string(r) + "])");
  const std::vector<float>&A = a->second.data, &B = b->second.data;
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      double d = 0;
      for (int64_t k = 0; k < r; ++k) d += static_cast<double>(B[o * r + k]) * A[k * in + i];
      float& x = transposed ? w[i * out + o] : w[o * in + i];
      x += static_cast<float>(scale * d);
    }
  ++merged;
}

// PEFT's adapter directory from our LoRA checkpoint (see the top of the file).
void write_peft_adapter(const LoraAdapters& l, const std::string& dir, bool overwrite, ConvertSummary& sum) {
  if (fs::exists(dir) && !fs::is_empty(dir) && !overwrite)
    fail("--to " + dir + " is a directory that is not empty; give a new or empty one, or --overwrite");
  fs::create_directories(dir);
  std::vector<StWriteTensor> out;
  std::set<std::string> modules, full;
  for (const auto& [name, t] : l.adapters) {
    const std::string module = module_of(name);
    modules.insert(module.substr(module.rfind('.') + 1));
    full.insert((l.fan_in_fan_out ? "transformer." : "") + module);
    const std::string key = kPeftPrefix + std::string(l.fan_in_fan_out ? "transformer." : "") + name;
    out.push_back({key, StDtype::kF32, t.shape, t.data.data()});
    sum.tensors++;
    sum.bytes += static_cast<int64_t>(t.data.size() * sizeof(float));
  }
  for (const auto& [name, t] : l.saved) {  // PEFT's key of a saved module: its own, without modules_to_save.default
    // (GPT-2's modules sit under transformer., its head beside it)
    const bool under = l.fan_in_fan_out && !name.starts_with("lm_head.");
    out.push_back({kPeftPrefix + std::string(under ? "transformer." : "") + name, StDtype::kF32, t.shape, t.data.data()});
    sum.tensors++;
    sum.bytes += static_cast<int64_t>(t.data.size() * sizeof(float));
  }
  const std::string weights = (fs::path(dir) / "adapter_model.safetensors").string();
  write_safetensors(weights, out, {{"format", "pt"}});
  nlohmann::json c = {{"peft_type", "LORA"},
                      {"task_type", "CAUSAL_LM"},
                      {"r", l.rank_},
                      {"lora_alpha", l.alpha_ == std::floor(l.alpha_) ? nlohmann::json(static_cast<int64_t>(l.alpha_))
                                                                     : nlohmann::json(l.alpha_)},
                      {"lora_dropout", 0.0},
                      {"use_rslora", l.rslora_},
                      {"target_modules", l.targets_.is_null() ? nlohmann::json(std::vector<std::string>(modules.begin(), modules.end()))
                                         : all_linear(l.targets_) ? nlohmann::json(std::vector<std::string>(full.begin(), full.end()))
                                                                  : l.targets_},
                      {"fan_in_fan_out", l.fan_in_fan_out},
                      {"bias", "none"},
                      {"base_model_name_or_path", l.base},
                      {"inference_mode", true},
                      {"init_lora_weights", true},
                      {"modules_to_save", l.saved_list_},
                      {"layers_to_transform", nullptr},
                      {"layers_pattern", nullptr},
                      {"rank_pattern", nlohmann::json::object()},
                      {"alpha_pattern", nlohmann::json::object()},
                      {"revision", nullptr},
                      {"use_dora", false}};
  const std::string config = (fs::path(dir) / "adapter_config.json").string();
  std::ofstream(config) << c.dump(2);
  sum.files = {weights, config};
}

}  // namespace gf
