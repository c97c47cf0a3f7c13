// GPT pre-training samples over Megatron indexed datasets, following Megatron-LM's GPTDataset
// (megatron/core/datasets/gpt_dataset.py, helpers.cpp) and BlendedDataset. See docs/data.md.
//
// A sample is seq_length + 1 consecutive tokens of the split's documents, cut across document
// boundaries; sample j+1 starts at the last token of sample j. Three index arrays describe it:
//   document index  the split's documents repeated once per epoch (shuffled when shuffle = true)
//   sample index    (position in document index, token offset) where each sample starts
//   shuffle index   a permutation of the samples (identity when shuffle = false)
// They are cached as .npy files in a cache directory, keyed by a hash of what they depend on.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/data/indexed_dataset.h"

namespace gf::data {

struct GPTDatasetConfig {
  std::vector<std::pair<double, std::string>> data_path;  // weight, prefix (without .bin/.idx)
  std::string split = "949,50,1";
  int split_index = 0;      // 0 train, 1 valid, 2 test
  bool shuffle = true;
  uint64_t seed = 1234;
  int64_t seq_length = 0;   // a sample has seq_length + 1 tokens
  int64_t num_samples = 0;  // samples needed (epochs added as needed); <= 0 means one epoch
  int64_t vocab_size = 0;   // token ids must be < this; 0 = no check
  std::string cache_dir;    // "" = <directory of the first data file>/index_cache
};

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t size() const = 0;                        // >= num_samples
  virtual void get(int64_t index, int32_t* out) const = 0;  // writes seq_length + 1 tokens
  // True when get() marks tokens whose loss mask is 0 with kNotTrainedBit (a loss-mask companion).
  virtual bool has_loss_mask() const { return false; }
};

// Fine-tuning data: beside {prefix}.bin/.idx, a loss mask {prefix}_loss_mask.bin/.idx (Megatron's
// layout, uint8, the same sequence lengths) holds 1 for a token that is trained as a target and 0 for
// one that is not (a prompt's tokens). preprocess_data --sft writes both.
std::string loss_mask_prefix(const std::string& prefix);
// A token id with this bit set is not a target (models/model_config.h kNotTrainedBit, the same bit).
inline constexpr int32_t kLossMaskedBit = 1 << 30;

std::unique_ptr<SampleSource> build_gpt_dataset(const GPTDatasetConfig& config);

// Sample indices that data-parallel rank `dp_rank` of `dp_size` reads for global batch `step`
// when each rank takes `micro_batch` samples: [step*G + dp_rank*micro_batch, +micro_batch),
// G = micro_batch * dp_size.
std::vector<int64_t> rank_batch_samples(int64_t step, int dp_rank, int dp_size, int micro_batch);

// ---- Building blocks, exposed for tests --------------------------------------------------------

// The random generator behind every shuffle: std::mt19937_64 seeded with the config seed, with a
// Fisher-Yates shuffle drawing j uniformly in [0, i] by rejection sampling (portable across
// standard libraries, unlike std::shuffle). Megatron's numpy RandomState stream is not reproduced.
class ShuffleRng {
 public:
  explicit ShuffleRng(uint64_t seed) : engine_(seed) {}
  uint64_t uniform(uint64_t bound);  // uniform in [0, bound), bound > 0
  template <typename T>
  void shuffle(std::span<T> values) {
    for (size_t i = values.size(); i > 1; --i) std::swap(values[i - 1], values[uniform(i)]);
  }

 private:
  std::mt19937_64 engine_;
};

// Megatron's get_train_valid_test_split_: document boundaries {0, a, b, n} of the three splits
// for weights like "949,50,1" (or "94.9/5/0.1"); missing weights are 0.
std::array<int64_t, 4> split_document_ranges(const std::string& split, int64_t num_documents);

// Megatron's _build_document_index: `documents` repeated num_epochs times, shuffled; with
// separate_final_epoch the last epoch is shuffled on its own after the others.
std::vector<int32_t> build_document_index(std::span<const int32_t> documents, int64_t num_epochs,
                                          ShuffleRng* rng, bool separate_final_epoch);

// Megatron's build_sample_idx (add_extra_token_to_sequence = 1, drop_last_partial_sequence =
// true): rows (document-index position, offset) flattened, (num_epochs*tokens_per_epoch-1) /
// seq_length + 1 rows.
std::vector<int64_t> build_sample_index(std::span<const int32_t> sequence_lengths,
                                        std::span<const int32_t> document_index, int64_t seq_length,
                                        int64_t num_epochs, int64_t tokens_per_epoch);

// Megatron's _build_shuffle_index: [0, num_samples) shuffled, then [num_samples, total) shuffled.
std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size, ShuffleRng* rng);

// Megatron's build_blending_indices: for each of `size` samples pick the dataset whose share is
// furthest below its weight (ties to the lower index) and take its next sample.
void build_blending_indices(std::span<const double> weights, int64_t size, std::vector<int16_t>* dataset_index,
                            std::vector<int64_t>* dataset_sample_index);

// One split of one indexed dataset.
class GPTDataset : public SampleSource {
 public:
  // `prefix_config` uses data_path[0] only; the cache directory must already be resolved
  // (empty = no cache).
  GPTDataset(std::shared_ptr<const IndexedDataset> data, const GPTDatasetConfig& prefix_config);

  int64_t size() const override { return static_cast<int64_t>(shuffle_index_.size()); }
  void get(int64_t index, int32_t* out) const override;
  bool has_loss_mask() const override { return mask_ != nullptr; }
  // Reads the loss mask `mask` (loss_mask_prefix) along with the tokens; its sequence lengths must be
  // the data's. Throws std::runtime_error naming both files otherwise.
  void set_loss_mask(std::shared_ptr<const IndexedDataset> mask);

  int64_t seq_length() const { return seq_length_; }
  int64_t num_epochs() const { return num_epochs_; }
  bool loaded_from_cache() const { return loaded_from_cache_; }
  const std::string& cache_stem() const { return cache_stem_; }  // "" when not cached
  std::span<const int32_t> document_index() const { return document_index_; }
  std::span<const int64_t> sample_index() const { return sample_index_; }
  std::span<const int64_t> shuffle_index() const { return shuffle_index_; }

 private:
  std::string description(const GPTDatasetConfig& config, int64_t first_doc, int64_t last_doc) const;
  void build_indices(const GPTDatasetConfig& config, std::span<const int32_t> documents);
  bool load_cache(const std::string& expected_description);
  void save_cache(const std::string& description) const;
  bool indices_valid() const;

  std::shared_ptr<const IndexedDataset> data_;
  std::shared_ptr<const IndexedDataset> mask_;
  int64_t seq_length_ = 0;
  int64_t split_documents_ = 0;
  int64_t num_epochs_ = 0;
  std::vector<int32_t> document_index_;
  std::vector<int64_t> sample_index_;   // 2 * (samples + 1)
  std::vector<int64_t> shuffle_index_;
  std::string cache_stem_;
  bool loaded_from_cache_ = false;
};

// Weighted mix of datasets, sample i taken from dataset dataset_index[i] (Megatron's
// BlendedDataset). Its size is exactly the requested number of samples.
class BlendedDataset : public SampleSource {
 public:
  // `weights` are normalised here; datasets[d] must have at least as many samples as blending
  // assigns to it (build_gpt_dataset sizes them so).
  BlendedDataset(std::vector<std::unique_ptr<SampleSource>> datasets, std::vector<double> weights, int64_t size);
  int64_t size() const override { return static_cast<int64_t>(dataset_index_.size()); }
  void get(int64_t index, int32_t* out) const override;
  bool has_loss_mask() const override;
  std::span<const int16_t> dataset_index() const { return dataset_index_; }

 private:
  std::vector<std::unique_ptr<SampleSource>> datasets_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

}  // namespace gf::data
