// A Megatron-LM run's optimizer state read for a resume (megatron_checkpoint.h's load_megatron_training).
//
// What Megatron saves (megatron/checkpointing.py save_checkpoint at 285068c, megatron/training/checkpointing.py at
// core_r0.6.0; the same for MindSpeed, which patches neither): beside 'model', without --no-save-optim,
//   'optimizer': FP32Optimizer.state_dict(), which is torch's (or apex FusedAdam's) optimizer.state_dict():
//                {'state': {i: {'exp_avg', 'exp_avg_sq'[, 'step']}}, 'param_groups': [{..., 'params': [i, ...]}]};
//                under --fp16 / --bf16 Float16OptimizerWithFloat16Params.state_dict(): {'optimizer': that,
//                'grad_scaler': DynamicGradScaler.state_dict() (fp16 only), 'fp32_from_fp16_params': the fp32 master
//                copies, a list per param group in the group's order};
//   'opt_param_scheduler': OptimizerParamScheduler.state_dict() ('lr_scheduler' before 2022), counted in samples.
// Under --use-distributed-optimizer 'optimizer' is DistributedOptimizer.state_dict(): {'optimizer': the inner state dict
// without 'state' (its groups without 'params'), 'grad_scaler'}; the moments and main parameters are in
// distrib_optim.pt beside the file (megatron_distrib_optim.h). From 2022 to mid-2023 (285068c) the distributed
// optimizer saved model_rng.pt without 'optimizer', and each data-parallel rank's DistributedOptimizer.state_dict() and
// the scheduler in an optim.pt of its own (megatron_dp_optim.cpp).
// torch numbers the parameters 0, 1, ... through the param groups in order; Megatron's get_param_groups builds the
// groups from named_parameters() of every model chunk in turn: a parameter is "no weight decay" when its name ends in
// '.bias' or it is 1-D (wd_mult 0.0), and in Megatron-core an expert's parameter goes to a group with
// is_expert_parallel True when its allreduce is False, which tensor_parallel/layers.py sets to not (is_expert and
// expert_model_parallel_size > 1): at EP 1 the experts share the dense groups. Those groups then have an optimizer of
// their own, and 'optimizer' is ChainedOptimizer's list of the two state dicts, each numbering from 0. 285068c appends
// the decay group first; core_r0.6.0 orders groups by their first parameter; 2020's Megatron had no wd_mult and put
// the no-decay group second. So each group's kind is read from its
// own keys, and its indices are given to the model's parameters of that kind in named_parameters() order, which is
// the order of the state dict's parameters (PyTorch's state_dict and named_parameters both walk the modules in
// registration order; megatron_flatten leaves out the non-parameters).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

#include "core/io/torch_file.h"
#include "models/causal_lm.h"
#include "models/weights/megatron_checkpoint.h"
#include "models/weights/megatron_distrib_optim.h"

namespace gf {
namespace {

// One shard file's optimizer state, per model chunk in the model state dict's names.
struct OptimizerView {
  std::vector<MegatronFlat> master, exp_avg, exp_avg_sq;
  std::shared_ptr<MegatronDistribState> distrib;  // what the flats point at, from distrib_optim.pt
  std::string masters_from = "fp32_from_fp16_params";
  double step = -1;
  MegatronGradScaler scaler;

  // The moments and main parameters are `d`'s (which the view keeps alive).
  void adopt(std::shared_ptr<MegatronDistribState> d) {
    distrib = std::move(d);
    master = distrib->master;
    exp_avg = distrib->exp_avg;
    exp_avg_sq = distrib->exp_avg_sq;
  }
};

// The pipeline rank of a shard file: its directory mp_rank_TT_PPP[_EEE] names it when args give a pipeline > 1.
int64_t pipeline_rank(const TorchFile& f, const PickleValue& args) {
  const PickleValue* pp = args.find("pipeline_model_parallel_size");
  if (!pp || pp->kind() != PickleValue::Kind::kInt || pp->as_int() <= 1) return 0;
  const std::string dir = std::filesystem::path(f.path()).parent_path().filename().string();  // mp_rank_TT_PPP...
  if (dir.size() < 14 || dir.compare(0, 8, "mp_rank_") != 0 || dir[10] != '_')
    throw std::runtime_error(f.path() + ": a pipeline-parallel shard outside an mp_rank_TT_PPP directory");
  return std::stoll(dir.substr(11, 3));
}

// The distributed optimizer's state: the moments and fp32 main parameters from distrib_optim.pt beside the file, the
// step from the param groups (apex's FusedAdam, which Megatron's distributed optimizer runs, counts per group; its
// state_dict drops the groups' 'params').
// `groups`: each optimizer's param groups (two for a ChainedOptimizer's dense and expert ones).
void distrib_view(OptimizerView& out, const TorchFile& f, const std::vector<const PickleValue*>& groups,
                  const std::vector<MegatronDistribParam>& params, size_t chunks) {
  const std::string file = f.path();
  for (size_t o = 0; o < groups.size(); ++o) {
    for (size_t g = 0; g < groups[o]->items().size(); ++g) {
      const std::string which = groups.size() > 1 ? std::string("[").append(std::to_string(o)) + "]" : std::string();
      const std::string where = file + ": optimizer" + which + " param_groups[" + std::to_string(g) + "]";
      const PickleValue& group = groups[o]->items()[g];
      const PickleValue* st = group.is_dict() ? group.find("step") : nullptr;
      if (!st || st->is_none())
        throw std::runtime_error(where + " has no 'step': the distributed optimizer keeps no per-parameter state here, so "
                                 "Adam's step must be its group's (apex FusedAdam's)");
      const double step = megatron_number(*st, where + ".step");
      if (out.step >= 0 && step != out.step)
        throw std::runtime_error(where + ": step " + std::to_string(step) + ", another group " + std::to_string(out.step) +
                                 ": Adam's bias correction needs one step count");
      out.step = step;
    }
  }
  // The DDP bucket size the run had (only a core_r0.9-on, parameter-aligned buffer needs it): none without
  // --overlap-grad-reduce, else --ddp-bucket-size or max(40000000, 1000000 x dp) (DistributedDataParallel.__init__),
  // and none on a pipeline stage after the first (DistributedDataParallel turns bucketing off there).
  int64_t bucket_size = 0;
  if (const PickleValue* args = f.root().find("args");
      args && args->kind() == PickleValue::Kind::kNamespace && pipeline_rank(f, *args) == 0) {
    const PickleValue* overlap = args->find("overlap_grad_reduce");
    if (overlap && overlap->kind() == PickleValue::Kind::kBool && overlap->as_bool()) {
      const PickleValue* given = args->find("ddp_bucket_size");
      const PickleValue* dp = args->find("data_parallel_size");
      if (given && given->kind() == PickleValue::Kind::kInt) bucket_size = given->as_int();
      else bucket_size = std::max<int64_t>(40000000, 1000000 * (dp && dp->kind() == PickleValue::Kind::kInt ? dp->as_int() : 1));
    }
  }
  out.adopt(std::make_shared<MegatronDistribState>(read_distrib_optim(file, params, chunks, bucket_size)));
  out.masters_from = "distrib_optim.pt (" + out.distrib->form + " buffers)";
}

// 2022 to mid-2023's distributed optimizer (285068c's): model_rng.pt holds no optimizer; each data-parallel rank's
// optim.pt beside it holds that rank's shards (megatron_distrib_optim.h), assembled here into whole tensors.
OptimizerView dp_rank_view(const TorchFile& f, const std::vector<const PickleValue*>& chunks) {
  const PickleValue* args = f.root().find("args");
  const PickleValue* dp = args && args->kind() == PickleValue::Kind::kNamespace ? args->find("data_parallel_size") : nullptr;
  if (!dp || dp->kind() != PickleValue::Kind::kInt)
    throw std::runtime_error(f.path() + ": a Megatron checkpoint of 2022 to mid-2023's distributed optimizer (model_rng.pt, "
                             "the moments in per-data-parallel-rank optim.pt files) whose args give no "
                             "data_parallel_size: the number of optim.pt files is not known");
  std::vector<MegatronDistribParam> params;
  for (size_t c = 0; c < chunks.size(); ++c)
    for (const auto& [name, w] : megatron_flatten(*chunks[c], f.path())) params.push_back({name, w->tensor().shape, c, false});
  MegatronDpRankState s = read_dp_rank_optim(f.path(), params, chunks.size(), dp->as_int());
  OptimizerView out;
  out.adopt(std::make_shared<MegatronDistribState>(std::move(s.tensors)));
  out.masters_from = out.distrib->form;
  out.step = s.step;
  out.scaler = s.scaler;
  return out;
}

// One optimizer's state dict: FP32Optimizer's (torch's), or Float16Optimizer's wrapping it.
struct OneOptimizer {
  const PickleValue* inner = nullptr;    // {'state', 'param_groups'}
  const PickleValue* masters = nullptr;  // fp32_from_fp16_params
  const PickleValue* groups = nullptr;
};

OptimizerView optimizer_view(const TorchFile& f, const std::vector<const PickleValue*>& chunks, bool expert_parallel) {
  const std::string file = f.path();
  const PickleValue* opt = f.root().find("optimizer");
  if ((!opt || opt->is_none()) && file.ends_with("model_rng.pt")) return dp_rank_view(f, chunks);
  if (!opt || opt->is_none())
    throw std::runtime_error(file + ": holds no optimizer state (saved with --no-save-optim?): a resume needs the Adam "
                             "moments; --finetune loads its weights alone, from step 1");
  // Megatron-core's ChainedOptimizer (the dense parameters' optimizer, then the expert-parallel ones') saves a list.
  std::vector<const PickleValue*> list;
  if (opt->kind() == PickleValue::Kind::kList) {
    for (const PickleValue& o : opt->items()) list.push_back(&o);
    if (list.empty()) throw std::runtime_error(file + ": 'optimizer' is an empty list (a ChainedOptimizer of none)");
  } else {
    list.push_back(opt);
  }
  OptimizerView out;
  std::vector<OneOptimizer> parts;
  bool expert_groups = false;  // experts have groups of their own only when expert-parallel (allreduce False)
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = file + ": optimizer" + (list.size() > 1 ? "[" + std::to_string(i) + "]" : "");
    const PickleValue* o = list[i];
    if (!o->is_dict()) throw std::runtime_error(where + " holds a " + std::string(o->kind_name()) + ", not a dict");
    OneOptimizer one{o, nullptr, nullptr};
    if (const PickleValue* wrapped = o->find("optimizer"); wrapped && wrapped->is_dict()) {  // Float16Optimizer's
      one.inner = wrapped;
      one.masters = o->find("fp32_from_fp16_params");
      if (const PickleValue* gs = o->find("grad_scaler"); gs && gs->is_dict())
        out.scaler = megatron_grad_scaler(*gs, where + ".grad_scaler");
    }
    one.groups = &megatron_need(*one.inner, "param_groups", where + "'s state dict");
    if (one.groups->kind() != PickleValue::Kind::kList)
      throw std::runtime_error(where + " param_groups holds a " + std::string(one.groups->kind_name()) + ", not a list");
    for (const PickleValue& g : one.groups->items())
      if (const PickleValue* e = g.is_dict() ? g.find("is_expert_parallel") : nullptr; e && !e->is_none() && e->as_bool())
        expert_groups = true;
    parts.push_back(one);
  }

  // The model's parameters in named_parameters() order, each with its group kind.
  struct Param {
    std::string name;
    const PickleValue* weight;
    size_t chunk;
    bool no_wd, expert, taken = false;
  };
  std::vector<Param> params;
  for (size_t c = 0; c < chunks.size(); ++c)
    for (const auto& [name, w] : megatron_flatten(*chunks[c], file)) {
      const bool no_wd = name.ends_with(".bias") || w->tensor().shape.size() == 1;
      params.push_back({name, w, c, no_wd, expert_groups && name.find(".experts.") != std::string::npos});
    }
  const PickleValue* state0 = parts[0].inner->find("state");
  if (!state0 || !state0->is_dict()) {  // Megatron's distributed optimizer: the state is in distrib_optim.pt
    std::vector<MegatronDistribParam> dp;
    for (const Param& p : params)
      dp.push_back({p.name, p.weight->tensor().shape, p.chunk, expert_parallel && p.name.find(".experts.") != std::string::npos});
    std::vector<const PickleValue*> groups;
    for (const OneOptimizer& one : parts) groups.push_back(one.groups);
    distrib_view(out, f, groups, dp, chunks.size());
    return out;
  }
  out.master.resize(chunks.size());
  out.exp_avg.resize(chunks.size());
  out.exp_avg_sq.resize(chunks.size());
  size_t assigned = 0;
  for (size_t o = 0; o < parts.size(); ++o) {
    const std::string of = file + ": optimizer" + (parts.size() > 1 ? "[" + std::to_string(o) + "]" : "");
    const PickleValue* state = parts[o].inner->find("state");
    if (!state || !state->is_dict()) throw std::runtime_error(of + " has no 'state' dict");
    const PickleValue* masters = parts[o].masters;
    const auto& list = parts[o].groups->items();
    for (size_t g = 0; g < list.size(); ++g) {
      const std::string where = of + " param_groups[" + std::to_string(g) + "]";
      const PickleValue& group = list[g];
      const PickleValue& indices = megatron_need(group, "params", where);
      bool no_wd;
      if (const PickleValue* m = group.find("wd_mult")) no_wd = megatron_number(*m, where + ".wd_mult") == 0.0;
      else if (list.size() == 2) no_wd = g == 1;  // 2020's Megatron: [decay, no decay]
      else throw std::runtime_error(where + ": has no wd_mult, and there are " + std::to_string(list.size()) +
                                    " groups: not Megatron's param groups");
      const PickleValue* e = group.find("is_expert_parallel");
      const bool expert = e && !e->is_none() && e->as_bool();
      std::vector<Param*> kind;
      for (Param& p : params)
        if (p.no_wd == no_wd && p.expert == expert && !p.taken) kind.push_back(&p);
      if (indices.items().size() != kind.size())
        throw std::runtime_error(where + " (" + (no_wd ? "no weight decay" : "weight decay") + (expert ? ", experts" : "") +
                                 ") numbers " + std::to_string(indices.items().size()) + " parameters, the model state " +
                                 "dict has " + std::to_string(kind.size()) + " of that kind: the optimizer state is " +
                                 "not this model's (or its groups are not Megatron's get_param_groups)");
      const PickleValue* group_masters = nullptr;
      if (masters && masters->kind() == PickleValue::Kind::kList) {
        if (g >= masters->items().size() || masters->items()[g].items().size() != kind.size())
          throw std::runtime_error(of + ".fp32_from_fp16_params has no list of " + std::to_string(kind.size()) +
                                   " master weights for param group " + std::to_string(g));
        group_masters = &masters->items()[g];
      }
      for (size_t j = 0; j < kind.size(); ++j) {
        Param& p = *kind[j];
        p.taken = true;
        ++assigned;
        const int64_t index = indices.items()[j].as_int();
        const std::string at = of + " state " + std::to_string(index) + " (" + p.name + ")";
        const PickleValue* s = state->find(index);
        if (!s || !s->is_dict())
          throw std::runtime_error(at + " is missing: the optimizer has not stepped this parameter (a checkpoint before "
                                   "the first iteration holds no moments)");
        const std::vector<int64_t>& shape = p.weight->tensor().shape;
        const PickleValue* moments[2] = {&megatron_need(*s, "exp_avg", at), &megatron_need(*s, "exp_avg_sq", at)};
        for (const PickleValue* m : moments)
          if (m->kind() != PickleValue::Kind::kTensor || m->tensor().shape != shape)
            throw std::runtime_error(at + ": a moment of shape " +
                                     (m->kind() == PickleValue::Kind::kTensor ? shape_str(m->tensor().shape) : m->kind_name()) +
                                     " for a parameter of shape " + shape_str(shape) + ": the state is not this model's");
        out.exp_avg[p.chunk].emplace_back(p.name, moments[0]);
        out.exp_avg_sq[p.chunk].emplace_back(p.name, moments[1]);
        megatron_adam_step(*s, group, at, out.step);
        if (group_masters) {
          const PickleValue& w = group_masters->items()[j];
          if (w.kind() != PickleValue::Kind::kTensor || w.tensor().shape != shape)
            throw std::runtime_error(of + ".fp32_from_fp16_params[" + std::to_string(g) + "][" + std::to_string(j) +
                                     "] is not a tensor of " + p.name + "'s shape " + shape_str(shape));
          out.master[p.chunk].emplace_back(p.name, &w);
        }
      }
    }
  }
  if (assigned != params.size())
    throw std::runtime_error(file + ": the optimizer's param groups number " + std::to_string(assigned) + " of the model's " +
                             std::to_string(params.size()) + " parameters");
  return out;
}

}  // namespace

MegatronTrainingState load_megatron_training(CausalLM& model, const std::string& path, const MegatronMomentSink& moment) {
  MegatronTrainingState out;
  std::map<std::string, OptimizerView> views;
  bool first = true, masters = false, expert_parallel = false;
  std::string masters_from, moments_from;
  std::shared_ptr<MegatronDistribState> last_distrib;
  auto on_file = [&](const TorchFile& f, const MegatronCheckpointFiles& files) {
    out.dir = files.dir;
    if (files.iteration == "release")
      throw std::runtime_error(files.dir + ": a release checkpoint holds weights only (no step, no optimizer): "
                               "--finetune loads them, from step 1");
    const PickleValue& args = megatron_need(f.root(), "args", f.path());
    expert_parallel = files.ep > 1;
    const int64_t iteration = static_cast<int64_t>(megatron_number(megatron_need(f.root(), "iteration", f.path()), f.path() + ": iteration"));
    if (!first && iteration != out.iteration)
      throw std::runtime_error(f.path() + ": iteration " + std::to_string(iteration) + ", rank 0's file says " +
                               std::to_string(out.iteration) + ": the shard files are of different saves");
    if (!first) return;
    first = false;
    out.iteration = iteration;
    if (const PickleValue* c = args.find("consumed_train_samples"); c && !c->is_none())
      out.consumed_samples = static_cast<int64_t>(megatron_number(*c, f.path() + ": args.consumed_train_samples"));
    if (const PickleValue* g = args.find("global_batch_size"); g && !g->is_none())
      out.global_batch = static_cast<int64_t>(megatron_number(*g, f.path() + ": args.global_batch_size"));
    const PickleValue* sch = f.root().find("opt_param_scheduler");
    if (!sch || sch->is_none()) sch = f.root().find("lr_scheduler");
    // 2022 to mid-2023's distributed optimizer saved the scheduler in each data-parallel rank's optim.pt (rank 0's read).
    std::optional<TorchFile> optim;
    std::string sch_file = f.path();
    if ((!sch || sch->is_none()) && f.path().ends_with("model_rng.pt") && !f.root().find("optimizer")) {
      sch_file = megatron_dp_rank_optim_path(f.path(), 0);
      if (std::filesystem::exists(sch_file)) {
        optim.emplace(TorchFile::open(sch_file));
        sch = optim->root().find("opt_param_scheduler");
        if (!sch || sch->is_none()) sch = optim->root().find("lr_scheduler");
      }
    }
    if (sch && sch->is_dict()) {
      const std::string w = sch_file + ": opt_param_scheduler";
      auto field = [&](const char* now, const char* before) -> const PickleValue& {
        const PickleValue* v = sch->find(now);
        return v ? *v : megatron_need(*sch, before, w);
      };
      out.scheduler = true;
      out.max_lr = megatron_number(field("max_lr", "start_lr"), w + ".max_lr");
      out.min_lr = megatron_number(megatron_need(*sch, "min_lr", w), w + ".min_lr");
      out.warmup_samples = static_cast<int64_t>(megatron_number(field("lr_warmup_steps", "warmup_steps"), w + ".lr_warmup_steps"));
      out.decay_samples = static_cast<int64_t>(megatron_number(field("lr_decay_steps", "decay_steps"), w + ".lr_decay_steps"));
      out.scheduler_samples = static_cast<int64_t>(megatron_number(megatron_need(*sch, "num_steps", w), w + ".num_steps"));
      out.decay_style = field("lr_decay_style", "decay_style").as_string();
    }
  };
  auto view = [&](const TorchFile& f, const std::vector<const PickleValue*>& chunks) -> const OptimizerView& {
    auto it = views.find(f.path());
    if (it == views.end()) it = views.emplace(f.path(), optimizer_view(f, chunks, expert_parallel)).first;
    return it->second;
  };
  MegatronPart weights, m, v;
  weights.what = "weights";
  weights.read = [&](const TorchFile& f, const std::vector<const PickleValue*>& chunks) {
    const OptimizerView& o = view(f, chunks);
    std::vector<MegatronFlat> flat;
    for (size_t c = 0; c < chunks.size(); ++c) {
      if (!o.master[c].empty()) masters = true, masters_from = o.masters_from;
      flat.push_back(o.master[c].empty() ? megatron_flatten(*chunks[c], f.path()) : o.master[c]);
    }
    return flat;
  };
  weights.place = [&model](const TensorPlacement& t, const std::vector<float>& full) {
    Placement::scatter(t, full.data(), model.weights() + t.offset);
  };
  m.what = "exp_avg";
  m.read = [&](const TorchFile& f, const std::vector<const PickleValue*>& chunks) {
    const OptimizerView& o = view(f, chunks);
    if (o.distrib) moments_from = o.distrib->form;
    if (out.adam_step == 0 && o.step >= 0) out.adam_step = static_cast<int64_t>(o.step);
    if (o.step >= 0 && static_cast<int64_t>(o.step) != out.adam_step)
      throw std::runtime_error(f.path() + ": Adam's step " + std::to_string(static_cast<int64_t>(o.step)) +
                               ", other shard files " + std::to_string(out.adam_step));
    if (o.scaler.present && !out.grad_scaler) {
      out.grad_scaler = true;
      out.loss_scale = o.scaler.scale;
      out.growth_tracker = o.scaler.growth;
      out.hysteresis_tracker = o.scaler.hysteresis;
    }
    return o.exp_avg;
  };
  m.place = [&moment](const TensorPlacement& t, const std::vector<float>& full) { moment(0, t, full); };
  v.what = "exp_avg_sq";
  v.read = [&](const TorchFile& f, const std::vector<const PickleValue*>& chunks) {
    const OptimizerView& o = view(f, chunks);
    std::vector<MegatronFlat> flat = o.exp_avg_sq;
    last_distrib = o.distrib;  // the flat's tensors, when they are distrib_optim.pt's, live until this file's are placed
    views.erase(f.path());     // its pointers are into f, which the next file replaces
    return flat;
  };
  v.place = [&moment](const TensorPlacement& t, const std::vector<float>& full) { moment(1, t, full); };
  const std::string note = load_megatron_parts(model, path, {weights, m, v}, on_file);
  out.master_weights = masters;
  if (out.adam_step > out.iteration)
    throw std::runtime_error(out.dir + ": Adam has taken " + std::to_string(out.adam_step) + " steps in " +
                             std::to_string(out.iteration) + " iterations: the state is inconsistent");
  out.note = note + "; Adam's moments at step " + std::to_string(out.adam_step) +
             (masters ? ", fp32 master weights from " + masters_from
                      : moments_from.empty() ? "" : " from " + moments_from);
  return out;
}

}  // namespace gf
