// A column-parallel layer given its input as a kept bf16 copy (a bf16 step's norm outputs,
// TransformerLayer::ln1_keeps_bf16) gives the bits of the same layer given the fp32 input, which it
// rounded itself: under sequence parallelism the bf16 rows are gathered (Communicator::allgather of
// 16-bit values) where the fp32 rows were. Forward (fp32 and bf16 outputs), the fused backward and the
// weight pass, on every rank of one tensor-parallel group (1-4 ranks).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/math/mixed_precision.h"
#include "parallel/tensor_parallel.h"
#include "tests/random_values.h"

namespace gf {
namespace {

using test_values::normal_values;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ColumnParallelMpi, AKeptBf16InputGivesTheBitsOfTheFp32InputOnEveryRank) {
  Communicator world = Communicator::world();
  const int p = world.size(), r = world.rank();
  const ComputeDtype d = ComputeDtype::kBFloat16;
  const int64_t rows = 12 * p, in = 40, out_local = 24;  // rows: the sequence's, split over the ranks under SP
  for (const bool sp : {false, true}) {
    const TensorParallel tp(&world, sp, rows);
    const int64_t nl = tp.local_rows();
    const std::string what = sp ? "sequence parallel" : "tensor parallel";
    // This rank's rows of the input (SP: its share; else all rows, the same on every rank) and its weight columns.
    const std::vector<float> x_all = normal_values(rows * in, 1.0f, 7);
    const std::vector<float> x(x_all.begin() + tp.row_begin() * in, x_all.begin() + (tp.row_begin() + nl) * in);
    const std::vector<float> w = normal_values(in * out_local, 0.2f, 100 + static_cast<uint64_t>(r)),
                             b = normal_values(out_local, 0.1f, 200 + static_cast<uint64_t>(r)),
                             dy = normal_values(rows * out_local, 1.0f, 300 + static_cast<uint64_t>(r));
    std::vector<bf16> x_low(x.size()), w_low(w.size());
    make_low_copy(d, x_low.data(), x.data(), nl * in);
    make_low_copy(d, w_low.data(), w.data(), in * out_local);
    const Weight wt(w.data(), d, w_low.data());
    std::vector<float> gather(static_cast<size_t>(rows * in)), dx_buf(gather.size());

    std::vector<float> y_a(static_cast<size_t>(rows * out_local)), y_b(y_a.size());
    column_parallel_fwd(tp, y_a.data(), x.data(), wt, b.data(), in, out_local, gather.data());
    column_parallel_fwd(tp, y_b.data(), nullptr, wt, b.data(), in, out_local, gather.data(), x_low.data());
    EXPECT_TRUE(same_bits(y_a, y_b)) << what << ": forward";

    std::vector<bf16> yl_a(y_a.size()), yl_b(y_a.size());
    column_parallel_fwd_low(tp, yl_a.data(), x.data(), wt, b.data(), in, out_local, gather.data());
    column_parallel_fwd_low(tp, yl_b.data(), nullptr, wt, b.data(), in, out_local, gather.data(), x_low.data());
    EXPECT_EQ(std::memcmp(yl_a.data(), yl_b.data(), yl_a.size() * sizeof(bf16)), 0) << what << ": bf16 forward";

    const std::vector<float> dw0 = normal_values(in * out_local, 0.5f, 400), db0 = normal_values(out_local, 0.5f, 401);
    std::vector<float> dx_a(static_cast<size_t>(nl * in)), dx_b(dx_a.size()), dw_a = dw0, dw_b = dw0, db_a = db0,
                                                                               db_b = db0;
    column_parallel_bwd(tp, dx_a.data(), dw_a.data(), db_a.data(), dy.data(), x.data(), wt, in, out_local,
                        gather.data(), dx_buf.data());
    column_parallel_bwd(tp, dx_b.data(), dw_b.data(), db_b.data(), dy.data(), nullptr, wt, in, out_local,
                        gather.data(), dx_buf.data(), x_low.data());
    EXPECT_TRUE(same_bits(dx_a, dx_b)) << what << ": fused dx";
    EXPECT_TRUE(same_bits(dw_a, dw_b)) << what << ": fused dW";
    EXPECT_TRUE(same_bits(db_a, db_b)) << what << ": fused db";
    EXPECT_FALSE(same_bits(dw_a, dw0)) << what << ": dW unchanged";

    dw_a = dw_b = dw0;
    column_parallel_bwd_weight(tp, dw_a.data(), nullptr, dy.data(), x.data(), wt, in, out_local, gather.data());
    column_parallel_bwd_weight(tp, dw_b.data(), nullptr, dy.data(), nullptr, wt, in, out_local, gather.data(), nullptr,
                               x_low.data());
    EXPECT_TRUE(same_bits(dw_a, dw_b)) << what << ": weight pass";
  }
}

}  // namespace
}  // namespace gf
