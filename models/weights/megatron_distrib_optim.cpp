// distrib_optim.pt, Megatron's distributed optimizer state, cut into each parameter's tensors
// (megatron_distrib_optim.h has the format).
#include "models/weights/megatron_distrib_optim.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "core/io/torch_file.h"

namespace gf {
namespace {

const char* const kKeys[3] = {"param", "exp_avg", "exp_avg_sq"};

// A flat float buffer of the file: a contiguous 1-D tensor of a floating dtype.
const TorchTensor& flat_buffer(const PickleValue& v, const std::string& where) {
  if (v.kind() != PickleValue::Kind::kTensor)
    throw std::runtime_error(where + " holds a " + std::string(v.kind_name()) + ", not a tensor");
  const TorchTensor& t = v.tensor();
  if (t.shape.size() != 1 || !t.is_contiguous())
    throw std::runtime_error(where + " is not a flat (1-D, contiguous) buffer");
  if (t.dtype != TorchDtype::kF32 && t.dtype != TorchDtype::kF16 && t.dtype != TorchDtype::kBF16 &&
      t.dtype != TorchDtype::kF64)
    throw std::runtime_error(where + " is not a floating-point buffer");
  return t;
}

// The elements [offset, offset + numel) of `buf` as a tensor of `shape`.
PickleValue view_of(const TorchTensor& buf, int64_t offset, const std::vector<int64_t>& shape) {
  auto t = std::make_shared<TorchTensor>();
  t->dtype = buf.dtype;
  t->shape = shape;
  t->strides.assign(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) t->strides[d - 1] = t->strides[d] * shape[d];
  t->storage_offset = buf.storage_offset + offset;
  t->storage = buf.storage;
  return PickleValue::of_tensor(std::move(t));
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// core_r0.6.0's per_bucket_numel_unpadded for buffer g: a list (one element a buffer) of {dtype: [numel, ...]}; empty
// when the file has none or it is not of that shape (the bucket's fill is then found from the parameters).
std::vector<int64_t> unpadded_of(const PickleValue& root, size_t g, size_t buckets) {
  const PickleValue* all = root.find("per_bucket_numel_unpadded");
  if (!all || all->kind() != PickleValue::Kind::kList || g >= all->items().size()) return {};
  const PickleValue& d = all->items()[g];
  if (!d.is_dict() || d.entries().size() != 1) return {};
  const PickleValue& list = d.entries()[0].second;
  if (list.kind() != PickleValue::Kind::kList || list.items().size() != buckets) return {};
  std::vector<int64_t> out;
  for (const PickleValue& n : list.items()) {
    if (n.kind() != PickleValue::Kind::kInt) return {};
    out.push_back(n.as_int());
  }
  return out;
}

// core_r0.9 on (ParamAndGradBuffer's _pad_start_of_param_if_needed): with the distributed optimizer each parameter
// starts at a multiple of 64 elements of its bucket (buckets start at multiples of lcm(dp, 128), so of the buffer
// too), and a bucket closes after the parameter that brings it to `bucket_size` elements or more (0: one bucket).
// The coalesced tensor holds each bucket's elements up to its last parameter's end, one bucket after another.
// Each parameter's offset in it, in `numels` order; empty when the layout's total is not `total`.
std::vector<int64_t> aligned_offsets(const std::vector<int64_t>& numels, int64_t bucket_size, int64_t total) {
  std::vector<int64_t> offsets;
  int64_t base = 0, used = 0;
  for (int64_t n : numels) {
    const int64_t start = (used + 63) / 64 * 64;
    offsets.push_back(base + start);
    used = start + n;
    if (bucket_size > 0 && used >= bucket_size) {
      base += used;
      used = 0;
    }
  }
  if (base + used != total) return {};
  return offsets;
}

// The buffers of one DistributedOptimizer's get_parameter_state_dp_zero() (`root`, of the file `path`): each
// parameter's three tensors into `slices` (indexed as `params`), `seen` marked; `form` the buffers' form.
void read_buffers(const PickleValue& root, const std::string& path,
                  const std::vector<std::vector<const MegatronDistribParam*>>& buffers,
                  const std::vector<MegatronDistribParam>& params, std::vector<std::array<PickleValue, 3>>& slices,
                  std::vector<bool>& seen, std::string& form, int64_t bucket_size) {
  if (!root.is_dict()) throw std::runtime_error(path + ": holds a " + std::string(root.kind_name()) + ", not a dict");
  for (size_t g = 0; g < buffers.size(); ++g) {
    const std::string where = path + ": buffer " + std::to_string(g);
    const PickleValue* by_dtype = root.find(static_cast<int64_t>(g));
    if (!by_dtype || !by_dtype->is_dict() || by_dtype->entries().size() != 1)
      throw std::runtime_error(where + " is missing (or is not a dict with one dtype's state): the file holds " +
                               "another model's buffers (this model has " + std::to_string(buffers.size()) + ")");
    const PickleValue& state = by_dtype->entries()[0].second;
    if (!state.is_dict()) throw std::runtime_error(where + ": its state is a " + std::string(state.kind_name()) + ", not a dict");
    const std::vector<const MegatronDistribParam*>& ps = buffers[g];
    for (int k = 0; k < 3; ++k) {
      const std::string at = where + " '" + kKeys[k] + "'";
      const PickleValue* v = state.find(kKeys[k]);
      if (!v || v->is_none()) throw std::runtime_error(at + " is missing");
      // Each bucket: its tensor and where its parameters end (the rest is padding).
      std::vector<const TorchTensor*> tensors;
      std::vector<int64_t> fill;
      if (v->kind() == PickleValue::Kind::kList) {
        form = "per-bucket";
        for (size_t b = 0; b < v->items().size(); ++b)
          tensors.push_back(&flat_buffer(v->items()[b], at + "[" + std::to_string(b) + "]"));
        fill = unpadded_of(root, g, tensors.size());
      } else {
        form = "coalesced";
        tensors.push_back(&flat_buffer(*v, at));
        if (const PickleValue* n = state.find("numel_unpadded"); n && n->kind() == PickleValue::Kind::kInt)
          fill.push_back(n->as_int());
      }
      size_t next = 0;
      for (size_t b = 0; b < tensors.size(); ++b) {
        const int64_t size = tensors[b]->numel();
        if (!fill.empty() && (fill[b] < 0 || fill[b] > size))
          throw std::runtime_error(at + ": bucket " + std::to_string(b) + " says " + std::to_string(fill[b]) +
                                   " elements unpadded of its " + std::to_string(size));
        const int64_t end = fill.empty() ? size : fill[b];
        int64_t used = 0;
        // A bucket takes parameters while they fit (one that crosses its end closes it in Megatron, so none spans two).
        while (next < ps.size() && used + numel_of(ps[next]->shape) <= end) {
          const MegatronDistribParam& p = *ps[next];
          const size_t i = static_cast<size_t>(&p - params.data());
          slices[i][k] = view_of(*tensors[b], used, p.shape);
          seen[i] = true;
          used += numel_of(p.shape);
          ++next;
        }
        // Not contiguous: a coalesced buffer of core_r0.9 on, whose parameters start at multiples of 64 elements
        // (its first model chunk's buffers in buckets of bucket_size; later chunks' in one, as get_model's
        // disable_bucketing has it).
        if (!fill.empty() && used != fill[b] && form == "coalesced" && tensors.size() == 1) {
          std::vector<int64_t> numels;
          for (const MegatronDistribParam* q : ps) numels.push_back(numel_of(q->shape));
          const int64_t chunk_buckets = !ps.empty() && ps[0]->chunk == 0 ? bucket_size : 0;
          // At pp > 1 core gives a tied embedding's head copy, first in this order, a bucket of its own, which
          // shifts where later buckets close: not modelled, so such a buffer in buckets is not read as aligned.
          const bool head_bucket = chunk_buckets > 0 && std::any_of(ps.begin(), ps.end(), [](const auto* q) {
                                     return q->name.ends_with("word_embeddings_for_head.weight") ||
                                            q->name.ends_with("output_layer.weight");
                                   });
          const std::vector<int64_t> at = head_bucket ? std::vector<int64_t>{} : aligned_offsets(numels, chunk_buckets, fill[0]);
          if (!at.empty()) {
            for (size_t j = 0; j < ps.size(); ++j) {
              const size_t i = static_cast<size_t>(ps[j] - params.data());
              slices[i][k] = view_of(*tensors[0], at[j], ps[j]->shape);
              seen[i] = true;
            }
            form = "coalesced, parameter-aligned";
            used = fill[0];
            next = ps.size();
          }
        }
        if (!fill.empty() && used != fill[b])
          throw std::runtime_error(at + (tensors.size() > 1 ? ": bucket " + std::to_string(b) : std::string()) + " holds " +
                                   std::to_string(fill[b]) + " elements, its parameters in Megatron's order fill " +
                                   std::to_string(used) + (next < ps.size() ? " before " + ps[next]->name : std::string()) +
                                   (form == "coalesced"
                                        ? " contiguously (nor as core_r0.9 on aligns them, to 64 elements)"
                                        : std::string()) +
                                   ": not this model's buffer");
      }
      if (next != ps.size())
        throw std::runtime_error(at + ": its " + std::to_string(tensors.size()) + " bucket(s) end before " +
                                 ps[next]->name + " (" + std::to_string(ps.size() - next) + " of its " +
                                 std::to_string(ps.size()) + " parameters left): not this model's buffer");
    }
  }
  if (root.find(static_cast<int64_t>(buffers.size())))
    throw std::runtime_error(path + ": holds more than the " + std::to_string(buffers.size()) +
                             " buffer(s) this model's chunks make: another model's state");
}

}  // namespace

MegatronDistribState read_distrib_optim(const std::string& model_file, const std::vector<MegatronDistribParam>& params,
                                        size_t chunks, int64_t bucket_size) {
  const std::string path = (std::filesystem::path(model_file).parent_path() / "distrib_optim.pt").string();
  if (!std::filesystem::exists(path))
    throw std::runtime_error(model_file + ": saved by Megatron's distributed optimizer (its 'optimizer' holds no "
                             "per-parameter state), and " + path + " is missing: a resume needs the moments it holds; "
                             "--finetune loads the weights alone, from step 1");
  const TorchFile f = TorchFile::open(path);
  const PickleValue& root = f.root();
  MegatronDistribState out;
  out.master.resize(chunks);
  out.exp_avg.resize(chunks);
  out.exp_avg_sq.resize(chunks);

  // Each chunk's buffer of `expert` parameters (or not), in Megatron's order: reverse named_parameters order.
  auto buffer_of = [&](size_t c, bool expert) {
    std::vector<const MegatronDistribParam*> b;
    for (auto it = params.rbegin(); it != params.rend(); ++it)
      if (it->chunk == c && it->expert_buffer == expert) b.push_back(&*it);
    return b;
  };
  // Each parameter's three tensors, in `params` order.
  std::vector<std::array<PickleValue, 3>> slices(params.size());
  std::vector<bool> seen(params.size(), false);

  if (root.kind() != PickleValue::Kind::kList) {  // one DistributedOptimizer: each chunk's buffer, then its experts'
    std::vector<std::vector<const MegatronDistribParam*>> buffers;
    for (size_t c = 0; c < chunks; ++c)
      for (const bool expert : {false, true})
        if (std::vector<const MegatronDistribParam*> b = buffer_of(c, expert); !b.empty() || !expert)
          buffers.push_back(std::move(b));
    read_buffers(root, path, buffers, params, slices, seen, out.form, bucket_size);
  } else {
    // core_r0.6.0's ChainedOptimizer.save_parameter_state: [the dense parameters' state, the experts'], each a
    // DistributedOptimizer's over its own data-parallel group (the experts' the data-modulo-expert-parallel ranks, its
    // buffers padded for them), each saved by that group's rank 0 and None elsewhere. Expert-parallel rank e's experts
    // are in its mp_rank_..._EEE directory; the dense state only in expert rank 0's (_000), where dense data-parallel
    // rank 0 saves.
    std::vector<std::vector<const MegatronDistribParam*>> dense, experts;
    for (size_t c = 0; c < chunks; ++c) {
      dense.push_back(buffer_of(c, false));
      if (std::vector<const MegatronDistribParam*> b = buffer_of(c, true); !b.empty()) experts.push_back(std::move(b));
    }
    const size_t parts = experts.empty() ? 1 : 2;
    if (root.items().size() != parts)
      throw std::runtime_error(path + ": a ChainedOptimizer's list of " + std::to_string(root.items().size()) +
                               " optimizers' states; this model's expert parallelism makes " + std::to_string(parts) +
                               " (the dense parameters', then the experts')");
    if (parts == 2) {
      if (root.items()[1].is_none())
        throw std::runtime_error(path + ": its experts' state is None: saved by a rank that is not the experts' "
                                 "data-parallel rank 0 (not this directory's writer)");
      read_buffers(root.items()[1], path + " [1] (the experts')", experts, params, slices, seen, out.form, bucket_size);
    }
    if (!root.items()[0].is_none()) {
      read_buffers(root.items()[0], path + " [0] (the dense parameters')", dense, params, slices, seen, out.form,
                   bucket_size);
    } else {
      // mp_rank_TT[_PPP]_EEE -> mp_rank_TT[_PPP]_000
      const std::filesystem::path dir = std::filesystem::path(path).parent_path();
      const std::string name = dir.filename().string();
      if (name.size() < 12 || name[name.size() - 4] != '_' || !name.starts_with("mp_rank_"))
        throw std::runtime_error(path + ": its dense parameters' state is None, and its directory is not an "
                                 "expert-parallel shard's mp_rank_TT[_PPP]_EEE, where expert rank 0's would be");
      const std::string expert0 = name.substr(0, name.size() - 3) + "000";
      const std::string other = (dir.parent_path() / expert0 / "distrib_optim.pt").string();
      if (!std::filesystem::exists(other))
        throw std::runtime_error(path + ": its dense parameters' state is None (saved by dense data-parallel rank 0, "
                                 "in expert rank 0's directory), and " + other + " is missing");
      const TorchFile g = TorchFile::open(other);
      const PickleValue& r0 = g.root();
      if (r0.kind() != PickleValue::Kind::kList || r0.items().size() != parts || r0.items()[0].is_none())
        throw std::runtime_error(other + ": not a ChainedOptimizer's [dense, experts] states with the dense one saved, "
                                 "which " + path + " needs");
      read_buffers(r0.items()[0], other + " [0] (the dense parameters')", dense, params, slices, seen, out.form,
                   bucket_size);
    }
    out.form = "chained " + out.form;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!seen[i]) throw std::logic_error("read_distrib_optim: a parameter in no buffer");
    std::vector<MegatronFlat>* into[3] = {&out.master, &out.exp_avg, &out.exp_avg_sq};
    for (int k = 0; k < 3; ++k) {
      out.views.push_back(slices[i][k]);  // a deque: earlier elements stay where they are
      (*into[k])[params[i].chunk].emplace_back(params[i].name, &out.views.back());
    }
  }
  return out;
}

}  // namespace gf
