// The layers of each pipeline (virtual) stage, as MindFormers splits them with model_config.offset:
// cases worked by hand from its rules (parallel/pipeline/partition.h), and the refusals, each naming
// the key and an offset that works.
#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/pipeline/partition.h"

namespace gf {
namespace {

using V = std::vector<int64_t>;

// The message partition_layers throws, or "" when it splits.
std::string refusal(int64_t layers, int64_t stages, int64_t chunks, const LayerOffset& offset = {}) {
  try {
    partition_layers(layers, stages, chunks, offset);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(PartitionLayers, EvenSplits) {
  EXPECT_EQ(partition_layers(12, 1, 1), V({12}));
  EXPECT_EQ(partition_layers(12, 4, 1), V({3, 3, 3, 3}));
  EXPECT_EQ(partition_layers(4, 4, 1), V({1, 1, 1, 1}));
  // MindFormers' own files: run_gpt2_52b.yaml, 64 layers over 16 stages (pp_dis = 65 // 16 = 4);
  // pretrain_llama2_70b.yaml, 80 over 8 (pp_dis = 81 // 8 = 10).
  EXPECT_EQ(partition_layers(64, 16, 1), V(16, 4));
  EXPECT_EQ(partition_layers(80, 8, 1), V(8, 10));
  // Two chunks per stage: 8 layers over 2 x 2 virtual stages.
  EXPECT_EQ(partition_layers(8, 2, 2), V({2, 2, 2, 2}));
}

// MindFormers' int rule: layer i on stage min((i + offset) // pp_dis, p - 1), pp_dis = max((L + 1) // p, 1).
TEST(PartitionLayers, MindFormersIntRuleForUnevenCounts) {
  // L 10, p 4: pp_dis = 11 // 4 = 2; layers 0-1 -> 0, 2-3 -> 1, 4-5 -> 2, 6-9 -> min(3..4, 3) = 3.
  EXPECT_EQ(partition_layers(10, 4, 1), V({2, 2, 2, 4}));
  // L 7, p 2: pp_dis = 8 // 2 = 4; layers 0-3 -> 0, 4-6 -> 1.
  EXPECT_EQ(partition_layers(7, 2, 1), V({4, 3}));
  // L 5, p 4: pp_dis = 6 // 4 = 1; layers 0, 1, 2 -> 0, 1, 2; 3 and 4 -> min(3..4, 3) = 3.
  EXPECT_EQ(partition_layers(5, 4, 1), V({1, 1, 1, 2}));
  // L 11, p 4: pp_dis = 12 // 4 = 3; layers 0-2, 3-5, 6-8, then 9-10.
  EXPECT_EQ(partition_layers(11, 4, 1), V({3, 3, 3, 2}));
  // offset 1, L 10, p 4 (pp_dis 2): layer 0 -> 1 // 2 = 0; 1-2 -> 1; 3-4 -> 2; 5-9 -> 3.
  EXPECT_EQ(partition_layers(10, 4, 1, LayerOffset::of_int(1)), V({1, 2, 2, 5}));
  // One stage holds every layer whatever a non-negative int says (min(..., 0)).
  EXPECT_EQ(partition_layers(10, 1, 1, LayerOffset::of_int(3)), V({10}));
  // Over 2 x 2 virtual stages the same rule: L 10, V 4, pp_dis = 11 // 4 = 2.
  EXPECT_EQ(partition_layers(10, 2, 2), V({2, 2, 2, 4}));
}

TEST(PartitionLayers, IntOffsetsThatLeaveAStageEmptyOrNegativeAreRefused) {
  // offset -1: layer 0 goes to (0 - 1) // 2 = -1.
  std::string e = refusal(10, 4, 1, LayerOffset::of_int(-1));
  EXPECT_NE(e.find("`model.model_config.offset: -1` puts layer 0 on stage (0 + -1) // 2 < 0"), std::string::npos) << e;
  EXPECT_NE(e.find("an int offset must be >= 0; use offset: 0 (layers [2, 2, 2, 4])"), std::string::npos) << e;
  // offset 2: layers 0, 1 -> (2, 3) // 2 = 1, so stage 0 holds none; 0 and 1 work.
  e = refusal(10, 4, 1, LayerOffset::of_int(2));
  EXPECT_NE(e.find("`model.model_config.offset: 2` leaves stage 0 without a layer (layers [0, 2, 2, 6])"),
            std::string::npos) << e;
  EXPECT_NE(e.find("an int offset from 0 to 1 works here, e.g. offset: 0 (layers [2, 2, 2, 4]), or offset: [1, 1, 0, 0] "
                   "(layers [3, 3, 2, 2])"), std::string::npos) << e;
}

// A list: stage s gets L // p + offset[s] layers; the counts must add up to L.
TEST(PartitionLayers, PerStageLists) {
  // L 10, p 4: 10 // 4 = 2 each, plus the offsets.
  EXPECT_EQ(partition_layers(10, 4, 1, LayerOffset::per_stage({1, 1, 0, 0})), V({3, 3, 2, 2}));
  EXPECT_EQ(partition_layers(10, 4, 1, LayerOffset::per_stage({0, 0, 0, 2})), V({2, 2, 2, 4}));
  EXPECT_EQ(partition_layers(10, 4, 1, LayerOffset::per_stage({-1, 1, 1, 1})), V({1, 3, 3, 3}));
  // A list that moves layers when p divides L: 12 over 4, [-1, 0, 0, 1].
  EXPECT_EQ(partition_layers(12, 4, 1, LayerOffset::per_stage({-1, 0, 0, 1})), V({2, 3, 3, 4}));
  // One stage: [0] only.
  EXPECT_EQ(partition_layers(10, 1, 1, LayerOffset::per_stage({0})), V({10}));
  // With chunks the list applies to each chunk: L 10, p 2, v 2: 10 // 4 = 2, [1, 0] -> [3, 2, 3, 2].
  EXPECT_EQ(partition_layers(10, 2, 2, LayerOffset::per_stage({1, 0})), V({3, 2, 3, 2}));
  EXPECT_EQ(partition_layers(12, 2, 2, LayerOffset::per_stage({1, -1})), V({4, 2, 4, 2}));
}

TEST(PartitionLayers, PerStageListsThatDoNotFitAreRefused) {
  std::string e = refusal(10, 4, 1, LayerOffset::per_stage({1, 1}));
  EXPECT_NE(e.find("`model.model_config.offset: [1, 1]` has 2 entries, but `parallel_config.pipeline_stage` is 4: one "
                   "offset per stage; e.g. offset: [1, 1, 0, 0] (layers [3, 3, 2, 2]), or offset: 0 (layers [2, 2, 2, 4])"),
            std::string::npos) << e;
  // [1, 0, 0, 0] gives [3, 2, 2, 2] = 9 of 10 layers: the offsets must sum to 10 % 4 = 2.
  e = refusal(10, 4, 1, LayerOffset::per_stage({1, 0, 0, 0}));
  EXPECT_NE(e.find("`model.model_config.offset: [1, 0, 0, 0]` gives num_layers // 4 + offset = 2 + offset = [3, 2, 2, 2], "
                   "9 layers, but `model.model_config.num_layers` is 10: the offsets of all 4 stages must sum to "
                   "num_layers % 4 = 2 (they sum to 1); e.g. offset: [1, 1, 0, 0]"),
            std::string::npos) << e;
  // [2, -2, 0, 0] leaves stage 1 with 0 layers; [-3, 3, 1, 1] gives stage 0 a negative count.
  e = refusal(10, 4, 1, LayerOffset::per_stage({2, -2, 0, 2}));
  EXPECT_NE(e.find("gives num_layers // 4 + offset = 2 + offset = [4, 0, 2, 4]: stage 1 gets 0 layers; every stage needs "
                   "at least one (an offset of at least -1)"), std::string::npos) << e;
  e = refusal(10, 4, 1, LayerOffset::per_stage({-3, 3, 1, 1}));
  EXPECT_NE(e.find("stage 0 gets -1 layers"), std::string::npos) << e;
  // An empty list, and [k] != [0] on one stage.
  EXPECT_NE(refusal(10, 2, 1, LayerOffset::per_stage({})).find("has 0 entries"), std::string::npos);
  EXPECT_NE(refusal(10, 1, 1, LayerOffset::per_stage({1})).find("must sum to num_layers % 1 = 0 (they sum to 1)"),
            std::string::npos);
  // With chunks, a list whose sum the remainder cannot take: L 10, p 2, v 2, r 2: [1, 1] gives 12.
  e = refusal(10, 2, 2, LayerOffset::per_stage({1, 1}));
  EXPECT_NE(e.find("= [3, 3, 3, 3] (the list applies to each of the 2 chunks), 12 layers"), std::string::npos) << e;
  EXPECT_NE(e.find("e.g. offset: [1, 0] (layers [3, 2, 3, 2])"), std::string::npos) << e;
}

// Interleave: L // (p x v) per virtual stage plus a [chunk][stage] offset; virtual stage k = c x p + s.
TEST(PartitionLayers, InterleavedChunkStageLists) {
  // MindFormers r1.3's research/telechat2/finetune_telechat_115b.yaml: 96 layers, pipeline_stage 8,
  // pp_interleave_num 3: 96 // 24 = 4 per virtual stage plus its offset; the rows sum to -2, -1, +3.
  const LayerOffset telechat = LayerOffset::per_chunk_stage(
      {{-1, -1, 0, 0, 0, 0, 0, 0}, {-1, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 1, 1, 1, 1, -1}});
  const V got = partition_layers(96, 8, 3, telechat);
  EXPECT_EQ(got, V({3, 3, 4, 4, 4, 4, 4, 4, /**/ 3, 4, 4, 4, 4, 4, 4, 4, /**/ 4, 4, 4, 5, 5, 5, 5, 3}));
  EXPECT_EQ(std::accumulate(got.begin(), got.end(), int64_t{0}), 96);
  // L 10, p 2, v 2: 10 // 4 = 2, remainder 2 on chunk 1: [[0, 0], [1, 1]] -> [2, 2, 3, 3].
  EXPECT_EQ(partition_layers(10, 2, 2, LayerOffset::per_chunk_stage({{0, 0}, {1, 1}})), V({2, 2, 3, 3}));
  // One chunk: one row, as a list would be.
  EXPECT_EQ(partition_layers(10, 4, 1, LayerOffset::per_chunk_stage({{1, 1, 0, 0}})), V({3, 3, 2, 2}));
}

TEST(PartitionLayers, ChunkStageListsThatDoNotFitAreRefused) {
  std::string e = refusal(10, 2, 2, LayerOffset::per_chunk_stage({{1, 1}}));
  EXPECT_NE(e.find("`model.model_config.offset: [[1, 1]]` has 1 row, but there are 2 model chunks per stage "
                   "(`model.model_config.pp_interleave_num` with `parallel.pipeline_config.pipeline_interleave: True`, "
                   "else 1): one row per chunk, of one offset per stage; e.g. offset: [[1, 1], [0, 0]] (layers "
                   "[3, 3, 2, 2]), or offset: 0 (layers [2, 2, 2, 4])"),
            std::string::npos) << e;
  e = refusal(10, 2, 1, LayerOffset::per_chunk_stage({{1, 0}, {0, 0}}));
  EXPECT_NE(e.find("has 2 rows, but there is 1 model chunk per stage"), std::string::npos) << e;
  e = refusal(10, 2, 2, LayerOffset::per_chunk_stage({{1, 1}, {0}}));
  EXPECT_NE(e.find("`model.model_config.offset: [[1, 1], [0]]` row 1 has 1 entry, but `parallel_config.pipeline_stage` "
                   "is 2"), std::string::npos) << e;
  e = refusal(10, 2, 2, LayerOffset::per_chunk_stage({{1, 1}, {1, 0}}));
  EXPECT_NE(e.find("[3, 3, 3, 2], 11 layers, but `model.model_config.num_layers` is 10: the offsets of all 4 virtual "
                   "stages must sum to num_layers % 4 = 2 (they sum to 3)"), std::string::npos) << e;
  e = refusal(8, 2, 2, LayerOffset::per_chunk_stage({{0, 2}, {-2, 0}}));
  EXPECT_NE(e.find("virtual stage 2 (stage 0, chunk 1) gets 0 layers"), std::string::npos) << e;
}

TEST(PartitionLayers, MoreStagesThanLayersAreRefusedWithTheLargestThatWorks) {
  std::string e = refusal(3, 4, 1);
  EXPECT_NE(e.find("`model.model_config.num_layers` (3) is fewer than the `parallel_config.pipeline_stage` (4) stages: "
                   "every stage needs at least one layer; use pipeline_stage: 3 or fewer"), std::string::npos) << e;
  e = refusal(6, 4, 2);
  EXPECT_NE(e.find("is fewer than the 8 virtual stages (`parallel_config.pipeline_stage` 4 x 2 model chunks, "
                   "`model.model_config.pp_interleave_num`): every stage needs at least one layer; use pipeline_stage: 3 "
                   "or fewer, or pp_interleave_num: 1 or fewer"), std::string::npos) << e;
  EXPECT_EQ(refusal(4, 0, 1).rfind("partition_layers: ", 0), 0u);
}

// Every split of L >= p x v layers with offset 0 covers every virtual stage and adds up to L; an even
// one where p x v divides L. Fewer layers are refused.
TEST(PartitionLayers, IntZeroAlwaysSplitsEnoughLayers) {
  for (int64_t layers = 1; layers <= 40; ++layers)
    for (int64_t p = 1; p <= 8; ++p)
      for (int64_t v = 1; v <= 3; ++v) {
        if (layers < p * v) {
          EXPECT_NE(refusal(layers, p, v), "") << layers << " " << p << " " << v;
          continue;
        }
        const V c = partition_layers(layers, p, v);
        ASSERT_EQ(c.size(), static_cast<size_t>(p * v));
        EXPECT_EQ(std::accumulate(c.begin(), c.end(), int64_t{0}), layers);
        for (int64_t n : c) EXPECT_GE(n, 1) << layers << " " << p << " " << v;
        if (layers % (p * v) == 0) {
          EXPECT_EQ(c, V(p * v, layers / (p * v)));
          // A list of zeros says the same.
          EXPECT_EQ(partition_layers(layers, p, v, LayerOffset::per_stage(V(p, 0))), c);
        }
      }
}

TEST(PartitionLayers, BoundsAndTheOffsetAsWritten) {
  EXPECT_EQ(layer_bounds({2, 3, 1}), V({0, 2, 5, 6}));
  EXPECT_EQ(layer_bounds({}), V({0}));
  EXPECT_EQ(LayerOffset{}.str(), "0");
  EXPECT_EQ(LayerOffset::of_int(-2).str(), "-2");
  EXPECT_EQ(LayerOffset::per_stage({1, -1}).str(), "[1, -1]");
  EXPECT_EQ(LayerOffset::per_chunk_stage({{1, -1}, {0, 0}}).str(), "[[1, -1], [0, 0]]");
  EXPECT_TRUE(LayerOffset{}.is_zero());
  EXPECT_TRUE(LayerOffset::per_chunk_stage({{0, 0}, {0, 0}}).is_zero());
  EXPECT_FALSE(LayerOffset::per_stage({0, 1}).is_zero());
  EXPECT_FALSE(LayerOffset::of_int(0) == LayerOffset::per_stage({0}));  // an int and a list split differently
}

}  // namespace
}  // namespace gf
