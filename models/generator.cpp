#include "models/generator.h"

#include "core/math/gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "parallel/pipeline/stage_link.h"

namespace gf {

namespace {
constexpr int kStageTag = 0x6e71;  // hidden rows between pipeline stages
}  // namespace

Generator::Generator(const TransformerLM& model, const ParallelContext& ctx, const Options& opt)
    : opt_(opt), ctx_(&ctx), model_(&model), spec_(model.spec()) {
  const StageDims& d = model.dims();
  first_ = d.first;
  last_ = d.last;
  l0_ = d.l0;
  l1_ = d.l1;
  if (opt_.slots < 1 || opt_.capacity < 1) throw std::invalid_argument("generation: slots and capacity must be positive");
  if (opt_.max_rows <= 0) opt_.max_rows = std::max(opt_.slots, opt_.capacity);
  if (opt_.max_logit_rows <= 0) opt_.max_logit_rows = std::max<int64_t>(opt_.slots, 1);
  if (spec_.positions > 0 && opt_.capacity > spec_.positions)
    throw std::invalid_argument("generation: " + std::to_string(opt_.capacity) + " positions asked of a model with " +
                                std::to_string(spec_.positions) + " learned positions (max_position_embeddings)");
  // Dropless routing: a token's experts and output do not depend on the rows beside it.
  spec_.moe.capacity_factor = 0.0;
  spec_.flash = false;
  cdt_ = model.layout().compute;
  if (opt_.batch_invariant && cdt_ != ComputeDtype::kFloat32)
    throw std::invalid_argument("batch-invariant generation computes in float32: its products are fp32 matrix-vector "
                                "products (core/math/gemm.h); drop it, or generate with compute_dtype float32");
  V_ = spec_.vocab;
  C_ = spec_.hidden;
  vocab_ = d.vocab;
  Vl_ = vocab_.local;
  const int tp = ctx.size(GridAxis::kTp), ep = ctx.size(GridAxis::kEp);
  for (int64_t l = l0_; l < l1_; ++l) (spec_.moe.is_moe(l) ? any_moe_ : any_dense_) = true;
  if (any_moe_) md_ = MoeBlock::dims(spec_, opt_.max_rows, tp, ep);
  if (spec_.rope)
    rope_ = std::make_unique<ops::RopeTable<float>>(
        rope_table(spec_, opt_.capacity));
  if (spec_.rope && spec_.local_rope_theta > 0)
    rope_local_ = std::make_unique<ops::RopeTable<float>>(rope_table_local(spec_, opt_.capacity));
  ep_ = ExpertParallel(&ctx.group(GridAxis::kEp));
  // LoRA: the blocks read the frozen base, the projections' adapters (unmerged, PEFT's forward) the model's arena.
  const Placement& params = model.base_params();
  if (model.frozen()) {
    if (model.base_in_bf16())
      throw std::invalid_argument("generation from pet_config.base_dtype bfloat16 is not built: generate with base_dtype "
                                  "float32 (the same adapters), or merge them (gridformer convert --merge-lora)");
    lora_scratch_ = AlignedBuffer<float>(static_cast<size_t>(2 * opt_.max_rows * spec_.lora.rank));
  }
  if (first_) {
    embedding_ = EmbeddingBlock(spec_, vocab_);
    embedding_.bind(params, model.names());
    if (model.frozen()) embedding_.bind_saved(model.params(), model.names());  // modules_to_save's copy
  }
  for (int64_t l = l0_; l < l1_; ++l) {
    layers_.emplace_back(spec_, tp, l, rope_.get(), nullptr, ep, opt_.max_rows, rope_local_.get());
    layers_.back().bind(params, model.names());
    if (model.frozen())
      layers_.back().bind_lora(model.params(), model.names(), spec_.lora);
  }
  if (last_) {
    head_ = LmHeadBlock(spec_, vocab_, opt_.max_logit_rows);
    head_.bind(params, model.names());
    if (model.frozen()) head_.bind_saved(model.params(), model.names());
  }
  if (cdt_ != ComputeDtype::kFloat32) {
    low_ = AlignedBuffer<std::byte>(static_cast<size_t>(params.total_floats() * low_copy_element_bytes(cdt_)));
    make_low_copy(cdt_, low_.data(), model.weight_values(), params.total_floats());
  }
  // A sliding window's cache rolls: a call's rows read at most window - 1 positions before its first row,
  // so window + rows per call - 1 positions are enough whatever the sequence's length. Windowed layers beside
  // full ones keep the whole capacity, as the full layers do (one cache shape for every layer).
  cache_positions_ = spec_.window > 0 && !spec_.mixed_windows() ? std::min(opt_.capacity, spec_.window + opt_.max_rows - 1)
                                                                : opt_.capacity;
  cache_floats_ = spec_.mla.on() ? (l1_ - l0_) * opt_.slots * cache_positions_ * MlaProjection::cached_floats_per_position(spec_)
                                 : 2 * (l1_ - l0_) * opt_.slots * (spec_.kv_heads / tp) * cache_positions_ * spec_.head_dim();
  Buffers b;
  lay_out(plan_, b);
  plan_.allocate();
  lay_out(plan_, b_);
  if (!plan_.placed_all()) throw std::logic_error("Generator: the buffer plan was not placed whole");
}

void Generator::lay_out(BufferPlan& p, Buffers& b) const {
  const int64_t R = opt_.max_rows, C = C_, L = l1_ - l0_, tp = ctx_->size(GridAxis::kTp);
  const int64_t Hl = spec_.heads / tp, Hkvl = spec_.kv_heads / tp, D = spec_.head_dim();
  const int64_t qkv = (Hl + 2 * Hkvl) * D, Fl = spec_.ffn / tp;
  const int64_t up = gated_mlp(spec_.mlp) ? 2 * Fl : Fl, NL = opt_.max_logit_rows;
  const bool layer_norm = spec_.norm == NormKind::kLayerNorm;
  auto norm = [&](const std::string& n, int64_t rows) {
    NormBlock::Acts a;
    if (layer_norm) a.mean = p.take(n + ".mean", rows);
    a.rstd = p.take(n + ".rstd", rows);
    return a;
  };
  b.x0 = p.take("residual0", R * C);
  b.x1 = p.take("residual1", R * C);
  TransformerLayer::Acts& a = b.acts;
  a.ln1 = p.take("ln1", R * C);
  a.n1 = norm("norm1", R);
  a.attn.qkv = p.take("qkv", R * qkv);
  a.attn.y = p.take("attn_y", R * Hl * D);
  a.res2 = p.take("res2", R * C);
  a.ln2 = p.take("ln2", R * C);
  a.n2 = norm("norm2", R);
  if (spec_.mla.on()) {
    a.attn.mla = p.take("mla_latents", R * MlaProjection::kept_per_row(spec_));
    a.attn.y_v = p.take("attn_y_v", R * Hl * spec_.mla.v);
    b.mla = p.take("mla.scratch", R * std::max(MlaProjection::scratch_per_row(spec_),
                                                MlaProjection::cached_scratch_per_row(spec_)));
  }
  if (spec_.sandwich_norm) {
    a.attn_out = p.take("attn_out", R * C);
    a.n3 = norm("post_attn_norm", R);
    a.mlp_out = p.take("mlp_out", R * C);
    a.n4 = norm("post_mlp_norm", R);
  }
  if (any_dense_) {
    a.mlp.h = p.take("mlp_h", MlpBlock::act_floats(cdt_, R * up));
    a.mlp.act = p.take("mlp_act", MlpBlock::act_floats(cdt_, R * Fl));
  }
  if (any_moe_) {
    a.moe = MoeBlock::take_acts(p, "moe", md_);
    a.moe.stats = reinterpret_cast<double*>(p.take("moe.stats", 2 * MoeBlock::stats_doubles(md_.E)));
    a.moe_sc = MoeBlock::take_scratch(p, md_, static_cast<int>(tp));
  }
  const bool mla = spec_.mla.on();  // the latent per position (MlaProjection::fwd_cached), no values
  const int64_t per_layer = opt_.slots * cache_positions_ *
                            (mla ? MlaProjection::cached_floats_per_position(spec_) : Hkvl * D);
  b.kv.assign(static_cast<size_t>(L), KvCache{});
  for (int64_t l = 0; l < L; ++l) {
    KvCache& kv = b.kv[static_cast<size_t>(l)];
    kv.k = p.take("layer" + std::to_string(l0_ + l) + (mla ? ".latents" : ".keys"), per_layer);
    kv.v = mla ? nullptr : p.take("layer" + std::to_string(l0_ + l) + ".values", per_layer);
    kv.capacity = cache_positions_;
    kv.positions = opt_.capacity;
  }
  b.scores = p.take("attention_scores", static_cast<int64_t>(omp_get_max_threads()) * opt_.capacity);
  for (KvCache& kv : b.kv) kv.scores = b.scores;
  if (last_) {
    b.sel = p.take("head.rows", NL * C);
    b.ln = p.take("head.final_norm", NL * C);
    b.head_norm = norm("head.final_norm", NL);
    b.logits = p.take("head.logits", NL * Vl_);
    if (vocab_.parallel) b.gathered = p.take("head.logits_gathered", tp * NL * Vl_);
    b.full = p.take("head.logits_full", NL * V_);
  }
  if (tp > 1) {
    b.gather = p.take("tp.gather", R * C);
    b.partial = p.take("tp.partial", R * C);
  }
}

const float* Generator::forward(const int32_t* tokens, const int64_t* seq, const int64_t* pos, int64_t rows,
                                const int64_t* logit_rows, int64_t n_logits) {
  if (rows < 1 || rows > opt_.max_rows)
    throw std::invalid_argument("generation: " + std::to_string(rows) + " rows in one call, planned for at most " +
                                std::to_string(opt_.max_rows));
  if (n_logits < 0 || n_logits > opt_.max_logit_rows)
    throw std::invalid_argument("generation: logits of " + std::to_string(n_logits) + " rows asked, planned for " +
                                std::to_string(opt_.max_logit_rows));
  for (int64_t r = 0; r < rows; ++r) {
    if (tokens[r] < 0 || tokens[r] >= V_)
      throw std::out_of_range("token id " + std::to_string(tokens[r]) + " outside the vocabulary [0, " +
                              std::to_string(V_) + ")");
    if (seq[r] < 0 || seq[r] >= opt_.slots)
      throw std::out_of_range("generation: sequence slot " + std::to_string(seq[r]) + " of " + std::to_string(opt_.slots));
  }
  const RowInvariantProducts invariant(opt_.batch_invariant ? RowInvariance::kEveryRow : RowInvariance::kOff);
  const TensorParallel tp(&ctx_->group(GridAxis::kTp), false, rows);
  BlockEnv e;
  e.tp = &tp;
  e.ep = &ep_;
  e.cdt = cdt_;
  e.weights = const_cast<float*>(model_->base_weights());  // read only: no gradient is computed here
  e.low = low_.data();
  if (model_->frozen()) {  // LoRA: the adapters of the model's arena (their products' scratch here)
    e.lora_w = model_->weight_values();
    e.lora_scratch = lora_scratch_.data();
  }
  e.B = rows;
  e.T = 1;
  e.N = e.Nl = rows;
  e.gather = b_.gather;
  e.partial = b_.partial;
  e.mla_scratch = b_.mla;
  e.info.training = false;
  const RowPositions rp{seq, pos};
  // The previous stage's hidden rows, or the embedding.
  if (first_) {
    embedding_.fwd_at(e, b_.x0, tokens, pos);
  } else {
    StageLink(ctx_->group(GridAxis::kPp)).recv_forward(b_.x0, rows * C_, kStageTag).wait();
  }
  float *x = b_.x0, *out = b_.x1;
  for (size_t l = 0; l < layers_.size(); ++l) {
    TransformerLayer::Acts a = b_.acts;
    a.out = out;
    layers_[l].fwd_cached(e, x, a, b_.kv[l], rp);
    std::swap(x, out);
  }
  if (!last_) {
    StageLink(ctx_->group(GridAxis::kPp)).send_forward(x, rows * C_, kStageTag).wait();
    return nullptr;
  }
  for (int64_t i = 0; i < n_logits; ++i) {
    if (logit_rows[i] < 0 || logit_rows[i] >= rows) throw std::out_of_range("generation: logits of a row not in the call");
    std::memcpy(b_.sel + i * C_, x + logit_rows[i] * C_, sizeof(float) * C_);
  }
  if (n_logits == 0) return b_.full;
  e.N = e.Nl = n_logits;
  head_.logits_fwd(e, b_.logits, b_.ln, b_.head_norm, b_.sel, n_logits);
  if (vocab_.parallel) {
    // Every rank's slice [n, Vl] side by side, then the rows put together: [n, tp Vl].
    const int tps = ctx_->size(GridAxis::kTp);
    const int64_t slice = opt_.max_logit_rows * Vl_;
    std::memcpy(b_.gathered + ctx_->index(GridAxis::kTp) * slice, b_.logits, sizeof(float) * n_logits * Vl_);
    ctx_->group(GridAxis::kTp).allgather(b_.gathered, tps * slice);
    for (int64_t i = 0; i < n_logits; ++i)
      for (int k = 0; k < tps; ++k) {
        const int64_t begin = k * Vl_, n = std::clamp<int64_t>(V_ - begin, 0, Vl_);
        std::memcpy(b_.full + i * V_ + begin, b_.gathered + k * slice + i * Vl_, sizeof(float) * n);
      }
    return b_.full;
  }
  for (int64_t i = 0; i < n_logits; ++i) std::memcpy(b_.full + i * V_, b_.logits + i * Vl_, sizeof(float) * V_);
  return b_.full;
}

}  // namespace gf
