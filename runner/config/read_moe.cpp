// Reading moe_config into ModelConfig::moe (see runner/config/read.h): the keys runner/config/keys_moe.cpp marks
// built, each checked as MindFormers' MoEConfig checks it (expert_num and num_experts_chosen >= 1,
// num_experts_chosen <= expert_num) and for the values this runner builds. The rules that involve
// parallel_config (expert_parallel dividing expert_num and data_parallel) are the layout check's
// (layout_check.cpp), so that `gridformer config` and every rank report them with the layout's.
#include <cmath>
#include <initializer_list>
#include <string>

#include "models/registry.h"
#include "runner/config/read.h"

namespace gf::config_read {
namespace {

using config_tree::show;

const std::string k = "moe_config.";

std::string moe_kv(const std::string& key, const std::string& value) { return kv(k + key, value); }

// The value of `key`, which must be one of `accepted`; refused otherwise, with what they mean.
std::string one_of(ReadContext& x, const char* key, std::initializer_list<const char*> accepted, const std::string& means,
                   const std::string& extra = "") {
  const std::string v = x.rd.get<std::string>(k + key);
  std::string list;
  size_t i = 0;
  for (const char* a : accepted) {
    if (v == a) return v;
    list += std::string(i == 0 ? "" : i + 1 == accepted.size() ? " or " : ", ") + a;
    ++i;
  }
  x.refuse(moe_kv(key, v) + ": expects " + list + " (" + means + ")" + extra);
  return v;
}

void check_counts(ReadContext& x) {
  const MoeConfig& e = x.c.model.moe;
  if (e.expert_num < 1)
    x.refuse(moe_kv("expert_num", std::to_string(e.expert_num)) + ": must be >= 1 (1: a dense model; Mixtral: 8)");
  if (e.num_experts_chosen < 1)
    x.refuse(moe_kv("num_experts_chosen", std::to_string(e.num_experts_chosen)) +
             ": must be >= 1 (the experts each token is sent to; Mixtral: 2)");
  else if (e.expert_num >= 1 && e.num_experts_chosen > e.expert_num)
    x.refuse(moe_kv("num_experts_chosen", std::to_string(e.num_experts_chosen)) + " is larger than `moe_config.expert_num: " +
             std::to_string(e.expert_num) + "`: each token picks num_experts_chosen different experts; use at most " +
             std::to_string(e.expert_num) + (e.expert_num == 1 ? " (a dense model)" : ", or raise expert_num"));
  if (e.moe_layer_freq < 1)
    x.refuse(moe_kv("moe_layer_freq", std::to_string(e.moe_layer_freq)) +
             ": must be >= 1 (layer i is MoE when i % moe_layer_freq == 0; 1: every layer, 2: every other layer)");
}

void check_factors(ReadContext& x) {
  const MoeConfig& e = x.c.model.moe;
  if (!std::isfinite(e.capacity_factor))
    x.refuse(moe_kv("capacity_factor", show(x.rd.node(k + "capacity_factor"))) +
             ": expects a number (> 0: the capacity factor; <= 0: dropless)");
  // Both losses are added to the LM loss and their gradients scaled by the factor in fp32: published factors are
  // 1e-3 to 1e-1; at 1000 the router's terms outweigh the LM loss a thousandfold, and 1e308 overflows at step 1.
  if (!(e.aux_loss_factor >= 0.0 && e.aux_loss_factor <= 1000.0))
    x.refuse(moe_kv("aux_loss_factor", show(x.rd.node(k + "aux_loss_factor"))) +
             ": must be in [0, 1000] (0: no load-balancing loss; MindFormers' default: 0.05)");
  if (!(e.z_loss_factor >= 0.0 && e.z_loss_factor <= 1000.0))
    x.refuse(moe_kv("z_loss_factor", show(x.rd.node(k + "z_loss_factor"))) +
             ": must be in [0, 1000] (0: no router z-loss; ST-MoE's: 0.001)");
}

// MindFormers' TopkRouterV2 sizes an expert's capacity differently from the rule here: said once,
// where capacity applies (MoE layers, not dropless).
void warn_capacity_rule(ReadContext& x) {
  const MoeConfig& e = x.c.model.moe;
  if (!e.enabled() || e.dropless() || e.routing_policy != "TopkRouterV2") return;
  x.warn(moe_kv("routing_policy", e.routing_policy) + " with `capacity_factor: " + show(x.rd.node(k + "capacity_factor")) +
         "`: capacity here is ceil(capacity_factor x seq_length x num_experts_chosen / expert_num) tokens per expert "
         "and sequence, the assignments over it dropped by token_drop_policy (" + token_drop_policy_name(e.token_drop_policy) +
         "); MindFormers' TopkRouterV2 counts it over all the tokens of a data-parallel shard of the batch (batch_size "
         "x seq_length), caps it at that count and rounds it up to a multiple of model_parallel, so which tokens drop "
         "can differ (capacity_factor <= 0, dropless, is the same)");
}

}  // namespace

void read_moe(ReadContext& x) {
  MoeConfig& e = x.c.model.moe;
  KeyReader& rd = x.rd;
  e.expert_num = rd.get<int64_t>(k + "expert_num");
  e.num_experts_chosen = rd.get<int64_t>(k + "num_experts_chosen");
  e.capacity_factor = rd.get<double>(k + "capacity_factor");
  e.aux_loss_factor = rd.get<double>(k + "aux_loss_factor");
  e.z_loss_factor = rd.get<double>(k + "z_loss_factor");
  e.norm_topk_prob = rd.get<bool>(k + "norm_topk_prob");
  e.moe_layer_freq = rd.get<int64_t>(k + "moe_layer_freq");
  {
    const YAML::Node width = rd.node(k + "moe_ffn_hidden_size");
    int64_t w = 0;
    if (width && !width.IsNull() && !(width.IsScalar() && YAML::convert<int64_t>::decode(width, w) && w > 0))
      x.refuse(moe_kv("moe_ffn_hidden_size", show(width)) + ": expects an FFN width > 0, or ~ (the model's own)");
    e.expert_ffn = w;
  }
  e.shared_expert_ffn = rd.get<int64_t>(k + "moe_shared_expert_intermediate_size");
  if (e.shared_expert_ffn < 0)
    x.refuse(moe_kv("moe_shared_expert_intermediate_size", std::to_string(e.shared_expert_ffn)) +
             ": expects a width > 0 for a shared expert, or 0 for none");
  e.shared_expert_gate = rd.get<bool>(k + "use_shared_expert_gating");
  e.sparse_step = rd.get<int64_t>(k + "decoder_sparse_step");
  if (e.sparse_step < 0)
    x.refuse(moe_kv("decoder_sparse_step", std::to_string(e.sparse_step)) +
             ": must be >= 0 (> 0: layer i is MoE when (i + 1) % decoder_sparse_step == 0; 0: moe_layer_freq's rule)");
  e.dense_layers.clear();
  const YAML::Node only = rd.node(k + "mlp_only_layers");
  if (only && only.IsSequence()) {
    for (const YAML::Node& n : only) {
      int64_t l = -1;
      if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, l) || l < 0 || l >= x.c.model.num_layers)
        x.refuse(moe_kv("mlp_only_layers", show(only)) + ": expects layer indices in [0, num_layers " +
                 std::to_string(x.c.model.num_layers) + ")");
      else e.dense_layers.push_back(l);
    }
  } else if (only && !only.IsNull()) {
    x.refuse(moe_kv("mlp_only_layers", show(only)) + ": expects a list of layer indices, e.g. [0, 1], or []");
  }
  e.router_sigmoid = one_of(x, "moe_router_score_function", {"softmax", "sigmoid"},
                            "how the router scores the experts: a softmax over them, or each one's sigmoid") == "sigmoid";
  e.router_groups = rd.get<int64_t>(k + "moe_router_num_groups");
  e.router_group_topk = rd.get<int64_t>(k + "moe_router_group_topk");
  if (e.router_groups < 1 || (e.expert_num > 1 && e.expert_num % e.router_groups != 0))
    x.refuse(moe_kv("moe_router_num_groups", std::to_string(e.router_groups)) + ": must be >= 1 and divide expert_num (" +
             std::to_string(e.expert_num) + ")");
  else if (e.router_group_topk < 1 || e.router_group_topk > e.router_groups)
    x.refuse(moe_kv("moe_router_group_topk", std::to_string(e.router_group_topk)) + ": must be between 1 and "
             "moe_router_num_groups (" + std::to_string(e.router_groups) + ")");
  {
    const YAML::Node n = rd.node(k + "moe_router_group_score_topk");
    int64_t v = 0;
    const int64_t per = e.router_groups >= 1 && e.expert_num % e.router_groups == 0 ? e.expert_num / e.router_groups : 1;
    if (n && !n.IsNull() && !(n.IsScalar() && YAML::convert<int64_t>::decode(n, v) && v >= 1 && v <= per))
      x.refuse(moe_kv("moe_router_group_score_topk", show(n)) + ": expects 1 to the experts per group (" +
               std::to_string(per) + "), or ~");
    e.router_group_score_topk = v;
  }
  e.router_scaling = rd.get<double>(k + "moe_router_topk_scaling_factor");
  if (!(e.router_scaling > 0))
    x.refuse(moe_kv("moe_router_topk_scaling_factor", show(rd.node(k + "moe_router_topk_scaling_factor"))) + ": must be > 0");
  e.expert_bias = rd.get<bool>(k + "moe_router_enable_expert_bias");
  e.expert_bias_rate = rd.get<double>(k + "moe_router_bias_update_rate");
  if (!(e.expert_bias_rate >= 0))
    x.refuse(moe_kv("moe_router_bias_update_rate", show(rd.node(k + "moe_router_bias_update_rate"))) + ": must be >= 0");
  if (e.router_sigmoid && (e.aux_loss_factor != 0.0 || e.z_loss_factor != 0.0) && e.expert_num > 1)
    x.refuse("`moe_config.moe_router_score_function: sigmoid` with aux_loss_factor or z_loss_factor > 0: a balancing "
             "or z-loss on sigmoid scores is not built; set both to 0 (DeepSeek-V3 balances by "
             "moe_router_enable_expert_bias)");
  e.routing_policy = one_of(x, "routing_policy", {"TopkRouterV1", "TopkRouterV2"},
                            "MindFormers' routers: softmax over the experts, then top-k; both are that router here");
  const std::string dense = rd.get<std::string>(k + "router_dense_type");
  e.router_bf16 = one_of(x, "router_dense_type", {"float32", "bfloat16"}, "the dtype of the router's product",
                         dense == "float16" ? "; MindFormers computes a float16 router in float32 (its "
                                              "dtype_map), so use float32"
                                            : "") == "bfloat16";
  e.token_drop_policy = one_of(x, "token_drop_policy", {"position", "probs"},
                               "which assignments an expert over its capacity drops: the sequence's later tokens, or "
                               "the lowest router probabilities; Megatron's moe_token_drop_policy") == "probs"
                            ? TokenDropPolicy::kProbs
                            : TokenDropPolicy::kPosition;
  e.token_dispatcher = one_of(x, "token_dispatcher", {"alltoall", "allgather"},
                              "how tokens reach the experts of other ranks: an all-to-all of the routed tokens, or "
                              "every token gathered on every rank of the expert group; Megatron's "
                              "moe_token_dispatcher_type") == "allgather"
                           ? TokenDispatcher::kAllGather
                           : TokenDispatcher::kAllToAll;
  check_counts(x);
  check_factors(x);
  warn_capacity_rule(x);
  const ModelEntry* arch = nullptr;
  for (const ModelEntry& m : model_registry())
    if (m.arch == x.c.model.arch) arch = &m;
  if (arch != nullptr && arch->expects_experts && e.expert_num == 1)
    x.warn("`model.arch.type: " + arch->arch + "` with `moe_config.expert_num: 1`: a dense Llama; Mixtral's MoE layers "
           "need moe_config.expert_num > 1 (Mixtral 8x7B: expert_num 8, num_experts_chosen 2)");
}

}  // namespace gf::config_read
