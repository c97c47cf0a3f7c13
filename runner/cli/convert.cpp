// `gridformer convert` (runner/cli/convert.h). The Hugging Face side follows what transformers and
// huggingface_hub write and read:
//  * shards: huggingface_hub src/huggingface_hub/serialization/_base.py,
//    split_state_dict_into_shards_factory: tensors in order, a new shard when the next tensor would
//    tip the current one over max_shard_size, a tensor larger than it alone in its own shard; files
//    "model.safetensors" or "model-{i:05d}-of-{n:05d}.safetensors"; the index
//    model.safetensors.index.json {"metadata": {"total_size": bytes}, "weight_map": {name: file}}
//    (transformers' save_pretrained dumps it with indent=2, sort_keys=True); parse_size_to_int's
//    decimal units ("5GB" = 5e9 bytes, the default);
//  * every file's metadata {"format": "pt"}: transformers' load_state_dict refuses a safetensors
//    file whose metadata names another format ("does not contain the valid metadata");
//  * GPT-2: transformers src/transformers/models/gpt2/modeling_gpt2.py, GPT2LMHeadModel holds
//    GPT2Model as `transformer` (base_model_prefix) and ties lm_head.weight to transformer.wte.weight
//    (_tied_weights_keys); save_pretrained drops the tied copy, and attn.bias is a non-persistent
//    buffer (older versions list attn.bias, attn.masked_bias and lm_head.weight in
//    _keys_to_ignore_on_load_missing), so GPT2LMHeadModel.from_pretrained reads a file with
//    `transformer.`-prefixed names, no head and no buffers: what we write. Llama and Mixtral names
//    are Hugging Face's already (models/arch/llama.h); a tied Llama has no lm_head.weight, as
//    save_pretrained writes it.
#include "runner/cli/convert.h"
#include "runner/cli/convert_source.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <stdexcept>
#include <yaml-cpp/yaml.h>

#include "core/io/checkpoint.h"
#include "core/math/gemm_bf16.h"
#include "core/io/safetensors.h"
#include "models/causal_lm.h"
#include "models/weights/hf_checkpoint.h"
#include "models/weights/hf_config.h"
#include "runner/config/config.h"
#include "runner/report/plan.h"

namespace gf {
namespace {

namespace fs = std::filesystem;

using namespace convert_detail;

// ---- output ----

enum class Target { kHfDir, kHfFile, kCheckpoint, kMegatron };

struct OutDtype {
  StDtype st;
  int64_t size;
  const char* name;
};

OutDtype parse_dtype(const std::string& s) {
  if (s == "float32") return {StDtype::kF32, 4, "float32"};
  if (s == "bfloat16") return {StDtype::kBF16, 2, "bfloat16"};
  if (s == "float16") return {StDtype::kF16, 2, "float16"};
  fail("--dtype " + s + ": expected float32, bfloat16 or float16");
}

// The name Hugging Face's model class gives one of our tensors (see the top of the file).
std::string hf_export_name(const std::string& name, bool gpt2) {
  return gpt2 && name != "lm_head.weight" ? "transformer." + name : name;
}

// A line at each tenth of the bytes read.
class Progress {
 public:
  Progress(std::ostream& out, int64_t total_bytes, size_t total_tensors)
      : out_(out), total_(std::max<int64_t>(total_bytes, 1)), tensors_(total_tensors) {}
  void add(int64_t bytes) {
    done_ += bytes;
    ++count_;
    const int tenth = static_cast<int>(std::min<int64_t>(10, done_ * 10 / total_));
    if (tenth > printed_) {
      printed_ = tenth;
      out_ << "convert: " << tenth * 10 << "% (" << count_ << " of " << tensors_ << " tensors, "
           << human_bytes(static_cast<double>(done_)) << " of " << human_bytes(static_cast<double>(total_)) << ")\n"
           << std::flush;
    }
  }
  void note(const std::string& text) { out_ << "convert: " << text << "\n" << std::flush; }

 private:
  std::ostream& out_;
  int64_t total_, done_ = 0;
  size_t tensors_, count_ = 0;
  int printed_ = 0;
};

// One tensor converted to the output dtype, owning its bytes.
struct Converted {
  std::vector<float> f32;
  std::vector<uint16_t> half;
  const void* data() const { return f32.empty() ? static_cast<const void*>(half.data()) : f32.data(); }
};

Converted convert_to(std::vector<float>&& v, const OutDtype& dt, const std::string& name) {
  Converted c;
  if (dt.st == StDtype::kF16)
    if (const int64_t i = first_float16_overflow(v.data(), v.size()); i >= 0)
      fail(float16_overflow_message(name, i, v[i]));
  if (dt.st == StDtype::kF32) {
    c.f32 = std::move(v);
    return c;
  }
  c.half.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    c.half[i] = dt.st == StDtype::kBF16 ? float_to_bf16(v[i]).bits : std::bit_cast<uint16_t>(static_cast<_Float16>(v[i]));
  return c;
}

// huggingface_hub's split (see the top of the file): the source's tensors, grouped into shards.
std::vector<std::vector<size_t>> plan_shards(const std::vector<int64_t>& bytes, int64_t max_shard) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  int64_t current_size = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] > max_shard) {
      shards.push_back({i});
      continue;
    }
    if (current_size + bytes[i] > max_shard && !current.empty()) {
      shards.push_back(std::move(current));
      current.clear();
      current_size = 0;
    }
    current.push_back(i);
    current_size += bytes[i];
  }
  if (!current.empty()) shards.push_back(std::move(current));
  return shards;
}

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

void write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) fail(tmp + ": cannot open for writing");
    out << text;
    out.flush();
    if (!out) fail(tmp + ": write failed (disk full?)");
  }
  fs::rename(tmp, path);
}

// Writes Hugging Face safetensors: one file at `file`, or into directory `dir` (model.safetensors,
// or shards and their index).
// The config.json that goes beside Hugging Face weights written from `src` (models/weights/hf_config.h):
// from one of our checkpoints, its model's (the model and moe_config sections of the config it was
// saved with), or the config.json its Hugging Face source had (a converted checkpoint keeps it); from
// Hugging Face weights, the config.json beside them. nullopt, with the reason in `why`, when the
// source does not say which model it is or the model has no Hugging Face counterpart.
std::optional<nlohmann::json> config_json_for(const ConvertSource& src, std::string& why) {
  const nlohmann::json* state = src.checkpoint_state();
  if (state == nullptr) {
    std::optional<nlohmann::json> j = read_hf_config_beside(src.path());
    if (!j) why = "the source has no config.json beside its weights";
    return j;
  }
  if (state->contains("hf_config")) return (*state)["hf_config"];
  if (!state->contains("config") || !(*state)["config"].is_string()) {
    why = "the checkpoint records no config (nor the config.json of the weights it was converted from)";
    return std::nullopt;
  }
  const YAML::Node saved = YAML::Load((*state)["config"].get<std::string>());
  YAML::Node model;
  for (const char* section : {"model", "moe_config"})
    if (saved[section]) model[section] = saved[section];
  try {
    return hf_config_json(load_config_string(YAML::Dump(model), {}, src.path() + "'s config").model);
  } catch (const std::invalid_argument& e) {
    why = e.what();
  } catch (const std::exception& e) {
    why = std::string("its config does not read back: ") + e.what();
  }
  return std::nullopt;
}

// The tokenizer beside Hugging Face weights written into `dir`, so that AutoTokenizer.from_pretrained(dir) reads it:
// from one of our checkpoints, the GPT-2 BPE files its config's processor.tokenizer names (vocab_file, merge_file;
// a relative path as the run saw it, from the working directory) as GPT2Tokenizer's vocab.json and merges.txt with
// its tokenizer_config.json and special_tokens_map.json (transformers' names; <|endoftext|> is GPT-2's bos, eos and
// unk); from Hugging Face weights, the tokenizer files beside them, copied. Returns the files written; a reason
// why none were in `why`.
std::vector<std::string> write_tokenizer_files(const ConvertSource& src, const std::string& dir, std::string& why) {
  std::vector<std::pair<fs::path, std::string>> copies;  // (from, to's file name)
  const nlohmann::json* state = src.checkpoint_state();
  nlohmann::json tokenizer_config;
  if (state == nullptr) {
    const fs::path p(src.path());
    const fs::path beside = fs::is_directory(p) ? p : p.parent_path();
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                          "tokenizer.model", "added_tokens.json"})
      if (fs::is_regular_file(beside / f)) copies.emplace_back(beside / f, f);
    if (copies.empty()) why = "none beside the source weights";
  } else if (state->contains("config") && (*state)["config"].is_string()) {
    const YAML::Node tok = YAML::Load((*state)["config"].get<std::string>())["processor"]["tokenizer"];
    const std::string vocab = tok && tok["vocab_file"] ? tok["vocab_file"].as<std::string>() : "";
    const std::string merges = tok && tok["merge_file"] ? tok["merge_file"].as<std::string>() : "";
    if (vocab.empty() || merges.empty())
      why = "the checkpoint's config names no processor.tokenizer vocab_file and merge_file";
    else if (!fs::is_regular_file(vocab) || !fs::is_regular_file(merges))
      why = "processor.tokenizer's " + (fs::is_regular_file(vocab) ? merges : vocab) + " is not there (from " +
            fs::current_path().string() + ")";
    else {
      copies = {{vocab, "vocab.json"}, {merges, "merges.txt"}};
      const std::string eot = "<|endoftext|>";
      tokenizer_config = {{"tokenizer_class", "GPT2Tokenizer"}, {"add_prefix_space", false}, {"bos_token", eot},
                          {"eos_token", eot}, {"unk_token", eot}};
    }
  } else {
    why = "the checkpoint records no config";
  }
  std::vector<std::string> written;
  for (const auto& [from, name] : copies) {
    const fs::path to = fs::path(dir) / name;
    fs::copy_file(from, to, fs::copy_options::overwrite_existing);
    written.push_back(to.string());
  }
  if (!tokenizer_config.is_null()) {
    const std::string eot = "<|endoftext|>";
    for (const auto& [name, j] : {std::pair{"tokenizer_config.json", tokenizer_config},
                                  std::pair{"special_tokens_map.json", nlohmann::json{{"bos_token", eot}, {"eos_token", eot},
                                                                                      {"unk_token", eot}}}}) {
      const std::string path = (fs::path(dir) / name).string();
      write_text_atomically(path, j.dump(2) + "\n");
      written.push_back(path);
    }
  }
  return written;
}

void write_hf(ConvertSource& src, const std::string& dir, const std::string& file, int64_t max_shard, const OutDtype& dt,
              bool overwrite, Progress& progress, ConvertSummary& sum) {
  bool gpt2 = false;
  for (const SourceTensor& t : src.tensors) gpt2 = gpt2 || t.name == "wte.weight";
  std::vector<int64_t> bytes;
  for (const SourceTensor& t : src.tensors) bytes.push_back(numel_of(t.shape) * dt.size);
  std::vector<std::vector<size_t>> groups;  // the output files' tensors
  if (file.empty()) {
    groups = plan_shards(bytes, max_shard);
  } else {
    groups.emplace_back();
    for (size_t i = 0; i < src.tensors.size(); ++i) groups[0].push_back(i);
  }
  std::vector<std::string> written;
  const bool created = !dir.empty() && !fs::exists(dir);
  try {
    if (!dir.empty()) fs::create_directories(dir);
    else if (fs::path(file).has_parent_path()) fs::create_directories(fs::path(file).parent_path());
    nlohmann::json weight_map = nlohmann::json::object();
    int64_t total = 0;
    std::vector<float> buf;
    for (size_t s = 0; s < groups.size(); ++s) {
      const std::string base = groups.size() == 1 ? "model.safetensors" : shard_name(s, groups.size());
      const std::string path = file.empty() ? (fs::path(dir) / base).string() : file;
      std::vector<Converted> data;
      data.reserve(groups[s].size());
      std::vector<StWriteTensor> out;
      for (size_t i : groups[s]) {
        const SourceTensor& t = src.tensors[i];
        src.read(t, buf);
        progress.add(static_cast<int64_t>(buf.size() * sizeof(float)));
        const std::string name = hf_export_name(t.name, gpt2);
        data.push_back(convert_to(std::move(buf), dt, name));
        buf = {};
        out.push_back({name, dt.st, t.shape, data.back().data()});
        weight_map[name] = base;
        total += bytes[i];
      }
      write_safetensors(path, out, {{"format", "pt"}});
      written.push_back(path);
      src.release();  // bounded memory: one output file's tensors (plus the source's shards) at a time
    }
    if (!dir.empty()) {  // transformers' from_pretrained reads the model's class and sizes from config.json
      std::string why;
      if (std::optional<nlohmann::json> config = config_json_for(src, why)) {
        (*config)["torch_dtype"] = dt.name;  // the weights' dtype, as save_pretrained records it
        const std::string path = (fs::path(dir) / "config.json").string();
        write_text_atomically(path, config->dump(2) + "\n");
        written.push_back(path);
        // generation_config.json as transformers writes it for a model whose generation settings come from
        // its config (save_pretrained: _from_model_config and the special token ids), so that generate()
        // finds the end-of-text id without a warning.
        nlohmann::json gen = {{"_from_model_config", true}};
        for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id"})
          if (config->contains(k) && !(*config)[k].is_null()) gen[k] = (*config)[k];
        const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
        write_text_atomically(gen_path, gen.dump(2) + "\n");
        written.push_back(gen_path);
      } else {
        progress.note("no config.json written: " + why + "; transformers' from_pretrained needs one beside the weights");
      }
      why.clear();
      const std::vector<std::string> tok = write_tokenizer_files(src, dir, why);
      written.insert(written.end(), tok.begin(), tok.end());
      if (tok.empty()) progress.note("no tokenizer files written: " + why);
    }
    if (groups.size() > 1) {
      const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
      const std::string path = (fs::path(dir) / "model.safetensors.index.json").string();
      write_text_atomically(path, index.dump(2) + "\n");  // nlohmann::json's objects are sorted by key
      written.push_back(path);
    }
    sum.bytes = total;
  } catch (...) {
    std::error_code ec;
    for (const std::string& w : written) fs::remove(w, ec);
    if (created) fs::remove(dir, ec);  // only if empty
    throw;
  }
  // A previous export's weights that this one does not replace would be read in its place (the
  // loader takes model.safetensors before an index) or beside it.
  if (!dir.empty() && overwrite) {
    static const std::regex kShard(R"(model-\d{5}-of-\d{5}\.safetensors)");
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      const bool weights = n == "model.safetensors" || n == "model.safetensors.index.json" || std::regex_match(n, kShard);
      if (weights && e.is_regular_file() && std::find(written.begin(), written.end(), e.path().string()) == written.end())
        fs::remove(e.path());
    }
  }
  sum.tensors = static_cast<int64_t>(src.tensors.size());
  sum.files = written;
}

// Writes one of our checkpoints: root `dir`, checkpoint `converted` (dir/converted/, dir/latest),
// one shard holding every tensor whole.
void write_checkpoint(ConvertSource& src, const std::string& dir, Progress& progress, ConvertSummary& sum) {
  const std::string name = "converted";
  ckpt::install_checkpoint_signal_handling();
  const std::string tmp = ckpt::begin_save(dir, name);
  try {
    std::vector<ckpt::Piece> pieces;
    pieces.reserve(src.tensors.size());
    int64_t total = 0;
    for (const SourceTensor& t : src.tensors) {
      ckpt::Piece p;
      p.tensor = t.name;
      p.shape = t.shape;
      p.box.offset.assign(t.shape.size(), 0);
      p.box.extent = t.shape;
      src.read(t, p.data);
      progress.add(static_cast<int64_t>(p.data.size() * sizeof(float)));
      total += static_cast<int64_t>(p.data.size() * sizeof(float));
      pieces.push_back(std::move(p));
    }
    const std::string fragment = ckpt::write_shard(tmp, 0, pieces);
    pieces.clear();
    // Weights with no training behind them: step 0 (write_index wants an integer step; pruning
    // orders checkpoints by it), and weights_only for the trainer, which loads such a checkpoint
    // as weights and refuses to resume training from it (there are no optimizer moments).
    nlohmann::json state = {{"step", 0},
                            {"converted_from", fs::absolute(src.path()).lexically_normal().string()},
                            {"weights_only", true}};
    // The source's config.json, so that an export of this checkpoint can write it back.
    if (const std::optional<nlohmann::json> hf = read_hf_config_beside(src.path())) state["hf_config"] = *hf;
    ckpt::write_index(tmp, {fragment}, state);
    ckpt::commit_save(dir, name, 0);
    sum.bytes = total;
  } catch (...) {
    ckpt::abort_save(dir, name);
    throw;
  }
  sum.tensors = static_cast<int64_t>(src.tensors.size());
  sum.files = {(fs::path(dir) / name / ckpt::shard_file(0)).string(), (fs::path(dir) / name / "index.json").string()};
}

std::string count_of(size_t n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

}  // namespace

int64_t parse_byte_size(const std::string& text, const std::string& option) {
  static const std::regex kSize(R"(\s*([0-9]+(?:\.[0-9]*)?)\s*([KMGT]i?B|B)?\s*)", std::regex::icase);
  std::smatch m;
  if (!std::regex_match(text, m, kSize))
    fail(option + " " + text + ": expected a size such as 5GB, 500MB, 2GiB or a number of bytes");
  std::string unit = m[2].str();
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  const bool binary = unit.size() == 3;
  const char* const prefixes = "KMGT";
  if (!unit.empty() && unit != "B")
    for (int k = 0; k < 4; ++k)
      if (unit[0] == prefixes[k]) mult = std::pow(binary ? 1024.0 : 1000.0, k + 1);
  const double v = std::stod(m[1].str()) * mult;
  if (v < 1 || v > 9.0e18) fail(option + " " + text + ": must be at least one byte");
  return static_cast<int64_t>(v);
}

ConvertSummary convert_weights(const ConvertOptions& opt, std::ostream& progress) {
  if (opt.from.empty()) fail("--from: give the checkpoint or Hugging Face weights to convert");
  if (opt.to.empty()) fail("--to: give where to write");
  if (!opt.format.empty() && opt.format != "hf" && opt.format != "checkpoint" && opt.format != "megatron")
    fail("--format " + opt.format + ": expected hf, checkpoint or megatron");
  if (opt.format != "megatron" && (opt.megatron_tp != 1 || opt.megatron_pp != 1 || opt.megatron_ep != 1))
    fail("--tensor-model-parallel-size, --pipeline-model-parallel-size and --expert-model-parallel-size split Megatron "
         "output: add --format megatron");
  if (opt.format != "megatron" && (opt.megatron_core || opt.moe_grouped_gemm || opt.transformer_impl != "transformer_engine"))
    fail("--use-mcore-models, --transformer-impl and --moe-grouped-gemm shape Megatron output: add --format megatron");
  const OutDtype dt = parse_dtype(opt.dtype);
  const bool to_file = opt.to.ends_with(".safetensors");
  if (to_file && (opt.format == "checkpoint" || opt.format == "megatron"))
    fail("--to " + opt.to + " is a .safetensors file; --format " + opt.format + " writes a directory");
  const int64_t max_shard = opt.max_shard_size.empty() ? 5000000000 : parse_byte_size(opt.max_shard_size);

  // LoRA adapters: exported as PEFT's directory, or (--merge-lora) merged into their base, which is then the source.
  LoraAdapters lora;
  const bool adapters = lora.load(opt.from);
  if (opt.merge_lora && !adapters)
    fail("--merge-lora: --from " + opt.from + " holds no LoRA adapters (one of our LoRA checkpoints, or a PEFT adapter "
         "directory with adapter_config.json and adapter_model.safetensors)");
  if (!opt.base.empty() && !opt.merge_lora) fail("--base names the base model of --merge-lora; add --merge-lora");
  if (adapters && !opt.merge_lora) {
    if (to_file || opt.format == "checkpoint" || opt.format == "megatron")
      fail("--from " + opt.from + " holds LoRA adapters: they are written as PEFT's adapter directory (--to DIR), or "
           "merged into their base with --merge-lora");
    if (!ConvertSource::is_ours(opt.from)) fail("--from " + opt.from + " is a PEFT adapter directory already; --merge-lora merges it");
    ConvertSummary sum;
    sum.source = "LoRA adapters " + opt.from;
    write_peft_adapter(lora, opt.to, opt.overwrite, sum);
    sum.target = "PEFT adapter " + opt.to + " (float32; base " + lora.base + ")";
    return sum;
  }
  const std::string from = opt.merge_lora ? (opt.base.empty() ? lora.base : opt.base) : opt.from;
  if (opt.merge_lora && from.empty())
    fail("--merge-lora: " + opt.from + " names no base model (adapter_config.json's base_model_name_or_path); give --base");
  ConvertSource src(from, progress);
  OutDtype out_dt = dt;
  if (opt.merge_lora) {
    // Every adapted module's weight must be in the base, in the adapter's shape (checked again as it is merged).
    std::set<std::string> have;
    for (const SourceTensor& t : src.tensors) have.insert(t.name);
    for (const auto& [name, t] : lora.adapters) {
      const size_t at = name.rfind(".lora_");
      if (at != std::string::npos && !have.count(name.substr(0, at) + ".weight"))
        fail("--merge-lora: the base " + from + " has no '" + name.substr(0, at) + ".weight' for the adapter '" + name +
             "': the adapters are of another model");
    }
    for (const auto& [name, t] : lora.saved)
      if (!have.count(name))
        fail("--merge-lora: the base " + from + " has no '" + name + "' for the trained copy (modules_to_save) of it: "
             "the adapters are of another model, or its head is tied to its embedding, and a merge that unties them "
             "is not built (generate, evaluate and serve with the adapters unmerged, or merge with PEFT)");
    src.after_read = [&lora](const SourceTensor& t, std::vector<float>& w) { lora.merge_into(t.name, t.shape, w); };
    const std::string& d = src.tensors.front().dtype;  // the base file's dtype, as PEFT's merge keeps W's
    if (!opt.dtype_given) out_dt = parse_dtype(d == "BF16" ? "bfloat16" : d == "F16" ? "float16" : "float32");
  }
  // By default the other kind than the source; a .safetensors --to is Hugging Face's.
  const std::string format =
      !opt.format.empty() ? opt.format : to_file || src.ours() || opt.merge_lora ? "hf" : "checkpoint";
  const Target target = format == "checkpoint" ? Target::kCheckpoint
                        : format == "megatron"  ? Target::kMegatron
                        : to_file               ? Target::kHfFile
                                                : Target::kHfDir;
  if (target == Target::kMegatron && opt.merge_lora)
    fail("--merge-lora with --format megatron: merge into Hugging Face weights first, then convert those");
  if (target == Target::kCheckpoint && dt.st != StDtype::kF32)
    fail("--dtype " + opt.dtype + ": our checkpoints hold float32; --dtype applies to Hugging Face output (--format hf)");
  if (target != Target::kHfDir && !opt.max_shard_size.empty())
    fail("--max-shard-size applies to a Hugging Face directory (--format hf, --to DIR); --to " + opt.to +
         (target == Target::kHfFile ? " is one full file" : " is a checkpoint"));

  // Where the output goes must not be where the input is, nor hold anything unless asked.
  const fs::path to_canon = fs::weakly_canonical(opt.to);
  for (const fs::path& p : src.locations(opt.from))
    if (p == to_canon) fail("--to " + opt.to + " is where --from's weights are (" + src.path() + "); write elsewhere");
  if (fs::exists(opt.to)) {
    if (target == Target::kHfFile) {
      if (fs::is_directory(opt.to)) fail("--to " + opt.to + " is a directory; name a .safetensors file");
      if (!opt.overwrite) fail("--to " + opt.to + " exists; give a new file name, or --overwrite to replace it");
    } else {
      if (!fs::is_directory(opt.to)) fail("--to " + opt.to + " is a file; give a directory");
      if (!fs::is_empty(opt.to) && !opt.overwrite)
        fail("--to " + opt.to + " is a directory that is not empty; give a new or empty one, or --overwrite " +
             (target == Target::kHfDir      ? "to replace the weights in it (config.json too when the source says which model it is; other files, such as the tokenizer's, are kept)"
              : target == Target::kMegatron ? "to replace its release/ iteration and latest_checkpointed_iteration.txt"
                                            : "to replace its `converted` checkpoint and point `latest` at it"));
    }
  }

  if (format == "megatron") {
    std::string why;
    const std::optional<nlohmann::json> config = config_json_for(src, why);
    if (!config) fail("--format megatron: the model must be known to write Megatron's args: " + why);
    ConvertSummary sum;
    sum.source = src.describe();
    write_megatron_target(src, model_config_from_hf(*config, src.path() + "'s config"), opt, sum);
    sum.skipped = src.skipped;
    return sum;
  }

  int64_t total = 0;
  for (const SourceTensor& t : src.tensors) total += numel_of(t.shape) * static_cast<int64_t>(sizeof(float));
  Progress bar(progress, total, src.tensors.size());
  ConvertSummary sum;
  sum.source = src.describe();
  if (target == Target::kCheckpoint) {
    write_checkpoint(src, opt.to, bar, sum);
    sum.target = "checkpoint " + (fs::path(opt.to) / "converted").string() + " (float32)";
  } else {
    write_hf(src, target == Target::kHfDir ? opt.to : "", target == Target::kHfFile ? opt.to : "", max_shard, out_dt,
             opt.overwrite, bar, sum);
    sum.target = std::string("Hugging Face ") + (target == Target::kHfFile ? "file " : "weights ") + opt.to + " (" +
                 out_dt.name + ")";
  }
  sum.skipped = src.skipped;
  if (opt.merge_lora) {
    const int64_t want = static_cast<int64_t>(lora.adapters.size() / 2);
    if (lora.merged != want) fail("--merge-lora: merged " + std::to_string(lora.merged) + " of " + std::to_string(want));
    if (lora.replaced != static_cast<int64_t>(lora.saved.size()))
      fail("--merge-lora: wrote " + std::to_string(lora.replaced) + " of " + std::to_string(lora.saved.size()) +
           " trained copies (modules_to_save)");
    sum.source = "base " + src.describe() + " with the LoRA adapters of " + opt.from + " merged (" +
                 std::to_string(want) + " weights" +
                 (lora.saved.empty() ? std::string() : ", " + std::to_string(lora.saved.size()) + " replaced by their trained copies") + ")";
  }
  return sum;
}

int run_convert(const ConvertOptions& opt) {
  try {
    const ConvertSummary s = convert_weights(opt, std::cerr);
    std::cout << "converted " << count_of(static_cast<size_t>(s.tensors), "tensor") << " ("
              << human_bytes(static_cast<double>(s.bytes)) << ") from " << s.source << " to " << s.target << ": "
              << count_of(s.files.size(), "file") << "\n";
    for (const std::string& f : s.files) std::cout << "  " << f << "\n";
    for (const auto& [reason, names] : s.skipped)
      std::cout << "skipped " << count_of(names.size(), "tensor") << ": " << reason << "\n";
    return 0;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory: the tensors of one output file (or, to a checkpoint, the whole model in "
                 "float32) must fit in memory; for Hugging Face output lower --max-shard-size\n";
  } catch (const fs::filesystem_error& e) {
    std::cerr << "error: " << e.path1().string() << ": " << e.code().message() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
  }
  return 2;
}

}  // namespace gf
