// Pipeline schedules as pure action lists (GPipe, 1F1B, interleaved 1F1B, ZB-H1), the simulator that
// runs every stage's list against the others, and the closed-form bubbles. No MPI and no model: the
// executor (engine/pipeline_executor.h) runs what stage_actions() returns.
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

int virtual_stages(const Shape& sh) { return sh.stages * sh.chunks; }
int vstage_of(const Shape& sh, int stage, int chunk) { return chunk * sh.stages + stage; }

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

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string describe(const Action& a) {
  return std::string(op_name(a.op)) + "(micro " + std::to_string(a.micro) + ", chunk " + std::to_string(a.chunk) +
         ")";
}

std::string at(int stage, size_t index, const Action& a) {
  return "stage " + std::to_string(stage) + ", action #" + std::to_string(index) + " " + describe(a);
}

}  // namespace

Scheduler parse_scheduler(const std::string& name) {
  const std::string n = lower(name);
  if (n == "gpipe") return Scheduler::kGPipe;
  if (n == "1f1b") return Scheduler::k1F1B;
  if (n == "interleaved") return Scheduler::kInterleaved;
  if (n == "zero_bubble_h1" || n == "zbh1" || n == "zb-h1" || n == "zero_bubble") return Scheduler::kZBH1;
  throw std::invalid_argument("parallel.pipeline_config.pipeline_scheduler: unknown value '" + name +
                              "'; accepted: gpipe, 1f1b (default), interleaved, zero_bubble_h1 (also zbh1, zb-h1, "
                              "zero_bubble)");
}

std::string scheduler_name(Scheduler s) {
  switch (s) {
    case Scheduler::kGPipe: return "gpipe";
    case Scheduler::k1F1B: return "1f1b";
    case Scheduler::kInterleaved: return "interleaved";
    case Scheduler::kZBH1: return "zero_bubble_h1";
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
  }
  throw std::invalid_argument("unknown scheduler");
}

namespace {

// What one stage has done to one (micro, chunk), by action index (-1: not yet). Used by the per-list
// checks; a second pass runs the lists against each other.
struct KeyState {
  int recv_f = -1, fwd = -1, send_f = -1, recv_b = -1, bwd = -1, bwd_in = -1, bwd_w = -1, send_b = -1;
};

// Checks one stage's list on its own: ranges, the order of each (micro, chunk)'s computes, a posted
// receive before each compute that needs one, each send after the compute that produced its data, no
// repeats, no compute missing; and counts the live activations. Returns the first problem.
std::string check_list(const std::vector<Action>& list, const Shape& sh, int s, const Costs& costs, double* busy,
                       int* peak, std::vector<int>* peak_chunk) {
  const int m = sh.micro_batches, v = sh.chunks, last = virtual_stages(sh) - 1;
  std::vector<KeyState> st(static_cast<size_t>(m) * v);
  int live = 0;
  std::vector<int> live_chunk(v, 0);
  peak_chunk->assign(v, 0);
  *peak = 0;
  *busy = 0;
  auto repeated = [](const std::string& where, int first) {
    return where + ": repeated (first at action #" + std::to_string(first) + ")";
  };
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    const int idx = static_cast<int>(i);
    const std::string where = at(s, i, a);
    if (a.micro < 0 || a.micro >= m || a.chunk < 0 || a.chunk >= v)
      return where + ": out of range (micro_batches " + std::to_string(m) + ", chunks " + std::to_string(v) + ")";
    KeyState& k = st[static_cast<size_t>(a.micro) * v + a.chunk];
    const int vs = vstage_of(sh, s, a.chunk);
    switch (a.op) {
      case Op::kRecvForward:
        if (vs == 0) return where + ": the first virtual stage receives no activation";
        if (k.recv_f >= 0) return repeated(where, k.recv_f);
        k.recv_f = idx;
        break;
      case Op::kForward:
        if (k.bwd >= 0 || k.bwd_in >= 0)
          return where + ": after its backward (action #" + std::to_string(std::max(k.bwd, k.bwd_in)) + ")";
        if (k.fwd >= 0) return repeated(where, k.fwd);
        if (vs > 0 && k.recv_f < 0) return where + ": no RecvForward posted before it for its input activation";
        k.fwd = idx;
        *busy += costs.f;
        *peak = std::max(*peak, ++live);
        (*peak_chunk)[a.chunk] = std::max((*peak_chunk)[a.chunk], ++live_chunk[a.chunk]);
        break;
      case Op::kSendForward:
        if (vs == last) return where + ": the last virtual stage sends no activation";
        if (k.fwd < 0) return where + ": before the Forward that produces its activation";
        if (k.send_f >= 0) return repeated(where, k.send_f);
        k.send_f = idx;
        break;
      case Op::kRecvBackward:
        if (vs == last) return where + ": the last virtual stage receives no gradient (its loss starts the backward)";
        if (k.recv_b >= 0) return repeated(where, k.recv_b);
        k.recv_b = idx;
        break;
      case Op::kBackward:
      case Op::kBackwardInput: {
        if (k.fwd < 0) {
          for (size_t j = i + 1; j < list.size(); ++j)
            if (list[j].op == Op::kForward && list[j].micro == a.micro && list[j].chunk == a.chunk)
              return where + ": before its Forward (action #" + std::to_string(j) +
                     "); a forward must precede its backward";
          return where + ": no Forward of this micro-batch and chunk on the stage";
        }
        if (k.bwd >= 0 || k.bwd_in >= 0) return repeated(where, std::max(k.bwd, k.bwd_in));
        if (vs < last && k.recv_b < 0) return where + ": no RecvBackward posted before it for its output gradient";
        if (a.op == Op::kBackward) {
          k.bwd = idx;
          *busy += costs.b + costs.w;
          --live;
          --live_chunk[a.chunk];
        } else {
          k.bwd_in = idx;
          *busy += costs.b;
        }
        break;
      }
      case Op::kBackwardWeight:
        if (k.bwd >= 0) return where + ": after a fused Backward (action #" + std::to_string(k.bwd) + ") of the same";
        if (k.bwd_in < 0) return where + ": without a prior BackwardInput";
        if (k.bwd_w >= 0) return repeated(where, k.bwd_w);
        k.bwd_w = idx;
        *busy += costs.w;
        --live;
        --live_chunk[a.chunk];
        break;
      case Op::kSendBackward:
        if (vs == 0) return where + ": the first virtual stage sends no gradient";
        if (k.bwd < 0 && k.bwd_in < 0)
          return where + ": before the Backward (or BackwardInput) that produces its gradient";
        if (k.send_b >= 0) return repeated(where, k.send_b);
        k.send_b = idx;
        break;
    }
  }
  for (int mb = 0; mb < m; ++mb)
    for (int c = 0; c < v; ++c) {
      const KeyState& k = st[static_cast<size_t>(mb) * v + c];
      const std::string what = "stage " + std::to_string(s) + ": (micro " + std::to_string(mb) + ", chunk " +
                               std::to_string(c) + ")";
      if (k.fwd < 0) return what + " has no Forward";
      if (k.bwd < 0 && k.bwd_in < 0) return what + " has no Backward (nor BackwardInput)";
      if (k.bwd_in >= 0 && k.bwd_w < 0) return what + " has a BackwardInput but no BackwardWeight";
    }
  return "";
}

// A message between virtual stages: direction (0 activation, 1 gradient), micro-batch, receiving
// virtual stage.
using MsgKey = std::tuple<int, int, int>;

}  // namespace

Simulation simulate(const std::vector<std::vector<Action>>& lists, const Shape& shape, const Costs& costs) {
  Simulation r;
  const int p = shape.stages;
  if (p < 1 || shape.micro_batches < 1 || shape.chunks < 1) {
    r.error = "bad shape: stages, micro_batches and chunks must be >= 1";
    return r;
  }
  if (static_cast<int>(lists.size()) != p) {
    r.error = std::to_string(lists.size()) + " action lists for " + std::to_string(p) + " stages";
    return r;
  }
  const int last = virtual_stages(shape) - 1;
  r.busy.assign(p, 0.0);
  r.peak_live.assign(p, 0);
  r.peak_live_chunk.assign(p, {});
  for (int s = 0; s < p; ++s) {
    r.error = check_list(lists[s], shape, s, costs, &r.busy[s], &r.peak_live[s], &r.peak_live_chunk[s]);
    if (!r.error.empty()) return r;
  }

  // Run the lists against each other. Time is data-driven: a compute starts at max(the stage's clock,
  // the arrival of its input), a send is stamped with the sender's clock (the end of the compute before
  // it), a receive only registers. So the order in which stages are advanced here does not change any
  // time, and a round robin until nothing moves is an exact event simulation.
  std::map<MsgKey, double> sent;          // message -> arrival time
  std::map<MsgKey, int> posted;           // message -> receiving stage that posted it
  std::vector<size_t> pc(p, 0);
  std::vector<double> clock(p, 0.0);
  // What a compute waits for, as a message key and the virtual stage that sends it.
  auto input_of = [&](int s, const Action& a, MsgKey* key, int* from) {
    const int vs = vstage_of(shape, s, a.chunk);
    if (a.op == Op::kForward && vs > 0) {
      *key = {0, a.micro, vs};
      *from = vs - 1;
      return true;
    }
    if ((a.op == Op::kBackward || a.op == Op::kBackwardInput) && vs < last) {
      *key = {1, a.micro, vs};
      *from = vs + 1;
      return true;
    }
    return false;
  };
  for (;;) {
    bool progress = false, done = true;
    for (int s = 0; s < p; ++s) {
      const auto& list = lists[s];
      while (pc[s] < list.size()) {
        const Action& a = list[pc[s]];
        const int vs = vstage_of(shape, s, a.chunk);
        if (a.op == Op::kSendForward || a.op == Op::kSendBackward) {
          const MsgKey key = a.op == Op::kSendForward ? MsgKey{0, a.micro, vs + 1} : MsgKey{1, a.micro, vs - 1};
          sent[key] = clock[s];
        } else if (a.op == Op::kRecvForward || a.op == Op::kRecvBackward) {
          posted[{a.op == Op::kRecvForward ? 0 : 1, a.micro, vs}] = s;
        } else {
          MsgKey key;
          int from;
          double start = clock[s];
          if (input_of(s, a, &key, &from)) {
            auto it = sent.find(key);
            if (it == sent.end()) break;  // blocked: the neighbour has not sent it yet
            start = std::max(start, it->second);
          }
          const double cost = a.op == Op::kForward         ? costs.f
                              : a.op == Op::kBackward      ? costs.b + costs.w
                              : a.op == Op::kBackwardInput ? costs.b
                                                           : costs.w;
          clock[s] = start + cost;
        }
        ++pc[s];
        progress = true;
      }
      if (pc[s] < list.size()) done = false;
    }
    if (done) break;
    if (!progress) {
      // Deadlock: every unfinished stage waits at a compute for a message never sent. Say, for each, what
      // it waits for and where the sender is.
      std::ostringstream e;
      e << "deadlock:";
      const char* sep = " ";
      for (int s = 0; s < p; ++s) {
        if (pc[s] >= lists[s].size()) continue;
        const Action& a = lists[s][pc[s]];
        MsgKey key{};
        int from = 0;
        input_of(s, a, &key, &from);  // true: a stage only stops at a compute that waits for a message
        const int fs = from % p, fc = from / p;
        const bool activation = std::get<0>(key) == 0;
        const Action want{activation ? Op::kSendForward : Op::kSendBackward, a.micro, fc};
        e << sep << at(s, pc[s], a) << " waits for the " << (activation ? "activation" : "gradient") << " from stage "
          << fs << " chunk " << fc;
        const auto& src = lists[fs];
        const auto it = std::find(src.begin(), src.end(), want);
        if (it == src.end()) {
          e << " (stage " << fs << "'s list has no " << describe(want) << ")";
        } else {
          e << " (stage " << fs << " has not reached its " << describe(want) << " at action #" << (it - src.begin())
            << ": it is stuck at action #" << pc[fs] << " " << describe(src[pc[fs]]) << ")";
        }
        sep = "; ";
      }
      r.error = e.str();
      return r;
    }
  }
  for (const auto& [key, time] : sent) {
    if (posted.count(key)) continue;
    const auto [dir, micro, to] = key;
    r.error = std::string("unmatched send: the ") + (dir == 0 ? "activation" : "gradient") + " of micro " +
              std::to_string(micro) + " for stage " + std::to_string(to % p) + " chunk " + std::to_string(to / p) +
              " is never received there";
    return r;
  }
  for (const auto& [key, stage] : posted) {
    if (sent.count(key)) continue;
    const auto [dir, micro, to] = key;
    r.error = "unmatched receive: stage " + std::to_string(stage) + " posts " +
              describe({dir == 0 ? Op::kRecvForward : Op::kRecvBackward, micro, to / p}) + " that nobody sends";
    return r;
  }
  r.makespan = *std::max_element(clock.begin(), clock.end());
  r.idle.resize(p);
  double idle = 0;
  for (int s = 0; s < p; ++s) idle += (r.idle[s] = r.makespan - r.busy[s]);
  r.bubble_fraction = r.makespan > 0 ? idle / (p * r.makespan) : 0.0;
  r.ok = true;
  return r;
}

Simulation simulate(Scheduler sched, const Shape& shape, const Costs& costs) {
  std::vector<std::vector<Action>> lists;
  for (int s = 0; s < shape.stages; ++s) lists.push_back(stage_actions(sched, shape, s));
  return simulate(lists, shape, costs);
}

double analytic_bubble(Scheduler sched, const Shape& shape, const Costs& costs) {
  if (std::string why = check_shape(sched, shape); !why.empty()) throw std::invalid_argument(why);
  const double p = shape.stages, m = shape.micro_batches, v = shape.chunks;
  const double step = costs.f + costs.b + costs.w;  // one micro-batch on one chunk, forward and backward
  double bubble = 0, work = m * step;
  switch (sched) {
    case Scheduler::kGPipe:
    case Scheduler::k1F1B: bubble = (p - 1) * step; break;
    // Costs are per chunk, so a stage's work is m v (f + b + w) and the bubble (p - 1)(f + b + w): the
    // published (p - 1)(t_f + t_b) / v with t per whole stage.
    case Scheduler::kInterleaved:
      bubble = (p - 1) * step;
      work *= v;
      break;
    case Scheduler::kZBH1: bubble = std::max(0.0, (p - 1) * (costs.f + costs.b - costs.w)); break;
  }
  return bubble + work > 0 ? bubble / (bubble + work) : 0.0;
}

int live_bound(Scheduler sched, const Shape& shape, int stage) {
  if (std::string why = check_shape(sched, shape); !why.empty()) throw std::invalid_argument(why);
  const int p = shape.stages, m = shape.micro_batches, v = shape.chunks;
  switch (sched) {
    case Scheduler::kGPipe: return m * v;
    // Warm-up forwards, then the first steady forward before any backward frees one.
    case Scheduler::k1F1B: return std::min(p - stage, m);
    case Scheduler::kInterleaved: {
      const int warm = (p - stage - 1) * 2 + (v - 1) * p;
      return std::min(warm + 1, m * v);
    }
    // Every stage reaches 1F1B's first-stage peak: W lags so that F count - W count stays at p.
    case Scheduler::kZBH1: return std::min(p, m);
  }
  return 0;
}

std::vector<int> slots_per_chunk(Scheduler sched, const Shape& shape, int stage) {
  if (stage < 0 || stage >= shape.stages)
    throw std::invalid_argument("pipeline stage " + std::to_string(stage) + " out of range");
  const Simulation sim = simulate(sched, shape);
  if (!sim.ok)
    throw std::logic_error("pipeline schedule " + scheduler_name(sched) + " fails its simulation: " + sim.error);
  return sim.peak_live_chunk[stage];
}

}  // namespace gf::pipeline
