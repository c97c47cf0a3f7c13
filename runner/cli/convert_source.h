// `gridformer convert`'s source (runner/cli/convert.cpp): one of our checkpoints or Hugging Face
// weights, listed as gridformer's tensor names and read one tensor at a time as float32.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <ostream>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "core/io/safetensors.h"

namespace gf {

namespace convert_detail {  // convert's small helpers, shared by convert.cpp and convert_source.cpp
[[noreturn]] inline void fail(const std::string& what) { throw std::runtime_error(what); }
inline int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
// Why convert_weights skips a tensor of the source (ConvertSource::skipped's keys).
inline const char* const kOptimizerState = "optimizer state (weights only are converted)";
inline const char* const kBuffer = "buffers the loader ignores (attention masks, rotary inv_freq)";
inline const char* const kTiedHead = "tied lm_head.weight (equal to the embedding; the model reads the embedding)";
}  // namespace convert_detail

struct SourceTensor {
  std::string name;  // gridformer's name (Hugging Face's without GPT-2's `transformer.`)
  std::vector<int64_t> shape;
  std::string file, stored;  // Hugging Face: the file that holds it and its name there
  std::string dtype = "F32"; // as stored (Hugging Face: F32, F16, BF16, F64; ours: F32)
};

// Names in the order a reader expects (layer 2 before layer 10): runs of digits compare as numbers.
bool natural_less(const std::string& a, const std::string& b);

class ConvertSource {
 public:
  // Which kind `from` is. A directory with index.json or `latest` (or a run's checkpoint/latest) is
  // ours even when damaged, so that the Reader says what is wrong with it.
  static bool is_ours(const std::string& from);

  explicit ConvertSource(const std::string& from, std::ostream& log);

  bool ours() const { return ours_; }
  const std::string& path() const { return path_; }
  std::string describe() const { return (ours_ ? "checkpoint " : "Hugging Face weights ") + path_; }
  // The paths an output must not be: --from, the file or checkpoint read, and its directory (the
  // Hugging Face directory, or the checkpoint root with `latest`).
  std::vector<std::filesystem::path> locations(const std::string& from) const;

  std::vector<SourceTensor> tensors;
  std::map<std::string, std::vector<std::string>> skipped;  // reason -> tensors

  void read(const SourceTensor& t, std::vector<float>& out);
  // Called on every tensor read (its values in float32) before the caller sees it: --merge-lora's merge.
  std::function<void(const SourceTensor&, std::vector<float>&)> after_read;
  // Drops what has been read (the checkpoint's shards are read whole and kept until then).
  void release();
  // One of our checkpoints: its saved state (step, config, ...); nullptr for Hugging Face weights.
  const nlohmann::json* checkpoint_state() const { return reader_ ? &reader_->state() : nullptr; }

 private:
  void open_checkpoint(const std::string& from);
  void read_raw(const SourceTensor& t, std::vector<float>& out);

  void open_hf(const std::string& from, std::ostream& log);

  // A tied head saved beside its embedding (older transformers, torch.save'd state dicts) carries
  // nothing the embedding does not: dropped when equal bit for bit. An untied head is kept; our
  // GPT-2 has none, so one that differs from wte is worth a warning.
  void drop_tied_head(std::ostream& log);

  bool ours_ = false;
  std::string path_;
  std::optional<ckpt::Reader> reader_;
  std::string open_;
  std::optional<SafeTensorsFile> file_;
};

}  // namespace gf
