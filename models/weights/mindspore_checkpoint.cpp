#include "models/weights/mindspore_checkpoint.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <zlib.h>

#include <array>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <set>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

#include "core/io/safetensors.h"
#include "core/io/torch_pickle.h"
#include "models/weights/proto/mindspore_checkpoint.pb.h"

namespace gf {
namespace {

// MindSpore writes numpy's tobytes(), the host's order, and runs on little-endian hosts only.
static_assert(std::endian::native == std::endian::little, "the .ckpt reader assumes a little-endian host");

namespace pb = google::protobuf;

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw std::runtime_error(path + ": " + what); }

// The file's crc_check trailer, as serialization.py's _exec_save writes it: "crc_num" then the
// CRC-32 (zlib's, binascii.crc32) of all bytes before, as a 10-byte big-endian integer.
constexpr int64_t kCrcTrailer = 17;

class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void pread_all(const std::string& path, int fd, void* buf, size_t n, int64_t at) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, at);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) fail(path, "read failed at byte " + std::to_string(at) + (r < 0 ? std::string(": ") + std::strerror(errno) : ""));
    p += r;
    n -= static_cast<size_t>(r);
    at += r;
  }
}

// The length of the protobuf part of the file: all of it, or all but a verified CRC trailer.
int64_t protobuf_bytes(const std::string& path, int fd, int64_t size) {
  if (size < kCrcTrailer) return size;
  unsigned char t[kCrcTrailer];
  pread_all(path, fd, t, sizeof t, size - kCrcTrailer);
  if (std::memcmp(t, "crc_num", 7) != 0) return size;
  if (t[7] != 0 || t[8] != 0 || t[9] != 0 || t[10] != 0 || t[11] != 0 || t[12] != 0)
    fail(path, "the crc_num trailer holds a value over 32 bits: the file is damaged");
  const uint32_t stored = (uint32_t{t[13]} << 24) | (uint32_t{t[14]} << 16) | (uint32_t{t[15]} << 8) | t[16];
  const int64_t body = size - kCrcTrailer;
  std::vector<unsigned char> buf(size_t{4} << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  for (int64_t at = 0; at < body;) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(body - at, static_cast<int64_t>(buf.size())));
    pread_all(path, fd, buf.data(), n, at);
    crc = crc32_z(crc, buf.data(), n);
    at += static_cast<int64_t>(n);
  }
  if (static_cast<uint32_t>(crc) != stored)
    fail(path, "CRC-32 mismatch (the file's crc_num trailer says " + std::to_string(stored) + ", its bytes give " +
                   std::to_string(static_cast<uint32_t>(crc)) + "): the file is damaged; copy or save it again");
  return body;
}

}  // namespace

int64_t MsCkptEntry::numel() const {
  if (dims.empty() || (dims.size() == 1 && dims[0] == 0)) return 1;  // MindSpore's scalar
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

void read_mindspore_checkpoint(const std::string& path, const std::function<void(MsCkptEntry&)>& visit) {
  Fd fd(path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  const int64_t body = protobuf_bytes(path, fd.get(), static_cast<int64_t>(st.st_size));
  if (body == 0) fail(path, "empty file: a MindSpore checkpoint holds at least one tensor");
  if (::lseek(fd.get(), 0, SEEK_SET) != 0) fail(path, "cannot seek to the start");
  pb::io::FileInputStream raw(fd.get());
  pb::io::LimitingInputStream in(&raw, body);

  std::optional<MsCkptEntry> pending;
  std::set<std::string> seen;
  auto flush = [&] {
    if (pending) visit(*pending);
    pending.reset();
  };
  int64_t offset = 0, index = 0;
  while (offset < body) {
    // One CodedInputStream per entry: its byte counters are ints, so one stream over the whole
    // file would stop at 2 GiB; each entry is at most MindSpore's 512 MiB chunk.
    pb::io::CodedInputStream cis(&in);
    const std::string where = "entry " + std::to_string(index) + " at byte " + std::to_string(offset);
    const uint32_t tag = cis.ReadTagNoLastTag();
    if (tag != ((1u << 3) | 2u)) {
      const std::string found = tag == 0 ? "no protobuf field"
                                         : "field " + std::to_string(tag >> 3) + " (wire type " + std::to_string(tag & 7) + ")";
      fail(path, where + ": " + found + " where MindSpore's Checkpoint has only its repeated `value` (field 1): " +
                     "not a MindSpore .ckpt, or an encrypted one (saved with enc_key: load it in MindSpore with " +
                     "dec_key and save it again without)");
    }
    uint32_t len = 0;
    if (!cis.ReadVarint32(&len)) fail(path, where + ": the file ends inside the entry's length: it is truncated; copy it again");
    const int64_t left = body - offset - cis.CurrentPosition();
    if (len > static_cast<uint32_t>(INT_MAX) || static_cast<int64_t>(len) > left)
      fail(path, where + " declares " + std::to_string(len) + " bytes but " + std::to_string(left) +
                     " remain: the file is truncated (or damaged); copy it again");
    gf::mindspore::Checkpoint::Value v;
    const pb::io::CodedInputStream::Limit limit = cis.PushLimit(static_cast<int>(len));
    if (!v.MergePartialFromCodedStream(&cis) || !cis.ConsumedEntireMessage())
      fail(path, where + ": not a valid Checkpoint.Value (" + std::to_string(len) + " bytes): the file is damaged");
    cis.PopLimit(limit);
    if (!v.IsInitialized())
      fail(path, where + (v.has_tag() ? " ('" + v.tag() + "')" : "") + " lacks required fields (" +
                     v.InitializationErrorString() + "): not a checkpoint MindSpore wrote");
    offset += cis.CurrentPosition();
    ++index;

    MsCkptEntry e;
    e.tag = v.tag();
    e.chunks = 1;
    if (v.has_tensor()) {
      const gf::mindspore::TensorProto& t = v.tensor();
      e.type = t.tensor_type();
      e.dims.assign(t.dims().begin(), t.dims().end());
      for (int64_t d : e.dims)
        if (d < 0) fail(path, where + ": tensor '" + e.tag + "' has dims " + shape_str(e.dims) + " (negative)");
      e.content = std::move(*v.mutable_tensor()->mutable_tensor_content());
    } else if (v.has_maptensor()) {
      e.map_tensor = true;
      e.type = "MapTensor";
    } else {
      fail(path, where + ": entry '" + e.tag + "' holds neither a tensor nor a map tensor");
    }
    if (pending && pending->tag == e.tag) {  // the next chunk of a tensor over 512 MiB
      if (pending->map_tensor != e.map_tensor || pending->type != e.type || pending->dims != e.dims)
        fail(path, where + ": chunk " + std::to_string(pending->chunks + 1) + " of tensor '" + e.tag + "' is " + e.type +
                       " " + shape_str(e.dims) + ", its first chunk " + pending->type + " " + shape_str(pending->dims) +
                       ": the file is damaged");
      pending->content += e.content;
      ++pending->chunks;
      continue;
    }
    flush();
    if (!seen.insert(e.tag).second)
      fail(path, where + ": tensor '" + e.tag + "' appears a second time, apart from its first entry: not a file "
                     "save_checkpoint wrote (it writes each tensor's chunks together)");
    pending = std::move(e);
  }
  flush();
}

std::vector<float> mindspore_entry_floats(const MsCkptEntry& e, const std::string& path) {
  int64_t size = 0;
  if (e.type == "Float32") size = 4;
  else if (e.type == "Float16" || e.type == "BFloat16") size = 2;
  else if (e.type == "Float64") size = 8;
  else fail(path, "tensor '" + e.tag + "' is " + e.type + ", not a float type (Float32, Float16, BFloat16, Float64)");
  const int64_t n = e.numel();
  if (static_cast<int64_t>(e.content.size()) != n * size)
    fail(path, "tensor '" + e.tag + "': " + std::to_string(e.content.size()) + " bytes of " + e.type +
                   " do not match dims " + shape_str(e.dims) + " (" + std::to_string(n * size) + " bytes)");
  std::vector<float> out(static_cast<size_t>(n));
  const char* p = e.content.data();
  for (int64_t i = 0; i < n; ++i) {
    if (size == 4) {
      std::memcpy(&out[i], p + 4 * i, 4);
    } else if (size == 8) {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      out[i] = static_cast<float>(d);
    } else {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = e.type == "Float16" ? half_to_float(h) : bf16_to_float(h);
    }
  }
  return out;
}

bool mindspore_non_weight(const std::string& tag) {
  // Optimizer moments, each the parameters cloned under a prefix (mindspore/nn/optim): MindSpore's
  // AdamWeightDecay and MindFormers' AdamW (adam_m, adam_v), MindSpore's Adam / AdaMax (moment1,
  // moment2), Momentum (moments); and the gradient accumulation buffers of MindFormers' train cell
  // (accu_grads).
  static const char* const kPrefixes[] = {"adam_m.", "adam_v.", "moment1.", "moment2.", "moments.", "accu_grads."};
  // The optimizer's step, learning rate, Adam's beta powers and Momentum's momentum; the loss-scale
  // cells' state (scale_sense, current_iterator_step, last_overflow_iterator_step); MindFormers'
  // CheckpointMonitor append_dict (mindformers/core/callback/callback.py: epoch_num, step_num,
  // loss_scale, global_batch_size); save_checkpoint's random_op (the random generators' state).
  static const std::set<std::string> kNames = {
      "global_step",   "learning_rate",         "beta1_power",     "beta2_power",
      "momentum",      "scale_sense",           "current_iterator_step", "last_overflow_iterator_step",
      "epoch_num",     "step_num",              "loss_scale",      "global_batch_size",
      "random_op"};
  for (const char* p : kPrefixes)
    if (tag.rfind(p, 0) == 0) return true;
  return kNames.count(tag) > 0;
}

namespace {

// convert_weight.py's per-layer names (mindformers/models/gpt2/convert_weight.py, ms_name /
// torch_name) that map one to one, MindFormers suffix -> Hugging Face suffix.
const std::map<std::string, std::string>& layer_names() {
  static const std::map<std::string, std::string> m = {
      {"layernorm1.gamma", "ln_1.weight"},
      {"layernorm1.beta", "ln_1.bias"},
      {"layernorm2.gamma", "ln_2.weight"},
      {"layernorm2.beta", "ln_2.bias"},
      {"attention.projection.weight", "attn.c_proj.weight"},
      {"attention.projection.bias", "attn.c_proj.bias"},
      {"output.mapping.weight", "mlp.c_fc.weight"},
      {"output.mapping.bias", "mlp.c_fc.bias"},
      {"output.projection.weight", "mlp.c_proj.weight"},
      {"output.projection.bias", "mlp.c_proj.bias"}};
  return m;
}

// addition_mindspore / addition_torch of the same file.
const std::map<std::string, std::string>& top_names() {
  static const std::map<std::string, std::string> m = {
      {"backbone.layernorm.gamma", "ln_f.weight"},
      {"backbone.layernorm.beta", "ln_f.bias"},
      {"backbone.embedding.word_embedding.embedding_table", "wte.weight"},
      {"backbone.embedding.position_embedding.embedding_table", "wpe.weight"}};
  return m;
}

// "backbone.blocks.<i>.<rest>" -> i and rest.
bool split_layer(const std::string& tag, int64_t* layer, std::string* rest) {
  static const std::string kPrefix = "backbone.blocks.";
  if (tag.rfind(kPrefix, 0) != 0) return false;
  size_t i = kPrefix.size(), j = i;
  while (j < tag.size() && j - i < 9 && tag[j] >= '0' && tag[j] <= '9') ++j;
  if (j == i || j >= tag.size() || tag[j] != '.') return false;
  *layer = std::stoll(tag.substr(i, j - i));
  *rest = tag.substr(j + 1);
  return true;
}

struct QkvPart {
  std::string tag;
  std::vector<int64_t> dims;
  std::vector<float> values;
};

// dense1, dense2, dense3 of one layer: q, k, v.
using QkvParts = std::array<std::optional<QkvPart>, 3>;

std::string qkv_tag(int64_t layer, int part, bool weight) {
  return "backbone.blocks." + std::to_string(layer) + ".attention.dense" + std::to_string(part + 1) +
         (weight ? ".weight" : ".bias");
}

// Hugging Face's fused c_attn from MindFormers' three projections: convert_weight.py splits
// c_attn ([in, 3 out] weight, [3 out] bias) in three along the last dim and transposes each weight
// to nn.Dense's [out, in]; this undoes both (convert_reversed.py: transpose, then cat along -1).
MappedTensor fuse_qkv(const std::string& path, int64_t layer, bool weight, QkvParts& parts) {
  const std::vector<int64_t>& d = parts[0]->dims;
  for (int p = 0; p < 3; ++p) {
    if (parts[p]->dims.size() != (weight ? 2u : 1u))
      fail(path, "tensor '" + parts[p]->tag + "' has dims " + shape_str(parts[p]->dims) + ", expected " +
                     (weight ? "[out, in] (nn.Dense's layout)" : "[out]"));
    if (parts[p]->dims != d)
      fail(path, "tensor '" + parts[p]->tag + "' has dims " + shape_str(parts[p]->dims) + " but '" + parts[0]->tag +
                     "' has " + shape_str(d) + ": q, k and v must have one shape");
  }
  MappedTensor t;
  t.source = "backbone.blocks." + std::to_string(layer) + ".attention.dense1/2/3" + (weight ? ".weight" : ".bias");
  const int64_t out = d[0];
  if (!weight) {
    t.shape = {3 * out};
    t.values.reserve(static_cast<size_t>(3 * out));
    for (int p = 0; p < 3; ++p) t.values.insert(t.values.end(), parts[p]->values.begin(), parts[p]->values.end());
    return t;
  }
  const int64_t in = d[1];
  t.shape = {in, 3 * out};
  t.values.resize(static_cast<size_t>(in * 3 * out));
  for (int p = 0; p < 3; ++p) {
    const float* src = parts[p]->values.data();  // [out, in]
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) t.values[static_cast<size_t>(i * 3 * out + p * out + o)] = src[o * in + i];
  }
  return t;
}

}  // namespace

std::string mindformers_gpt2_name(const std::string& hf) {
  for (const auto& [ms, h] : top_names())
    if (h == hf) return ms;
  if (hf.rfind("h.", 0) == 0) {
    const size_t dot = hf.find('.', 2);
    if (dot != std::string::npos) {
      const std::string layer = hf.substr(2, dot - 2), rest = hf.substr(dot + 1);
      const std::string block = "backbone.blocks." + layer + ".";
      if (rest == "attn.c_attn.weight") return block + "attention.dense1/2/3.weight";
      if (rest == "attn.c_attn.bias") return block + "attention.dense1/2/3.bias";
      for (const auto& [ms, h] : layer_names())
        if (h == rest) return block + ms;
    }
  }
  return "";
}

MindFormersGpt2Weights read_mindformers_gpt2(const std::string& path,
                                             const std::function<bool(const std::string&)>& wanted) {
  MindFormersGpt2Weights w;
  std::map<int64_t, QkvParts> qkv_w, qkv_b;
  auto add = [&](const std::string& hf, MappedTensor t) { w.tensors.emplace(hf, std::move(t)); };
  read_mindspore_checkpoint(path, [&](MsCkptEntry& e) {
    if (mindspore_non_weight(e.tag)) {
      ++w.non_weights;
      return;
    }
    if (e.map_tensor) fail(path, "tensor '" + e.tag + "' is a MapTensor (a hash-table embedding), which GPT-2 has none of");
    int64_t layer = -1;
    std::string rest, hf;
    if (auto top = top_names().find(e.tag); top != top_names().end()) {
      hf = top->second;
    } else if (split_layer(e.tag, &layer, &rest)) {
      const std::string h = "h." + std::to_string(layer) + ".";
      if (rest == "attention.beta" || rest == "attention.masked_beta") {  // Hugging Face's mask buffers
        ++w.mask_buffers;
        return;
      }
      for (int p = 0; p < 3; ++p)
        for (bool weight : {true, false}) {
          if (e.tag != qkv_tag(layer, p, weight)) continue;
          const std::string fused = h + (weight ? "attn.c_attn.weight" : "attn.c_attn.bias");
          if (wanted && !wanted(fused)) {
            ++w.not_wanted;
            return;
          }
          QkvParts& parts = (weight ? qkv_w : qkv_b)[layer];
          parts[p] = QkvPart{e.tag, e.dims, mindspore_entry_floats(e, path)};
          if (parts[0] && parts[1] && parts[2]) {
            add(fused, fuse_qkv(path, layer, weight, parts));
            (weight ? qkv_w : qkv_b).erase(layer);
          }
          return;
        }
      if (auto it = layer_names().find(rest); it != layer_names().end()) hf = h + it->second;
    }
    if (hf.empty())
      fail(path, "tensor '" + e.tag + "' is neither a weight of MindFormers' GPT-2 (the names of "
                 "mindformers/models/gpt2/convert_weight.py: backbone.blocks.{i}.layernorm1.gamma, "
                 "backbone.blocks.{i}.attention.dense1.weight, backbone.embedding.word_embedding.embedding_table, ...) "
                 "nor optimizer state or a training counter; only MindFormers' GPT-2 names are mapped");
    if (wanted && !wanted(hf)) {
      ++w.not_wanted;
      return;
    }
    MappedTensor t;
    t.source = e.tag;
    if (!(e.dims.size() == 1 && e.dims[0] == 0)) t.shape = e.dims;  // [0]: a scalar, shape []
    t.values = mindspore_entry_floats(e, path);
    add(hf, std::move(t));
  });
  for (auto* m : {&qkv_w, &qkv_b})
    for (auto& [layer, parts] : *m) {  // an incomplete q, k, v (a complete one was fused and erased)
      int missing = 0, have = 0;
      while (parts[missing]) ++missing;
      while (!parts[have]) ++have;
      fail(path, "tensor '" + qkv_tag(layer, missing, m == &qkv_w) + "' is missing while '" + parts[have]->tag +
                     "' is there: GPT-2's c_attn needs all three of q, k, v (attention.dense1, dense2, dense3)");
    }
  return w;
}

}  // namespace gf
