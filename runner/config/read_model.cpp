// Reading the model, the weights to start from and the datasets into Settings (see runner/config/read.h).
#include <cmath>
#include <filesystem>
#include <string>

#include "core/io/checkpoint.h"
#include "core/ops/activation.h"
#include "models/causal_lm.h"
#include "models/registry.h"
#include "runner/config/arch_section.h"
#include "runner/config/read.h"

namespace gf::config_read {
namespace {

using config_tree::show;

std::string kv(const std::string& key, const std::string& value) { return "`" + key + ": " + value + "`"; }

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

void check_model(ReadContext& x, const std::string& k) {
  const ModelConfig& m = x.c.model;
  try {
    find_model(m.arch, m.type);
  } catch (const std::exception& e) {
    x.refuse(e.what());
  }
  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0) x.refuse("`" + k + key + ": " + std::to_string(v) + "`: must be > 0");
  };
  positive("vocab_size", m.vocab_size);
  positive("seq_length", m.seq_length);
  positive("hidden_size", m.hidden_size);
  positive("num_layers", m.num_layers);
  positive("num_heads", m.num_heads);
  positive("expand_ratio", m.expand_ratio);
  if (m.hidden_size > 0 && m.num_heads > 0 && m.hidden_size % m.num_heads != 0)
    x.refuse("`" + k + "hidden_size: " + std::to_string(m.hidden_size) + "` is not divisible by `num_heads: " +
             std::to_string(m.num_heads) + "`; pick num_heads dividing hidden_size");
  const std::pair<const char*, float> rates[] = {{"hidden_dropout_rate", m.hidden_dropout_rate},
                                                {"attention_dropout_rate", m.attention_dropout_rate}};
  for (auto [key, v] : rates)
    if (!(v >= 0.0f && v < 1.0f)) x.refuse("`" + k + key + ": " + std::to_string(v) + "`: must be in [0, 1)");
  try {
    ops::parse_activation(m.hidden_act);
  } catch (const std::exception& e) {
    x.refuse("`" + k + "hidden_act`: " + e.what());
  }
}

// GPT-2's positions: its learned table (learned_absolute), or RoPE as MindSpeed's GPT MoE runs GPT-2
// blocks (Megatron's --position-embedding-type rope), with base rope_theta.
void check_positions(ReadContext& x, const std::string& k) {
  const ModelConfig& m = x.c.model;
  const std::string type = m.position_embedding_type;
  if (type != "learned_absolute" && type != "rope") {
    x.refuse("`" + k + "position_embedding_type: " + type + "`: expects learned_absolute (GPT-2's learned position "
             "table) or rope (rotary embeddings on q and k, Megatron's --position-embedding-type rope)");
    return;
  }
  const std::string theta = show(x.rd.node(k + "rope_theta"));
  if (type == "learned_absolute") {
    if (m.rope_theta != 10000.0)
      x.warn("`" + k + "rope_theta: " + theta + "` has no effect with `position_embedding_type: learned_absolute` "
             "(GPT-2's learned position table); set position_embedding_type: rope for rotary embeddings; ignored");
    return;
  }
  if (!(m.rope_theta > 0) || !std::isfinite(m.rope_theta))
    x.refuse("`" + k + "rope_theta: " + theta + "`: must be > 0 (RoPE's base; 10000 as in Megatron's --rotary-base)");
  if (m.hidden_size > 0 && m.num_heads > 0 && m.hidden_size % m.num_heads == 0 && m.head_dim() % 2 != 0)
    x.refuse("`" + k + "hidden_size: " + std::to_string(m.hidden_size) + "` / `num_heads: " + std::to_string(m.num_heads) +
             "` gives heads of " + std::to_string(m.head_dim()) + " dimensions; `position_embedding_type: rope` rotates "
             "pairs of them, so the head size must be even");
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
  try {
    resolve_checkpoint_path(value, key);
  } catch (const std::exception& e) {
    x.refuse(e.what());
    return false;
  }
  return true;
}

}  // namespace

void read_model(ReadContext& x) { arch_section_or_base(x.rd.get<std::string>("model.model_config.type")).read(x); }

void read_gpt2_model(ReadContext& x) {
  ModelConfig& m = x.c.model;
  KeyReader& rd = x.rd;
  const std::string k = "model.model_config.";
  m.type = rd.get<std::string>(k + "type");
  m.arch = rd.get<std::string>("model.arch.type");
  m.vocab_size = rd.get<int64_t>(k + "vocab_size");
  m.seq_length = rd.get<int64_t>(k + "seq_length");
  m.max_position_embeddings = rd.get<int64_t>(k + "max_position_embeddings");
  m.hidden_size = rd.get<int64_t>(k + "hidden_size");
  m.num_layers = rd.get<int64_t>(k + "num_layers");
  m.num_heads = rd.get<int64_t>(k + "num_heads");
  m.expand_ratio = rd.get<int64_t>(k + "expand_ratio");
  m.hidden_act = rd.get<std::string>(k + "hidden_act");
  m.hidden_dropout_rate = rd.get<float>(k + "hidden_dropout_rate");
  m.attention_dropout_rate = rd.get<float>(k + "attention_dropout_rate");
  m.initializer_range = rd.get<float>(k + "initializer_range");
  m.layernorm_epsilon = rd.get<float>(k + "layernorm_epsilon");
  m.param_init_type = rd.get<std::string>(k + "param_init_type");
  m.layernorm_compute_type = rd.get<std::string>(k + "layernorm_compute_type");
  m.softmax_compute_type = rd.get<std::string>(k + "softmax_compute_type");
  m.position_embedding_type = rd.get<std::string>(k + "position_embedding_type");
  m.rope_theta = rd.get<double>(k + "rope_theta");
  m.add_bias_linear = rd.get<bool>(k + "add_bias_linear");
  YAML::Node mc = rd.root()["model"]["model_config"];  // resolved values are written back, so the dump says what runs
  read_flash_attention(x, m.seq_length >= kFlashAttentionAutoMinSeq);
  if (m.max_position_embeddings < 0) {
    m.max_position_embeddings = m.seq_length;  // MindFormers' GPT-2 sizes its position table by seq_length
    mc["max_position_embeddings"] = m.seq_length;
  } else if (m.seq_length > m.max_position_embeddings) {
    x.refuse("`" + k + "seq_length: " + std::to_string(m.seq_length) +
             "` is larger than the position table `max_position_embeddings: " + std::to_string(m.max_position_embeddings) +
             "`; lower seq_length or raise max_position_embeddings");
  }
  check_model(x, k);
  check_positions(x, k);
  read_dtypes(x, k, "LayerNorm");
  finish_model(x);
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
  } else if (!lc.empty() && lc != cn) {
    x.refuse(kv("load_checkpoint", lc) + " and " + kv(cn_key, cn) + " name different weights; keep one (load_checkpoint)");
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
