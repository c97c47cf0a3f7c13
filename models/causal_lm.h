// What the trainer needs of a causal language model: its parameters in a flat arena, a forward
// that returns the summed token loss of a micro-batch, and a backward that accumulates gradients.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/math/aligned_buffer.h"
#include "core/math/mixed_precision.h"
#include "core/params/placement.h"
#include "core/params/weight_gate.h"
#include "models/layout.h"
#include "models/model_config.h"

namespace gf {

struct StepInfo {
  int64_t step = 0;           // optimizer step (keys the dropout masks)
  int64_t sample_offset = 0;  // global index of this micro-batch's first sample
  bool training = true;       // dropout on
};

// The router of one MoE layer over the last forward's micro-batch (this rank's sequences; under
// tensor parallel every rank of the group holds the same figures).
struct MoeLayerStats {
  int64_t layer = 0;
  double aux_sum = 0;  // sum over the micro-batch's sequences of the balancing loss aux_s (unweighted)
  double z_sum = 0;    // sum over the micro-batch's tokens of logsumexp(router logits)^2 (unweighted)
  std::vector<int64_t> tokens_per_expert;  // (token, slot) assignments per expert, before capacity
  std::vector<int64_t> kept_per_expert;    // the same after capacity: the rows each expert computes
  int64_t dropped = 0;                     // assignments that capacity dropped
  double margin = INFINITY;                // the routing choice nearest a tie (ops::RouteStats::margin)
};

// Adds `add`'s figures to `into`'s layer by layer (a layer new to `into` is appended): the router
// statistics of several micro-batches.
inline void accumulate_moe_stats(std::vector<MoeLayerStats>& into, const std::vector<MoeLayerStats>& add) {
  for (const MoeLayerStats& m : add) {
    MoeLayerStats* x = nullptr;
    for (MoeLayerStats& y : into)
      if (y.layer == m.layer) x = &y;
    if (x == nullptr) {
      into.push_back(m);
      continue;
    }
    x->aux_sum += m.aux_sum;
    x->z_sum += m.z_sum;
    x->dropped += m.dropped;
    x->margin = std::min(x->margin, m.margin);
    for (size_t e = 0; e < m.tokens_per_expert.size(); ++e) x->tokens_per_expert[e] += m.tokens_per_expert[e];
    for (size_t e = 0; e < m.kept_per_expert.size(); ++e) x->kept_per_expert[e] += m.kept_per_expert[e];
  }
}

// The inputs and targets of a batch's rows as the model reads them (inputs [:, :T] and targets
// [:, 1:] of the tokens, copied in): kNotTrainedBit cleared from the inputs; a target that carries it,
// or (documents.eod_mask_loss) whose input is the end-of-document token, becomes -1 (not trained).
void split_targets(const ModelConfig& cfg, int32_t* inputs, int32_t* targets, int64_t n);
// The targets of tokens [rows, T + 1] that split_targets leaves trained.
int64_t trained_targets(const ModelConfig& cfg, const int32_t* tokens, int64_t rows, int64_t T);
// Megatron's get_ltor_masks_and_position_ids for inputs [B, T]: a document ends at each input equal
// to `eod`. positions[i]: the position of row i in its document (reset_position_ids; else i % T);
// key_lo[i]: the first key row i sees: its document's first row (reset_attention_mask), and with a
// sliding window W no earlier than i - W + 1; else 0.
void document_layout(const DocumentConfig& docs, int64_t eod, const int32_t* inputs, int64_t B, int64_t T,
                     int32_t* positions, int32_t* key_lo, int64_t window = 0);

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const ModelLayout& layout() const = 0;  // how the run splits and recomputes it
  // Its parameters as this rank holds them: each one's description, local shape and arena offset.
  virtual const Placement& params() const = 0;
  virtual float* weights() = 0;
  // The weights for reading (a checkpoint's save): unlike weights(), the low-precision copy stays current.
  virtual const float* weight_values() const = 0;
  virtual float* grads() = 0;
  virtual int64_t micro_batch() const = 0;

  // tokens: [micro_batch, seq_length + 1]; inputs are [:, :T], targets [:, 1:] (split_targets).
  // Returns the sum over the micro-batch's trained targets of the cross-entropy loss.
  virtual double forward(const int32_t* tokens, const StepInfo& info) = 0;
  // After forward: accumulates into grads() the gradient of grad_scale times the summed loss plus,
  // for MoE, the router losses: grad_scale * (sum of token losses
  //   + aux_loss_factor * T * sum over MoE layers of aux_sum + z_loss_factor * sum over MoE layers of z_sum)
  // (aux_sum, z_sum as moe_stats() gives them). With grad_scale = 1 / (global sequences * T), the
  // objective is the mean token loss + aux_loss_factor * (per layer, the mean over the global batch's
  // sequences of aux_s) + z_loss_factor * (per layer, the mean over its tokens of lse^2).
  virtual void backward(float grad_scale) = 0;
  // The MoE layers' router statistics of the last forward (empty for a dense model).
  virtual std::vector<MoeLayerStats> moe_stats() const { return {}; }
  // The MoE layers' aux-loss-free balancing biases held here (moe_config.moe_router_enable_expert_bias): (layer,
  // arena offset of its [experts] bias), which the trainer moves after each step.
  virtual std::vector<std::pair<int64_t, int64_t>> expert_bias_offsets() const { return {}; }
  // Logits of the last forward, [B*T, padded vocab / tp] row-major (valid until backward).
  virtual const float* logits() const = 0;
  virtual int64_t logits_ld() const = 0;

  // Bytes of activations planned for one micro-batch (for the memory report).
  virtual int64_t activation_bytes() const = 0;
  // Bytes of the weights' low-precision copy that mixed precision computes from (0 in fp32).
  virtual int64_t weight_copy_bytes() const { return 0; }
  // That copy (make_low_copy's layout, indexed like the arena) and its element type; nullptr in fp32.
  // The optimizer may write it while it updates the weights, then call weight_copy_is_current():
  // the next forward uses it instead of converting the weights again. Any call of weights() (the
  // mutable access, through which weights are changed) makes the copy stale until a forward
  // refreshes it.
  virtual void* weight_copy() { return nullptr; }
  virtual ComputeDtype weight_copy_dtype() const { return ComputeDtype::kFloat32; }
  virtual void weight_copy_is_current() {}
  // False for a pipeline stage, which holds only its layers' parameters (a checkpoint's other
  // tensors are then another stage's, not an error).
  virtual bool whole_model() const { return true; }
  // Megatron's model FLOPs for one forward+backward over `tokens_per_step` tokens.
  virtual double flops_per_step(int64_t batch) const = 0;

  // Called during backward with an arena offset: every gradient at or after it is final on this
  // rank (parameters finish from the end of the arena towards the front). The trainer uses it to
  // start data-parallel reductions while backward goes on.
  void set_grad_ready_hook(std::function<void(int64_t)> hook) { grad_ready_ = std::move(hook); }
  // ZeRO-2 and 3 with the head's weight cut into vocabulary chunks (set_fine_units): unit_ready(offset)
  // says the unit starting there has its final gradient now, out of the arena's order (the head's
  // chunks, as its backward finishes each); it returns false when the reductions are not armed (a
  // micro-batch before the last: the gradient accumulates whole). add_rows(base, width, ids, rows, n)
  // adds, after such a unit's reduction, n rows of `width` floats to rows ids[i] (-1: none) of the
  // gradient of the matrix at arena offset `base` (a tied embedding's lookup gradient).
  using AddRows = std::function<void(int64_t, int64_t, const int32_t*, const float*, int64_t)>;
  void set_unit_ready_hooks(std::function<bool(int64_t)> unit_ready, AddRows add_rows) {
    unit_ready_ = std::move(unit_ready);
    add_rows_ = std::move(add_rows);
  }
  // ZeRO-2 and 3's finer units (weight_unit_starts() names them): the head's weight in vocabulary
  // chunks, so the head (and a tied embedding) gathers and reduces one chunk at a time, and each layer
  // in two halves (attention, MLP), gathered and reduced apart.
  virtual void set_fine_units(bool on) { (void)on; }
  // With them on: the arena offsets where the chunks start (empty: the weight is not cut).
  virtual std::vector<int64_t> vocab_chunk_offsets() const { return {}; }

  void init_weights(uint64_t seed) { params().initialize(weights(), seed); }
  // LoRA (models/lora.h): the frozen base model of each model chunk as a CausalLM whose params() and weights()
  // are the base's (what a checkpoint of the base model is loaded into); empty without LoRA. Its forward and
  // backward are the owner's, not its own.
  virtual std::vector<CausalLM*> frozen_bases() { return {}; }
  // LoRA: the frozen base's initial values from the seed (a run that loads no base model).
  virtual void init_frozen(uint64_t seed) { (void)seed; }
  // LoRA: called once the frozen bases hold their weights (loaded or initialised): pet_config.base_dtype
  // bfloat16 rounds the layers' weights to bf16 and gives their fp32 pages back.
  virtual void frozen_loaded() {}
  // LoRA with PEFT's modules_to_save: each module trained whole starts as the frozen base's copy (PEFT deep-copies
  // the module): its values in weights() set from the base's, within the arena ranges `only` (ZeRO-3: this rank's
  // slices; empty: everywhere). Nothing without such modules.
  virtual void lora_saved_from_base(const std::vector<std::pair<int64_t, int64_t>>& only) { (void)only; }
  // ZeRO-2 and 3 (parallel/zero.h): the arena offsets where the blocks' parameters start (the
  // embedding, each layer, an MoE layer's experts, the final norm and head), which cut it into units.
  virtual std::vector<int64_t> weight_unit_starts() const { return {}; }
  // ZeRO-3: every block asks `gate` for its weights before it reads them and hands them back after
  // (nullptr: the weights are always whole). With a gate the weights' low-precision copy is made unit
  // by unit as the gate brings them (convert_low), not for the whole arena before a forward.
  virtual void set_weight_gate(WeightGate* gate) { (void)gate; }
  // The low-precision copy of arena floats [begin, end) from the weights (a no-op in fp32), and the
  // copy's pages of that range given back.
  virtual void convert_low(int64_t begin, int64_t end) { (void)begin; (void)end; }
  virtual void release_low(int64_t begin, int64_t end) { (void)begin; (void)end; }
  // Loads a Hugging Face GPT-2-style safetensors file into the weights (see load_hf_checkpoint), or
  // a MindSpore .ckpt of MindFormers' GPT-2 (models/weights/mindspore_checkpoint.h). Returns a note for the
  // log (for a .ckpt: the entries it skipped); empty for safetensors.
  std::string load_hf_checkpoint(const std::string& path);

 protected:
  void grads_ready_from(int64_t offset) {
    if (grad_ready_) grad_ready_(offset);
  }
  bool unit_grads_ready(int64_t offset) { return unit_ready_ && unit_ready_(offset); }
  void add_grad_rows(int64_t base, int64_t width, const int32_t* ids, const float* rows, int64_t n) {
    if (add_rows_) add_rows_(base, width, ids, rows, n);
  }

 private:
  std::function<void(int64_t)> grad_ready_;
  std::function<bool(int64_t)> unit_ready_;
  AddRows add_rows_;
};

// The file load_hf_checkpoint reads for `given`: a directory means its model.safetensors (or its
// index); a .ckpt file is MindSpore's. Throws, naming the config key `key`, for a directory without
// either. The config loader calls it so that a bad path stops every rank before any work.
std::string resolve_checkpoint_path(const std::string& given, const std::string& key = "load_checkpoint");

}  // namespace gf
