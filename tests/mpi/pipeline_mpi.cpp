// The pipeline executor on every schedule: all ranks form one pipeline (1-4 stages) and train one
// step of m micro-batches; every stage's gradients, and the summed loss, are those of the whole
// model run on one rank over the same micro-batches one after the other. Bitwise where the two sum
// in the same order: every parameter of an untied model (Llama, Mixtral-style MoE), and every one of
// GPT-2 but its tied embedding, whose two parts (lookup on the first stage, head on the last) one
// rank adds micro-batch by micro-batch and the pipeline adds stage total to stage total: within
// 1e-6 relative there (a reordering of m = 8 float sums per element).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/math/parallel_memory.h"
#include "models/arch/gpt2.h"
#include "models/arch/llama.h"
#include "models/pipeline_stage.h"
#include "engine/step_engine.h"
#include "tests/tiny_model.h"

namespace gf {
namespace {

enum class Kind { kGpt2, kLlama, kMoe };

ModelConfig config(Kind k, int layers) {
  ModelConfig c = test::tiny_model({.vocab = 97, .seq = 12, .hidden = 32, .layers = layers, .heads = 4, .dropout = 0.1f});
  if (k != Kind::kGpt2) {
    test::make_llama(c, 2, 48);
    c.hidden_dropout_rate = c.attention_dropout_rate = 0.0f;
  }
  if (k == Kind::kMoe) {
    c.moe.expert_num = 4;
    c.moe.num_experts_chosen = 2;
    c.moe.capacity_factor = 1.1;
    c.moe.aux_loss_factor = 0.01;
    c.moe.z_loss_factor = 0.001;
  }
  return c;
}

std::vector<int32_t> tokens(const ModelConfig& c, int64_t B, int salt) {
  std::vector<int32_t> t(static_cast<size_t>(B * (c.seq_length + 1)));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 37 + 11 * salt + i * i) % c.vocab_size);
  return t;
}

TEST(PipelineMpi, EveryScheduleGivesTheGradientsOfTheWholeModel) {
  Communicator world = Communicator::world();
  const int P = world.size();
  ParallelContext ctx = ParallelContext::build(std::move(world), ProcessGrid({{GridAxis::kPp, P}}));
  const int64_t B = 2;
  for (Kind kind : {Kind::kGpt2, Kind::kLlama, Kind::kMoe})
    for (pipeline::Scheduler sched : {pipeline::Scheduler::kGPipe, pipeline::Scheduler::k1F1B,
                                      pipeline::Scheduler::kInterleaved, pipeline::Scheduler::kZBH1,
                                      pipeline::Scheduler::kZBV}) {
      const bool v = sched == pipeline::Scheduler::kZBV;
      const int chunks = sched == pipeline::Scheduler::kInterleaved || v ? 2 : 1;
      const int m = 2 * P;
      const ModelConfig c = config(kind, 2 * P);
      const TransformerSpec spec = kind == Kind::kGpt2 ? gpt2_spec(c) : llama_spec(c);
      const NameMap names = kind == Kind::kGpt2 ? NameMap(gpt2_name) : NameMap(llama_name);
      const std::string what = std::string(kind == Kind::kGpt2 ? "gpt2" : kind == Kind::kLlama ? "llama" : "moe") + " " +
                               pipeline::scheduler_name(sched) + " on " + std::to_string(P) + " stage(s)";
      std::vector<std::vector<int32_t>> data;
      for (int i = 0; i < m; ++i) data.push_back(tokens(c, B, i + 1));
      const float scale = 1.0f / static_cast<float>(m * B * c.seq_length);
      // One rank, the whole model, the micro-batches one after the other.
      ParallelContext one = ParallelContext::single();
      TransformerLM whole(spec, names, c, ModelLayout{}, B, one);
      whole.init_weights(5);
      parallel_zero(whole.grads(), whole.params().total_floats());
      double loss_ref = 0;
      for (int i = 0; i < m; ++i) {
        loss_ref += whole.forward(data[static_cast<size_t>(i)].data(), StepInfo{3, i * B, true});
        whole.backward(scale);
      }
      // The pipeline.
      const pipeline::Shape shape = pipeline::schedule_shape(sched, P, m, chunks);
      std::vector<int64_t> layers(static_cast<size_t>(P * chunks), c.num_layers / (P * chunks));
      PipelineStage stage(spec, names, c, ModelLayout{}, B, ctx,
                          pipeline_chunk_options(layers, sched, shape, ctx.index(GridAxis::kPp)));
      stage.init_weights(5);
      parallel_zero(stage.grads(), stage.params().total_floats());
      StepEngine exec(engine_chunks(stage), ctx.group(GridAxis::kPp), sched, shape);
      double loss = exec.train(
          [&](int i) { return StepEngine::Micro{data[static_cast<size_t>(i)].data(), StepInfo{3, i * B, true}}; },
          scale);
      // The tied embedding: the first and last stage sum their parts (under ZB-V's V both are stage 0's, one tensor
      // whose lookup and head gradients add up in the schedule's order, not micro-batch by micro-batch).
      const TensorPlacement* wte = stage.params().find(names(Role::kEmbed, -1));
      const bool tied = spec.tied_head && P > 1 && wte != nullptr;
      if (tied && !v) ctx.embed().allreduce_sum(stage.grads() + wte->offset, wte->numel());
      ctx.group(GridAxis::kPp).allreduce_sum(&loss, 1);
      EXPECT_EQ(loss, loss_ref) << what;
      for (const TensorPlacement& t : stage.params().tensors()) {
        const TensorPlacement& r = whole.params().at(t.spec->name);
        ASSERT_EQ(t.numel(), r.numel());
        const float* a = stage.grads() + t.offset;
        const float* b = whole.grads() + r.offset;
        if (tied && t.offset == wte->offset) {
          double d = 0, n = 0;
          for (int64_t i = 0; i < t.numel(); ++i) {
            d += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
            n += static_cast<double>(b[i]) * b[i];
          }
          EXPECT_LE(std::sqrt(d), 1e-6 * std::sqrt(n)) << what << " " << t.spec->name;
        } else {
          EXPECT_EQ(std::memcmp(a, b, sizeof(float) * static_cast<size_t>(t.numel())), 0) << what << " " << t.spec->name;
        }
      }
      // ZB-H1 keeps no more micro-batches live than 1F1B: the slots it planned.
      if (sched == pipeline::Scheduler::kZBH1) {
        EXPECT_LE(stage.chunk(0).dims().slots, std::min(P, m)) << what;
      }
    }
}

}  // namespace
}  // namespace gf
