// Megatron-LM checkpoints: finding an iteration's shard files, checking the saved args against the
// configured model, and loading the parameters megatron_checkpoint_map.cpp assembles (see
// megatron_checkpoint.h).
#include "models/weights/megatron_checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "core/io/torch_file.h"
#include "models/causal_lm.h"
#include "models/registry.h"

namespace gf {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTracker = "latest_checkpointed_iteration.txt";
// model_optim_rng.pt, or model_rng.pt beside a distributed optimizer's files (285068c's get_checkpoint_names).
constexpr const char* kModelFiles[] = {"model_optim_rng.pt", "model_rng.pt"};

bool all_digits(std::string_view s) {
  for (char ch : s)
    if (!std::isdigit(static_cast<unsigned char>(ch))) return false;
  return !s.empty();
}

// iter_NNNNNNN (get_checkpoint_name's 'iter_{:07d}': 7 digits or more) or release.
bool is_iteration_name(const std::string& n) {
  return n == "release" || (n.size() >= 12 && n.rfind("iter_", 0) == 0 && all_digits(std::string_view(n).substr(5)));
}

// mp_rank_TT, then optionally _PPP and _EEE.
bool is_rank_name(const std::string& n) {
  if (n.rfind("mp_rank_", 0) != 0) return false;
  std::string_view rest = std::string_view(n).substr(8);
  if (rest.size() < 2 || !all_digits(rest.substr(0, 2))) return false;
  rest = rest.substr(2);
  for (int i = 0; i < 2 && !rest.empty(); ++i) {
    if (rest.size() < 4 || rest[0] != '_' || !all_digits(rest.substr(1, 3))) return false;
    rest = rest.substr(4);
  }
  return rest.empty();
}

fs::path normal(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  return p.filename().empty() ? p.parent_path() : p;
}

// The model file of an mp_rank_* directory ("" when it holds none).
std::string model_file_in(const fs::path& rank_dir) {
  std::error_code ec;
  for (const char* f : kModelFiles)
    if (fs::is_regular_file(rank_dir / f, ec)) return (rank_dir / f).string();
  return "";
}

// The iteration directory `path` names, and the iteration as the tracker file spells it.
fs::path iteration_dir(const std::string& path) {
  std::error_code ec;
  fs::path p = normal(path);
  if (fs::is_regular_file(p, ec)) p = p.parent_path();
  if (is_rank_name(p.filename().string())) return p.parent_path();
  if (is_iteration_name(p.filename().string())) return p;
  const fs::path tracker = p / kTracker;
  std::ifstream in(tracker);
  if (!in)
    throw std::runtime_error(path + ": not a Megatron checkpoint (no " + kTracker +
                             ", not an iter_NNNNNNN or release directory)");
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.pop_back();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.erase(s.begin());
  // read_metadata (megatron/checkpointing.py): int(metastring), else 'release'; the iteration > 0.
  if (s == "release") return p / "release";
  if (!all_digits(s) || s.size() > 12 || std::stoll(s) <= 0)
    throw std::runtime_error(tracker.string() + ": holds '" + s.substr(0, 40) +
                             "'; Megatron writes an iteration number > 0 "
                             "or `release` there (point load_checkpoint at an iter_NNNNNNN directory to choose one)");
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07lld", static_cast<long long>(std::stoll(s)));
  return p / name;
}

PickleOptions pickle_options() {
  PickleOptions o;
  o.enum_classes = megatron_enum_classes();
  return o;
}

// The saved args, with Megatron's defaults (arguments.py) for keys older versions did not write.
class Args {
 public:
  Args(const PickleValue& ns, std::string file) : ns_(ns), file_(std::move(file)) {}

  const PickleValue* get(const std::string& key) const {
    const PickleValue* v = ns_.find(key);
    return v && !v->is_none() ? v : nullptr;
  }
  int64_t integer(const std::string& key, int64_t def) const {
    return read(key, def, [](const PickleValue& v) { return v.as_int(); });
  }
  double real(const std::string& key, double def) const {
    return read(key, def, [](const PickleValue& v) { return v.as_float(); });
  }
  bool flag(const std::string& key, bool def) const {
    return read(key, def, [](const PickleValue& v) { return v.as_bool(); });
  }
  std::string text(const std::string& key, const std::string& def) const {
    return read(key, def, [](const PickleValue& v) {
      return v.kind() == PickleValue::Kind::kEnum ? v.enum_value().as_string() : v.as_string();
    });
  }

 private:
  template <class T, class F>
  T read(const std::string& key, T def, F f) const {
    const PickleValue* v = get(key);
    if (!v) return def;
    try {
      return static_cast<T>(f(*v));
    } catch (const std::exception& e) {
      throw std::runtime_error(file_ + ": args." + key + " holds a " + v->kind_name() + " (" + e.what() +
                               "): not an args Namespace Megatron's arguments.py makes");
    }
  }
  const PickleValue& ns_;
  std::string file_;
};

const PickleValue& checkpoint_args(const TorchFile& f) {
  const PickleValue& root = f.root();
  if (!root.is_dict())
    throw std::runtime_error(f.path() + ": holds a " + std::string(root.kind_name()) +
                             ", not the dict Megatron's save_checkpoint writes");
  const PickleValue* args = root.find("args");
  if (!args || args->kind() != PickleValue::Kind::kNamespace)
    throw std::runtime_error(f.path() +
                             ": has no 'args' Namespace (Megatron's save_checkpoint always stores one): the "
                             "parallel sizes and the model's shape are read from it");
  return *args;
}

std::string num(double v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}

int64_t padded(int64_t vocab, int64_t multiple) {
  multiple = std::max<int64_t>(1, multiple);
  return (vocab + multiple - 1) / multiple * multiple;
}

// The files of an iteration, and rank 0's file opened (for its args).
MegatronCheckpointFiles locate(const std::string& path, std::optional<TorchFile>* rank0) {
  MegatronCheckpointFiles out;
  const fs::path dir = iteration_dir(path);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw std::runtime_error(path + ": the checkpoint's iteration directory " + dir.string() + " is missing");
  out.dir = dir.string();
  const std::string name = dir.filename().string();
  out.iteration = name == "release" ? name : std::to_string(std::stoll(name.substr(5)));
  // find_checkpoint_rank_0: without pipeline parallelism mp_rank_00, else mp_rank_00_000 (and _000 for
  // expert parallelism).
  std::string first;
  for (const char* d : {"mp_rank_00", "mp_rank_00_000", "mp_rank_00_000_000"})
    if (first.empty()) first = model_file_in(dir / d);
  if (first.empty() && fs::exists(dir / "metadata.json", ec)) {
    // Megatron-core's distributed checkpointing (megatron/core/dist_checkpointing: metadata.json naming the sharded
    // backend, common.pt, the shards): --use-dist-ckpt, and --ckpt-format's default torch_dist from core_r0.9 on.
    std::ifstream f(dir / "metadata.json");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (text.size() > 4096) text.resize(4096);
    const std::string backend = text.find("zarr") != std::string::npos ? "zarr" : "torch_dist";
    throw std::runtime_error(out.dir + ": a Megatron distributed checkpoint (metadata.json: " + backend + ", written " +
                             "with --use-dist-ckpt or core_r0.9's default --ckpt-format torch_dist), not the torch " +
                             "format read here (mp_rank_*/model_optim_rng.pt). Megatron-LM converts it: run the job's " +
                             "pretrain_gpt.py with --load " + path + " --ckpt-convert-format torch --ckpt-convert-save " +
                             "OUT (core_r0.9 on), then --load OUT here");
  }
  if (first.empty())
    throw std::runtime_error(out.dir +
                             ": holds no mp_rank_00[_000][_000]/model_optim_rng.pt: not a Megatron iteration "
                             "directory, or an incomplete copy of one");
  rank0->emplace(TorchFile::open(first, pickle_options()));
  const Args a(checkpoint_args(**rank0), first);
  out.tp = a.integer("tensor_model_parallel_size", a.integer("model_parallel_size", 1));
  out.pp = a.integer("pipeline_model_parallel_size", 1);
  out.ep = a.integer("expert_model_parallel_size", 1);
  for (int64_t n : {out.tp, out.pp, out.ep})
    if (n < 1 || n > 4096) throw std::runtime_error(first + ": args give a model-parallel size of " + std::to_string(n));
  const std::string file = fs::path(first).filename().string();
  std::vector<std::string> missing;
  for (int64_t ep = 0; ep < out.ep; ++ep)
    for (int64_t pp = 0; pp < out.pp; ++pp)
      for (int64_t tp = 0; tp < out.tp; ++tp) {
        // get_checkpoint_name: mp_rank_{tp:02d}, _{pp:03d} when pipeline-parallel, _{ep:03d} when expert-parallel.
        char rank[48];
        int n = std::snprintf(rank, sizeof rank, "mp_rank_%02lld", static_cast<long long>(tp));
        if (out.pp > 1) n += std::snprintf(rank + n, sizeof rank - n, "_%03lld", static_cast<long long>(pp));
        if (out.ep > 1) std::snprintf(rank + n, sizeof rank - n, "_%03lld", static_cast<long long>(ep));
        const fs::path f = dir / rank / file;
        if (!fs::is_regular_file(f, ec)) missing.push_back(f.string());
        out.shards.push_back({f.string(), tp, pp, ep});
      }
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 8; ++i)
      list += (i ? ", " : "") + missing[i];
    if (missing.size() > 8) list += ", ...";
    throw std::runtime_error(out.dir + ": " + std::to_string(missing.size()) + " of the " +
                             std::to_string(out.shards.size()) + " shard files are missing: " + list + " (the args of " +
                             first + " say tensor_model_parallel_size " + std::to_string(out.tp) +
                             ", pipeline_model_parallel_size " + std::to_string(out.pp) + ", expert_model_parallel_size " +
                             std::to_string(out.ep) + "); copy the whole directory");
  }
  return out;
}

// A shard's model chunks: 'model', or 'model0' .. 'model<vp-1>' under a virtual pipeline.
std::vector<const PickleValue*> model_chunks(const TorchFile& f) {
  const PickleValue& root = f.root();
  if (const PickleValue* m = root.find("model")) return {m};
  std::vector<const PickleValue*> chunks;
  while (const PickleValue* m = root.find("model" + std::to_string(chunks.size())))
    chunks.push_back(m);
  if (chunks.empty()) throw std::runtime_error(f.path() + ": has no 'model' (nor 'model0', ...) state dict");
  for (const PickleValue* m : chunks)
    if (!m->is_dict())
      throw std::runtime_error(f.path() + ": its model state dict is a " + std::string(m->kind_name()) + ", not a dict");
  return chunks;
}

double checkpoint_version(const TorchFile& f) {
  const PickleValue* v = f.root().find("checkpoint_version");  // absent: 0 (load_checkpoint's default)
  if (!v) return 0.0;
  if (v->kind() != PickleValue::Kind::kFloat && v->kind() != PickleValue::Kind::kInt)
    throw std::runtime_error(f.path() + ": checkpoint_version holds a " + std::string(v->kind_name()) + ", not a number");
  return v->as_float();
}

}  // namespace

bool is_megatron_checkpoint(const std::string& path) {
  std::error_code ec;
  const fs::path p = normal(path);
  const std::string name = p.filename().string();
  if (fs::is_regular_file(p, ec)) {
    for (const char* f : kModelFiles)
      if (name == f) return is_rank_name(p.parent_path().filename().string());
    return false;
  }
  if (!fs::is_directory(p, ec)) return false;
  if (fs::exists(p / kTracker, ec)) return true;
  if (is_rank_name(name)) return !model_file_in(p).empty();
  if (!is_iteration_name(name)) return false;
  for (const fs::directory_entry& d : fs::directory_iterator(p, ec))
    if (d.is_directory(ec) && is_rank_name(d.path().filename().string())) return true;
  return false;
}

std::vector<std::string> megatron_enum_classes() {
  // args.model_type (megatron/model/enums.py before Megatron-core, megatron/core/enums.py after) and
  // the enums legacy and core code keep in args or configs.
  return {"megatron.core.enums.ModelType",
          "megatron.model.enums.ModelType",
          "megatron.model.enums.AttnMaskType",
          "megatron.model.enums.AttnType",
          "megatron.model.enums.LayerType",
          "megatron.core.transformer.enums.AttnMaskType",
          "megatron.core.transformer.enums.AttnBackend"};
}

MegatronCheckpointFiles find_megatron_shards(const std::string& path) {
  std::optional<TorchFile> rank0;
  return locate(path, &rank0);
}

std::vector<std::string> megatron_args_differences(const PickleValue& args, const ModelConfig& c, const TransformerSpec& s,
                                                   int64_t tp) {
  const Args a(args, "args");
  std::vector<std::string> out;
  auto differ = [&](const std::string& key, const std::string& theirs, const std::string& ours, const std::string& where) {
    out.push_back("`" + key + "`: the checkpoint's " + theirs + ", the configured model's " + ours + " (" + where + ")");
  };
  auto same = [&](const std::string& key, int64_t theirs, int64_t ours, const std::string& where) {
    if (theirs != ours) differ(key, std::to_string(theirs), std::to_string(ours), where);
  };
  auto required = [&](const std::string& key) {
    if (!a.get(key)) out.push_back("`" + key + "`: missing from the checkpoint's args (Megatron always saves it)");
    return a.integer(key, 0);
  };
  // check_checkpoint_args's own comparisons.
  const int64_t hidden = required("hidden_size"), heads = required("num_attention_heads");
  same("num_layers", required("num_layers"), c.num_layers, "model_config.num_layers");
  same("hidden_size", hidden, c.hidden_size, "model_config.hidden_size");
  same("num_attention_heads", heads, c.num_heads, "model_config.num_heads");
  if (const PickleValue* v = a.get("padded_vocab_size")) {
    const int64_t divisible = a.integer("make_vocab_size_divisible_by", 128);
    const int64_t ours = padded(c.vocab_size, divisible * tp);
    if (v->as_int() != ours)
      differ("padded_vocab_size", std::to_string(v->as_int()), std::to_string(ours),
             "model_config.vocab_size " + std::to_string(c.vocab_size) +
                 " padded to a multiple of make_vocab_size_divisible_by " + std::to_string(divisible) +
                 " x tensor_model_parallel_size " + std::to_string(tp) +
                 ", as Megatron's _vocab_size_with_padding does: set vocab_size to the tokenizer's vocabulary the "
                 "checkpoint was trained with");
  }
  // What the weights mean here.
  const bool gqa = a.flag("group_query_attention", false);
  same("num_query_groups", gqa ? a.integer("num_query_groups", 1) : heads, s.kv_heads, "model_config.n_kv_heads");
  same("ffn_hidden_size", a.integer("ffn_hidden_size", 4 * hidden), s.ffn,
       s.mlp == MlpKind::kSwiGLU ? "model_config.intermediate_size" : "model_config.hidden_size x expand_ratio");
  if (a.get("kv_channels") && heads > 0)
    same("kv_channels", a.integer("kv_channels", 0), s.head_dim(), "gridformer's heads are hidden_size / num_heads wide");
  const std::string position =
      a.text("position_embedding_type", a.flag("use_rotary_position_embeddings", false) ? "rope" : "learned_absolute");
  const std::string our_position = s.rope ? "rope" : "learned_absolute";
  if (position != our_position)
    differ("position_embedding_type", position, our_position,
           "model_config.position_embedding_type (GPT-2); Llama is always rope");
  if (!s.rope)
    same("max_position_embeddings", a.integer("max_position_embeddings", 0), c.max_position_embeddings,
         "model_config.max_position_embeddings");
  if (s.rope && a.real("rotary_base", 10000.0) != s.rope_theta)
    differ("rotary_base", num(a.real("rotary_base", 10000.0)), num(s.rope_theta),
           "model_config.theta (Llama) / rope_theta (GPT-2)");
  const std::string norm = a.text("normalization", "LayerNorm"),
                    our_norm = s.norm == NormKind::kRMSNorm ? "RMSNorm" : "LayerNorm";
  if (norm != our_norm)
    differ("normalization", norm, our_norm, "the architecture: GPT-2 normalizes with LayerNorm, Llama with RMSNorm");
  const char* eps_key = a.get("norm_epsilon") ? "norm_epsilon" : "layernorm_epsilon";
  const double eps = a.real(eps_key, 1e-5);
  if (static_cast<float>(eps) != s.norm_eps)
    differ(eps_key, num(eps), num(s.norm_eps),
           s.norm == NormKind::kRMSNorm ? "model_config.rms_norm_eps" : "model_config.layernorm_epsilon");
  const bool swiglu = a.flag("swiglu", false);
  if (swiglu != (s.mlp == MlpKind::kSwiGLU))
    differ("swiglu", swiglu ? "True" : "False", s.mlp == MlpKind::kSwiGLU ? "True" : "False",
           "the architecture: GPT-2's MLP is GELU, Llama's SwiGLU");
  const bool bias = a.flag("add_bias_linear", true);
  if (bias != s.linear_bias)
    differ("add_bias_linear", bias ? "True" : "False", s.linear_bias ? "True" : "False",
           "model_config.add_bias_linear (GPT-2); Llama has none");
  else if ((bias || a.flag("add_qkv_bias", false)) != s.qkv_bias)
    differ("add_qkv_bias", s.qkv_bias ? "False" : "True", s.qkv_bias ? "True" : "False",
           "model_config.qkv_has_bias (Llama)");
  const bool untied = a.flag("untie_embeddings_and_output_weights", false);
  if (untied == s.tied_head)
    differ("untie_embeddings_and_output_weights", untied ? "True" : "False", s.tied_head ? "False" : "True",
           "model_config.tie_word_embeddings (Llama); GPT-2 always ties");
  const int64_t experts = a.integer("num_experts", 1);
  same("num_experts", experts, c.moe.expert_num, "moe_config.expert_num");
  if (experts > 1 && c.moe.expert_num == experts)
    same("moe_router_topk", a.integer("moe_router_topk", 2), c.moe.num_experts_chosen, "moe_config.num_experts_chosen");
  // What gridformer does not run.
  for (const char* key : {"apply_residual_connection_post_layernorm", "apply_layernorm_1p", "qk_layernorm",
                          "rotary_interleaved", "standalone_embedding_stage", "squared_relu"})
    if (a.flag(key, false))
      out.push_back(std::string("`") + key + "`: True in the checkpoint; gridformer's models do not run it");
  if (s.rope && a.real("rotary_percent", 1.0) != 1.0)
    out.push_back("`rotary_percent`: " + num(a.real("rotary_percent", 1.0)) +
                  " in the checkpoint; gridformer rotates the whole head (1.0)");
  return out;
}

std::string load_megatron(CausalLM& model, const std::string& path) {
  MegatronPart weights;  // read: none, the model's own state dicts
  weights.what = "weights";
  weights.place = [&model](const TensorPlacement& t, const std::vector<float>& full) {
    Placement::scatter(t, full.data(), model.weights() + t.offset);
  };
  return load_megatron_parts(model, path, {weights});
}

std::string load_megatron_parts(CausalLM& model, const std::string& path, const std::vector<MegatronPart>& parts,
                                const std::function<void(const TorchFile&, const MegatronCheckpointFiles&)>& on_file) {
  std::optional<TorchFile> rank0;
  const MegatronCheckpointFiles files = locate(path, &rank0);
  const ModelConfig& c = model.config();
  const ModelEntry& entry = find_model(c.arch, c.type);
  const TransformerSpec spec = entry.spec(c);
  const PickleValue& args = checkpoint_args(*rank0);
  const std::vector<std::string> differences = megatron_args_differences(args, c, spec, files.tp);
  if (!differences.empty()) {
    std::string all;
    for (const std::string& d : differences)
      all += "\n  " + d;
    throw std::runtime_error(
        rank0->path() + ": the checkpoint's args describe another model than the configured " + entry.family +
        " (as Megatron's check_checkpoint_args compares them):" + all +
        "\nSet the config's keys to the checkpoint's values, or load a checkpoint of the configured model");
  }
  const Args a(args, rank0->path());
  MegatronSizes sizes{files.tp, files.pp,     static_cast<int64_t>(model_chunks(*rank0).size()),
                      files.ep, c.num_layers, std::max<int64_t>(1, a.integer("num_experts", 1))};
  if (const PickleValue* vp = a.get("virtual_pipeline_model_parallel_size"); vp && vp->as_int() != sizes.vp)
    throw std::runtime_error(rank0->path() + ": args.virtual_pipeline_model_parallel_size is " +
                             std::to_string(vp->as_int()) + " but the file holds " + std::to_string(sizes.vp) +
                             " model chunk(s)");
  if (sizes.layers % (sizes.pp * sizes.vp) != 0)
    throw std::runtime_error(rank0->path() + ": num_layers " + std::to_string(sizes.layers) + " is not divisible by " +
                             std::to_string(sizes.pp) + " pipeline stages x " + std::to_string(sizes.vp) +
                             " virtual chunks (an uneven split is not read here)");

  // Every shard's tensors, as views into its file (each file stays mapped while its views live), one map a part.
  std::vector<MegatronTensorMap> maps;
  for (size_t k = 0; k < parts.size(); ++k) maps.emplace_back(spec, entry.names, sizes);
  double version = 0.0;
  for (const MegatronShard& shard : files.shards) {
    const TorchFile f = shard.file == rank0->path() ? *rank0 : TorchFile::open(shard.file, pickle_options());
    const std::vector<const PickleValue*> chunks = model_chunks(f);
    if (static_cast<int64_t>(chunks.size()) != sizes.vp)
      throw std::runtime_error(f.path() + ": holds " + std::to_string(chunks.size()) + " model chunk(s), " + rank0->path() +
                               " holds " + std::to_string(sizes.vp) + ": the shard files do not belong together");
    version = checkpoint_version(f);
    if (on_file) on_file(f, files);
    for (size_t k = 0; k < parts.size(); ++k) {
      const std::vector<MegatronFlat> flat = parts[k].read ? parts[k].read(f, chunks) : std::vector<MegatronFlat>();
      if (parts[k].read && flat.size() != chunks.size())
        throw std::logic_error("load_megatron_parts: a part's reader must give one list a model chunk");
      for (size_t vp = 0; vp < chunks.size(); ++vp) {
        const MegatronChunk chunk{f.path(), chunks[vp], shard.tp, shard.pp, static_cast<int64_t>(vp), shard.ep, version};
        if (parts[k].read) maps[k].add(chunk, flat[vp]);
        else maps[k].add(chunk);  // the model's own state dicts (their skipped entries counted for the note)
      }
    }
  }
  rank0.reset();

  // Every tensor a parameter (a pipeline stage takes its own), every parameter given, with its shape.
  const ParamTable& table = model.params().table();
  for (size_t k = 0; k < parts.size(); ++k) {
    const std::vector<MegatronTensorGroup> groups = maps[k].groups();
    std::map<std::string, std::pair<size_t, size_t>> given;  // our name -> (group, index)
    for (size_t g = 0; g < groups.size(); ++g)
      for (size_t i = 0; i < groups[g].names.size(); ++i) {
        const std::string& name = groups[g].names[i];
        const ParamSpec* p = table.find(name);
        if (!p) {
          if (!model.whole_model()) continue;  // another pipeline stage's
          throw std::runtime_error(groups[g].source + " gives " + name + ", which is not a parameter of the configured " +
                                   entry.family +
                                   ": the checkpoint holds tensors this model has not (set the config to the "
                                   "model the checkpoint was trained as)");
        }
        if (groups[g].shapes[i] != p->shape)
          throw std::runtime_error(groups[g].source + " gives " + name + " of shape " + shape_str(groups[g].shapes[i]) +
                                   ", the configured model needs " + shape_str(p->shape));
        given[name] = {g, i};
      }
    for (const ParamSpec& p : table.specs())
      if (!given.count(p.name))
        throw std::runtime_error(files.dir + ": no tensor of the checkpoint gives the configured " + entry.family + "'s " +
                                 p.name + " " + shape_str(p.shape) + " (" + std::to_string(files.shards.size()) +
                                 " shard file(s) read" + (k == 0 ? "" : ", " + parts[k].what) +
                                 "): the checkpoint holds another model, or its shards lost tensors");

    // Each full tensor read once, placed into this rank's slices (the vocabulary's padding rows zero).
    for (const MegatronTensorGroup& g : groups) {
      std::vector<const TensorPlacement*> placed;
      for (const std::string& name : g.names)
        placed.push_back(model.params().find(name));
      if (std::all_of(placed.begin(), placed.end(), [](const TensorPlacement* t) { return t == nullptr; })) continue;
      const std::vector<std::vector<float>> values = g.values();
      for (size_t i = 0; i < placed.size(); ++i)
        if (placed[i]) parts[k].place(*placed[i], values[i]);
    }
  }
  const auto own = std::find_if(parts.begin(), parts.end(), [](const MegatronPart& p) { return !p.read; });
  const MegatronMapStats& st = maps[own == parts.end() ? 0 : static_cast<size_t>(own - parts.begin())].stats();
  return "Megatron-LM checkpoint, iteration " + files.iteration + " (checkpoint_version " + num(version) + "), " +
         std::to_string(files.shards.size()) + " shard file(s) of TP " + std::to_string(files.tp) + " x PP " +
         std::to_string(files.pp) + (sizes.vp > 1 ? " x VP " + std::to_string(sizes.vp) : std::string()) +
         (files.ep > 1 ? " x EP " + std::to_string(files.ep) : std::string()) + "; skipped " +
         std::to_string(st.extra_state) + " _extra_state entries, " + std::to_string(st.tied_head_copies) +
         " tied output-layer copies and " + std::to_string(st.expert_rank_copies) +
         " expert-parallel copies of dense tensors" +
         (st.rotary_buffers > 0 ? " (and " + std::to_string(st.rotary_buffers) + " rotary_pos_emb.inv_freq buffers)" : "");
}

}  // namespace gf
