#include "runner/config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/ops/activation.h"
#include "models/registry.h"
#include "runner/config_schema.h"
#include "runner/config_tree.h"

namespace gf {
namespace {

using config_tree::find;

template <typename T>
T get(const YAML::Node& root, const std::string& path) {
  const YAML::Node n = find(root, path);
  return n.as<T>();
}

const char* const kOptimizers[] = {"AdamWeightDecay", "FusedAdamWeightDecay", "AdamW"};
const char* const kCallbacks[] = {"MFLossMonitor", "CheckpointMointor", "CheckpointMonitor",
                                  "ObsMonitor", "SummaryMonitor", "ProfileMonitor", "EvalCallBack"};

std::string list_names(const char* const* b, const char* const* e) {
  std::string r;
  for (auto p = b; p != e; ++p) r += (r.empty() ? "" : ", ") + std::string(*p);
  return r;
}

void read_parallel(const YAML::Node& r, Config& c) {
  auto& p = c.parallel;
  p.data_parallel = get<int64_t>(r, "parallel_config.data_parallel");
  p.model_parallel = get<int64_t>(r, "parallel_config.model_parallel");
  p.pipeline_stage = get<int64_t>(r, "parallel_config.pipeline_stage");
  p.expert_parallel = get<int64_t>(r, "parallel_config.expert_parallel");
  p.use_seq_parallel = get<bool>(r, "parallel_config.use_seq_parallel");
  p.micro_batch_num = get<int64_t>(r, "parallel_config.micro_batch_num");
  p.vocab_emb_dp = get<bool>(r, "parallel_config.vocab_emb_dp");
  p.gradient_aggregation_group = get<int64_t>(r, "parallel_config.gradient_aggregation_group");
  p.optimizer_shard = get<bool>(r, "parallel_config.optimizer_shard") ||
                      get<bool>(r, "parallel.enable_parallel_optimizer");
}

void read_model(YAML::Node r, Config& c, std::vector<std::string>& errors) {
  ModelConfig& m = c.model;
  const std::string k = "model.model_config.";
  m.type = get<std::string>(r, k + "type");
  m.arch = get<std::string>(r, "model.arch.type");
  m.vocab_size = get<int64_t>(r, k + "vocab_size");
  m.seq_length = get<int64_t>(r, k + "seq_length");
  m.max_position_embeddings = get<int64_t>(r, k + "max_position_embeddings");
  m.hidden_size = get<int64_t>(r, k + "hidden_size");
  m.num_layers = get<int64_t>(r, k + "num_layers");
  m.num_heads = get<int64_t>(r, k + "num_heads");
  m.expand_ratio = get<int64_t>(r, k + "expand_ratio");
  m.hidden_act = get<std::string>(r, k + "hidden_act");
  m.hidden_dropout_rate = get<float>(r, k + "hidden_dropout_rate");
  m.attention_dropout_rate = get<float>(r, k + "attention_dropout_rate");
  m.initializer_range = get<float>(r, k + "initializer_range");
  m.layernorm_epsilon = get<float>(r, k + "layernorm_epsilon");
  m.compute_dtype = get<std::string>(r, k + "compute_dtype");
  m.param_init_type = get<std::string>(r, k + "param_init_type");
  m.layernorm_compute_type = get<std::string>(r, k + "layernorm_compute_type");
  m.softmax_compute_type = get<std::string>(r, k + "softmax_compute_type");
  m.eos_token_id = get<int64_t>(r, k + "eos_token_id");
  const YAML::Node flash = find(r, k + "use_flash_attention");
  if (flash.IsScalar() && flash.Scalar() == "auto") {
    m.use_flash_attention = m.seq_length >= kFlashAttentionAutoMinSeq;
    r["model"]["model_config"]["use_flash_attention"] = m.use_flash_attention;  // the resolved config says which
  } else if (!YAML::convert<bool>::decode(flash, m.use_flash_attention)) {
    errors.push_back("`" + k + "use_flash_attention: " + (flash.IsScalar() ? flash.Scalar() : std::string("...")) +
                     "`: expects True, False or auto");
  }
  try {
    find_model(m.arch, m.type);
  } catch (const std::exception& e) {
    errors.push_back(e.what());
  }
  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0) errors.push_back("`" + k + key + ": " + std::to_string(v) + "`: must be > 0");
  };
  positive("vocab_size", m.vocab_size);
  positive("seq_length", m.seq_length);
  positive("hidden_size", m.hidden_size);
  positive("num_layers", m.num_layers);
  positive("num_heads", m.num_heads);
  positive("expand_ratio", m.expand_ratio);
  if (m.hidden_size > 0 && m.num_heads > 0 && m.hidden_size % m.num_heads != 0)
    errors.push_back("`" + k + "hidden_size: " + std::to_string(m.hidden_size) + "` is not divisible by `num_heads: " +
                     std::to_string(m.num_heads) + "`; pick num_heads dividing hidden_size");
  if (m.max_position_embeddings < 0) {
    m.max_position_embeddings = m.seq_length;  // MindFormers' GPT-2 sizes its position table by seq_length
    r["model"]["model_config"]["max_position_embeddings"] = m.seq_length;
  } else if (m.seq_length > m.max_position_embeddings) {
    errors.push_back("`" + k + "seq_length: " + std::to_string(m.seq_length) +
                     "` is larger than the position table `max_position_embeddings: " +
                     std::to_string(m.max_position_embeddings) + "`; lower seq_length or raise max_position_embeddings");
  }
  const std::pair<const char*, float> rates[] = {{"hidden_dropout_rate", m.hidden_dropout_rate},
                                                {"attention_dropout_rate", m.attention_dropout_rate}};
  for (auto [key, v] : rates)
    if (!(v >= 0.0f && v < 1.0f)) errors.push_back("`" + k + key + ": " + std::to_string(v) + "`: must be in [0, 1)");
  try {
    ops::parse_activation(m.hidden_act);
  } catch (const std::exception& e) {
    errors.push_back("`" + k + "hidden_act`: " + e.what());
  }
  for (const char* key : {"compute_dtype", "param_init_type", "layernorm_compute_type", "softmax_compute_type"}) {
    const std::string v = get<std::string>(r, k + key);
    if (v != "float32" && v != "float16" && v != "bfloat16")
      errors.push_back("`" + k + key + ": " + v + "`: expects float32, float16 or bfloat16");
    else if (v != "float32" && std::string(key) == "param_init_type")
      c.warnings.push_back("`" + k + key + ": " + v + "`: master weights, their gradients and the optimizer state are "
                           "kept in float32; compute_dtype sets the precision of the matrix products");
    else if (v != "float32" && std::string(key) != "compute_dtype")
      c.warnings.push_back("`" + k + key + ": " + v + "`: " +
                           (std::string(key) == "layernorm_compute_type" ? "LayerNorm" : "softmax (attention and cross-entropy)") +
                           " is computed in float32 (more precise than asked); its output is rounded to compute_dtype "
                           "where it enters a matrix product");
  }
}

void read_scale_sense(const YAML::Node& r, Config& c, std::vector<std::string>& errors) {
  const YAML::Node s = find(r, "runner_wrapper.scale_sense");
  if (s.IsScalar()) {
    c.loss_scale.value = s.as<double>();
    return;
  }
  const std::string type = s["type"] ? s["type"].as<std::string>() : "";
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    if (key != "type" && key != "loss_scale_value" && key != "scale_factor" && key != "scale_window")
      errors.push_back("`runner_wrapper.scale_sense." + key + "`: unknown key; known: type, loss_scale_value, scale_factor, scale_window");
  }
  if (type == "DynamicLossScaleUpdateCell") c.loss_scale.dynamic = true;
  else if (type != "FixedLossScaleUpdateCell")
    errors.push_back("`runner_wrapper.scale_sense.type: " + type + "`: registered: DynamicLossScaleUpdateCell, FixedLossScaleUpdateCell");
  if (s["loss_scale_value"]) c.loss_scale.value = s["loss_scale_value"].as<double>();
  if (s["scale_factor"]) c.loss_scale.factor = s["scale_factor"].as<double>();
  if (s["scale_window"]) c.loss_scale.window = s["scale_window"].as<int64_t>();
}

DatasetConfig read_dataset(const YAML::Node& r, const std::string& k) {
  DatasetConfig d;
  d.loader_type = get<std::string>(r, k + ".data_loader.type");
  d.split = get<std::string>(r, k + ".data_loader.split");
  d.shuffle = get<bool>(r, k + ".data_loader.shuffle");
  d.seed = get<uint64_t>(r, k + ".data_loader.seed");
  d.num_samples = get<int64_t>(r, k + ".data_loader.num_samples");
  const YAML::Node p = find(r, k + ".data_loader.data_path");
  if (p.IsScalar()) {
    d.data_path.push_back({1.0, p.as<std::string>()});
  } else if (p.IsSequence()) {
    if (p.size() == 1) d.data_path.push_back({1.0, p[0].as<std::string>()});
    else
      for (size_t i = 0; i + 1 < p.size(); i += 2) d.data_path.push_back({p[i].as<double>(), p[i + 1].as<std::string>()});
  }
  const YAML::Node it = find(r, k + ".eval_iters");
  if (it.IsDefined()) d.eval_iters = it.as<int64_t>();
  return d;
}

void read_callbacks(const YAML::Node& r, Config& c, std::vector<std::string>& errors) {
  const YAML::Node cbs = find(r, "callbacks");
  for (size_t i = 0; i < cbs.size(); ++i) {
    const YAML::Node cb = cbs[i];
    const std::string type = cb["type"] ? cb["type"].as<std::string>() : "";
    if (std::find(std::begin(kCallbacks), std::end(kCallbacks), type) == std::end(kCallbacks)) {
      errors.push_back("`callbacks." + std::to_string(i) + ".type: " + type + "`: unknown type; registered: " +
                       list_names(std::begin(kCallbacks), std::end(kCallbacks)));
      continue;
    }
    if (type == "MFLossMonitor" && cb["per_print_times"]) c.per_print_times = cb["per_print_times"].as<int64_t>();
    if (type == "CheckpointMointor" || type == "CheckpointMonitor") {
      c.checkpoint.enabled = true;
      if (cb["prefix"]) c.checkpoint.prefix = cb["prefix"].as<std::string>();
      if (cb["save_checkpoint_steps"]) c.checkpoint.save_steps = cb["save_checkpoint_steps"].as<int64_t>();
      if (cb["keep_checkpoint_max"]) c.checkpoint.keep_max = cb["keep_checkpoint_max"].as<int64_t>();
      if (cb["directory"]) c.checkpoint.directory = cb["directory"].as<std::string>();
    }
  }
  if (c.per_print_times <= 0) errors.push_back("`callbacks.*.per_print_times`: must be > 0");
}

void read_training(const YAML::Node& r, Config& c, std::vector<std::string>& errors) {
  c.seed = get<int64_t>(r, "seed");
  c.run_mode = get<std::string>(r, "run_mode");
  c.output_dir = get<std::string>(r, "output_dir");
  c.load_checkpoint = get<std::string>(r, "load_checkpoint");
  c.resume_training = get<bool>(r, "resume_training");
  c.epochs = get<int64_t>(r, "runner_config.epochs");
  c.batch_size = get<int64_t>(r, "runner_config.batch_size");
  c.sink_size = get<int64_t>(r, "runner_config.sink_size");
  c.train_steps = get<int64_t>(r, "runner_config.train_steps");
  c.peak_tflops = get<double>(r, "runner_config.peak_tflops");
  c.use_clip_grad = get<bool>(r, "runner_wrapper.use_clip_grad");
  c.max_grad_norm = get<double>(r, "runner_wrapper.max_grad_norm");
  c.expert_num = get<int64_t>(r, "moe_config.expert_num");
  c.recompute = get<bool>(r, "recompute_config.recompute");
  c.select_recompute = get<bool>(r, "recompute_config.select_recompute");
  c.recompute_num_layers = get<int64_t>(r, "recompute_config.recompute_num_layers");
  c.do_eval = get<bool>(r, "do_eval");
  c.eval_step_interval = get<int64_t>(r, "eval_step_interval");
  if (c.run_mode != "train" && c.run_mode != "finetune" && c.run_mode != "eval" && c.run_mode != "predict")
    errors.push_back("`run_mode: " + c.run_mode + "`: expects train, finetune, eval or predict");
  if (c.batch_size <= 0) errors.push_back("`runner_config.batch_size: " + std::to_string(c.batch_size) + "`: must be > 0");
  if (c.epochs <= 0) errors.push_back("`runner_config.epochs: " + std::to_string(c.epochs) + "`: must be > 0");
  if (c.sink_size <= 0) errors.push_back("`runner_config.sink_size`: must be > 0");
  if (c.train_steps == 0 || c.train_steps < -1)
    errors.push_back("`runner_config.train_steps: " + std::to_string(c.train_steps) + "`: must be > 0, or -1 for epochs x dataset size");
  if (c.max_grad_norm <= 0) errors.push_back("`runner_wrapper.max_grad_norm`: must be > 0");
  if (c.peak_tflops < 0) errors.push_back("`runner_config.peak_tflops`: must be >= 0 (0: the machine probe's measured peak)");
  read_scale_sense(r, c, errors);
}

void read_optimizer(const YAML::Node& r, Config& c, std::vector<std::string>& errors) {
  c.optimizer_type = get<std::string>(r, "optimizer.type");
  if (std::find(std::begin(kOptimizers), std::end(kOptimizers), c.optimizer_type) == std::end(kOptimizers))
    errors.push_back("`optimizer.type: " + c.optimizer_type + "`: unknown type; registered: " +
                     list_names(std::begin(kOptimizers), std::end(kOptimizers)));
  c.adamw.beta1 = get<double>(r, "optimizer.beta1");
  c.adamw.beta2 = get<double>(r, "optimizer.beta2");
  c.adamw.eps = get<double>(r, "optimizer.eps");
  c.adamw.weight_decay = get<double>(r, "optimizer.weight_decay");
  c.lr.type = get<std::string>(r, "lr_schedule.type");
  c.lr.learning_rate = get<double>(r, "lr_schedule.learning_rate");
  c.lr.lr_end = get<double>(r, "lr_schedule.lr_end");
  c.lr.warmup_steps = get<int64_t>(r, "lr_schedule.warmup_steps");
  c.lr.warmup_ratio = get<double>(r, "lr_schedule.warmup_ratio");
  c.lr.total_steps = get<int64_t>(r, "lr_schedule.total_steps");
  c.lr.power = get<double>(r, "lr_schedule.power");
  try {
    check_lr_schedule_type(c.lr.type);
  } catch (const std::exception& e) {
    errors.push_back(e.what());
  }
  if (c.lr.learning_rate < 0) errors.push_back("`lr_schedule.learning_rate`: must be >= 0");
  if (c.lr.warmup_steps < 0) errors.push_back("`lr_schedule.warmup_steps`: must be >= 0");
}

// Keys whose feature is not built yet: accepted, with a warning saying what happens instead, so
// that a MindFormers file still runs and nobody is misled.
void warn_not_built(Config& c) {
  auto w = [&](const std::string& msg) { c.warnings.push_back(msg); };
  if (c.checkpoint.enabled)
    w("callbacks: CheckpointMointor/CheckpointMonitor: checkpoint saving is not built yet; no checkpoints are written");
  if (c.resume_training) w("`resume_training: True`: resuming is not built yet; training starts from step 1");
  if (c.expert_num > 1) w("`moe_config.expert_num: " + std::to_string(c.expert_num) + "`: Mixture-of-Experts layers are not built yet; the model is dense");
}

// float16 compute without a loss scale is valid but loses small gradients: said once.
void warn_unscaled_float16(Config& c) {
  if (c.model.compute_dtype == "float16" && !c.loss_scale.dynamic && c.loss_scale.value == 1.0)
    c.warnings.push_back(
        "`model.model_config.compute_dtype: float16` without a loss scale: gradients below 2^-24 flush to zero in "
        "float16; set runner_wrapper.scale_sense (e.g. {type: DynamicLossScaleUpdateCell, loss_scale_value: 65536, "
        "scale_factor: 2, scale_window: 1000})");
}

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  try {
    YAML::Node n = YAML::Load(text);
    if (n.IsNull()) return YAML::Node(YAML::NodeType::Map);
    if (!n.IsMap()) throw ConfigError(source + ": the top level must be a mapping of keys");
    return n;
  } catch (const YAML::ParserException& e) {
    throw ConfigError(source + ": YAML syntax error at line " + std::to_string(e.mark.line + 1) + ", column " +
                      std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

std::string join_errors(const std::string& source, const std::vector<std::string>& errors) {
  std::string msg = source + ": " + std::to_string(errors.size()) + " problem(s) in the config:";
  for (const auto& e : errors) msg += "\n  " + e;
  return msg;
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

Config load_config_string(const std::string& yaml, const std::vector<std::string>& overrides,
                          const std::string& source) {
  const YAML::Node user = parse_yaml(yaml, source);
  const YAML::Node schema = YAML::Load(kConfigDefaults);
  const YAML::Node templates = YAML::Load(kItemTemplates);
  // Overrides apply to the file laid over the defaults, so they can reach keys (and list items)
  // the file does not mention; the schema check then covers the file and the overrides alike.
  Config c;
  c.resolved = config_tree::overlay(schema, user);
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0) throw ConfigError("--set " + o + ": expects key.path=value");
    config_tree::set_path(c.resolved, o.substr(0, eq), o.substr(eq + 1));
  }
  std::vector<std::string> errors;
  config_tree::check(c.resolved, schema, templates, "", errors);
  if (!errors.empty()) throw ConfigError(join_errors(source, errors));
  // Only keys that differ from their defaults warn, so the resolved tree gives the same warnings
  // as the file plus the overrides.
  config_tree::cpu_warnings(c.resolved, schema, templates, "", c.warnings);
  const YAML::Node& r = c.resolved;
  read_training(r, c, errors);
  read_parallel(r, c);
  read_model(c.resolved, c, errors);
  c.model.use_seq_parallel = c.parallel.use_seq_parallel;
  c.model.vocab_emb_dp = c.parallel.vocab_emb_dp;
  c.model.recompute = c.recompute;
  c.model.select_recompute = c.select_recompute;
  c.model.recompute_num_layers = c.recompute_num_layers;
  read_optimizer(r, c, errors);
  read_callbacks(r, c, errors);
  try {
    c.train_data = read_dataset(r, "train_dataset");
    c.eval_data = read_dataset(r, "eval_dataset");
  } catch (const YAML::Exception& e) {
    errors.push_back("`train_dataset.data_loader.data_path`: expects a prefix or a list [weight, prefix, ...]: " + e.msg);
  }
  if (!errors.empty()) throw ConfigError(join_errors(source, errors));
  warn_not_built(c);
  warn_unscaled_float16(c);
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open the config file");
  std::stringstream ss;
  ss << in.rdbuf();
  return load_config_string(ss.str(), overrides, path);
}

std::string dump_resolved(const Config& cfg) {
  YAML::Emitter out;
  out << cfg.resolved;
  return std::string(out.c_str()) + "\n";
}

}  // namespace gf
