// The step engine: every training step, pipelined or not, is a schedule's action list
// (parallel/pipeline/schedule.h) run on this rank's model chunks. Without a pipeline the model is one
// chunk of one stage and the list is 1F1B's on one stage (forward, backward, forward, backward, ...
// over the micro-batches of gradient accumulation); with one, the chunks are those of this rank's
// PipelineStage (models/pipeline_stage.h). It runs forwards and backwards of micro-batches on the
// chunks' slots, and sends and receives the activations and their gradients to and from the
// neighbouring stages (parallel/pipeline/stage_link.h, non-blocking). A receive is posted where the
// list puts it (ahead of the compute that reads it) and waited for only by that compute; a send is
// posted right after the compute and completes in the background. The time spent waiting for a
// neighbour is measured: it is the stage's bubble.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "core/math/aligned_buffer.h"
#include "models/pipeline_stage.h"
#include "parallel/communicator.h"
#include "parallel/pipeline/partition.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage_link.h"

namespace gf {

// The model chunks stage `stage` runs for `stage_layers` (layers per virtual stage, virtual stage k =
// chunk * stages + stage), with the slots (the simulated peak live micro-batches per chunk) and the deferred
// weight pass (a chunk with backward-weight actions) the schedule's lists need. `lists`: every stage's (a
// schedule file's, pipeline/schedule_file.h); throws std::logic_error when they fail the simulation.
std::vector<StageOptions> pipeline_chunk_options(const std::vector<int64_t>& stage_layers,
                                                 const pipeline::StageLists& lists, const pipeline::Shape& shape,
                                                 int stage);
// The same for a built-in schedule (pipeline::all_stage_actions).
std::vector<StageOptions> pipeline_chunk_options(const std::vector<int64_t>& stage_layers, pipeline::Scheduler sched,
                                                 const pipeline::Shape& shape, int stage);

// The chunks the engine runs for `model`: a PipelineStage's, or a whole TransformerLM as one chunk.
// Throws for a model that is neither.
std::vector<TransformerLM*> engine_chunks(CausalLM& model);

class StepEngine {
 public:
  // pp: the pipeline communicator (rank = stage; one rank without a pipeline). With more than one
  // stage the chunks must be pipeline_chunk_options(...)'s.
  StepEngine(std::vector<TransformerLM*> chunks, const Communicator& pp, pipeline::Scheduler sched,
             const pipeline::Shape& shape);
  // The same running `actions`, this stage's list (of a schedule file's lists, checked by the simulator).
  StepEngine(std::vector<TransformerLM*> chunks, const Communicator& pp, std::vector<pipeline::Action> actions,
             const pipeline::Shape& shape);

  // `ready(offset)` is called during the last micro-batch's backward as the gradients at and after
  // `offset` become final (CausalLM::set_grad_ready_hook), so that the data-parallel reduction runs
  // in backward's background. Only without a pipeline: with one, a tied embedding's gradient is
  // summed over the first and last stages before the data-parallel reduction (GradientSync::finish),
  // which must therefore wait for the schedule's end.
  void on_grads_ready(std::function<void(int64_t)> ready);
  // ZeRO-2 and 3's vocabulary chunks (CausalLM::set_unit_ready_hooks), armed as the above.
  void on_unit_ready(std::function<void(int64_t)> unit_ready, CausalLM::AddRows add_rows);

  struct Micro {
    const int32_t* tokens;  // [B, T + 1]
    StepInfo info;
  };
  // One training step over shape.micro_batches micro-batches: accumulates into the arena's gradients
  // the gradient of grad_scale x (their summed loss, plus the router losses). Returns the summed
  // token loss over the micro-batches on the stage that holds the last layer, 0 elsewhere.
  double train(const std::function<Micro(int)>& micro, float grad_scale);
  // Forward only (no dropout is the caller's StepInfo), `count` micro-batches; the same return.
  double forward_only(const std::function<Micro(int)>& micro, int count);

  // Of the last train() or forward_only(): seconds this rank waited for its neighbours, and computed.
  double wait_seconds() const { return wait_s_; }
  double compute_seconds() const { return compute_s_; }
  // The MoE layers' router statistics summed over the last train()'s micro-batches (this stage's layers).
  const std::vector<MoeLayerStats>& moe_stats() const { return moe_; }
  const std::vector<pipeline::Action>& actions() const { return actions_; }

 private:
  struct Pending {
    float* buf = nullptr;
    Request req;
  };
  double run(const std::vector<pipeline::Action>& actions, const std::function<Micro(int)>& micro, float grad_scale,
             bool forward_only);
  TransformerLM& chunk(int c) { return *chunks_[static_cast<size_t>(c)]; }
  double activation_bytes() const {
    double b = 0;
    for (const TransformerLM* c : chunks_) b += static_cast<double>(c->activation_bytes());
    return b;
  }
  int virtual_stage(int chunk) const { return pipeline::vstage_of(shape_, stage_, chunk); }
  bool first_virtual(int chunk) const { return virtual_stage(chunk) == 0; }
  bool last_virtual(int chunk) const { return virtual_stage(chunk) == pipeline::virtual_stages(shape_) - 1; }
  int tag(int direction, int micro, int receiver_chunk) const;
  float* take_buffer();
  void give_buffer(float* b) { free_.push_back(b); }
  int64_t slot_for(int micro, int chunk);
  void free_slot(int micro, int chunk);
  void wait_timed(Request& r);
  // Tests every message in flight (between layers, and between actions): lets MPI move them.
  void advance();

  std::vector<TransformerLM*> chunks_;
  StageLink link_;
  pipeline::Shape shape_;
  int stage_;
  int64_t floats_;  // one message: [Nl, C]
  std::vector<pipeline::Action> actions_;
  std::vector<AlignedBuffer<float>> buffers_;  // messages' buffers, allocated on first use and reused
  std::vector<float*> free_;
  std::map<std::pair<int, int>, Pending> recv_fwd_, recv_bwd_;  // (micro, chunk)
  std::vector<Pending> sends_;
  std::vector<std::vector<int>> slot_micro_;               // per chunk, per slot: the micro-batch in it, -1 free
  std::vector<std::vector<Request>> slot_send_;            // per chunk, per slot: the send reading its output
  std::map<std::pair<int, int>, int64_t> slot_of_;
  std::vector<MoeLayerStats> moe_;
  std::function<void(int64_t)> ready_;
  std::function<void(int64_t)> unit_ready_;
  CausalLM::AddRows add_rows_;
  bool armed_ = false;  // the grads-ready hook passes offsets on (the last micro-batch's backward)
  double wait_s_ = 0, compute_s_ = 0;
};

}  // namespace gf
