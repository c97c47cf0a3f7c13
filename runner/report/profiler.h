// `profile: True` over a run (README, "Profiling a step"): when the step timeline's recorder
// (core/trace/trace.h) starts and stops, and the Chrome trace files it leaves:
//   <output_dir>/profile/rank_N/trace.json  each rank's own (N: world rank), as MindFormers'
//                                           ProfileMonitor puts each rank's profile under
//                                           output_dir/profile/rank_{rank_id} (get_output_subpath);
//   <output_dir>/profile/trace.json         every rank's events in one file, written by rank 0
//                                           (pid = world rank, named by its dp/tp/pp/ep coordinates).
// The recorder is core/trace's; this is the run-level part that needs MPI and the config, kept out
// of the trainer's step loop, which calls the four hooks below.
//
// Clocks: each rank's timestamps count from its own clock reading right after one world barrier at
// the start of the profile. The ranks leave a barrier within a message latency of each other (the
// last to arrive releases them), so the same ts on two ranks is the same moment to within that
// (microseconds on one host), with no clock synchronisation protocol and no drift correction: a
// profile covers seconds, steady clocks drift by parts per million.
//
// What the trace holds for the step loop: a span "step N" per profiled step (from the top of its
// loop iteration to its interval's close), inside it everything the step ran; top-level spans for
// what runs between steps ("log step N", evaluation and checkpoint saves, the last two marked
// "excluded": the runner does not count them as training time); and an instant "interval start" where
// each metrics.jsonl timing interval begins (args.step: the step whose interval it opens), so a
// checker can reconcile the trace with the per_step_time the runner measured
// (tools/check_trace.py). The instant and each step span also carry the thread's CPU time and
// involuntary context switches (args thread_cpu_us, preemptions), so that a preemption on a busy machine
// between the two shows as time off the CPU, not as the runner's unaccounted work. The recorder starts just before the interval of the first profiled step
// opens, so that interval is in the trace whole.
#pragma once
#include <cstdint>
#include <string>

#include "core/trace/trace.h"
#include "parallel/parallel_context.h"
#include "runner/config/config.h"

namespace gf {

class StepProfiler {
 public:
  // Steps [first_step, last_step] are this run's (first_step - 1 was done before it: a resumed run).
  // `events_per_step`: the estimate of the recorder's capacity per profiled step.
  StepProfiler(const ProfileConfig& cfg, const ParallelContext& ctx, std::string output_dir, int64_t first_step,
               int64_t last_step, size_t events_per_step);
  bool profiling() const { return first_ > 0; }
  int64_t first() const { return first_; }
  int64_t last() const { return last_; }

  // Step `done` has run (0: none yet), the interval that ends with it not yet closed: starts the
  // recorder when the next step is the first profiled one (a world barrier; collective).
  void before_interval_close(int64_t done);
  // The meter closed an interval at `t` (or opened its first): the instant that opens `step`'s.
  // Reads the thread's times (core/trace/trace.h) that the next interval_opens stamps its instant with: called just
  // before the clock reading it is given, so that nothing with a system call lies between that reading and the end
  // of the step's span.
  void before_interval_opens();
  void interval_opens(int64_t step, trace::Clock::time_point t) const;
  // After step `step` and what follows it (log line, evaluation, checkpoint): writes the trace when
  // `step` is the last profiled one. Collective. Returns whether it wrote (its time is not training).
  bool after_step(int64_t step);
  // Writes the trace if it is still recording (training stopped before profile_stop_step). Collective.
  void finish();

 private:
  void write();
  const ProfileConfig& cfg_;
  const ParallelContext& ctx_;
  std::string dir_;
  int64_t first_ = 0, last_ = 0;  // the profiled steps of this run; first_ 0: none
  size_t capacity_ = 0;
  bool recording_ = false;
  trace::ThreadTimes times_;
};

// The recorder's capacity per profiled step for a model of `layers` layers run over `micro_batches`
// micro-batches per step: each layer's forward and backward passes with their collectives, the
// pipeline actions, and the trainer's own spans. An estimate: the vector grows past it (and the log
// says so).
size_t profile_events_per_step(int64_t layers, int64_t micro_batches, int64_t chunks, bool communication,
                               bool ops = false);

}  // namespace gf
