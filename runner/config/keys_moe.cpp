// What gridformer does with every key of `moe_config` (runner/config/schema.h says what each KeyUse
// means): MindFormers' MoEConfig arguments (r0.8-r1.3, read from
// mindformers/modules/transformer/moe.py and the routers that use them), r0.8's router jitter, and
// three keys of ours that MoEConfig lacks, spelled after Megatron's (token_drop_policy,
// moe_layer_freq, token_dispatcher). The same for every model type: a GPT2Config with experts is
// GPT-2 MoE, a LlamaConfig with experts Mixtral-style MoE. The built keys are read in
// runner/config/read_moe.cpp; the layout rules that involve parallel_config (expert_num and data_parallel
// divisible by expert_parallel) are in layout_check.cpp.
// tests/runner/config_keys_test.cpp and config_keys_llama_test.cpp prove every rule on the loader.
#include "runner/config/keys.h"

namespace gf::config_keys {
namespace {

using enum KeyUse;

const char* const kOverlap =
    "MindSpore's overlap of the expert FFN with its all-to-all, in comp_comm_parallel_degree chunks (the same "
    "numbers); not built";
const char* const kPerLayer =
    "MindFormers sets it for each layer inside the model (cur_layer for save_token_distribution, moe_module_name for "
    "cold/hot experts); a file's value is not used there either";
const char* const kJitter =
    "MindFormers r0.8's router jitter (noisy_policy: jitter, noisy_epsilon: 1e-2) is an attribute of its router, not "
    "a MoEConfig argument; jitter on the router's input is not built";
const char* const kGroupLimited =
    "group-limited routing (DeepSeek-V2's topk_method: group_limited_greedy over n_group groups of experts, the best "
    "topk_group of them) is not built; remove the key (None)";
const char* const kAuxLosses =
    "MindFormers r1.3's extra balancing losses (aux_loss_types expert, device, comm) are not built: there is one "
    "load-balancing loss weighted by moe_config.aux_loss_factor (and the router z-loss by z_loss_factor); remove the "
    "key (None, or [])";
const char* const kColdHot = "used only with enable_cold_hot_expert: True (not built)";

}  // namespace

std::vector<KeyRule> moe_rules() {
  const std::string k = "moe_config.";
  return {
      {k + "expert_num", kBuilt, "model.moe.expert_num (1: dense; >= 1)"},
      {k + "num_experts_chosen", kBuilt, "model.moe.num_experts_chosen (top-k; 1 to expert_num)"},
      {k + "capacity_factor", kBuilt, "model.moe.capacity_factor (<= 0: dropless, MindFormers r1.3's rule)"},
      {k + "aux_loss_factor", kBuilt, "model.moe.aux_loss_factor (>= 0)"},
      {k + "z_loss_factor", kBuilt, "model.moe.z_loss_factor (>= 0)"},
      {k + "norm_topk_prob", kBuilt, "model.moe.norm_topk_prob"},
      {k + "routing_policy", kBuilt,
       "model.moe.routing_policy (TopkRouterV1 or TopkRouterV2, the same top-k routing here; others refused)"},
      {k + "router_dense_type", kBuilt, "model.moe.router_dense_type (float32 or bfloat16; others refused)"},
      {k + "token_drop_policy", kBuilt, "model.moe.token_drop_policy (position or probs; Megatron's moe_token_drop_policy)"},
      {k + "moe_layer_freq", kBuilt, "model.moe.moe_layer_freq (>= 1: layer i is MoE when i % moe_layer_freq == 0)"},
      {k + "decoder_sparse_step", kBuilt,
       "model.moe.sparse_step (Hugging Face's Qwen-MoE key; > 0: layer i is MoE when (i + 1) % decoder_sparse_step == 0, "
       "in place of moe_layer_freq's rule; 0: moe_layer_freq's)"},
      {k + "mlp_only_layers", kBuilt, "model.moe.dense_layers (Hugging Face's Qwen-MoE key): layers that stay dense"},
      {k + "moe_router_score_function", kBuilt, "model.moe.router_sigmoid (softmax or sigmoid; Megatron's key)"},
      {k + "moe_router_num_groups", kBuilt, "model.moe.router_groups (>= 1, dividing expert_num; Megatron's key)"},
      {k + "moe_router_group_topk", kBuilt, "model.moe.router_group_topk (1 to moe_router_num_groups; Megatron's key)"},
      {k + "moe_router_group_score_topk", kBuilt,
       "model.moe.router_group_score_topk (a group's score: the sum of its best N; None: num_experts_chosen / "
       "moe_router_group_topk, Megatron's)"},
      {k + "moe_router_topk_scaling_factor", kBuilt, "model.moe.router_scaling (> 0; Megatron's key)"},
      {k + "moe_router_enable_expert_bias", kBuilt,
       "model.moe.expert_bias: the aux-loss-free balancing bias (a parameter mlp.gate.e_score_correction_bias moved "
       "after each step; Megatron's key)"},
      {k + "moe_router_bias_update_rate", kBuilt, "model.moe.expert_bias_rate (>= 0; Megatron's key)"},
      {k + "token_dispatcher", kBuilt,
       "model.moe.token_dispatcher (alltoall or allgather; Megatron's moe_token_dispatcher_type)"},
      {k + "enable_sdrop", kIgnored,
       "MindFormers' TopkRouterV2 drop order (True, s-drop: by token position; False, k-drop: every token's first "
       "choice before any second choice); here an expert over its capacity drops assignments by "
       "moe_config.token_drop_policy (position: the sequence's later tokens first, as s-drop does; probs: the lowest "
       "router probabilities first)"},
      {k + "use_fused_ops_topkrouter", kCpu, "an Ascend fused kernel for TopkRouterV2's dispatch (the same routing)"},
      {k + "group_wise_a2a", kCpu, "MindSpore's all-to-all in intra- and inter-node steps on Ascend (the same exchange)"},
      {k + "expert_group_size", kIgnored,
       "MindSpore auto-parallel's tokens per routing group (AUTO_PARALLEL without sharding propagation only); capacity "
       "here is counted per sequence"},
      {k + "comp_comm_parallel", kIgnored, kOverlap},
      {k + "comp_comm_parallel_degree", kIgnored, kOverlap},
      {k + "save_token_distribution", kIgnored,
       "MindFormers' per-layer token-distribution summaries; here each MoE layer's expert load is written to "
       "metrics.jsonl"},
      {k + "max_router_load", kIgnored,
       "the size of TopkRouterV2's precomputed index tables (MindFormers' bound on tokens x num_experts_chosen per "
       "router call); nothing here has such a bound"},
      {k + "cur_layer", kIgnored, kPerLayer},
      {k + "moe_module_name", kIgnored, kPerLayer},
      {k + "noisy_policy", kIgnored, kJitter},
      {k + "noisy_epsilon", kIgnored, kJitter},
      {k + "shared_expert_num", kRefused,
       "MindFormers' count of shared experts (DeepSeek's, each moe_intermediate_size wide) is not read; a shared expert "
       "is given by its width, moe_config.moe_shared_expert_intermediate_size (Qwen2-MoE's); use shared_expert_num: 0"},
      {k + "use_shared_expert_gating", kBuilt,
       "model.moe.shared_expert_gate: the shared expert's output times sigmoid(x . w) (Qwen2-MoE's shared_expert_gate), "
       "with moe_shared_expert_intermediate_size > 0"},
      {k + "moe_shared_expert_intermediate_size", kBuilt,
       "model.moe.shared_expert_ffn: a shared expert (a SwiGLU MLP every token runs, beside the routed ones) of this "
       "width (Megatron's --moe-shared-expert-intermediate-size, Qwen2-MoE's shared_expert_intermediate_size); 0: none"},
      {k + "routed_scaling_factor", kRefused,
       "scaling the routed experts' weights (DeepSeek-V2's, applied where norm_topk_prob does not renormalise) is not "
       "built; use routed_scaling_factor: 1.0"},
      {k + "topk_method", kRefused,
       "group-limited routing (DeepSeek-V2's group_limited_greedy) is not built; use topk_method: greedy (plain top-k)"},
      {k + "topk_group", kRefused, kGroupLimited},
      {k + "n_group", kRefused, kGroupLimited},
      {k + "first_k_dense_replace", kIgnored,
       "MindFormers reads it in DeepSeek-V2 only (its first k layers dense); here moe_config.moe_layer_freq picks the "
       "MoE layers (layer i when i % moe_layer_freq == 0)"},
      {k + "moe_intermediate_size", kIgnored,
       "MindFormers uses it for DeepSeek-style models only (its files carry the default 1407 for every other model); "
       "the experts here have the model's own FFN width (GPT-2: hidden_size x expand_ratio; Llama: intermediate_size, "
       "or its derivation) unless moe_config.moe_ffn_hidden_size gives theirs"},
      {k + "moe_ffn_hidden_size", kBuilt,
       "model.moe.expert_ffn: each expert's FFN width (Megatron's --moe-ffn-hidden-size, Hugging Face's "
       "moe_intermediate_size); None: the model's own"},
      {k + "aux_loss_types", kRefused, kAuxLosses},
      {k + "aux_loss_factors", kRefused, kAuxLosses},
      {k + "enable_cold_hot_expert", kRefused,
       "cold/hot expert placement (hot experts copied to every rank, refreshed every update_step steps) is not built; "
       "use enable_cold_hot_expert: False"},
      {k + "update_step", kIgnored, kColdHot},
      {k + "hot_expert_num", kIgnored, kColdHot},
      {k + "cold_token_percent", kIgnored, kColdHot},
  };
}

}  // namespace gf::config_keys
