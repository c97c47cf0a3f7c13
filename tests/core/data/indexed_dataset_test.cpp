#include "core/data/indexed_dataset.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace gf::data {
namespace {

namespace fs = std::filesystem;

class IndexedDatasetTest : public test::TempDirTest {
 protected:
  IndexedDatasetTest() : TempDirTest("indexed_dataset_test") {}
  std::string prefix(const std::string& name) const { return (dir_ / name).string(); }

};

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
void poke(std::vector<char>* bytes, size_t offset, T value) {
  std::memcpy(bytes->data() + offset, &value, sizeof(T));
}

// Documents of sentences; token values drawn within [lo, hi].
using Doc = std::vector<std::vector<int32_t>>;

std::vector<Doc> random_docs(std::mt19937& rng, int n, int32_t lo, int32_t hi) {
  std::uniform_int_distribution<int32_t> value(lo, hi), sentences(0, 3), length(0, 9);
  std::vector<Doc> docs(n);
  for (Doc& doc : docs) {
    doc.resize(sentences(rng));
    for (auto& s : doc) {
      s.resize(length(rng) + 1);
      for (auto& t : s) t = value(rng);
    }
  }
  return docs;
}

void build(const std::string& prefix, DType dtype, const std::vector<Doc>& docs) {
  IndexedDatasetBuilder builder(prefix, dtype);
  for (const Doc& doc : docs) {
    for (const auto& s : doc) builder.add_item(s);
    builder.end_document();
  }
  builder.finalize();
}

// A small valid dataset: 3 documents, 4 sequences, uint16.
void build_small(const std::string& prefix) {
  build(prefix, DType::kUInt16, {{{1, 2, 3}}, {{4, 5}, {6}}, {{7, 8, 9, 10}}});
}

template <typename T>
void expect_round_trip(const std::string& prefix, DType dtype) {
  std::mt19937 rng(static_cast<unsigned>(dtype));
  const int32_t lo = std::max<int64_t>(std::numeric_limits<T>::min(), std::numeric_limits<int32_t>::min());
  const int32_t hi = std::min<int64_t>(std::numeric_limits<T>::max(), std::numeric_limits<int32_t>::max());
  const std::vector<Doc> docs = random_docs(rng, 40, lo, hi);
  build(prefix, dtype, docs);

  IndexedDataset ds(prefix);
  EXPECT_EQ(ds.dtype(), dtype);
  ASSERT_EQ(ds.num_documents(), 40);
  int64_t seq = 0, tokens = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    EXPECT_EQ(ds.document_indices()[d], seq);
    for (const auto& sentence : docs[d]) {
      const TokenView view = ds.sequence(seq++);
      ASSERT_EQ(view.size(), static_cast<int64_t>(sentence.size()));
      const std::span<const T> typed = view.as<T>();
      std::vector<int32_t> copied(sentence.size());
      view.copy_to(0, view.size(), copied.data());
      EXPECT_EQ(copied, sentence);
      for (size_t i = 0; i < sentence.size(); ++i) {
        EXPECT_EQ(view[static_cast<int64_t>(i)], sentence[i]);
        EXPECT_EQ(static_cast<int64_t>(typed[i]), sentence[i]);
      }
      tokens += static_cast<int64_t>(sentence.size());
    }
  }
  EXPECT_EQ(ds.num_sequences(), seq);
  EXPECT_EQ(ds.num_tokens(), tokens);
  EXPECT_EQ(ds.document_indices().back(), seq);
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(prefix + ".bin")), tokens * static_cast<int64_t>(sizeof(T)));
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(prefix + ".idx")), 34 + 12 * seq + 8 * (ds.num_documents() + 1));
  EXPECT_THROW(ds.sequence(seq), std::out_of_range);
  EXPECT_THROW(ds.sequence(-1), std::out_of_range);
}

TEST_F(IndexedDatasetTest, RoundTripEveryIntegerDtype) {
  expect_round_trip<uint8_t>(prefix("u8"), DType::kUInt8);
  expect_round_trip<int8_t>(prefix("i8"), DType::kInt8);
  expect_round_trip<int16_t>(prefix("i16"), DType::kInt16);
  expect_round_trip<uint16_t>(prefix("u16"), DType::kUInt16);
  expect_round_trip<int32_t>(prefix("i32"), DType::kInt32);
  expect_round_trip<int64_t>(prefix("i64"), DType::kInt64);
}

TEST_F(IndexedDatasetTest, AddDocumentMatchesAddItemAndEndDocument) {
  const std::vector<int32_t> tokens{5, 6, 7, 8, 9};
  const std::vector<int32_t> lengths{2, 3};
  {
    IndexedDatasetBuilder b(prefix("a"), DType::kUInt16);
    b.add_document(tokens, lengths);
    b.add_document({}, {});  // empty document: no sequence, one more document index
    b.finalize();
  }
  build(prefix("b"), DType::kUInt16, {{{5, 6}, {7, 8, 9}}, {}});
  EXPECT_EQ(read_file(prefix("a") + ".idx"), read_file(prefix("b") + ".idx"));
  EXPECT_EQ(read_file(prefix("a") + ".bin"), read_file(prefix("b") + ".bin"));
  IndexedDataset ds(prefix("a"));
  EXPECT_EQ(ds.num_documents(), 2);
  EXPECT_EQ(std::vector<int64_t>(ds.document_indices().begin(), ds.document_indices().end()),
            (std::vector<int64_t>{0, 2, 2}));

  IndexedDatasetBuilder bad(prefix("c"), DType::kUInt16);
  EXPECT_THROW(bad.add_document(tokens, std::vector<int32_t>{2, 2}), std::invalid_argument);
  EXPECT_THROW(bad.add_item(std::vector<int32_t>{70000}), std::out_of_range);
  EXPECT_THROW(bad.add_item(std::vector<int32_t>{-1}), std::out_of_range);
}

TEST_F(IndexedDatasetTest, UnfinishedBuilderLeavesNoFiles) {
  {
    IndexedDatasetBuilder b(prefix("x"), DType::kInt32);
    b.add_item(std::vector<int32_t>{1, 2, 3});
  }
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST(IndexedDatasetDType, OptimalDtypeFollowsMegatron) {
  EXPECT_EQ(optimal_token_dtype(50257), DType::kUInt16);
  EXPECT_EQ(optimal_token_dtype(65499), DType::kUInt16);
  EXPECT_EQ(optimal_token_dtype(65500), DType::kInt32);
  EXPECT_EQ(dtype_size(DType::kUInt16), 2u);
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
}

// Corrupts a copy of the small dataset and expects the reader to name the file and the check.
class IndexCheckTest : public IndexedDatasetTest {
 protected:
  void SetUp() override {
    IndexedDatasetTest::SetUp();
    build_small(prefix("good"));
    idx_ = read_file(prefix("good") + ".idx");
    bin_ = read_file(prefix("good") + ".bin");
  }
  void expect_refused(const std::vector<char>& idx, const std::vector<char>& bin, const std::string& file_suffix,
                      const std::string& check) {
    write_file(prefix("bad") + ".idx", idx);
    write_file(prefix("bad") + ".bin", bin);
    try {
      IndexedDataset ds(prefix("bad"));
      ADD_FAILURE() << "accepted a file that should fail the " << check;
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(prefix("bad") + file_suffix), std::string::npos) << msg;
      EXPECT_NE(msg.find(check), std::string::npos) << msg;
    }
  }
  std::vector<char> idx_, bin_;
  // Offsets in the small dataset's .idx (S = 4, D + 1 = 4).
  static constexpr size_t kLengths = 34, kPointers = 34 + 16, kDocs = 34 + 48;
};

TEST_F(IndexCheckTest, EveryCheckFiresWithItsMessage) {
  ASSERT_NO_THROW(IndexedDataset{prefix("good")});
  std::vector<char> v = idx_;
  expect_refused({idx_.begin(), idx_.begin() + 20}, bin_, ".idx", "header check");
  v = idx_, v[0] = 'X', expect_refused(v, bin_, ".idx", "magic check");
  v = idx_, poke<uint64_t>(&v, 9, 2), expect_refused(v, bin_, ".idx", "version check");
  v = idx_, poke<uint8_t>(&v, 17, 9), expect_refused(v, bin_, ".idx", "dtype check");
  v = idx_, poke<uint8_t>(&v, 17, 6), expect_refused(v, bin_, ".idx", "not an integer token type");
  v = idx_, poke<uint64_t>(&v, 18, 5), expect_refused(v, bin_, ".idx", "size check");
  v = idx_, poke<uint64_t>(&v, 18, uint64_t{1} << 62), expect_refused(v, bin_, ".idx", "size check");
  v = idx_, v.push_back(0), expect_refused(v, bin_, ".idx", "size check");
  v = idx_, poke<int32_t>(&v, kLengths + 4, -2), expect_refused(v, bin_, ".idx", "length check");
  v = idx_, poke<int64_t>(&v, kPointers + 8, 4), expect_refused(v, bin_, ".idx", "pointer check");
  v = idx_, poke<int64_t>(&v, kPointers, 2), expect_refused(v, bin_, ".idx", "pointer check");
  v = idx_, poke<int64_t>(&v, kDocs, 1), expect_refused(v, bin_, ".idx", "document index check");
  v = idx_, poke<int64_t>(&v, kDocs + 24, 3), expect_refused(v, bin_, ".idx", "document index check");
  v = idx_, poke<int64_t>(&v, kDocs + 16, 0), expect_refused(v, bin_, ".idx", "document indices decrease");
  // Zero document indices: header says 0 and the array is gone.
  v = idx_, poke<uint64_t>(&v, 26, 0), v.resize(kDocs), expect_refused(v, bin_, ".idx", "document count check");
  expect_refused(idx_, {bin_.begin(), bin_.end() - 2}, ".bin", "bounds check");
  // A longer .bin is fine (only the indexed part is read).
  std::vector<char> longer = bin_;
  longer.resize(bin_.size() + 6);
  write_file(prefix("long") + ".idx", idx_);
  write_file(prefix("long") + ".bin", longer);
  EXPECT_EQ(IndexedDataset(prefix("long")).num_tokens(), 10);
}

TEST_F(IndexCheckTest, MissingFilesAreNamed) {
  fs::remove(prefix("good") + ".bin");
  try {
    IndexedDataset ds(prefix("good"));
    ADD_FAILURE() << "opened a dataset without .bin";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(prefix("good") + ".bin: cannot open"), std::string::npos) << e.what();
  }
  EXPECT_THROW(IndexedDataset(prefix("nothing")), std::runtime_error);
}

TEST_F(IndexedDatasetTest, TokenIdCheckReportsFirstBadIdAndPosition) {
  build(prefix("v"), DType::kInt32, {{{1, 2}}, {{3, 4, 5, 60000, 7, 70000}}});
  IndexedDataset ds(prefix("v"));
  EXPECT_NO_THROW(ds.check_token_ids(70001));
  const BadToken bad = ds.find_bad_token(50257);
  EXPECT_EQ(bad.token_index, 5);
  EXPECT_EQ(bad.sequence, 1);
  EXPECT_EQ(bad.offset, 3);
  EXPECT_EQ(bad.value, 60000);
  try {
    ds.check_token_ids(50257);
    ADD_FAILURE() << "id 60000 passed a 50257 vocabulary";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    for (const std::string& part : {prefix("v") + ".bin", std::string("token id check"), std::string("sequence 1, offset 3"),
                                   std::string("60000"), std::string("50257")})
      EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
  build(prefix("neg"), DType::kInt16, {{{1, -3}}});
  EXPECT_EQ(IndexedDataset(prefix("neg")).find_bad_token(100).value, -3);
}

TEST_F(IndexedDatasetTest, TokenIdCheckFindsTheFirstBadIdAcrossParallelChunks) {
  const int64_t n = 3 << 20;  // three 1 Mi-token chunks
  std::vector<int32_t> tokens(n, 7);
  tokens[2'500'000] = 99;
  tokens[1'500'000] = 98;
  {
    IndexedDatasetBuilder b(prefix("big"), DType::kUInt16);
    b.add_document(tokens, std::vector<int32_t>{1'000'000, 1'000'000, static_cast<int32_t>(n - 2'000'000)});
    b.finalize();
  }
  IndexedDataset ds(prefix("big"));
  const BadToken bad = ds.find_bad_token(50);
  EXPECT_EQ(bad.token_index, 1'500'000);
  EXPECT_EQ(bad.sequence, 1);
  EXPECT_EQ(bad.offset, 500'000);
  EXPECT_EQ(bad.value, 98);
  EXPECT_EQ(ds.find_bad_token(100).token_index, -1);
}

// Opening must either fail with std::runtime_error or give a dataset whose every read stays
// inside the files; reading everything exercises that (and ASan builds check it).
void open_and_read_all(const std::string& prefix, int64_t* opened) {
  try {
    IndexedDataset ds(prefix);
    ++*opened;
    int64_t sum = 0, tokens = 0;
    for (int64_t i = 0; i < ds.num_sequences(); ++i) {
      const TokenView v = ds.sequence(i);
      for (int64_t j = 0; j < v.size(); ++j) sum += v[j];
      tokens += v.size();
    }
    EXPECT_EQ(tokens, ds.num_tokens());
    EXPECT_LE(tokens * static_cast<int64_t>(dtype_size(ds.dtype())), static_cast<int64_t>(fs::file_size(prefix + ".bin")));
    ds.find_bad_token(1 << 20);
    (void)sum;
  } catch (const std::runtime_error&) {
  }
}

TEST_F(IndexedDatasetTest, FuzzTruncatedIndexIsAlwaysRefused) {
  build_small(prefix("good"));
  const std::vector<char> idx = read_file(prefix("good") + ".idx");
  fs::copy_file(prefix("good") + ".bin", prefix("t") + ".bin");
  for (size_t len = 0; len < idx.size(); ++len) {
    write_file(prefix("t") + ".idx", {idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(len)});
    EXPECT_THROW(IndexedDataset{prefix("t")}, std::runtime_error) << "truncated to " << len << " bytes";
  }
}

TEST_F(IndexedDatasetTest, FuzzTruncatedBinIsRefusedOrReadInBounds) {
  build_small(prefix("good"));
  const std::vector<char> bin = read_file(prefix("good") + ".bin");
  fs::copy_file(prefix("good") + ".idx", prefix("t") + ".idx");
  int64_t opened = 0;
  for (size_t len = 0; len < bin.size(); ++len) {
    write_file(prefix("t") + ".bin", {bin.begin(), bin.begin() + static_cast<std::ptrdiff_t>(len)});
    open_and_read_all(prefix("t"), &opened);
  }
  EXPECT_EQ(opened, 0);  // every token of the small dataset is indexed, so any truncation is caught
}

TEST_F(IndexedDatasetTest, FuzzRandomByteFlipsNeverCrash) {
  std::mt19937 doc_rng(7);
  build(prefix("good"), DType::kUInt16, random_docs(doc_rng, 12, 0, 65535));
  const std::vector<char> idx = read_file(prefix("good") + ".idx");
  const std::vector<char> bin = read_file(prefix("good") + ".bin");
  int64_t opened = 0;
  for (unsigned seed = 0; seed < 3000; ++seed) {
    std::mt19937 rng(seed);
    std::vector<char> v = idx, b = bin;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const bool in_bin = !b.empty() && rng() % 5 == 0;
      std::vector<char>& target = in_bin ? b : v;
      target[rng() % target.size()] ^= static_cast<char>(1 + rng() % 255);
    }
    if (rng() % 8 == 0) v.resize(rng() % v.size());
    write_file(prefix("f") + ".idx", v);
    write_file(prefix("f") + ".bin", b);
    open_and_read_all(prefix("f"), &opened);
  }
  // Flips inside .bin only (or in bytes no check depends on) leave a valid dataset; most do not.
  EXPECT_GT(opened, 0);
  EXPECT_LT(opened, 3000);
}

}  // namespace
}  // namespace gf::data
