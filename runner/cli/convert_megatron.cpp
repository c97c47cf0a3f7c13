// `gridformer convert --format megatron`: our checkpoint or Hugging Face weights written in Megatron-LM's
// checkpoint layout (models/weights/megatron_save.h), read one tensor at a time from the source.
#include <filesystem>
#include <map>

#include "models/weights/megatron_save.h"
#include "runner/cli/convert.h"
#include "runner/cli/convert_source.h"

namespace gf {

void write_megatron_target(ConvertSource& src, const ModelConfig& model, const ConvertOptions& opt, ConvertSummary& sum) {
  using convert_detail::fail;
  MegatronSaveOptions o;
  o.tp = opt.megatron_tp;
  o.pp = opt.megatron_pp;
  o.ep = opt.megatron_ep;
  o.core = opt.megatron_core;
  o.transformer_engine = opt.transformer_impl != "local";
  o.grouped_gemm = opt.moe_grouped_gemm;
  o.dtype = opt.dtype == "bfloat16" ? TorchDtype::kBF16 : opt.dtype == "float16" ? TorchDtype::kF16 : TorchDtype::kF32;
  if (const std::string why = megatron_save_problem(model, o); !why.empty()) fail("--format megatron: " + why);
  std::map<std::string, const SourceTensor*> by_name;
  for (const SourceTensor& t : src.tensors) by_name[t.name] = &t;
  std::map<std::string, int64_t> read;
  auto weight = [&](const std::string& name) {
    const auto it = by_name.find(name);
    if (it == by_name.end()) fail(src.describe() + " has no tensor '" + name + "', which the model's Megatron layout needs");
    std::vector<float> v;
    src.read(*it->second, v);
    read[name] = static_cast<int64_t>(v.size());
    return v;
  };
  sum.files = save_megatron(opt.to, model, weight, o);
  for (const auto& [name, n] : read) {
    ++sum.tensors;
    sum.bytes += n * torch_dtype_size(o.dtype);
  }
  for (const SourceTensor& t : src.tensors)
    if (!read.count(t.name)) sum.skipped["not a weight of the model's Megatron layout"].push_back(t.name);
  sum.files.push_back((std::filesystem::path(opt.to) / "latest_checkpointed_iteration.txt").string());
  const bool core = megatron_writes_core(model, o);
  sum.target = "Megatron-LM checkpoint " + opt.to + "/release (" + std::string(torch_dtype_name(o.dtype)) + ", TP " +
               std::to_string(o.tp) + " x PP " + std::to_string(o.pp) +
               (core ? " x EP " + std::to_string(o.ep) + ", Megatron-core's layout with " +
                           (o.transformer_engine ? "Transformer Engine's" : "the local spec's") + " names"
                     : std::string()) +
               ", checkpoint version 3.0)";
}

}  // namespace gf
