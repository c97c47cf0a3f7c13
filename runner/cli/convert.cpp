// `gridformer convert` (runner/cli/convert.h). The Hugging Face side follows what transformers and
// huggingface_hub write and read:
//  * shards: huggingface_hub src/huggingface_hub/serialization/_base.py,
//    split_state_dict_into_shards_factory: tensors in order, a new shard when the next tensor would
//    tip the current one over max_shard_size, a tensor larger than it alone in its own shard; files
//    "model.safetensors" or "model-{i:05d}-of-{n:05d}.safetensors"; the index
//    model.safetensors.index.json {"metadata": {"total_size": bytes}, "weight_map": {name: file}}
//    (transformers' save_pretrained dumps it with indent=2, sort_keys=True); parse_size_to_int's
//    decimal units ("5GB" = 5e9 bytes, the default);
//  * every file's metadata {"format": "pt"}: transformers' load_state_dict refuses a safetensors
//    file whose metadata names another format ("does not contain the valid metadata");
//  * GPT-2: transformers src/transformers/models/gpt2/modeling_gpt2.py, GPT2LMHeadModel holds
//    GPT2Model as `transformer` (base_model_prefix) and ties lm_head.weight to transformer.wte.weight
//    (_tied_weights_keys); save_pretrained drops the tied copy, and attn.bias is a non-persistent
//    buffer (older versions list attn.bias, attn.masked_bias and lm_head.weight in
//    _keys_to_ignore_on_load_missing), so GPT2LMHeadModel.from_pretrained reads a file with
//    `transformer.`-prefixed names, no head and no buffers: what we write. Llama and Mixtral names
//    are Hugging Face's already (models/arch/llama.h); a tied Llama has no lm_head.weight, as
//    save_pretrained writes it.
#include "runner/cli/convert.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/math/gemm_bf16.h"
#include "core/io/safetensors.h"
#include "models/causal_lm.h"
#include "models/weights/hf_checkpoint.h"
#include "runner/report/plan.h"

namespace gf {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Names in the order a reader expects (layer 2 before layer 10): runs of digits compare as numbers.
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      size_t iz = i, jz = j;  // leading zeros do not count
      while (iz + 1 < ie && a[iz] == '0') ++iz;
      while (jz + 1 < je && b[jz] == '0') ++jz;
      if (ie - iz != je - jz) return ie - iz < je - jz;
      if (const int c = a.compare(iz, ie - iz, b, jz, je - jz); c != 0) return c < 0;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  if (a.size() - i != b.size() - j) return a.size() - i < b.size() - j;
  return a < b;
}

// ---- the source: one of our checkpoints, or Hugging Face weights ----

struct SourceTensor {
  std::string name;  // gridformer's name (Hugging Face's without GPT-2's `transformer.`)
  std::vector<int64_t> shape;
  std::string file, stored;  // Hugging Face: the file that holds it and its name there
};

const char* const kOptimizerState = "optimizer state (weights only are converted)";
const char* const kBuffer = "buffers the loader ignores (attention masks, rotary inv_freq)";
const char* const kTiedHead = "tied lm_head.weight (equal to the embedding; the model reads the embedding)";

class Source {
 public:
  // Which kind `from` is. A directory with index.json or `latest` (or a run's checkpoint/latest) is
  // ours even when damaged, so that the Reader says what is wrong with it.
  static bool is_ours(const std::string& from) {
    if (!fs::exists(from)) fail("--from " + from + ": no such file or directory");
    const fs::path p(from);
    if (fs::is_directory(p)) {
      if (fs::exists(p / "index.json") || fs::exists(p / "latest") || fs::exists(p / "checkpoint" / "latest"))
        return true;
      if (fs::exists(p / "model.safetensors") || fs::exists(p / "model.safetensors.index.json")) return false;
      fail("--from " + from +
           ": a directory with neither one of our checkpoints (index.json; `latest` in a run's checkpoint/ "
           "directory or checkpoint/latest in its output_dir) nor Hugging Face weights (model.safetensors or "
           "model.safetensors.index.json)");
    }
    if (p.filename() == "index.json") return true;
    if (ends_with(from, ".safetensors") || ends_with(from, ".index.json")) return false;
    if (ends_with(from, ".ckpt"))
      fail("--from " + from + ": a MindSpore .ckpt, which convert does not read; `load_checkpoint: " + from +
           "` trains from it (MindFormers' GPT-2, docs/weights.md), and a CheckpointMonitor or "
           "`gridformer train --save-weights FILE` writes its weights in our formats");
    fail("--from " + from +
         ": not a .safetensors file, a model.safetensors.index.json, or a directory holding one of our checkpoints "
         "or Hugging Face weights");
  }

  explicit Source(const std::string& from, std::ostream& log) {
    ours_ = is_ours(from);
    if (ours_) open_checkpoint(fs::path(from).filename() == "index.json" ? fs::path(from).parent_path().string() : from);
    else open_hf(from, log);
    if (tensors.empty()) fail(describe() + " holds no weights to convert");
  }

  bool ours() const { return ours_; }
  const std::string& path() const { return path_; }
  std::string describe() const { return (ours_ ? "checkpoint " : "Hugging Face weights ") + path_; }
  // The paths an output must not be: --from, the file or checkpoint read, and its directory (the
  // Hugging Face directory, or the checkpoint root with `latest`).
  std::vector<fs::path> locations(const std::string& from) const {
    return {fs::weakly_canonical(from), fs::weakly_canonical(path_),
            fs::weakly_canonical(fs::absolute(path_).parent_path())};
  }

  std::vector<SourceTensor> tensors;
  std::map<std::string, std::vector<std::string>> skipped;  // reason -> tensors

  void read(const SourceTensor& t, std::vector<float>& out) {
    out.resize(static_cast<size_t>(numel_of(t.shape)));
    if (ours_) {
      std::vector<float> v = reader_->read_full(t.name);
      if (v.size() != out.size())
        fail(path_ + ": tensor '" + t.name + "' read as " + std::to_string(v.size()) + " elements, its shape holds " +
             std::to_string(out.size()));
      out = std::move(v);
      return;
    }
    if (open_ != t.file) {
      file_.reset();  // one file in memory at a time
      file_ = SafeTensorsFile::open(t.file);
      open_ = t.file;
    }
    if (!file_->has(t.stored)) fail(t.file + ": tensor '" + t.stored + "' is in the index but not in this shard");
    if (file_->get(t.stored).shape != t.shape) fail(t.file + ": tensor '" + t.stored + "' changed while being read");
    file_->to_floats(t.stored, out.data(), numel_of(t.shape));
  }
  // Drops what has been read (the checkpoint's shards are read whole and kept until then).
  void release() {
    if (reader_) reader_->release();
  }

 private:
  void open_checkpoint(const std::string& from) {
    reader_ = ckpt::Reader::open(from);
    path_ = reader_->dir();
    for (const std::string& name : reader_->names()) {
      if (starts_with(name, "optimizer.")) skipped[kOptimizerState].push_back(name);
      else tensors.push_back({name, reader_->shape(name), "", ""});
    }
    std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return natural_less(a.name, b.name); });
  }

  void open_hf(const std::string& from, std::ostream& log) {
    path_ = resolve_checkpoint_path(from, "--from");
    const std::vector<HfTensorFile> listed = hf_checkpoint_tensors(path_);
    // Read file by file (in the order the files first appear), each file's tensors in listed order.
    std::vector<std::string> files;
    for (const HfTensorFile& t : listed)
      if (std::find(files.begin(), files.end(), t.file) == files.end()) files.push_back(t.file);
    std::map<std::string, std::string> seen;  // gridformer name -> stored name
    for (const std::string& file : files) {
      std::map<std::string, StHeaderEntry> header;
      for (StHeaderEntry& e : read_safetensors_header(file)) header[e.name] = std::move(e);
      for (const HfTensorFile& t : listed) {
        if (t.file != file) continue;
        const auto h = header.find(t.name);
        if (h == header.end()) fail(file + ": tensor '" + t.name + "' is in the index but not in this shard");
        const std::string& dt = h->second.dtype;
        if (dt != "F32" && dt != "F16" && dt != "BF16" && dt != "F64")
          fail(file + ": tensor '" + t.name + "' has dtype " + dt +
               ", not a floating-point type; convert reads model weights (F32, F16, BF16, F64) only");
        const std::string name = hf_param_name(t.name);
        if (hf_ignored_tensor(name)) {
          skipped[kBuffer].push_back(t.name);
          continue;
        }
        if (const auto s = seen.find(name); s != seen.end())
          fail(file + ": tensors '" + s->second + "' and '" + t.name + "' are both the parameter '" + name +
               "'; keep one of them");
        seen[name] = t.name;
        tensors.push_back({name, h->second.shape, file, t.name});
      }
    }
    drop_tied_head(log);
  }

  // A tied head saved beside its embedding (older transformers, torch.save'd state dicts) carries
  // nothing the embedding does not: dropped when equal bit for bit. An untied head is kept; our
  // GPT-2 has none, so one that differs from wte is worth a warning.
  void drop_tied_head(std::ostream& log) {
    auto find = [&](const std::string& n) {
      return std::find_if(tensors.begin(), tensors.end(), [&](const SourceTensor& t) { return t.name == n; });
    };
    const auto head = find("lm_head.weight");
    if (head == tensors.end()) return;
    const bool gpt2 = find("wte.weight") != tensors.end();
    const auto emb = gpt2 ? find("wte.weight") : find("model.embed_tokens.weight");
    if (emb == tensors.end() || emb->shape != head->shape) return;
    std::vector<float> a, b;
    read(*head, a);
    read(*emb, b);
    if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) {
      skipped[kTiedHead].push_back(head->stored);
      tensors.erase(head);
    } else if (gpt2) {
      log << "warning: " << head->file << ": lm_head.weight differs from wte.weight (an untied head); gridformer's "
          << "GPT-2 ties its head to wte.weight and cannot use it (the Hugging Face loader ignores it, a checkpoint "
          << "holding it is refused as another model's)\n";
    }
  }

  bool ours_ = false;
  std::string path_;
  std::optional<ckpt::Reader> reader_;
  std::string open_;
  std::optional<SafeTensorsFile> file_;
};

// ---- output ----

enum class Target { kHfDir, kHfFile, kCheckpoint };

struct OutDtype {
  StDtype st;
  int64_t size;
  const char* name;
};

OutDtype parse_dtype(const std::string& s) {
  if (s == "float32") return {StDtype::kF32, 4, "float32"};
  if (s == "bfloat16") return {StDtype::kBF16, 2, "bfloat16"};
  if (s == "float16") return {StDtype::kF16, 2, "float16"};
  fail("--dtype " + s + ": expected float32, bfloat16 or float16");
}

// The name Hugging Face's model class gives one of our tensors (see the top of the file).
std::string hf_export_name(const std::string& name, bool gpt2) {
  return gpt2 && name != "lm_head.weight" ? "transformer." + name : name;
}

// A line at each tenth of the bytes read.
class Progress {
 public:
  Progress(std::ostream& out, int64_t total_bytes, size_t total_tensors)
      : out_(out), total_(std::max<int64_t>(total_bytes, 1)), tensors_(total_tensors) {}
  void add(int64_t bytes) {
    done_ += bytes;
    ++count_;
    const int tenth = static_cast<int>(std::min<int64_t>(10, done_ * 10 / total_));
    if (tenth > printed_) {
      printed_ = tenth;
      out_ << "convert: " << tenth * 10 << "% (" << count_ << " of " << tensors_ << " tensors, "
           << human_bytes(static_cast<double>(done_)) << " of " << human_bytes(static_cast<double>(total_)) << ")\n"
           << std::flush;
    }
  }

 private:
  std::ostream& out_;
  int64_t total_, done_ = 0;
  size_t tensors_, count_ = 0;
  int printed_ = 0;
};

// One tensor converted to the output dtype, owning its bytes.
struct Converted {
  std::vector<float> f32;
  std::vector<uint16_t> half;
  const void* data() const { return f32.empty() ? static_cast<const void*>(half.data()) : f32.data(); }
};

Converted convert_to(std::vector<float>&& v, const OutDtype& dt) {
  Converted c;
  if (dt.st == StDtype::kF32) {
    c.f32 = std::move(v);
    return c;
  }
  c.half.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    c.half[i] = dt.st == StDtype::kBF16 ? float_to_bf16(v[i]).bits : std::bit_cast<uint16_t>(static_cast<_Float16>(v[i]));
  return c;
}

// huggingface_hub's split (see the top of the file): the source's tensors, grouped into shards.
std::vector<std::vector<size_t>> plan_shards(const std::vector<int64_t>& bytes, int64_t max_shard) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  int64_t current_size = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] > max_shard) {
      shards.push_back({i});
      continue;
    }
    if (current_size + bytes[i] > max_shard && !current.empty()) {
      shards.push_back(std::move(current));
      current.clear();
      current_size = 0;
    }
    current.push_back(i);
    current_size += bytes[i];
  }
  if (!current.empty()) shards.push_back(std::move(current));
  return shards;
}

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

void write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) fail(tmp + ": cannot open for writing");
    out << text;
    out.flush();
    if (!out) fail(tmp + ": write failed (disk full?)");
  }
  fs::rename(tmp, path);
}

// Writes Hugging Face safetensors: one file at `file`, or into directory `dir` (model.safetensors,
// or shards and their index).
void write_hf(Source& src, const std::string& dir, const std::string& file, int64_t max_shard, const OutDtype& dt,
              bool overwrite, Progress& progress, ConvertSummary& sum) {
  bool gpt2 = false;
  for (const SourceTensor& t : src.tensors) gpt2 = gpt2 || t.name == "wte.weight";
  std::vector<int64_t> bytes;
  for (const SourceTensor& t : src.tensors) bytes.push_back(numel_of(t.shape) * dt.size);
  std::vector<std::vector<size_t>> groups;  // the output files' tensors
  if (file.empty()) {
    groups = plan_shards(bytes, max_shard);
  } else {
    groups.emplace_back();
    for (size_t i = 0; i < src.tensors.size(); ++i) groups[0].push_back(i);
  }
  std::vector<std::string> written;
  const bool created = !dir.empty() && !fs::exists(dir);
  try {
    if (!dir.empty()) fs::create_directories(dir);
    else if (fs::path(file).has_parent_path()) fs::create_directories(fs::path(file).parent_path());
    nlohmann::json weight_map = nlohmann::json::object();
    int64_t total = 0;
    std::vector<float> buf;
    for (size_t s = 0; s < groups.size(); ++s) {
      const std::string base = groups.size() == 1 ? "model.safetensors" : shard_name(s, groups.size());
      const std::string path = file.empty() ? (fs::path(dir) / base).string() : file;
      std::vector<Converted> data;
      data.reserve(groups[s].size());
      std::vector<StWriteTensor> out;
      for (size_t i : groups[s]) {
        const SourceTensor& t = src.tensors[i];
        src.read(t, buf);
        progress.add(static_cast<int64_t>(buf.size() * sizeof(float)));
        data.push_back(convert_to(std::move(buf), dt));
        buf = {};
        const std::string name = hf_export_name(t.name, gpt2);
        out.push_back({name, dt.st, t.shape, data.back().data()});
        weight_map[name] = base;
        total += bytes[i];
      }
      write_safetensors(path, out, {{"format", "pt"}});
      written.push_back(path);
      src.release();  // bounded memory: one output file's tensors (plus the source's shards) at a time
    }
    if (groups.size() > 1) {
      const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
      const std::string path = (fs::path(dir) / "model.safetensors.index.json").string();
      write_text_atomically(path, index.dump(2) + "\n");  // nlohmann::json's objects are sorted by key
      written.push_back(path);
    }
    sum.bytes = total;
  } catch (...) {
    std::error_code ec;
    for (const std::string& w : written) fs::remove(w, ec);
    if (created) fs::remove(dir, ec);  // only if empty
    throw;
  }
  // A previous export's weights that this one does not replace would be read in its place (the
  // loader takes model.safetensors before an index) or beside it.
  if (!dir.empty() && overwrite) {
    static const std::regex kShard(R"(model-\d{5}-of-\d{5}\.safetensors)");
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      const bool weights = n == "model.safetensors" || n == "model.safetensors.index.json" || std::regex_match(n, kShard);
      if (weights && e.is_regular_file() && std::find(written.begin(), written.end(), e.path().string()) == written.end())
        fs::remove(e.path());
    }
  }
  sum.tensors = static_cast<int64_t>(src.tensors.size());
  sum.files = written;
}

// Writes one of our checkpoints: root `dir`, checkpoint `converted` (dir/converted/, dir/latest),
// one shard holding every tensor whole.
void write_checkpoint(Source& src, const std::string& dir, Progress& progress, ConvertSummary& sum) {
  const std::string name = "converted";
  ckpt::install_checkpoint_signal_handling();
  const std::string tmp = ckpt::begin_save(dir, name);
  try {
    std::vector<ckpt::Piece> pieces;
    pieces.reserve(src.tensors.size());
    int64_t total = 0;
    for (const SourceTensor& t : src.tensors) {
      ckpt::Piece p;
      p.tensor = t.name;
      p.shape = t.shape;
      p.box.offset.assign(t.shape.size(), 0);
      p.box.extent = t.shape;
      src.read(t, p.data);
      progress.add(static_cast<int64_t>(p.data.size() * sizeof(float)));
      total += static_cast<int64_t>(p.data.size() * sizeof(float));
      pieces.push_back(std::move(p));
    }
    const std::string fragment = ckpt::write_shard(tmp, 0, pieces);
    pieces.clear();
    // Weights with no training behind them: step 0 (write_index wants an integer step; pruning
    // orders checkpoints by it), and weights_only for the trainer, which loads such a checkpoint
    // as weights and refuses to resume training from it (there are no optimizer moments).
    const nlohmann::json state = {{"step", 0},
                                  {"converted_from", fs::absolute(src.path()).lexically_normal().string()},
                                  {"weights_only", true}};
    ckpt::write_index(tmp, {fragment}, state);
    ckpt::commit_save(dir, name, 0);
    sum.bytes = total;
  } catch (...) {
    ckpt::abort_save(dir, name);
    throw;
  }
  sum.tensors = static_cast<int64_t>(src.tensors.size());
  sum.files = {(fs::path(dir) / name / ckpt::shard_file(0)).string(), (fs::path(dir) / name / "index.json").string()};
}

std::string count_of(size_t n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

}  // namespace

int64_t parse_byte_size(const std::string& text) {
  static const std::regex kSize(R"(\s*([0-9]+(?:\.[0-9]*)?)\s*([KMGT]i?B|B)?\s*)", std::regex::icase);
  std::smatch m;
  if (!std::regex_match(text, m, kSize))
    fail("--max-shard-size " + text + ": expected a size such as 5GB, 500MB, 2GiB or a number of bytes");
  std::string unit = m[2].str();
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  const bool binary = unit.size() == 3;
  const char* const prefixes = "KMGT";
  if (!unit.empty() && unit != "B")
    for (int k = 0; k < 4; ++k)
      if (unit[0] == prefixes[k]) mult = std::pow(binary ? 1024.0 : 1000.0, k + 1);
  const double v = std::stod(m[1].str()) * mult;
  if (v < 1 || v > 9.0e18) fail("--max-shard-size " + text + ": must be at least one byte");
  return static_cast<int64_t>(v);
}

ConvertSummary convert_weights(const ConvertOptions& opt, std::ostream& progress) {
  if (opt.from.empty()) fail("--from: give the checkpoint or Hugging Face weights to convert");
  if (opt.to.empty()) fail("--to: give where to write");
  if (!opt.format.empty() && opt.format != "hf" && opt.format != "checkpoint")
    fail("--format " + opt.format + ": expected hf or checkpoint");
  const OutDtype dt = parse_dtype(opt.dtype);
  const bool to_file = ends_with(opt.to, ".safetensors");
  if (to_file && opt.format == "checkpoint")
    fail("--to " + opt.to + " is a .safetensors file; --format checkpoint writes a directory");
  const int64_t max_shard = opt.max_shard_size.empty() ? 5000000000 : parse_byte_size(opt.max_shard_size);

  Source src(opt.from, progress);
  // By default the other kind than the source; a .safetensors --to is Hugging Face's.
  const std::string format = !opt.format.empty() ? opt.format : to_file || src.ours() ? "hf" : "checkpoint";
  const Target target = format == "checkpoint" ? Target::kCheckpoint : to_file ? Target::kHfFile : Target::kHfDir;
  if (target == Target::kCheckpoint && dt.st != StDtype::kF32)
    fail("--dtype " + opt.dtype + ": our checkpoints hold float32; --dtype applies to Hugging Face output (--format hf)");
  if (target != Target::kHfDir && !opt.max_shard_size.empty())
    fail("--max-shard-size applies to a Hugging Face directory (--format hf, --to DIR); --to " + opt.to +
         (target == Target::kHfFile ? " is one full file" : " is a checkpoint"));

  // Where the output goes must not be where the input is, nor hold anything unless asked.
  const fs::path to_canon = fs::weakly_canonical(opt.to);
  for (const fs::path& p : src.locations(opt.from))
    if (p == to_canon) fail("--to " + opt.to + " is where --from's weights are (" + src.path() + "); write elsewhere");
  if (fs::exists(opt.to)) {
    if (target == Target::kHfFile) {
      if (fs::is_directory(opt.to)) fail("--to " + opt.to + " is a directory; name a .safetensors file");
      if (!opt.overwrite) fail("--to " + opt.to + " exists; give a new file name, or --overwrite to replace it");
    } else {
      if (!fs::is_directory(opt.to)) fail("--to " + opt.to + " is a file; give a directory");
      if (!fs::is_empty(opt.to) && !opt.overwrite)
        fail("--to " + opt.to + " is a directory that is not empty; give a new or empty one, or --overwrite " +
             (target == Target::kHfDir ? "to replace the weights in it (other files, such as config.json, are kept)"
                                       : "to replace its `converted` checkpoint and point `latest` at it"));
    }
  }

  int64_t total = 0;
  for (const SourceTensor& t : src.tensors) total += numel_of(t.shape) * static_cast<int64_t>(sizeof(float));
  Progress bar(progress, total, src.tensors.size());
  ConvertSummary sum;
  sum.source = src.describe();
  if (target == Target::kCheckpoint) {
    write_checkpoint(src, opt.to, bar, sum);
    sum.target = "checkpoint " + (fs::path(opt.to) / "converted").string() + " (float32)";
  } else {
    write_hf(src, target == Target::kHfDir ? opt.to : "", target == Target::kHfFile ? opt.to : "", max_shard, dt,
             opt.overwrite, bar, sum);
    sum.target = std::string("Hugging Face ") + (target == Target::kHfFile ? "file " : "weights ") + opt.to + " (" +
                 dt.name + ")";
  }
  sum.skipped = src.skipped;
  return sum;
}

int run_convert(const ConvertOptions& opt) {
  try {
    const ConvertSummary s = convert_weights(opt, std::cerr);
    std::cout << "converted " << count_of(static_cast<size_t>(s.tensors), "tensor") << " ("
              << human_bytes(static_cast<double>(s.bytes)) << ") from " << s.source << " to " << s.target << ": "
              << count_of(s.files.size(), "file") << "\n";
    for (const std::string& f : s.files) std::cout << "  " << f << "\n";
    for (const auto& [reason, names] : s.skipped)
      std::cout << "skipped " << count_of(names.size(), "tensor") << ": " << reason << "\n";
    return 0;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory: the tensors of one output file (or, to a checkpoint, the whole model in "
                 "float32) must fit in memory; for Hugging Face output lower --max-shard-size\n";
  } catch (const fs::filesystem_error& e) {
    std::cerr << "error: " << e.path1().string() << ": " << e.code().message() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
  }
  return 2;
}

}  // namespace gf
