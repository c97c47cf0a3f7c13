// LlamaConfig's key rules (runner/config/arch/llama.cpp holds its schema text, reader and section): what gridformer
// does with the keys of a LlamaConfig file's model section (the rest of the file follows runner/config/keys.cpp):
// MindFormers r1.0-r1.3 LlamaConfig's keys and ours, each read into ModelConfig, checked, warned about or refused
// (runner/config/schema.h says what each KeyUse means), and the GPT-2 keys a Llama does not have, refused with what
// a Llama uses instead. tests/runner/config_keys_llama_test.cpp proves every rule against the loader.
#include <string>
#include <utility>
#include <vector>

#include "runner/config/keys.h"

namespace gf::config_keys {
namespace {

using enum KeyUse;

const char* const kDeprecated =
    "deprecated by MindFormers r1.1, whose LlamaConfig warns about such a key and reads it nowhere (scaling_factor, "
    "pretrain_seqlen's successor, acts only with an extend_method)";
const char* const kQuant = "quantization is not built yet";

}  // namespace

std::vector<KeyRule> llama_model_rules() {
  const std::string k = "model.model_config.";
  std::vector<KeyRule> r = {
      {k + "type", kBuilt, "model.type"},
      {k + "seq_length", kBuilt, "model.seq_length"},
      {k + "vocab_size", kBuilt, "model.vocab_size"},
      {k + "hidden_size", kBuilt, "model.hidden_size"},
      {k + "num_layers", kBuilt, "model.num_layers"},
      {k + "num_heads", kBuilt, "model.num_heads"},
      {k + "n_kv_heads", kBuilt, "model.num_kv_heads (None: num_heads; must divide num_heads)"},
      {k + "max_position_embedding", kBuilt,
       "model.max_position_embeddings, the RoPE table (None: seq_length; below seq_length refused)"},
      {k + "intermediate_size", kBuilt, "model.intermediate_size, the SwiGLU width (None: derived)"},
      {k + "multiple_of", kBuilt, "model.multiple_of (the derived SwiGLU width is rounded up to it)"},
      {k + "ffn_dim_multiplier", kBuilt, "model.ffn_dim_multiplier (None: 1)"},
      {k + "rms_norm_eps", kBuilt, "model.rms_norm_eps"},
      {k + "theta", kBuilt, "model.rope_theta"},
      {k + "qkv_has_bias", kBuilt, "model.qkv_has_bias"},
      {k + "rope_scaling", kBuilt,
       "model.rope_scaling: Hugging Face's rope_scaling map (rope_type linear, dynamic, yarn, llama3 or longrope with "
       "their keys, as modeling_rope_utils.py reads them; partial_rotary_factor in it); None: theta alone"},
      {k + "head_dim", kBuilt, "model.head_dim_explicit (None: hidden_size / num_heads)"},
      {k + "qk_layernorm", kBuilt, "model.qk_layernorm: q_norm and k_norm (Qwen3; Megatron's --qk-layernorm)"},
      {k + "query_pre_attn_scalar", kBuilt, "model.query_pre_attn_scalar: the scores times its -1/2 power (Gemma; None: head_dim)"},
      {k + "layer_types", kBuilt,
       "model.window_layers: sliding_attention layers see sliding_window keys, full_attention the whole prefix "
       "(Hugging Face's layer_types; None: every layer windowed when sliding_window is set)"},
      {k + "q_lora_rank", kBuilt, "model.q_lora_rank: MLA's query latent (DeepSeek-V2/V3; None: q_proj)"},
      {k + "kv_lora_rank", kBuilt, "model.kv_lora_rank: MLA's key/value latent (DeepseekV2ForCausalLM)"},
      {k + "qk_nope_head_dim", kBuilt, "model.qk_nope_head_dim (MLA)"},
      {k + "qk_rope_head_dim", kBuilt, "model.qk_rope_head_dim (MLA)"},
      {k + "v_head_dim", kBuilt, "model.v_head_dim (MLA)"},
      {k + "rope_local_base_freq", kBuilt,
       "model.rope_local_theta: the sliding_attention layers' RoPE base, default RoPE (Gemma 3; None: theta)"},
      {k + "tie_word_embeddings", kBuilt, "model.tie_word_embeddings"},
      {k + "initializer_range", kBuilt, "model.initializer_range"},
      {k + "param_init_type", kBuilt, "model.param_init_type"},
      {k + "layernorm_compute_type", kBuilt, "model.layernorm_compute_type (RMSNorm's)"},
      {k + "softmax_compute_type", kBuilt, "model.softmax_compute_type"},
      {k + "compute_dtype", kBuilt, "model.compute_dtype"},
      {k + "use_flash_attention", kBuilt, "model.use_flash_attention"},
      {k + "sliding_window", kBuilt, "model.sliding_window (banded attention)"},
      {k + "pre_tokens", kBuilt, "model.sliding_window = pre_tokens + 1 (Ascend's flash attention; sliding_window wins)"},
      {k + "next_tokens", kChecked, "0 (causal); a larger value is warned: the model stays causal"},
      {k + "rotary_dtype", kChecked, "float32; float16 and bfloat16 warned (RoPE is computed in float32); others refused"},
      {k + "embedding_init_type", kChecked,
       "None (param_init_type) or a dtype; float16 and bfloat16 warned (master weights are float32)"},
      {k + "checkpoint_name_or_path", kChecked,
       "run_mode eval/predict: a path loads like load_checkpoint, a hub name is refused, and a given load_checkpoint wins "
       "(warned, as MindFormers lets it win); train/finetune: warned (MindFormers does not load it there)"},
      {k + "extend_method", kRefused,
       "MindFormers' names for RoPE scaling (PI, NTK, YaRN, LLAMA3) are not read; use extend_method: \"None\" and "
       "give Hugging Face's rope_scaling map (rope_type linear, dynamic, yarn, llama3, longrope)"},
      {k + "scaling_factor", kIgnored,
       "MindFormers' FreqsMgr reads scaling_factor only for an extend_method (PI, NTK, YaRN, LLAMA3), and extend_method "
       "other than \"None\" is refused here (not built)"},
      {k + "pp_interleave_num", kBuilt, kInterleaveNum},
      {k + "offset", kBuilt, kOffset},
      {k + "quant", kRefused, std::string(kQuant) + "; use quant: \"\""},
      {k + "quant_config", kRefused, std::string(kQuant) + "; remove model.model_config.quant_config"},
      {k + "pet_config", kBuilt,
       "model.lora: LoRA adapters (MindFormers' LoraConfig keys or PEFT's names; models/lora.h), the rest frozen"},
      {k + "qkv_concat", kCpu, "how MindSpore stores the q, k, v projections (one matrix or three); the same projections are computed"},
      {k + "use_rope_slice", kCpu, "an Ascend implementation of RoPE's half rotation"},
      {k + "use_attn_mask_compression", kCpu, "an Ascend flash-attention mask format"},
      {k + "use_ring_attention", kCpu,
       "Ascend's ring attention over MindSpore's context-parallel devices; each rank here attends over the whole sequence"},
      {k + "fused_rms_norm", kCpu, "an Ascend fused RMSNorm kernel (the same function)"},
      {k + "is_dynamic", kCpu, "MindSpore's dynamic-shape graphs"},
      {k + "fine_grain_interleave", kCpu,
       "splits each layer on Ascend to overlap model-parallel communication with compute (the same numbers)"},
      {k + "use_prompt_flash_attention", kCpu, "an Ascend kernel for prediction"},
      {k + "use_incre_flash_attention", kCpu, "an Ascend kernel for prediction"},
      {k + "parallel_optimizer", kIgnored,
       "MindSpore's optimizer sharding of the embedding alone; ZeRO-1 here is parallel.enable_parallel_optimizer "
       "(every parameter)"},
      {k + "compute_in_2d", kIgnored, kDeprecated},
      {k + "use_past_shard", kIgnored, kDeprecated},
      {k + "pretrain_seqlen", kIgnored, kDeprecated},
      {k + "batch_size", kIgnored, "MindFormers' batch size for prediction; the training batch is runner_config.batch_size"},
      {k + "pad_token_id", kIgnored,
       "not used in training: every token is a target and is attended to (MindFormers' Llama leaves input tokens equal to "
       "pad_token_id out of its loss and its attention); MegatronDataset samples are packed documents, without padding"},
      {k + "ignore_token_id", kIgnored,
       "MindFormers masks labels equal to it only when a dataset gives a labels column; MegatronDataset samples are "
       "input_ids, their labels the ids shifted by one"},
  };
  for (const char* g : {"bos_token_id", "block_size", "num_blocks", "use_kvcache_op", "is_flexible_shape",
                        "use_paged_attention", "llm_backend"})
    r.push_back({k + g, kIgnored, kGeneration});
  for (const char* g : {"eos_token_id", "use_past", "top_k", "top_p", "do_sample", "temperature", "repetition_penalty",
                        "max_decode_length"})
    r.push_back({k + g, kBuilt, config_keys::kGenerationBuilt});
  r.push_back({k + "position_embedding_type", kChecked, "rope only (a Llama's positions are RoPE's); others refused"});
  r.push_back({k + "add_bias_linear", kChecked,
               "False only (a Llama's linear layers have no biases; qkv_has_bias adds q, k, v biases); True refused"});
  // MindFormers' Mixtral is a LlamaConfig with moe_config.expert_num > 1, whose arch it writes LlamaForCausalLM;
  // MixtralForCausalLM (Hugging Face's name) is registered as the same model.
  r.push_back({"model.arch.type", kBuilt, "model.arch (LlamaForCausalLM, or its alias MixtralForCausalLM)"});
  return r;
}

std::vector<std::pair<std::string, std::string>> llama_foreign_keys() {
  const std::string k = "model.model_config.";
  const std::string no_dropout =
      "MindFormers' LlamaConfig has no dropout rate, so its Llama trains without dropout, and so does this one: remove it";
  return {
      {k + "expand_ratio", "GPT-2's MLP width; a Llama's SwiGLU width is intermediate_size, or derived from hidden_size "
                           "by multiple_of and ffn_dim_multiplier"},
      {k + "hidden_act", "a Llama's MLP is SwiGLU (silu(gate) x up), whatever hidden_act says (MindFormers' LlamaConfig "
                         "has no such key): remove it"},
      {k + "hidden_dropout_rate", no_dropout},
      {k + "attention_dropout_rate", no_dropout},
      {k + "layernorm_epsilon", "a Llama normalizes with RMSNorm, whose epsilon is rms_norm_eps"},
      {k + "max_position_embeddings", "LlamaConfig spells it max_position_embedding (singular): the RoPE table's length "
                                      "(None: seq_length)"},
      {k + "num_labels", "sequence classification is not built, and LlamaConfig has no num_labels: remove it"},
      {k + "rope_theta", "LlamaConfig spells RoPE's base `theta`"},
  };
}

}  // namespace gf::config_keys
