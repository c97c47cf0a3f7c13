#include "runner/cli/convert_source.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <stdexcept>

#include "models/causal_lm.h"
#include "models/weights/hf_checkpoint.h"

namespace gf {
namespace {

namespace fs = std::filesystem;

using namespace convert_detail;

}  // namespace

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

bool ConvertSource::is_ours(const std::string& from) {
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
  if (from.ends_with(".safetensors") || from.ends_with(".index.json")) return false;
  if (from.ends_with(".ckpt"))
    fail("--from " + from + ": a MindSpore .ckpt, which convert does not read; `load_checkpoint: " + from +
         "` trains from it (MindFormers' GPT-2, docs/weights.md), and a CheckpointMonitor or "
         "`gridformer train --save-weights FILE` writes its weights in our formats");
  fail("--from " + from +
       ": not a .safetensors file, a model.safetensors.index.json, or a directory holding one of our checkpoints "
       "or Hugging Face weights");
}

ConvertSource::ConvertSource(const std::string& from, std::ostream& log) {
  ours_ = is_ours(from);
  if (ours_) open_checkpoint(fs::path(from).filename() == "index.json" ? fs::path(from).parent_path().string() : from);
  else open_hf(from, log);
  if (tensors.empty()) fail(describe() + " holds no weights to convert");
}

std::vector<fs::path> ConvertSource::locations(const std::string& from) const {
  return {fs::weakly_canonical(from), fs::weakly_canonical(path_),
          fs::weakly_canonical(fs::absolute(path_).parent_path())};
}

void ConvertSource::read(const SourceTensor& t, std::vector<float>& out) {
  read_raw(t, out);
  if (after_read) after_read(t, out);
}

void ConvertSource::read_raw(const SourceTensor& t, std::vector<float>& out) {
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

void ConvertSource::release() {
  if (reader_) reader_->release();
}

void ConvertSource::open_checkpoint(const std::string& from) {
  reader_ = ckpt::Reader::open(from);
  path_ = reader_->dir();
  for (const std::string& name : reader_->names()) {
    if (name.starts_with("optimizer.")) skipped[kOptimizerState].push_back(name);
    else tensors.push_back({name, reader_->shape(name), "", ""});
  }
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return natural_less(a.name, b.name); });
}

void ConvertSource::open_hf(const std::string& from, std::ostream& log) {
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
      tensors.push_back({name, h->second.shape, file, t.name, dt});
    }
  }
  drop_tied_head(log);
}

void ConvertSource::drop_tied_head(std::ostream& log) {
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

}  // namespace gf
