// LoRA's settings (model.model_config.pet_config, MindFormers' LoraConfig keys or PEFT's LoraConfig names;
// read by runner/config/read_lora.cpp). What they build is in models/lora.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gf {

struct LoraConfig {
  bool on = false;
  int64_t rank = 8;       // lora_rank (MindFormers) / r (PEFT)
  double alpha = 16.0;    // lora_alpha: the update is scaled by alpha / rank (alpha / sqrt(rank) with rslora)
  bool rslora = false;    // PEFT's use_rslora
  // Which modules get adapters. peft_names: PEFT's rule on Hugging Face's module names (a string is a regex
  // that must match the whole name, model.layers.0.self_attn.q_proj; a list names modules by their
  // name or its last dotted parts). Else MindFormers' rule: the regex matched from the start (Python's
  // re.match) against each module's own name in MindFormers' model (wq, wk, wv, wo, w1, w2, w3).
  bool peft_names = false;
  bool target_is_regex = true;
  std::string target_regex;
  std::vector<std::string> target_list;
  // MindFormers' exclude_layers: modules whose own name a regex in it matches (re.match) get none.
  std::vector<std::string> exclude;
  // A's initial values: PEFT's kaiming_uniform_(a = sqrt(5)), uniform in +-1/sqrt(in) ("kaiming"), or
  // MindSpore's Normal(0.01) ("normal", MindFormers' lora_a_init default); B starts at zero.
  std::string a_init = "kaiming";
  // MindFormers' / PEFT's adapter dropout on the adapter's input (B(A(dropout(x)))), a mask per adapter keyed as the model's.
  float dropout = 0.0f;
  // Ours (pet_config.base_dtype: bfloat16): the frozen layers' weights held in bf16 (models/transformer_lm_lora.cpp).
  bool base_bf16 = false;
  // Ours (pet_config.loss_vocab_chunk: V > 0): the frozen head's logits and cross entropy V vocabulary rows at a
  // time, its input gradient made in the forward (models/blocks/lm_head.h), so the [tokens, vocabulary] logits are
  // never held; 0 (default): the whole logits at once.
  int64_t loss_chunk = 0;
  // PEFT's modules_to_save: modules trained whole beside the adapters, each a copy of the base's (its name or its
  // last dotted parts, as target_modules' list). Built: the token embedding (embed_tokens) and an untied head
  // (lm_head); models/lora.h lora_saved_roles.
  std::vector<std::string> modules_to_save;
  double scale() const;
  bool operator==(const LoraConfig&) const = default;
};

}  // namespace gf
