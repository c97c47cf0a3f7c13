// Pipeline schedules as pure action lists (GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V); the simulator that
// runs every stage's list against the others, and the closed-form bubbles, are in simulate.cpp. No MPI
// and no model: the
// executor (engine/step_engine.h) runs what stage_actions() returns.
//
// A schedule is written in two steps: the order of the stage's computes (forward, backward, or
// backward-input and backward-weight), then decorate() adds the receives and sends around them by one
// rule for every schedule, so that the communication pattern cannot drift between schedules.
#include "parallel/pipeline/schedule.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace gf::pipeline {

namespace {

struct Compute {
  Op op;
  int micro;
  int chunk;
};

// The receive a compute waits for, if any: a forward reads the previous virtual stage's activation, a
// backward (fused or input pass) the next virtual stage's gradient; the weight pass reads nothing new.
bool needs_receive(const Shape& sh, Op op, int stage, int chunk, Op* recv) {
  const int k = vstage_of(sh, stage, chunk);
  if (op == Op::kForward && k > 0) {
    *recv = Op::kRecvForward;
    return true;
  }
  if ((op == Op::kBackward || op == Op::kBackwardInput) && k < virtual_stages(sh) - 1) {
    *recv = Op::kRecvBackward;
    return true;
  }
  return false;
}

// The send that follows a compute, if any (never after the weight pass: it produces no message).
bool needs_send(const Shape& sh, Op op, int stage, int chunk, Op* send) {
  const int k = vstage_of(sh, stage, chunk);
  if (op == Op::kForward && k < virtual_stages(sh) - 1) {
    *send = Op::kSendForward;
    return true;
  }
  if ((op == Op::kBackward || op == Op::kBackwardInput) && k > 0) {
    *send = Op::kSendBackward;
    return true;
  }
  return false;
}

// Receives and sends around the computes. A send right after the compute that produced its data. The
// receive for compute i + 1 is posted just before compute i: one compute ahead, so the transfer overlaps
// compute i, and never earlier, so a stage holds at most two posted receive buffers (the one compute i
// waits on and the one for i + 1). The first compute's own receive has nothing to overlap and opens the
// list.
std::vector<Action> decorate(const Shape& sh, int stage, const std::vector<Compute>& computes) {
  std::vector<Action> out;
  out.reserve(computes.size() * 3);
  Op op;
  auto post_receive = [&](const Compute& c) {
    if (needs_receive(sh, c.op, stage, c.chunk, &op)) out.push_back({op, c.micro, c.chunk});
  };
  for (size_t i = 0; i < computes.size(); ++i) {
    const Compute& c = computes[i];
    if (i == 0) post_receive(c);
    if (i + 1 < computes.size()) post_receive(computes[i + 1]);
    out.push_back({c.op, c.micro, c.chunk});
    if (needs_send(sh, c.op, stage, c.chunk, &op)) out.push_back({op, c.micro, c.chunk});
  }
  return out;
}

std::vector<Compute> gpipe(const Shape& sh) {
  std::vector<Compute> c;
  for (int i = 0; i < sh.micro_batches; ++i) c.push_back({Op::kForward, i, 0});
  for (int i = 0; i < sh.micro_batches; ++i) c.push_back({Op::kBackward, i, 0});
  return c;
}

// Megatron's forward_backward_pipelining_without_interleaving: p - s - 1 warm-up forwards, so that the
// last stage's first backward is the first thing it can do after its first forward; then one forward,
// one backward; then the backwards still owed.
std::vector<Compute> one_f_one_b(const Shape& sh, int s) {
  const int p = sh.stages, m = sh.micro_batches, warm = std::min(p - s - 1, m);
  std::vector<Compute> c;
  for (int i = 0; i < warm; ++i) c.push_back({Op::kForward, i, 0});
  for (int i = 0; i < m - warm; ++i) {
    c.push_back({Op::kForward, warm + i, 0});
    c.push_back({Op::kBackward, i, 0});
  }
  for (int i = m - warm; i < m; ++i) c.push_back({Op::kBackward, i, 0});
  return c;
}

// Megatron's forward_backward_pipelining_with_interleaving with micro-batch groups of p (its default
// microbatch_group_size_per_vp_stage): forwards go through a group of p micro-batches on chunk 0, the
// same group on chunk 1, ..., then the next group; backwards in the same order with the chunks reversed.
// Warm-up (p - s - 1) * 2 + (v - 1) * p forwards: (v - 1) * p fill the stage's first chunks while the
// group travels around the ring, and 2 per later stage cover the trip of a backward from stage p - 1
// back to stage s and of a forward from s to p - 1.
std::vector<Compute> interleaved(const Shape& sh, int s) {
  const int p = sh.stages, m = sh.micro_batches, v = sh.chunks, total = m * v;
  const int warm = std::min((p - s - 1) * 2 + (v - 1) * p, total);
  auto micro = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto fwd = [&](int k) { return Compute{Op::kForward, micro(k), (k / p) % v}; };
  auto bwd = [&](int k) { return Compute{Op::kBackward, micro(k), v - 1 - (k / p) % v}; };
  std::vector<Compute> c;
  for (int k = 0; k < warm; ++k) c.push_back(fwd(k));
  for (int k = 0; k < total - warm; ++k) {
    c.push_back(fwd(warm + k));
    c.push_back(bwd(k));
  }
  for (int k = total - warm; k < total; ++k) c.push_back(bwd(k));
  return c;
}

// ZB-H1 (Qi et al. 2023, Figure 3 top): 1F1B's order of F and B (B now the input pass only, so the
// gradient moves upstream sooner), with the weight passes W placed so that every stage holds the same
// number of live micro-batches, min(p, m), as 1F1B's first stage. Stage s runs p - s - 1 warm-up forwards (as
// 1F1B), so after its (s + 1)-th steady forward it holds p; from then on each steady step's B is
// followed by the W of the oldest micro-batch whose B has run (W lags the B's by s micro-batches),
// keeping it at p. In the cool-down, where 1F1B's stages idle waiting for the gradient, each B is
// followed by one W, and the W's still owed close the list, filling the tail bubble. For m >= p and
// w <= min(f, b) the bubble per stage is exactly (p - 1)(f + b - w), a third of 1F1B's (p - 1)(f + b + w)
// at f = b = w (the unit tests check it through the simulator); with a W dearer than F or B, or m < p,
// it is larger, though no larger than 1F1B's in any simulated case (pp 2..8, m 1..32, w up to 5 f).
std::vector<Compute> zb_h1(const Shape& sh, int s) {
  const int p = sh.stages, m = sh.micro_batches, warm = std::min(p - s - 1, m);
  std::vector<Compute> c;
  int w = 0;  // next weight pass
  for (int i = 0; i < warm; ++i) c.push_back({Op::kForward, i, 0});
  for (int i = 0; i < m - warm; ++i) {
    c.push_back({Op::kForward, warm + i, 0});
    c.push_back({Op::kBackwardInput, i, 0});
    if (i >= s) c.push_back({Op::kBackwardWeight, w++, 0});
  }
  for (int i = m - warm; i < m; ++i) {
    c.push_back({Op::kBackwardInput, i, 0});
    c.push_back({Op::kBackwardWeight, w++, 0});
  }
  while (w < m) c.push_back({Op::kBackwardWeight, w++, 0});
  return c;
}

// ZB-V, transcribed from PyTorch's ScheduleZBVZeroBubble._calculate_single_rank_operations
// (torch/distributed/pipelining/schedules.py, pytorch/pytorch main of 2025; Qi et al. 2024, section 6): chunk 0
// is virtual stage s, chunk 1 virtual stage 2p - 1 - s (the V). Warm-up: 2(p - s) - 1 forwards of chunk 0, then s
// pairs (chunk 1's forward, chunk 0's), then p - s rounds of chunk 1's forward, input pass and weight pass; steady:
// rounds of chunk 0's forward (while micro-batches remain), input and weight pass, then chunk 1's; cool-down: s
// pairs of input passes (chunk 0's, chunk 1's), p - s of chunk 0's input pass and its oldest weight pass, then the
// weight passes still owed, chunk 1's first. PyTorch plans over max(m, 2p - 1) micro-batches and drops the
// actions of those past m (its idle slots are only waits here: the executor waits on the data); the dropped
// ones leave every kept micro-batch's dependencies in order, which simulate() checks for every shape the unit
// tests run.
std::vector<Compute> zb_v(const Shape& sh, int s) {
  const int p = sh.stages, m = sh.micro_batches, n = std::max(m, 2 * p - 1);
  std::vector<Compute> c;
  auto add = [&](Op op, int micro, int chunk) {
    if (micro < m) c.push_back({op, micro, chunk});
  };
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  for (int i = 0; i < 2 * (p - s) - 1; ++i) add(Op::kForward, f0++, 0);
  for (int i = 0; i < s; ++i) {
    add(Op::kForward, f1++, 1);
    add(Op::kForward, f0++, 0);
  }
  for (int i = 0; i < p - s; ++i) {
    add(Op::kForward, f1++, 1);
    add(Op::kBackwardInput, b1, 1);
    add(Op::kBackwardWeight, b1++, 1);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) add(Op::kForward, f0++, 0);
    add(Op::kBackwardInput, b0, 0);
    add(Op::kBackwardWeight, b0++, 0);
    add(Op::kForward, f1++, 1);
    add(Op::kBackwardInput, b1, 1);
    add(Op::kBackwardWeight, b1++, 1);
  }
  int w0 = b0, w1 = b1;
  for (int i = 0; i < s; ++i) {
    add(Op::kBackwardInput, b0++, 0);
    add(Op::kBackwardInput, b1++, 1);
  }
  for (int i = 0; i < p - s; ++i) {
    add(Op::kBackwardInput, b0++, 0);
    add(Op::kBackwardWeight, w0++, 0);
  }
  while (w1 < b1) add(Op::kBackwardWeight, w1++, 1);
  while (w0 < b0) add(Op::kBackwardWeight, w0++, 0);
  if (w0 != n || w1 != n || f0 != n || f1 != n)
    throw std::logic_error("zb_v: the transcription left micro-batches unfinished");
  return c;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

std::string describe(const Action& a) {
  return std::string(op_name(a.op)) + "(micro " + std::to_string(a.micro) + ", chunk " + std::to_string(a.chunk) +
         ")";
}

Scheduler parse_scheduler(const std::string& name) {
  const std::string n = lower(name);
  if (n == "gpipe") return Scheduler::kGPipe;
  if (n == "1f1b") return Scheduler::k1F1B;
  if (n == "interleaved") return Scheduler::kInterleaved;
  if (n == "zero_bubble_h1" || n == "zbh1" || n == "zb-h1" || n == "zero_bubble") return Scheduler::kZBH1;
  if (n == "zero_bubble_v" || n == "zbv" || n == "zb-v" || n == "zbvzerobubble") return Scheduler::kZBV;
  if (n == "file") return Scheduler::kFile;
  throw std::invalid_argument("parallel.pipeline_config.pipeline_scheduler: unknown value '" + name +
                              "'; accepted: gpipe, 1f1b (default), interleaved, zero_bubble_h1 (also zbh1, zb-h1, "
                              "zero_bubble), zero_bubble_v (also zbv, zb-v, ZBVZeroBubble), file (with pipeline_schedule_file)");
}

std::string scheduler_name(Scheduler s) {
  switch (s) {
    case Scheduler::kGPipe: return "gpipe";
    case Scheduler::k1F1B: return "1f1b";
    case Scheduler::kInterleaved: return "interleaved";
    case Scheduler::kZBH1: return "zero_bubble_h1";
    case Scheduler::kZBV: return "zero_bubble_v";
    case Scheduler::kFile: return "file";
  }
  return "?";
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kRecvForward: return "RecvForward";
    case Op::kForward: return "Forward";
    case Op::kSendForward: return "SendForward";
    case Op::kRecvBackward: return "RecvBackward";
    case Op::kBackward: return "Backward";
    case Op::kBackwardInput: return "BackwardInput";
    case Op::kBackwardWeight: return "BackwardWeight";
    case Op::kSendBackward: return "SendBackward";
  }
  return "?";
}

std::string check_shape(Scheduler sched, const Shape& shape) {
  const std::string name = scheduler_name(sched);
  if (shape.stages < 1)
    return "parallel_config.pipeline_stage must be >= 1 (got " + std::to_string(shape.stages) +
           "); 1 disables pipelining";
  if (shape.micro_batches < 1)
    return "parallel_config.micro_batch_num must be >= 1 (got " + std::to_string(shape.micro_batches) + "); e.g. " +
           std::to_string(shape.stages);
  if (shape.chunks < 1)
    return "model.model_config.pp_interleave_num must be >= 1 (got " + std::to_string(shape.chunks) + "); e.g. 1";
  if (sched == Scheduler::kFile) return "";  // any chunks and micro-batches: the file's simulation says what runs
  if (shape.v_shape != (sched == Scheduler::kZBV))
    return std::string("pipeline shape: the V placement of the chunks is ZB-V's alone (") + name + " with v_shape " +
           (shape.v_shape ? "true" : "false") + "); build the shape with schedule_shape()";
  if (sched == Scheduler::kZBV) {
    if (shape.chunks != 2)
      return "the zero_bubble_v schedule runs two model chunks per stage in a V: set model.model_config."
             "pp_interleave_num: 2 and parallel.pipeline_config.pipeline_interleave: true (got " +
             std::to_string(shape.chunks) + " chunk(s))";
    return "";
  }
  if (sched != Scheduler::kInterleaved) {
    if (shape.chunks > 1)
      return "model.model_config.pp_interleave_num: " + std::to_string(shape.chunks) +
             " model chunks per stage need the interleaved schedule (parallel.pipeline_config.pipeline_interleave: "
             "true, or pipeline_scheduler: interleaved), not " + name + "; or set pp_interleave_num: 1";
    return "";
  }
  if (shape.chunks < 2)
    return "the interleaved schedule needs model.model_config.pp_interleave_num >= 2 model chunks per stage (got " +
           std::to_string(shape.chunks) + "); set pp_interleave_num: 2, or parallel.pipeline_config."
           "pipeline_scheduler: 1f1b";
  const int p = shape.stages, m = shape.micro_batches;
  if (m % p != 0) {
    // The nearest multiple of p, at least p; a tie goes up (more micro-batches, a smaller bubble).
    const int below = m / p * p, above = below + p;
    const int nearest = (below == 0 || above - m <= m - below) ? above : below;
    return "the interleaved schedule needs parallel_config.micro_batch_num (" + std::to_string(m) +
           ") to be a multiple of parallel_config.pipeline_stage (" + std::to_string(p) + "); nearest working value: " +
           "micro_batch_num: " + std::to_string(nearest);
  }
  return "";
}

std::vector<Action> stage_actions(Scheduler sched, const Shape& shape, int stage) {
  if (std::string why = check_shape(sched, shape); !why.empty()) throw std::invalid_argument(why);
  if (stage < 0 || stage >= shape.stages)
    throw std::invalid_argument("pipeline stage " + std::to_string(stage) + " out of range [0, " +
                                std::to_string(shape.stages) + ")");
  switch (sched) {
    case Scheduler::kGPipe: return decorate(shape, stage, gpipe(shape));
    case Scheduler::k1F1B: return decorate(shape, stage, one_f_one_b(shape, stage));
    case Scheduler::kInterleaved: return decorate(shape, stage, interleaved(shape, stage));
    case Scheduler::kZBH1: return decorate(shape, stage, zb_h1(shape, stage));
    case Scheduler::kZBV: return decorate(shape, stage, zb_v(shape, stage));
    case Scheduler::kFile: break;
  }
  throw std::invalid_argument("a schedule file's lists come from the file (parallel/pipeline/schedule_file.h), not from "
                              "stage_actions");
}

StageLists all_stage_actions(Scheduler sched, const Shape& shape) {
  StageLists lists;
  for (int s = 0; s < shape.stages; ++s) lists.push_back(stage_actions(sched, shape, s));
  return lists;
}

std::vector<Action> derive_messages(const Shape& shape, int stage, const std::vector<Action>& computes) {
  std::vector<Compute> c;
  c.reserve(computes.size());
  for (const Action& a : computes) {
    if (a.op != Op::kForward && a.op != Op::kBackward && a.op != Op::kBackwardInput && a.op != Op::kBackwardWeight)
      throw std::invalid_argument("derive_messages: " + describe(a) + " is not a compute");
    c.push_back({a.op, a.micro, a.chunk});
  }
  return decorate(shape, stage, c);
}

}  // namespace gf::pipeline
