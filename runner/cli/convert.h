// `gridformer convert`: weights between our checkpoints (core/io/checkpoint.h), Hugging Face
// safetensors (a directory with model.safetensors, or shards model-0000k-of-0000N.safetensors with
// model.safetensors.index.json, as transformers' save_pretrained writes them) and one full
// .safetensors file.
//
//   our checkpoint  -> Hugging Face: the weights only (optimizer.* tensors skipped), each tensor
//                      assembled whole from the saved boxes of every rank, under the name
//                      Hugging Face's model class gives it (GPT-2: `transformer.` prefixed), and
//                      the model's config.json (models/weights/hf_config.h) when its class can say it.
//   Hugging Face    -> our checkpoint: one shard (rank 0) holding each tensor as one whole box,
//                      state {"step": 0, "converted_from": path, "weights_only": true, and
//                      "hf_config": the config.json beside the weights, if any} (the
//                      trainer loads it as weights and refuses to resume from it); names without
//                      `transformer.`, the buffers the loader ignores and a tied lm_head dropped.
//   Hugging Face    -> Hugging Face / one file: the same tensors, resharded or merged, in another
//                      dtype if asked; a directory gets the source's config.json.
//
// Checkpoints hold float32. Hugging Face output is float32 unless --dtype says bfloat16 or float16,
// rounded to nearest even as the model's mixed precision rounds (core/math/gemm_bf16.h's float_to_bf16,
// _Float16's conversion as in core/math/mixed_precision.h); F16/BF16/F64 inputs are read as float.
// float32 -> float32 and f16/bf16 -> float32 -> the same f16/bf16 are exact, so a round trip in
// either is bit for bit; float32 through bf16 or f16 is not (the rounding is kept).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <map>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace gf {

struct ConvertOptions {
  std::string from, to;
  std::string format;          // "hf", "checkpoint", "megatron", or "" (the other kind than --from's)
  int64_t megatron_tp = 1, megatron_pp = 1;  // --format megatron: the shards' tensor- and pipeline-parallel sizes
  int64_t megatron_ep = 1;                    // and expert-parallel size (Megatron-core's layout)
  bool megatron_core = false;                 // --use-mcore-models (GPT-2 in core's layout too)
  std::string transformer_impl = "transformer_engine";  // --transformer-impl: core's norm names (or "local")
  bool moe_grouped_gemm = false;              // --moe-grouped-gemm: GroupedMLP's weight1 / weight2
  std::string max_shard_size;  // Hugging Face directory output; "" is save_pretrained's default, 5GB
  std::string dtype = "float32";  // of Hugging Face output: float32, bfloat16, float16
  bool overwrite = false;      // write into a non-empty --to (see convert_weights)
  bool dtype_given = false;    // --dtype was given (else a merge keeps the base's dtype)
  // LoRA (runner/cli/convert_lora.cpp): --merge-lora writes the base with the adapters merged; --base names the base
  // (default: the one the LoRA checkpoint or adapter_config.json names).
  bool merge_lora = false;
  std::string base;
};

struct ConvertSummary {
  std::string source, target;      // what was read and written, for the summary line
  int64_t tensors = 0;             // written
  int64_t bytes = 0;               // of tensor data written
  std::vector<std::string> files;  // written, in order (an index last)
  // The source's tensors not written, by reason (optimizer state, buffers, a tied head).
  std::map<std::string, std::vector<std::string>> skipped;
};

// Converts opt.from to opt.to, printing a line on `progress` at each tenth of the bytes read.
// Refuses (std::runtime_error naming the path, file or tensor and what to do) a --from that is
// missing or neither kind, a damaged checkpoint (the Reader's checks: missing or truncated shards,
// CRC-32C), a non-float Hugging Face tensor, --to equal to --from, and a --to that already exists
// (a non-empty directory, or the file) unless opt.overwrite: then a Hugging Face directory keeps
// its other files (the tokenizer; config.json is rewritten when the source gives one) and loses the model*.safetensors and index that
// this conversion does not write (a stale model.safetensors beside new shards would be read in
// their place), and a checkpoint directory gets its `converted` checkpoint replaced and `latest`
// pointed at it. On failure the files written so far are removed.
ConvertSummary convert_weights(const ConvertOptions& opt, std::ostream& progress);

// `gridformer convert`'s options (runner/cli/convert_cli.cpp).
CLI::App* add_convert_command(CLI::App& app, ConvertOptions& o);

class ConvertSource;
struct ModelConfig;
// --format megatron (runner/cli/convert_megatron.cpp): the source's weights, of the model `model`, in Megatron-LM's
// layout under opt.to (models/weights/megatron_save.h), `release/` split opt.megatron_tp x opt.megatron_pp ways in
// --dtype.
void write_megatron_target(ConvertSource& src, const ModelConfig& model, const ConvertOptions& opt, ConvertSummary& sum);

// LoRA adapters as convert reads them (runner/cli/convert_lora.cpp): from one of our LoRA checkpoints or a PEFT
// adapter directory, by our names (<module>.lora_A.weight [r, in], <module>.lora_B.weight [out, r]).
struct LoraAdapters {
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> data;
  };
  std::map<std::string, Tensor> adapters;
  // PEFT's modules_to_save: whole weights trained beside the adapters (lm_head.weight, model.embed_tokens.weight),
  // which replace the base's in a merge; saved_list_ is the config's list (null: none).
  std::map<std::string, Tensor> saved;
  nlohmann::json saved_list_;
  double scale = 0;            // alpha / r (alpha / sqrt(r) with rsLoRA)
  bool fan_in_fan_out = false; // the base stores [in, out] (GPT-2's Conv1D)
  std::string base;            // the base model it names ("" when it names none)
  int64_t rank_ = 0;           // our checkpoint's rank, alpha and rsLoRA (for PEFT's adapter_config.json)
  double alpha_ = 0;
  bool rslora_ = false;
  nlohmann::json targets_;     // the run's target_modules under PEFT's names (null: name the modules adapted)
  mutable int64_t merged = 0;  // weights merge_into changed
  mutable int64_t replaced = 0;  // saved weights merge_into wrote instead of the base's
  // False when `from` is neither; throws for a damaged or unreadable one.
  bool load(const std::string& from);
  void merge_into(const std::string& weight, const std::vector<int64_t>& shape, std::vector<float>& w) const;
};
void write_peft_adapter(const LoraAdapters& l, const std::string& dir, bool overwrite, ConvertSummary& sum);

// The subcommand: convert_weights with progress on stderr and the summary on stdout; returns the
// exit status (0 done; 2 nothing converted, the message printed as `error: ...`).
int run_convert(const ConvertOptions& opt);

// "5GB", "500MB", "2GiB", "100KB", "4096": bytes, with huggingface_hub's decimal units
// (KB 1e3 ... TB 1e12) and binary ones (KiB 2^10 ... TiB 2^40). Throws naming the text.
int64_t parse_byte_size(const std::string& text, const std::string& option = "--max-shard-size");

}  // namespace gf
