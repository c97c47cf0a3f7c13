// MoE layers under expert, data, tensor and sequence parallelism against one rank: the same global
// batch gives the same loss, router losses, expert load, dropped count and every parameter's
// gradient (after the trainer's gradient sync, gathered whole), for GPT-2 MoE and Mixtral,
// dropless and with a capacity that drops tokens. Layouts by world size: 2 ranks: ep2 (dp2), and
// the experts split over mp2 with SP; 4 ranks: ep4 (dp4), ep2 x mp2 + SP, and ep2 within dp4; with
// the alltoall and the allgather dispatchers, and each one's bytes against a count from the routing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "models/arch/gpt2.h"
#include "models/arch/llama.h"
#include "parallel/grad_sync.h"
#include "tests/tiny_model.h"

namespace gf {
namespace {

constexpr int64_t kB = 4;  // the global batch

ModelConfig config(bool llama, double capacity) {
  ModelConfig c = test::tiny_model({.vocab = 97, .seq = 12, .hidden = 48, .layers = 2, .heads = 4, .dropout = 0.0f});
  c.use_flash_attention = false;
  if (llama) test::make_llama(c, 2, 64);
  c.moe.expert_num = 4;
  c.moe.num_experts_chosen = 2;
  c.moe.capacity_factor = capacity;
  c.moe.norm_topk_prob = llama;
  c.moe.aux_loss_factor = 0.05;
  c.moe.z_loss_factor = 0.01;
  return c;
}

std::unique_ptr<TransformerLM> build(const ModelConfig& c, const ModelLayout& layout, int64_t B,
                                     const ParallelContext& ctx) {
  if ((c.type == "LlamaConfig")) return std::make_unique<LlamaForCausalLM>(c, layout, B, ctx);
  return std::make_unique<GPT2LMHeadModel>(c, layout, B, ctx);
}

std::vector<int32_t> tokens(const ModelConfig& c) {
  std::vector<int32_t> t(static_cast<size_t>(kB * (c.seq_length + 1)));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 37 + 11 + i * i % 7) % c.vocab_size);
  return t;
}

struct Result {
  int64_t a2a_bytes = 0;  // what this rank sent over the expert-parallel group
  std::vector<std::vector<int64_t>> kept;  // per MoE layer, this rank's rows per expert
  double loss = 0, aux = 0, z = 0;
  int64_t dropped = 0;
  std::vector<int64_t> tokens;
  std::vector<std::vector<float>> grads;  // per parameter in the table's order, whole
};

// One forward and backward of the global batch under ctx's layout; every rank gets the whole result.
Result run(const ModelConfig& c, const ModelLayout& layout, ParallelContext& ctx) {
  const int dp = ctx.size(GridAxis::kDp);
  const int64_t Bl = kB / dp;
  auto m = build(c, layout, Bl, ctx);
  m->init_weights(5);
  const std::vector<int32_t> all = tokens(c);
  const int64_t first = ctx.index(GridAxis::kDp) * Bl;
  const std::vector<int32_t> mine(all.begin() + first * (c.seq_length + 1), all.begin() + (first + Bl) * (c.seq_length + 1));
  GradientSync sync(m->params(), ctx, 2, false, layout.sequence_parallel);
  std::fill(m->grads(), m->grads() + m->params().total_floats(), 0.0f);
  sync.begin_step(m->grads());
  Result r;
  ctx.group(GridAxis::kEp).reset_stats();
  r.loss = m->forward(mine.data(), StepInfo{1, first, true});
  m->backward(1.0f / static_cast<float>(kB * c.seq_length));
  r.a2a_bytes = ctx.group(GridAxis::kEp).stats().bytes_sent;
  sync.finish();
  for (const MoeLayerStats& s : m->moe_stats()) r.kept.push_back(s.kept_per_expert);
  std::vector<double> v = {r.loss};
  for (const MoeLayerStats& s : m->moe_stats()) {
    v.push_back(s.aux_sum);
    v.push_back(s.z_sum);
    v.push_back(static_cast<double>(s.dropped));
    for (int64_t t : s.tokens_per_expert) v.push_back(static_cast<double>(t));
  }
  ctx.group(GridAxis::kDp).allreduce_sum(v.data(), static_cast<int64_t>(v.size()));
  r.loss = v[0];
  for (size_t i = 1; i < v.size();) {
    r.aux += v[i++];
    r.z += v[i++];
    r.dropped += static_cast<int64_t>(v[i++]);
    for (int64_t e = 0; e < c.moe.expert_num; ++e) r.tokens.push_back(static_cast<int64_t>(v[i++]));
  }
  const Placement& p = m->params();
  for (const ParamSpec& spec : p.table().specs()) {
    std::vector<float> full(static_cast<size_t>(spec.global_numel()), 0.0f);
    const TensorPlacement* t = p.find(spec.name);
    if (t && (!t->replicated || ctx.index(GridAxis::kTp) == 0)) Placement::gather(*t, m->grads() + t->offset, full.data());
    ctx.group(GridAxis::kTp).allreduce_sum(full.data(), spec.global_numel());
    if (spec.is_expert()) ctx.group(GridAxis::kEp).allreduce_sum(full.data(), spec.global_numel());
    r.grads.push_back(std::move(full));
  }
  return r;
}

// The one-rank model on dp rank d's share of the global batch alone.
Result run_part(const ModelConfig& c, int d, int dp) {
  const int64_t Bl = kB / dp;
  ParallelContext one = ParallelContext::single();
  auto m = build(c, ModelLayout{}, Bl, one);
  m->init_weights(5);
  const std::vector<int32_t> all = tokens(c);
  const std::vector<int32_t> part(all.begin() + d * Bl * (c.seq_length + 1), all.begin() + (d + 1) * Bl * (c.seq_length + 1));
  Result r;
  m->forward(part.data(), StepInfo{1, d * Bl, true});
  for (const MoeLayerStats& s : m->moe_stats()) r.kept.push_back(s.kept_per_expert);
  return r;
}

struct Layout {
  int tp, dp, ep;
  bool sp;
};

TEST(MoeMpi, EveryLayoutGivesTheOneRankLossRouterFiguresAndGradients) {
  Communicator world = Communicator::world();
  const int W = world.size();
  std::vector<Layout> layouts;
  if (W == 2) layouts = {{1, 2, 2, false}, {2, 1, 1, true}, {2, 1, 1, false}};
  if (W == 4) layouts = {{1, 4, 4, false}, {2, 2, 2, true}, {1, 4, 2, false}};
  if (layouts.empty()) GTEST_SKIP() << "layouts are for 2 and 4 ranks";
  for (const Layout& L : layouts) {
    ParallelContext ctx = ParallelContext::build(world.split(0, world.rank()), ProcessGrid({{GridAxis::kTp, L.tp}, {GridAxis::kDp, L.dp}, {GridAxis::kEp, L.ep}}));
    for (const bool llama : {false, true})
      for (const double capacity : {0.0, 1.0})
      for (const TokenDispatcher dispatcher : {TokenDispatcher::kAllToAll, TokenDispatcher::kAllGather}) {
        ModelConfig c = config(llama, capacity);
        c.moe.token_dispatcher = dispatcher;
        ParallelContext one = ParallelContext::single();
        const Result ref = run(c, ModelLayout{}, one);
        ModelLayout layout;
        layout.tp = L.tp;
        layout.ep = L.ep;
        layout.sequence_parallel = L.sp;
        const Result got = run(c, layout, ctx);
        const std::string what = std::string(llama ? "mixtral" : "gpt2-moe") + " tp" + std::to_string(L.tp) + " dp" +
                                 std::to_string(L.dp) + " ep" + std::to_string(L.ep) + (L.sp ? " sp" : "") +
                                 (capacity > 0 ? " capacity 1" : " dropless") + " " + token_dispatcher_name(dispatcher);
        if (capacity > 0) {
          EXPECT_GT(ref.dropped, 0) << what << ": the case should drop tokens";
        }
        EXPECT_EQ(got.dropped, ref.dropped) << what;
        EXPECT_EQ(got.tokens, ref.tokens) << what;
        EXPECT_NEAR(got.loss / ref.loss, 1.0, 1e-6) << what;
        EXPECT_NEAR(got.aux / ref.aux, 1.0, 1e-6) << what;
        EXPECT_NEAR(got.z / ref.z, 1.0, 1e-6) << what;
        // The all-to-all bytes this rank sent, from the routing alone: the one-rank model run on
        // each rank's own sequences gives the rows each of its tokens' experts computes (capacity
        // is per sequence, so a rank's rows do not depend on the others'). Per MoE layer: the
        // counts (E_local int64 to each other rank) once, the rows it sends to other ranks' experts
        // and the rows it returns from its experts to other ranks, each twice (forward and
        // backward), C floats a row.
        {
          const int64_t El = c.moe.expert_num / L.ep, C = c.hidden_size;
          std::vector<std::vector<std::vector<int64_t>>> kept(static_cast<size_t>(L.dp));  // [dp rank][layer][expert]
          for (int d = 0; d < L.dp; ++d) {
            ModelConfig one_cfg = config(llama, capacity);
            const Result part = run_part(one_cfg, d, L.dp);
            kept[static_cast<size_t>(d)] = part.kept;
          }
          const int me = ctx.index(GridAxis::kDp), group0 = me / L.ep * L.ep, my_ep = me % L.ep;
          // The rows each expert computes for this rank's sequences are those of the one-rank run
          // on those sequences: capacity drops the same assignments under every layout.
          EXPECT_EQ(got.kept, kept[static_cast<size_t>(me)]) << what << ": rows kept per expert on rank " << ctx.world_rank();
          int64_t rows = 0;
          for (size_t l = 0; l < kept[0].size(); ++l)
            for (int s = group0; s < group0 + L.ep; ++s) {
              if (s == me) continue;
              for (int64_t e = 0; e < c.moe.expert_num; ++e) {
                const int owner = static_cast<int>(e / El);
                if (owner == s % L.ep) rows += kept[static_cast<size_t>(me)][l][static_cast<size_t>(e)];   // mine to s
                if (owner == my_ep) rows += kept[static_cast<size_t>(s)][l][static_cast<size_t>(e)];      // s's to me, returned
              }
            }
          const int64_t layers = static_cast<int64_t>(kept[0].size());
          int64_t expect = L.ep > 1 ? 2 * rows * C * 4 + layers * El * 8 * (L.ep - 1) : 0;
          if (dispatcher == TokenDispatcher::kAllGather) {
            // Every row to every rank instead: ring collectives move (ep - 1) chunks of N = Bl T
            // rows. Per layer: forward, the rows, choices and weights gathered and the outputs
            // reduce-scattered; backward, the output gradients gathered and the gate weights'
            // and inputs' gradients reduce-scattered: (ep - 1) (4 N C + 3 N k) floats.
            const int64_t N = kB / L.dp * c.seq_length, k = c.moe.num_experts_chosen;
            expect = layers * (L.ep - 1) * (4 * N * C + 3 * N * k) * 4;
          }
          EXPECT_EQ(got.a2a_bytes, expect) << what << ": all-to-all bytes sent by rank " << ctx.world_rank();
        }
        const ParamTable table = TransformerLM::make_param_table((c.type == "LlamaConfig") ? llama_spec(c) : gpt2_spec(c),
                                                                 (c.type == "LlamaConfig") ? NameMap(llama_name) : NameMap(gpt2_name));
        double worst = 0;
        std::string worst_name;
        for (size_t i = 0; i < ref.grads.size(); ++i) {
          double diff = 0, scale = 1e-30;
          for (size_t j = 0; j < ref.grads[i].size(); ++j) {
            diff = std::max(diff, static_cast<double>(std::abs(got.grads[i][j] - ref.grads[i][j])));
            scale = std::max(scale, static_cast<double>(std::abs(ref.grads[i][j])));
          }
          if (diff / scale > worst) {
            worst = diff / scale;
            worst_name = table.specs()[i].name;
          }
        }
        // fp32, other summation orders (rows split over ranks, experts' rows gathered from
        // several ranks, tensor-parallel partial sums): a few ulps of the largest entry.
        EXPECT_LT(worst, 1e-5) << what << ": worst gradient " << worst_name;
        if (getenv("GF_MOE_MPI_PRINT") && ctx.world_rank() == 0) printf("%s: worst %.3g (%s), loss %.8f vs %.8f, dropped %ld\n", what.c_str(), worst, worst_name.c_str(), got.loss, ref.loss, static_cast<long>(ref.dropped));
      }
  }
}

}  // namespace
}  // namespace gf
