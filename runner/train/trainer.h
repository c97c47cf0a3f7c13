// The training loop: data -> forward -> backward -> gradient sync -> unscale/overflow check ->
// clip -> AdamW step -> log -> (checkpoint). One Trainer per rank; communicators come in the
// ParallelContext. Defined in runner/train/trainer.cpp (the step loop), runner/train/trainer_setup.cpp
// (construction, the set-up and resource reports), runner/train/step_log.cpp (the step lines) and
// runner/train/weight_gather.cpp (save_weights).
#pragma once
#include <array>
#include <atomic>
#include <nlohmann/json_fwd.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/optim/adamw.h"
#include "core/optim/lr_schedule.h"
#include "models/causal_lm.h"
#include "parallel/grad_sync.h"
#include "parallel/parallel_context.h"
#include "runner/train/batch_source.h"
#include "runner/train/spike_monitor.h"
#include "runner/config/config.h"
#include "runner/report/interval_meter.h"
#include "runner/report/machine_probe.h"
#include "runner/report/step_comm.h"
#include "runner/report/step_time.h"
#include "engine/step_engine.h"

namespace gf {

class MetricsLog;  // runner/report/metrics_log.h

// A checkpoint that could not be saved (every rank throws the same one; run() stops with status 4).
struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace ckpt {
class Reader;
struct Piece;
// Reads local elements [i0, i0 + n) of a tensor into dst (core/io/checkpoint.h).
using LocalReader = std::function<void(int64_t i0, int64_t n, float* dst)>;
}
// The weights of one of our checkpoints into `model`, under its layout (runner/train/checkpointing.cpp):
// refuses a checkpoint with a tensor the configured model lacks, or without one it needs.
void read_checkpoint_weights(ckpt::Reader& r, CausalLM& model, const Config& cfg);
// LoRA (models/lora.h): the frozen bases of `model` from a base model at `path` (any format the trainer reads);
// and the base one of our LoRA checkpoints names ("" for another path, or a LoRA run over the seed's base).
std::string load_lora_base(CausalLM& model, const Config& cfg, const std::string& path);
std::string lora_base_of(const std::string& path);
bool holds_lora_adapters(const std::string& path);  // one of our checkpoints of a LoRA run
// A PEFT adapter directory (adapter_config.json + adapter_model.safetensors; runner/train/lora_peft_in.cpp): its
// base (base_model_name_or_path, a local path) into the frozen bases, then its adapters into the model's arena.
// Throws naming the key for an r, lora_alpha or use_rslora that differ from pet_config's, a missing or extra adapter.
bool is_peft_adapter_dir(const std::string& path);
// Returns the base's path.
std::string load_peft_adapters(CausalLM& model, const Config& cfg, const std::string& dir);

struct StepResult {
  double loss = 0.0;       // mean token loss over the global batch
  double grad_norm = 0.0;  // before clipping, after unscaling
  double lr = 0.0;
  double loss_scale = 1.0;
  bool skipped = false;    // no update: overflow under dynamic loss scaling, or a spike skipped
  // A spike: the global norm above MindFormers' absolute threshold (use_skip_data_by_global_norm: skipped),
  // or the loss or norm against the running statistic (monitor_config.spike_action: warned, skipped or
  // stopped at); `spike_why` says which.
  bool spike = false, spike_stop = false;
  std::string spike_why;
  // MoE: per MoE layer over the global batch, and the router losses (unweighted, summed over the
  // layers) that the objective adds to `loss` with moe_config's factors.
  struct MoeLayer {
    int64_t layer = 0;
    double aux = 0, z = 0;  // mean over sequences of aux_s; mean over tokens of lse^2
    int64_t tokens_max = 0, dropped = 0, assignments = 0;
    double tokens_mean = 0;
    std::vector<int64_t> tokens;  // assignments per expert (before capacity)
    double margin = INFINITY;     // the routing choice nearest a tie over every rank (MoeLayerStats::margin)
  };
  std::vector<MoeLayer> moe;
  double aux_loss = 0.0, z_loss = 0.0;
  double objective = 0.0;  // loss + aux_loss_factor * aux_loss + z_loss_factor * z_loss
  double local_loss = 0.0;  // this rank's summed token loss of its micro-batches, before any reduction
  // Pipeline parallelism: of this step, the time each stage did not compute over the slowest
  // stage's time in the schedule (mean and worst over the stages), and the schedule's analytic bubble.
  double bubble = -1, bubble_max = -1, bubble_analytic = -1;
};

class Trainer {
 public:
  // `machine`: the fp32 GEMM backend and machine probe this rank uses (apply_machine_probe, in
  // main); without one the MFU peak is runner_config.peak_tflops or the built-in default.
  explicit Trainer(const Config& cfg, ParallelContext& ctx, MachineSetup machine = {});
  // With a given data source instead of the one the config names (tests, benchmarks).
  Trainer(const Config& cfg, ParallelContext& ctx, std::unique_ptr<BatchSource> data);
  ~Trainer();
  // Trains for the configured number of steps (from the step after start_step()). Returns the
  // process exit status: 0 done, 130/143 stopped by SIGINT/SIGTERM, 3 non-finite loss, 4 a
  // checkpoint could not be saved (the earlier ones are untouched). Rank 0 first appends a run_start line
  // to metrics.jsonl; each log line's timing is over the steps since the last one (step 1 alone).
  int run();

  // One optimizer step on global batch `step - 1` (step counts from 1).
  StepResult train_step(int64_t step);
  // Mean token loss over eval_iters global batches of the validation split (no dropout).
  double evaluate();
  CausalLM& model() { return *model_; }
  const AdamW& optimizer() const { return *opts_.front(); }
  int64_t total_steps() const { return total_steps_; }
  int64_t eval_batches() const { return eval_batches_; }
  // Writes the full weights (gathered over the tensor-parallel group; Hugging Face names, F32)
  // as a safetensors file from world rank 0. Collective: every rank calls.
  void save_weights(const std::string& path);
  // Peak RSS per rank and bytes sent per group, logged by rank 0 (collective: every rank calls).
  void log_resource_report();
  // Writes a checkpoint of the state after step `step` under the CheckpointMonitor's directory
  // (runner/train/checkpointing.cpp; collective). With async_save the files are written by a background
  // thread and the checkpoint is committed at a later step's start (or by finish_checkpoint).
  // Throws when the save fails; the previous checkpoints are left as they were.
  void save_checkpoint(int64_t step);
  // Completes a pending asynchronous save: waits for it when `wait`, else only when every rank's
  // files are written. Collective. Throws when the save failed.
  void finish_checkpoint(bool wait);
  // The last step done before this run: the checkpoint's step when resumed, else 0.
  int64_t start_step() const { return start_step_; }
  // Each rank's StepResult::local_loss of a step (collective).
  std::vector<double> rank_losses(const StepResult& r) const { return per_rank(r.local_loss).loss; }
  // Diagnostics (gridformer replay): the model's finite checks on (TransformerLM::set_finite_check), and
  // the first output this rank found not finite ("" if none).
  void set_finite_check(bool on);
  std::string first_nonfinite() const;

 private:
  int train_loop();
  // train_step's parts: the micro-batches through the step engine (a pipeline's schedule, or
  // gradient accumulation on one stage), returning the summed token loss; then the update.
  double run_micro_batches(int64_t step, float scale, StepResult& r);
  void optimizer_update(int64_t step, const StepResult& r);
  void log_step(int64_t step, const StepResult& r, const Interval& iv, double steady_ms_per_step);
  // A step whose loss, router losses or (without dynamic loss scaling) gradient norm is not finite
  // stops the run (status 3) after report_nonfinite's error lines.
  bool finite_step(const StepResult& r) const;
  void report_nonfinite(int64_t step, const StepResult& r) const;
  void evaluate_and_log(int64_t step);
  double stop_signal() const;
  // The spike checks on a step whose loss and norm are known (before its update): fills r's spike
  // fields and counts a skipped one; true when the step makes no update.
  bool spike_skips_step(StepResult& r);
  // A spike's warning; true when it ends the run (spike_action: stop, or global_norm_spike_count_threshold
  // skipped spikes in a row).
  bool spike_stops_run(int64_t step, const StepResult& r) const;
  void evaluate_and_save(int64_t step, bool saving, IntervalMeter& meter);
  std::string exit_due(int64_t step, double elapsed_s) const;
  std::string final_checkpoint(int64_t step, bool saving);
  // The checkpoint's directory name for `step` (CheckpointMonitor's prefix, epoch and step).
  std::string checkpoint_name(int64_t step) const;
  // Each rank's peak RSS so far, in bytes, and each rank's StepResult::local_loss, indexed by world rank
  // (collective over the world: every rank logs each step line, so the step lines carry them at the
  // cost of one small all-reduce).
  struct PerRank {
    std::vector<double> rss, loss;
  };
  PerRank per_rank(double local_loss) const;
  // The MoE layers' router figures of the step just run, summed over the data-parallel group.
  void gather_moe_stats(StepResult& r) const;
  void update_expert_bias(float* weights, const StepResult& r) const;
  void log_setup() const;
  void log_step_megatron(int64_t step, const StepResult& r, const IntervalRates& x);
  void log_training_plan() const;
  nlohmann::json schedule_state() const;
  void reconcile_schedule(const nlohmann::json& state, const std::string& dir);
  // The end-of-document id the document options act at, counted in the first kEodProbeSamples samples.
  void log_documents() const;
  static constexpr int64_t kEodProbeSamples = 64;
  // Pipeline: each stage's layers and planned activation memory, logged by rank 0 (collective).
  void log_pipeline_stages() const;
  void write_run_start();
  // Whether to evaluate after `step` (do_eval): every eval_step_interval steps, at the end of every
  // eval_epoch_interval-th epoch, and after the last step.
  bool eval_due(int64_t step) const;
  // Without ZeRO this rank's optimizer updates the whole arena, so it can also write the weights'
  // low-precision copy; under ZeRO the forward converts the gathered weights.
  bool optimizer_updates_every_weight() const {
    return sync_->stage() == 0 || (sync_->stage() == 1 && sync_->shard_begin() == 0 &&
                                   sync_->shard_end() == model_->params().total_floats());
  }
  void setup(std::unique_ptr<BatchSource> data);
  // The weights from load_checkpoint (Hugging Face weights or one of our checkpoints), the seed's,
  // or, with resume_training, a checkpoint's weights and training state (runner/train/checkpointing.cpp).
  // No collective: it runs while the trainer is built. Called after the optimizers exist.
  void load_initial_state();
  void init_weights();
  // Megatron-LM's checkpoints (runner/train/megatron_state.cpp): resume_training from one (its weights, Adam moments,
  // iteration, consumed samples, loss scale and schedule); and, with CheckpointMonitor's megatron_format, the state
  // of our checkpoint `ours` (committed, of `step`) written in Megatron's layout beside it (world rank 0).
  void resume_megatron(const std::string& path);
  void write_megatron_layout(const std::string& ours, int64_t step);
  // LoRA (model_config.pet_config): the model trains adapters over a frozen base; load_lora_base fills the base and
  // records its path (lora_base_), which checkpoints name instead of copying the base.
  bool lora() const { return cfg_.model.lora.on; }
  void load_lora_base(const std::string& path);
  nlohmann::json lora_targets_json() const;
  bool lora_fan_in_fan_out() const;
  std::string lora_base_;
  std::string checkpoint_root() const;
  std::string own_resume_checkpoint() const;
  // save_checkpoint's parts (runner/train/checkpointing.cpp).
  struct CheckpointRegion {  // local elements [lo, hi) of a tensor, saved under `name`
    const TensorPlacement* t;
    std::string name;
    int64_t lo, hi;
    ckpt::LocalReader read;
  };
  std::vector<CheckpointRegion> checkpoint_regions() const;
  void reserve_snapshot(const std::vector<CheckpointRegion>& regions);
  void checkpoint_pieces(std::vector<ckpt::Piece>& pieces, bool live);
  nlohmann::json checkpoint_state(int64_t step, int64_t epoch) const;
  std::string begin_save_on_every_rank(const std::string& name, int64_t step);
  void abandon_pending_save() noexcept;
  // The model (this rank's PipelineStage with a pipeline, the whole model without) and the engine.
  void setup_engine();
  bool pipelined() const { return shape_.stages > 1; }
  using GroupComms = std::array<const Communicator*, 3>;  // unused places nullptr
  GroupComms group_comms(int group) const;
  double messages_sent() const;
  double sent_by(int group) const;                       // runner/train/trainer_report.cpp
  double measured_step_seconds() const;                  // runner/train/trainer_report.cpp
  StepTime log_step_time(const StepComm& sent) const;  // bytes sent so far: 0 tensor, 1 data, 2 pipeline, 3 tied embedding, 4 context
  // The global index of the first sample of step `step`'s global batch, by Megatron's consumed-samples
  // rule: the samples consumed before this run's first step (0, or the resumed checkpoint's), then one
  // global batch per step. Resumed with the global batch it was saved with, that is (step - 1) * G as
  // in the uninterrupted run; with another, the next step reads on from the first sample not consumed.
  int64_t batch_first(int64_t step) const { return consumed_base_ + (step - 1 - start_step_) * global_batch_; }
  // The samples consumed after `step` (the checkpoint's consumed_samples).
  int64_t consumed_after(int64_t step) const { return batch_first(step + 1); }
  // The global index of the first sample of micro-batch i of the global batch starting at `first` on this
  // rank: micro-batch i of every data-parallel rank, then micro-batch i + 1 (one micro-batch is the whole
  // global batch without pipelining or accumulation).
  int64_t micro_first(int64_t first, int64_t micro) const {
    return first + (micro * ctx_.size(GridAxis::kDp) + ctx_.index(GridAxis::kDp)) * cfg_.batch_size;
  }
  // Reads the micro-batches of the global batch starting at sample `first` of `src` into tokens_.
  void read_micro_batches(BatchSource& src, int64_t first);
  // The targets the micro-batches just read train, over the data-parallel group: global batch x T, or
  // with loss masks (fine-tuning data, eod_mask_loss) their count (models/causal_lm.h trained_targets).
  double trained_targets_read(const BatchSource& src);
  void trace_samples(int64_t step) const;
  // The training data for at least `samples` samples: the configured source is rebuilt with more epochs
  // when a resume's consumed samples reach past the one it was built for.
  void ensure_train_samples(int64_t samples);
  // The summed token loss of the micro-batches in tokens_ (forward only, no dropout; this stage's share
  // under pipelining), for evaluation.
  double forward_micro_batches(int64_t index);

  const Config& cfg_;
  ParallelContext& ctx_;
  std::unique_ptr<CausalLM> model_;
  // Runs every step's micro-batches on model_'s chunks: a pipeline schedule over this rank's
  // PipelineStage, or (pipeline_stage 1) 1F1B on one stage: the whole model, one micro-batch after another.
  std::unique_ptr<StepEngine> engine_;
  pipeline::Scheduler sched_ = pipeline::Scheduler::k1F1B;
  pipeline::Shape shape_;
  pipeline::StageLists lists_;     // every stage's actions (built in, or the schedule file's)
  double bubble_expected_ = 0;     // analytic (built in) or simulated (a file), both at equal stages
  double bubble_priced_ = 0;       // the lists simulated with each virtual stage's FLOPs (the modelled step time's)
  std::vector<int64_t> stage_layers_;  // layers per virtual stage ({num_layers} without a pipeline)
  ArenaRange tied_{0, 0};   // the tied embedding on the first and last stage (GradientSync sums its gradient)
  int64_t micro_batches_ = 1;  // per step per data-parallel rank: micro_batch_num (pipeline) or gradient accumulation
  std::vector<MoeLayerStats> moe_acc_;  // the step's router statistics, over its micro-batches
  std::unique_ptr<GradientSync> sync_;
  // AdamW over this rank's shards (GradientSync::shards): the whole arena without ZeRO; under ZeRO-1
  // the dense slice and the experts'; under ZeRO-2 and 3 one per unit slice.
  std::vector<std::unique_ptr<AdamW>> opts_;
  // ZeRO-3: the weights brought to the blocks unit by unit (parallel/zero.h).
  std::unique_ptr<WeightStream> stream_;
  int64_t optimizer_state_bytes() const {
    int64_t b = 0;
    for (const auto& o : opts_) b += o->state_bytes();
    return b;
  }
  // Whether this rank writes the moments (and under ZeRO-3 the weights) of its shard of `t` to a
  // checkpoint: under hybrid sharding the first replica only.
  bool writes_shard(const TensorPlacement& t) const {
    return sync_->layout().replica_group(t.spec->is_expert()).rank() == 0;
  }
  std::unique_ptr<LrSchedule> lr_;
  std::unique_ptr<BatchSource> data_, eval_data_;
  int64_t eval_batches_ = 0;
  // Since the last log line: the losses of the steps that updated, their count, the steps skipped (log_format megatron).
  double interval_loss_sum_ = 0.0;
  int64_t interval_loss_steps_ = 0, interval_skipped_ = 0;  // global batches an evaluation reads: eval_iters, at most the validation data once
  std::vector<int32_t> tokens_;
  int64_t global_batch_ = 0, total_steps_ = 0, steps_per_epoch_ = 0;
  // What the tensor, data, pipeline, tied-embedding and context groups sent inside train_step (not evaluation or saving), and the
  // steps run: logged at the end beside plan's count (runner/report/step_comm.h).
  double step_sent_[7] = {0, 0, 0, 0, 0, 0, 0};  // tensor, data, pipeline, tied-embedding, context (and its
                                                 // subgroups), expert-data, expert (the MoE dispatch)
  double step_messages_ = 0;  // the same groups' messages
  int64_t steps_counted_ = 0;
  std::vector<double> step_seconds_;  // each train_step's wall time, for the end's measured-beside-modelled line
  double loss_scale_ = 1.0;
  int64_t good_steps_ = 0, skipped_steps_ = 0;
  int64_t spikes_in_a_row_ = 0;  // spikes skipped one after another
  std::unique_ptr<SpikeMonitor> spikes_;  // the running statistic (monitor_config.*_spike_factor)
  bool spike_since_save_ = false;  // a spike among the steps since the last checkpoint: the next is not healthy
  MachineSetup machine_;
  PeakChoice peak_;
  bool mfu_warned_ = false;  // the one warning when a step's MFU exceeds 100% of peak_ (step_log.cpp)
  std::unique_ptr<MetricsLog> metrics_;  // output_dir/metrics.jsonl, on world rank 0 only
  int64_t start_step_ = 0;               // resume_training: the checkpoint's step
  int64_t consumed_base_ = 0;            // resume_training: the checkpoint's consumed_samples
  int64_t built_samples_ = 0;            // the samples data_ was built for (0: unbounded or given)
  int64_t last_saved_step_ = 0;          // the newest checkpoint's step (this run's saves, or the one resumed from)
  std::string resumed_from_;
  struct PendingSave;                    // a save whose files are being written (runner/train/checkpointing.cpp)
  std::shared_ptr<PendingSave> pending_save_;  // shared_ptr: destroyable where PendingSave is incomplete
  std::vector<float> snapshot_;  // an async_save's copy of the state, kept from save to save
};

}  // namespace gf
