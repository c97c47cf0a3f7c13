// The step timeline behind `profile: True` (runner/train/trainer.cpp): spans of what this rank did during
// the profiled steps (data, each layer's forward and backward, the head, collectives, waits, the
// optimizer, pipeline actions) and memory counters, written as Chrome trace JSON, the Trace Event
// Format that Perfetto and chrome://tracing open (complete events "ph":"X" with ts and dur in
// microseconds, counter events "ph":"C", instant events "ph":"i", metadata "ph":"M").
//
// One recorder per process, reached through free functions, not an object passed around. An MPI
// rank is a process, and the spans come from every layer of the code: the communicator
// (parallel/), the model (models/), the pipeline executor and the trainer (runner/). A global keeps
// each site a one-line RAII Span instead of a recorder pointer threaded through every constructor
// between the trainer and a ring all-reduce. It lives in core/ because core is what all of those
// link; it has no MPI (the trainer gathers the ranks' JSON and aligns their clocks).
//
// Off, which is every step outside [profile_start_step, profile_stop_step] and every run without
// `profile: True`, a Span costs one relaxed load of a flag word and a branch: its constructor tests
// the flag and returns, its destructor tests an index it did not set (bench/profile_overhead.py
// measures it). On, a span's start takes a slot in a vector reserved at start() (its end writes the
// duration into that slot), so the steps allocate nothing unless the estimate was short, and the JSON
// is made after the last profiled step, not during one.
//
// Spans are recorded from the thread that called start() (the trainer's); one from any other thread
// (a background checkpoint writer, an OpenMP worker) is dropped, so the vector needs no lock.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

namespace gf::trace {

// What the recorder records; a Span asks for the bits it needs.
enum Flags : unsigned {
  kOn = 1u,              // spans of the profiled steps
  kCommunication = 2u,   // collectives and point-to-point calls, with bytes and group (profile_communication)
  kMemory = 4u,          // RSS and planned activation counters (profile_memory)
  kOps = 8u,             // each op's span: GEMMs, attention, norms, elementwise (profile_ops)
};

// Set by start(), cleared by stop(). Relaxed: a span reads it on the recording thread, which is the
// one that sets it.
extern std::atomic<unsigned> g_flags;

inline bool enabled(unsigned need = kOn) { return (g_flags.load(std::memory_order_relaxed) & need) == need; }

using Clock = std::chrono::steady_clock;

struct Event {
  static constexpr int kMaxArgs = 5;
  static constexpr int kNameChars = 48;
  char ph = 'X';
  int nargs = 0;
  const char* cat = "";       // a string literal
  double ts = 0, dur = -1;    // microseconds since start(); dur < 0 while the span is open
  const char* str_key = nullptr;    // one string argument (a communicator's group name): a literal
  const char* str_value = nullptr;
  struct Arg {
    const char* key;  // a string literal
    double value;
  } args[kMaxArgs];
  char name[kNameChars];
};

// Starts recording at `origin` (the clock reading this rank's timestamps count from) with room for
// `capacity` events, for the `flags` given (kOn is implied). Clears what an earlier start() kept.
void start(unsigned flags, size_t capacity, Clock::time_point origin = Clock::now());
// Stops recording; the events stay until the next start().
void stop();
// The events recorded since start(), in the order their spans began. A span still open has dur < 0.
const std::vector<Event>& events();
// How many times the vector outgrew the capacity given to start() (each growth is a reallocation
// during a step: the estimate to raise).
int64_t growths();
// Microseconds since start()'s origin.
double micros(Clock::time_point t);

// Opens an event (ph 'X') now and returns its index; close() sets its duration. -1 when the calling
// thread is not the recording one.
int64_t open(const char* cat, const char* name);
void close(int64_t index);
void add_arg(int64_t index, const char* key, double value);
void add_str_arg(int64_t index, const char* key, const char* value);
// A counter event (ph 'C') now: up to kMaxArgs series of one named counter.
void counter(const char* name, std::initializer_list<Event::Arg> series);
// An instant event (ph 'i', thread scope) at `t`.
int64_t instant(const char* cat, const char* name, Clock::time_point t);
// The memory counter of profile_memory: this process's resident set now (/proc/self/statm) and the
// activation bytes the model planned, when kMemory is on.
void memory_counter(double planned_activation_bytes);
// This process's resident set in bytes (0 where /proc/self/statm cannot be read).
double current_rss_bytes();

// The events as the members of a JSON array (no brackets), with pid `pid` and tid `tid`: the
// trainer joins the ranks' fragments into the merged file.
std::string events_json(const std::vector<Event>& events, int pid, int tid);
// A whole trace file: {"traceEvents": [metadata..., fragments...], "displayTimeUnit": "ms",
// "otherData": other_data} where `fragments` are events_json() outputs and `metadata` whole JSON
// objects ("ph":"M" events naming the processes and threads). `other_data` is a JSON object.
std::string trace_file_json(const std::vector<std::string>& metadata, const std::vector<std::string>& fragments,
                            const std::string& other_data);
// A process_name, process_sort_index or thread_name metadata event.
std::string process_name_json(int pid, const std::string& name);
std::string process_sort_json(int pid, int index);
std::string thread_name_json(int pid, int tid, const std::string& name);
// `s` as a JSON string literal (quotes and escapes).
std::string json_string(const std::string& s);

// This thread's CPU time (user + system) and its involuntary context switches so far (getrusage
// RUSAGE_THREAD), written as args "thread_cpu_us" and "preemptions" on the event at `index`. Two such
// readings tell time the kernel kept the thread off its CPU (preempted by another process on a busy
// machine) from time the code spent: tools/check_trace.py uses them between a step's interval start
// and its span.
// Read them inside a span of their own ("thread times"), so that a preemption at the system call's return is time
// accounted for; read before the clock reading an instant is stamped with, not after it.
struct ThreadTimes {
  double cpu_us = -1, preemptions = -1;  // -1: not read
};
ThreadTimes read_thread_times();
void add_thread_times(int64_t index, const ThreadTimes& t);

// A span: from construction to destruction, when the flags it needs are on. Off, the constructor
// tests the flag word and returns (no clock read, no name formatted).
class Span;

// An op's span (profile_ops: bench/step_breakdown.py's categories "gemm", "attention", "norm",
// "elementwise", "moe", "convert"), recorded only with kOps on. Inside an OpenMP parallel region only the recording
// thread (the team's master) could record, so an op called from one records nothing: its time stays
// with the op around the region.
#define GF_OP_SPAN(cat, name) ::gf::trace::Span gf_op_span_(::gf::trace::OpSpan{}, cat, name)
struct OpSpan {};
// True inside an OpenMP parallel construct, even one run by a team of one thread (omp_get_level() > 0;
// in trace.cpp, so this header needs no omp.h).
bool in_parallel_region();

class Span {
 public:
  Span(const char* cat, const char* name, unsigned need = kOn) {
    if (enabled(need)) index_ = open(cat, name);
  }
  // An op's span (GF_OP_SPAN): with kOps on and outside parallel regions.
  Span(OpSpan, const char* cat, const char* name) {
    if (enabled(kOn | kOps) && !in_parallel_region()) index_ = open(cat, name);
  }
  // A name made by snprintf (e.g. "layer %d fwd"), formatted only when recording.
  template <typename... A>
  Span(unsigned need, const char* cat, const char* fmt, A... a) {
    if (enabled(need)) {
      char buf[Event::kNameChars];
      std::snprintf(buf, sizeof buf, fmt, a...);
      index_ = open(cat, buf);
    }
  }
  ~Span() {
    if (index_ >= 0) close(index_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  bool recording() const { return index_ >= 0; }
  Span& arg(const char* key, double value) {
    if (index_ >= 0) add_arg(index_, key, value);
    return *this;
  }
  Span& arg(const char* key, const char* value) {
    if (index_ >= 0) add_str_arg(index_, key, value);
    return *this;
  }
  // This span's args from the thread's times read now, in a child span of their own.
  Span& thread_times() {
    if (index_ >= 0) add_thread_times(index_, read_thread_times());
    return *this;
  }
  // Ends the span before its scope does.
  void end() {
    if (index_ >= 0) close(index_);
    index_ = -1;
  }

 private:
  int64_t index_ = -1;
};

}  // namespace gf::trace
