// Reading the resolved config tree into Settings (internal to config.cpp). Every read goes through
// KeyReader, which records the key path: the config tests compare what was read with the
// dispositions of runner/config/keys.cpp.
#pragma once
#include <yaml-cpp/yaml.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runner/config/config.h"
#include "runner/config/tree.h"

namespace gf::config_read {

// `key: value`, as a message quotes a setting.
inline std::string kv(const std::string& key, const std::string& value) { return "`" + key + ": " + value + "`"; }

class KeyReader {
 public:
  KeyReader(YAML::Node root, std::set<std::string>& consumed) : root_(root), consumed_(consumed) {}
  YAML::Node node(const std::string& path) {
    consumed_.insert(path);
    return config_tree::find(root_, path);
  }
  template <typename T>
  T get(const std::string& path) {
    return node(path).as<T>();
  }
  YAML::Node root() const { return root_; }  // the resolved tree, to write resolved values back

 private:
  YAML::Node root_;
  std::set<std::string>& consumed_;
};

struct ReadContext {
  KeyReader rd;
  Config& c;
  std::vector<std::string>& errors;
  const YAML::Node& user;  // the file as written (before defaults and overrides)
  bool lr_schedule_given;  // the file or an override writes lr_schedule
  const YAML::Node& schema;

  void warn(std::string msg) { c.warnings.push_back(std::move(msg)); }
  void refuse(std::string msg) { errors.push_back(std::move(msg)); }
};

void read_training(ReadContext& x);
void read_parallel(ReadContext& x);
void read_optimizer(ReadContext& x);
void read_callbacks(ReadContext& x);
// TensorBoard (runner/config/read_tensorboard.cpp): the SummaryMonitor callback's keys; one SummaryMonitor
// item (`at`: callbacks.N), from read_callbacks; then, after read_callbacks, the top-level
// tensorboard_dir and MindFormers' tensorboard section, and which directory is used.
const std::vector<std::string>& summary_monitor_keys();
void read_summary_monitor(ReadContext& x, const std::string& at);
void read_tensorboard(ReadContext& x);
void read_datasets(ReadContext& x);
void read_model(ReadContext& x);
// False when a size of the model exceeds the bound read_model refuses it by (what reads on must not loop over it).
bool model_sizes_within_bounds(const ModelConfig& m);  // the model section, by its type's reader (runner/config/arch_section.h)
void read_weights(ReadContext& x);  // load_checkpoint and model_config.checkpoint_name_or_path; after read_training
void read_moe(ReadContext& x);
// model_config.pet_config into model.lora (runner/config/read_lora.cpp); after read_model and read_moe.
void read_lora(ReadContext& x);
void read_generation(ReadContext& x);  // model_config's decoding keys, processor.tokenizer (runner/config/read_generation.cpp)      // moe_config into model.moe (runner/config/read_moe.cpp)
// The pipeline keys into ParallelConfig: scheduler, model chunks, offset and the layers of each stage
// (runner/config/read_pipeline.cpp); after read_parallel and read_model.
void read_pipeline(ReadContext& x);

// The parts of reading a model section that every model type shares (runner/config/read_model.cpp), and
// LlamaConfig's model section (runner/config/arch/llama.cpp; GPT2Config's is arch/gpt2.cpp's own).
void read_llama_model(ReadContext& x);
// compute_dtype, param_init_type, layernorm_compute_type (of the model's `norm`, e.g. LayerNorm),
// softmax_compute_type under `k` (model.model_config.).
void read_dtypes(ReadContext& x, const std::string& k, const std::string& norm);
// use_flash_attention: True, False, or auto (then `fused_when_auto`, written back to the dump).
void read_flash_attention(ReadContext& x, bool fused_when_auto);
// model_config.sliding_window (Hugging Face's), pre_tokens / next_tokens (Ascend's) into model.sliding_window.
void read_attention_window(ReadContext& x);
// Copies the parallel layout and recompute settings into the model; warns about float16 without a loss scale.
void finish_model(ReadContext& x);

}  // namespace gf::config_read
