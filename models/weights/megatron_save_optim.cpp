// The training state written beside Megatron-LM's model (models/weights/megatron_save.h's MegatronTrainState): the
// optimizer's state_dict() and OptimizerParamScheduler's, for megatron/model's layout (megatron_save.cpp) and
// Megatron-core's (megatron_save_core.cpp).
//
// torch numbers an optimizer's parameters 0, 1, ... through its param groups in order; what differs is how Megatron
// builds the groups from named_parameters():
//   285068c (megatron/optimizer/__init__.py get_param_groups): the decay group, then the no-decay one ('.bias' or 1-D);
//   core_r0.6.0 (megatron/core/optimizer/__init__.py _get_param_groups): a group per key (wd_mult, lr_mult,
//     is_expert_parallel, is_decoupled_lr) in the order each key is first met, each holding also max_lr and min_lr.
//     A parameter is expert-parallel when its `allreduce` is False, which tensor_parallel/layers.py sets to
//     not (is_expert and expert_model_parallel_size > 1): experts at EP 1 share the dense groups. get_megatron_optimizer
//     gives the expert-parallel groups an optimizer of their own, and then returns ChainedOptimizer([dense, experts]),
//     whose state_dict() is the list of the two (each numbering its parameters from 0).
// Each optimizer's state dict is FP32Optimizer's (torch's / apex FusedAdam's: {'state': {i: {'step', 'exp_avg',
// 'exp_avg_sq'}}, 'param_groups': [...]}), or under fp16 / bf16 Float16OptimizerWithFloat16Params's ({'optimizer':
// that, 'grad_scaler' (fp16), 'fp32_from_fp16_params': the fp32 weights, a list per group}).
#include <algorithm>
#include <cstring>
#include <optional>
#include <tuple>

#include "core/io/torch_save.h"
#include "models/weights/megatron_save_detail.h"

namespace gf::megatron_save_detail {

namespace {

using FlatOut = std::vector<std::pair<std::string, const TorchOut*>>;

// A model state dict's parameters in its order (named_parameters order), with their dotted names; a module's
// `_extra_state` (None, or Transformer Engine's empty uint8 tensor) is not a parameter.
void flatten_out(const TorchOut& d, const std::string& prefix, FlatOut& out) {
  for (const auto& [k, v] : d.entries) {
    const std::string name = prefix.empty() ? k : prefix + "." + k;
    if (name.ends_with("_extra_state")) continue;
    if (v.kind == TorchOut::Kind::kTensor) out.emplace_back(name, &v);
    else flatten_out(v, name, out);
  }
}
FlatOut flat(const TorchOut& d) {
  FlatOut out;
  flatten_out(d, "", out);
  return out;
}

struct Group {
  bool no_wd = false, expert = false;
  std::vector<size_t> params;  // indices into the flat lists
};

// A param group as the optimizer's state_dict() gives it: Megatron's keys, the optimizer's hyperparameters, apex
// FusedAdam's step; `ids` its parameters' numbers (none in DistributedOptimizer.state_dict(), which drops them).
TorchOut group_dict(const MegatronTrainState& tr, bool core, const Group& g, std::optional<TorchOut> ids) {
  TorchOut group = TorchOut::dict();
  group.set("wd_mult", TorchOut::real(g.no_wd ? 0.0 : 1.0)).set("lr_mult", TorchOut::real(1.0));
  if (core)
    group.set("is_expert_parallel", TorchOut::boolean(g.expert))
        .set("is_decoupled_lr", TorchOut::boolean(false))
        .set("max_lr", TorchOut::real(tr.max_lr))
        .set("min_lr", TorchOut::real(tr.min_lr));
  group.set("lr", TorchOut::real(tr.lr))
      .set("bias_correction", TorchOut::boolean(true))
      .set("betas", TorchOut::tuple({TorchOut::real(tr.beta1), TorchOut::real(tr.beta2)}))
      .set("eps", TorchOut::real(tr.eps))
      .set("weight_decay", TorchOut::real(g.no_wd ? 0.0 : tr.weight_decay))
      .set("amsgrad", TorchOut::boolean(false))
      .set("maximize", TorchOut::boolean(false))
      .set("foreach", TorchOut::none())
      .set("capturable", TorchOut::boolean(false))
      .set("differentiable", TorchOut::boolean(false))
      .set("fused", TorchOut::none())
      .set("step", TorchOut::integer(tr.adam_step));  // apex FusedAdam's count, per group
  if (ids) group.set("params", std::move(*ids));
  return group;
}

TorchOut grad_scaler(const MegatronTrainState& tr) {  // DynamicGradScaler.state_dict()
  TorchOut gs = TorchOut::dict();
  gs.set("scale", TorchOut::tensor(TorchDtype::kF32, {}, {static_cast<float>(tr.loss_scale)}))
      .set("growth_tracker", TorchOut::integer(tr.growth_tracker))
      .set("hysteresis_tracker", TorchOut::integer(tr.hysteresis_tracker));
  return gs;
}

// One optimizer's state dict over `groups`, numbering their parameters from 0.
TorchOut one_optimizer(const MegatronTrainState& tr, TorchDtype dtype, bool core, const std::vector<Group>& groups,
                       const FlatOut& w, const FlatOut& m, const FlatOut& v) {
  TorchOut state = TorchOut::int_dict();
  TorchOut param_groups = TorchOut::list({});
  TorchOut masters = TorchOut::list({});
  int64_t index = 0;
  for (const Group& g : groups) {
    TorchOut ids = TorchOut::list({}), fp32 = TorchOut::list({});
    for (size_t i : g.params) {
      TorchOut st = TorchOut::dict();
      st.set("step", TorchOut::tensor(TorchDtype::kF32, {}, {static_cast<float>(tr.adam_step)}))  // torch's AdamW
          .set("exp_avg", *m[i].second)
          .set("exp_avg_sq", *v[i].second);
      state.set(std::to_string(index), std::move(st));
      ids.items.push_back(TorchOut::integer(index++));
      fp32.items.push_back(*w[i].second);
    }
    param_groups.items.push_back(group_dict(tr, core, g, std::move(ids)));
    masters.items.push_back(std::move(fp32));
  }
  TorchOut inner = TorchOut::dict();
  inner.set("state", std::move(state)).set("param_groups", std::move(param_groups));
  if (dtype == TorchDtype::kF32) return inner;  // FP32Optimizer.state_dict()
  TorchOut wrapped = TorchOut::dict();  // Float16OptimizerWithFloat16Params.state_dict()
  wrapped.set("optimizer", std::move(inner));
  if (tr.grad_scaler) wrapped.set("grad_scaler", grad_scaler(tr));
  wrapped.set("fp32_from_fp16_params", std::move(masters));
  return wrapped;
}

// Megatron's param groups over the flat parameters (see the file's comment).
std::vector<Group> groups_of(const FlatOut& w, bool core, bool expert_parallel) {
  std::vector<Group> groups;
  if (!core) groups = {Group{false, false, {}}, Group{true, false, {}}};  // 285068c: decay, then no decay
  for (size_t i = 0; i < w.size(); ++i) {
    const std::string& name = w[i].first;
    const bool no_wd = name.ends_with(".bias") || w[i].second->shape.size() == 1;
    const bool expert = core && expert_parallel && name.find(".experts.") != std::string::npos;
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.no_wd == no_wd && x.expert == expert; });
    if (g == groups.end()) g = groups.insert(groups.end(), Group{no_wd, expert, {}});  // core: in first-met order
    g->params.push_back(i);
  }
  std::erase_if(groups, [](const Group& g) { return g.params.empty(); });
  return groups;
}

std::vector<float> floats_of(const TorchOut& t) {  // an fp32 tensor's values
  std::vector<float> out(t.bytes->size() / sizeof(float));
  std::memcpy(out.data(), t.bytes->data(), t.bytes->size());
  return out;
}

}  // namespace

TorchOut optimizer_state(const MegatronTrainState& tr, TorchDtype dtype, const TorchOut& master, const TorchOut& m,
                         const TorchOut& v, bool core, bool expert_parallel) {
  const FlatOut w = flat(master), fm = flat(m), fv = flat(v);
  if (fm.size() != w.size() || fv.size() != w.size())
    throw std::logic_error("optimizer_state: the moments' state dicts are not the weights'");
  const std::vector<Group> groups = groups_of(w, core, expert_parallel);
  std::vector<Group> dense, experts;
  for (const Group& g : groups) (g.expert ? experts : dense).push_back(g);
  if (experts.empty()) return one_optimizer(tr, dtype, core, dense, w, fm, fv);
  return TorchOut::list({one_optimizer(tr, dtype, core, dense, w, fm, fv),  // ChainedOptimizer.state_dict()
                         one_optimizer(tr, dtype, core, experts, w, fm, fv)});
}

namespace {

// DistributedOptimizer.state_dict() over `groups`: the inner optimizer's state dict without 'state', its groups without
// 'params'; fp16's grad scaler.
TorchOut distributed_state_dict(const MegatronTrainState& tr, const std::vector<Group>& groups) {
  TorchOut list = TorchOut::list({});
  for (const Group& g : groups) list.items.push_back(group_dict(tr, true, g, std::nullopt));
  TorchOut inner = TorchOut::dict();
  inner.set("param_groups", std::move(list));
  TorchOut out = TorchOut::dict();
  out.set("optimizer", std::move(inner));
  if (tr.grad_scaler) out.set("grad_scaler", grad_scaler(tr));
  return out;
}

// get_parameter_state_dp_zero() of one DistributedOptimizer whose grad buffer holds the parameters `params` (indices
// into the flat lists, in named_parameters order) for `dp` data-parallel ranks: the parameters in reverse order, a
// bucket closed once it holds bucket_size elements or more, each bucket's end padded to a multiple of `dp` (zeros
// here: Megatron's padding holds whatever its buffers held); its dtype the gradients' (fp16 under --fp16, else fp32:
// bf16 accumulates in fp32).
// `shared_embedding`: the tied embedding's copies at pp > 1 (the first stage's word embeddings, the last stage's output
// layer: language_module.py's shared_embedding) take a bucket of their own, the parameters before them closing one.
TorchOut buffer_state(TorchDtype dtype, const std::vector<size_t>& params, const FlatOut& w, const FlatOut& fm,
                      const FlatOut& fv, int64_t dp, int64_t bucket_size, bool shared_embedding) {
  std::vector<std::vector<size_t>> buckets(1);
  int64_t size = 0;
  for (size_t j = params.size(); j-- > 0;) {
    const size_t k = params[j];
    const std::string& name = w[k].first;
    const bool own = shared_embedding && (name == "embedding.word_embeddings.weight" || name == "output_layer.weight");
    if (own && !buckets.back().empty()) buckets.emplace_back(), size = 0;
    buckets.back().push_back(k);
    size += static_cast<int64_t>(w[k].second->bytes->size() / sizeof(float));
    if (((bucket_size > 0 && size >= bucket_size) || own) && j > 0) buckets.emplace_back(), size = 0;
  }
  const TorchOut grad_dtype = TorchOut::global("torch", dtype == TorchDtype::kF16 ? "float16" : "float32");
  TorchOut padded = TorchOut::list({}), unpadded = TorchOut::list({});
  TorchOut world = TorchOut::dict();
  const char* keys[3] = {"param", "exp_avg", "exp_avg_sq"};
  const FlatOut* from[3] = {&w, &fm, &fv};
  TorchOut lists[3] = {TorchOut::list({}), TorchOut::list({}), TorchOut::list({})};
  for (const std::vector<size_t>& b : buckets) {
    int64_t n = 0;
    for (size_t k : b) n += static_cast<int64_t>(w[k].second->bytes->size() / sizeof(float));
    const int64_t total = (n + dp - 1) / dp * dp;
    unpadded.items.push_back(TorchOut::integer(n));
    padded.items.push_back(TorchOut::integer(total));
    for (int j = 0; j < 3; ++j) {
      std::vector<float> data;
      data.reserve(static_cast<size_t>(total));
      for (size_t k : b) {
        const std::vector<float> x = floats_of(*(*from[j])[k].second);
        data.insert(data.end(), x.begin(), x.end());
      }
      data.resize(static_cast<size_t>(total), 0.0f);
      lists[j].items.push_back(TorchOut::tensor(TorchDtype::kF32, {total}, data));
    }
  }
  for (int j = 0; j < 3; ++j) world.set(keys[j], std::move(lists[j]));
  auto per_dtype = [&](TorchOut x) {
    TorchOut d = TorchOut::dict();
    d.set_key(grad_dtype, std::move(x));
    return d;
  };
  TorchOut out = TorchOut::dict();
  out.set_key(TorchOut::string("per_bucket_numel"), TorchOut::list({per_dtype(std::move(padded))}))
      .set_key(TorchOut::string("per_bucket_numel_unpadded"), TorchOut::list({per_dtype(std::move(unpadded))}))
      .set_key(TorchOut::integer(0), per_dtype(std::move(world)));
  return out;
}

std::vector<size_t> params_of(const std::vector<Group>& groups, size_t n) {  // the groups' parameters, in flat order
  std::vector<bool> in(n, false);
  for (const Group& g : groups)
    for (size_t i : g.params) in[i] = true;
  std::vector<size_t> out;
  for (size_t i = 0; i < n; ++i)
    if (in[i]) out.push_back(i);
  return out;
}

}  // namespace

MegatronDistributedOut distributed_optimizer_state(const MegatronTrainState& tr, TorchDtype dtype, const TorchOut& master,
                                                   const TorchOut& m, const TorchOut& v, int64_t dp, int64_t bucket_size,
                                                   int64_t ep, int64_t ep_rank, bool shared_embedding) {
  const FlatOut w = flat(master), fm = flat(m), fv = flat(v);
  if (fm.size() != w.size() || fv.size() != w.size() || dp < 1 || ep < 1 || dp % ep != 0)
    throw std::logic_error("distributed_optimizer_state: the moments' state dicts are not the weights', or dp % ep != 0");
  std::vector<Group> dense, experts;
  for (const Group& g : groups_of(w, true, ep > 1)) (g.expert ? experts : dense).push_back(g);
  MegatronDistributedOut out;
  auto dense_buffer = [&] {  // built only where it is saved
    return buffer_state(dtype, params_of(dense, w.size()), w, fm, fv, dp, bucket_size, shared_embedding);
  };
  if (experts.empty()) {
    out.optimizer = distributed_state_dict(tr, dense);
    out.distrib = dense_buffer();
    return out;
  }
  // ChainedOptimizer([dense, experts]): state_dict() the list of the two; save_parameter_state's list of their
  // buffers, each saved by its data-parallel group's rank 0 (None elsewhere): the experts' group is the
  // data-modulo-expert-parallel ranks (dp / ep of them), whose rank 0 every expert rank has; the dense group's rank 0
  // is expert rank 0.
  out.optimizer = TorchOut::list({distributed_state_dict(tr, dense), distributed_state_dict(tr, experts)});
  out.distrib = TorchOut::list({ep_rank == 0 ? dense_buffer() : TorchOut::none(),
                                buffer_state(dtype, params_of(experts, w.size()), w, fm, fv, dp / ep, bucket_size, false)});
  return out;
}

std::vector<TorchOut> dp_rank_optimizer_states(const MegatronTrainState& tr, TorchDtype dtype, const TorchOut& master,
                                               const TorchOut& m, const TorchOut& v, int64_t dp) {
  const FlatOut w = flat(master), fm = flat(m), fv = flat(v);
  if (fm.size() != w.size() || fv.size() != w.size() || dp < 1)
    throw std::logic_error("dp_rank_optimizer_states: the moments' state dicts are not the weights'");
  // DDP (megatron/model/distributed.py at 285068c) walks parameters() giving each the elements just below the
  // previous one's: the first parameter ends the buffer.
  std::vector<int64_t> start(w.size()), numel(w.size());
  int64_t n = 0;
  for (size_t i = 0; i < w.size(); ++i) n += numel[i] = static_cast<int64_t>(w[i].second->bytes->size() / sizeof(float));
  for (int64_t below = n, i = 0; i < static_cast<int64_t>(w.size()); ++i) start[i] = below -= numel[i];
  const std::vector<Group> groups = groups_of(w, false, false);  // decay, then no decay
  const FlatOut* from[3] = {&w, &fm, &fv};
  std::vector<std::vector<float>> values[3];
  for (int k = 0; k < 3; ++k)
    for (const auto& [name, t] : *from[k]) values[k].push_back(floats_of(*t));
  const int64_t size = (n + dp - 1) / dp;
  std::vector<TorchOut> out;
  for (int64_t d = 0; d < dp; ++d) {
    const int64_t lo = d * size, hi = std::min(n, lo + size);
    TorchOut state = TorchOut::int_dict();
    TorchOut param_groups = TorchOut::list({}), masters = TorchOut::list({});
    int64_t index = 0;
    for (const Group& g : groups) {
      TorchOut ids = TorchOut::list({}), fp32 = TorchOut::list({});
      for (size_t i : g.params) {
        const int64_t a = std::max(lo, start[i]), b = std::min(hi, start[i] + numel[i]);
        if (b <= a) continue;
        auto shard = [&](int k) {
          const std::vector<float>& x = values[k][i];
          return TorchOut::tensor(TorchDtype::kF32, {b - a},
                                  std::vector<float>(x.begin() + (a - start[i]), x.begin() + (b - start[i])));
        };
        TorchOut st = TorchOut::dict();  // apex FusedAdam's: the step is its group's
        st.set("exp_avg", shard(1)).set("exp_avg_sq", shard(2));
        state.set(std::to_string(index), std::move(st));
        ids.items.push_back(TorchOut::integer(index++));
        if (dtype != TorchDtype::kF32) fp32.items.push_back(shard(0));
      }
      if (ids.items.empty()) continue;  // build_optimizer_group_ranges squeezes out a group with no shard here
      param_groups.items.push_back(group_dict(tr, false, g, std::move(ids)));
      masters.items.push_back(std::move(fp32));
    }
    TorchOut inner = TorchOut::dict();
    inner.set("state", std::move(state)).set("param_groups", std::move(param_groups));
    TorchOut sd = TorchOut::dict();
    sd.set("optimizer", std::move(inner));
    if (tr.grad_scaler) sd.set("grad_scaler", grad_scaler(tr));
    sd.set("shard_fp32_from_float16_groups", std::move(masters));
    out.push_back(std::move(sd));
  }
  return out;
}

TorchOut scheduler_state(const MegatronTrainState& tr) {
  TorchOut d = TorchOut::dict();
  d.set("max_lr", TorchOut::real(tr.max_lr))
      .set("lr_warmup_steps", TorchOut::integer(tr.warmup_samples))
      .set("num_steps", TorchOut::integer(tr.num_samples))
      .set("lr_decay_style", TorchOut::string(tr.decay_style))
      .set("lr_decay_steps", TorchOut::integer(tr.decay_samples))
      .set("min_lr", TorchOut::real(tr.min_lr))
      .set("start_wd", TorchOut::real(tr.weight_decay))
      .set("end_wd", TorchOut::real(tr.weight_decay))
      .set("wd_incr_style", TorchOut::string("constant"))
      .set("wd_incr_steps", TorchOut::integer(tr.wd_incr_samples));
  return d;
}

}  // namespace gf::megatron_save_detail
