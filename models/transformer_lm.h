// A decoder-only transformer assembled from the blocks (models/blocks/): embedding, a range of
// transformer layers, the final norm, LM head and loss. GPT-2 and Llama are a TransformerSpec and a
// NameMap each (models/arch/gpt2.cpp, models/arch/llama.cpp).
//
// A TransformerLM may be a pipeline stage: it runs layers [layer_begin, layer_end) of the model,
// with the embedding when the range starts at 0 and the head and loss when it ends at the last
// layer, taking the hidden state in and giving it out, on `slots` micro-batch slots whose
// activations are planned once. Its backward runs fused, or as an input pass and a weight pass
// that may run later (defer_weight_grads keeps what the weight pass reads per slot). Every
// buffer is sized by lay_out() before anything is allocated, so `plan` can size a run without
// building it (activation_plan).
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/params/buffer_plan.h"
#include "core/ops/flash_attention.h"
#include "core/ops/rope.h"
#include "models/blocks/embedding.h"
#include "models/blocks/lm_head.h"
#include "models/blocks/transformer_layer.h"
#include "models/causal_lm.h"
#include "models/layout.h"
#include "parallel/parallel_context.h"
#include "parallel/tensor_parallel.h"

namespace gf {

// The MoE layers' spec from cfg.moe (experts 0 when the model is dense).
MoeSpec moe_spec(const ModelConfig& cfg);

struct StageOptions {
  int64_t layer_begin = 0, layer_end = -1;  // -1: the last layer
  int64_t slots = 1;
  bool defer_weight_grads = false;
  // On the last stage: one logits buffer ([tokens, vocab], the largest) for every slot, and the head's
  // weight gradient in the input pass rather than the weight pass. For schedules that run each
  // micro-batch's backward right after its forward on this stage (1F1B's and ZB-H1's last stage),
  // so that deferring the other layers' weight passes does not keep a logits buffer per slot.
  bool share_logits = false;
};

// The parameters of several TransformerLMs that one rank runs as model chunks (an interleaved
// pipeline stage): one Placement over all their parameters, and one set of weights, gradients and
// low-precision copy, owned by the caller (models/pipeline_stage.h). A chunk binds its blocks to
// its own parameters in it by name.
struct SharedArena {
  const Placement* params = nullptr;
  float* weights = nullptr;
  float* grads = nullptr;
  std::byte* low = nullptr;
  bool* low_current = nullptr;  // whether `low` holds the weights as they are now
};

// The sizes a layout gives one rank: everything lay_out() needs, computed without a communicator.
struct StageDims {
  // T: the positions of a sample held here (seq_length / cp); T_full: seq_length.
  int64_t B = 0, T = 0, N = 0, Nl = 0, C = 0, L = 0, l0 = 0, l1 = 0, slots = 1, T_full = 0;
  int tp = 1, cp = 1;
  bool cp_ring = false;  // context parallel by ring attention (its core keeps the log-sum-exp, as the fused one)
  int cp_ulysses = 1;    // Ulysses' all-to-all over this many context ranks (ulysses_cp: cp; hybrid_cp: between)
  bool keeps_lse() const { return flash || cp_ring; }
  bool first = true, last = true, defer = false, low_precision = false, flash = false, share_logits = false;
  bool document_resets = false;  // documents.resets() or a sliding window: per-row positions and attention bounds
  bool mixed_windows = false;    // TransformerSpec::mixed_windows: with reset_attention_mask, two bounds per row
  bool reset_mask = false;       // documents.reset_attention_mask
  bool sandwich_norm = false;    // TransformerSpec::sandwich_norm: each sublayer's output and its norm's kept
  int64_t qkv_width = 0, attn_width = 0, heads_local = 0, head_dim = 0, ffn_local = 0, up_width = 0;
  int64_t head_rows = 0, dlogits_low_floats = 0, flash_floats = 0;
  // LoRA's pet_config.loss_vocab_chunk: the frozen head's logits this many vocabulary rows at a time (0: whole).
  int64_t loss_chunk = 0;
  // A dense MLP's kept up product and activation (MlpBlock::act_floats: bf16 under bf16 compute, mlp_bf16).
  int64_t h_floats = 0, act_floats = 0;
  // A kept norm output that bf16 products alone read: bf16 alone under bf16 compute (norm_bf16;
  // TransformerLayer::ln1_keeps_bf16, and ln2 in a dense layer).
  bool norm_bf16 = false;
  int64_t ln_floats = 0;
  // The attention's kept q|k|v and core output: bf16 alone for the fused core under bf16 compute
  // (AttentionBlock::keeps_core_bf16), RoPE then working in the backward's q|k|v gradient scratch
  // (BlockEnv::qkv_rope).
  bool core_bf16 = false, rope = false, qk_norm = false;
  int64_t qk_pre_floats = 0, qk_rstd_floats = 0;  // AttentionBlock::Acts::qk_pre, qk_rstd (q/k norms)
  int64_t mla_kept_floats = 0, y_v_floats = 0, mla_scratch_floats = 0;  // MLA: Acts::mla, y_v, BlockEnv::mla_scratch
  int64_t qkv_floats = 0, attn_y_floats = 0;
  int64_t flash_bf16_floats = 0;  // the fused core's bf16 scratch (ops::flash_bf16_scratch_floats), bf16 compute only
  ops::FlashTiles flash_tiles;  // the fused core's tiles (ops::flash_tiles for the compute dtype)
  bool layer_norm = true;
  VocabSlice vocab;
  std::vector<bool> recomputed;  // per layer of the model (ModelLayout::recomputes)
  bool full_recompute = false;
  int ep = 1;          // expert_parallel
  MoeSpec moe;         // which layers are MoE
  MoeBlock::Dims md;   // their buffers' sizes (when any)
  bool any_moe = false, any_dense = true;
  Recompute mode(int64_t layer) const {
    if (layer >= static_cast<int64_t>(recomputed.size()) || !recomputed[layer]) return Recompute::kNone;
    return full_recompute ? Recompute::kFull : Recompute::kSelective;
  }
  // Refuses a context-parallel layout the model cannot run (std::invalid_argument naming the key).
  static void context_parallel_check(const TransformerSpec& s, const ModelLayout& layout);
  // tp size: layout.tp.
  static StageDims make(const TransformerSpec& s, const ModelConfig& cfg, const ModelLayout& layout,
                        int64_t micro_batch, int tp_rank, const StageOptions& st);
};

class TransformerLM : public CausalLM {
 public:
  // layout.tp and layout.ep must be the context's tensor and expert parallel sizes.
  TransformerLM(const TransformerSpec& spec, NameMap names, const ModelConfig& cfg, const ModelLayout& layout,
                int64_t micro_batch, const ParallelContext& ctx, const StageOptions& stage = {},
                const SharedArena* arena = nullptr);

  // The parameters of this spec under these names, whatever the layout: the stage's (its layers,
  // the embedding on the first stage, the final norm and head on the last, the token embedding
  // on a last stage whose head is tied to it).
  // With LoRA (spec.lora.on) these are the adapters' (models/lora.h), the parameters that train; the frozen
  // base model's are make_base_table's.
  static ParamTable make_param_table(const TransformerSpec& spec, const NameMap& names,
                                     const StageOptions& stage = {});
  // The model's own parameters, whether or not LoRA freezes them.
  static ParamTable make_base_table(const TransformerSpec& spec, const NameMap& names, const StageOptions& stage = {});
  // Those of several stages (model chunks) in one table, in chunk order, each name once.
  static ParamTable make_param_table(const TransformerSpec& spec, const NameMap& names,
                                     const std::vector<StageOptions>& chunks);
  // How the layout lays parameters out on its layout.tp tensor-parallel ranks: layout.vocab_split
  // splits the vocabulary (padded for tp ranks), else it is replicated (padded for one). The experts
  // are divided over layout.ep ranks.
  static ParamLayout param_layout(const ModelConfig& cfg, const ModelLayout& layout);
  // That table placed on tensor-parallel rank tp_rank of layout.tp (and expert-parallel rank ep_rank).
  static Placement make_placement(const TransformerSpec& spec, const NameMap& names, const ModelConfig& cfg,
                                  const ModelLayout& layout, int tp_rank, const StageOptions& stage = {},
                                  int ep_rank = 0);
  // The frozen base's placement under LoRA (make_base_table's).
  static Placement make_placement_base(const TransformerSpec& spec, const NameMap& names, const ModelConfig& cfg,
                                       const ModelLayout& layout, int tp_rank, const StageOptions& stage = {},
                                       int ep_rank = 0);
  // Every activation, workspace and scratch buffer of a rank of this layout, sized but not allocated.
  static BufferPlan activation_plan(const TransformerSpec& spec, const ModelConfig& cfg, const ModelLayout& layout,
                                    int64_t micro_batch, int tp_rank, const StageOptions& stage = {});

  const ModelConfig& config() const override { return cfg_; }
  const ModelLayout& layout() const override { return layout_; }
  const TransformerSpec& spec() const { return spec_; }
  const NameMap& names() const { return names_; }
  const Placement& params() const override { return params_; }
  float* weights() override {
    *low_current_ = false;
    return w_;
  }
  const float* weight_values() const override { return w_; }
  float* grads() override { return g_; }
  int64_t micro_batch() const override { return dims_.B; }
  double forward(const int32_t* tokens, const StepInfo& info) override;
  void backward(float grad_scale) override;
  std::vector<int64_t> weight_unit_starts() const override;
  // The same for a placement of these chunks' parameters, without a model (`plan`): where the
  // embedding, each layer, each MoE layer's experts and the head start.
  static std::vector<int64_t> unit_starts(const TransformerSpec& spec, const NameMap& names, const Placement& t,
                                          int tp, int ep, const std::vector<StageOptions>& chunks);
  // ZeRO-3's weight gathers (parallel/zero.h's WeightStream, as stage_forward and stage_backward ask for the units),
  // for `plan`: the arena ranges these chunks' blocks read, each with how many times one micro-batch gathers it. The
  // embedding's lookup once (its backward reads no weight); a layer's units in its forward and again in its backward
  // (twice when the backward is split into input and weight passes; recompute reruns the forward inside the
  // backward's gather); the head's likewise (its backward whole in the input pass under share_logits); and a tied
  // embedding's token table by the head as well, where the head is on this stage. A unit is gathered the sum of the
  // times of the ranges it meets. Empty under LoRA (the adapters' units are not streamed).
  struct GatherRange {
    int64_t begin = 0, end = 0;
    int times = 0;
  };
  static std::vector<GatherRange> gather_ranges(const TransformerSpec& spec, const NameMap& names, const Placement& t,
                                                int tp, int ep, const std::vector<StageOptions>& chunks);
  void set_weight_gate(WeightGate* gate) override { gate_ = gate; }
  void set_fine_units(bool on) override;
  std::vector<int64_t> vocab_chunk_offsets() const override;
  // ZeRO-2 and 3's vocabulary chunks of the head's weight: its local vocabulary rows where each chunk
  // starts, then the row count; empty where the weight is not cut (one chunk would hold it, or a tied
  // weight whose embedding lives on another pipeline stage). Chunks are no larger than the largest
  // layer unit (`dense`: where the layers start, then the head; `experts`: where the layers' experts
  // start), so the head holds no more at once than a layer does.
  static std::vector<int64_t> vocab_chunk_rows(const TransformerSpec& spec, const NameMap& names, const Placement& t,
                                               bool holds_embedding, std::vector<int64_t> dense,
                                               std::vector<int64_t> experts);
  void convert_low(int64_t begin, int64_t end) override;
  void release_low(int64_t begin, int64_t end) override;
  const float* logits() const override {
    if (dims_.loss_chunk > 0) throw std::logic_error("the logits are not held under pet_config.loss_vocab_chunk");
    return slots_[0].head.logits;
  }
  int64_t logits_ld() const override { return dims_.vocab.local; }
  int64_t activation_bytes() const override {
    return plan_.bytes() + static_cast<int64_t>((lora_scratch_.size() + lora_drop_.size()) * sizeof(float));
  }
  std::vector<CausalLM*> frozen_bases() override {
    return base_view_ ? std::vector<CausalLM*>{base_view_.get()} : std::vector<CausalLM*>{};
  }
  void init_frozen(uint64_t seed) override;
  void frozen_loaded() override;
  void lora_saved_from_base(const std::vector<std::pair<int64_t, int64_t>>& only) override;
  // LoRA: the frozen base's parameters and weights (params() and weights() are the adapters').
  bool frozen() const { return spec_.lora.on; }
  bool base_in_bf16() const { return !base_ranges_.empty(); }
  const Placement& base_params() const { return spec_.lora.on ? base_params_ : params_; }
  const float* base_weights() const { return spec_.lora.on ? bw_ : w_; }
  int64_t weight_copy_bytes() const override { return static_cast<int64_t>(low_.size()); }
  void* weight_copy() override { return cdt_ == ComputeDtype::kFloat32 ? nullptr : lowp_; }
  ComputeDtype weight_copy_dtype() const override { return cdt_; }
  void weight_copy_is_current() override { *low_current_ = cdt_ != ComputeDtype::kFloat32; }
  double flops_per_step(int64_t batch) const override;
  // The same for a spec, before anything is built (`gridformer plan`): Megatron's model FLOPs of a step of
  // `batch` sequences (forward and backward; recompute's second forward not counted).
  static double model_flops(const TransformerSpec& s, int64_t batch);
  std::vector<MoeLayerStats> moe_stats() const override;
  std::vector<std::pair<int64_t, int64_t>> expert_bias_offsets() const override {
    std::vector<std::pair<int64_t, int64_t>> v;
    for (const TransformerLayer& l : layers_)
      if (l.expert_bias_offset() >= 0) v.emplace_back(l.layer(), l.expert_bias_offset());
    return v;
  }
  // Diagnostics (gridformer replay): with `on`, every forward and backward checks, in execution order,
  // the outputs of the embedding, of each layer's attention (its residual sum, when the layer is not
  // recomputed) and of the whole layer, the loss, and the residual gradient out of the head and each
  // layer, and records the first that is not finite ("" while none; cleared by set_finite_check).
  void set_finite_check(bool on) {
    check_finite_ = on;
    first_nonfinite_.clear();
  }
  const std::string& first_nonfinite() const { return first_nonfinite_; }

  // The stage interface. tokens: [B, T + 1] (the first stage reads the inputs, the last the
  // targets); hidden_in: [Nl, C] for a stage that does not start at layer 0. Returns the summed
  // loss on the last stage, 0 elsewhere.
  const StageDims& dims() const { return dims_; }
  double stage_forward(int64_t slot, const int32_t* tokens, const float* hidden_in, const StepInfo& info);
  const float* stage_output(int64_t slot) const;  // [Nl, C], stages before the last
  // dhidden_out: [Nl, C] for a stage before the last. kInput leaves input_grad() (stages after the
  // first); kWeight then accumulates the weight gradients. The two passes need
  // defer_weight_grads (which keeps per slot what the weight pass reads); kBoth runs them fused.
  void stage_backward(int64_t slot, BwdPass pass, const float* dhidden_out, float grad_scale);
  const float* input_grad() const { return scratch_.dres; }
  // Called between layers in stage_forward and stage_backward: the pipeline executor advances its
  // messages there (MPI moves a large message only while the sender or receiver is inside MPI).
  void set_progress_hook(std::function<void()> hook) { progress_ = std::move(hook); }
  // The router statistics of the forward that ran last in `slot` (empty for a dense model).
  std::vector<MoeLayerStats> moe_stats(int64_t slot) const;

 private:
  struct Slot {
    int32_t *inputs = nullptr, *targets = nullptr;
    // ModelConfig::documents resets (and always under context parallel: the rows' global positions).
    // key_lo covers the whole sequence (B x T_full): the attention core sees all of it.
    int32_t *positions = nullptr, *key_lo = nullptr;
    int32_t* key_lo_full = nullptr;  // windowed and full layers with documents: the full layers' bounds
    float *xin = nullptr, *emb = nullptr;
    float* demb = nullptr;  // defer_weight_grads, first stage: the embedding's output gradient
    std::vector<TransformerLayer::Acts> layers;
    std::vector<TransformerLayer::Grads> stash;  // defer_weight_grads: per layer
    LmHeadBlock::Acts head;
    StepInfo info;
  };
  struct Buffers {
    std::vector<Slot> slots;
    TransformerLayer::Grads scratch;
    MoeBlock::Scratch moe;
    float* flash = nullptr;
    float* flash_bf16 = nullptr;
    float *gather = nullptr, *partial = nullptr, *dfull = nullptr;
    float* mla = nullptr;  // BlockEnv::mla_scratch
    ContextScratch cp;
    int32_t* cp_ints = nullptr;  // context parallel: the micro-batch's whole inputs, targets and positions
  };
  static void lay_out(const StageDims& d, BufferPlan& p, Buffers& b);
  struct LayoutBuilder;  // lay_out's parts (transformer_lm.cpp)
  BlockEnv env(const Slot& s);
  int64_t lora_unit_offset(int64_t layer, bool mlp) const;
  // LoRA's part of the constructor: the bf16 base's layer ranges, the adapters' ZeRO-3 units (the blocks bound).
  void lora_layout();
  // Where the gradients final after `layer`'s backward (its MLP half's alone: mlp) begin in the arena.
  int64_t ready_offset(const TransformerLayer& layer, bool mlp) const;  // LoRA: ZeRO-3's unit of a layer's half (-1: none)
  static int64_t lora_half_offset(const NameMap& names, const Placement& adapters, int64_t layer, bool mlp);
  void context_rows(Slot& s, const int32_t* tokens);
  const float* layer_input(const Slot& s, int64_t l) const;
  TransformerLayer::Grads layer_grads(const Slot& s, int64_t l) const;

  TransformerSpec spec_;
  NameMap names_;
  ModelConfig cfg_;
  ModelLayout layout_;
  StageDims dims_;
  TensorParallel tp_;
  ExpertParallel ep_;
  ContextParallel cp_;
  ContextScratch cps_;
  int32_t* cp_ints_ = nullptr;
  Placement params_;
  // LoRA: the frozen base's placement and weights (this chunk's own), the adapters' product scratch
  // [N, 2 r], and the base as a CausalLM for the loaders (frozen_bases).
  Placement base_params_;
  AlignedBuffer<float> base_weights_, lora_scratch_, lora_drop_;
  // pet_config.base_dtype bfloat16: each layer's base weights held as bf16 alone (base_low_), widened into their fp32
  // range of bw_ (base_ranges_[i], layer l0 + i) while the layer runs and given back after (BaseWeights).
  AlignedBuffer<bf16> base_low_;
  std::vector<std::pair<int64_t, int64_t>> base_ranges_;
  struct BaseWeights {
    BaseWeights(TransformerLM& m, size_t layer);
    ~BaseWeights();
    TransformerLM& m;
    size_t i;
  };
  void narrow_base();
  bool base_narrowed_ = false;  // base_low_ holds the layers' weights
  float* bw_ = nullptr;
  std::unique_ptr<CausalLM> base_view_;
  ComputeDtype cdt_ = ComputeDtype::kFloat32;
  AlignedBuffer<float> weights_, grads_;
  AlignedBuffer<std::byte> low_;  // the weights' low-precision copy (see CausalLM::weight_copy)
  bool own_low_current_ = false;
  // The arena: this model's own buffers above, or a SharedArena's.
  float *w_ = nullptr, *g_ = nullptr;
  std::byte* lowp_ = nullptr;
  bool* low_current_ = &own_low_current_;
  std::unique_ptr<ops::RopeTable<float>> rope_, rope_local_;  // rope_local_: TransformerSpec::local_rope_theta's
  ops::FlashWorkspace<float> flash_ws_;
  EmbeddingBlock embedding_;
  std::vector<TransformerLayer> layers_;  // layers [l0, l1)
  LmHeadBlock head_;
  BufferPlan plan_;
  std::vector<Slot> slots_;
  TransformerLayer::Grads scratch_;
  float *gather_ = nullptr, *partial_ = nullptr, *dfull_ = nullptr;
  float* qkv_rope_ = nullptr;
  float* mla_scratch_ = nullptr;
  std::function<void()> progress_;
  bool check_finite_ = false;
  std::string first_nonfinite_;
  // With check_finite_: records `what` when p[0, n) holds a value that is not finite and nothing was recorded yet.
  void check_finite(const float* p, int64_t n, const std::string& what);
  void progress() const {
    if (gate_) gate_->progress();
    if (progress_) progress_();
  }
  WeightGate* gate_ = nullptr;
  // The arena offsets each block reads (ZeRO-3's units): the embedding, layer l - l0, the head.
  std::vector<int64_t> emb_reads_, head_reads_;
  // set_fine_units: the head's chunks (its weight's rows; enter/leave bound per call), on or off, and
  // whether this backward's head handed its chunks' gradients over (a tied embedding then adds its rows
  // through add_grad_rows).
  VocabChunks chunks_;
  std::vector<int64_t> head_all_reads_;  // the head's reads with every chunk (a backward split into passes)
  std::vector<int64_t> chunk_rows_;
  bool chunks_on_ = false, chunks_reduced_ = false;
  int64_t chunk_offset(size_t c) const { return head_.weight_offset() + chunk_rows_[c] * dims_.C; }
  const std::vector<int64_t> no_reads_;  // a block with no successor (bound by reference: no vector per call)
  std::vector<std::vector<int64_t>> layer_reads_;
  // set_fine_units: each layer's two halves read apart (its attention's unit, its MLP's and experts').
  bool halves_ = false;
  std::vector<std::vector<int64_t>> attn_reads_, mlp_reads_;
  void need(const std::vector<int64_t>& now, const std::vector<int64_t>& next) const {
    if (gate_) gate_->need(now, next);
  }
  void done(const std::vector<int64_t>& now) const {
    if (gate_) gate_->done(now);
  }
};

}  // namespace gf
