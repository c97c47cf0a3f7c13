// Each communicator's call log (parallel/call_log.h) under MPI, in both collectives modes: every
// collective counted once with its payload bytes, the sequence numbers the same on every rank of a
// group, split groups counted apart, sends and receives with their peer and tag, and every call
// marked done once it finished.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace gf {
namespace {

// True when `x` is the same on every rank of MPI_COMM_WORLD.
bool same_everywhere(int64_t x) {
  int64_t lo = 0, hi = 0;
  MPI_Allreduce(&x, &lo, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&x, &hi, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

struct Seen {
  std::string op;
  int64_t seq, bytes;
  int peer, tag;
  bool done;
};
std::vector<Seen> last_calls(const Communicator& c) {
  std::vector<Seen> v;
  c.call_log().for_each([&](const CallRecord& r) { v.push_back({r.op, r.seq, r.bytes, r.peer, r.tag, r.done}); });
  return v;
}

class CallLogModes : public ::testing::TestWithParam<bool> {};

TEST_P(CallLogModes, CollectivesCountedWithBytes) {
  Communicator world = Communicator::world();
  world.set_mpi_collectives(GetParam());
  const int p = world.size();
  EXPECT_EQ(world.call_log().size, p);
  EXPECT_EQ(world.call_log().rank, world.rank());
  EXPECT_STREQ(world.call_log().name, "world");
  std::vector<float> x(37, 1.0f);
  std::vector<double> d(3, 1.0);
  world.allreduce_sum(x.data(), 37);      // 1
  world.allreduce_max(d.data(), 3);       // 2
  world.reduce_scatter_sum(x.data(), 37); // 3
  world.allgather(x.data(), 37);          // 4
  PendingAllreduce bg = world.start_allreduce_sum(x.data(), 37, 2);  // 5
  bg.wait();
  world.barrier();                        // 6
  world.broadcast(d.data(), 24, 0);       // 7
  const auto strings = world.gather_strings(std::string(static_cast<size_t>(world.rank()) + 1, 'x'), 0);  // 8
  std::vector<int64_t> counts(static_cast<size_t>(p), 1), got(counts.size());
  world.alltoall(counts.data(), got.data(), 1);  // 9
  std::vector<int64_t> rows(static_cast<size_t>(p), 1);
  std::vector<float> send(static_cast<size_t>(p) * 2, 1.0f), recv(send.size());
  world.alltoallv_rows(send.data(), rows.data(), recv.data(), rows.data(), 2);  // 10
  if (p == 1) {
    EXPECT_EQ(world.call_log().calls(), 0u);  // a one-rank group runs no MPI and logs nothing
    return;
  }
  EXPECT_EQ(world.call_log().collectives(), 10);
  EXPECT_TRUE(same_everywhere(world.call_log().collectives()));
  const std::vector<Seen> v = last_calls(world);
  ASSERT_EQ(v.size(), 8u);  // the last 8 of 10: #3 .. #10
  const std::vector<std::string> ops = {"reduce-scatter", "all-gather", "all-reduce", "barrier", "broadcast",
                                        "gather",         "all-to-all", "all-to-allv"};
  const std::vector<int64_t> bytes = {148, 148, 148, 0, 24, world.rank() + 1, 8 * p, 8 * p};
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(v[i].op, ops[i]) << i;
    EXPECT_EQ(v[i].seq, static_cast<int64_t>(i) + 3) << i;
    EXPECT_EQ(v[i].bytes, bytes[i]) << i;
    EXPECT_EQ(v[i].peer, -1) << i;
    EXPECT_EQ(v[i].tag, i == 2 ? 2 : -1) << i;  // the started all-reduce keeps its tag
    EXPECT_TRUE(v[i].done) << i;
  }
}

TEST_P(CallLogModes, SplitGroupsCountApart) {
  Communicator world = Communicator::world();
  world.set_mpi_collectives(GetParam());
  Communicator half = world.split(world.rank() % 2, world.rank());
  half.set_name("half");
  EXPECT_STREQ(half.call_log().name, "half");
  std::vector<float> x(5, 1.0f);
  for (int i = 0; i < 3; ++i) half.allreduce_sum(x.data(), 5);
  world.allreduce_sum(x.data(), 5);
  EXPECT_EQ(half.call_log().collectives(), half.size() > 1 ? 3 : 0);
  EXPECT_EQ(world.call_log().collectives(), world.size() > 1 ? 1 : 0);
  EXPECT_EQ(half.call_log().size, half.size());
  // The registry holds both (and the other live communicators).
  int found = 0;
  CallLog::for_each_log([&](const CallLog& l) { found += &l == &half.call_log() || &l == &world.call_log(); });
  EXPECT_EQ(found, 2);
}

TEST(CallLog, SendsAndReceivesWithPeerAndTag) {
  Communicator world = Communicator::world();
  const int p = world.size();
  if (p == 1) return;
  const int next = (world.rank() + 1) % p, prev = (world.rank() + p - 1) % p;
  std::vector<float> out(10, 1.0f), in(10);
  for (int round = 0; round < 2; ++round) {
    Request r = world.irecv(in.data(), 10, prev, 40 + round);
    Request s = world.isend(out.data(), 10, next, 40 + round);
    s.wait();
    r.wait();
  }
  EXPECT_EQ(world.call_log().sends(), 2);
  EXPECT_EQ(world.call_log().recvs(), 2);
  EXPECT_EQ(world.call_log().collectives(), 0);
  const std::vector<Seen> v = last_calls(world);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[2].op, "recv");
  EXPECT_EQ(v[2].seq, 2);
  EXPECT_EQ(v[2].peer, prev);
  EXPECT_EQ(v[2].tag, 41);
  EXPECT_EQ(v[2].bytes, 40);
  EXPECT_EQ(v[3].op, "send");
  EXPECT_EQ(v[3].seq, 2);
  EXPECT_EQ(v[3].peer, next);
  for (const Seen& s : v) EXPECT_TRUE(s.done);
  // A request finished by test() is marked too.
  Request r = world.irecv(in.data(), 10, prev, 50);
  Request s = world.isend(out.data(), 10, next, 50);
  while (!r.test() || !s.test()) {
  }
  for (const Seen& c : last_calls(world)) EXPECT_TRUE(c.done) << c.op << " #" << c.seq;
}

INSTANTIATE_TEST_SUITE_P(Communicator, CallLogModes, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "Mpi" : "Ring"); });

}  // namespace
}  // namespace gf
