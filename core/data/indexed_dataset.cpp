#include "core/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>

namespace gf::data {

static_assert(std::endian::native == std::endian::little, "the .idx/.bin formats are little endian");

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderSize = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype, S, D+1

// A read-only private mapping of a whole file; size 0 maps nothing.
struct MappedFile {
  const std::byte* data = nullptr;
  size_t size = 0;

  explicit MappedFile(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      throw std::runtime_error(path + ": cannot stat: " + std::strerror(err));
    }
    size = static_cast<size_t>(st.st_size);
    if (size > 0) {
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        int err = errno;
        ::close(fd);
        throw std::runtime_error(path + ": cannot mmap: " + std::strerror(err));
      }
      data = static_cast<const std::byte*>(p);
    }
    ::close(fd);
  }
  MappedFile(MappedFile&& o) noexcept : data(o.data), size(o.size) { o.data = nullptr, o.size = 0; }
  MappedFile(const MappedFile&) = delete;
  ~MappedFile() {
    if (data) ::munmap(const_cast<std::byte*>(data), size);
  }
};

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Calls f(T*) with a null pointer of the C++ type behind an integer dtype.
template <typename F>
decltype(auto) visit_integer_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kUInt8: return f(static_cast<const uint8_t*>(nullptr));
    case DType::kInt8: return f(static_cast<const int8_t*>(nullptr));
    case DType::kInt16: return f(static_cast<const int16_t*>(nullptr));
    case DType::kInt32: return f(static_cast<const int32_t*>(nullptr));
    case DType::kInt64: return f(static_cast<const int64_t*>(nullptr));
    case DType::kUInt16: return f(static_cast<const uint16_t*>(nullptr));
    default: throw std::logic_error(std::string("not an integer token dtype: ") + dtype_name(dtype));
  }
}

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, uint8_t>) return DType::kUInt8;
  if constexpr (std::is_same_v<T, int8_t>) return DType::kInt8;
  if constexpr (std::is_same_v<T, int16_t>) return DType::kInt16;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kInt32;
  if constexpr (std::is_same_v<T, int64_t>) return DType::kInt64;
  if constexpr (std::is_same_v<T, uint16_t>) return DType::kUInt16;
}

constexpr int64_t kNotFound = std::numeric_limits<int64_t>::max();

// Index of the first token in data[begin, end) outside [0, vocab), or kNotFound.
template <typename T>
int64_t first_bad_in(const T* data, int64_t begin, int64_t end, int64_t vocab) {
  for (int64_t i = begin; i < end; ++i) {
    const int64_t v = static_cast<int64_t>(data[i]);
    if (v < 0 || v >= vocab) return i;
  }
  return kNotFound;
}

}  // namespace

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kUInt8:
    case DType::kInt8: return 1;
    case DType::kInt16:
    case DType::kUInt16: return 2;
    case DType::kInt32:
    case DType::kFloat32: return 4;
    case DType::kInt64:
    case DType::kFloat64: return 8;
  }
  throw std::invalid_argument("unknown dtype code " + std::to_string(static_cast<int>(dtype)));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat64: return "float64";
    case DType::kFloat32: return "float32";
    case DType::kUInt16: return "uint16";
  }
  return "unknown";
}

bool dtype_is_integer(DType dtype) {
  const int code = static_cast<int>(dtype);
  return code >= 1 && code <= 8 && dtype != DType::kFloat32 && dtype != DType::kFloat64;
}

DType optimal_token_dtype(int64_t vocab_size) { return vocab_size < 65500 ? DType::kUInt16 : DType::kInt32; }

// ---------------------------------------------------------------------------------------------
// TokenView

int64_t TokenView::operator[](int64_t i) const {
  return visit_integer_dtype(dtype_, [&](auto* tag) -> int64_t {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    return static_cast<int64_t>(reinterpret_cast<const T*>(data_)[i]);
  });
}

template <typename T>
std::span<const T> TokenView::as() const {
  if (dtype_of<T>() != dtype_)
    throw std::logic_error(std::string("TokenView::as: dataset dtype is ") + dtype_name(dtype_));
  return {reinterpret_cast<const T*>(data_), static_cast<size_t>(size_)};
}
template std::span<const uint8_t> TokenView::as<uint8_t>() const;
template std::span<const int8_t> TokenView::as<int8_t>() const;
template std::span<const int16_t> TokenView::as<int16_t>() const;
template std::span<const int32_t> TokenView::as<int32_t>() const;
template std::span<const int64_t> TokenView::as<int64_t>() const;
template std::span<const uint16_t> TokenView::as<uint16_t>() const;

void TokenView::copy_to(int64_t offset, int64_t count, int32_t* out) const {
  if (offset < 0 || count < 0 || offset > size_ || count > size_ - offset)
    throw std::out_of_range("TokenView::copy_to: tokens [" + std::to_string(offset) + ", " +
                            std::to_string(offset + count) + ") outside a sequence of " +
                            std::to_string(size_));
  visit_integer_dtype(dtype_, [&](auto* tag) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    const T* src = reinterpret_cast<const T*>(data_) + offset;
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(src[i]);
  });
}

// ---------------------------------------------------------------------------------------------
// IndexedDataset

IndexedDataset::IndexedDataset(const std::string& prefix)
    : prefix_(prefix), idx_path_(prefix + ".idx"), bin_path_(prefix + ".bin") {
  read_index();
  validate_document_indices();
  map_bin();
  try {
    validate_lengths_and_pointers();
  } catch (...) {  // the destructor does not run for a throwing constructor
    if (bin_map_) ::munmap(const_cast<std::byte*>(bin_map_), bin_size_);
    throw;
  }
}

IndexedDataset::~IndexedDataset() {
  if (bin_map_) ::munmap(const_cast<std::byte*>(bin_map_), bin_size_);
}

void IndexedDataset::fail_idx(const std::string& check) const {
  throw std::runtime_error(idx_path_ + ": invalid Megatron index: " + check);
}

void IndexedDataset::fail_bin(const std::string& check) const {
  throw std::runtime_error(bin_path_ + ": does not match " + idx_path_ + ": " + check);
}

void IndexedDataset::read_index() {
  MappedFile idx(idx_path_);
  const std::byte* p = idx.data;
  if (idx.size < kHeaderSize)
    fail_idx("header check: file has " + std::to_string(idx.size) + " bytes, the header needs " +
             std::to_string(kHeaderSize));
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0) fail_idx("magic check: file does not start with MMIDIDX\\0\\0");
  const uint64_t version = load<uint64_t>(p + 9);
  if (version != 1) fail_idx("version check: version is " + std::to_string(version) + ", expected 1");
  const uint8_t code = load<uint8_t>(p + 17);
  if (code < 1 || code > 8) fail_idx("dtype check: unknown dtype code " + std::to_string(code));
  dtype_ = static_cast<DType>(code);
  if (!dtype_is_integer(dtype_))
    fail_idx(std::string("dtype check: dtype ") + dtype_name(dtype_) + " is not an integer token type");
  const uint64_t seq_count = load<uint64_t>(p + 18);
  const uint64_t doc_count = load<uint64_t>(p + 26);
  const uint64_t body = idx.size - kHeaderSize;
  // Compare counts before multiplying so that a corrupted count cannot overflow.
  const bool fits = seq_count <= body / 12 && doc_count <= body / 8 &&
                    seq_count * 12 + doc_count * 8 == body;
  if (!fits)
    fail_idx("size check: " + std::to_string(seq_count) + " sequences and " + std::to_string(doc_count) +
             " document indices need " + (seq_count <= body / 12 && doc_count <= body / 8
                                              ? std::to_string(kHeaderSize + seq_count * 12 + doc_count * 8)
                                              : std::string("more")) +
             " bytes, file has " + std::to_string(idx.size));
  if (doc_count < 1) fail_idx("document count check: document index array is empty (needs at least the leading 0)");
  num_sequences_ = static_cast<int64_t>(seq_count);
  lengths_.resize(seq_count);
  pointers_.resize(seq_count);
  document_indices_.resize(doc_count);
  const std::byte* q = p + kHeaderSize;
  std::memcpy(lengths_.data(), q, seq_count * 4);
  std::memcpy(pointers_.data(), q + seq_count * 4, seq_count * 8);
  std::memcpy(document_indices_.data(), q + seq_count * 12, doc_count * 8);
}

void IndexedDataset::validate_document_indices() {
  const auto& d = document_indices_;
  if (d.front() != 0) fail_idx("document index check: first document index is " + std::to_string(d.front()) + ", expected 0");
  if (d.back() != num_sequences_)
    fail_idx("document index check: last document index is " + std::to_string(d.back()) +
             ", expected the sequence count " + std::to_string(num_sequences_));
  for (size_t i = 1; i < d.size(); ++i)
    if (d[i] < d[i - 1])
      fail_idx("document index check: document indices decrease at document " + std::to_string(i) + " (" +
               std::to_string(d[i - 1]) + " then " + std::to_string(d[i]) + ")");
}

void IndexedDataset::map_bin() {
  MappedFile bin(bin_path_);
  bin_map_ = bin.data;
  bin_size_ = bin.size;
  bin.data = nullptr;  // ownership moves to this object
}

void IndexedDataset::validate_lengths_and_pointers() {
  const int64_t item = static_cast<int64_t>(dtype_size(dtype_));
  const int64_t bin_size = static_cast<int64_t>(bin_size_);
  int64_t expected = 0;  // Megatron writes pointer[i] = sum of earlier lengths * itemsize
  for (int64_t i = 0; i < num_sequences_; ++i) {
    const int32_t len = lengths_[i];
    if (len < 0) fail_idx("length check: sequence " + std::to_string(i) + " has negative length " + std::to_string(len));
    if (pointers_[i] != expected)
      fail_idx("pointer check: sequence " + std::to_string(i) + " starts at byte " + std::to_string(pointers_[i]) +
               ", expected " + std::to_string(expected) + " (previous pointer + length * " + std::to_string(item) + ")");
    expected += static_cast<int64_t>(len) * item;  // expected <= bin_size + 2^34: no overflow
    if (expected > bin_size)
      fail_bin("bounds check: sequence " + std::to_string(i) + " ends at byte " + std::to_string(expected) +
               ", past the end of the .bin file (" + std::to_string(bin_size) + " bytes)");
  }
  num_tokens_ = expected / item;
}

TokenView IndexedDataset::sequence(int64_t i) const {
  if (i < 0 || i >= num_sequences_)
    throw std::out_of_range(prefix_ + ": sequence " + std::to_string(i) + " out of range [0, " +
                            std::to_string(num_sequences_) + ")");
  return TokenView(bin_map_ + pointers_[i], lengths_[i], dtype_);
}

BadToken IndexedDataset::find_bad_token(int64_t vocab_size) const {
  const int64_t n = num_tokens_;
  int64_t first = kNotFound;
  visit_integer_dtype(dtype_, [&](auto* tag) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    const T* data = reinterpret_cast<const T*>(bin_map_);
    constexpr int64_t kChunk = int64_t{1} << 20;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 1) reduction(min : first) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * kChunk;
      if (begin >= first) continue;  // an earlier bad token is already known to this thread
      first = std::min(first, first_bad_in(data, begin, std::min(n, begin + kChunk), vocab_size));
    }
  });
  BadToken bad;
  if (first == kNotFound) return bad;
  const int64_t byte = first * static_cast<int64_t>(dtype_size(dtype_));
  const auto it = std::upper_bound(pointers_.begin(), pointers_.end(), byte);
  bad.token_index = first;
  bad.sequence = (it - pointers_.begin()) - 1;
  bad.offset = (byte - pointers_[bad.sequence]) / static_cast<int64_t>(dtype_size(dtype_));
  bad.value = sequence(bad.sequence)[bad.offset];
  return bad;
}

void IndexedDataset::check_token_ids(int64_t vocab_size) const {
  const BadToken bad = find_bad_token(vocab_size);
  if (bad.token_index < 0) return;
  throw std::runtime_error(bin_path_ + ": token id check: token " + std::to_string(bad.token_index) +
                           " (sequence " + std::to_string(bad.sequence) + ", offset " + std::to_string(bad.offset) +
                           ") has id " + std::to_string(bad.value) + ", outside the model's vocabulary [0, " +
                           std::to_string(vocab_size) + ")");
}

// ---------------------------------------------------------------------------------------------
// IndexedDatasetBuilder

IndexedDatasetBuilder::IndexedDatasetBuilder(std::string prefix, DType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype) {
  if (!dtype_is_integer(dtype_))
    throw std::invalid_argument(std::string("IndexedDatasetBuilder: dtype ") + dtype_name(dtype_) +
                                " is not an integer token type");
  const std::string tag = ".tmp." + std::to_string(::getpid());
  bin_tmp_ = prefix_ + ".bin" + tag;
  idx_tmp_ = prefix_ + ".idx" + tag;
  bin_ = std::fopen(bin_tmp_.c_str(), "wb");
  if (!bin_) throw std::runtime_error(bin_tmp_ + ": cannot create: " + std::strerror(errno));
}

IndexedDatasetBuilder::~IndexedDatasetBuilder() {
  if (bin_) std::fclose(bin_);
  if (!finalized_) {
    std::remove(bin_tmp_.c_str());
    std::remove(idx_tmp_.c_str());
  }
}

void IndexedDatasetBuilder::write_tokens(std::span<const int32_t> tokens) {
  if (finalized_) throw std::logic_error("IndexedDatasetBuilder: add after finalize");
  const size_t item = dtype_size(dtype_);
  buffer_.resize(tokens.size() * item);
  visit_integer_dtype(dtype_, [&](auto* tag) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    T* out = reinterpret_cast<T*>(buffer_.data());
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int64_t v = tokens[i];
      if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
          v > static_cast<int64_t>(std::numeric_limits<T>::max()))
        throw std::out_of_range("IndexedDatasetBuilder: token " + std::to_string(v) + " does not fit dtype " +
                                dtype_name(dtype_));
      out[i] = static_cast<T>(v);
    }
  });
  if (!buffer_.empty() && std::fwrite(buffer_.data(), 1, buffer_.size(), bin_) != buffer_.size())
    throw std::runtime_error(bin_tmp_ + ": write failed: " + std::strerror(errno));
  num_tokens_ += static_cast<int64_t>(tokens.size());
}

void IndexedDatasetBuilder::add_item(std::span<const int32_t> tokens) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw std::length_error("IndexedDatasetBuilder: sequence longer than 2^31-1 tokens");
  write_tokens(tokens);
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
}

void IndexedDatasetBuilder::end_document() { document_indices_.push_back(num_sequences()); }

void IndexedDatasetBuilder::add_document(std::span<const int32_t> tokens, std::span<const int32_t> lengths) {
  int64_t total = 0;
  for (int32_t len : lengths) {
    if (len < 0) throw std::invalid_argument("IndexedDatasetBuilder::add_document: negative length");
    total += len;
  }
  if (total != static_cast<int64_t>(tokens.size()))
    throw std::invalid_argument("IndexedDatasetBuilder::add_document: lengths sum to " + std::to_string(total) +
                                " but the document has " + std::to_string(tokens.size()) + " tokens");
  write_tokens(tokens);
  lengths_.insert(lengths_.end(), lengths.begin(), lengths.end());
  end_document();
}

namespace {

void write_all(std::FILE* f, const void* data, size_t bytes, const std::string& path) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, f) != bytes)
    throw std::runtime_error(path + ": write failed: " + std::strerror(errno));
}

void close_and_rename(std::FILE* f, const std::string& tmp, const std::string& path) {
  const bool ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  std::fclose(f);
  if (!ok) throw std::runtime_error(tmp + ": flush failed: " + std::strerror(err));
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error(tmp + ": cannot rename to " + path + ": " + std::strerror(errno));
}

}  // namespace

void IndexedDatasetBuilder::finalize() {
  if (finalized_) throw std::logic_error("IndexedDatasetBuilder: finalize called twice");
  std::FILE* bin = bin_;
  bin_ = nullptr;
  close_and_rename(bin, bin_tmp_, prefix_ + ".bin");

  std::FILE* idx = std::fopen(idx_tmp_.c_str(), "wb");
  if (!idx) throw std::runtime_error(idx_tmp_ + ": cannot create: " + std::strerror(errno));
  const uint64_t version = 1, seq_count = lengths_.size(), doc_count = document_indices_.size();
  const uint8_t code = static_cast<uint8_t>(dtype_);
  std::vector<int64_t> pointers(lengths_.size());
  int64_t ptr = 0;
  for (size_t i = 0; i < lengths_.size(); ++i) {
    pointers[i] = ptr;
    ptr += static_cast<int64_t>(lengths_[i]) * static_cast<int64_t>(dtype_size(dtype_));
  }
  try {
    write_all(idx, kMagic, sizeof kMagic, idx_tmp_);
    write_all(idx, &version, 8, idx_tmp_);
    write_all(idx, &code, 1, idx_tmp_);
    write_all(idx, &seq_count, 8, idx_tmp_);
    write_all(idx, &doc_count, 8, idx_tmp_);
    write_all(idx, lengths_.data(), lengths_.size() * 4, idx_tmp_);
    write_all(idx, pointers.data(), pointers.size() * 8, idx_tmp_);
    write_all(idx, document_indices_.data(), document_indices_.size() * 8, idx_tmp_);
  } catch (...) {
    std::fclose(idx);
    throw;
  }
  close_and_rename(idx, idx_tmp_, prefix_ + ".idx");
  finalized_ = true;
}

}  // namespace gf::data
