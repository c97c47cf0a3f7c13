// A pipeline stage's send moves while the stage computes (core/math/progress.h). The MPI tests run
// with shared memory's single copy off (CMakeLists.txt's mpi.npN: btl_vader_single_copy_mechanism=none), where a
// message above the eager limit is a rendezvous: the sender pushes its data only inside an MPI call,
// after the receiver's reply. Rank 0 posts a 1 MiB send to rank 1 and then only runs GEMMs, under a
// progress::Scope that tests the request: the send completes within those GEMMs (before, it waited
// for the stage's next MPI call, a layer or more later).
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <vector>

#include "core/math/gemm.h"
#include "core/math/progress.h"
#include "parallel/communicator.h"

namespace gf {
namespace {

TEST(ProgressMpi, ARendezvousSendCompletesWhileItsSenderRunsGemms) {
  Communicator world = Communicator::world();
  if (world.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int64_t n = 1 << 18;  // 1 MiB of floats: far above shared memory's eager limit (4 KiB)
  std::vector<float> buf(static_cast<size_t>(n));
  int products = 0;
  bool sent = false;
  if (world.rank() == 0) {
    for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(i)] = static_cast<float>(i % 1000);
    Request r = world.isend(buf.data(), n, 1, 7);
    std::vector<float> a(128 * 128, 0.5f), b(128 * 128, 0.25f), c(128 * 128);
    const auto t0 = std::chrono::steady_clock::now();
    {
      progress::Scope moving([&] { r.test(); }, 0.0);
      // Compute only, as a stage's pass does, until the send is done (or 30 s: the failure).
      while (!r.done() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
        gemm(Trans::kNo, Trans::kNo, 128, 128, 128, 1.0f, a.data(), 128, b.data(), 128, 0.0f, c.data(), 128);
        ++products;
      }
    }
    sent = r.done();
    if (!sent) r.wait();
  } else if (world.rank() == 1) {
    Request r = world.irecv(buf.data(), n, 0, 7);
    r.wait();
    for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(buf[static_cast<size_t>(i)], static_cast<float>(i % 1000));
  }
  if (world.rank() == 0) {
    EXPECT_TRUE(sent) << "the send was still in flight after " << products << " GEMMs";
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace gf
