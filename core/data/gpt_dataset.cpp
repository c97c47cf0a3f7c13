#include "core/data/gpt_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace gf::data {

namespace fs = std::filesystem;

namespace {

const char* const kSplitNames[3] = {"train", "valid", "test"};

// ---- .npy files (format version 1.0, little endian, C order) -----------------------------------

template <typename T>
const char* npy_descr();
template <>
const char* npy_descr<int32_t>() { return "<i4"; }
template <>
const char* npy_descr<int64_t>() { return "<i8"; }

std::string npy_header(const char* descr, const std::string& shape) {
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t unpadded = 10 + dict.size() + 1;  // magic+version+len, dict, '\n'
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

std::string npy_shape(int64_t rows, int cols) {
  std::ostringstream os;
  os << '(' << rows << (cols == 1 ? "," : ", " + std::to_string(cols)) << ')';
  return os.str();
}

// Writes to a temporary file in the same directory and renames it into place.
void write_atomically(const fs::path& path, const std::string& head, const void* data, size_t bytes) {
  static std::atomic<int> counter{0};
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(head.data(), static_cast<std::streamsize>(head.size()));
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    if (!out.good()) throw std::runtime_error(tmp.string() + ": write failed");
  }
  fs::rename(tmp, path);
}

template <typename T>
void save_npy(const fs::path& path, const std::vector<T>& values, int cols) {
  const int64_t rows = static_cast<int64_t>(values.size()) / cols;
  write_atomically(path, npy_header(npy_descr<T>(), npy_shape(rows, cols)), values.data(), values.size() * sizeof(T));
}

// Reads an array written by save_npy; returns false if the file is missing or not exactly that.
template <typename T>
bool load_npy(const fs::path& path, int cols, std::vector<T>* values) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) != 0) return false;
  const size_t header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8);
  if (bytes.size() < 10 + header_len) return false;
  const size_t payload = bytes.size() - 10 - header_len;
  if (payload % (sizeof(T) * cols) != 0) return false;
  const int64_t rows = static_cast<int64_t>(payload / (sizeof(T) * cols));
  if (bytes.compare(0, 10 + header_len, npy_header(npy_descr<T>(), npy_shape(rows, cols))) != 0) return false;
  values->resize(payload / sizeof(T));
  std::memcpy(values->data(), bytes.data() + 10 + header_len, payload);
  return true;
}

uint64_t fnv1a64(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<double> parse_split_weights(const std::string& split) {
  const char sep = split.find(',') != std::string::npos ? ',' : (split.find('/') != std::string::npos ? '/' : ',');
  std::vector<double> weights;
  std::stringstream ss(split);
  std::string item;
  while (std::getline(ss, item, sep)) {
    size_t used = 0;
    double w = 0;
    try {
      w = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    while (used < item.size() && std::isspace(static_cast<unsigned char>(item[used]))) ++used;
    if (used == 0 || used != item.size() || !(w >= 0) || !std::isfinite(w))
      throw std::invalid_argument("split \"" + split + "\": \"" + item + "\" is not a non-negative number");
    weights.push_back(w);
  }
  weights.resize(3, 0.0);  // Megatron pads to three and ignores the rest
  return weights;
}

}  // namespace

// ---- Building blocks ---------------------------------------------------------------------------

uint64_t ShuffleRng::uniform(uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound: reject below it
  for (;;) {
    const uint64_t r = engine_();
    if (r >= threshold) return r % bound;
  }
}

std::array<int64_t, 4> split_document_ranges(const std::string& split, int64_t num_documents) {
  std::vector<double> w = parse_split_weights(split);
  const double sum = w[0] + w[1] + w[2];
  if (!(sum > 0)) throw std::invalid_argument("split \"" + split + "\": weights sum to 0");
  std::array<int64_t, 4> idx{0, 0, 0, 0};
  for (int i = 0; i < 3; ++i)  // Python's round() rounds half to even, as nearbyint does
    idx[i + 1] = idx[i] + static_cast<int64_t>(std::nearbyint(w[i] / sum * static_cast<double>(num_documents)));
  const int64_t diff = idx[3] - num_documents;
  for (int i = 1; i < 4; ++i) idx[i] -= diff;
  return idx;
}

std::vector<int32_t> build_document_index(std::span<const int32_t> documents, int64_t num_epochs, ShuffleRng* rng,
                                          bool separate_final_epoch) {
  if (separate_final_epoch && num_epochs > 1) {
    std::vector<int32_t> first = build_document_index(documents, num_epochs - 1, rng, false);
    std::vector<int32_t> last = build_document_index(documents, 1, rng, false);
    first.insert(first.end(), last.begin(), last.end());
    return first;
  }
  std::vector<int32_t> index;
  index.reserve(documents.size() * static_cast<size_t>(num_epochs));
  for (int64_t e = 0; e < num_epochs; ++e) index.insert(index.end(), documents.begin(), documents.end());
  rng->shuffle(std::span<int32_t>(index));
  return index;
}

std::vector<int64_t> build_sample_index(std::span<const int32_t> sequence_lengths,
                                        std::span<const int32_t> document_index, int64_t seq_length,
                                        int64_t num_epochs, int64_t tokens_per_epoch) {
  const int64_t num_samples = (num_epochs * tokens_per_epoch - 1) / seq_length;
  std::vector<int64_t> index(2 * static_cast<size_t>(num_samples + 1));
  int64_t position = 0, offset = 0;
  for (int64_t s = 1; s <= num_samples; ++s) {
    int64_t remaining = seq_length + 1;
    for (;;) {
      const int64_t doc_length = sequence_lengths[document_index[position]] - offset;
      remaining -= doc_length;
      if (remaining <= 0) {  // the sample ends inside this document; the next one re-uses its last token
        offset += remaining + doc_length - 1;
        break;
      }
      if (++position >= static_cast<int64_t>(document_index.size()))
        throw std::logic_error("build_sample_index: ran out of documents at sample " + std::to_string(s));
      offset = 0;
    }
    index[2 * s] = position;
    index[2 * s + 1] = offset;
  }
  return index;
}

std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size, ShuffleRng* rng) {
  std::vector<int64_t> index(static_cast<size_t>(total_size));
  std::iota(index.begin(), index.end(), int64_t{0});
  rng->shuffle(std::span<int64_t>(index.data(), static_cast<size_t>(num_samples)));
  if (num_samples < total_size)
    rng->shuffle(std::span<int64_t>(index.data() + num_samples, static_cast<size_t>(total_size - num_samples)));
  return index;
}

void build_blending_indices(std::span<const double> weights, int64_t size, std::vector<int16_t>* dataset_index,
                            std::vector<int64_t>* dataset_sample_index) {
  dataset_index->assign(static_cast<size_t>(size), 0);
  dataset_sample_index->assign(static_cast<size_t>(size), 0);
  std::vector<int64_t> taken(weights.size(), 0);
  for (int64_t i = 0; i < size; ++i) {
    const double position = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double best_error = weights[0] * position - static_cast<double>(taken[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      const double error = weights[d] * position - static_cast<double>(taken[d]);
      if (error > best_error) best_error = error, best = d;
    }
    (*dataset_index)[i] = static_cast<int16_t>(best);
    (*dataset_sample_index)[i] = taken[best]++;
  }
}

std::vector<int64_t> rank_batch_samples(int64_t step, int dp_rank, int dp_size, int micro_batch) {
  if (step < 0 || dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size || micro_batch < 1)
    throw std::invalid_argument("rank_batch_samples: bad step/rank/size/micro batch");
  const int64_t global = static_cast<int64_t>(micro_batch) * dp_size;
  std::vector<int64_t> out(static_cast<size_t>(micro_batch));
  std::iota(out.begin(), out.end(), step * global + static_cast<int64_t>(dp_rank) * micro_batch);
  return out;
}

// ---- GPTDataset ------------------------------------------------------------------------------

GPTDataset::GPTDataset(std::shared_ptr<const IndexedDataset> data, const GPTDatasetConfig& config)
    : data_(std::move(data)), seq_length_(config.seq_length) {
  if (seq_length_ < 1) throw std::invalid_argument("GPTDataset: seq_length must be >= 1");
  if (config.split_index < 0 || config.split_index > 2) throw std::invalid_argument("GPTDataset: split_index must be 0, 1 or 2");
  const auto ranges = split_document_ranges(config.split, data_->num_sequences());
  const int64_t first = ranges[config.split_index], last = ranges[config.split_index + 1];
  split_documents_ = std::max<int64_t>(0, last - first);
  const std::string desc = description(config, first, last);
  if (!config.cache_dir.empty()) {
    const std::string base = fs::path(data_->prefix()).filename().string();
    cache_stem_ = (fs::path(config.cache_dir) / (hex16(fnv1a64(desc)) + "_" + base + "_" +
                                                 kSplitNames[config.split_index])).string();
    if (load_cache(desc)) return;
  }
  std::vector<int32_t> documents(static_cast<size_t>(split_documents_));
  std::iota(documents.begin(), documents.end(), static_cast<int32_t>(first));
  build_indices(config, documents);
  if (!cache_stem_.empty()) save_cache(desc);
}

std::string GPTDataset::description(const GPTDatasetConfig& config, int64_t first_doc, int64_t last_doc) const {
  std::error_code ec;
  const auto idx_bytes = fs::file_size(data_->prefix() + ".idx", ec);
  std::ostringstream os;
  os << "gridformer GPTDataset indices v1\n"
     << "prefix: " << fs::weakly_canonical(fs::absolute(data_->prefix()), ec).string() << "\n"
     << "idx bytes: " << idx_bytes << ", sequences: " << data_->num_sequences() << ", tokens: " << data_->num_tokens() << "\n"
     << "split: " << config.split << ", split index: " << config.split_index << " (" << kSplitNames[config.split_index]
     << "), documents: [" << first_doc << ", " << last_doc << ")\n"
     << "seq_length: " << config.seq_length << "\nnum_samples: " << config.num_samples << "\nseed: " << config.seed
     << "\nshuffle: " << (config.shuffle ? "true" : "false") << "\nrng: mt19937_64 + rejection Fisher-Yates\n";
  return os.str();
}

void GPTDataset::build_indices(const GPTDatasetConfig& config, std::span<const int32_t> documents) {
  const auto lengths = data_->sequence_lengths();
  int64_t tokens_per_epoch = 0;
  for (int32_t d : documents) tokens_per_epoch += lengths[d];
  const int64_t needed = std::max<int64_t>(config.num_samples, 1) * seq_length_ + 1;
  if (tokens_per_epoch == 0 || (config.num_samples <= 0 && tokens_per_epoch < needed)) {
    std::ostringstream os;
    os << data_->prefix() << ": the " << kSplitNames[config.split_index] << " split (split \"" << config.split
       << "\", " << documents.size() << " of " << data_->num_sequences() << " documents) has " << tokens_per_epoch
       << " tokens; cannot provide even one sample of seq_length + 1 = " << seq_length_ + 1 << " tokens";
    throw std::runtime_error(os.str());
  }
  num_epochs_ = 1;
  for (int64_t tokens = tokens_per_epoch; tokens < needed; tokens += tokens_per_epoch) ++num_epochs_;

  bool separate_final_epoch = false;
  int64_t samples_before_final = 0;
  if (config.shuffle && num_epochs_ > 1) {  // Megatron: shuffle a small final epoch on its own
    samples_before_final = ((num_epochs_ - 1) * tokens_per_epoch - 1) / seq_length_;
    const int64_t from_final = config.num_samples - samples_before_final;
    const int64_t per_epoch = (tokens_per_epoch - 1) / seq_length_;
    separate_final_epoch = from_final < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
  }
  ShuffleRng rng(config.seed);
  if (config.shuffle) {
    document_index_ = build_document_index(documents, num_epochs_, &rng, separate_final_epoch);
  } else {
    for (int64_t e = 0; e < num_epochs_; ++e) document_index_.insert(document_index_.end(), documents.begin(), documents.end());
  }
  sample_index_ = build_sample_index(lengths, document_index_, seq_length_, num_epochs_, tokens_per_epoch);
  const int64_t total = static_cast<int64_t>(sample_index_.size() / 2) - 1;
  if (!config.shuffle) {
    shuffle_index_.resize(static_cast<size_t>(total));
    std::iota(shuffle_index_.begin(), shuffle_index_.end(), int64_t{0});
  } else {
    shuffle_index_ = build_shuffle_index(separate_final_epoch ? samples_before_final : total, total, &rng);
  }
}

bool GPTDataset::indices_valid() const {
  const int64_t docs = static_cast<int64_t>(document_index_.size());
  const int64_t samples = static_cast<int64_t>(sample_index_.size() / 2) - 1;
  if (sample_index_.size() % 2 != 0 || samples < 1 || static_cast<int64_t>(shuffle_index_.size()) != samples) return false;
  for (int32_t d : document_index_)
    if (d < 0 || d >= data_->num_sequences()) return false;
  const auto lengths = data_->sequence_lengths();
  for (int64_t s = 0; s <= samples; ++s) {  // every row in range, every sample exactly seq_length + 1 tokens
    const int64_t pos = sample_index_[2 * s], off = sample_index_[2 * s + 1];
    if (pos < 0 || pos >= docs || off < 0 || off >= std::max<int64_t>(1, lengths[document_index_[pos]])) return false;
    if (s == 0) continue;
    const int64_t prev = sample_index_[2 * s - 2], prev_off = sample_index_[2 * s - 1];
    if (pos < prev || (pos == prev && off <= prev_off)) return false;
    int64_t tokens = off + 1 - prev_off;
    for (int64_t p = prev; p < pos; ++p) tokens += lengths[document_index_[p]];
    if (tokens != seq_length_ + 1) return false;
  }
  std::vector<bool> seen(static_cast<size_t>(samples), false);
  for (int64_t v : shuffle_index_) {
    if (v < 0 || v >= samples || seen[v]) return false;
    seen[v] = true;
  }
  return true;
}

bool GPTDataset::load_cache(const std::string& expected_description) {
  if (read_text(cache_stem_ + "_description.txt") != expected_description) return false;
  if (!load_npy(cache_stem_ + "_document_index.npy", 1, &document_index_) ||
      !load_npy(cache_stem_ + "_sample_index.npy", 2, &sample_index_) ||
      !load_npy(cache_stem_ + "_shuffle_index.npy", 1, &shuffle_index_) || !indices_valid()) {
    std::cerr << "warning: ignoring unreadable or inconsistent index cache " << cache_stem_ << "_*; rebuilding\n";
    document_index_.clear(), sample_index_.clear(), shuffle_index_.clear();
    return false;
  }
  // Each epoch lists every document of the split once.
  num_epochs_ = static_cast<int64_t>(document_index_.size()) / std::max<int64_t>(1, split_documents_);
  loaded_from_cache_ = true;
  return true;
}

void GPTDataset::save_cache(const std::string& description) const {
  try {
    fs::create_directories(fs::path(cache_stem_).parent_path());
    save_npy(cache_stem_ + "_document_index.npy", document_index_, 1);
    save_npy(cache_stem_ + "_sample_index.npy", sample_index_, 2);
    save_npy(cache_stem_ + "_shuffle_index.npy", shuffle_index_, 1);
    // The description goes last: a cache entry without it is never read.
    write_atomically(cache_stem_ + "_description.txt", description, nullptr, 0);
  } catch (const std::exception& e) {
    std::cerr << "warning: cannot write the index cache " << cache_stem_ << "_*: " << e.what()
              << " (indices kept in memory only)\n";
  }
}

void GPTDataset::get(int64_t index, int32_t* out) const {
  if (index < 0 || index >= size())
    throw std::out_of_range(data_->prefix() + ": sample " + std::to_string(index) + " out of range [0, " +
                            std::to_string(size()) + ")");
  const int64_t s = shuffle_index_[index];
  const int64_t first = sample_index_[2 * s], first_offset = sample_index_[2 * s + 1];
  const int64_t last = sample_index_[2 * s + 2], last_offset = sample_index_[2 * s + 3];
  int64_t written = 0;
  for (int64_t pos = first; pos <= last; ++pos) {
    const TokenView doc = data_->sequence(document_index_[pos]);
    const int64_t begin = pos == first ? first_offset : 0;
    const int64_t end = pos == last ? last_offset + 1 : doc.size();
    if (written + (end - begin) > seq_length_ + 1) throw std::logic_error("GPTDataset: sample longer than seq_length + 1");
    doc.copy_to(begin, end - begin, out + written);
    if (mask_) {
      thread_local std::vector<int32_t> m;
      m.resize(static_cast<size_t>(end - begin));
      mask_->sequence(document_index_[pos]).copy_to(begin, end - begin, m.data());
      for (int64_t i = 0; i < end - begin; ++i)
        if (m[static_cast<size_t>(i)] == 0) out[written + i] |= kLossMaskedBit;
    }
    written += end - begin;
  }
  if (written != seq_length_ + 1) throw std::logic_error("GPTDataset: sample shorter than seq_length + 1");
}

std::string loss_mask_prefix(const std::string& prefix) { return prefix + "_loss_mask"; }

void GPTDataset::set_loss_mask(std::shared_ptr<const IndexedDataset> mask) {
  const auto a = data_->sequence_lengths(), b = mask->sequence_lengths();
  if (!std::equal(a.begin(), a.end(), b.begin(), b.end()))
    throw std::runtime_error(mask->prefix() + ".idx: its sequence lengths are not those of " + data_->prefix() +
                             ".idx (" + std::to_string(b.size()) + " sequences against " + std::to_string(a.size()) +
                             "): a loss mask must be written with its data (preprocess_data --sft)");
  mask_ = std::move(mask);
}

// ---- BlendedDataset -----------------------------------------------------------------------------

bool BlendedDataset::has_loss_mask() const {
  for (const auto& d : datasets_)
    if (d->has_loss_mask()) return true;
  return false;
}

namespace {

std::vector<double> normalised(std::vector<double> weights) {
  double sum = 0;
  for (double w : weights) {
    if (!(w >= 0) || !std::isfinite(w)) throw std::invalid_argument("data_path weights must be non-negative numbers");
    sum += w;
  }
  if (!(sum > 0)) throw std::invalid_argument("data_path weights sum to 0");
  for (double& w : weights) w /= sum;
  return weights;
}

}  // namespace

BlendedDataset::BlendedDataset(std::vector<std::unique_ptr<SampleSource>> datasets, std::vector<double> weights,
                               int64_t size)
    : datasets_(std::move(datasets)) {
  if (datasets_.empty() || datasets_.size() != weights.size() || datasets_.size() > 32767)
    throw std::invalid_argument("BlendedDataset: need one weight per dataset");
  const std::vector<double> w = normalised(std::move(weights));
  build_blending_indices(w, size, &dataset_index_, &dataset_sample_index_);
  std::vector<int64_t> needed(datasets_.size(), 0);
  for (int64_t i = 0; i < size; ++i) needed[dataset_index_[i]] = dataset_sample_index_[i] + 1;
  for (size_t d = 0; d < datasets_.size(); ++d)
    if (datasets_[d]->size() < needed[d])
      throw std::logic_error("BlendedDataset: dataset " + std::to_string(d) + " has " +
                             std::to_string(datasets_[d]->size()) + " samples, blending needs " + std::to_string(needed[d]));
}

void BlendedDataset::get(int64_t index, int32_t* out) const {
  if (index < 0 || index >= size())
    throw std::out_of_range("BlendedDataset: sample " + std::to_string(index) + " out of range [0, " +
                            std::to_string(size()) + ")");
  datasets_[dataset_index_[index]]->get(dataset_sample_index_[index], out);
}

// ---- Factory ------------------------------------------------------------------------------------

namespace {

std::shared_ptr<const IndexedDataset> open_checked(const std::string& prefix, int64_t vocab_size) {
  auto data = std::make_shared<const IndexedDataset>(prefix);
  if (vocab_size > 0) data->check_token_ids(vocab_size);
  return data;
}

}  // namespace

std::unique_ptr<SampleSource> build_gpt_dataset(const GPTDatasetConfig& config) {
  if (config.data_path.empty()) throw std::invalid_argument("data_path is empty");
  GPTDatasetConfig resolved = config;
  if (resolved.cache_dir.empty())
    resolved.cache_dir = (fs::absolute(config.data_path[0].second).parent_path() / "index_cache").string();
  auto component = [&](const std::string& prefix, int64_t num_samples) {
    GPTDatasetConfig c = resolved;
    c.data_path = {{1.0, prefix}};
    c.num_samples = num_samples;
    auto d = std::make_unique<GPTDataset>(open_checked(prefix, config.vocab_size), c);
    const std::string mask = loss_mask_prefix(prefix);
    if (fs::exists(mask + ".idx") || fs::exists(mask + ".bin")) d->set_loss_mask(std::make_shared<const IndexedDataset>(mask));
    return d;
  };
  if (config.data_path.size() == 1) return component(config.data_path[0].second, config.num_samples);

  if (config.num_samples <= 0) throw std::invalid_argument("a blended data_path needs num_samples > 0");
  std::vector<double> weights;
  for (const auto& [w, prefix] : config.data_path) weights.push_back(w);
  weights = normalised(weights);
  std::vector<int16_t> which;
  std::vector<int64_t> sample;
  build_blending_indices(weights, config.num_samples, &which, &sample);
  std::vector<int64_t> needed(weights.size(), 0);
  for (size_t i = 0; i < which.size(); ++i) needed[which[i]] = sample[i] + 1;
  std::vector<std::unique_ptr<SampleSource>> datasets;
  for (size_t d = 0; d < weights.size(); ++d) {
    // Megatron asks each dataset for ceil(weight * N * 1.005) samples; never fewer than blending takes.
    const auto margin = static_cast<int64_t>(std::ceil(weights[d] * static_cast<double>(config.num_samples) * 1.005));
    datasets.push_back(component(config.data_path[d].second, std::max<int64_t>({margin, needed[d], 1})));
  }
  return std::make_unique<BlendedDataset>(std::move(datasets), weights, config.num_samples);
}

}  // namespace gf::data
