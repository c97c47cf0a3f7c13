#include "models/lora.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>
#include <set>
#include <stdexcept>

namespace gf {

double LoraConfig::scale() const {
  const double r = static_cast<double>(rank);
  return rslora ? alpha / std::sqrt(r) : alpha / r;
}

namespace {

std::string module_of(const std::string& weight) {
  const std::string suffix = ".weight";
  return weight.size() > suffix.size() && weight.compare(weight.size() - suffix.size(), suffix.size(), suffix) == 0
             ? weight.substr(0, weight.size() - suffix.size())
             : weight;
}

std::string last_part(const std::string& module) {
  const size_t dot = module.rfind('.');
  return dot == std::string::npos ? module : module.substr(dot + 1);
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Python's re.match: the pattern matched from the start of `s` (not necessarily to its end).
bool re_match(const std::regex& re, const std::string& s) {
  return std::regex_search(s, re, std::regex_constants::match_continuous);
}

std::regex compile(const std::string& pattern, const std::string& key) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw std::invalid_argument("`model.model_config.pet_config." + key + ": " + pattern + "`: not a regular expression (" +
                                e.what() + ")");
  }
}


}  // namespace

bool peft_names_module(const std::string& entry, const std::string& module) {
  return module == entry || (module.size() > entry.size() && module.ends_with(entry) &&
                             module[module.size() - entry.size() - 1] == '.');
}

bool is_all_linear(const std::string& target) { return lower(target) == "all-linear"; }

std::string lora_a_name(const std::string& weight_name) { return module_of(weight_name) + ".lora_A.weight"; }
std::string lora_b_name(const std::string& weight_name) { return module_of(weight_name) + ".lora_B.weight"; }

const char* mindformers_module_name(Role r) {
  switch (r) {
    case Role::kQW: return "wq";
    case Role::kKW: return "wk";
    case Role::kVW: return "wv";
    case Role::kOW: return "wo";
    case Role::kGateW:
    case Role::kExpertGateW: return "w1";
    case Role::kDownW:
    case Role::kExpertDownW: return "w2";
    case Role::kUpW: return "w3";
    case Role::kExpertUpW: return "";  // GELU experts' c_fc (SwiGLU's up is w3: its role is kExpertUpW too, below)
    default: return "";
  }
}

std::vector<LoraTarget> lora_targets(const LoraConfig& c, const NameMap& names, const ParamTable& base, int64_t layers,
                                     bool whole) {
  std::vector<LoraTarget> out;
  if (!c.on) return out;
  const std::string tkey = "target_modules";
  std::regex target;
  if (c.target_is_regex) target = compile(c.target_regex, tkey);
  std::vector<std::regex> exclude;
  for (const std::string& x : c.exclude) exclude.push_back(compile(x, "exclude_layers"));
  // PEFT's rule on the Hugging Face module name, or MindFormers' on its own short name.
  // PEFT's target_modules 'all-linear' (tuners_utils.py _maybe_include_all_linear_layers): every nn.Linear but the
  // output embedding (lm_head), so every projection that carries an adapter here.
  const bool all_linear = c.peft_names && c.target_is_regex && is_all_linear(c.target_regex);
  auto targeted = [&](const std::string& module, const std::string& mf_name) {
    if (all_linear) return true;
    if (c.peft_names) {
      if (c.target_is_regex) return std::regex_match(module, target);
      for (const std::string& t : c.target_list)
        if (peft_names_module(t, module)) return true;
      return false;
    }
    if (mf_name.empty()) return false;
    for (const std::regex& x : exclude)
      if (re_match(x, mf_name)) return false;
    if (c.target_is_regex) return re_match(target, mf_name);
    for (const std::string& t : c.target_list)
      if (mf_name == t) return true;
    return false;
  };
  // Every linear layer the model has, by its weight's name.
  std::set<std::string> linear;
  std::vector<Role> roles(std::begin(kLoraAttentionRoles), std::end(kLoraAttentionRoles));
  roles.insert(roles.end(), std::begin(kLoraMlpRoles), std::end(kLoraMlpRoles));
  for (int64_t l = 0; l < layers; ++l)
    for (Role r : roles) {
      std::string n;
      try {
        n = names(r, l);
      } catch (const std::logic_error&) {
        continue;  // the architecture has no such role
      }
      if (!base.find(n)) continue;
      linear.insert(n);
      if (targeted(module_of(n), mindformers_module_name(r))) out.push_back({r, l, n});
    }
  // The routed experts' projections, expert by expert (the base table holds every expert's, whatever the layout).
  for (int64_t l = 0; l < layers; ++l)
    for (Role r : kLoraExpertRoles) {
      std::string pattern;
      try {
        pattern = names(r, l);
      } catch (const std::logic_error&) {
        continue;
      }
      // MindFormers' name of a SwiGLU expert's up projection is w3; a GELU expert's (c_fc) has none.
      const ParamSpec* gate = nullptr;
      try {
        gate = base.find(expert_name(names(Role::kExpertGateW, l), 0));
      } catch (const std::logic_error&) {
      }
      const char* mf = r == Role::kExpertUpW ? (gate ? "w3" : "") : mindformers_module_name(r);
      for (int64_t e = 0;; ++e) {
        const std::string n = expert_name(pattern, e);
        const ParamSpec* p = base.find(n);
        if (p == nullptr) break;
        linear.insert(n);
        if (targeted(module_of(n), mf)) out.push_back({r, l, n, e, p->experts});
      }
    }
  if (c.dropout > 0.0f)
    for (const LoraTarget& t : out) {
      if (t.role == Role::kRouterW)
        throw std::invalid_argument("`model.model_config.pet_config.lora_dropout: " + std::to_string(c.dropout) +
                                    "` with an adapter on the router " + module_of(t.weight) +
                                    ": the adapters' dropout on a router is not built; set lora_dropout: 0.0, or "
                                    "leave the router out of target_modules");
      else if (t.expert >= 0)
        throw std::invalid_argument("`model.model_config.pet_config.lora_dropout: " + std::to_string(c.dropout) +
                                    "` with an adapter on the expert projection " + module_of(t.weight) +
                                    ": the experts' rows are permuted by the routing, so the adapters' dropout on "
                                    "them is not built; set lora_dropout: 0.0, or target the attention alone");
    }
  // A target naming a module that is no such layer: PEFT applies LoRA to embeddings and other layers too; here
  // only the projections above carry adapters.
  if (c.peft_names && !all_linear) {
    for (const ParamSpec& p : base.specs()) {
      if (linear.count(p.name) || p.name.size() < 7 || p.name.compare(p.name.size() - 7, 7, ".weight") != 0) continue;
      const std::string m = module_of(p.name);
      if (targeted(m, "") || (!c.target_is_regex && targeted(m, last_part(m))))
        throw std::invalid_argument("`model.model_config.pet_config.target_modules` names '" + m +
                                    "', which has no LoRA adapter here: adapters sit on the attention's projections, "
                                    "the dense MLP's, the routers, the shared experts' and the routed experts' "
                                    "(q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, gate, "
                                    "shared_expert_gate; Mixtral's "
                                    "experts' w1, w2, w3; GPT-2's c_attn, c_proj, c_fc), not on embeddings, the head "
                                    "(modules_to_save trains those whole) or norms");
    }
  }
  if (whole && out.empty()) {
    std::string what = c.target_is_regex ? c.target_regex : "";
    for (const std::string& t : c.target_list) what += (what.empty() ? "" : ", ") + t;
    throw std::invalid_argument(
        "`model.model_config.pet_config.target_modules: " + what + "` matches no module of the model: " +
        (c.peft_names ? std::string("PEFT's names are Hugging Face's (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
                                    "down_proj; GPT-2: c_attn, c_proj, c_fc), a regex matching the whole name "
                                    "(.*\\.(q_proj|v_proj))")
                      : std::string("MindFormers' names are the layers' own (wq, wk, wv, wo, w1, w2, w3; Llama family "
                                    "only), matched from the start ('.*wq|.*wv')")));
  }
  return out;
}

std::string lora_head_name(const NameMap& names) {
  try {
    return names(Role::kLmHead, -1);
  } catch (const std::logic_error&) {
    return "lm_head.weight";  // GPT-2's names have no head of its own
  }
}

std::vector<Role> lora_saved_roles(const LoraConfig& c, const NameMap& names) {
  std::vector<Role> out;
  if (!c.on) return out;
  const std::string key = "`model.model_config.pet_config.modules_to_save: ";
  for (const std::string& s : c.modules_to_save) {
    bool found = false;
    for (Role r : {Role::kEmbed, Role::kLmHead}) {
      const std::string m = module_of(r == Role::kLmHead ? lora_head_name(names) : names(r, -1));
      if (!peft_names_module(s, m)) continue;
      found = true;
      if (r == Role::kLmHead && c.loss_chunk > 0)
        throw std::invalid_argument(key + s + "` with `loss_vocab_chunk: " + std::to_string(c.loss_chunk) +
                                    "`: the chunked loss is built for a frozen head; set loss_vocab_chunk: 0");
      if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
    }
    if (!found)
      throw std::invalid_argument(key + s + "`: names no module that trains whole here; built are the token embedding (" +
                                  module_of(names(Role::kEmbed, -1)) + ") and the head (lm_head)");
  }
  return out;
}

ParamTable lora_table(const LoraConfig& c, const NameMap& names, const ParamTable& base, int64_t layers, bool whole,
                      bool tied_head) {
  ParamTable t;
  const std::vector<Role> saved = lora_saved_roles(c, names);
  auto save = [&](Role r) {
    if (std::find(saved.begin(), saved.end(), r) == saved.end()) return;
    const std::string name = r == Role::kLmHead ? lora_head_name(names) : names(r, -1);
    const ParamSpec* p = base.find(name);
    // A tied head: the copy of the embedding the head reads, where this table's base holds the head (its final norm).
    if (p == nullptr && r == Role::kLmHead && tied_head && base.find(names(Role::kFinalNormW, -1)))
      p = base.find(names(Role::kEmbed, -1));
    if (p == nullptr) return;
    ParamSpec copy = *p;
    copy.name = name;
    copy.tied = false;  // the copies train apart, as PEFT's
    t.add(copy);
  };
  save(Role::kEmbed);
  for (const LoraTarget& x : lora_targets(c, names, base, layers, whole)) {
    const ParamSpec& w = base.at(x.weight);
    if (w.shape.size() != 2) throw std::logic_error("lora: " + x.weight + " is not a matrix");
    // Our weights are stored [out, in] (nn.Linear) or [in, out] (GPT-2's Conv1D); which is which follows from
    // the split: a projection is split by its outputs (column-parallel) or its inputs (row-parallel).
    const bool column = x.role == Role::kQkvW || x.role == Role::kQW || x.role == Role::kKW || x.role == Role::kVW ||
                        x.role == Role::kFcW || x.role == Role::kGateW || x.role == Role::kUpW ||
                        x.role == Role::kExpertGateW || x.role == Role::kExpertUpW ||
                        x.role == Role::kSharedGateProjW || x.role == Role::kSharedUpProjW || x.role == Role::kQAW ||
                        x.role == Role::kQBW || x.role == Role::kKvAW || x.role == Role::kKvBW;
    const int out_dim = w.split.axis == Axis::kTensor ? (column ? w.split.dim : 1 - w.split.dim) : 0;
    const int64_t out = w.shape[static_cast<size_t>(out_dim)], in = w.shape[static_cast<size_t>(1 - out_dim)];
    const int64_t parts = w.split.parts;
    ParamSpec a{lora_a_name(x.weight), {c.rank, in}, no_split(), Init::kUniform, 0.0f, true};
    ParamSpec b{lora_b_name(x.weight), {out, c.rank}, no_split(), Init::kZeros, 0.0f, true};
    if (c.a_init == "normal") {
      a.init = Init::kNormal;
      a.std = 0.01f;
    } else {
      a.std = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in)));
    }
    if (w.split.axis != Axis::kTensor) {
      // A weight whole on every tensor-parallel rank (a router, latent attention's q_a_proj and kv_a_proj_with_mqa):
      // so are its adapters, and their gradients are summed over the group where the weight's are: always when each
      // rank's heads give a part (ParamSpec::grad_partial_over_tp), else under sequence parallel (each rank's rows).
      a.grad_partial_over_tp = b.grad_partial_over_tp = w.grad_partial_over_tp;
    } else if (column) {
      a.grad_partial_over_tp = true;
      b.split = split_dim(0, parts);
    } else {
      a.split = split_dim(1, parts);
      b.grad_partial_over_tp = true;
    }
    a.expert = b.expert = x.expert;  // a routed expert's adapters go with its expert
    a.experts = b.experts = x.experts;
    t.add(a);
    t.add(b);
  }
  save(Role::kLmHead);
  return t;
}

}  // namespace gf
