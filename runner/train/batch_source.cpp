#include "runner/train/batch_source.h"

#include <filesystem>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include "core/data/gpt_dataset.h"
#include "core/math/rng.h"

namespace gf {
static_assert(data::kLossMaskedBit == kNotTrainedBit, "the data's loss-mask bit is the one the model reads");
namespace {

// Synthetic tokens, uniform over the vocabulary: a pure function of (seed, sample, position), for
// benchmarks and tests that need no data on disk. With `count` > 0 there are that many distinct
// samples, cycled epoch after epoch (something a model can learn by heart).
class RandomTokens : public BatchSource {
 public:
  RandomTokens(uint64_t seed, int64_t vocab, int64_t seq, int64_t count)
      : seed_(seed), vocab_(vocab), seq_(seq), count_(count) {}
  int64_t samples_per_epoch() const override { return count_ > 0 ? count_ : -1; }
  void read(int64_t first, int64_t count, int32_t* out) const override {
    const int64_t n = seq_ + 1;
    for (int64_t s = 0; s < count; ++s) {
      const int64_t id = count_ > 0 ? (first + s) % count_ : first + s;
      for (int64_t t = 0; t < n; ++t)
        out[s * n + t] = static_cast<int32_t>(
            counter_bits(seed_, static_cast<uint64_t>(id), static_cast<uint64_t>(t)) % static_cast<uint64_t>(vocab_));
    }
  }
  std::string describe() const override {
    return "RandomTokens (uniform random ids, seed " + std::to_string(seed_) +
           (count_ > 0 ? ", " + std::to_string(count_) + " distinct samples" : std::string()) + ")";
  }

 private:
  uint64_t seed_;
  int64_t vocab_, seq_, count_;
};

class MegatronSource : public BatchSource {
 public:
  MegatronSource(std::unique_ptr<data::SampleSource> src, int64_t epoch, int64_t seq, std::string desc)
      : src_(std::move(src)), epoch_(epoch), seq_(seq), desc_(std::move(desc)) {}
  int64_t samples_per_epoch() const override { return epoch_; }
  void read(int64_t first, int64_t count, int32_t* out) const override {
    for (int64_t s = 0; s < count; ++s) src_->get(first + s, out + s * (seq_ + 1));
  }
  std::string describe() const override { return desc_; }
  bool has_loss_mask() const override { return src_->has_loss_mask(); }

 private:
  std::unique_ptr<data::SampleSource> src_;
  int64_t epoch_, seq_;
  std::string desc_;
};

// A blend of several prefixes (data_path [w1, p1, w2, p2, ...]) has no epoch: Megatron's BlendedDataset is built
// for the samples the run reads (train_iters x global batch). Asked for one epoch's size, this stands for it:
// unbounded (runner_config.train_steps sizes the run), and the Trainer builds the blend for the run's samples.
class BlendForTheRun : public BatchSource {
 public:
  explicit BlendForTheRun(std::string desc) : desc_(std::move(desc)) {}
  int64_t samples_per_epoch() const override { return -1; }
  void read(int64_t, int64_t, int32_t*) const override {
    throw std::logic_error("a blended data_path read before it was built for the run's samples");
  }
  std::string describe() const override { return desc_; }

 private:
  std::string desc_;
};

// "" when PREFIX.idx and PREFIX.bin exist; else what is missing, where a relative prefix was looked for,
// and what would make it: the prefix preprocess_data wrote (it appends `_text_document` to --output-prefix),
// scripts/setup.sh for the default corpus, preprocess_data for one's own text.
std::string missing_prefix(const std::string& prefix) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool idx = fs::exists(prefix + ".idx", ec), bin = fs::exists(prefix + ".bin", ec);
  if (idx && bin) return "";
  std::string msg = "no " + prefix + (idx ? ".bin" : bin ? ".idx" : ".idx and no " + prefix + ".bin");
  if (fs::path(prefix).is_relative()) msg += " (a relative path: looked for from the working directory " + fs::current_path(ec).string() + ")";
  if (fs::exists(prefix + "_text_document.idx", ec))
    msg += "; there is " + prefix + "_text_document.idx: preprocess_data appends _text_document (its --json-keys) to "
           "--output-prefix, so the data_path is " + prefix + "_text_document";
  else if (fs::path(prefix).filename() == "fortunes_text_document")
    msg += "; the default corpus is made by scripts/setup.sh (run from the source directory, or give the absolute path)";
  else
    msg += "; build/bin/preprocess_data writes <output-prefix>_text_document.{bin,idx} from your text (docs/data.md)";
  return msg;
}

}  // namespace

std::unique_ptr<BatchSource> make_batch_source(const DatasetConfig& data, const ModelConfig& model,
                                               int64_t num_samples, int split_index,
                                               const std::string& what) {
  const std::string key = what + ".data_loader";
  if (data.loader_type == "RandomTokens")
    return std::make_unique<RandomTokens>(data.seed, model.vocab_size, model.seq_length, data.num_samples);
  if (data.loader_type != "MegatronDataset") {
    const std::string& t = data.loader_type;
    const auto ends_with = [&t](std::string_view s) { return t.size() >= s.size() && t.compare(t.size() - s.size(), s.size(), s) == 0; };
    throw std::runtime_error(
        "`" + key + ".type: " + t + "` is " +
        (ends_with("Dataset") || ends_with("DataLoader") ? "a MindSpore/MindFormers loader that gridformer does not read"
                                                         : "not a data loader gridformer knows (MegatronDataset, RandomTokens)") +
        ". Convert the text with build/bin/preprocess_data (Megatron .bin/.idx) and use `type: MegatronDataset` "
        "with `data_path: <prefix>` (or `type: RandomTokens` for synthetic data); see docs/data.md");
  }
  if (data.data_path.empty())
    throw std::runtime_error("`" + key + ".data_path` is empty: give the prefix of a .bin/.idx pair "
                             "(e.g. ./data/fortunes/fortunes_text_document) or [weight, prefix, ...]");
  for (const auto& [weight, prefix] : data.data_path)
    if (const std::string missing = missing_prefix(prefix); !missing.empty())
      throw std::runtime_error("`" + key + ".data_path`: " + missing);
  if (data.data_path.size() > 1 && num_samples <= 0)
    return std::make_unique<BlendForTheRun>("MegatronDataset blend of " + std::to_string(data.data_path.size()) +
                                            " prefixes (sized by train_steps)");
  data::GPTDatasetConfig g;
  g.data_path = data.data_path;
  g.split = data.split;
  g.split_index = split_index;
  g.shuffle = data.shuffle;
  g.seed = data.seed;
  g.seq_length = model.seq_length;
  g.vocab_size = model.vocab_size;
  const bool blend = data.data_path.size() > 1;
  g.num_samples = blend ? num_samples : 0;  // a blend is built for the samples asked; one prefix for one epoch first
  std::unique_ptr<data::SampleSource> src;
  int64_t epoch = 0;
  try {
    src = data::build_gpt_dataset(g);  // one prefix: one epoch, which tells its size
    epoch = src->size();
    if (num_samples > epoch) {
      g.num_samples = num_samples;
      src = data::build_gpt_dataset(g);
    }
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("`" + key + ".data_path`: " + e.what());
  }
  std::string desc = "MegatronDataset " + data.data_path.front().second +
                     (blend ? " and " + std::to_string(data.data_path.size() - 1) + " more, blended by weight" : "") +
                     ", split " + data.split + " part " + std::to_string(split_index) + ", " + std::to_string(epoch) +
                     (blend ? " samples (built for the run)" : " samples per epoch") +
                     (src->has_loss_mask() ? ", with a loss mask (only its targets marked 1 are trained)" : "");
  return std::make_unique<MegatronSource>(std::move(src), epoch, model.seq_length, desc);
}

std::string data_problem(const Config& cfg) {
  if (cfg.run_mode == RunMode::kPredict) return "";
  try {
    make_batch_source(cfg.train_data, cfg.model, 0, 0, "train_dataset");
    if ((cfg.do_eval || cfg.run_mode == RunMode::kEval) && !cfg.eval_data.data_path.empty())
      make_batch_source(cfg.eval_data, cfg.model, 0, 1, "eval_dataset");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace gf
