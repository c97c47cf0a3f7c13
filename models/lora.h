// LoRA (Hu et al. 2021, as PEFT's tuners/lora/layer.py and MindFormers' LoRADense compute it): a targeted
// linear layer y = W x (+ b) gains (alpha / r) * B (A x), A [r, in] and B [out, r] trained, W frozen.
// Here: which modules a LoraConfig targets, and the adapters' parameter table, derived from the base
// model's table so that one rule serves every architecture and layout:
//
//   the base weight split by its outputs (column-parallel: q, k, v, gate, up, GPT-2's c_attn, c_fc):
//     A [r, in] whole on every tensor-parallel rank, its gradient summed over the group (each rank's outputs
//     contribute a part); B [out, r] split as the weight's outputs are (the same parts: q|k|v of c_attn);
//   the base weight split by its inputs (row-parallel: o, down, GPT-2's c_proj):
//     A [r, in] split as the weight's inputs are; B [out, r] whole, its gradient summed over the group
//     (each rank's A x is a partial sum of the whole A x).
//
// Adapter names are PEFT's without its base_model.model. prefix: <module>.lora_A.weight, <module>.lora_B.weight.
#pragma once
#include <string>
#include <vector>

#include "core/params/param_table.h"
#include "models/blocks/spec.h"
#include "models/lora_config.h"

namespace gf {

// A targeted module: its role and layer, its base weight's name (<module>.weight), and for a routed expert's
// projection its expert and the layer's experts (ParamSpec::expert, experts; -1 and 0 otherwise).
struct LoraTarget {
  Role role;
  int64_t layer;
  std::string weight;
  int64_t expert = -1, experts = 0;
};

// The projections an adapter can sit on: the attention's (q, k, v, o; GPT-2's c_attn, c_proj) and the MLP half's
// (the dense MLP's gate, up, down, GPT-2's c_fc, c_proj; an MoE layer's router and its shared expert's gate, up,
// down and sigmoid gate), the halves ZeRO-3 cuts a layer into.
// Latent attention's (DeepSeek: q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj) are the attention's.
inline constexpr Role kLoraAttentionRoles[] = {Role::kQkvW, Role::kQW,  Role::kKW,   Role::kVW, Role::kOW,
                                               Role::kQAW,  Role::kQBW, Role::kKvAW, Role::kKvBW};
inline constexpr Role kLoraMlpRoles[] = {Role::kFcW,           Role::kGateW,           Role::kUpW,
                                         Role::kDownW,          Role::kRouterW,         Role::kSharedGateProjW,
                                         Role::kSharedUpProjW,  Role::kSharedDownProjW, Role::kSharedExpertGateW};
// A routed expert's projections (Mixtral's w1, w3, w2; Qwen-MoE's gate_proj, up_proj, down_proj; GPT-2 MoE's c_fc,
// c_proj), each expert's adapters its own, placed with its expert (expert parallelism) in the adapters' expert region.
inline constexpr Role kLoraExpertRoles[] = {Role::kExpertGateW, Role::kExpertUpW, Role::kExpertDownW};

std::string lora_a_name(const std::string& weight_name);  // x.weight -> x.lora_A.weight
std::string lora_b_name(const std::string& weight_name);  // x.weight -> x.lora_B.weight
// PEFT's rule for a list of target_modules and for modules_to_save (tuners_utils.py check_target_module_exists): the
// entry is the module's whole name or its last dotted parts ("q_proj" names "model.layers.0.self_attn.q_proj").
bool peft_names_module(const std::string& entry, const std::string& module);
// PEFT's target_modules 'all-linear' (any case), a string of its own rather than a regular expression.
bool is_all_linear(const std::string& target);
// MindFormers' own name for a module of this role (wq, wk, wv, wo, w1, w2, w3), or "" where it has none here.
const char* mindformers_module_name(Role r);

// The modules of the base table `base` (a stage's or the whole model's) that `c` targets, in table order.
// Throws std::invalid_argument naming the key when the config targets a module that has no adapter here (the
// embedding, the head, a norm), targets an expert or
// a router with lora_dropout (not built: the experts' rows are permuted by the routing) or, with `whole`
// (the base is the whole model), when it targets nothing.
std::vector<LoraTarget> lora_targets(const LoraConfig& c, const NameMap& names, const ParamTable& base, int64_t layers,
                                     bool whole);
// PEFT's modules_to_save as built here: Role::kEmbed (embed_tokens) and Role::kLmHead (lm_head), each trained whole
// as PEFT's ModulesToSaveWrapper trains its copy of the module (the base's frozen original is not read while the copy
// exists). A head tied to the embedding is copied from the embedding and trains untied from it, as PEFT's deep copy of
// lm_head unties it. Throws std::invalid_argument naming the entry for a module that is neither.
std::vector<Role> lora_saved_roles(const LoraConfig& c, const NameMap& names);
// The head's weight name (lm_head.weight: Hugging Face's module, whose weight a tied model shares with the embedding).
std::string lora_head_name(const NameMap& names);
// The adapters' table: the saved embedding (if this table's base holds it), then for each target A then B (module
// order of the base table), then the saved head: the order their gradients are final in, last to first. A saved
// module keeps its base name and spec (its split, its decay), so it is placed, synchronised and checkpointed as the
// full model's would be, and its seed values are the base's (InitialValues keys on the name).
ParamTable lora_table(const LoraConfig& c, const NameMap& names, const ParamTable& base, int64_t layers, bool whole,
                      bool tied_head);

}  // namespace gf
