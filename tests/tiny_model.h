// The tiny models the unit and MPI tests build, each in one call with its sizes named, in place of the
// same six to ten assignments to a ModelConfig in every test file:
//     ModelConfig c = test::tiny_model({.vocab = 97, .seq = 16, .hidden = 32, .layers = 2, .heads = 4});
// Every field not named keeps ModelConfig's default (a GPT-2: GPT2Config and GPT2LMHeadModel, gelu, dropout 0.1).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "models/model_config.h"
#include "models/transformer_lm.h"

namespace gf::test {

struct TinyModel {
  int64_t vocab = 0, seq = 0;
  int64_t positions = 0;  // max_position_embeddings; 0: seq
  int64_t hidden = 0, layers = 0, heads = 0;
  std::string act;               // hidden_act; "": ModelConfig's
  std::optional<float> dropout;  // hidden_dropout_rate and attention_dropout_rate; unset: ModelConfig's
};

// A ModelConfig (or a type derived from it, such as core/small_model_config.h's SmallConfig) of those sizes.
template <class Config = ModelConfig>
Config tiny_model(const TinyModel& m) {
  Config c;
  c.vocab_size = m.vocab;
  c.seq_length = m.seq;
  c.max_position_embeddings = m.positions > 0 ? m.positions : m.seq;
  c.hidden_size = m.hidden;
  c.num_layers = m.layers;
  c.num_heads = m.heads;
  if (!m.act.empty()) c.hidden_act = m.act;
  if (m.dropout) c.hidden_dropout_rate = c.attention_dropout_rate = *m.dropout;
  return c;
}

// Makes c a Llama (LlamaConfig, LlamaForCausalLM) with kv_heads key/value heads (0: as many as the query heads)
// and an MLP of `intermediate`; its other fields as they were.
inline void make_llama(ModelConfig& c, int64_t kv_heads, int64_t intermediate) {
  c.type = "LlamaConfig";
  c.arch = "LlamaForCausalLM";
  c.num_kv_heads = kv_heads;
  c.intermediate_size = intermediate;
}

// The stage options of the split backward that zero-bubble schedules run: two micro-batches in flight, each one's
// weight gradients deferred from its input pass to a later weight pass.
inline StageOptions split_backward_stage() {
  StageOptions st;
  st.slots = 2;
  st.defer_weight_grads = true;
  return st;
}

// The model of the golden files tests/golden/hf_tiny_*.safetensors (tools/make_golden.py): a GPT-2 of
// vocabulary 300, rows of 16 (32 positions), 2 layers of 32, 2 heads, gelu_new, no dropout.
inline ModelConfig hf_tiny_config() {
  return tiny_model({.vocab = 300, .seq = 16, .positions = 32, .hidden = 32, .layers = 2, .heads = 2, .act = "gelu_new",
                     .dropout = 0.0f});
}

}  // namespace gf::test
