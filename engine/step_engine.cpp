#include "engine/step_engine.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <optional>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/math/progress.h"
#include "core/trace/trace.h"
#include "models/pipeline_stage.h"

namespace gf {

namespace {

// The hang test's fault (tests/integration/hang_timeout.sh): with GF_PIPELINE_FAULT=stop-before-send and
// GF_PIPELINE_FAULT_STEP=N, a rank stops itself (SIGSTOP) just before its pipeline send of micro-batch 1 at step N,
// so that the next stage waits in the matching receive. Nothing without the variables.
void send_fault_point(int64_t step, int64_t micro_batch) {
  static const char* const want = std::getenv("GF_PIPELINE_FAULT");
  if (want == nullptr || std::strcmp(want, "stop-before-send") != 0 || micro_batch != 1) return;
  const char* at = std::getenv("GF_PIPELINE_FAULT_STEP");
  if (at == nullptr || std::to_string(step) != at) return;
  std::raise(SIGSTOP);
}

}  // namespace

using pipeline::Action;
using pipeline::Op;

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

std::vector<StageOptions> pipeline_chunk_options(const std::vector<int64_t>& stage_layers, pipeline::Scheduler sched,
                                                 const pipeline::Shape& shape, int stage) {
  return pipeline_chunk_options(stage_layers, pipeline::all_stage_actions(sched, shape), shape, stage);
}

std::vector<StageOptions> pipeline_chunk_options(const std::vector<int64_t>& stage_layers,
                                                 const pipeline::StageLists& lists, const pipeline::Shape& shape,
                                                 int stage) {
  if (static_cast<int64_t>(stage_layers.size()) != static_cast<int64_t>(shape.stages) * shape.chunks)
    throw std::invalid_argument("pipeline: " + std::to_string(stage_layers.size()) + " layer counts for " +
                                std::to_string(shape.stages * shape.chunks) + " virtual stages");
  if (stage < 0 || stage >= static_cast<int>(lists.size()))
    throw std::invalid_argument("pipeline stage " + std::to_string(stage) + " out of range");
  // Slots: the simulated peaks per chunk (they depend on the lists' order only, not on the costs).
  const pipeline::Simulation sim = pipeline::simulate(lists, shape);
  if (!sim.ok) throw std::logic_error("pipeline schedule fails its simulation: " + sim.error);
  const std::vector<int>& slots = sim.peak_live_chunk[static_cast<size_t>(stage)];
  // The chunk holding the last layer can share one logits buffer over its slots when the schedule
  // runs each micro-batch's backward (input pass) right after its forward there: no other forward
  // of that chunk in between.
  const std::vector<pipeline::Action>& list = lists[static_cast<size_t>(stage)];
  auto forward_then_backward = [&](int chunk) {
    int open = -1;
    for (const pipeline::Action& a : list) {
      if (a.chunk != chunk) continue;
      if (a.op == pipeline::Op::kForward) {
        if (open >= 0) return false;
        open = a.micro;
      } else if (a.op == pipeline::Op::kBackward || a.op == pipeline::Op::kBackwardInput) {
        if (a.micro != open) return false;
        open = -1;
      }
    }
    return true;
  };
  std::vector<StageOptions> out;
  const std::vector<int64_t> bounds = layer_bounds(stage_layers);
  for (int c = 0; c < shape.chunks; ++c) {
    const int k = pipeline::vstage_of(shape, stage, c);
    StageOptions st;
    st.layer_begin = bounds[static_cast<size_t>(k)];
    st.layer_end = bounds[static_cast<size_t>(k) + 1];
    st.slots = std::max(1, slots.at(static_cast<size_t>(c)));
    st.defer_weight_grads = std::any_of(list.begin(), list.end(), [&](const pipeline::Action& a) {
      return a.chunk == c && a.op == pipeline::Op::kBackwardWeight;
    });
    st.share_logits = k == pipeline::virtual_stages(shape) - 1 && forward_then_backward(c);
    out.push_back(st);
  }
  return out;
}

std::vector<TransformerLM*> engine_chunks(CausalLM& model) {
  if (auto* stage = dynamic_cast<PipelineStage*>(&model)) {
    std::vector<TransformerLM*> out;
    for (int c = 0; c < stage->chunks(); ++c) out.push_back(&stage->chunk(c));
    return out;
  }
  if (auto* whole = dynamic_cast<TransformerLM*>(&model)) return {whole};
  throw std::invalid_argument("the step engine runs TransformerLM chunks; the registered factory built another model");
}

StepEngine::StepEngine(std::vector<TransformerLM*> chunks, const Communicator& pp, pipeline::Scheduler sched,
                       const pipeline::Shape& shape)
    : StepEngine(std::move(chunks), pp, pipeline::stage_actions(sched, shape, pp.rank()), shape) {}

StepEngine::StepEngine(std::vector<TransformerLM*> chunks, const Communicator& pp, std::vector<pipeline::Action> actions,
                       const pipeline::Shape& shape)
    : chunks_(std::move(chunks)), link_(pp), shape_(shape), stage_(pp.rank()), actions_(std::move(actions)) {
  if (pp.size() != shape.stages)
    throw std::invalid_argument("pipeline: " + std::to_string(pp.size()) + " ranks in the pipeline group for " +
                                std::to_string(shape.stages) + " stages");
  if (static_cast<int>(chunks_.size()) != shape.chunks)
    throw std::invalid_argument("pipeline: the stage holds " + std::to_string(chunks_.size()) + " chunks, the schedule " +
                                std::to_string(shape.chunks));
  const StageDims& d = chunk(0).dims();
  floats_ = d.Nl * d.C;
  const int64_t most = 2LL * shape.chunks * shape.micro_batches;
  if (most > link_.tag_upper_bound())
    throw std::invalid_argument("pipeline: " + std::to_string(most) + " message tags exceed MPI's limit " +
                                std::to_string(link_.tag_upper_bound()) + "; lower parallel_config.micro_batch_num");
  for (TransformerLM* c : chunks_) {
    c->set_progress_hook([this] { advance(); });
    const int64_t n = c->dims().slots;
    slot_micro_.emplace_back(static_cast<size_t>(n), -1);
    slot_send_.emplace_back(static_cast<size_t>(n));
  }
}

void StepEngine::on_grads_ready(std::function<void(int64_t)> ready) {
  ready_ = std::move(ready);
  for (TransformerLM* c : chunks_)
    c->set_grad_ready_hook([this](int64_t offset) {
      if (armed_ && ready_) ready_(offset);
    });
}

void StepEngine::on_unit_ready(std::function<void(int64_t)> unit_ready, CausalLM::AddRows add_rows) {
  unit_ready_ = std::move(unit_ready);
  add_rows_ = std::move(add_rows);
  for (TransformerLM* c : chunks_)
    c->set_unit_ready_hooks(
        [this](int64_t offset) {
          if (!armed_ || !unit_ready_) return false;
          unit_ready_(offset);
          return true;
        },
        [this](int64_t base, int64_t width, const int32_t* ids, const float* rows, int64_t n) {
          if (armed_ && add_rows_) add_rows_(base, width, ids, rows, n);
        });
}

int StepEngine::tag(int direction, int micro, int receiver_chunk) const {
  return (direction * shape_.chunks + receiver_chunk) * shape_.micro_batches + micro;
}

float* StepEngine::take_buffer() {
  if (free_.empty()) {
    buffers_.emplace_back(static_cast<size_t>(floats_));
    free_.push_back(buffers_.back().data());
  }
  float* b = free_.back();
  free_.pop_back();
  return b;
}

void StepEngine::wait_timed(Request& r) {
  if (r.done()) return;
  trace::Span span("wait", "MPI_Wait");  // the step timeline's wait for a neighbour stage
  const double t0 = now_s();
  r.wait();
  wait_s_ += now_s() - t0;
}

int64_t StepEngine::slot_for(int micro, int chunk) {
  std::vector<int>& s = slot_micro_[static_cast<size_t>(chunk)];
  for (size_t k = 0; k < s.size(); ++k)
    if (s[k] < 0) {
      s[k] = micro;
      wait_timed(slot_send_[static_cast<size_t>(chunk)][k]);  // its output may still be going out
      slot_of_[{micro, chunk}] = static_cast<int64_t>(k);
      return static_cast<int64_t>(k);
    }
  throw std::logic_error("pipeline: chunk " + std::to_string(chunk) + " has no free slot for micro-batch " +
                         std::to_string(micro) + " (" + std::to_string(s.size()) + " slots)");
}

void StepEngine::free_slot(int micro, int chunk) {
  const auto it = slot_of_.find({micro, chunk});
  slot_micro_[static_cast<size_t>(chunk)][static_cast<size_t>(it->second)] = -1;
  slot_of_.erase(it);
}

void StepEngine::advance() {
  // Finished sends give their buffers back; a posted receive is tested so that MPI moves it.
  for (size_t i = 0; i < sends_.size();)
    if (sends_[i].req.test()) {
      give_buffer(sends_[i].buf);
      sends_[i] = std::move(sends_.back());
      sends_.pop_back();
    } else {
      ++i;
    }
  for (auto* m : {&recv_fwd_, &recv_bwd_})
    for (auto& [key, r] : *m) r.req.test();
  for (auto& per_chunk : slot_send_)
    for (Request& r : per_chunk) r.test();
}

double StepEngine::train(const std::function<Micro(int)>& micro, float grad_scale) {
  return run(actions_, micro, grad_scale, false);
}

double StepEngine::forward_only(const std::function<Micro(int)>& micro, int count) {
  // Each micro-batch through the virtual stages in order: a chain, so no stage waits on a cycle.
  std::vector<Action> list;
  for (int i = 0; i < count; ++i)
    for (int c = 0; c < shape_.chunks; ++c) {
      if (!first_virtual(c)) list.push_back({Op::kRecvForward, i, c});
      list.push_back({Op::kForward, i, c});
      if (!last_virtual(c)) list.push_back({Op::kSendForward, i, c});
    }
  return run(list, micro, 0.0f, true);
}

double StepEngine::run(const std::vector<Action>& actions, const std::function<Micro(int)>& micro,
                             float grad_scale, bool forward_only) {
  const int p = shape_.stages;
  // Between the passes' products, too, the messages in flight move (core/math/progress.h): a send
  // posted before a pass would otherwise wait for the next layer boundary to push its data.
  std::optional<progress::Scope> moving;
  if (p > 1) moving.emplace([this] { advance(); });
  wait_s_ = compute_s_ = 0;
  moe_.clear();
  double loss = 0;
  const bool moe = chunk(0).config().moe.enabled();
  auto timed = [&](auto&& f) {
    const double t0 = now_s();
    f();
    compute_s_ += now_s() - t0;
  };
  auto take_recv = [&](std::map<std::pair<int, int>, Pending>& m, const Action& a) {
    const auto it = m.find({a.micro, a.chunk});
    if (it == m.end())
      throw std::logic_error(std::string("pipeline: ") + pipeline::op_name(a.op) + " of micro-batch " +
                             std::to_string(a.micro) + " on chunk " + std::to_string(a.chunk) + " without its receive");
    Pending r = std::move(it->second);
    m.erase(it);
    wait_timed(r.req);
    return r.buf;
  };
  for (const Action& a : actions) {
    TransformerLM& ch = chunk(a.chunk);
    // The step timeline's span of the action (its waits, messages and layers inside it).
    trace::Span span("pipeline", pipeline::op_name(a.op));
    span.arg("micro", a.micro).arg("chunk", a.chunk);
    switch (a.op) {
      case Op::kRecvForward: {
        // From the previous virtual stage: stage - 1, or the last stage's previous chunk (interleaved), or under
        // ZB-V's V the next stage's chunk 1. This stage's own chunk hands its output over in memory (SendForward).
        const int from = pipeline::stage_of(shape_, virtual_stage(a.chunk) - 1);
        if (from == stage_) break;
        float* b = take_buffer();
        recv_fwd_[{a.micro, a.chunk}] = {b, link_.recv_from(from, b, floats_, tag(0, a.micro, a.chunk))};
        break;
      }
      case Op::kRecvBackward: {
        const int from = pipeline::stage_of(shape_, virtual_stage(a.chunk) + 1);
        if (from == stage_) break;
        float* b = take_buffer();
        recv_bwd_[{a.micro, a.chunk}] = {b, link_.recv_from(from, b, floats_, tag(1, a.micro, a.chunk))};
        break;
      }
      case Op::kForward: {
        const int64_t slot = slot_for(a.micro, a.chunk);
        float* in = first_virtual(a.chunk) ? nullptr : take_recv(recv_fwd_, a);
        const Micro m = micro(a.micro);
        timed([&] { loss += ch.stage_forward(slot, m.tokens, in, m.info); });
        if (in != nullptr) give_buffer(in);
        if (moe) accumulate_moe_stats(moe_, ch.moe_stats(slot));
        if (forward_only && last_virtual(a.chunk)) free_slot(a.micro, a.chunk);
        trace::memory_counter(activation_bytes());
        break;
      }
      case Op::kSendForward: {
        send_fault_point(micro(a.micro).info.step, a.micro);
        const int64_t slot = slot_of_.at({a.micro, a.chunk});
        const int next = virtual_stage(a.chunk) + 1;
        const int to = pipeline::stage_of(shape_, next), to_chunk = pipeline::chunk_of(shape_, next);
        if (to == stage_) {  // ZB-V's turn of the V: this stage's next chunk reads a copy, no message
          float* b = take_buffer();
          std::memcpy(b, ch.stage_output(slot), sizeof(float) * static_cast<size_t>(floats_));
          recv_fwd_[{a.micro, to_chunk}] = {b, Request{}};
        } else {
          slot_send_[static_cast<size_t>(a.chunk)][static_cast<size_t>(slot)] =
              link_.send_to(to, ch.stage_output(slot), floats_, tag(0, a.micro, to_chunk));
        }
        if (forward_only) free_slot(a.micro, a.chunk);
        break;
      }
      case Op::kBackward:
      case Op::kBackwardInput: {
        const int64_t slot = slot_of_.at({a.micro, a.chunk});
        float* dout = last_virtual(a.chunk) ? nullptr : take_recv(recv_bwd_, a);
        const BwdPass pass = a.op == Op::kBackward ? BwdPass::kBoth : BwdPass::kInput;
        // Without a pipeline the data-parallel reduction starts in the last micro-batch's backward.
        armed_ = p == 1 && a.micro == shape_.micro_batches - 1;
        timed([&] { ch.stage_backward(slot, pass, dout, grad_scale); });
        armed_ = false;
        if (dout != nullptr) give_buffer(dout);
        if (a.op == Op::kBackward) free_slot(a.micro, a.chunk);
        trace::memory_counter(activation_bytes());
        break;
      }
      case Op::kBackwardWeight: {
        const int64_t slot = slot_of_.at({a.micro, a.chunk});
        timed([&] { ch.stage_backward(slot, BwdPass::kWeight, nullptr, grad_scale); });
        free_slot(a.micro, a.chunk);
        trace::memory_counter(activation_bytes());
        break;
      }
      case Op::kSendBackward: {
        // The input gradient is the chunk's scratch until its next backward: copied out to send.
        float* b = take_buffer();
        std::memcpy(b, ch.input_grad(), sizeof(float) * static_cast<size_t>(floats_));
        const int prev = virtual_stage(a.chunk) - 1;
        const int to = pipeline::stage_of(shape_, prev), to_chunk = pipeline::chunk_of(shape_, prev);
        if (to == stage_)
          recv_bwd_[{a.micro, to_chunk}] = {b, Request{}};  // the V's turn, backward: handed over in memory
        else
          sends_.push_back({b, link_.send_to(to, b, floats_, tag(1, a.micro, to_chunk))});
        break;
      }
    }
    advance();
  }
  trace::Span drain("pipeline", "drain sends");  // the sends still going out when the list is done
  for (Pending& s : sends_) {
    wait_timed(s.req);
    give_buffer(s.buf);
  }
  sends_.clear();
  for (auto& per_chunk : slot_send_)
    for (Request& r : per_chunk) wait_timed(r);
  if (!recv_fwd_.empty() || !recv_bwd_.empty() || !slot_of_.empty())
    throw std::logic_error("pipeline: the schedule left receives or micro-batches unfinished");
  return loss;
}

}  // namespace gf
