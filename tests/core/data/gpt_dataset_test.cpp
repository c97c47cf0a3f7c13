#include "core/data/gpt_dataset.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace gf::data {
namespace {

namespace fs = std::filesystem;

class GPTDatasetTest : public test::TempDirTest {
 protected:
  GPTDatasetTest() : TempDirTest("gpt_dataset_test") {}

  // One sequence per document (Megatron's GPTDataset indexes sequences); token k of the corpus
  // is `base + k`, so a sample's tokens show exactly where they were cut from.
  std::string make_corpus(const std::string& name, const std::vector<int32_t>& lengths, int32_t base = 0) {
    const std::string prefix = (dir_ / name).string();
    IndexedDatasetBuilder b(prefix, DType::kInt32);
    int32_t next = base;
    for (int32_t len : lengths) {
      std::vector<int32_t> doc(static_cast<size_t>(len));
      std::iota(doc.begin(), doc.end(), next);
      next += len;
      b.add_document(doc, std::vector<int32_t>{len});  // one sequence per document, even when empty
    }
    b.finalize();
    return prefix;
  }

  GPTDatasetConfig config(const std::string& prefix, int64_t seq_length, int64_t num_samples, bool shuffle) const {
    GPTDatasetConfig c;
    c.data_path = {{1.0, prefix}};
    c.split = "1,0,0";
    c.seq_length = seq_length;
    c.num_samples = num_samples;
    c.shuffle = shuffle;
    c.cache_dir = (dir_ / "cache").string();
    return c;
  }

};

std::vector<int32_t> sample(const SampleSource& ds, int64_t i, int64_t seq_length) {
  std::vector<int32_t> out(static_cast<size_t>(seq_length + 1), -1);
  ds.get(i, out.data());
  return out;
}

std::vector<std::vector<int32_t>> all_samples(const SampleSource& ds, int64_t seq_length) {
  std::vector<std::vector<int32_t>> out;
  for (int64_t i = 0; i < ds.size(); ++i) out.push_back(sample(ds, i, seq_length));
  return out;
}

TEST(GPTDatasetSplit, FollowsMegatronRounding) {
  EXPECT_EQ(split_document_ranges("949,50,1", 1000), (std::array<int64_t, 4>{0, 949, 999, 1000}));
  // round(10/3) = 3 three times gives 9; the missing document shifts every boundary by one.
  EXPECT_EQ(split_document_ranges("1,1,1", 10), (std::array<int64_t, 4>{0, 4, 7, 10}));
  // 2.5 rounds to even (2) as Python's round does; "/" separates weights too; missing ones are 0.
  EXPECT_EQ(split_document_ranges("1/1", 5), (std::array<int64_t, 4>{0, 3, 5, 5}));
  // round(5*2/3) = 3 and round(5/3) = 2, so nothing to shift (truncation would give 3, 1).
  EXPECT_EQ(split_document_ranges("2,1", 5), (std::array<int64_t, 4>{0, 3, 5, 5}));
  EXPECT_EQ(split_document_ranges("100", 7), (std::array<int64_t, 4>{0, 7, 7, 7}));
  EXPECT_THROW(split_document_ranges("a,b", 5), std::invalid_argument);
  EXPECT_THROW(split_document_ranges("0,0,0", 5), std::invalid_argument);
}

TEST_F(GPTDatasetTest, PlainOrderWithoutShuffle) {
  const std::string prefix = make_corpus("c", {5, 3, 7, 1, 4});  // 20 tokens per epoch
  GPTDataset ds(std::make_shared<IndexedDataset>(prefix), config(prefix, 4, 12, false));
  // 12 samples need 12*4+1 = 49 tokens: 3 epochs, (3*20-1)/4 = 14 samples.
  EXPECT_EQ(ds.num_epochs(), 3);
  ASSERT_EQ(ds.size(), 14);
  for (int64_t j = 0; j < ds.size(); ++j) {
    std::vector<int32_t> expected;
    for (int64_t t = 4 * j; t < 4 * j + 5; ++t) expected.push_back(static_cast<int32_t>(t % 20));
    EXPECT_EQ(sample(ds, j, 4), expected) << "sample " << j;
  }
  EXPECT_THROW(sample(ds, 14, 4), std::out_of_range);
}

TEST_F(GPTDatasetTest, PlainOrderUsesOnlyTheSplitsDocuments) {
  const std::vector<int32_t> lengths{2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  const std::string prefix = make_corpus("c", lengths);
  auto c = config(prefix, 3, 0, false);
  c.split = "6,2,2";  // train docs [0, 6), valid [6, 8), test [8, 10)
  c.split_index = 1;
  GPTDataset valid(std::make_shared<IndexedDataset>(prefix), c);
  const int32_t first = 2 + 3 + 4 + 5 + 6 + 7;  // first token of document 6
  ASSERT_EQ(valid.size(), (8 + 9 - 1) / 3);
  for (int64_t j = 0; j < valid.size(); ++j) {
    const auto s = sample(valid, j, 3);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(s[k], first + 3 * j + k);
  }
}

TEST_F(GPTDatasetTest, ShuffledSamplesShareOneTokenAndCoverTheEpochs) {
  const std::vector<int32_t> lengths{9, 1, 0, 14, 3, 22, 5, 8, 2, 11};
  const std::string prefix = make_corpus("c", lengths);
  GPTDataset ds(std::make_shared<IndexedDataset>(prefix), config(prefix, 6, 40, true));
  const int64_t tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  EXPECT_EQ(ds.num_epochs(), (40 * 6 + 1 + tokens - 1) / tokens);
  EXPECT_GE(ds.size(), 40);
  for (int32_t d = 0; d < 10; ++d)  // every document once per epoch
    EXPECT_EQ(std::count(ds.document_index().begin(), ds.document_index().end(), d), ds.num_epochs());
  // Undo the sample shuffle: sample s in build order is at position inverse[s].
  std::vector<int64_t> inverse(static_cast<size_t>(ds.size()));
  for (int64_t p = 0; p < ds.size(); ++p) inverse[ds.shuffle_index()[p]] = p;
  std::vector<int32_t> stream;  // the epochs' tokens in document-index order
  for (int32_t d : ds.document_index()) {
    const int32_t start = std::accumulate(lengths.begin(), lengths.begin() + d, 0);
    for (int32_t k = 0; k < lengths[d]; ++k) stream.push_back(start + k);
  }
  for (int64_t s = 0; s < ds.size(); ++s) {
    const auto got = sample(ds, inverse[s], 6);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), stream.begin() + 6 * s)) << "sample " << s;
    if (s + 1 < ds.size()) {
      EXPECT_EQ(got.back(), sample(ds, inverse[s + 1], 6).front());
    }
  }
}

TEST_F(GPTDatasetTest, SeedDecidesTheOrder) {
  const std::string prefix = make_corpus("c", {17, 4, 30, 9, 12, 25, 6, 19, 3, 21});
  auto c = config(prefix, 8, 30, true);
  auto data = std::make_shared<IndexedDataset>(prefix);
  const auto a = all_samples(GPTDataset(data, c), 8);
  c.cache_dir.clear();  // rebuild rather than read the cache
  const auto b = all_samples(GPTDataset(data, c), 8);
  c.seed = 4321;
  const auto other = all_samples(GPTDataset(data, c), 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  auto sorted = a;  // token ids grow along the corpus: the plain order is the sorted one
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, a);
}

TEST_F(GPTDatasetTest, IndexCacheIsWrittenThenReused) {
  const std::string prefix = make_corpus("c", {13, 8, 21, 5, 34, 2});
  auto data = std::make_shared<IndexedDataset>(prefix);
  const auto c = config(prefix, 5, 25, true);
  GPTDataset first(data, c);
  EXPECT_FALSE(first.loaded_from_cache());
  const std::string stem = first.cache_stem();
  ASSERT_EQ(fs::path(stem).parent_path(), dir_ / "cache");
  for (const char* f : {"_document_index.npy", "_sample_index.npy", "_shuffle_index.npy", "_description.txt"})
    ASSERT_TRUE(fs::exists(stem + f)) << stem + f;
  const auto mtime = fs::last_write_time(stem + "_sample_index.npy");

  GPTDataset second(data, c);
  EXPECT_TRUE(second.loaded_from_cache());
  EXPECT_EQ(fs::last_write_time(stem + "_sample_index.npy"), mtime);
  EXPECT_EQ(all_samples(first, 5), all_samples(second, 5));

  auto other = c;
  other.seq_length = 6;  // a different key: built anew next to the first
  GPTDataset third(data, other);
  EXPECT_FALSE(third.loaded_from_cache());
  EXPECT_NE(third.cache_stem(), stem);

  fs::resize_file(stem + "_sample_index.npy", 100);  // damaged cache: rebuilt, same result
  GPTDataset fourth(data, c);
  EXPECT_FALSE(fourth.loaded_from_cache());
  EXPECT_EQ(all_samples(first, 5), all_samples(fourth, 5));
  EXPECT_TRUE(GPTDataset(data, c).loaded_from_cache());
}

TEST_F(GPTDatasetTest, DefaultCacheDirIsNextToTheData) {
  const std::string prefix = make_corpus("c", {40, 40});
  auto c = config(prefix, 7, 5, true);
  c.cache_dir.clear();
  auto ds = build_gpt_dataset(c);
  EXPECT_GE(ds->size(), 5);
  EXPECT_TRUE(fs::is_directory(dir_ / "index_cache"));
  EXPECT_FALSE(fs::is_empty(dir_ / "index_cache"));
}

TEST_F(GPTDatasetTest, StartsAtAnySampleWithoutReadingEarlierOnes) {
  const std::string prefix = make_corpus("c", {50, 7, 33, 12, 90, 4, 61});
  auto c = config(prefix, 16, 100, true);
  const auto all = all_samples(*build_gpt_dataset(c), 16);
  auto resumed = build_gpt_dataset(c);  // fresh loader, jumps straight to step 5 of batch 8
  for (int64_t i = 40; i < 100; ++i) EXPECT_EQ(sample(*resumed, i, 16), all[i]) << i;
}

TEST_F(GPTDatasetTest, TooLittleDataIsReportedWithPrefixAndSizes) {
  const std::string prefix = make_corpus("tiny", {2, 1});
  try {
    GPTDataset ds(std::make_shared<IndexedDataset>(prefix), config(prefix, 8, 0, true));
    ADD_FAILURE() << "3 tokens gave a sample of 9";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    for (const std::string& part : {prefix, std::string("3 tokens"), std::string("even one sample"), std::string("9 tokens")})
      EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
  auto c = config(prefix, 1, 4, true);
  c.split = "1,0,0";
  c.split_index = 2;  // the test split is empty
  EXPECT_THROW(GPTDataset(std::make_shared<IndexedDataset>(prefix), c), std::runtime_error);
  c.split_index = 0;
  EXPECT_NO_THROW(GPTDataset(std::make_shared<IndexedDataset>(prefix), c));  // epochs repeat the 3 tokens
}

TEST_F(GPTDatasetTest, VocabularyCheckRunsAtBuild) {
  const std::string prefix = make_corpus("c", {30, 30});  // ids 0..59
  auto c = config(prefix, 4, 3, true);
  c.vocab_size = 60;
  EXPECT_NO_THROW(build_gpt_dataset(c));
  c.vocab_size = 59;
  EXPECT_THROW(build_gpt_dataset(c), std::runtime_error);
}

TEST(GPTDatasetIndices, SampleIndexMatchesBruteForce) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int32_t> lengths(1 + rng() % 12);
    for (auto& l : lengths) l = static_cast<int32_t>(rng() % 9);  // zero-length documents too
    lengths[0] += 1;
    std::vector<int32_t> doc_index(lengths.size() * 2);
    for (size_t i = 0; i < doc_index.size(); ++i) doc_index[i] = static_cast<int32_t>(i % lengths.size());
    std::shuffle(doc_index.begin(), doc_index.end(), rng);
    const int64_t per_epoch = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
    const int64_t seq = 1 + rng() % 5;
    const auto index = build_sample_index(lengths, doc_index, seq, 2, per_epoch);
    const int64_t samples = (2 * per_epoch - 1) / seq;
    ASSERT_EQ(static_cast<int64_t>(index.size()), 2 * (samples + 1));
    // Row s > 0 locates token s*seq of the stream: the document-index position holding it.
    std::vector<std::pair<int64_t, int64_t>> where;
    for (size_t p = 0; p < doc_index.size(); ++p)
      for (int32_t k = 0; k < lengths[doc_index[p]]; ++k) where.emplace_back(p, k);
    EXPECT_EQ(index[0], 0);
    EXPECT_EQ(index[1], 0);
    for (int64_t s = 1; s <= samples; ++s) {
      EXPECT_EQ(index[2 * s], where[s * seq].first) << "trial " << trial << " sample " << s;
      EXPECT_EQ(index[2 * s + 1], where[s * seq].second) << "trial " << trial << " sample " << s;
    }
  }
}

TEST(GPTDatasetIndices, ShuffleIsASeededPermutation) {
  ShuffleRng a(9), b(9), c(10);
  const auto pa = build_shuffle_index(100, 130, &a);
  const auto pb = build_shuffle_index(100, 130, &b);
  const auto pc = build_shuffle_index(100, 130, &c);
  EXPECT_EQ(pa, pb);
  EXPECT_NE(pa, pc);
  for (int i = 0; i < 130; ++i) EXPECT_EQ(pa[i] < 100, i < 100) << i;  // the two ranges stay apart
  auto sorted = pa;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 130; ++i) EXPECT_EQ(sorted[i], i);
  for (uint64_t bound : {1ull, 2ull, 3ull, 1000ull})
    for (int i = 0; i < 100; ++i) EXPECT_LT(a.uniform(bound), bound);
}

TEST(GPTDatasetIndices, BlendingIsGreedyByError) {
  std::vector<int16_t> which;
  std::vector<int64_t> sample;
  build_blending_indices(std::vector<double>{0.5, 0.5}, 4, &which, &sample);
  EXPECT_EQ(which, (std::vector<int16_t>{0, 1, 0, 1}));
  EXPECT_EQ(sample, (std::vector<int64_t>{0, 0, 1, 1}));
  const std::vector<double> w{0.2, 0.5, 0.3};
  build_blending_indices(w, 1000, &which, &sample);
  std::vector<int64_t> count(3, 0);
  for (size_t i = 0; i < which.size(); ++i) {
    EXPECT_EQ(sample[i], count[which[i]]++);
    for (int d = 0; d < 3; ++d) EXPECT_LE(std::abs(count[d] - w[d] * static_cast<double>(i + 1)), 1.0) << i;
  }
}

TEST_F(GPTDatasetTest, BlendedDatasetFollowsTheWeights) {
  const std::string a = make_corpus("a", {100, 80, 120}, 0);
  const std::string b = make_corpus("b", {90, 60}, 1'000'000);
  GPTDatasetConfig c = config(a, 10, 1000, true);
  c.data_path = {{7.0, a}, {3.0, b}};  // normalised to 0.7 / 0.3
  auto ds = build_gpt_dataset(c);
  ASSERT_EQ(ds->size(), 1000);
  int64_t from_b = 0;
  for (int64_t i = 0; i < ds->size(); ++i) {
    const auto s = sample(*ds, i, 10);
    const bool in_b = s[0] >= 1'000'000;
    for (int32_t t : s) EXPECT_EQ(t >= 1'000'000, in_b);
    from_b += in_b;
  }
  EXPECT_NEAR(static_cast<double>(from_b), 300.0, 1.0);
  c.num_samples = 0;
  EXPECT_THROW(build_gpt_dataset(c), std::invalid_argument);
}

TEST_F(GPTDatasetTest, GlobalBatchDoesNotDependOnDataParallelSize) {
  const std::string prefix = make_corpus("c", {64, 100, 37, 80});
  auto ds = build_gpt_dataset(config(prefix, 8, 64, true));
  const int global = 8;
  for (int64_t step = 0; step < 4; ++step) {
    std::vector<std::multiset<std::vector<int32_t>>> batches;
    for (int dp : {1, 2, 4}) {
      std::set<int64_t> seen;
      std::multiset<std::vector<int32_t>> tokens;
      for (int rank = 0; rank < dp; ++rank)
        for (int64_t i : rank_batch_samples(step, rank, dp, global / dp)) {
          EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " read by two ranks";
          tokens.insert(sample(*ds, i, 8));
        }
      std::set<int64_t> expected;
      for (int64_t i = step * global; i < (step + 1) * global; ++i) expected.insert(i);
      EXPECT_EQ(seen, expected) << "dp " << dp;
      batches.push_back(tokens);
    }
    EXPECT_EQ(batches[0], batches[1]);
    EXPECT_EQ(batches[0], batches[2]);
  }
  EXPECT_EQ(rank_batch_samples(3, 1, 2, 4), (std::vector<int64_t>{28, 29, 30, 31}));
  EXPECT_THROW(rank_batch_samples(0, 2, 2, 4), std::invalid_argument);
}

}  // namespace
}  // namespace gf::data
