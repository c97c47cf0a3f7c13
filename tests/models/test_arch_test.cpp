// An architecture that exists only in this file: its model entry (spec, names, factory) and its config
// section (schema, key rules, reader) are registered here at static initialisation, and nothing else in
// the tree names it. A YAML file then trains it like any other. This is the proof that an architecture
// is its two registry entries (docs/architecture.md, "Adding an architecture").
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "models/registry.h"
#include "models/transformer_lm.h"
#include "runner/config/arch_section.h"
#include "runner/config/config.h"
#include "runner/config/read.h"
#include "runner/train/trainer.h"

namespace gf {
namespace {

// A small Llama-like transformer (RMSNorm, rotary positions, SwiGLU, no biases, tied head) under
// names of its own.
std::string tiny_name(Role role, int64_t l) {
  const std::string p = "blocks." + std::to_string(l) + ".";
  switch (role) {
    case Role::kEmbed: return "embed.weight";
    case Role::kFinalNormW: return "norm.weight";
    case Role::kNorm1W: return p + "norm1.weight";
    case Role::kQW: return p + "q.weight";
    case Role::kKW: return p + "k.weight";
    case Role::kVW: return p + "v.weight";
    case Role::kOW: return p + "o.weight";
    case Role::kNorm2W: return p + "norm2.weight";
    case Role::kGateW: return p + "gate.weight";
    case Role::kUpW: return p + "up.weight";
    case Role::kDownW: return p + "down.weight";
    default: break;
  }
  throw std::logic_error("TinyTestLM has no parameter for this role");
}

TransformerSpec tiny_spec(const ModelConfig& c) {
  TransformerSpec s;
  s.vocab = c.vocab_size;
  s.seq = c.seq_length;
  s.hidden = c.hidden_size;
  s.layers = c.num_layers;
  s.heads = s.kv_heads = c.num_heads;
  s.ffn = c.intermediate_size;
  s.norm = NormKind::kRMSNorm;
  s.linear_bias = s.qkv_bias = false;
  s.out_in = true;
  s.fused_qkv_param = false;
  s.rope = true;
  s.rope_positions = c.seq_length;
  s.mlp = MlpKind::kSwiGLU;
  s.tied_head = true;
  s.scaled_proj_init = false;
  return s;
}

const char* const kTinyDefaults = R"YAML(
trainer:
  model_name: tiny_test
model:
  model_config:
    type: TinyTestConfig
    vocab_size: 64
    seq_length: 16
    hidden_size: 32
    num_layers: 2
    num_heads: 4
    intermediate_size: 48
    compute_dtype: float32
    checkpoint_name_or_path: ""
    pp_interleave_num: 1
    offset: 0
    use_past: false
    max_decode_length: 64
    top_k: 5
    top_p: 1.0
    do_sample: false
    temperature: 1.0
    repetition_penalty: 1.0
    eos_token_id: 0
  arch:
    type: TinyTestLM
)YAML";

std::vector<KeyRule> tiny_rules() {
  std::vector<KeyRule> r;
  for (const char* k : {"type", "vocab_size", "seq_length", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                        "compute_dtype", "checkpoint_name_or_path", "pp_interleave_num", "offset", "use_past",
                        "max_decode_length", "top_k", "top_p", "do_sample", "temperature", "repetition_penalty",
                        "eos_token_id"})
    r.push_back({std::string("model.model_config.") + k, KeyUse::kBuilt, std::string("model.") + k});
  r.push_back({"model.arch.type", KeyUse::kBuilt, "model.arch"});
  r.push_back({"trainer.model_name", KeyUse::kBuilt, "model_name"});
  return r;
}

void read_tiny(config_read::ReadContext& x) {
  ModelConfig& m = x.c.model;
  const std::string k = "model.model_config.";
  m.type = x.rd.get<std::string>(k + "type");
  m.arch = x.rd.get<std::string>("model.arch.type");
  m.vocab_size = x.rd.get<int64_t>(k + "vocab_size");
  m.seq_length = x.rd.get<int64_t>(k + "seq_length");
  m.max_position_embeddings = m.seq_length;
  m.hidden_size = x.rd.get<int64_t>(k + "hidden_size");
  m.num_layers = x.rd.get<int64_t>(k + "num_layers");
  m.num_heads = x.rd.get<int64_t>(k + "num_heads");
  m.intermediate_size = x.rd.get<int64_t>(k + "intermediate_size");
  m.hidden_dropout_rate = m.attention_dropout_rate = 0.0f;
  config_read::finish_model(x);
}

const bool registered =
    register_architecture({"TinyTestLM", "TinyTestConfig",
                           [](const ModelConfig& c, const ModelLayout& l, int64_t b,
                              const ParallelContext& ctx) -> std::unique_ptr<CausalLM> {
                             return std::make_unique<TransformerLM>(tiny_spec(c), tiny_name, c, l, b, ctx);
                           },
                           tiny_spec, tiny_name, "TinyTest"}) &&
    register_arch_section({"TinyTestConfig", "TinyTest", kTinyDefaults, tiny_rules, nullptr, read_tiny,
                           [](const ModelConfig& m, int64_t mp) {
                             return "`intermediate_size` (" + std::to_string(m.intermediate_size) +
                                    ") is not divisible by model_parallel " + std::to_string(mp);
                           }});

const char* const kTinyRun = R"YAML(
seed: 3
runner_config: {train_steps: 12, batch_size: 4}
runner_wrapper: {use_clip_grad: True, max_grad_norm: 1.0}
lr_schedule: {type: constant, learning_rate: 0.01}
train_dataset: {data_loader: {type: RandomTokens, seed: 5, num_samples: 4}}
callbacks: [{type: MFLossMonitor, per_print_times: 1}]
model:
  arch: {type: TinyTestLM}
  model_config: {type: TinyTestConfig, hidden_size: 32, num_layers: 2, intermediate_size: 48}
)YAML";

TEST(TestArchitecture, RegisteredFromThisFileAloneItTrains) {
  ASSERT_TRUE(registered);
  const Config cfg = load_config_string(kTinyRun);
  EXPECT_EQ(cfg.model.type, "TinyTestConfig");
  EXPECT_EQ(cfg.model.vocab_size, 64);            // the section's defaults filled in
  EXPECT_EQ(cfg.model.ffn_hidden(), 48);          // the spec's FFN width, through the registry
  EXPECT_EQ(cfg.model_name, "tiny_test");
  ParallelContext ctx = ParallelContext::single();
  Trainer trainer(cfg, ctx);
  EXPECT_NE(trainer.model().params().find("blocks.1.gate.weight"), nullptr);  // its own names
  EXPECT_EQ(trainer.model().params().find("model.embed_tokens.weight"), nullptr);
  std::vector<double> losses;
  for (int64_t step = 1; step <= 12; ++step) losses.push_back(trainer.train_step(step).loss);
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
  // One global batch of the 4 distinct samples, seen 12 times: the loss falls well below log(64) = 4.16.
  EXPECT_NEAR(losses.front(), std::log(64.0), 0.3);
  EXPECT_LT(losses.back(), losses.front() - 1.0) << "first " << losses.front() << ", last " << losses.back();
}

TEST(TestArchitecture, ItsSchemaIsItsOwn) {
  // A GPT-2 key is not one of TinyTestConfig's: refused as unknown.
  try {
    load_config_string(kTinyRun, {"model.model_config.expand_ratio=4"});
    FAIL() << "expand_ratio accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("expand_ratio"), std::string::npos) << e.what();
  }
  // Its FFN rule speaks its keys.
  const Config cfg = load_config_string(kTinyRun);
  EXPECT_EQ(find_arch_section("TinyTestConfig")->ffn_problem(cfg.model, 5),
            "`intermediate_size` (48) is not divisible by model_parallel 5");
}

}  // namespace
}  // namespace gf
