// The distributed optimizer's state as Megatron-LM saved it from 2022 to mid-2023 (285068c among them): one optim.pt
// per data-parallel rank, each holding that rank's shards of the grad buffer (megatron_distrib_optim.h has the format),
// assembled into each parameter's whole tensors.
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "core/io/torch_file.h"
#include "models/weights/megatron_distrib_optim.h"

namespace gf {
namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// An fp32 tensor of `shape` whose elements this reader writes (it owns them).
struct Owned {
  std::shared_ptr<std::vector<float>> data;
  PickleValue value;
};

Owned owned_tensor(const std::vector<int64_t>& shape) {
  Owned o;
  o.data = std::make_shared<std::vector<float>>(static_cast<size_t>(numel_of(shape)), 0.0f);
  auto storage = std::make_shared<TorchStorage>();
  storage->key = "assembled";
  storage->dtype = TorchDtype::kF32;
  storage->numel = numel_of(shape);
  storage->data = reinterpret_cast<const uint8_t*>(o.data->data());
  storage->owner = o.data;
  auto t = std::make_shared<TorchTensor>();
  t->dtype = TorchDtype::kF32;
  t->shape = shape;
  t->strides.assign(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) t->strides[d - 1] = t->strides[d] * shape[d];
  t->storage = std::move(storage);
  o.value = PickleValue::of_tensor(std::move(t));
  return o;
}

// One shard on a rank: parameter `param`'s flattened elements [start, start + size).
struct Shard {
  size_t param;
  int64_t start, size;
};

}  // namespace

double megatron_number(const PickleValue& v, const std::string& where) {
  if (v.kind() == PickleValue::Kind::kInt || v.kind() == PickleValue::Kind::kFloat || v.kind() == PickleValue::Kind::kBool)
    return v.as_float();
  if (v.kind() == PickleValue::Kind::kTensor && v.tensor().numel() == 1) return v.tensor().to_double()[0];
  throw std::runtime_error(where + " holds a " + std::string(v.kind_name()) + ", not a number");
}

const PickleValue& megatron_need(const PickleValue& d, const char* key, const std::string& where) {
  const PickleValue* v = d.is_dict() ? d.find(key) : nullptr;
  if (!v || v->is_none()) throw std::runtime_error(where + " has no '" + key + "'");
  return *v;
}

MegatronGradScaler megatron_grad_scaler(const PickleValue& gs, const std::string& where) {
  MegatronGradScaler out;
  out.present = true;
  out.scale = megatron_number(megatron_need(gs, "scale", where), where + ".scale");
  if (const PickleValue* g = gs.find("growth_tracker")) out.growth = static_cast<int64_t>(megatron_number(*g, where));
  if (const PickleValue* h = gs.find("hysteresis_tracker"))
    out.hysteresis = static_cast<int64_t>(megatron_number(*h, where));
  return out;
}

void megatron_adam_step(const PickleValue& state, const PickleValue& group, const std::string& at, double& step) {
  const PickleValue* st = state.find("step");
  if (!st || st->is_none()) st = group.find("step");  // apex FusedAdam counts per group
  if (!st || st->is_none()) throw std::runtime_error(at + ": no 'step' in its state nor in its param group");
  const double here = megatron_number(*st, at + ".step");
  if (step >= 0 && here != step)
    throw std::runtime_error(at + ": step " + std::to_string(here) + ", other parameters " + std::to_string(step) +
                             ": Adam's bias correction needs one step count");
  step = here;
}

std::string megatron_dp_rank_optim_path(const std::string& model_file, int64_t d) {
  const std::filesystem::path rank_dir = std::filesystem::path(model_file).parent_path();
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "_%03lld", static_cast<long long>(d));
  return (rank_dir.parent_path() / (rank_dir.filename().string() + suffix) / "optim.pt").string();
}

MegatronDpRankState read_dp_rank_optim(const std::string& model_file, const std::vector<MegatronDistribParam>& params,
                                       size_t chunks, int64_t dp) {
  if (dp < 1 || dp > 65536) throw std::runtime_error(model_file + ": args.data_parallel_size " + std::to_string(dp));
  MegatronDpRankState out;
  // Each parameter's place in its chunk's buffer: DDP walks parameters() giving each the elements just below the
  // previous one's (the first parameter ends the buffer).
  std::vector<int64_t> start(params.size()), total(chunks, 0);
  for (const MegatronDistribParam& p : params) total[p.chunk] += numel_of(p.shape);
  {
    std::vector<int64_t> below = total;
    for (size_t i = 0; i < params.size(); ++i) start[i] = below[params[i].chunk] -= numel_of(params[i].shape);
  }
  const auto no_wd = [&](size_t i) { return params[i].name.ends_with(".bias") || params[i].shape.size() == 1; };

  bool masters = false;
  std::vector<std::array<Owned, 3>> whole(params.size());  // master, exp_avg, exp_avg_sq
  std::vector<int64_t> covered(params.size(), 0);
  for (size_t i = 0; i < params.size(); ++i)
    for (size_t k = 1; k < 3; ++k) whole[i][k] = owned_tensor(params[i].shape);

  for (int64_t d = 0; d < dp; ++d) {
    const std::string path = megatron_dp_rank_optim_path(model_file, d);
    if (!std::filesystem::exists(path))
      throw std::runtime_error(model_file + ": a Megatron checkpoint of 2022 to mid-2023's distributed optimizer over " +
                               std::to_string(dp) + " data-parallel ranks (args.data_parallel_size), and " + path +
                               " is missing: a resume needs every rank's moments (copy the whole iteration directory); "
                               "--finetune loads the weights alone, from step 1");
    const TorchFile f = TorchFile::open(path);
    const PickleValue& outer = megatron_need(f.root(), "optimizer", path);
    const std::string where = path + ": optimizer";
    const PickleValue& inner = megatron_need(outer, "optimizer", where);
    const PickleValue& state = megatron_need(inner, "state", where + ".optimizer");
    const PickleValue& groups = megatron_need(inner, "param_groups", where + ".optimizer");
    if (!state.is_dict() || groups.kind() != PickleValue::Kind::kList)
      throw std::runtime_error(where + ".optimizer: not a torch optimizer state dict ('state' a dict, 'param_groups' a list)");
    if (const PickleValue* gs = outer.find("grad_scaler"); gs && gs->is_dict() && !out.scaler.present)
      out.scaler = megatron_grad_scaler(*gs, where + ".grad_scaler");
    const PickleValue* shard_masters = outer.find("shard_fp32_from_float16_groups");

    // This rank's shards, per kind (0: weight decay, 1: none), in chunk order then parameters() order.
    std::array<std::vector<Shard>, 2> kinds;
    for (size_t c = 0; c < chunks; ++c) {
      const int64_t size = (total[c] + dp - 1) / dp, lo = d * size, hi = std::min(total[c], lo + size);
      for (size_t i = 0; i < params.size(); ++i) {
        if (params[i].chunk != c) continue;
        const int64_t a = std::max(lo, start[i]), b = std::min(hi, start[i] + numel_of(params[i].shape));
        if (b > a) kinds[no_wd(i) ? 1 : 0].push_back({i, a - start[i], b - a});
      }
    }
    // The groups left after Megatron squeezes out the empty ones (build_optimizer_group_ranges until mid-2023), in
    // their order; or both, an empty one included, as Megatron kept them from mid-2023 on.
    std::vector<int> present;
    for (int k = 0; k < 2; ++k)
      if (!kinds[k].empty()) present.push_back(k);
    if (groups.items().size() == 2) present = {0, 1};
    if (groups.items().size() != present.size())
      throw std::runtime_error(where + ".optimizer has " + std::to_string(groups.items().size()) + " param groups; this " +
                               "model's parameters on data-parallel rank " + std::to_string(d) + " of " +
                               std::to_string(dp) + " make " + std::to_string(present.size()) +
                               ": the state is not this model's (or not of this data-parallel size)");
    for (size_t g = 0; g < present.size(); ++g) {
      const std::string gw = where + ".optimizer param_groups[" + std::to_string(g) + "]";
      const PickleValue& group = groups.items()[g];
      const std::vector<Shard>& shards = kinds[present[g]];
      if (const PickleValue* m = group.find("wd_mult"); m && !m->is_none() &&
                                                       (megatron_number(*m, gw + ".wd_mult") == 0.0) != (present[g] == 1))
        throw std::runtime_error(gw + ": wd_mult " + std::to_string(megatron_number(*m, gw)) + ", where this model's " +
                                 (present[g] == 1 ? "no-weight-decay" : "weight-decay") + " shards are expected");
      const PickleValue& indices = megatron_need(group, "params", gw);
      if (indices.kind() != PickleValue::Kind::kList || indices.items().size() != shards.size())
        throw std::runtime_error(gw + " numbers " +
                                 (indices.kind() == PickleValue::Kind::kList ? std::to_string(indices.items().size())
                                                                             : std::string("no list of")) +
                                 " shards; this model has " + std::to_string(shards.size()) + " of that kind on rank " +
                                 std::to_string(d) + ": the state is not this model's");
      const PickleValue* gm = nullptr;
      if (shard_masters && shard_masters->kind() == PickleValue::Kind::kList && g < shard_masters->items().size() &&
          !shard_masters->items()[g].items().empty()) {
        gm = &shard_masters->items()[g];
        if (gm->items().size() != shards.size())
          throw std::runtime_error(where + ".shard_fp32_from_float16_groups[" + std::to_string(g) + "] holds " +
                                   std::to_string(gm->items().size()) + " main parameters for " +
                                   std::to_string(shards.size()) + " shards");
        if (!masters)
          for (size_t i = 0; i < params.size(); ++i) whole[i][0] = owned_tensor(params[i].shape);
        masters = true;
      } else if (masters) {
        throw std::runtime_error(where + ".shard_fp32_from_float16_groups[" + std::to_string(g) +
                                 "] is empty where other groups hold fp32 main parameters");
      }
      for (size_t j = 0; j < shards.size(); ++j) {
        const Shard& s = shards[j];
        const int64_t index = indices.items()[j].as_int();
        const std::string at = gw + " state " + std::to_string(index) + " (" + params[s.param].name + " [" +
                               std::to_string(s.start) + ", " + std::to_string(s.start + s.size) + "))";
        const PickleValue* st = state.find(index);
        if (!st || !st->is_dict()) throw std::runtime_error(at + " is missing: the optimizer has not stepped it");
        const PickleValue* from[3] = {gm ? &gm->items()[j] : nullptr, &megatron_need(*st, "exp_avg", at),
                                      &megatron_need(*st, "exp_avg_sq", at)};
        for (int k = 0; k < 3; ++k) {
          if (!from[k]) continue;
          if (from[k]->kind() != PickleValue::Kind::kTensor || from[k]->tensor().numel() != s.size ||
              from[k]->tensor().shape.size() != 1)
            throw std::runtime_error(at + ": its " + (k == 0 ? "main parameter" : k == 1 ? "exp_avg" : "exp_avg_sq") +
                                     " is not a 1-D tensor of the shard's " + std::to_string(s.size) + " elements");
          const std::vector<float> v = from[k]->tensor().to_float();
          std::copy(v.begin(), v.end(), whole[s.param][k].data->begin() + s.start);
        }
        covered[s.param] += s.size;
        megatron_adam_step(*st, group, at, out.step);
      }
    }
  }
  MegatronDistribState& t = out.tensors;
  t.form = "per-data-parallel-rank optim.pt, " + std::to_string(dp) + " ranks";
  t.master.resize(chunks);
  t.exp_avg.resize(chunks);
  t.exp_avg_sq.resize(chunks);
  std::vector<MegatronFlat>* into[3] = {&t.master, &t.exp_avg, &t.exp_avg_sq};
  for (size_t i = 0; i < params.size(); ++i) {
    if (covered[i] != numel_of(params[i].shape))
      throw std::logic_error("read_dp_rank_optim: the ranks' shards do not cover " + params[i].name);
    for (int k = masters ? 0 : 1; k < 3; ++k) {
      t.views.push_back(whole[i][k].value);  // holds the elements through its storage's owner
      (*into[k])[params[i].chunk].emplace_back(params[i].name, &t.views.back());
    }
  }
  return out;
}

}  // namespace gf
