// Trainer::save_weights: the full weights assembled from the ranks' slices (--save-weights).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "models/registry.h"

#include "core/io/safetensors.h"
#include "models/weights/hf_config.h"
#include "runner/report/logging.h"
#include "runner/train/trainer.h"

namespace gf {

namespace {

// The full tensor `p` (global shape, F32) from the slices of the tensor-parallel group. Collective
// over ctx.group(GridAxis::kTp). Each rank gathers its boxes into zeros (a replicated tensor: tensor rank 0 only;
// padding is in no box) and the group sums: the slices are disjoint, so the sum is exact.
std::vector<float> gather_full_tensor(const TensorPlacement& p, const float* w, ParallelContext& ctx) {
  const int64_t n = p.spec->global_numel();
  std::vector<float> f(static_cast<size_t>(n), 0.0f);
  if (!p.replicated || ctx.index(GridAxis::kTp) == 0) Placement::gather(p, w + p.offset, f.data());
  ctx.group(GridAxis::kTp).allreduce_sum(f.data(), n);
  return f;
}

}  // namespace

void Trainer::save_weights(const std::string& path) {
  if (stream_) stream_->gather_all();  // ZeRO-3: every unit whole for the export, given back after
  struct Release {
    WeightStream* s;
    ~Release() {
      if (s) s->release_all();
    }
  } release{stream_.get()};
  const float* w = model_->weights();
  const Placement& placed = model_->params();
  std::vector<std::vector<float>> full;
  std::vector<StWriteTensor> out;
  // In the table's order on every rank. An expert's tensor is held by one rank of each expert-
  // parallel group: the others add zeros over that group.
  // Under pipelining each stage holds its layers: the whole model's table, each tensor summed over
  // the stages from the one that holds it (the tied embedding from the first stage, not its copy).
  std::optional<ParamTable> whole;
  if (pipelined()) {
    const ModelEntry& e = find_model(cfg_.model.arch, cfg_.model.type);
    whole = TransformerLM::make_param_table(e.spec(cfg_.model), e.names);
  }
  for (const ParamSpec& spec : (whole ? *whole : placed.table()).specs()) {
    const TensorPlacement* p = placed.find(spec.name);
    if (p != nullptr && ctx_.index(GridAxis::kPp) != 0 && tied_.end > tied_.begin && p->offset == tied_.begin) p = nullptr;
    // Every rank of the tensor group calls the gather (a collective) whether or not its stage holds p.
    std::vector<float> f(static_cast<size_t>(spec.global_numel()), 0.0f);
    if (p) f = gather_full_tensor(*p, w, ctx_);
    full.push_back(std::move(f));
    if (spec.is_expert()) ctx_.group(GridAxis::kEp).allreduce_sum(full.back().data(), spec.global_numel());
    if (pipelined()) ctx_.group(GridAxis::kPp).allreduce_sum(full.back().data(), spec.global_numel());
    out.push_back({spec.name, StDtype::kF32, spec.shape, full.back().data()});
  }
  if (ctx_.world_rank() == 0) {
    write_safetensors(path, out, {{"format", "pt"}});
    if (lora()) {  // the adapters alone: no config.json, which would make the file read as the whole model
      spdlog::info("LoRA adapters (not the frozen base) written to {}; `gridformer convert --from {}` writes the run's "
                   "checkpoint as PEFT's adapter directory, `--merge-lora` the merged model",
                   path, checkpoint_root());
      return;
    }
    spdlog::info("weights written to {}", path);
    // Hugging Face's config.json beside them, so that the file loads (and converts) as the model it is.
    const std::filesystem::path json = std::filesystem::path(path).parent_path() / "config.json";
    try {
      const nlohmann::json config = hf_config_json(cfg_.model);
      std::ofstream f(json);
      f << config.dump(2) << "\n";
      if (!f) throw std::runtime_error("cannot write " + json.string());
      spdlog::info("its config.json written to {}", json.string());
    } catch (const std::exception& e) {
      spdlog::warn("no config.json beside {}: {}", path, e.what());
    }
  }
}

}  // namespace gf
