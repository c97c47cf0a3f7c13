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

// Names an action in an error: its stage, its index and, with origins (a schedule file's cells), where it
// comes from.
struct Namer {
  const std::vector<std::vector<std::string>>* origins = nullptr;
  std::string operator()(int stage, size_t index, const Action& a) const {
    std::string s = "stage " + std::to_string(stage) + ", action #" + std::to_string(index) + " " + describe(a);
    const size_t st = static_cast<size_t>(stage);
    if (origins != nullptr && st < origins->size() && index < (*origins)[st].size() && !(*origins)[st][index].empty())
      s += " [" + (*origins)[st][index] + "]";
    return s;
  }
};

// What one stage has done to one (micro, chunk), by action index (-1: not yet). Used by the per-list
// checks; a second pass runs the lists against each other.
struct KeyState {
  int recv_f = -1, fwd = -1, send_f = -1, recv_b = -1, bwd = -1, bwd_in = -1, bwd_w = -1, send_b = -1;
};

// A compute at `i` with no receive posted before it for its input: an error when the receive comes later
// in the list; when the list has none, "" and the compute's index in *missing (the first such one), for
// simulate() to say whether a send nobody receives is behind it (an unmatched send) or the message is
// missing on both sides.
std::string receive_missing(const std::vector<Action>& list, size_t i, Op recv, const std::string& where,
                            int* missing) {
  const Action want{recv, list[i].micro, list[i].chunk};
  for (size_t j = i + 1; j < list.size(); ++j)
    if (list[j] == want)
      return where + ": its " + describe(want) + " comes after it (action #" + std::to_string(j) +
             "); post a receive before the compute that reads it";
  if (*missing < 0) *missing = static_cast<int>(i);
  return "";
}

// Checks one stage's list on its own: ranges, the order of each (micro, chunk)'s computes, a posted
// receive before each compute that needs one, each send after the compute that produced its data, no
// repeats, no compute missing; and counts the live activations. Returns the first problem.
std::string check_list(const std::vector<Action>& list, const Shape& sh, int s, const std::vector<Costs>& per_vstage,
                       const Namer& at, double* busy, int* peak, std::vector<int>* peak_chunk, int* missing_recv) {
  const int m = sh.micro_batches, v = sh.chunks, last = virtual_stages(sh) - 1;
  std::vector<KeyState> st(static_cast<size_t>(m) * v);
  int live = 0, last_compute = -1;
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
    const Costs& costs = per_vstage[static_cast<size_t>(vs)];
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
        if (vs > 0 && k.recv_f < 0) {
          if (std::string e = receive_missing(list, i, Op::kRecvForward, where, missing_recv); !e.empty()) return e;
        }
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
        if (vs < last && k.recv_b < 0) {
          if (std::string e = receive_missing(list, i, Op::kRecvBackward, where, missing_recv); !e.empty()) return e;
        }
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
        if (last_compute != std::max(k.bwd, k.bwd_in))
          return where + ": after action #" + std::to_string(last_compute) + " " +
                 describe(list[static_cast<size_t>(last_compute)]) + ", which overwrites the gradient it sends (the " +
                 "backward's scratch); send it before the stage's next compute, right after its action #" +
                 std::to_string(std::max(k.bwd, k.bwd_in));
        k.send_b = idx;
        break;
    }
    if (a.op == Op::kForward || a.op == Op::kBackward || a.op == Op::kBackwardInput || a.op == Op::kBackwardWeight)
      last_compute = idx;
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
                            const std::vector<size_t>& pc, const Namer& at) {
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
    const int fs = stage_of(shape, from), fc = chunk_of(shape, from);
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

// Stage s's compute at index i has no receive for its input anywhere in its list: an unmatched send when
// the neighbour sends the message, else a message missing on both sides.
std::string missing_receive_report(const std::vector<std::vector<Action>>& lists, const Shape& shape, int s, int i,
                                   const Namer& at) {
  const Action& a = lists[static_cast<size_t>(s)][static_cast<size_t>(i)];
  MsgKey key{};
  int from = 0;
  input_message(shape, s, a, &key, &from);  // true: only a compute with an input is recorded as missing its receive
  const bool activation = std::get<0>(key) == 0;
  const Action recv{activation ? Op::kRecvForward : Op::kRecvBackward, a.micro, a.chunk};
  const std::string own = at(s, static_cast<size_t>(i), a) + ": no " + op_name(recv.op) + " posted before it for its " +
                          (activation ? "input activation" : "output gradient");
  const int fs = stage_of(shape, from), fc = chunk_of(shape, from);
  const Action send{activation ? Op::kSendForward : Op::kSendBackward, a.micro, fc};
  const auto& src = lists[static_cast<size_t>(fs)];
  const auto it = std::find(src.begin(), src.end(), send);
  if (it == src.end()) return own + " (and stage " + std::to_string(fs) + " has no " + describe(send) + ")";
  return "unmatched send: " + at(fs, static_cast<size_t>(it - src.begin()), send) + " is received by no " +
         describe(recv) + " on stage " + std::to_string(s) + " (" + own + ")";
}

// A send nobody receives or a receive nobody sends, described; "" when every message matches.
std::string unmatched_message(const std::map<MsgKey, double>& sent, const std::map<MsgKey, int>& posted,
                              const Shape& shape) {
  for (const auto& [key, time] : sent) {
    if (posted.count(key)) continue;
    const auto [dir, micro, to] = key;
    return std::string("unmatched send: the ") + (dir == 0 ? "activation" : "gradient") + " of micro " +
           std::to_string(micro) + " for stage " + std::to_string(stage_of(shape, to)) + " chunk " +
           std::to_string(chunk_of(shape, to)) +
           " is never received there";
  }
  for (const auto& [key, stage] : posted) {
    if (sent.count(key)) continue;
    const auto [dir, micro, to] = key;
    return "unmatched receive: stage " + std::to_string(stage) + " posts " +
           describe({dir == 0 ? Op::kRecvForward : Op::kRecvBackward, micro, chunk_of(shape, to)}) + " that nobody sends";
  }
  return "";
}

}  // namespace

Simulation simulate(const std::vector<std::vector<Action>>& lists, const Shape& shape, const Costs& costs,
                    const std::vector<std::vector<std::string>>* origins) {
  const int vs = std::max(0, virtual_stages(shape));
  return simulate(lists, shape, std::vector<Costs>(static_cast<size_t>(vs), costs), origins);
}

Simulation simulate(const std::vector<std::vector<Action>>& lists, const Shape& shape,
                    const std::vector<Costs>& per_vstage, const std::vector<std::vector<std::string>>* origins) {
  Simulation r;
  const Namer at{origins};
  const int p = shape.stages;
  if (p < 1 || shape.micro_batches < 1 || shape.chunks < 1) {
    r.error = "bad shape: stages, micro_batches and chunks must be >= 1";
    return r;
  }
  if (static_cast<int>(lists.size()) != p) {
    r.error = std::to_string(lists.size()) + " action lists for " + std::to_string(p) + " stages";
    return r;
  }
  if (static_cast<int>(per_vstage.size()) != virtual_stages(shape)) {
    r.error = std::to_string(per_vstage.size()) + " costs for " + std::to_string(virtual_stages(shape)) +
              " virtual stages";
    return r;
  }
  r.busy.assign(p, 0.0);
  r.peak_live.assign(p, 0);
  r.peak_live_chunk.assign(p, {});
  std::vector<int> missing(static_cast<size_t>(p), -1);
  for (int s = 0; s < p; ++s) {
    r.error = check_list(lists[s], shape, s, per_vstage, at, &r.busy[s], &r.peak_live[s], &r.peak_live_chunk[s],
                         &missing[s]);
    if (!r.error.empty()) return r;
  }
  for (int s = 0; s < p; ++s)
    if (missing[static_cast<size_t>(s)] >= 0) {
      r.error = missing_receive_report(lists, shape, s, missing[static_cast<size_t>(s)], at);
      return r;
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
          const Costs& costs = per_vstage[static_cast<size_t>(vs)];
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
      r.error = deadlock_report(lists, shape, pc, at);
      return r;
    }
  }
  r.error = unmatched_message(sent, posted, shape);
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
    case Scheduler::kZBV: return simulate(sched, shape, costs).bubble_fraction;
    case Scheduler::kFile: throw std::invalid_argument("a schedule file has no closed-form bubble: simulate its lists");
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
    // Chunk 0's warm-up forwards (2(p - s) - 1, plus s paired with chunk 1's) and chunk 1's first until its first
    // weight pass: m + s + 1 when the micro-batches run out first, never more than 2p (the paper's "same peak as
    // 1F1B": 2p half-stage activations, p whole-stage ones) nor all 2m of the stage's.
    case Scheduler::kZBV: return std::min({2 * p, m + stage + 1, 2 * m});
    case Scheduler::kFile: throw std::invalid_argument("a schedule file's live micro-batches are its simulation's");
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
