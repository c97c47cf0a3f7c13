// Reading the model, the weights to start from and the datasets into Settings (see runner/config/read.h).
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>

#include "core/io/checkpoint.h"
#include "core/ops/activation.h"
#include "models/causal_lm.h"
#include "models/registry.h"
#include "models/weights/hf_config.h"
#include "runner/config/arch_section.h"
#include "runner/config/read.h"

namespace gf::config_read {
namespace {

using config_tree::show;

}  // namespace

void read_dtypes(ReadContext& x, const std::string& k, const std::string& norm) {
  for (const char* key : {"compute_dtype", "param_init_type", "layernorm_compute_type", "softmax_compute_type"}) {
    const std::string v = x.rd.get<std::string>(k + key);
    const std::string name = key;
    if (v != "float32" && v != "float16" && v != "bfloat16")
      x.refuse("`" + k + key + ": " + v + "`: expects float32, float16 or bfloat16");
    else if (v != "float32" && name == "param_init_type")
      x.warn("`" + k + key + ": " + v + "`: master weights, their gradients and the optimizer state are kept in float32; "
             "compute_dtype sets the precision of the matrix products");
    else if (v != "float32" && name != "compute_dtype")
      x.warn("`" + k + key + ": " + v + "`: " +
             (name == "layernorm_compute_type" ? norm : "softmax (attention and cross-entropy)") +
             " is computed in float32 (more precise than asked); its output is rounded to compute_dtype where it "
             "enters a matrix product");
  }
}

namespace {

// Hugging Face weights with a config.json beside them: the file must describe the configured model
// (models/weights/hf_config.h), or the run stops here naming each difference.
void check_hf_config_beside(ReadContext& x, const std::string& key, const std::string& value) {
  const std::optional<nlohmann::json> hf = read_hf_config_beside(value);
  if (!hf) return;
  const std::filesystem::path dir = std::filesystem::is_directory(value) ? std::filesystem::path(value)
                                                                         : std::filesystem::path(value).parent_path();
  const HfConfigCheck check = check_hf_config(*hf, x.c.model, (dir / "config.json").string());
  if (!check.errors.empty()) {
    std::string all;
    for (const std::string& e : check.errors) all += (all.empty() ? "" : "; ") + e;
    x.refuse(kv(key, value) + ": the weights' config.json describes another model than this config: " + all +
             ". Set the config's keys to the file's values, or load weights of this model");
  }
  for (const std::string& w : check.warnings) x.warn(kv(key, value) + ": " + w + " (the config's value is used)");
}

// A weights path: empty (none), an existing file or directory, or a name MindFormers would fetch from
// its hub. Returns whether the path can be loaded; refuses otherwise, naming `key`.
bool check_weights_path(ReadContext& x, const std::string& key, const std::string& value) {
  namespace fs = std::filesystem;
  if (value.empty()) return false;
  std::error_code ec;
  if (!fs::exists(value, ec)) {
    const bool bare_name = value.find('/') == std::string::npos && !fs::path(value).has_extension();
    const std::string family = arch_section_or_base(x.c.model.type).family;
    x.refuse(kv(key, value) + (bare_name ? ": no hub at run time: convert/download weights (a Hugging Face " + family +
                                               " .safetensors or its directory) and give a path in load_checkpoint"
                                         : ": no such file or directory"));
    return false;
  }
  if (ckpt::is_checkpoint(value)) return true;  // one of ours (core/io/checkpoint.h): its index is read at start
  // PEFT's LoRA adapter directory: its adapter_config.json and base are checked where it is loaded.
  if (fs::exists(fs::path(value) / "adapter_config.json") && fs::exists(fs::path(value) / "adapter_model.safetensors"))
    return true;
  try {
    const std::string file = resolve_checkpoint_path(value, key);
    if (file.size() < 5 || file.compare(file.size() - 5, 5, ".ckpt") != 0) check_hf_config_beside(x, key, value);
  } catch (const std::exception& e) {
    x.refuse(e.what());
    return false;
  }
  return true;
}

}  // namespace

// The largest sizes a model may have here, whatever its architecture: beyond them the plan's per-layer
// tables and the products of sizes stop being seconds of arithmetic (num_layers 2^31 spun for minutes).
// Each lies far beyond published models (Llama 3.1 405B: 126 layers, hidden 16384, 128 heads, vocab
// 128256; context windows up to 10M tokens).
struct SizeBound {
  const char* key;
  int64_t ModelConfig::*field;
  int64_t max;
  const char* why;
};
constexpr SizeBound kSizeBounds[] = {
    {"num_layers", &ModelConfig::num_layers, 1024, "8x Llama 3.1 405B's 126"},
    {"hidden_size", &ModelConfig::hidden_size, 1 << 20, "64x Llama 3.1 405B's 16384"},
    {"num_heads", &ModelConfig::num_heads, 1 << 16, ""},
    {"seq_length", &ModelConfig::seq_length, 1 << 24, "16M tokens"},
    {"vocab_size", &ModelConfig::vocab_size, (1 << 30) - 1, "token ids are 30-bit: bit 30 marks an untrained target"},
    {"intermediate_size", &ModelConfig::intermediate_size, 1 << 22, ""},
};

bool model_sizes_within_bounds(const ModelConfig& m) {
  for (const SizeBound& b : kSizeBounds)
    if (m.*b.field > b.max) return false;
  return true;
}

void check_model_bounds(ReadContext& x) {
  // The initial weights' standard deviation: GPT-2's and Megatron's 0.02. Above 1 a 64-wide layer's outputs
  // already spread past the softmax's useful range (a std of 1e12 gives a loss that is not finite at step 1).
  const float init = x.c.model.initializer_range;
  if (!(init > 0.0f && init <= 1.0f))
    x.refuse(kv("model.model_config.initializer_range", show(x.rd.node("model.model_config.initializer_range"))) +
             ": must be in (0, 1] (the initial weights' standard deviation; GPT-2's and Megatron's 0.02)");
  for (const SizeBound& b : kSizeBounds) {
    const int64_t v = x.c.model.*b.field;
    if (v > b.max)
      x.refuse(kv("model.model_config." + std::string(b.key), std::to_string(v)) + ": at most " + std::to_string(b.max) +
               (*b.why ? std::string(" (") + b.why + ")" : std::string()));
  }
}

void read_model(ReadContext& x) {
  arch_section_or_base(x.rd.get<std::string>("model.model_config.type")).read(x);
  check_model_bounds(x);
}


void read_flash_attention(ReadContext& x, bool fused_when_auto) {
  const std::string key = "model.model_config.use_flash_attention";
  bool& on = x.c.model.use_flash_attention;
  const YAML::Node flash = x.rd.node(key);
  if (flash.IsScalar() && flash.Scalar() == "auto") {
    on = fused_when_auto;
    x.rd.root()["model"]["model_config"]["use_flash_attention"] = on;  // the dump says which
  } else if (!YAML::convert<bool>::decode(flash, on)) {
    x.refuse("`" + key + ": " + show(flash) + "`: expects True, False or auto");
  }
}

void read_attention_window(ReadContext& x) {
  const std::string k = "model.model_config.";
  auto count = [&](const char* key, int64_t& out) {
    const YAML::Node n = x.rd.node(k + key);
    if (!n || n.IsNull()) return false;
    if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, out) || out < 0) {
      x.refuse(kv(k + key, show(n)) + ": expects a number of tokens (>= 0), or None");
      return false;
    }
    return true;
  };
  int64_t window = 0, pre = 0, next = 0;
  const bool has_window = count("sliding_window", window);
  const bool has_pre = count("pre_tokens", pre);
  if (count("next_tokens", next) && next > 0)
    x.warn(kv(k + "next_tokens", std::to_string(next)) + ": a causal language model sees no later token; it runs causal "
           "(next_tokens 0), as Ascend's flash attention does under its causal mask");
  if (has_window && window == 0) x.refuse(kv(k + "sliding_window", "0") + ": a window holds at least the token itself; "
                                          "None for the whole prefix");
  int64_t w = has_window ? window : has_pre ? pre + 1 : 0;
  if (has_window && has_pre && pre + 1 != window)
    x.warn(kv(k + "pre_tokens", std::to_string(pre)) + " and " + kv(k + "sliding_window", std::to_string(window)) +
           " disagree: sliding_window wins (each token sees itself and the " + std::to_string(window - 1) + " before it)");
  x.c.model.sliding_window = w;
}

void finish_model(ReadContext& x) {
  Config& c = x.c;
  // compute_dtype is a run setting (the model's layout), parsed here once; read_dtypes refused a bad value.
  const std::string dtype = x.rd.get<std::string>("model.model_config.compute_dtype");
  if (dtype == "float32" || dtype == "bfloat16" || dtype == "float16") c.compute_dtype = parse_compute_dtype(dtype);
  if (c.compute_dtype == ComputeDtype::kFloat16 && !c.loss_scale.dynamic && c.loss_scale.value == 1.0)
    x.warn("`model.model_config.compute_dtype: float16` without a loss scale: gradients below 2^-24 flush to zero in "
           "float16; set runner_wrapper.scale_sense (e.g. {type: DynamicLossScaleUpdateCell, loss_scale_value: 65536, "
           "scale_factor: 2, scale_window: 1000})");
}

// MindFormers' run_mindformer.py starts training (train, finetune) from load_checkpoint and drops
// model_config.checkpoint_name_or_path (r0.8: replaced by load_checkpoint; r1.x: set to None);
// r0.8's eval loads checkpoint_name_or_path when load_checkpoint is empty. Both are checked here, on
// every rank, before any work.
void read_weights(ReadContext& x) {
  Config& c = x.c;
  const std::string lc = x.rd.get<std::string>("load_checkpoint");
  const std::string cn_key = "model.model_config.checkpoint_name_or_path";
  const std::string cn = x.rd.get<std::string>(cn_key);
  if (check_weights_path(x, "load_checkpoint", lc)) c.load_checkpoint = lc;
  if (cn.empty()) return;
  if (c.run_mode == RunMode::kTrain || c.run_mode == RunMode::kFinetune) {
    x.warn(kv(cn_key, cn) + " is not loaded for run_mode " + run_mode_name(c.run_mode) + ": MindFormers' run_mindformer.py starts " +
           "training from load_checkpoint (or from scratch) and drops it; to start from these weights, give their path " +
           "in load_checkpoint");
  } else if (!lc.empty()) {
    // MindFormers' run_mindformer.py loads load_checkpoint when it is given; checkpoint_name_or_path then
    // only names the model (its predict_*.yaml files say `gpt2`, `llama2_7b`, a hub name).
    if (lc != cn)
      x.warn(kv(cn_key, cn) + " is not loaded: " + kv("load_checkpoint", lc) +
             " gives the weights (MindFormers lets load_checkpoint win)");
  } else if (check_weights_path(x, cn_key, cn)) {
    c.load_checkpoint = cn;
  }
}

void read_datasets(ReadContext& x) {
  Config& c = x.c;
  for (const std::string ds : {"train_dataset", "eval_dataset"}) {
    KeyReader& rd = x.rd;
    DatasetConfig d;
    d.loader_type = rd.get<std::string>(ds + ".data_loader.type");
    d.split = rd.get<std::string>(ds + ".data_loader.split");
    d.shuffle = rd.get<bool>(ds + ".data_loader.shuffle");
    d.seed = rd.get<uint64_t>(ds + ".data_loader.seed");
    d.num_samples = rd.get<int64_t>(ds + ".data_loader.num_samples");
    const YAML::Node p = rd.node(ds + ".data_loader.data_path");
    try {
      if (p.IsScalar()) {
        d.data_path.push_back({1.0, p.as<std::string>()});
      } else if (p.IsSequence()) {
        if (p.size() == 1) d.data_path.push_back({1.0, p[0].as<std::string>()});
        else
          for (size_t i = 0; i + 1 < p.size(); i += 2) d.data_path.push_back({p[i].as<double>(), p[i + 1].as<std::string>()});
      }
    } catch (const YAML::Exception& e) {
      x.refuse("`" + ds + ".data_loader.data_path`: expects a prefix or a list [weight, prefix, ...]: " + e.msg);
    }
    if (ds == "eval_dataset") d.eval_iters = rd.get<int64_t>(ds + ".eval_iters");
    if (ds == "train_dataset") {
      DocumentConfig& docs = c.model.documents;
      docs.reset_position_ids = rd.get<bool>(ds + ".data_loader.reset_position_ids");
      docs.reset_attention_mask = rd.get<bool>(ds + ".data_loader.reset_attention_mask");
      docs.eod_mask_loss = rd.get<bool>(ds + ".data_loader.eod_mask_loss");
      docs.eod_token_id = rd.get<int64_t>(ds + ".data_loader.eod_token_id");
      if (docs.eod_token_id < -1)
        x.refuse(kv(ds + ".data_loader.eod_token_id", std::to_string(docs.eod_token_id)) +
                 ": expects a token id, or -1 for model_config.eos_token_id");
    }
    (ds == "train_dataset" ? c.train_data : c.eval_data) = d;

    const int64_t batch = rd.get<int64_t>(ds + ".batch_size");
    if (batch != -1 && batch != c.batch_size)
      x.warn(kv(ds + ".batch_size", std::to_string(batch)) + " is replaced by runner_config.batch_size (" +
             std::to_string(c.batch_size) + "), as MindFormers replaces it");
    const std::string task = rd.get<std::string>(ds + "_task.type");
    if (task != "CausalLanguageModelDataset")
      x.refuse(kv(ds + "_task.type", task) + ": gridformer trains causal language models only (CausalLanguageModelDataset)");
    // MindFormers replaces <ds>_task.dataset_config by <ds> (its files make it the alias *<ds>).
    const YAML::Node dc = rd.node(ds + "_task.dataset_config");
    if (dc.IsNull()) continue;
    const YAML::Node def = x.schema[ds];
    if (show(config_tree::overlay(def, dc)) == show(config_tree::overlay(def, x.user[ds]))) {
      rd.root()[ds + "_task"]["dataset_config"] = YAML::Clone(rd.root()[ds]);  // the dump says what is read
    } else {
      x.warn("`" + ds + "_task.dataset_config` differs from `" + ds + "`; gridformer reads " + ds +
             " (MindFormers too replaces the task's copy by it); ignored");
    }
  }
}

}  // namespace gf::config_read
