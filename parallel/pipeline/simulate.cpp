// The pipeline simulator (parallel/pipeline/schedule.h): runs every stage's action list against the
// others with per-op costs, for a schedule's step time and bubble; the closed-form bubble, the live
// micro-batches and the slots a stage needs. No MPI and no model.
#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "parallel/pipeline/schedule.h"

namespace gf::pipeline {

namespace {

std::string at(int stage, size_t index, const Action& a) {
  return "stage " + std::to_string(stage) + ", action #" + std::to_string(index) + " " + describe(a);
}

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


// What a compute waits for, as a message key and the virtual stage that sends it.
bool input_message(const Shape& shape, int s, const Action& a, MsgKey* key, int* from) {
  const int vs = vstage_of(shape, s, a.chunk), last = virtual_stages(shape) - 1;
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
}

// Deadlock: every unfinished stage waits at a compute for a message never sent. Says, for each, what
// it waits for and where the sender is.
std::string deadlock_report(const std::vector<std::vector<Action>>& lists, const Shape& shape,
                            const std::vector<size_t>& pc) {
  const int p = shape.stages;
  std::ostringstream e;
  e << "deadlock:";
  const char* sep = " ";
  for (int s = 0; s < p; ++s) {
    if (pc[s] >= lists[s].size()) continue;
    const Action& a = lists[s][pc[s]];
    MsgKey key{};
    int from = 0;
    input_message(shape, s, a, &key, &from);  // true: a stage only stops at a compute that waits for a message
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
  return e.str();
}

// A send nobody receives or a receive nobody sends, described; "" when every message matches.
std::string unmatched_message(const std::map<MsgKey, double>& sent, const std::map<MsgKey, int>& posted, int p) {
  for (const auto& [key, time] : sent) {
    if (posted.count(key)) continue;
    const auto [dir, micro, to] = key;
    return std::string("unmatched send: the ") + (dir == 0 ? "activation" : "gradient") + " of micro " +
           std::to_string(micro) + " for stage " + std::to_string(to % p) + " chunk " + std::to_string(to / p) +
           " is never received there";
  }
  for (const auto& [key, stage] : posted) {
    if (sent.count(key)) continue;
    const auto [dir, micro, to] = key;
    return "unmatched receive: stage " + std::to_string(stage) + " posts " +
           describe({dir == 0 ? Op::kRecvForward : Op::kRecvBackward, micro, to / p}) + " that nobody sends";
  }
  return "";
}

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
  auto input_of = [&](int s, const Action& a, MsgKey* key, int* from) { return input_message(shape, s, a, key, from); };
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
      r.error = deadlock_report(lists, shape, pc);
      return r;
    }
  }
  r.error = unmatched_message(sent, posted, p);
  if (!r.error.empty()) return r;
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
