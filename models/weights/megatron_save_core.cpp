// Megatron-core's checkpoint layout written (models/weights/megatron_save.h): the GPTModel of
// megatron/core/models/gpt/gpt_model.py at core_r0.6.0 (the version MindSpeed builds on), its layers as
// gpt_layer_specs.py builds them: get_gpt_layer_local_spec (input_layernorm, pre_mlp_layernorm) or
// get_gpt_layer_with_transformer_engine_spec (the norms fused into TELayerNormColumnParallelLinear as
// linear_qkv.layer_norm_* and, in a dense layer, linear_fc1.layer_norm_*; an MoE layer keeps pre_mlp_layernorm).
// The tensors are those tools/checkpoint/saver_mcore.py (core_r0.6.0) cuts: column-parallel weights and biases
// (linear_qkv, linear_fc1, the padded vocabulary, an untied output_layer) by rows, SwiGLU's fc1 as each rank's gate
// rows then its up rows, row-parallel weights (linear_proj, linear_fc2) by columns, the rest whole; linear_qkv's rows
// per query group (its heads' q rows, then its k and v rows: SelfAttention.get_query_key_value_tensors); the MoE
// router whole, expert-parallel rank r holding experts r x local ... as local_experts.i (SequentialMLP) or as
// GroupedMLP's weight1 / weight2. The reader (megatron_checkpoint_map.cpp) takes all of it back.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include "core/io/safetensors.h"
#include "core/io/torch_save.h"
#include "models/registry.h"
#include "models/weights/hf_config.h"
#include "models/weights/megatron_save_detail.h"

namespace gf::megatron_save_detail {

namespace {

namespace fs = std::filesystem;

enum class Cut { kWhole, kRows, kCols, kRowsGlu };

struct Part {
  std::string name;  // within the layer ("self_attention.linear_qkv.weight") or the model
  Mat full;          // tensor-parallel size 1, Megatron's [out, in]
  Cut cut;
};

struct CoreExpert {
  Mat fc1, fc2;  // [2 F or F, C] (gate rows, then up rows), [C, F]
  std::optional<Mat> fc1_bias, fc2_bias;
};

struct CoreLayer {
  std::vector<Part> tensors;  // norms, attention, router or the dense MLP, in the state dict's order
  std::vector<CoreExpert> experts;
};

struct CoreStage {
  std::vector<Part> head;  // embedding (first stage)
  std::vector<CoreLayer> layers;
  std::vector<Part> tail;  // the final norm and the output layer (last stage)
};

Mat rows_cat(const Mat& a, const Mat& b) {
  Mat out{a.shape, a.v};
  out.shape[0] += b.rows();
  out.v.insert(out.v.end(), b.v.begin(), b.v.end());
  return out;
}

// q [H D, w], k and v [G D, w] (w 1 for a bias) as linear_qkv's rows: for each query group g its H/G heads' q rows,
// then its k rows, then its v rows (tools/checkpoint/loader_llama2_hf.py set_attn_state's cat of the reshapes).
Mat qkv_grouped(const Mat& q, const Mat& k, const Mat& v, int64_t heads, int64_t groups) {
  const int64_t d = q.rows() / heads, per = heads / groups, w = q.cols();
  Mat out{q.shape, {}};
  out.shape[0] = q.rows() + k.rows() + v.rows();
  out.v.reserve(q.v.size() + k.v.size() + v.v.size());
  auto rows = [&](const Mat& m, int64_t first, int64_t n) {
    out.v.insert(out.v.end(), m.v.begin() + first * w, m.v.begin() + (first + n) * w);
  };
  for (int64_t g = 0; g < groups; ++g) {
    rows(q, g * per * d, per * d);
    rows(k, g * d, d);
    rows(v, g * d, d);
  }
  return out;
}

// Rows [first, first + n) of m.
Mat rows_of(const Mat& m, int64_t first, int64_t n) {
  Mat out{m.shape, {m.v.begin() + first * m.cols(), m.v.begin() + (first + n) * m.cols()}};
  out.shape[0] = n;
  return out;
}

// The vocabulary padded to `padded` rows with copies of its last (saver_mcore.py's rule for weights), or with zeros
// (a moment: the padding rows' gradients are 0).
Mat pad_vocab(Mat m, int64_t padded, bool copies) {
  const std::vector<float> last = copies ? std::vector<float>(m.v.end() - m.cols(), m.v.end())
                                         : std::vector<float>(static_cast<size_t>(m.cols()), 0.0f);
  for (int64_t r = m.rows(); r < padded; ++r) m.v.insert(m.v.end(), last.begin(), last.end());
  m.shape[0] = padded;
  return m;
}

Mat cut(const Mat& m, Cut how, int64_t tp, int64_t t) {
  switch (how) {
    case Cut::kRows: return row_chunk(m, tp, t);
    case Cut::kCols: return col_chunk(m, tp, t);
    case Cut::kRowsGlu: return rows_cat(row_chunk(row_chunk(m, 2, 0), tp, t), row_chunk(row_chunk(m, 2, 1), tp, t));
    case Cut::kWhole: break;
  }
  return m;
}

}  // namespace

bool writes_core(const TransformerSpec& s, const MegatronSaveOptions& opt) {
  // megatron/model's GPTModel (285068c): learned positions, LayerNorm, a GELU MLP, biases everywhere, one q|k|v per
  // head, the head tied; and our GPT-2's Conv1D parameters, which megatron_save.cpp transposes.
  const bool gpt2 = !s.rope && s.norm == NormKind::kLayerNorm && s.mlp == MlpKind::kGelu && s.kv_heads == s.heads &&
                    s.tied_head && s.moe.experts <= 1 && !s.mla.on() && s.linear_bias && s.qkv_bias &&
                    s.fused_qkv_param && !s.out_in && !s.qk_norm && !s.sandwich_norm && s.window == 0 &&
                    s.embed_scale == 0.0f && s.head_width == 0;
  return opt.core || !gpt2;
}

std::string core_problem(const ModelConfig& m, const TransformerSpec& s, const MegatronSaveOptions& opt) {
  std::string why;
  auto no = [&](bool bad, const std::string& what) {
    if (bad) why += (why.empty() ? "" : "; ") + what;
  };
  no(s.mla.on(), "latent attention (MLA)");
  no(s.qk_norm, "q/k norms");
  no(s.sandwich_norm, "sandwich norms");
  no(s.window > 0, "a sliding window");
  no(s.embed_scale != 0.0f || s.norm_offset != 0.0f, "a scaled embedding or (1 + w) norms");
  no(s.head_width > 0 && s.head_width * s.heads != s.hidden, "heads wider than hidden_size / num_heads");
  no(s.mlp == MlpKind::kGeGLU, "a GeGLU MLP");
  no(s.rope && s.rope_scaling.rope_type != "default", "RoPE scaling (" + s.rope_scaling.rope_type + ")");
  no(s.linear_bias && !s.qkv_bias, "biases on every projection but q, k and v");
  no(s.attn_scale != 0.0f, "an attention scale other than 1 / sqrt(head_dim)");
  if (s.moe.experts > 1) {
    const MoeSpec& e = s.moe;
    no(e.shared_ffn > 0, "a shared expert");
    no(e.sigmoid || e.groups > 1 || e.expert_bias || e.scale != 1.0f, "DeepSeek's routing");
    no(!e.norm_topk, "top-k weights not renormalised (core_r0.6.0's router takes the softmax of the top-k logits)");
    no(e.ffn > 0 && e.ffn != s.ffn, "experts of another width than the FFN's");
    bool every = true;
    for (int64_t l = 0; l < s.layers; ++l) every = every && e.is_moe(l);
    no(!every, "dense layers between the MoE ones (core_r0.6.0 makes every layer MoE)");
  }
  if (!why.empty())
    return find_model(m.arch, m.type).family + " (" + m.arch + ") has " + why +
           ", which Megatron-core's GPTModel (core_r0.6.0) does not hold";
  if (opt.ep < 1) return "the expert-parallel size must be >= 1";
  if (s.moe.experts <= 1 && opt.ep > 1) return "--expert-model-parallel-size " + std::to_string(opt.ep) + " needs experts";
  if (s.moe.experts > 1 && s.moe.experts % opt.ep != 0)
    return "num_experts " + std::to_string(s.moe.experts) + " is not divisible by the expert-parallel size " +
           std::to_string(opt.ep);
  if (s.kv_heads % opt.tp != 0)
    return "the " + std::to_string(s.kv_heads) + " query groups (key/value heads) are not divisible by the "
           "tensor-parallel size " + std::to_string(opt.tp) + " (core's linear_qkv is cut by whole groups)";
  if (opt.grouped_gemm && s.moe.experts > 1 && s.linear_bias)
    return "--moe-grouped-gemm: GroupedMLP's weight1 / weight2 hold no biases (core_r0.6.0 asserts add_bias_linear is "
           "off), and these experts have them: write them as local_experts (without --moe-grouped-gemm)";
  return "";
}

std::vector<std::string> save_core(const std::string& dir, const ModelConfig& m, const Source& weight,
                                   const MegatronSaveOptions& opt) {
  const ModelEntry& entry = find_model(m.arch, m.type);
  const TransformerSpec s = entry.spec(m);
  const int64_t C = s.hidden, tp = opt.tp, pp = opt.pp, ep = opt.ep, D = s.head_dim();
  const int64_t Hq = s.heads * D, Gk = s.kv_heads * D, F = s.ffn, E = s.moe.experts > 1 ? s.moe.experts : 0;
  const int64_t padded = padded_vocab(s.vocab, opt.make_vocab_size_divisible_by * tp);
  const bool f16 = opt.dtype == TorchDtype::kF16, te = opt.transformer_engine, ln = s.norm == NormKind::kLayerNorm;
  const bool glu = s.mlp == MlpKind::kSwiGLU, bias = s.linear_bias;
  // What stage() reads: the weights (float16's range checked), or a moment (opt.train's, zeros in the padding).
  const Source* src = &weight;
  bool weights = true;
  auto get = [&](Role r, int64_t l, std::vector<int64_t> shape, int64_t e = -1) {
    const std::string n = entry.names(r, l);
    return read_weight(*src, e >= 0 ? expert_name(n, e) : n, std::move(shape), f16 && weights);
  };
  auto lin = [&](Role r, int64_t l, int64_t out, int64_t in, int64_t e = -1) {  // as [out, in]
    return s.out_in ? get(r, l, {out, in}, e) : transposed(get(r, l, {in, out}, e));
  };
  // A norm's weight (and LayerNorm's bias) under `prefix` ("input_layernorm" or TE's "...layer_norm_").
  auto norm = [&](std::vector<Part>& into, const std::string& prefix, Role w, Role b, int64_t l) {
    const bool fused = prefix.ends_with("_");
    into.push_back({prefix + (fused ? "weight" : ".weight"), get(w, l, {C}), Cut::kWhole});
    if (ln) into.push_back({prefix + (fused ? "bias" : ".bias"), get(b, l, {C}), Cut::kWhole});
  };
  auto layer = [&](int64_t l) {
    CoreLayer y;
    auto& t = y.tensors;
    norm(t, te ? "self_attention.linear_qkv.layer_norm_" : "input_layernorm", Role::kNorm1W, Role::kNorm1B, l);
    Mat q, k, v;
    if (s.fused_qkv_param) {
      const Mat all = lin(Role::kQkvW, l, Hq + 2 * Gk, C);
      q = rows_of(all, 0, Hq), k = rows_of(all, Hq, Gk), v = rows_of(all, Hq + Gk, Gk);
    } else {
      q = lin(Role::kQW, l, Hq, C), k = lin(Role::kKW, l, Gk, C), v = lin(Role::kVW, l, Gk, C);
    }
    t.push_back({"self_attention.linear_qkv.weight", qkv_grouped(q, k, v, s.heads, s.kv_heads), Cut::kRows});
    if (s.qkv_bias) {  // add_bias_linear's, or --add-qkv-bias's alone (Qwen2)
      Mat qb, kb, vb;
      if (s.fused_qkv_param) {
        Mat all = get(Role::kQkvB, l, {Hq + 2 * Gk});
        qb = rows_of(all, 0, Hq), kb = rows_of(all, Hq, Gk), vb = rows_of(all, Hq + Gk, Gk);
      } else {
        qb = get(Role::kQB, l, {Hq}), kb = get(Role::kKB, l, {Gk}), vb = get(Role::kVB, l, {Gk});
      }
      t.push_back({"self_attention.linear_qkv.bias", qkv_grouped(qb, kb, vb, s.heads, s.kv_heads), Cut::kRows});
    }
    t.push_back({"self_attention.linear_proj.weight", lin(Role::kOW, l, C, Hq), Cut::kCols});
    if (bias) t.push_back({"self_attention.linear_proj.bias", get(Role::kOB, l, {C}), Cut::kWhole});
    norm(t, te && !E ? "mlp.linear_fc1.layer_norm_" : "pre_mlp_layernorm", Role::kNorm2W, Role::kNorm2B, l);
    if (E) {
      // The router is [E, C] in every family (models/blocks/moe.cpp), GPT-2's Conv1D [in, out] convention aside.
      t.push_back({"mlp.router.weight", get(Role::kRouterW, l, {E, C}), Cut::kWhole});
      for (int64_t e = 0; e < E; ++e) {
        CoreExpert x;
        x.fc1 = glu ? rows_cat(lin(Role::kExpertGateW, l, F, C, e), lin(Role::kExpertUpW, l, F, C, e))
                    : lin(Role::kExpertUpW, l, F, C, e);
        x.fc2 = lin(Role::kExpertDownW, l, C, F, e);
        if (bias) x.fc1_bias = get(Role::kExpertUpB, l, {F}, e), x.fc2_bias = get(Role::kExpertDownB, l, {C}, e);
        y.experts.push_back(std::move(x));
      }
      return y;
    }
    if (glu)
      t.push_back({"mlp.linear_fc1.weight", rows_cat(lin(Role::kGateW, l, F, C), lin(Role::kUpW, l, F, C)), Cut::kRowsGlu});
    else
      t.push_back({"mlp.linear_fc1.weight", lin(Role::kFcW, l, F, C), Cut::kRows});
    if (bias) t.push_back({"mlp.linear_fc1.bias", get(Role::kFcB, l, {F}), Cut::kRows});
    t.push_back({"mlp.linear_fc2.weight", lin(Role::kDownW, l, C, F), Cut::kCols});
    if (bias) t.push_back({"mlp.linear_fc2.bias", get(Role::kDownB, l, {C}), Cut::kWhole});
    return y;
  };
  const int64_t per_stage = s.layers / pp;
  auto stage = [&](int64_t p) {
    CoreStage st;
    const bool first = p == 0, last = p == pp - 1;
    std::optional<Mat> word;
    if (first || (last && s.tied_head)) word = pad_vocab(get(Role::kEmbed, -1, {s.vocab, C}), padded, weights);
    if (first) {
      st.head.push_back({"embedding.word_embeddings.weight", *word, Cut::kRows});
      if (!s.rope) st.head.push_back({"embedding.position_embeddings.weight", get(Role::kPosEmbed, -1, {s.positions, C}), Cut::kWhole});
    }
    for (int64_t l = p * per_stage; l < (p + 1) * per_stage; ++l) st.layers.push_back(layer(l));
    if (last) {
      st.tail.push_back({"decoder.final_layernorm.weight", get(Role::kFinalNormW, -1, {C}), Cut::kWhole});
      if (ln) st.tail.push_back({"decoder.final_layernorm.bias", get(Role::kFinalNormB, -1, {C}), Cut::kWhole});
      // gpt_model.py: the output layer's own weight when untied; a tied one's copy on a last stage that is not
      // also the first (which allocates none: skip_weight_param_allocation).
      if (!s.tied_head)
        st.tail.push_back({"output_layer.weight", pad_vocab(get(Role::kLmHead, -1, {s.vocab, C}), padded, weights), Cut::kRows});
      else if (!first)
        st.tail.push_back({"output_layer.weight", *word, Cut::kRows});
    }
    return st;
  };
  // An `_extra_state`: None from core's parallel linears (get_extra_state), an empty uint8 tensor from Transformer
  // Engine's modules (without fp8 state).
  auto extra = [&](bool te_module) { return te_module ? TorchOut::tensor(TorchDtype::kU8, {0}, {}) : TorchOut::none(); };
  auto model_of = [&](const CoreStage& st, int64_t p, int64_t t, int64_t r, TorchDtype dtype) {
    auto shard = [&](const Mat& full, Cut how) {  // tensor-parallel rank t's cut, in `dtype`
      const Mat c = cut(full, how, tp, t);
      return TorchOut::tensor(dtype, c.shape, c.v);
    };
    auto out = [&](const Part& x) { return shard(x.full, x.cut); };
    TorchOut d = TorchOut::dict(TorchOut::Kind::kOrderedDict);
    for (const Part& x : st.head) d.set(x.name, out(x));
    const int64_t local = E / ep;
    for (size_t i = 0; i < st.layers.size(); ++i) {
      const CoreLayer& y = st.layers[i];
      const std::string n = "decoder.layers." + std::to_string(i) + ".";
      for (const Part& x : y.tensors) d.set(n + x.name, out(x));
      if (E && opt.grouped_gemm) {  // GroupedMLP: weight1.view(local, C, -1)[i] is expert i's fc1 shard transposed
        Mat w1{{C, 0}, {}}, w2{{0, C}, {}};
        for (int64_t j = 0; j < local; ++j) {
          const CoreExpert& x = y.experts[static_cast<size_t>(r * local + j)];
          const Mat a = transposed(cut(x.fc1, glu ? Cut::kRowsGlu : Cut::kRows, tp, t));
          const Mat b = transposed(cut(x.fc2, Cut::kCols, tp, t));
          w1.shape[1] += a.cols(), w2.shape[0] += b.rows();
          w1.v.insert(w1.v.end(), a.v.begin(), a.v.end());
          w2.v.insert(w2.v.end(), b.v.begin(), b.v.end());
        }
        d.set(n + "mlp.experts.weight1", TorchOut::tensor(dtype, w1.shape, w1.v));
        d.set(n + "mlp.experts.weight2", TorchOut::tensor(dtype, w2.shape, w2.v));
      } else {
        for (int64_t j = 0; j < local; ++j) {
          const CoreExpert& x = y.experts[static_cast<size_t>(r * local + j)];
          const std::string e = n + "mlp.experts.local_experts." + std::to_string(j) + ".";
          d.set(e + "linear_fc1.weight", shard(x.fc1, glu ? Cut::kRowsGlu : Cut::kRows));
          if (x.fc1_bias) d.set(e + "linear_fc1.bias", shard(*x.fc1_bias, Cut::kRows));
          d.set(e + "linear_fc1._extra_state", extra(false));
          d.set(e + "linear_fc2.weight", shard(x.fc2, Cut::kCols));
          if (x.fc2_bias) d.set(e + "linear_fc2.bias", shard(*x.fc2_bias, Cut::kWhole));
          d.set(e + "linear_fc2._extra_state", extra(false));
        }
      }
      std::vector<std::string> modules{"self_attention.linear_qkv"};
      if (te) modules.push_back("self_attention.core_attention");
      modules.push_back("self_attention.linear_proj");
      if (!E) modules.insert(modules.end(), {"mlp.linear_fc1", "mlp.linear_fc2"});
      for (const std::string& mod : modules) d.set(n + mod + "._extra_state", extra(te));
    }
    for (const Part& x : st.tail) d.set(x.name, out(x));
    if (p == pp - 1) d.set("output_layer._extra_state", TorchOut::none());
    return d;
  };
  // float16: every stage read once before anything is written (or removed), as megatron_save.cpp does.
  if (f16)
    for (int64_t p = 0; p < pp; ++p) (void)stage(p);
  const fs::path it_dir = iteration_dir(dir, opt.iteration);
  std::vector<std::string> files;
  for (int64_t p = 0; p < pp; ++p) {
    const CoreStage st = stage(p);
    std::optional<CoreStage> moments[2];
    if (opt.train)
      for (int k = 0; k < 2; ++k) {
        const Source moment = [&, k](const std::string& n) { return opt.train->moment(k, n); };
        src = &moment, weights = false;
        moments[k] = stage(p);
        src = &weight, weights = true;
      }
    for (int64_t r = 0; r < ep; ++r)
      for (int64_t t = 0; t < tp; ++t) {
        TorchOut root = TorchOut::dict();
        root.set("args", megatron_args(m, s, opt, padded, true))
            .set("checkpoint_version", TorchOut::real(3.0))
            .set("iteration", TorchOut::integer(std::max<int64_t>(0, opt.iteration)))
            .set("model", model_of(st, p, t, r, opt.dtype));
        std::optional<TorchOut> distrib;
        if (opt.train) {
          const TorchDtype f32 = TorchDtype::kF32;
          // The fp32 main parameters: under fp32 the model itself (its tensors' bytes are shared, not copied).
          const TorchOut master = opt.dtype == f32 ? root.entries.back().second : model_of(st, p, t, r, f32);
          const TorchOut m1 = model_of(*moments[0], p, t, r, f32), m2 = model_of(*moments[1], p, t, r, f32);
          if (opt.distributed_optimizer) {
            // DistributedDataParallel turns bucketing off on every pipeline stage but the first (core_r0.6.0 on).
            MegatronDistributedOut o =
                distributed_optimizer_state(*opt.train, opt.dtype, master, m1, m2, opt.dp, p == 0 ? opt.bucket_size : 0,
                                            s.moe.experts > 1 ? ep : 1, r, pp > 1 && s.tied_head);
            root.set("optimizer", std::move(o.optimizer));
            distrib = std::move(o.distrib);
          } else {
            root.set("optimizer", optimizer_state(*opt.train, opt.dtype, master, m1, m2, true, ep > 1));
          }
          root.set("opt_param_scheduler", scheduler_state(*opt.train));
        }
        const fs::path d = it_dir / rank_dir(t, p, pp, r, ep);
        std::error_code ec;
        fs::create_directories(d, ec);
        if (ec) throw std::runtime_error(d.string() + ": cannot create: " + ec.message());
        files.push_back((d / "model_optim_rng.pt").string());
        torch_save(files.back(), root);
        if (distrib) torch_save((d / "distrib_optim.pt").string(), *distrib);
      }
  }
  write_tracker(dir, opt.iteration);
  return files;
}

TorchOut megatron_args(const ModelConfig& m, const TransformerSpec& s, const MegatronSaveOptions& opt, int64_t padded,
                       bool core) {
  TorchOut a = TorchOut::dict(TorchOut::Kind::kNamespace);
  a.set("num_layers", TorchOut::integer(s.layers))
      .set("hidden_size", TorchOut::integer(s.hidden))
      .set("ffn_hidden_size", TorchOut::integer(s.ffn))
      .set("num_attention_heads", TorchOut::integer(s.heads))
      .set("kv_channels", TorchOut::integer(s.head_dim()))
      .set("max_position_embeddings", TorchOut::integer(s.rope ? s.max_positions : s.positions))
      .set("seq_length", TorchOut::integer(s.seq))
      .set("add_position_embedding", TorchOut::boolean(true))
      .set("position_embedding_type", TorchOut::string(s.rope ? "rope" : "learned_absolute"))
      .set("make_vocab_size_divisible_by", TorchOut::integer(opt.make_vocab_size_divisible_by))
      .set("padded_vocab_size", TorchOut::integer(padded))
      .set("tokenizer_type", TorchOut::string(opt.tokenizer_type))
      .set("tensor_model_parallel_size", TorchOut::integer(opt.tp))
      .set("pipeline_model_parallel_size", TorchOut::integer(opt.pp))
      .set("virtual_pipeline_model_parallel_size", TorchOut::none())
      .set(core ? "norm_epsilon" : "layernorm_epsilon", TorchOut::real(float_decimal(s.norm_eps)))
      .set("normalization", TorchOut::string(s.norm == NormKind::kRMSNorm ? "RMSNorm" : "LayerNorm"))
      .set("swiglu", TorchOut::boolean(s.mlp == MlpKind::kSwiGLU))
      .set("add_bias_linear", TorchOut::boolean(s.linear_bias))
      .set("untie_embeddings_and_output_weights", TorchOut::boolean(!s.tied_head))
      // gelu_new (tanh's approximation) is Megatron's openai_gelu; gelu is F.gelu (erf). bias_gelu_fusion
      // would run the tanh form whatever openai_gelu says, so it is off.
      .set("openai_gelu", TorchOut::boolean(m.hidden_act == "gelu_new"))
      .set("bias_gelu_fusion", TorchOut::boolean(false))
      .set("apply_residual_connection_post_layernorm", TorchOut::boolean(false))
      .set("hidden_dropout", TorchOut::real(float_decimal(s.hidden_dropout)))
      .set("attention_dropout", TorchOut::real(float_decimal(s.attention_dropout)))
      .set("init_method_std", TorchOut::real(float_decimal(s.init_std)))
      .set("fp16", TorchOut::boolean(opt.dtype == TorchDtype::kF16))
      .set("bf16", TorchOut::boolean(opt.dtype == TorchDtype::kBF16))
      .set("iteration", TorchOut::integer(std::max<int64_t>(0, opt.iteration)))
      .set("consumed_train_samples", TorchOut::integer(opt.consumed_train_samples))
      .set("consumed_valid_samples", TorchOut::integer(0))
      .set("use_distributed_optimizer", TorchOut::boolean(opt.train && opt.distributed_optimizer));
  if (opt.train && opt.distributed_optimizer)
    a.set("data_parallel_size", TorchOut::integer(opt.dp))
        .set("overlap_grad_reduce", TorchOut::boolean(opt.bucket_size > 0))
        .set("ddp_bucket_size", opt.bucket_size > 0 ? TorchOut::integer(opt.bucket_size) : TorchOut::none());
  if (opt.train) a.set("global_batch_size", TorchOut::integer(opt.train->global_batch));
  if (!core) return a;
  const bool experts = s.moe.experts > 1;
  a.set("use_mcore_models", TorchOut::boolean(true))
      .set("transformer_impl", TorchOut::string(opt.transformer_engine ? "transformer_engine" : "local"))
      .set("group_query_attention", TorchOut::boolean(s.kv_heads != s.heads))
      .set("num_query_groups", TorchOut::integer(s.kv_heads != s.heads ? s.kv_heads : 1))  // --num-query-groups' default 1
      .set("add_qkv_bias", TorchOut::boolean(s.qkv_bias && !s.linear_bias))  // add_bias_linear gives q, k, v theirs
      .set("rotary_percent", TorchOut::real(1.0))
      // --rotary-base is an int in Megatron's arguments; a fractional base is kept as it is
      .set("rotary_base", s.rope_theta == std::floor(s.rope_theta) ? TorchOut::integer(static_cast<int64_t>(s.rope_theta))
                                                                     : TorchOut::real(s.rope_theta))
      .set("rotary_interleaved", TorchOut::boolean(false))
      .set("qk_layernorm", TorchOut::boolean(false))
      .set("apply_layernorm_1p", TorchOut::boolean(false))
      .set("squared_relu", TorchOut::boolean(false))
      .set("expert_model_parallel_size", TorchOut::integer(opt.ep))
      .set("num_experts", experts ? TorchOut::integer(s.moe.experts) : TorchOut::none())
      .set("moe_router_topk", TorchOut::integer(experts ? s.moe.topk : 2))
      .set("moe_grouped_gemm", TorchOut::boolean(experts && opt.grouped_gemm))
      .set("moe_aux_loss_coeff", TorchOut::real(experts ? float_decimal(s.moe.aux_factor) : 0.0));
  return a;
}

Mat read_weight(const Source& src, const std::string& name, std::vector<int64_t> shape, bool f16) {
  Mat t{std::move(shape), src(name)};
  if (f16)
    if (const int64_t i = first_float16_overflow(t.v.data(), t.v.size()); i >= 0)
      throw std::runtime_error(float16_overflow_message(name, i, t.v[i]));
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  if (n != static_cast<int64_t>(t.v.size()))
    throw std::runtime_error(name + ": " + std::to_string(t.v.size()) + " values, expected " + std::to_string(n));
  return t;
}

}  // namespace gf::megatron_save_detail
