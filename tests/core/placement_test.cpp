// Placement: each rank's slice of every GPT-2 parameter as boxes in the global tensor. The boxes
// name exactly the global elements ParamTable::global_index gives (padding in none), the slices of
// the tensor-parallel ranks tile each split tensor exactly once, and scatter then gather over the
// ranks rebuilds the single-rank weights bit for bit. Vocabulary split and replicated, tp 1-4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/placement.h"
#include "models/gpt2.h"

namespace gf {
namespace {

ModelConfig small(bool vocab_emb_dp) {
  ModelConfig c;
  c.vocab_size = 1000;  // padded past a multiple of 128: the last rank holds padding rows
  c.seq_length = 16;
  c.max_position_embeddings = 16;
  c.hidden_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.vocab_emb_dp = vocab_emb_dp;
  return c;
}

TEST(Placement, BoxesAreTheGlobalIndicesAndTileEachTensor) {
  for (bool vocab_emb_dp : {false, true}) {
    const ModelConfig cfg = small(vocab_emb_dp);
    const ParamTable one = GPT2LMHeadModel::make_param_table(cfg, 0, 1);
    AlignedBuffer<float> full(static_cast<size_t>(one.total_floats()));
    one.initialize(full.data(), 42);
    for (int tp : {1, 2, 3, 4}) {
      if (cfg.num_heads % tp != 0) continue;
      std::vector<ParamTable> tables;
      for (int r = 0; r < tp; ++r) tables.push_back(GPT2LMHeadModel::make_param_table(cfg, r, tp));
      for (size_t k = 0; k < one.specs().size(); ++k) {
        const ParamSpec& p1 = one.specs()[k];
        std::vector<int> hits(static_cast<size_t>(p1.global_numel()), 0);
        std::vector<float> rebuilt(static_cast<size_t>(p1.global_numel()), NAN);
        for (int r = 0; r < tp; ++r) {
          const ParamTable& t = tables[static_cast<size_t>(r)];
          const Placement placement(t);
          const TensorPlacement& tp_ = placement.tensors()[k];
          ASSERT_EQ(tp_.spec->name, p1.name);
          // Every local element: in a box exactly when global_index is not padding, and at that index.
          std::vector<float> local(static_cast<size_t>(tp_.spec->numel()));
          std::vector<float> marks(static_cast<size_t>(p1.global_numel()), -1.0f);
          for (size_t i = 0; i < local.size(); ++i) local[i] = static_cast<float>(i);
          Placement::gather(tp_, local.data(), marks.data());
          int64_t in_boxes = 0;
          for (int64_t i = 0; i < tp_.spec->numel(); ++i) {
            const int64_t g = t.global_index(*tp_.spec, i);
            if (g < 0) continue;
            ++in_boxes;
            ASSERT_EQ(marks[static_cast<size_t>(g)], static_cast<float>(i)) << p1.name << " tp " << tp << " rank " << r;
          }
          int64_t box_elems = 0;
          for (const auto& s : tp_.pieces) box_elems += s.global.numel();
          EXPECT_EQ(box_elems, in_boxes) << p1.name << " tp " << tp << " rank " << r;
          for (int64_t g = 0; g < p1.global_numel(); ++g)
            if (marks[static_cast<size_t>(g)] >= 0) ++hits[static_cast<size_t>(g)];
          // scatter from the single-rank tensor, gather back into the rebuilt one.
          Placement::scatter(tp_, full.data() + p1.offset, local.data());
          Placement::gather(tp_, local.data(), rebuilt.data());
        }
        const bool replicated = Placement(tables[0]).tensors()[k].replicated;
        for (int h : hits) ASSERT_EQ(h, replicated ? tp : 1) << p1.name << " tp " << tp;
        EXPECT_EQ(std::memcmp(rebuilt.data(), full.data() + p1.offset, rebuilt.size() * sizeof(float)), 0)
            << p1.name << " tp " << tp;
      }
    }
  }
}

TEST(Placement, FusedQkvIsThreeBoxesAndPaddingIsInNone) {
  const ModelConfig cfg = small(false);
  const ParamTable t = GPT2LMHeadModel::make_param_table(cfg, 1, 2);
  const Placement placement(t);
  const TensorPlacement& qkv = placement.at("h.0.attn.c_attn.weight");
  ASSERT_EQ(qkv.pieces.size(), 3u);
  for (int64_t part = 0; part < 3; ++part) {
    const auto& s = qkv.pieces[static_cast<size_t>(part)];
    EXPECT_EQ(s.global.offset, (std::vector<int64_t>{0, part * 48 + 24}));
    EXPECT_EQ(s.global.extent, (std::vector<int64_t>{48, 24}));
    EXPECT_EQ(s.local_offset, (std::vector<int64_t>{0, part * 24}));
  }
  // 1000 rows padded to 1024 and split in two: rank 1 holds rows 512..999 and 24 padding rows.
  const TensorPlacement& wte = placement.at("wte.weight");
  ASSERT_EQ(wte.pieces.size(), 1u);
  EXPECT_EQ(wte.pieces[0].global.offset, (std::vector<int64_t>{512, 0}));
  EXPECT_EQ(wte.pieces[0].global.extent, (std::vector<int64_t>{488, 48}));
  EXPECT_FALSE(wte.replicated);
  EXPECT_TRUE(placement.at("ln_f.weight").replicated);
}

}  // namespace
}  // namespace gf
