// The ring collectives against MPI's own: sums and maxima within rounding of MPI_Allreduce, the
// result bitwise identical on every rank, reduce-scatter + all-gather == all-reduce, background
// all-reduces with distinct tags, and the exact byte count of a ring. The same checks (but the byte
// count) with parallel.collectives: mpi (set_mpi_collectives), whose results are bitwise identical on
// every rank too and inherited by split groups.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <vector>

#include "parallel/communicator.h"

namespace gf {
namespace {

float value(int rank, int64_t i) { return std::sin(0.37f * static_cast<float>(i) + 1.3f * rank) * (1 + rank); }

// True when `x` is bitwise the same on every rank.
bool same_everywhere(const std::vector<float>& x) {
  std::vector<float> lo(x.size()), hi(x.size());
  MPI_Allreduce(x.data(), lo.data(), static_cast<int>(x.size()), MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(x.data(), hi.data(), static_cast<int>(x.size()), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

class Modes : public ::testing::TestWithParam<bool> {  // mpi collectives?
 protected:
  Communicator make_world() const {
    Communicator w = Communicator::world();
    w.set_mpi_collectives(GetParam());
    return w;
  }
};

TEST_P(Modes, AllreduceSumMatchesMpi) {
  Communicator world = make_world();
  for (int64_t n : {0, 1, 2, 3, 5, 17, 1000, 4099}) {
    std::vector<float> x(static_cast<size_t>(n)), ref(x.size());
    for (int64_t i = 0; i < n; ++i) x[i] = value(world.rank(), i);
    MPI_Allreduce(x.data(), ref.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    world.allreduce_sum(x.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(x[i], ref[i], 1e-5f * (1 + std::abs(ref[i]))) << "n " << n << " i " << i;
    EXPECT_TRUE(same_everywhere(x)) << "n " << n;
  }
}

TEST_P(Modes, AllreduceMaxAndDouble) {
  Communicator world = make_world();
  std::vector<double> d = {1.0 * world.rank(), -2.0 * world.rank(), 0.5};
  world.allreduce_max(d.data(), 3);
  EXPECT_EQ(d[0], world.size() - 1);
  EXPECT_EQ(d[1], 0.0);
  EXPECT_EQ(d[2], 0.5);
  std::vector<double> s = {1.0, static_cast<double>(world.rank())};
  world.allreduce_sum(s.data(), 2);
  EXPECT_EQ(s[0], world.size());
  EXPECT_EQ(s[1], world.size() * (world.size() - 1) / 2.0);
  std::vector<float> f = {static_cast<float>(-world.rank())};
  world.allreduce_max(f.data(), 1);
  EXPECT_EQ(f[0], 0.0f);
}

TEST_P(Modes, ReduceScatterThenAllgatherIsAllreduce) {
  Communicator world = make_world();
  const int64_t n = 1031;
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] = value(world.rank(), i);
  world.allreduce_sum(a.data(), n);
  world.reduce_scatter_sum(b.data(), n);
  const int64_t lo = shard_begin(n, world.size(), world.rank()), hi = shard_begin(n, world.size(), world.rank() + 1);
  for (int64_t i = lo; i < hi; ++i) EXPECT_EQ(a[i], b[i]) << i;
  world.allgather(b.data(), n);
  EXPECT_EQ(a, b);
}

// 16-bit values (a bf16 activation under sequence parallelism) are moved bit for bit, NaN patterns
// included, and the ring sends (p - 1) / p of the buffer at 2 bytes an element.
TEST_P(Modes, AllgatherMovesSixteenBitValuesBitForBit) {
  Communicator world = make_world();
  const int p = world.size();
  for (int64_t n : {1, 3, 960 * 7, 4099}) {
    auto expected = [](int64_t i) { return static_cast<uint16_t>((i * 40503u + 0x7f81u) & 0xffffu); };  // NaNs among them
    std::vector<uint16_t> x(static_cast<size_t>(n), 0);
    const int64_t lo = shard_begin(n, p, world.rank()), hi = shard_begin(n, p, world.rank() + 1);
    for (int64_t i = lo; i < hi; ++i) x[static_cast<size_t>(i)] = expected(i);
    world.reset_stats();
    world.allgather(x.data(), n);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += x[static_cast<size_t>(i)] != expected(i);
    EXPECT_EQ(wrong, 0) << "n " << n;
    if (!GetParam() && n % p == 0) {
      EXPECT_EQ(world.stats().bytes_sent, (p - 1) * n / p * 2) << "n " << n;
    }
  }
}

TEST_P(Modes, BackgroundAllreducesWithTags) {
  Communicator world = make_world();
  const int64_t n1 = 5000, n2 = 77;
  std::vector<float> x1(n1), x2(n2), r1(n1), r2(n2);
  for (int64_t i = 0; i < n1; ++i) r1[i] = x1[i] = value(world.rank(), i);
  for (int64_t i = 0; i < n2; ++i) r2[i] = x2[i] = value(world.rank(), i + 9);
  world.allreduce_sum(r1.data(), n1);
  world.allreduce_sum(r2.data(), n2);
  PendingAllreduce p1 = world.start_allreduce_sum(x1.data(), n1, 1);
  PendingAllreduce p2 = world.start_allreduce_sum(x2.data(), n2, 2);
  for (int spin = 0; spin < 3; ++spin) { p2.test(); p1.test(); }
  p2.wait();
  p1.wait();
  EXPECT_TRUE(p1.done() && p2.done());
  if (!GetParam()) {  // the rings: bitwise the blocking all-reduce
    EXPECT_EQ(x1, r1);
    EXPECT_EQ(x2, r2);
  } else {  // MPI_Iallreduce sums in MPI's order: within rounding, and the same on every rank
    for (int64_t i = 0; i < n1; ++i) EXPECT_NEAR(x1[i], r1[i], 1e-5f * (1 + std::abs(r1[i]))) << i;
    for (int64_t i = 0; i < n2; ++i) EXPECT_NEAR(x2[i], r2[i], 1e-5f * (1 + std::abs(r2[i]))) << i;
    EXPECT_TRUE(same_everywhere(x1));
    EXPECT_TRUE(same_everywhere(x2));
  }
}

TEST(Communicator, RingSendsTwoPMinusOneOverPOfTheBuffer) {
  Communicator world = Communicator::world();
  const int p = world.size();
  const int64_t n = 960 * 7;  // divisible by 1..8
  std::vector<float> x(n, 1.0f);
  world.reset_stats();
  world.allreduce_sum(x.data(), n);
  EXPECT_EQ(world.stats().bytes_sent, p > 1 ? 2 * (p - 1) * n / p * 4 : 0);
  EXPECT_EQ(world.stats().collectives, p > 1 ? 1 : 0);
  world.reset_stats();
  world.reduce_scatter_sum(x.data(), n);
  EXPECT_EQ(world.stats().bytes_sent, (p - 1) * n / p * 4);
}

// What plan predicts a step's bytes from (ring_*_sent): every rank's count, shards uneven or empty, per dtype.
TEST(Communicator, RingBytesAreTheFormulasPlanUses) {
  Communicator world = Communicator::world();
  const int p = world.size(), q = world.rank();
  for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{4099}}) {
    std::vector<double> d(static_cast<size_t>(n), 1.0);
    std::vector<float> f(static_cast<size_t>(n), 1.0f);
    std::vector<uint16_t> h(static_cast<size_t>(n), 1);
    world.reset_stats();
    world.allreduce_sum(d.data(), n);
    EXPECT_EQ(world.stats().bytes_sent, 8 * ring_allreduce_sent(n, p, q)) << "n " << n;
    world.reset_stats();
    world.reduce_scatter_sum(f.data(), n);
    EXPECT_EQ(world.stats().bytes_sent, 4 * ring_reduce_scatter_sent(n, p, q)) << "n " << n;
    world.reset_stats();
    world.allgather(f.data(), n);
    EXPECT_EQ(world.stats().bytes_sent, 4 * ring_allgather_sent(n, p, q)) << "n " << n;
    world.reset_stats();
    world.allgather(h.data(), n);
    EXPECT_EQ(world.stats().bytes_sent, 2 * ring_allgather_sent(n, p, q)) << "n " << n;
  }
  if (p == 4) {  // written out once: 5 elements in shards 2,1,1,1
    EXPECT_EQ(ring_reduce_scatter_sent(5, 4, 0), 3);
    EXPECT_EQ(ring_allgather_sent(5, 4, 3), 3);  // every shard but position 0's
    EXPECT_EQ(ring_allreduce_sent(5, 4, 1), 4 + 4);
  }
}

TEST_P(Modes, SplitGroupsAreIndependent) {
  Communicator world = make_world();
  Communicator half = world.split(world.rank() % 2, world.rank());
  EXPECT_EQ(half.mpi_collectives(), GetParam());
  std::vector<double> x = {1.0};
  half.allreduce_sum(x.data(), 1);
  EXPECT_EQ(x[0], (world.size() + 1 - world.rank() % 2) / 2);
  EXPECT_EQ(half.stats().collectives, half.size() > 1 ? 1 : 0);
  EXPECT_EQ(world.stats().bytes_sent, 0);
}

// MPI's collectives sum in their own order: within rounding of the rings', identical on every rank.
TEST(Communicator, MpiCollectivesAgreeWithTheRings) {
  Communicator ring = Communicator::world(), mpi = Communicator::world();
  mpi.set_mpi_collectives(true);
  const int64_t n = 4099;
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] = value(ring.rank(), i);
  ring.allreduce_sum(a.data(), n);
  mpi.allreduce_sum(b.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(a[i], b[i], 1e-5f * (1 + std::abs(a[i]))) << i;
  EXPECT_TRUE(same_everywhere(b));
  EXPECT_EQ(mpi.stats().collectives, ring.size() > 1 ? 1 : 0);
  EXPECT_EQ(mpi.stats().bytes_sent, 0);  // MPI's messages are its own: counted by the rings only
}

INSTANTIATE_TEST_SUITE_P(Communicator, Modes, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "Mpi" : "Ring"); });

}  // namespace
}  // namespace gf
