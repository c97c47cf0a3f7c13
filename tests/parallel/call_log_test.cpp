// CallLog (parallel/call_log.h): per-kind sequence numbers, the ring of the last kKept calls, done
// marks that ignore an overwritten slot, the registry of live logs, and how a call reads in the report.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parallel/call_log.h"

namespace gf {
namespace {

TEST(CallLog, SequencesPerKindAndTheLastCalls) {
  CallLog log;
  using K = CallLog::Kind;
  const uint64_t a = log.begin(K::kCollective, "all-reduce", 64);
  const uint64_t s = log.begin(K::kSend, "send", 16, 1, 5);
  const uint64_t r = log.begin(K::kRecv, "recv", 16, 1, 6);
  const uint64_t b = log.begin(K::kCollective, "barrier", 0);
  EXPECT_EQ(log.find(a)->seq, 1);
  EXPECT_EQ(log.find(s)->seq, 1);
  EXPECT_EQ(log.find(r)->seq, 1);
  EXPECT_EQ(log.find(b)->seq, 2);
  EXPECT_EQ(log.collectives(), 2);
  EXPECT_EQ(log.sends(), 1);
  EXPECT_EQ(log.recvs(), 1);
  EXPECT_FALSE(log.find(a)->done);
  log.done(a);
  EXPECT_TRUE(log.find(a)->done);
  EXPECT_EQ(describe_call(*log.find(a)), "all-reduce #1 (64 bytes) done");
  EXPECT_EQ(describe_call(*log.find(s)), "send #1 to rank 1 tag 5 (16 bytes) not finished");
  EXPECT_EQ(describe_call(*log.find(r)), "recv #1 from rank 1 tag 6 (16 bytes) not finished");
  EXPECT_EQ(log.find(0), nullptr);
}

TEST(CallLog, KeepsTheLastEight) {
  CallLog log;
  std::vector<uint64_t> ids;
  for (int i = 1; i <= 20; ++i) ids.push_back(log.begin(CallLog::Kind::kCollective, "all-gather", i * 4));
  EXPECT_EQ(log.calls(), 20u);
  std::vector<int64_t> seqs, bytes;
  log.for_each([&](const CallRecord& c) {
    seqs.push_back(c.seq);
    bytes.push_back(c.bytes);
  });
  EXPECT_EQ(seqs, (std::vector<int64_t>{13, 14, 15, 16, 17, 18, 19, 20}));
  EXPECT_EQ(bytes.front(), 52);
  EXPECT_EQ(log.find(ids[0]), nullptr);  // overwritten
  log.done(ids[3]);                      // its slot now holds call 20: untouched
  EXPECT_FALSE(log.find(ids[19])->done);
  log.done(ids[19]);
  EXPECT_TRUE(log.find(ids[19])->done);
}

TEST(CallLog, RegistryListsLiveLogs) {
  auto count = [] {
    int n = 0;
    CallLog::for_each_log([&](const CallLog&) { ++n; });
    return n;
  };
  const int before = count();
  {
    CallLog a, b;
    a.name = "tp";
    EXPECT_EQ(count(), before + 2);
    CallLog c;
    EXPECT_EQ(count(), before + 3);
  }
  EXPECT_EQ(count(), before);
}

}  // namespace
}  // namespace gf
