// Pipeline schedules as pure action lists: for each pipeline stage, the ordered list of what it
// does in one training step (forward, backward, backward-input, backward-weight, send, receive,
// per micro-batch and model chunk). No MPI and no model here: the executor (engine/step_engine.h)
// runs a list, and simulate() runs every stage's list against the others, so each schedule is
// tested for order, matching messages, deadlock freedom, activation memory and bubble without MPI.
//
// Model chunks (virtual stages, Megatron's interleaving): with `chunks` = v, the model's layers are
// cut into p * v virtual stages; stage s holds chunks c = 0..v-1, chunk c being virtual stage
// c * p + s. Activations flow virtual stage k -> k + 1 (so stage p - 1, chunk c sends to stage 0,
// chunk c + 1), gradients the other way. ZB-V places its two chunks in a V instead (Qi et al. 2024,
// "Pipeline Parallelism with Controllable Memory", section 6; PyTorch's generate_stage_to_rank_mapping
// style "v"): stage s holds virtual stages s (chunk 0) and 2p - 1 - s (chunk 1), so the last virtual
// stage, with the head and the loss, is on stage 0 beside the embedding, and stage p - 1 hands its
// chunk 0's output to its own chunk 1 without a message between ranks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gf::pipeline {

enum class Scheduler {
  kGPipe,        // all forwards, then all backwards
  k1F1B,         // PipeDream-flush / Megatron's default: p - s - 1 warm-up forwards, then one forward one backward
  kInterleaved,  // Megatron's interleaved 1F1B over `chunks` model chunks per stage
  kZBH1,         // Qi et al. 2023 ZB-H1: backward split into input (B) and weight (W) passes, W deferred into the
                 // bubbles, min(p, m) micro-batches live at every stage (1F1B's first-stage peak)
  kZBV,          // ZB-V (Qi et al. 2024, section 6; PyTorch's ScheduleZBVZeroBubble): two chunks per stage in a V,
                 // the backward split as ZB-H1's, W passes filling the bubbles
  kFile,         // the lists of a schedule file (parallel/pipeline/schedule_file.h), not built here: stage_actions,
                 // analytic_bubble, live_bound and slots_per_chunk refuse it; simulate() the file's lists instead
};

// YAML value (parallel.pipeline_config.pipeline_scheduler) <-> scheduler. Names: "gpipe", "1f1b",
// "interleaved" (also what "1f1b" becomes with pipeline_interleave and pp_interleave_num > 1),
// "zero_bubble_h1" (alias "zbh1", "zb-h1", "zero_bubble"), "zero_bubble_v" (MindSpore's name; alias "zbv",
// "zb-v", "zbvzerobubble", torchtitan's ZBVZeroBubble), "file" (the lists of
// parallel.pipeline_config.pipeline_schedule_file). Throws std::invalid_argument listing the names.
Scheduler parse_scheduler(const std::string& name);
std::string scheduler_name(Scheduler s);

enum class Op : uint8_t {
  kRecvForward,     // post the receive of (micro, chunk)'s input activation from the previous virtual stage
  kForward,         // run (micro, chunk)'s forward (waits for that receive, if any)
  kSendForward,     // post the send of (micro, chunk)'s output activation to the next virtual stage
  kRecvBackward,    // post the receive of the gradient of (micro, chunk)'s output from the next virtual stage
  kBackward,        // fused backward of (micro, chunk): input and weight gradients (waits for that receive)
  kBackwardInput,   // input-gradient pass only (ZB-H1's B) (waits for that receive)
  kBackwardWeight,  // weight-gradient pass (ZB-H1's W) of a micro-batch whose input pass ran
  kSendBackward,    // post the send of the gradient of (micro, chunk)'s input to the previous virtual stage
};
const char* op_name(Op op);

struct Action {
  Op op;
  int micro = 0;
  int chunk = 0;
  bool operator==(const Action&) const = default;
};

struct Shape {
  int stages = 1;         // p
  int micro_batches = 1;  // m
  int chunks = 1;         // v (> 1 only for kInterleaved, kZBV and a schedule file)
  bool v_shape = false;   // ZB-V's placement of the chunks (above); chunks == 2
};
// The shape a schedule runs: ZB-V's placement for kZBV, Megatron's interleaving otherwise.
inline Shape schedule_shape(Scheduler sched, int stages, int micro_batches, int chunks) {
  return {stages, micro_batches, chunks, sched == Scheduler::kZBV};
}
// Every stage's list, index = stage.
using StageLists = std::vector<std::vector<Action>>;

// Virtual stages (stages x chunks), and the virtual stage of `chunk` on `stage`.
inline int virtual_stages(const Shape& sh) { return sh.stages * sh.chunks; }
inline int vstage_of(const Shape& sh, int stage, int chunk) {
  if (sh.v_shape) return chunk == 0 ? stage : 2 * sh.stages - 1 - stage;
  return chunk * sh.stages + stage;
}
// The stage and the chunk that run virtual stage k.
inline int stage_of(const Shape& sh, int k) {
  if (sh.v_shape) return k < sh.stages ? k : 2 * sh.stages - 1 - k;
  return k % sh.stages;
}
inline int chunk_of(const Shape& sh, int k) { return sh.v_shape ? (k < sh.stages ? 0 : 1) : k / sh.stages; }
// "Forward(micro 2, chunk 0)", for messages.
std::string describe(const Action& a);

// Why `sched` cannot run `shape` (empty when it can): stages < 1, micro_batches < 1, chunks < 1;
// chunks > 1 other than interleaved and ZB-V; interleaved with chunks < 2 or micro_batches % stages != 0
// (Megatron's rule); ZB-V with chunks other than 2; a V placement (v_shape) under another schedule. Each message names the YAML keys (parallel_config.micro_batch_num,
// parallel_config.pipeline_stage, model.model_config.pp_interleave_num) and a value that works.
std::string check_shape(Scheduler sched, const Shape& shape);

// Stage `stage`'s actions for one step. Every (micro, chunk) of the stage gets exactly one forward
// and one backward (or one backward-input and one backward-weight for kZBH1). The receive a compute
// waits for is listed one compute ahead: just before the compute that precedes it (at the very start
// for the list's first compute), so the executor can overlap the transfer with that compute while
// holding at most two posted receive buffers. A send comes right after the compute that produced its
// data (SendBackward after Backward or BackwardInput, never after BackwardWeight). The first virtual
// stage has no forward receive and no backward send; the last no forward send and no backward receive.
// Throws std::invalid_argument when check_shape fails or `stage` is out of range.
std::vector<Action> stage_actions(Scheduler sched, const Shape& shape, int stage);
// Every stage's stage_actions.
StageLists all_stage_actions(Scheduler sched, const Shape& shape);
// `computes` (forwards and backward passes only, in order) with the receives and sends added by the
// rule stage_actions uses (above): what a schedule file without messages runs. Throws
// std::invalid_argument for an action that is not a compute.
std::vector<Action> derive_messages(const Shape& shape, int stage, const std::vector<Action>& computes);

// Costs of one micro-batch on one chunk, in any time unit. A fused backward costs b + w; a
// backward-input b, a backward-weight w.
struct Costs {
  double f = 1.0, b = 1.0, w = 1.0;
};

struct Simulation {
  bool ok = false;
  std::string error;             // the first problem found, naming the stage and action index: a forward after its
                                 // backward, a compute with no posted receive, a send before its data exists, a
                                 // missing or repeated compute, a deadlock (which stages wait for what, and where
                                 // the sender is), unmatched sends/receives
  double makespan = 0.0;         // the step's time, communication free and instantaneous
  std::vector<double> busy;      // per stage: compute time
  std::vector<double> idle;      // per stage: makespan - busy
  std::vector<int> peak_live;    // per stage: most micro-batch activations held at once (summed over chunks): a
                                 // (micro, chunk) is live from its forward until its backward (fused) or its
                                 // backward-weight (split) has run
  std::vector<std::vector<int>> peak_live_chunk;  // per stage, per chunk
  double bubble_fraction = 0.0;  // sum(idle) / (stages * makespan)
};

// Runs every stage's list against the others: a compute waits for the stage to be free and for
// its input (the message the neighbouring stage sent, sent when that stage's compute finished);
// sends never block (MPI_Isend); a receive matches the send of the same (direction, micro,
// virtual stage). First each list is checked on its own (order, posted receives, sends after their
// data, a SendBackward before the stage's next compute (the gradient it sends is the chunk's scratch
// until then), no compute missing or repeated), then the sends whose receiver posts no receive for
// them (unmatched sends), then the lists are run together (deadlock, matching).
// `ok` false with `error` on the first problem; the figures are filled only when `ok`. `origins`
// (optional, per stage, per action) is written after each action an error names, e.g. where a
// schedule file holds it.
Simulation simulate(const std::vector<std::vector<Action>>& lists, const Shape& shape, const Costs& costs = {},
                    const std::vector<std::vector<std::string>>* origins = nullptr);
Simulation simulate(Scheduler sched, const Shape& shape, const Costs& costs = {});
// The same with costs per virtual stage (index = virtual stage: stages of unequal work, e.g. the head's on the last).
Simulation simulate(const std::vector<std::vector<Action>>& lists, const Shape& shape,
                    const std::vector<Costs>& per_vstage, const std::vector<std::vector<std::string>>* origins = nullptr);

// The schedule's bubble fraction in closed form, for equal stages (the published figures), as
// bubble / (work + bubble) per stage, with Costs per micro-batch per chunk:
//   GPipe, 1F1B:   (p - 1)(f + b + w) over m (f + b + w): = (p - 1) / (m + p - 1)
//   interleaved:   (p - 1)(f + b + w) over m v (f + b + w): = (p - 1) / (m v + p - 1), Narayanan et al. 2021's
//                  (p - 1)(t_f + t_b) / v with t_f, t_b the costs of a whole stage
//   ZB-H1:         (p - 1)(f + b - w) over m (f + b + w)   (Qi et al. 2023, Table 2: a third of 1F1B's at
//                  f = b = w; (p - 1)(f + b - 2w) is ZB-H2's, which needs 2p - 1 live micro-batches)
// simulate() gives exactly these for GPipe and 1F1B at every m, for interleaved at every m it accepts
// (m % p == 0), and for ZB-H1 when m >= p and w <= min(f, b) (the paper's T_W < T_F < T_B); below p
// micro-batches ZB-H1's bubble per stage is larger ((p - 1)(f + b - w) + (p - m) w at f = b = w).
//   ZB-V:          no closed form is used: the simulation's with these costs (per chunk, half a stage). At
//                  f = b = w and m >= 2p it is (p - 1) f per stage, half of ZB-H1's at the same stage costs
//                  (the unit tests check both).
// Throws std::invalid_argument when check_shape fails.
double analytic_bubble(Scheduler sched, const Shape& shape, const Costs& costs = {});
// Whether analytic_bubble (or a schedule file's figure) is a simulation's rather than a closed form: ZB-V, a file.
inline bool bubble_is_simulated(Scheduler s) { return s == Scheduler::kZBV || s == Scheduler::kFile; }

// The most (micro, chunk) activations stage s of this schedule holds at once, by construction (the
// warm-up forwards plus the first steady forward, before a backward frees one):
//   GPipe m; 1F1B min(p - s, m); interleaved min(2 (p - s - 1) + (v - 1) p + 1, m v);
//   ZB-H1 min(p, m) at every stage (a micro-batch stays live until its backward-weight);
//   ZB-V min(2p, m + s + 1, 2m) half-stage chunks: at most p whole stages' worth, 1F1B's first-stage peak.
// The unit tests check that simulate()'s peak_live equals it. Throws std::invalid_argument when
// check_shape fails.
int live_bound(Scheduler sched, const Shape& shape, int stage);

// Per stage, per chunk: how many activation slots the executor needs (simulate()'s peak_live_chunk,
// from a simulation with unit costs; the peaks depend on the list order only, not on the costs).
// Their sum can exceed live_bound: the chunks peak at different times.
std::vector<int> slots_per_chunk(Scheduler sched, const Shape& shape, int stage);

}  // namespace gf::pipeline
