// Megatron-LM "MMIDIDX" indexed dataset: a memory-mapped reader that validates the whole index
// up front, and a builder that writes the same bytes as Megatron's IndexedDatasetBuilder.
//
// Layout of PREFIX.idx (all little endian):
//   9 bytes  "MMIDIDX\0\0"
//   u64      version (1)
//   u8       dtype code (uint8=1 int8=2 int16=3 int32=4 int64=5 float64=6 float32=7 uint16=8)
//   u64      sequence count S
//   u64      document count D+1
//   i32[S]   sequence lengths (tokens)
//   i64[S]   sequence byte pointers into PREFIX.bin
//   i64[D+1] document indices (sequence index where each document starts; first 0, last S)
// PREFIX.bin holds the raw tokens of all sequences back to back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace gf::data {

enum class DType : uint8_t {
  kUInt8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUInt16 = 8,
};

// Size in bytes of one element; throws std::invalid_argument for an unknown code.
size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
bool dtype_is_integer(DType dtype);
// Megatron's DType.optimal_dtype: uint16 when the vocabulary has fewer than 65500 entries,
// int32 otherwise.
DType optimal_token_dtype(int64_t vocab_size);

// A read-only view of one sequence's tokens in the .bin file, in its on-disk integer dtype.
class TokenView {
 public:
  TokenView(const std::byte* data, int64_t size, DType dtype) : data_(data), size_(size), dtype_(dtype) {}
  int64_t size() const { return size_; }
  DType dtype() const { return dtype_; }
  // Token i widened to int64 (no bounds check beyond what the reader validated).
  int64_t operator[](int64_t i) const;
  // Typed access; T must match dtype() (checked, throws std::logic_error otherwise).
  template <typename T>
  std::span<const T> as() const;
  // Copies tokens [offset, offset + count) as int32 into out; throws std::out_of_range when the
  // range leaves the sequence.
  void copy_to(int64_t offset, int64_t count, int32_t* out) const;

 private:
  const std::byte* data_;
  int64_t size_;
  DType dtype_;
};

// Position of the first token id outside [0, vocab_size) found by check_token_ids.
struct BadToken {
  int64_t token_index = -1;  // index of the token in .bin (byte offset / item size)
  int64_t sequence = -1;     // sequence holding it
  int64_t offset = -1;       // offset inside that sequence
  int64_t value = 0;
};

class IndexedDataset {
 public:
  // Opens PREFIX.idx and PREFIX.bin, maps both and validates everything that can be validated
  // without reading the tokens. Throws std::runtime_error naming the file and the failed check.
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  DType dtype() const { return dtype_; }
  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_documents() const { return static_cast<int64_t>(document_indices_.size()) - 1; }
  int64_t num_tokens() const { return num_tokens_; }
  // The index arrays are copied out of the .idx map: they start at byte 34, which is not
  // aligned for int32/int64 access.
  std::span<const int32_t> sequence_lengths() const { return lengths_; }
  std::span<const int64_t> sequence_pointers() const { return pointers_; }
  std::span<const int64_t> document_indices() const { return document_indices_; }

  // Tokens of sequence i; throws std::out_of_range for a bad index.
  TokenView sequence(int64_t i) const;

  // Scans every token of .bin (OpenMP-parallel) and returns the first id outside
  // [0, vocab_size), or token_index == -1 when all ids are valid.
  BadToken find_bad_token(int64_t vocab_size) const;
  // Same scan; throws std::runtime_error naming the file, value and position of the first bad id.
  void check_token_ids(int64_t vocab_size) const;

 private:
  void map_bin();
  void read_index();
  void validate_lengths_and_pointers();
  void validate_document_indices();
  [[noreturn]] void fail_idx(const std::string& check) const;
  [[noreturn]] void fail_bin(const std::string& check) const;

  std::string prefix_, idx_path_, bin_path_;
  const std::byte* bin_map_ = nullptr;
  size_t bin_size_ = 0;
  DType dtype_ = DType::kUInt16;
  int64_t num_sequences_ = 0;
  int64_t num_tokens_ = 0;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> pointers_;
  std::vector<int64_t> document_indices_;
};

// Writes PREFIX.bin and PREFIX.idx exactly as Megatron's IndexedDatasetBuilder + _IndexWriter do
// (megatron/core/datasets/indexed_dataset.py). Both files are written under temporary names and
// renamed into place by finalize(), so a crashed run never leaves a complete-looking dataset.
class IndexedDatasetBuilder {
 public:
  IndexedDatasetBuilder(std::string prefix, DType dtype);
  ~IndexedDatasetBuilder();
  IndexedDatasetBuilder(const IndexedDatasetBuilder&) = delete;
  IndexedDatasetBuilder& operator=(const IndexedDatasetBuilder&) = delete;

  // Megatron add_item: one sequence. Throws std::out_of_range if a token does not fit the dtype.
  void add_item(std::span<const int32_t> tokens);
  // Megatron end_document: closes the current document after add_item calls.
  void end_document();
  // Megatron add_document: `tokens` split into sequences of `lengths` (sum must match), then
  // end of document. An empty `lengths` adds an empty document, as Megatron does.
  void add_document(std::span<const int32_t> tokens, std::span<const int32_t> lengths);
  void finalize();

  DType dtype() const { return dtype_; }
  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_documents() const { return static_cast<int64_t>(document_indices_.size()) - 1; }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  void write_tokens(std::span<const int32_t> tokens);

  std::string prefix_, bin_tmp_, idx_tmp_;
  DType dtype_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> document_indices_{0};
  std::vector<std::byte> buffer_;
  int64_t num_tokens_ = 0;
  bool finalized_ = false;
};

}  // namespace gf::data
