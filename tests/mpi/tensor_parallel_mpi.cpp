// A column-parallel layer given its input as a kept bf16 copy (a bf16 step's norm outputs,
// TransformerLayer::ln1_keeps_bf16) gives the bits of the same layer given the fp32 input, which it
// rounded itself: under sequence parallelism the bf16 rows are gathered (Communicator::allgather of
// 16-bit values) where the fp32 rows were. Forward (fp32 and bf16 outputs), the fused backward and the
// weight pass, on every rank of one tensor-parallel group (1-4 ranks). And the MLP's gradients as a bf16
// step keeps them (MlpBlock::keeps_bf16): the row-parallel down projection writing its input gradient in
// bf16 gives the rounding of the fp32 one, and the column-parallel up projection reading a kept bf16 output
// gradient gives the bits of the same values given as floats.
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

std::vector<uint16_t> rounded(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = float_to_bf16(x[i]).bits;
  return out;
}
std::vector<uint16_t> bits(const std::vector<bf16>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i].bits;
  return out;
}

TEST(TensorParallelMpi, TheMlpsBf16GradientsGiveTheBitsOfTheirFp32FormsOnEveryRank) {
  Communicator world = Communicator::world();
  const int p = world.size(), r = world.rank();
  const ComputeDtype d = ComputeDtype::kBFloat16;
  const int64_t rows = 12 * p, ffn_local = 24, hidden = 40;
  for (const bool sp : {false, true}) {
    const TensorParallel tp(&world, sp, rows);
    const int64_t nl = tp.local_rows();
    const std::string what = sp ? "sequence parallel" : "tensor parallel";
    std::vector<float> gather(static_cast<size_t>(rows * hidden)), dx_buf(gather.size());
    const std::vector<float> dw0 = normal_values(ffn_local * hidden, 0.5f, 600), db0 = normal_values(hidden, 0.5f, 601);

    // Down projection [ffn_local, hidden]: its output gradient is this rank's rows of the residual stream's.
    const std::vector<float> dout_all = normal_values(rows * hidden, 1.0f, 11);
    const std::vector<float> dout(dout_all.begin() + tp.row_begin() * hidden,
                                  dout_all.begin() + (tp.row_begin() + nl) * hidden);
    const std::vector<float> act = normal_values(rows * ffn_local, 1.0f, 500 + static_cast<uint64_t>(r)),
                             wd = normal_values(ffn_local * hidden, 0.2f, 510 + static_cast<uint64_t>(r));
    std::vector<bf16> act_low(act.size()), wd_low(wd.size());
    make_low_copy(d, act_low.data(), act.data(), rows * ffn_local);
    make_low_copy(d, wd_low.data(), wd.data(), ffn_local * hidden);
    const Weight wdt(wd.data(), d, wd_low.data());
    std::vector<float> dact_a(static_cast<size_t>(rows * ffn_local)), dw_a = dw0, dw_b = dw0, db_a = db0, db_b = db0;
    std::vector<bf16> dact_b(dact_a.size());
    row_parallel_bwd(tp, dact_a.data(), dw_a.data(), db_a.data(), dout.data(), nullptr, wdt, ffn_local, hidden,
                     gather.data(), act_low.data());
    row_parallel_bwd_low(tp, dact_b.data(), dw_b.data(), db_b.data(), dout.data(), nullptr, wdt, ffn_local, hidden,
                         gather.data(), act_low.data());
    EXPECT_EQ(bits(dact_b), rounded(dact_a)) << what << ": row-parallel dx written in bf16";
    EXPECT_TRUE(same_bits(dw_a, dw_b)) << what << ": row-parallel dW";
    EXPECT_TRUE(same_bits(db_a, db_b)) << what << ": row-parallel db";
    EXPECT_FALSE(same_bits(dw_a, dw0)) << what << ": dW unchanged";
    std::vector<bf16> dact_c(dact_a.size());
    row_parallel_bwd_input_low(tp, dact_c.data(), dout.data(), wdt, ffn_local, hidden, gather.data());
    EXPECT_EQ(bits(dact_c), rounded(dact_a)) << what << ": row-parallel input pass in bf16";

    // Up projection [hidden, ffn_local] from its output gradient dh kept in bf16, against the widened values.
    const std::vector<float> x_all = normal_values(rows * hidden, 1.0f, 13);
    const std::vector<float> x(x_all.begin() + tp.row_begin() * hidden, x_all.begin() + (tp.row_begin() + nl) * hidden);
    const std::vector<float> wu = normal_values(hidden * ffn_local, 0.2f, 520 + static_cast<uint64_t>(r)),
                             dh = normal_values(rows * ffn_local, 1.0f, 530 + static_cast<uint64_t>(r)),
                             bu0 = normal_values(ffn_local, 0.5f, 602);
    std::vector<bf16> wu_low(wu.size()), dh_low(dh.size());
    make_low_copy(d, wu_low.data(), wu.data(), hidden * ffn_local);
    make_low_copy(d, dh_low.data(), dh.data(), rows * ffn_local);
    std::vector<float> dh_widened(dh.size());
    for (size_t i = 0; i < dh.size(); ++i) dh_widened[i] = bf16_to_float(dh_low[i]);
    const Weight wut(wu.data(), d, wu_low.data());
    std::vector<float> dx_a(static_cast<size_t>(nl * hidden)), dx_b(dx_a.size()), dwu_a = dw0, dwu_b = dw0,
                                                                                  dbu_a = bu0, dbu_b = bu0;
    column_parallel_bwd(tp, dx_a.data(), dwu_a.data(), dbu_a.data(), dh_widened.data(), x.data(), wut, hidden,
                        ffn_local, gather.data(), dx_buf.data());
    column_parallel_bwd(tp, dx_b.data(), dwu_b.data(), dbu_b.data(), nullptr, x.data(), wut, hidden, ffn_local,
                        gather.data(), dx_buf.data(), nullptr, dh_low.data());
    EXPECT_TRUE(same_bits(dx_a, dx_b)) << what << ": column-parallel dx from bf16 dy";
    EXPECT_TRUE(same_bits(dwu_a, dwu_b)) << what << ": column-parallel dW from bf16 dy";
    EXPECT_TRUE(same_bits(dbu_a, dbu_b)) << what << ": column-parallel db from bf16 dy";
    EXPECT_FALSE(same_bits(dbu_a, bu0)) << what << ": db unchanged";
    std::vector<float> dx_c(dx_a.size());
    column_parallel_bwd_input(tp, dx_c.data(), nullptr, wut, hidden, ffn_local, dx_buf.data(), dh_low.data());
    EXPECT_TRUE(same_bits(dx_a, dx_c)) << what << ": column-parallel input pass from bf16 dy";
    dwu_b = dw0;
    dbu_b = bu0;
    column_parallel_bwd_weight(tp, dwu_b.data(), dbu_b.data(), nullptr, x.data(), wut, hidden, ffn_local,
                               gather.data(), dh_low.data());
    EXPECT_TRUE(same_bits(dwu_a, dwu_b)) << what << ": column-parallel weight pass from bf16 dy";
    EXPECT_TRUE(same_bits(dbu_a, dbu_b)) << what << ": column-parallel bias gradient from bf16 dy";
  }
}

}  // namespace
}  // namespace gf
