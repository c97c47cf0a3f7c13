// The step timeline's recorder (core/trace/trace.h): nothing recorded when off, spans nest and keep their
// order, the flags select communication and memory events, other threads are dropped, op spans are
// left out of parallel regions of any size, and the JSON is the Trace Event Format (parsed back with
// nlohmann::json).
#include "core/trace/trace.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

namespace gf::trace {
namespace {

// Leaves the recorder off for the tests that follow, whatever a test did.
struct TraceTest : ::testing::Test {
  void TearDown() override { stop(); }
};

TEST_F(TraceTest, OffRecordsNothing) {
  start(kOn, 8);
  stop();
  {
    Span a("compute", "a");
    Span b(kOn, "compute", "layer %d fwd", 3);
    b.arg("layer", 3.0).arg("group", "tp");
    EXPECT_FALSE(a.recording());
    EXPECT_FALSE(b.recording());
    memory_counter(1.0);
  }
  EXPECT_TRUE(events().empty());
  EXPECT_FALSE(enabled());
}

TEST_F(TraceTest, SpansNestInTheOrderTheyBegan) {
  start(kOn, 8);
  {
    Span outer("step", "step 1");
    {
      Span inner(kOn, "compute", "layer %d fwd", 0);
      inner.arg("layer", 0.0);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    Span second("compute", "head fwd");
  }
  stop();
  const std::vector<Event>& e = events();
  ASSERT_EQ(e.size(), 3u);
  EXPECT_STREQ(e[0].name, "step 1");
  EXPECT_STREQ(e[1].name, "layer 0 fwd");
  EXPECT_STREQ(e[2].name, "head fwd");
  for (const Event& x : e) {
    EXPECT_EQ(x.ph, 'X');
    EXPECT_GE(x.dur, 0.0);
  }
  // Children inside the parent, one after the other.
  EXPECT_LE(e[0].ts, e[1].ts);
  EXPECT_LE(e[1].ts + e[1].dur, e[2].ts);
  EXPECT_LE(e[2].ts + e[2].dur, e[0].ts + e[0].dur);
  EXPECT_GE(e[1].dur, 2000.0) << "the 2 ms sleep, in microseconds";
  ASSERT_EQ(e[1].nargs, 1);
  EXPECT_STREQ(e[1].args[0].key, "layer");
}

TEST_F(TraceTest, FlagsSelectCommunicationAndMemory) {
  start(kOn, 8);
  {
    Span comm("comm", "all-reduce", kOn | kCommunication);
    EXPECT_FALSE(comm.recording());
    memory_counter(5.0);
  }
  EXPECT_TRUE(events().empty());
  start(kCommunication | kMemory, 8);
  {
    Span comm("comm", "all-reduce", kOn | kCommunication);
    EXPECT_TRUE(comm.recording());
    memory_counter(5.0);
  }
  stop();
  ASSERT_EQ(events().size(), 3u);  // the all-reduce, the read of the RSS (a span: its time shows), the counter
  EXPECT_STREQ(events()[1].name, "read RSS");
  const Event& c = events()[2];
  EXPECT_EQ(c.ph, 'C');
  ASSERT_EQ(c.nargs, 2);
  EXPECT_STREQ(c.args[0].key, "rss_bytes");
  EXPECT_GT(c.args[0].value, 0.0) << "this process's resident set from /proc/self/statm";
  EXPECT_EQ(c.args[1].value, 5.0);
}

TEST_F(TraceTest, OtherThreadsAreDropped) {
  start(kOn, 8);
  std::thread([] { Span s("compute", "elsewhere"); }).join();
  { Span s("compute", "here"); }
  stop();
  ASSERT_EQ(events().size(), 1u);
  EXPECT_STREQ(events()[0].name, "here");
}

TEST_F(TraceTest, OpSpansAreLeftOutOfParallelRegionsOfAnySize) {
  // An op's span inside a parallel construct is not recorded, whether its team has several threads
  // or one (an `if (false)` region, or one thread in all): the breakdown of a one-thread run then
  // counts the same spans as a run on more threads.
  start(kOn | kOps, 16);
  { GF_OP_SPAN("gemm", "outside"); }
#pragma omp parallel num_threads(1)
  { GF_OP_SPAN("gemm", "team of one"); }
#pragma omp parallel if (false)
  { GF_OP_SPAN("gemm", "inactive region"); }
#pragma omp parallel num_threads(2)
  {
#pragma omp master
    { GF_OP_SPAN("gemm", "team of two"); }
  }
  stop();
  ASSERT_EQ(events().size(), 1u);
  EXPECT_STREQ(events()[0].name, "outside");
}

TEST_F(TraceTest, GrowingPastTheCapacityIsCounted) {
  start(kOn, 2);
  for (int i = 0; i < 5; ++i) Span s("compute", "x");
  stop();
  EXPECT_EQ(events().size(), 5u);
  EXPECT_GE(growths(), 1);
  start(kOn, 16);
  for (int i = 0; i < 5; ++i) Span s("compute", "x");
  stop();
  EXPECT_EQ(growths(), 0);
}

TEST_F(TraceTest, JsonIsTheTraceEventFormat) {
  const auto origin = Clock::now();
  start(kOn | kMemory, 8, origin);
  {
    Span s("comm", "all-reduce");
    s.arg("bytes", 4096.0).arg("group", "d\"p");
    Span open_forever("compute", "never closed");  // closed after the JSON is made: left out
    memory_counter(7.0);
    const int64_t i = instant("meter", "interval start", origin + std::chrono::microseconds(1500));
    add_arg(i, "step", 2.0);
    const std::string body = events_json(events(), 3, 0);
    const std::string file = trace_file_json({process_name_json(3, "rank 3 (dp 1)"), thread_name_json(3, 0, "trainer")},
                                             {body}, "{\"steps\":[2,3]}");
    const nlohmann::json j = nlohmann::json::parse(file);
    EXPECT_EQ(j["displayTimeUnit"], "ms");
    EXPECT_EQ(j["otherData"]["steps"][1], 3);
    const nlohmann::json& ev = j["traceEvents"];
    // 2 metadata, the read of the RSS, the counter, the instant (the two outer spans are still open)
    ASSERT_EQ(ev.size(), 5u) << file;
    EXPECT_EQ(ev[0]["ph"], "M");
    EXPECT_EQ(ev[0]["name"], "process_name");
    EXPECT_EQ(ev[0]["args"]["name"], "rank 3 (dp 1)");
    EXPECT_EQ(ev[2]["name"], "read RSS");
    EXPECT_EQ(ev[3]["ph"], "C");
    EXPECT_EQ(ev[3]["args"]["planned_activation_bytes"], 7);
    EXPECT_EQ(ev[4]["ph"], "i");
    EXPECT_EQ(ev[4]["s"], "t");
    EXPECT_DOUBLE_EQ(ev[4]["ts"].get<double>(), 1500.0);
    EXPECT_EQ(ev[4]["args"]["step"], 2);
    EXPECT_EQ(ev[4]["pid"], 3);
  }
  stop();
  // Appended, not "[" + string (GCC 12's -Wrestrict misfires on that operator+ once inlined).
  std::string array = "[";
  array += events_json(events(), 1, 0);
  array += "]";
  const nlohmann::json ev = nlohmann::json::parse(array);
  ASSERT_EQ(ev.size(), 5u);
  const nlohmann::json& x = ev[0];
  EXPECT_EQ(x["ph"], "X");
  EXPECT_EQ(x["name"], "all-reduce");
  EXPECT_EQ(x["cat"], "comm");
  EXPECT_EQ(x["pid"], 1);
  EXPECT_EQ(x["tid"], 0);
  EXPECT_GE(x["ts"].get<double>(), 0.0);
  EXPECT_GE(x["dur"].get<double>(), 0.0);
  EXPECT_EQ(x["args"]["bytes"], 4096);
  EXPECT_EQ(x["args"]["group"], "d\"p") << "escaped and parsed back";
}

}  // namespace
}  // namespace gf::trace
