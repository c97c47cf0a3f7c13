// Megatron's tensor names and layouts onto our parameters (see megatron_checkpoint.h): one table of
// names, each with the parameter role it fills, how its tensor-parallel shards join and the layout
// change it needs; then the pieces of every shard collected by (role, layer, expert) and joined.
//
// Shards join as tools/checkpoint/loader_megatron.py / loader_mcore.py (core_r0.6.0) join them:
// column-parallel weights and biases (query_key_value / linear_qkv, dense_h_to_4h / linear_fc1) and
// the vocabulary rows by concatenation on dim 0, row-parallel weights (dense / linear_proj,
// dense_4h_to_h / linear_fc2) on dim 1, and the rest (norms, row-parallel biases, the router, the
// position table) taken from tensor-parallel rank 0. Pieces are strided views of the files' storages
// (core/io/torch_pickle.h TorchTensor), converted only when a parameter is assembled.
//
// This file: the table, the names read (aliases, layer prefixes, experts) and the pieces collected
// (MegatronTensorMap). The strided views and the joining of the shards are in
// megatron_checkpoint_map_join.cpp; the types both use in megatron_checkpoint_map_detail.h.
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "core/io/torch_pickle.h"
#include "models/weights/megatron_checkpoint.h"
#include "models/weights/megatron_checkpoint_map_detail.h"

namespace gf {

using namespace megatron_detail;

namespace {

struct Rule {
  const char* name;  // after the aliases; layer rules after the layer prefix, "{e}" a local expert
  Role role;
  Join join;
  Layout layout;
};

// Tensors of the whole model. Legacy (megatron/model/gpt_model.py, language_model.py at 285068c,
// nested dicts joined by '.') and Megatron-core (megatron/core/models/gpt/gpt_model.py, core_r0.6.0).
constexpr Rule kModelRules[] = {
    {"language_model.embedding.word_embeddings.weight", Role::kEmbed, kRows, kVocab},
    {"language_model.embedding.position_embeddings.weight", Role::kPosEmbed, kWhole, kPlain},
    {"language_model.encoder.final_layernorm.weight", Role::kFinalNormW, kWhole, kPlain},
    {"language_model.encoder.final_layernorm.bias", Role::kFinalNormB, kWhole, kPlain},
    {"language_model.output_layer.weight", Role::kLmHead, kRows, kHead},
    {"word_embeddings_for_head.weight", Role::kLmHead, kRows, kHead},  // the last stage's tied copy
    {"embedding.word_embeddings.weight", Role::kEmbed, kRows, kVocab},
    {"embedding.position_embeddings.weight", Role::kPosEmbed, kWhole, kPlain},
    {"decoder.final_layernorm.weight", Role::kFinalNormW, kWhole, kPlain},
    {"decoder.final_layernorm.bias", Role::kFinalNormB, kWhole, kPlain},
    {"output_layer.weight", Role::kLmHead, kRows, kHead},
};

// Tensors of layer N, after "language_model.encoder.layers.N." (legacy ParallelTransformerLayer) or
// "decoder.layers.N." (core TransformerLayer: get_gpt_layer_local_spec's names, or
// get_gpt_layer_with_transformer_engine_spec's, whose input and pre-MLP norms are fused into
// TELayerNormColumnParallelLinear as layer_norm_weight / layer_norm_bias; MoELayer's router and experts).
constexpr Rule kLayerRules[] = {
    {"input_layernorm.weight", Role::kNorm1W, kWhole, kPlain},
    {"input_layernorm.bias", Role::kNorm1B, kWhole, kPlain},
    {"self_attention.linear_qkv.layer_norm_weight", Role::kNorm1W, kWhole, kPlain},
    {"self_attention.linear_qkv.layer_norm_bias", Role::kNorm1B, kWhole, kPlain},
    {"self_attention.query_key_value.weight", Role::kQkvW, kRows, kQkv},
    {"self_attention.query_key_value.bias", Role::kQkvB, kRows, kQkv},
    {"self_attention.linear_qkv.weight", Role::kQkvW, kRows, kQkv},
    {"self_attention.linear_qkv.bias", Role::kQkvB, kRows, kQkv},
    {"self_attention.dense.weight", Role::kOW, kCols, kLinear},
    {"self_attention.dense.bias", Role::kOB, kWhole, kPlain},
    {"self_attention.linear_proj.weight", Role::kOW, kCols, kLinear},
    {"self_attention.linear_proj.bias", Role::kOB, kWhole, kPlain},
    {"post_attention_layernorm.weight", Role::kNorm2W, kWhole, kPlain},
    {"post_attention_layernorm.bias", Role::kNorm2B, kWhole, kPlain},
    {"pre_mlp_layernorm.weight", Role::kNorm2W, kWhole, kPlain},
    {"pre_mlp_layernorm.bias", Role::kNorm2B, kWhole, kPlain},
    {"mlp.linear_fc1.layer_norm_weight", Role::kNorm2W, kWhole, kPlain},
    {"mlp.linear_fc1.layer_norm_bias", Role::kNorm2B, kWhole, kPlain},
    {"mlp.dense_h_to_4h.weight", Role::kFcW, kRows, kFc1},
    {"mlp.dense_h_to_4h.bias", Role::kFcB, kRows, kFc1},
    {"mlp.linear_fc1.weight", Role::kFcW, kRows, kFc1},
    {"mlp.linear_fc1.bias", Role::kFcB, kRows, kFc1},
    {"mlp.dense_4h_to_h.weight", Role::kDownW, kCols, kLinear},
    {"mlp.dense_4h_to_h.bias", Role::kDownB, kWhole, kPlain},
    {"mlp.linear_fc2.weight", Role::kDownW, kCols, kLinear},
    {"mlp.linear_fc2.bias", Role::kDownB, kWhole, kPlain},
    {"mlp.router.weight", Role::kRouterW, kWhole, kPlain},
    {"mlp.experts.local_experts.{e}.linear_fc1.weight", Role::kExpertUpW, kRows, kFc1},
    {"mlp.experts.local_experts.{e}.linear_fc1.bias", Role::kExpertUpB, kRows, kFc1},
    {"mlp.experts.local_experts.{e}.linear_fc2.weight", Role::kExpertDownW, kCols, kLinear},
    {"mlp.experts.local_experts.{e}.linear_fc2.bias", Role::kExpertDownB, kWhole, kPlain},
    {"mlp.experts.weight1", Role::kExpertUpW, kRows, Layout::kGrouped1},
    {"mlp.experts.weight2", Role::kExpertDownW, kCols, Layout::kGrouped2},
};

constexpr std::string_view kLayerPrefixes[] = {"language_model.encoder.layers.", "decoder.layers."};

// Older spellings, as Megatron's own loaders accept them: TransformerLanguageModel.load_state_dict
// (language_model.py, 285068c) reads a 'transformer' key for 'encoder' (before checkpoint version 3.0)
// and renames key.replace(".attention.", ".self_attention."); the legacy model of 2023 on
// (megatron/legacy/model/transformer.py, core_r0.6.0) names its norms input_norm, post_attention_norm
// and final_norm.
constexpr std::pair<std::string_view, std::string_view> kAliases[] = {
    {"language_model.transformer.", "language_model.encoder."},
    {".attention.", ".self_attention."},
    {".input_norm.", ".input_layernorm."},
    {".post_attention_norm.", ".post_attention_layernorm."},
    {".final_norm.", ".final_layernorm."},
};

std::string canonical(std::string name) {
  for (const auto& [old_name, now] : kAliases)
    if (const size_t at = name.find(old_name); at != std::string::npos) name.replace(at, old_name.size(), now);
  return name;
}

// A decimal number at the start of `s` (at most 9 digits), and the rest after it.
bool leading_number(std::string_view s, int64_t* n, std::string_view* rest) {
  size_t j = 0;
  while (j < s.size() && j < 9 && std::isdigit(static_cast<unsigned char>(s[j])))
    ++j;
  if (j == 0) return false;
  *n = std::stoll(std::string(s.substr(0, j)));
  *rest = s.substr(j);
  return true;
}

// Whether `name` is `pattern` with "{e}" standing for a number (put in *e).
bool matches(std::string_view pattern, std::string_view name, int64_t* e) {
  const size_t at = pattern.find("{e}");
  if (at == std::string_view::npos) return pattern == name;
  std::string_view rest;
  return name.substr(0, at) == pattern.substr(0, at) && leading_number(name.substr(at), e, &rest) &&
         rest == pattern.substr(at + 3);
}

std::string version_str(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0' && s[s.size() - 2] != '.') s.pop_back();
  return s;
}

// (role, SwiGLU half, layer, expert): one of ours, or q|k|v for kQkv.
struct Key {
  Role role;
  int part;  // 0 whole; 1, 2: SwiGLU's gate and up halves of fc1
  int64_t layer, expert;
  auto operator<=>(const Key&) const = default;
};

// SwiGLU's gate (part 1) and up (part 2) halves of a first projection; none for a bias (our SwiGLU
// projections have none).
std::optional<Role> glu_role(Role fc1, int part) {
  if (fc1 == Role::kFcW) return part == 1 ? Role::kGateW : Role::kUpW;
  if (fc1 == Role::kExpertUpW) return part == 1 ? Role::kExpertGateW : Role::kExpertUpW;
  return std::nullopt;
}

}  // namespace

struct MegatronTensorMap::Impl {
  TransformerSpec spec;
  NameMap names;
  MegatronSizes sizes;
  std::map<Key, std::shared_ptr<Entry>> entries;
  MegatronMapStats stats;

  [[noreturn]] void fail(const std::string& file, const std::string& key, const std::string& what) const {
    throw std::runtime_error(file + ": tensor '" + key + "' " + what);
  }

  // Our parameter names for `key` under `layout` (q, k, v apart unless the model fuses them).
  std::vector<std::string> target_names(const Key& k, Layout layout) const {
    std::vector<Role> roles{k.role};
    if (layout == kQkv && !spec.fused_qkv_param)
      roles = k.role == Role::kQkvW ? std::vector<Role>{Role::kQW, Role::kKW, Role::kVW}
                                    : std::vector<Role>{Role::kQB, Role::kKB, Role::kVB};
    std::vector<std::string> out;
    for (Role r : roles) {
      const std::string n = names(r, k.layer);  // std::logic_error for a role the architecture lacks
      out.push_back(k.expert >= 0 ? expert_name(n, k.expert) : n);
    }
    return out;
  }

  void insert(const Key& k, Join join, Layout layout, int64_t tp, Piece piece, const std::string& file,
              const std::string& key) {
    std::shared_ptr<Entry>& e = entries[k];
    if (!e) {
      e = std::make_shared<Entry>();
      e->join = join;
      e->layout = layout;
      try {
        e->names = target_names(k, layout);
      } catch (const std::logic_error&) {
        entries.erase(k);
        fail(file, key,
             "maps to no parameter of the configured model (its architecture has no such tensor: "
             "was the checkpoint saved from another model family?)");
      }
      e->shards.resize(static_cast<size_t>(sizes.tp));
    }
    std::optional<Piece>& slot = e->shards[static_cast<size_t>(tp)];
    if (slot)
      fail(file, key,
           "gives " + e->names[0] + " a second time: " + slot->where +
               " already did (two pipeline stages or spellings for one tensor)");
    slot = std::move(piece);
  }

  void add_fc1(Role role, int64_t layer, int64_t expert, int64_t tp, const Piece& p, const std::string& file,
               const std::string& key) {
    if (spec.mlp != MlpKind::kSwiGLU) {
      insert({role, 0, layer, expert}, kRows, kLinear, tp, p, file, key);
      return;
    }
    // megatron/core/transformer/mlp.py (core_r0.6.0) glu: torch.chunk(x, 2, dim=-1), silu of the first
    // half times the second, on each shard's own rows (loader_megatron.py joins each half apart).
    const int64_t rows = p.shape[0];
    if (rows % 2 != 0)
      fail(file, key, "has " + std::to_string(rows) + " rows: SwiGLU's gate and up halves need an even count");
    for (int part : {1, 2}) {
      const std::optional<Role> r = glu_role(role, part);
      if (!r) fail(file, key, "maps to no parameter of the configured model (its SwiGLU projections have no bias)");
      Piece half{rows_of(p.view, (part - 1) * rows / 2, rows / 2), p.shape, p.where};
      half.shape[0] = rows / 2;
      insert({*r, part, layer, expert}, kRows, kLinear, tp, std::move(half), file, key);
    }
  }

  // GroupedMLP (megatron/core/transformer/moe/experts.py, core_r0.6.0): weight1 [hidden, local * fc1
  // rows] is read as weight1.view(num_local_experts, hidden, -1), expert i's fc1 transposed (x @ w1[i]);
  // weight2 [local * ffn, hidden] as weight2.view(num_local_experts, -1, hidden), expert i's fc2
  // transposed. Each block is made the expert's linear_fc1 / linear_fc2 shard.
  void add_grouped(const Rule& r, int64_t layer, int64_t ep, int64_t tp, const Piece& p, const std::string& file,
                   const std::string& key) {
    const int64_t local = sizes.experts / sizes.ep, hidden = spec.hidden;
    const bool first = r.layout == Layout::kGrouped1;
    const int64_t whole = p.shape.size() != 2 ? 0 : first ? p.shape[1] : p.shape[0];
    if (p.shape.size() != 2 || (first ? p.shape[0] : p.shape[1]) != hidden || local < 1 || whole % local != 0)
      fail(file, key,
           "has shape " + shape_str(p.shape) + "; GroupedMLP's " + (first ? "weight1 is [hidden, " : "weight2 is [") +
               std::to_string(local) + " local experts x n" + (first ? "]" : ", hidden]") + " with hidden " +
               std::to_string(hidden));
    if (!p.view.is_contiguous()) fail(file, key, "is not contiguous: GroupedMLP views it as one block per expert");
    const int64_t n = whole / local;
    const TorchTensor blocks = first ? viewed(p.view, {local, hidden, n}) : viewed(p.view, {local, n, hidden});
    for (int64_t i = 0; i < local; ++i) {
      TorchTensor b = viewed(p.view, first ? std::vector<int64_t>{hidden, n} : std::vector<int64_t>{n, hidden});
      b.storage_offset = blocks.storage_offset + i * blocks.strides[0];
      Piece expert{transposed(b), first ? std::vector<int64_t>{n, hidden} : std::vector<int64_t>{hidden, n}, p.where};
      const int64_t global = ep * local + i;  // moe_layer.py: local_expert_indices_offset = ep_rank * num_local_experts
      if (first)
        add_fc1(Role::kExpertUpW, layer, global, tp, expert, file, key);
      else
        insert({Role::kExpertDownW, 0, layer, global}, kCols, kLinear, tp, std::move(expert), file, key);
    }
  }

  // A query_key_value saved before checkpoint version 2.0, as a view in today's [np, 3, hn] order.
  // megatron/checkpointing.py (285068c) fix_query_key_value_ordering / _transpose_first_dim on each
  // shard's own heads: version 0 stored [3, np, hn], version 1.0 [np, hn, 3].
  Piece qkv_of_version(Piece p, double version, const std::string& file, const std::string& key) const {
    if (version >= 2.0) return p;
    if (version != 0.0 && version != 1.0)
      fail(file, key,
           "comes from checkpoint_version " + version_str(version) +
               ", which Megatron's fix_query_key_value_ordering does not know (0, 1.0, or >= 2.0)");
    const int64_t np = spec.heads / sizes.tp, hn = spec.head_dim();
    if (p.shape[0] != 3 * np * hn || !p.view.is_contiguous())
      fail(file, key,
           "has shape " + shape_str(p.shape) + ": a checkpoint_version " + version_str(version) +
               " query_key_value shard holds 3 x " + std::to_string(np) + " heads x " + std::to_string(hn) + " rows");
    std::vector<int64_t> split = version == 0.0 ? std::vector<int64_t>{3, np, hn} : std::vector<int64_t>{np, hn, 3};
    std::vector<size_t> order = version == 0.0 ? std::vector<size_t>{1, 0, 2} : std::vector<size_t>{0, 2, 1};
    if (p.shape.size() == 2) {
      split.push_back(p.shape[1]);
      order.push_back(3);
    }
    p.view = permuted(viewed(p.view, split), order);
    return p;
  }

  void add_tensor(const Rule& r, int64_t layer, int64_t expert, const MegatronChunk& c, const TorchTensor& t,
                  const std::string& key) {
    Piece p{t, t.shape, "'" + key + "' in " + c.file};
    if (p.shape.empty() || p.shape.size() > 2)
      fail(c.file, key, "has shape " + shape_str(p.shape) + ", not a matrix or vector");
    switch (r.layout) {
      case Layout::kGrouped1:
      case Layout::kGrouped2:
        return add_grouped(r, layer, c.ep, c.tp, p, c.file, key);
      case Layout::kFc1:
        return add_fc1(r.role, layer, expert, c.tp, p, c.file, key);
      case Layout::kQkv:
        return insert({r.role, 0, layer, -1}, r.join, kQkv, c.tp, qkv_of_version(p, c.version, c.file, key), c.file, key);
      case Layout::kHead:
        if (spec.tied_head) {  // the last stage's copy of the tied embedding: the embedding is read
          ++stats.tied_head_copies;
          return;
        }
        return insert({r.role, 0, layer, expert}, r.join, kVocab, c.tp, std::move(p), c.file, key);
      default:
        return insert({r.role, 0, layer, expert}, r.join, r.layout, c.tp, std::move(p), c.file, key);
    }
  }

  // The group an entry makes: our names and shapes, and how to read them.
  MegatronTensorGroup group(const std::shared_ptr<const Entry>& e) const {
    MegatronTensorGroup g;
    g.names = e->names;
    const Piece* first = nullptr;
    for (size_t tp = 0; tp < e->shards.size(); ++tp) {
      const std::optional<Piece>& p = e->shards[tp];
      if (p && !first) first = &*p;
      if (!p && (e->join != kWhole || tp == 0)) {
        const auto other =
            std::find_if(e->shards.begin(), e->shards.end(), [](const std::optional<Piece>& s) { return s.has_value(); });
        throw std::runtime_error("tensor-parallel rank " + std::to_string(tp) + " has no shard of " +
                                 (other != e->shards.end() ? (*other)->where : std::string("the tensor")) + " (for " +
                                 e->names[0] + "): the checkpoint's shard files do not belong together");
      }
    }
    g.source = "Megatron's " + first->where;
    if (e->join != kWhole && sizes.tp > 1)
      g.source += " and its other " + std::to_string(sizes.tp - 1) + " tensor-parallel shard(s)";
    const std::vector<int64_t> full = joined_shape(*e, g.source);
    const bool matrix = full.size() == 2;
    const int64_t H = spec.heads, G = spec.kv_heads, D = spec.head_dim();
    switch (e->layout) {
      case kPlain:
        g.shapes = {full};
        break;
      case kLinear:
        g.shapes = {matrix && !spec.out_in ? std::vector<int64_t>{full[1], full[0]} : full};
        break;
      case kVocab:
        if (full[0] < spec.vocab)
          throw std::runtime_error(g.source + " has " + std::to_string(full[0]) +
                                   " vocabulary rows, fewer than the configured vocab_size " + std::to_string(spec.vocab));
        g.shapes = {{spec.vocab, full.back()}};
        break;
      case kQkv: {
        if (full[0] != (H + 2 * G) * D)
          throw std::runtime_error(g.source + " has " + std::to_string(full[0]) + " rows; " + std::to_string(H) +
                                   " heads and " + std::to_string(G) + " query groups of " + std::to_string(D) + " make " +
                                   std::to_string((H + 2 * G) * D));
        auto rows = [&](int64_t n) { return matrix ? std::vector<int64_t>{n, full[1]} : std::vector<int64_t>{n}; };
        if (spec.fused_qkv_param)
          g.shapes = {matrix && !spec.out_in ? std::vector<int64_t>{full[1], full[0]} : full};
        else
          g.shapes = {rows(H * D), rows(G * D), rows(G * D)};
        if (!spec.fused_qkv_param && matrix && !spec.out_in)
          for (auto& s : g.shapes)
            std::swap(s[0], s[1]);
        break;
      }
      default:
        break;
    }
    g.values = [e, full, s = spec]() { return assemble(*e, full, s); };
    return g;
  }
};

MegatronTensorMap::MegatronTensorMap(const TransformerSpec& spec, const NameMap& names, const MegatronSizes& sizes)
    : impl_(std::make_shared<Impl>()) {
  impl_->spec = spec;
  impl_->names = names;
  impl_->sizes = sizes;
}

namespace {

// The tensors of a state dict, nested dicts joined by '.' (the legacy model's state dict is nested:
// language_model -> embedding -> word_embeddings -> weight); `_extra_state` entries and the RoPE
// frequencies older versions saved as a buffer (core_r0.6.0's rotary_pos_embedding.py drops them on
// load) skipped.
void flatten(const PickleValue& dict, const std::string& prefix, const std::string& file,
             std::vector<std::pair<std::string, const PickleValue*>>& out, MegatronMapStats* stats) {
  for (const auto& [k, v] : dict.entries()) {
    if (k.kind() != PickleValue::Kind::kString)
      throw std::runtime_error(file + ": the model state dict holds a key of kind " + k.kind_name() +
                               (prefix.empty() ? std::string() : " under '" + prefix + "'") + "; state dict keys are names");
    const std::string name = prefix.empty() ? k.as_string() : prefix + "." + k.as_string();
    if (name.ends_with("._extra_state") || name == "_extra_state") {
      ++stats->extra_state;  // Transformer Engine's fp8 metadata, or None from core's parallel linears
    } else if (name.ends_with("rotary_pos_emb.inv_freq")) {
      ++stats->rotary_buffers;  // RoPE's frequencies, which RotaryEmbedding._load_from_state_dict drops
    } else if (v.is_dict()) {
      flatten(v, name, file, out, stats);
    } else if (v.kind() == PickleValue::Kind::kTensor) {
      out.emplace_back(name, &v);
    } else {
      throw std::runtime_error(file + ": '" + name + "' in the model state dict holds a " + v.kind_name() +
                               ", not a tensor: not a state dict Megatron saved");
    }
  }
}

const Rule* find_rule(const Rule* begin, const Rule* end, std::string_view name, int64_t* expert) {
  for (const Rule* r = begin; r != end; ++r)
    if (matches(r->name, name, expert)) return r;
  return nullptr;
}

}  // namespace

MegatronFlat megatron_flatten(const PickleValue& state_dict, const std::string& file) {
  MegatronFlat tensors;
  MegatronMapStats ignored;
  flatten(state_dict, "", file, tensors, &ignored);
  return tensors;
}

void MegatronTensorMap::add(const MegatronChunk& c) {
  MegatronFlat tensors;
  flatten(*c.state_dict, "", c.file, tensors, &impl_->stats);
  add(c, tensors);
}

void MegatronTensorMap::add(const MegatronChunk& c, const MegatronFlat& tensors) {
  Impl& m = *impl_;
  const int64_t chunk = m.sizes.layers / (m.sizes.pp * m.sizes.vp);
  const int64_t local_experts = m.sizes.experts / m.sizes.ep;
  for (const auto& [key, value] : tensors) {
    const std::string name = canonical(key);
    int64_t layer = -1, expert = -1;
    const Rule* rule = nullptr;
    std::string_view rest;
    for (std::string_view prefix : kLayerPrefixes) {
      if (name.rfind(prefix, 0) != 0 || !leading_number(std::string_view(name).substr(prefix.size()), &layer, &rest) ||
          rest.empty() || rest[0] != '.')
        continue;
      rule = find_rule(std::begin(kLayerRules), std::end(kLayerRules), rest.substr(1), &expert);
      if (!rule) break;
      // Stage-local numbers (ParallelTransformer / TransformerBlock number their layers from 0): the
      // chunk's offset is vp * (layers / VP) + pp * chunk (transformer.py at 285068c;
      // transformer_layer.py _get_layer_offset at core_r0.6.0).
      if (layer >= chunk)
        m.fail(c.file, key,
               "is layer " + std::to_string(layer) + " of a model chunk that holds " + std::to_string(chunk) +
                   " (num_layers " + std::to_string(m.sizes.layers) + " over " + std::to_string(m.sizes.pp) +
                   " pipeline stages x " + std::to_string(m.sizes.vp) + " virtual chunks)");
      layer += c.vp * (m.sizes.layers / m.sizes.vp) + c.pp * chunk;
      if (expert >= 0) {
        if (expert >= local_experts)
          m.fail(c.file, key,
                 "is local expert " + std::to_string(expert) + " of an expert-parallel rank that holds " +
                     std::to_string(local_experts) + " (num_experts " + std::to_string(m.sizes.experts) +
                     " / expert_model_parallel_size " + std::to_string(m.sizes.ep) + ")");
        expert += c.ep * local_experts;  // moe_layer.py: ep_rank * num_local_experts + i
      }
      break;
    }
    if (!rule && layer < 0) rule = find_rule(std::begin(kModelRules), std::end(kModelRules), name, &expert);
    if (!rule)
      m.fail(c.file, key,
             "is not a tensor Megatron's GPT models have (legacy megatron/model or Megatron-core names, as "
             "models/weights/megatron_checkpoint_map.cpp lists them), so no parameter of the configured model "
             "comes from it: gridformer runs no model with such a tensor");
    const bool expert_tensor = rule->layout == Layout::kGrouped1 || rule->layout == Layout::kGrouped2 || expert >= 0;
    if (c.ep > 0 && !expert_tensor) {  // every expert-parallel rank saves the dense tensors: rank 0's are read
      ++m.stats.expert_rank_copies;
      continue;
    }
    m.add_tensor(*rule, layer, expert, c, value->tensor(), key);
  }
}

std::vector<MegatronTensorGroup> MegatronTensorMap::groups() const {
  std::vector<MegatronTensorGroup> out;
  for (const auto& entry : impl_->entries) out.push_back(impl_->group(entry.second));
  return out;
}

const MegatronMapStats& MegatronTensorMap::stats() const { return impl_->stats; }

}  // namespace gf
