// What one step-timeline span (core/trace/trace.h) costs, off and on: the figure bench/profile_overhead.py
// multiplies by the spans of a step to state the cost of `profile: False`.
//
//   build/bin/bench_trace_span [--rounds 7] [--n 10000000]
//
// Each round times --n spans back to back in each of three states: off (the flag clear: what every
// span costs a run without profile: True), on with a literal name, and on with a formatted name
// ("layer %d fwd", as the model's spans). The on rounds record into a vector reserved for --n
// events (the recorder's steady state; no growth). Prints the median ns per span over the rounds
// as one JSON line.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/trace/trace.h"

namespace {

// Keeps the loop from being optimised away: the span's constructor and destructor are inline, and
// off they do nothing the compiler must keep but the flag's load. A relaxed atomic read is a load
// it cannot hoist out of the loop (another thread may store it).
__attribute__((noinline)) void off_loop(long n) {
  for (long i = 0; i < n; ++i) {
    gf::trace::Span s(gf::trace::kOn, "compute", "layer %d fwd", static_cast<int>(i & 63));
    s.arg("layer", static_cast<double>(i & 63));
  }
}

__attribute__((noinline)) void on_literal_loop(long n) {
  for (long i = 0; i < n; ++i) {
    gf::trace::Span s("compute", "head fwd");
  }
}

__attribute__((noinline)) void on_formatted_loop(long n) {
  for (long i = 0; i < n; ++i) {
    gf::trace::Span s(gf::trace::kOn, "compute", "layer %d fwd", static_cast<int>(i & 63));
    s.arg("layer", static_cast<double>(i & 63));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7;
  long n = 10000000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--n")) n = std::atol(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_trace_span [--rounds 7] [--n 10000000]\n");
      return 2;
    }
  }
  std::vector<double> off, lit, fmt;
  const long n_on = n / 10;  // the recording rounds keep every event: fewer of them
  for (int r = 0; r < rounds; ++r) {
    gf::trace::stop();
    double t0 = gf::bench::wall_seconds();
    off_loop(n);
    off.push_back(1e9 * (gf::bench::wall_seconds() - t0) / static_cast<double>(n));
    gf::trace::start(gf::trace::kOn, static_cast<size_t>(n_on));
    t0 = gf::bench::wall_seconds();
    on_literal_loop(n_on);
    lit.push_back(1e9 * (gf::bench::wall_seconds() - t0) / static_cast<double>(n_on));
    gf::trace::start(gf::trace::kOn, static_cast<size_t>(n_on));
    t0 = gf::bench::wall_seconds();
    on_formatted_loop(n_on);
    fmt.push_back(1e9 * (gf::bench::wall_seconds() - t0) / static_cast<double>(n_on));
    gf::trace::stop();
    if (gf::trace::growths() != 0) std::fprintf(stderr, "the recorder grew: the on figures include a reallocation\n");
  }
  std::printf("{\"off_ns\": %.3f, \"on_literal_ns\": %.1f, \"on_formatted_ns\": %.1f, \"rounds\": %d, \"n_off\": %ld, "
              "\"n_on\": %ld}\n",
              gf::bench::median(off), gf::bench::median(lit), gf::bench::median(fmt), rounds, n, n_on);
  return 0;
}
