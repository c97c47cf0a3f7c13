// Placement: each rank's slice of every parameter as boxes in the global tensor, for GPT-2 and for
// Llama (grouped-query attention: fewer key/value heads than query heads, packed q|k|v and
// gate|up, an untied or tied head, q/k/v biases). The boxes name exactly the global elements the
// split's element-wise formula gives (padding in none), the slices of the tensor-parallel ranks
// tile each split tensor exactly once, scatter then gather over the ranks rebuilds the single-rank
// weights bit for bit, and every rank's initial weights are its slice of the single-rank ones.
// Vocabulary split and replicated, tp 1-4 where the heads allow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/math/aligned_buffer.h"
#include "core/params/placement.h"
#include "models/arch/gpt2.h"
#include "models/arch/llama.h"
#include "tests/core/small_model_config.h"

namespace gf {
namespace {

using test::gpt2_small;
using test::llama_small;
using test::placement_of;
using test::SmallConfig;

// The layouts the model can run (layout_check refuses the others).
bool splits(const ModelConfig& c, int tp) {
  return c.num_heads % tp == 0 && c.kv_heads() % tp == 0 && c.hidden_size % tp == 0 && c.ffn_hidden() % tp == 0;
}

// The global index of local element i of `t` on tensor-parallel rank `rank`, element by element
// (-1: padding): what ParamTable::global_index computed before the placement's boxes replaced it.
// Only the split dim differs between the local and the global multi-index: cut into its parts,
// the rank holds share `rank` of each part.
int64_t reference_global_index(const TensorPlacement& t, const ParamLayout& layout, int rank, int64_t i) {
  const ParamSpec& p = *t.spec;
  if (p.split.axis == Axis::kNone) return i;
  const size_t d = static_cast<size_t>(p.split.dim);
  int64_t inner = 1;
  for (size_t k = d + 1; k < p.shape.size(); ++k) inner *= p.shape[k];
  const int64_t lext = t.local_shape[d], gext = p.shape[d];
  const int64_t x = i / inner % lext, outer = i / inner / lext, in = i % inner;
  int64_t gx = 0;
  if (p.split.axis == Axis::kTensor) {
    const int64_t lpart = lext / p.split.parts, gpart = gext / p.split.parts;
    gx = x / lpart * gpart + rank * lpart + x % lpart;
  } else {
    gx = (layout.vocab_split && layout.tp_size > 1 ? rank * lext : 0) + x;
    if (gx >= gext) return -1;
  }
  return (outer * gext + gx) * inner + in;
}

// Every parameter of the model at every layout it can run: boxes against the element-wise
// formula, tiling, scatter/gather round trip, initial weights.
void check_tiles_and_rebuilds(const SmallConfig& cfg, const char* what) {
  const Placement one = placement_of(cfg, 0, 1);
  AlignedBuffer<float> full(static_cast<size_t>(one.total_floats()));
  one.initialize(full.data(), 42);
  for (int tp : {1, 2, 3, 4}) {
    if (!splits(cfg, tp)) continue;
    std::vector<Placement> ranks;
    std::vector<AlignedBuffer<float>> weights;
    for (int r = 0; r < tp; ++r) {
      ranks.push_back(placement_of(cfg, r, tp));
      weights.emplace_back(static_cast<size_t>(ranks.back().total_floats()));
      ranks.back().initialize(weights.back().data(), 42);
    }
    for (size_t k = 0; k < one.tensors().size(); ++k) {
      const TensorPlacement& p1 = one.tensors()[k];
      const std::string at = std::string(what) + " " + p1.spec->name + " tp " + std::to_string(tp);
      const float* whole = full.data() + p1.offset;  // tp=1: the global tensor, then padding rows
      const int64_t n = p1.spec->global_numel();
      std::vector<int> hits(static_cast<size_t>(n), 0);
      std::vector<float> rebuilt(static_cast<size_t>(n), NAN);
      for (int r = 0; r < tp; ++r) {
        const Placement& placement = ranks[static_cast<size_t>(r)];
        const TensorPlacement& t = placement.tensors()[k];
        ASSERT_EQ(t.spec->name, p1.spec->name);
        // Every local element: in a box exactly when the formula gives no padding, and at its index.
        std::vector<float> local(static_cast<size_t>(t.numel()));
        std::vector<float> marks(static_cast<size_t>(n), -1.0f);
        for (size_t i = 0; i < local.size(); ++i) local[i] = static_cast<float>(i);
        Placement::gather(t, local.data(), marks.data());
        int64_t in_boxes = 0;
        for (int64_t i = 0; i < t.numel(); ++i) {
          const int64_t g = reference_global_index(t, placement.layout(), r, i);
          if (g < 0) continue;
          ++in_boxes;
          ASSERT_EQ(marks[static_cast<size_t>(g)], static_cast<float>(i)) << at << " rank " << r;
        }
        int64_t box_elems = 0;
        for (const auto& s : t.pieces) box_elems += s.global.numel();
        EXPECT_EQ(box_elems, in_boxes) << at << " rank " << r;
        for (int64_t g = 0; g < n; ++g)
          if (marks[static_cast<size_t>(g)] >= 0) ++hits[static_cast<size_t>(g)];
        // The rank's initial weights are its slice of the single-rank ones (padding zero).
        Placement::scatter(t, whole, local.data());
        EXPECT_EQ(std::memcmp(local.data(), weights[static_cast<size_t>(r)].data() + t.offset,
                              local.size() * sizeof(float)),
                  0)
            << at << " rank " << r << ": initial weights";
        // scatter from the single-rank tensor (above), gather back into the rebuilt one.
        Placement::gather(t, local.data(), rebuilt.data());
      }
      const bool replicated = ranks[0].tensors()[k].replicated;
      EXPECT_EQ(replicated, p1.spec->split.axis == Axis::kNone ||
                                (p1.spec->split.axis == Axis::kVocab && cfg.vocab_emb_dp && tp > 1))
          << at;
      for (int h : hits) ASSERT_EQ(h, replicated ? tp : 1) << at;
      EXPECT_EQ(std::memcmp(rebuilt.data(), whole, rebuilt.size() * sizeof(float)), 0) << at;
    }
  }
}

TEST(Placement, Gpt2BoxesAreTheGlobalIndicesAndTileEachTensor) {
  for (bool vocab_emb_dp : {false, true}) check_tiles_and_rebuilds(gpt2_small(vocab_emb_dp), "gpt2");
}

// 8 query heads on 4 key/value heads (tp 1, 2, 4), and on 2 with a tied head and q/k/v biases
// (tp 1, 2).
TEST(Placement, LlamaBoxesAreTheGlobalIndicesAndTileEachTensor) {
  for (bool vocab_emb_dp : {false, true}) {
    check_tiles_and_rebuilds(llama_small(vocab_emb_dp, 4, false, false), "llama kv 4");
    check_tiles_and_rebuilds(llama_small(vocab_emb_dp, 2, true, true), "llama kv 2 tied, biases");
  }
}

TEST(Placement, FusedQkvIsThreeBoxesAndPaddingIsInNone) {
  const SmallConfig cfg = gpt2_small(false);
  const Placement placement = GPT2LMHeadModel::make_placement(cfg, cfg.layout(2), 1);
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

// Llama at tp 2, 8 heads of 8 on 2 key/value heads: each rank holds 4 query heads and 1 key/value
// head, rows of the [out, in] projections; o_proj and down_proj split their input columns; q, k,
// v and gate, up lie back to back in the arena, other parameters start 16-float aligned.
TEST(Placement, LlamaSplitsProjectionsByHeadsAndPacksThem) {
  const SmallConfig cfg = llama_small(false, 2, false, false);
  const Placement placement = LlamaForCausalLM::make_placement(cfg, cfg.layout(2), 1);
  auto box = [&](const std::string& name) {
    const TensorPlacement& t = placement.at("model.layers.1." + name);
    EXPECT_EQ(t.pieces.size(), 1u) << name;
    return t.pieces.at(0).global;
  };
  EXPECT_EQ(box("self_attn.q_proj.weight").offset, (std::vector<int64_t>{32, 0}));
  EXPECT_EQ(box("self_attn.q_proj.weight").extent, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(box("self_attn.k_proj.weight").offset, (std::vector<int64_t>{8, 0}));
  EXPECT_EQ(box("self_attn.k_proj.weight").extent, (std::vector<int64_t>{8, 64}));
  EXPECT_EQ(box("self_attn.v_proj.weight").offset, (std::vector<int64_t>{8, 0}));
  EXPECT_EQ(box("self_attn.o_proj.weight").offset, (std::vector<int64_t>{0, 32}));
  EXPECT_EQ(box("self_attn.o_proj.weight").extent, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(box("mlp.gate_proj.weight").offset, (std::vector<int64_t>{48, 0}));
  EXPECT_EQ(box("mlp.up_proj.weight").extent, (std::vector<int64_t>{48, 64}));
  EXPECT_EQ(box("mlp.down_proj.weight").offset, (std::vector<int64_t>{0, 48}));
  EXPECT_TRUE(placement.at("model.layers.1.input_layernorm.weight").replicated);
  // lm_head: its own vocabulary split, like the embedding.
  EXPECT_EQ(placement.at("lm_head.weight").pieces.at(0).global.offset, (std::vector<int64_t>{512, 0}));
  int64_t end = 0;
  bool packed = false;
  for (const TensorPlacement& t : placement.tensors()) {
    EXPECT_EQ(t.offset, packed ? end : (end + 15) / 16 * 16) << t.spec->name;
    end = t.offset + t.numel();
    packed = t.spec->packed_with_next;
  }
  EXPECT_EQ(placement.total_floats(), (end + 15) / 16 * 16);
  EXPECT_TRUE(placement.table().at("model.layers.0.self_attn.q_proj.weight").packed_with_next);
  EXPECT_TRUE(placement.table().at("model.layers.0.self_attn.k_proj.weight").packed_with_next);
  EXPECT_FALSE(placement.table().at("model.layers.0.self_attn.v_proj.weight").packed_with_next);
  EXPECT_TRUE(placement.table().at("model.layers.0.mlp.gate_proj.weight").packed_with_next);
}

// A parameter of more than two dims (an MoE layer's [experts, out, in] weights, say) split on a
// middle dim cut into parts: the boxes still tile it and round-trip it.
TEST(Placement, ThreeDimensionalSplitInPartsTiles) {
  ParamTable table;
  table.add({"w", {3, 8, 5}, split_dim(1, 2), Init::kNormal, 1.0f, true});
  table.add({"b", {3, 8}, split_dim(1), Init::kZeros, 0.0f, false});
  const auto shared = std::make_shared<const ParamTable>(std::move(table));
  const Placement one(shared);
  AlignedBuffer<float> full(static_cast<size_t>(one.total_floats()));
  one.initialize(full.data(), 7);
  for (int tp : {2, 4}) {
    for (size_t k = 0; k < 2; ++k) {
      const TensorPlacement& p1 = one.tensors()[k];
      const int64_t n = p1.spec->global_numel();
      std::vector<float> rebuilt(static_cast<size_t>(n), NAN);
      for (int r = 0; r < tp; ++r) {
        const Placement placement(shared, ParamLayout{tp, true, 0}, r);
        const TensorPlacement& t = placement.tensors()[k];
        EXPECT_EQ(t.pieces.size(), static_cast<size_t>(p1.spec->split.parts));
        AlignedBuffer<float> w(static_cast<size_t>(placement.total_floats()));
        placement.initialize(w.data(), 7);
        for (int64_t i = 0; i < t.numel(); ++i) {
          const int64_t g = reference_global_index(t, placement.layout(), r, i);
          ASSERT_EQ(w[static_cast<size_t>(t.offset + i)], full[static_cast<size_t>(p1.offset + g)])
              << t.spec->name << " tp " << tp << " rank " << r << " element " << i;
          EXPECT_TRUE(std::isnan(rebuilt[static_cast<size_t>(g)])) << "held twice";
          rebuilt[static_cast<size_t>(g)] = 0.0f;
        }
        std::vector<float> back(static_cast<size_t>(n), NAN);
        Placement::gather(t, w.data() + t.offset, back.data());
        for (int64_t g = 0; g < n; ++g) {
          if (!std::isnan(back[static_cast<size_t>(g)])) {
            EXPECT_EQ(back[static_cast<size_t>(g)], full[static_cast<size_t>(p1.offset + g)]);
          }
        }
      }
      for (float v : rebuilt) EXPECT_EQ(v, 0.0f) << p1.spec->name << " tp " << tp << ": an element no rank holds";
    }
  }
}

}  // namespace
}  // namespace gf
