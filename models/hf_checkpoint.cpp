// Loading a Hugging Face GPT-2 safetensors file: names with or without the `transformer.`
// prefix, Conv1D [in, out] layout (our layout too), F32/F16/BF16; `lm_head.weight` (tied) and
// the `attn.bias` / `attn.masked_bias` buffers are ignored. Every model parameter must be present
// with its global shape, and every other tensor must be one of the ignored ones.
#include <filesystem>
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
  return n == "lm_head.weight" || ends_with(".attn.bias") || ends_with(".attn.masked_bias");
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
    const fs::path p = fs::path(given) / "model.safetensors";
    if (!fs::exists(p))
      throw std::runtime_error("`" + key + ": " + given + "` is a directory without model.safetensors");
    return p.string();
  }
  if (fs::path(given).extension() == ".ckpt")
    throw std::runtime_error("`" + key + ": " + given + "` is a MindSpore .ckpt, which gridformer does not read; "
                             "give a Hugging Face GPT-2 .safetensors file (or its directory)");
  return given;
}

void CausalLM::load_hf_checkpoint(const std::string& given) {
  const std::string path = resolve_checkpoint_path(given);
  const SafeTensorsFile f = SafeTensorsFile::open(path);
  const ParamTable& table = params();
  for (const auto& [name, t] : f.tensors()) {
    std::string n = name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
    if (ignored_tensor(n)) continue;
    if (!table.find(n))
      throw std::runtime_error(path + ": tensor '" + name + "' is not a parameter of the configured model");
  }
  std::vector<float> full;
  for (const ParamSpec& p : table.specs()) {
    const std::string key = f.has("transformer." + p.name) ? "transformer." + p.name : p.name;
    if (!f.has(key))
      throw std::runtime_error(path + ": tensor '" + p.name + "' is missing (the configured model needs " +
                               shape_str(p.shape) + ")");
    const StTensor& t = f.get(key);
    if (t.shape != p.shape)
      throw std::runtime_error(path + ": tensor '" + key + "' has shape " + shape_str(t.shape) +
                               ", the configured model needs " + shape_str(p.shape));
    full.resize(static_cast<size_t>(p.global_numel()));
    f.to_floats(key, full.data(), p.global_numel());
    float* w = weights() + p.offset;
    for (int64_t i = 0; i < p.numel(); ++i) {
      const int64_t g = table.global_index(p, i);
      w[i] = g < 0 ? 0.0f : full[static_cast<size_t>(g)];
    }
  }
}

}  // namespace gf
