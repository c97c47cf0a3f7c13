// Megatron-LM checkpoints written (models/weights/megatron_save.h). The layout is the one
// megatron_checkpoint*.cpp reads back and tools/make_megatron_golden.py writes with PyTorch; the names and
// cuts are transcribed from megatron/model/transformer.py, language_model.py and gpt_model.py (285068c) and
// tools/checkpoint/saver_megatron.py (core_r0.6.0).
#include "models/weights/megatron_save.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>

#include "core/io/safetensors.h"
#include "core/io/torch_save.h"
#include "models/registry.h"
#include "models/weights/megatron_save_detail.h"
#include "models/weights/hf_config.h"

namespace gf {

namespace {

namespace fs = std::filesystem;
using namespace megatron_save_detail;

// q | k | v rows ([3 H, ...], each block `heads` heads of hn rows) regrouped per head: for each head its q, k
// and v rows ([np, 3, hn]: megatron/model/transformer.py ParallelAttention's query_key_value, checkpoint
// version 2.0 and later), so that a row chunk of it is a tensor-parallel rank's heads.
Mat qkv_per_head(const Mat& m, int64_t heads) {
  const int64_t hidden = m.rows() / 3, hn = hidden / heads, width = m.cols();
  Mat out{m.shape, std::vector<float>(m.v.size())};
  int64_t dst = 0;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t part = 0; part < 3; ++part)
      for (int64_t r = 0; r < hn; ++r, ++dst) {
        const int64_t src = part * hidden + h * hn + r;
        std::copy_n(m.v.begin() + src * width, width, out.v.begin() + dst * width);
      }
  return out;
}

}  // namespace

bool megatron_writes_core(const ModelConfig& m, const MegatronSaveOptions& opt) {
  return writes_core(find_model(m.arch, m.type).spec(m), opt);
}

std::string megatron_distributed_problem(const ModelConfig& m, const MegatronSaveOptions& opt) {
  const TransformerSpec s = find_model(m.arch, m.type).spec(m);
  if (opt.ep > 1 && s.moe.experts > 1 && opt.cp > 1)
    return "expert parallelism with context parallelism (core_r0.6.0 refuses the two together, so has no chained "
           "distributed optimizer of them to write)";
  if (opt.ep > 1 && s.moe.experts > 1 && opt.dp % opt.ep != 0)
    return "the data-parallel size " + std::to_string(opt.dp) + " is not divisible by the expert-parallel size " +
           std::to_string(opt.ep) + " (the experts' optimizer runs over dp / ep ranks)";
  if (opt.dp < 1) return "the data-parallel size must be >= 1";
  return "";
}

std::string megatron_save_problem(const ModelConfig& m, const MegatronSaveOptions& opt) {
  const ModelEntry& entry = find_model(m.arch, m.type);
  const TransformerSpec s = entry.spec(m);
  if (writes_core(s, opt))
    if (std::string why = core_problem(m, s, opt); !why.empty()) return why;
  if (m.hidden_act == "fast_gelu")
    return "`hidden_act: fast_gelu` (x sigmoid(1.702 x)) has no Megatron counterpart (its GELU is erf's, or tanh's "
           "with openai_gelu)";
  if (opt.tp < 1 || opt.pp < 1) return "the tensor- and pipeline-parallel sizes must be >= 1";
  if (s.heads % opt.tp != 0)
    return "num_heads " + std::to_string(s.heads) + " is not divisible by the tensor-parallel size " + std::to_string(opt.tp);
  if (s.ffn % opt.tp != 0)
    return "the FFN width " + std::to_string(s.ffn) + " is not divisible by the tensor-parallel size " + std::to_string(opt.tp);
  if (s.layers % opt.pp != 0)
    return "num_layers " + std::to_string(s.layers) + " is not divisible by the pipeline-parallel size " +
           std::to_string(opt.pp) + " (Megatron splits layers evenly)";
  if (opt.dtype != TorchDtype::kF32 && opt.dtype != TorchDtype::kF16 && opt.dtype != TorchDtype::kBF16)
    return "the weights' dtype must be float32, float16 or bfloat16";
  return "";
}

std::vector<std::string> save_megatron(const std::string& dir, const ModelConfig& m,
                                       const std::function<std::vector<float>(const std::string&)>& weight,
                                       const MegatronSaveOptions& opt) {
  if (const std::string p = megatron_save_problem(m, opt); !p.empty()) throw std::invalid_argument(p);
  const ModelEntry& entry = find_model(m.arch, m.type);
  const TransformerSpec s = entry.spec(m);
  if (opt.train && opt.iteration < 0)
    throw std::invalid_argument("save_megatron: the optimizer state is written with an iteration, not as a release");
  if (opt.train && opt.distributed_optimizer)
    if (const std::string why = megatron_distributed_problem(m, opt); !why.empty()) throw std::invalid_argument(why);
  if (writes_core(s, opt)) return save_core(dir, m, weight, opt);
  const int64_t H = s.hidden, L = s.layers, tp = opt.tp, pp = opt.pp;
  const int64_t padded = padded_vocab(s.vocab, opt.make_vocab_size_divisible_by * tp);
  // float16 weights: a value beyond its range is refused by its name here, not written as inf.
  auto getter = [&](const Source& src, bool f16) {
    return [&entry, src, f16](Role role, int64_t layer, std::vector<int64_t> shape) {
      return read_weight(src, entry.names(role, layer), std::move(shape), f16);
    };
  };
  auto args = [&] { return megatron_args(m, s, opt, padded, false); };

  // One pipeline stage's tensors of a source (the weights, or a moment), whole (TP 1), in Megatron's layout.
  struct Layer {
    Mat n1w, n1b, qkvw, qkvb, projw, projb, n2w, n2b, fc1w, fc1b, fc2w, fc2b;
  };
  struct Stage {
    Mat word, position, fw, fb;
    std::vector<Layer> layers;
  };
  const int64_t per_stage = L / pp;
  // pad_rows: the padded vocabulary's rows copy the last (saver_megatron.py's rule for weights); a moment's are 0.
  auto stage_of = [&](const Source& src, int64_t p, bool pad_rows) {
    auto get = getter(src, pad_rows && opt.dtype == TorchDtype::kF16);  // pad_rows: the weights (moments stay fp32)
    Stage st;
    const bool first = p == 0, last = p == pp - 1;
    if (first || last) {
      st.word = get(Role::kEmbed, -1, {s.vocab, H});
      st.word.v.reserve(static_cast<size_t>(padded * H));
      const std::vector<float> last_row(st.word.v.end() - H, st.word.v.end());
      for (int64_t r = s.vocab; r < padded; ++r) {
        if (pad_rows) st.word.v.insert(st.word.v.end(), last_row.begin(), last_row.end());
        else st.word.v.insert(st.word.v.end(), static_cast<size_t>(H), 0.0f);
      }
      st.word.shape[0] = padded;
    }
    if (first) st.position = get(Role::kPosEmbed, -1, {s.positions, H});
    if (last) {
      st.fw = get(Role::kFinalNormW, -1, {H});
      st.fb = get(Role::kFinalNormB, -1, {H});
    }
    for (int64_t l = p * per_stage; l < (p + 1) * per_stage; ++l) {
      Mat qkvw = qkv_per_head(transposed(get(Role::kQkvW, l, {H, 3 * H})), s.heads);
      Mat qkvb = get(Role::kQkvB, l, {3 * H});
      qkvb.shape = {3 * H, 1};
      qkvb = qkv_per_head(qkvb, s.heads);
      qkvb.shape = {3 * H};
      st.layers.push_back({get(Role::kNorm1W, l, {H}), get(Role::kNorm1B, l, {H}), std::move(qkvw), std::move(qkvb),
                           transposed(get(Role::kOW, l, {H, H})), get(Role::kOB, l, {H}), get(Role::kNorm2W, l, {H}),
                           get(Role::kNorm2B, l, {H}), transposed(get(Role::kFcW, l, {H, s.ffn})),
                           get(Role::kFcB, l, {s.ffn}), transposed(get(Role::kDownW, l, {s.ffn, H})),
                           get(Role::kDownB, l, {H})});
    }
    return st;
  };
  // Tensor-parallel rank t's model state dict of stage p, in `dtype`.
  auto model_of = [&](const Stage& st, int64_t p, int64_t t, TorchDtype dtype) {
    auto out = [dtype](const Mat& m) { return TorchOut::tensor(dtype, m.shape, m.v); };
    const bool first = p == 0, last = p == pp - 1;
    TorchOut encoder = TorchOut::dict(TorchOut::Kind::kOrderedDict);
    for (size_t k = 0; k < st.layers.size(); ++k) {
      const Layer& y = st.layers[k];
      const std::string n = "layers." + std::to_string(k) + ".";
      encoder.set(n + "input_layernorm.weight", out(y.n1w))
          .set(n + "input_layernorm.bias", out(y.n1b))
          .set(n + "self_attention.query_key_value.weight", out(row_chunk(y.qkvw, tp, t)))
          .set(n + "self_attention.query_key_value.bias", out(row_chunk(y.qkvb, tp, t)))
          .set(n + "self_attention.dense.weight", out(col_chunk(y.projw, tp, t)))
          .set(n + "self_attention.dense.bias", out(y.projb))
          .set(n + "post_attention_layernorm.weight", out(y.n2w))
          .set(n + "post_attention_layernorm.bias", out(y.n2b))
          .set(n + "mlp.dense_h_to_4h.weight", out(row_chunk(y.fc1w, tp, t)))
          .set(n + "mlp.dense_h_to_4h.bias", out(row_chunk(y.fc1b, tp, t)))
          .set(n + "mlp.dense_4h_to_h.weight", out(col_chunk(y.fc2w, tp, t)))
          .set(n + "mlp.dense_4h_to_h.bias", out(y.fc2b));
    }
    if (last) encoder.set("final_layernorm.weight", out(st.fw)).set("final_layernorm.bias", out(st.fb));
    TorchOut lm = TorchOut::dict(TorchOut::Kind::kOrderedDict);
    if (first) {
      TorchOut embedding = TorchOut::dict(TorchOut::Kind::kOrderedDict);
      embedding.set("word_embeddings", state_dict_of({{"weight", out(row_chunk(st.word, tp, t))}}))
          .set("position_embeddings", state_dict_of({{"weight", out(st.position)}}));
      lm.set("embedding", std::move(embedding));
    }
    lm.set("encoder", std::move(encoder));
    TorchOut model = TorchOut::dict(TorchOut::Kind::kOrderedDict);
    model.set("language_model", std::move(lm));
    if (last && !first)  // the last stage's copy of the tied embedding (GPTModel's word_embeddings_for_head)
      model.set("word_embeddings_for_head", state_dict_of({{"weight", out(row_chunk(st.word, tp, t))}}));
    return model;
  };
  // float16: every stage's weights are read once before anything is written (or removed), so that a weight
  // beyond float16's range is refused with the old iteration directory still in place. Twice the reading,
  // one stage's weights in memory at a time, as the writing below.
  if (opt.dtype == TorchDtype::kF16)
    for (int64_t p = 0; p < pp; ++p) (void)stage_of(weight, p, true);
  const fs::path it_dir = iteration_dir(dir, opt.iteration);
  std::error_code ec;

  std::vector<std::string> files;
  for (int64_t p = 0; p < pp; ++p) {
    const Stage weights = stage_of(weight, p, true);
    std::optional<Stage> moments[2];
    if (opt.train)
      for (int k = 0; k < 2; ++k)
        moments[k] = stage_of([&, k](const std::string& n) { return opt.train->moment(k, n); }, p, false);
    for (int64_t t = 0; t < tp; ++t) {
      TorchOut root = TorchOut::dict();
      root.set("args", args())
          .set("checkpoint_version", TorchOut::real(3.0))
          .set("iteration", TorchOut::integer(std::max<int64_t>(0, opt.iteration)))
          .set("model", model_of(weights, p, t, opt.dtype));
      const fs::path d = it_dir / rank_dir(t, p, pp);
      fs::create_directories(d, ec);
      if (ec) throw std::runtime_error(d.string() + ": cannot create: " + ec.message());
      if (opt.train && opt.distributed_optimizer) {
        // 285068c's distributed optimizer: model_rng.pt, and each data-parallel rank's optimizer state and scheduler
        // in mp_rank_TT[_PPP]_DDD/optim.pt (megatron/checkpointing.py get_checkpoint_names at 285068c).
        const std::vector<TorchOut> ranks = dp_rank_optimizer_states(
            *opt.train, opt.dtype, model_of(weights, p, t, TorchDtype::kF32), model_of(*moments[0], p, t, TorchDtype::kF32),
            model_of(*moments[1], p, t, TorchDtype::kF32), opt.dp);
        const std::string file = (d / "model_rng.pt").string();
        torch_save(file, root);
        files.push_back(file);
        for (size_t r = 0; r < ranks.size(); ++r) {
          char suffix[32];
          std::snprintf(suffix, sizeof suffix, "_%03zu", r);
          const fs::path od = it_dir / (rank_dir(t, p, pp) + suffix);
          fs::create_directories(od, ec);
          if (ec) throw std::runtime_error(od.string() + ": cannot create: " + ec.message());
          TorchOut optim = TorchOut::dict();
          optim.set("optimizer", ranks[r]).set("opt_param_scheduler", scheduler_state(*opt.train));
          torch_save((od / "optim.pt").string(), optim);
        }
        continue;
      }
      if (opt.train) {
        const TorchOut master = model_of(weights, p, t, TorchDtype::kF32);
        root.set("optimizer", optimizer_state(*opt.train, opt.dtype, master, model_of(*moments[0], p, t, TorchDtype::kF32),
                                              model_of(*moments[1], p, t, TorchDtype::kF32), false, false))
            .set("opt_param_scheduler", scheduler_state(*opt.train));
      }
      const std::string file = (d / "model_optim_rng.pt").string();
      torch_save(file, root);
      files.push_back(file);
    }
  }
  write_tracker(dir, opt.iteration);
  return files;
}

namespace megatron_save_detail {

std::string iteration_dir(const std::string& dir, int64_t iteration) {
  char b[32];
  std::snprintf(b, sizeof b, "iter_%07lld", static_cast<long long>(iteration));
  const fs::path it_dir = fs::path(dir) / (iteration < 0 ? std::string("release") : std::string(b));
  std::error_code ec;
  fs::remove_all(it_dir, ec);
  fs::create_directories(it_dir, ec);
  if (ec) throw std::runtime_error(it_dir.string() + ": cannot create: " + ec.message());
  return it_dir.string();
}

void write_tracker(const std::string& dir, int64_t iteration) {
  const fs::path tracker = fs::path(dir) / "latest_checkpointed_iteration.txt";
  std::ofstream tr(tracker, std::ios::trunc);
  tr << (iteration < 0 ? std::string("release") : std::to_string(iteration));
  if (!tr.flush()) throw std::runtime_error(tracker.string() + ": cannot write");
}

}  // namespace megatron_save_detail

}  // namespace gf
