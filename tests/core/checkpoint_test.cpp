// Sharded checkpoints (core/io/checkpoint.h): the pieces of a flat range cover exactly its
// non-padding elements once; live pieces write the same shards as copies, in bounded chunks; a read
// drops the shard pages it copied; a checkpoint saved as tensor-parallel ranks and ZeRO shards would
// save it reads back bit for bit under other layouts, whole and in flat ranges, as plain safetensors
// and JSON. The refusals and the directory steps: tests/core/checkpoint_errors_test.cpp.
#include "core/io/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/io/crc32c.h"
#include "core/params/placement.h"
#include "core/io/safetensors.h"
#include "tests/core/checkpoint_test_util.h"
#include "tests/core/small_model_config.h"

namespace gf::ckpt {
namespace {

namespace fs = std::filesystem;

using namespace checkpoint_test;  // the helpers both halves share (checkpoint_test_util.h)

// pieces_of over flat ranges [lo, hi) of every tensor of `placement` (rank r): every piece lies
// inside the global shape, holds the values of the local elements at its global positions, and
// the pieces hold each non-padding element of the range exactly once and nothing else.
void check_pieces_cover(const Placement& placement, const std::string& what, std::mt19937_64& rng) {
  for (const TensorPlacement& t : placement.tensors()) {
    const int64_t n = t.numel(), gn = t.spec->global_numel();
    const size_t nd = t.spec->shape.size();
    // local[i] = i, exact in float for these sizes; where[g] = the local element at global g.
    ASSERT_LT(n, int64_t{1} << 24);
    std::vector<float> local(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) local[static_cast<size_t>(i)] = static_cast<float>(i);
    std::vector<float> where(static_cast<size_t>(gn), -1.0f);
    Placement::gather(t, local.data(), where.data());
    std::vector<char> padding(static_cast<size_t>(n), 1);
    for (float w : where)
      if (w >= 0) padding[static_cast<size_t>(w)] = 0;
    std::vector<std::pair<int64_t, int64_t>> ranges = {{0, n}, {0, 0}, {n - 1, n}, {0, 1}, {n / 2, n / 2}};
    std::uniform_int_distribution<int64_t> at(0, n);
    for (int k = 0; k < 12; ++k) {
      int64_t a = at(rng), b = at(rng);
      ranges.push_back({std::min(a, b), std::max(a, b)});
    }
    for (auto [lo, hi] : ranges) {
      const std::string ctx = what + " " + t.spec->name + " [" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
      const std::vector<Piece> pieces = lo == 0 && hi == n ? pieces_of(t, "x." + t.spec->name, local.data())
                                                           : pieces_of(t, "x." + t.spec->name, local.data(), lo, hi);
      EXPECT_LE(pieces.size(), (2 * (nd - 1) + 1) * t.pieces.size()) << ctx;
      std::vector<int> hits(static_cast<size_t>(n), 0);
      for (const Piece& p : pieces) {
        ASSERT_EQ(p.tensor, "x." + t.spec->name);
        ASSERT_EQ(p.shape, t.spec->shape);
        ASSERT_EQ(p.box.offset.size(), nd);
        ASSERT_EQ(p.box.extent.size(), nd);
        ASSERT_EQ(static_cast<int64_t>(p.data.size()), p.box.numel()) << ctx;
        ASSERT_GT(p.box.numel(), 0) << ctx;
        for (size_t d = 0; d < nd; ++d) {
          ASSERT_GE(p.box.offset[d], 0) << ctx;
          ASSERT_LE(p.box.offset[d] + p.box.extent[d], t.spec->shape[d]) << ctx;
        }
        // Walk the box row-major: element j sits at global multi-index off + idx.
        std::vector<int64_t> idx(nd, 0);
        for (int64_t j = 0; j < p.box.numel(); ++j) {
          int64_t g = 0;
          for (size_t d = 0; d < nd; ++d) g = g * t.spec->shape[d] + p.box.offset[d] + idx[d];
          const float v = p.data[static_cast<size_t>(j)];
          ASSERT_EQ(v, where[static_cast<size_t>(g)]) << ctx << " piece element " << j;
          const int64_t li = static_cast<int64_t>(v);
          ASSERT_GE(li, lo) << ctx;
          ASSERT_LT(li, hi) << ctx;
          ++hits[static_cast<size_t>(li)];
          for (size_t d = nd; d-- > 0;) {
            if (++idx[d] < p.box.extent[d]) break;
            idx[d] = 0;
          }
        }
      }
      for (int64_t i = 0; i < n; ++i) {
        const int want = i >= lo && i < hi && !padding[static_cast<size_t>(i)] ? 1 : 0;
        ASSERT_EQ(hits[static_cast<size_t>(i)], want) << ctx << " local element " << i;
      }
    }
  }
}

TEST(Checkpoint, PiecesOfCoverFlatRangesOfModelTensorsOnce) {
  std::mt19937_64 rng(1234);
  bool saw_padding = false;
  for (bool vocab_emb_dp : {false, true}) {
    for (const SmallConfig& cfg : {gpt2_small(vocab_emb_dp), llama_small(vocab_emb_dp)}) {
      for (int tp : {1, 2, 4}) {
        for (int r = 0; r < tp; ++r) {
          const Placement p = placement_of(cfg, r, tp);
          const TensorPlacement& emb = p.at((cfg.type == "LlamaConfig") ? "model.embed_tokens.weight" : "wte.weight");
          int64_t held = 0;
          for (const auto& s : emb.pieces) held += s.global.numel();
          saw_padding = saw_padding || held < emb.numel();
          check_pieces_cover(p,
                             std::string((cfg.type == "LlamaConfig") ? "llama" : "gpt2") + " tp " + std::to_string(tp) + " rank " +
                                 std::to_string(r) + (vocab_emb_dp ? " vocab replicated" : " vocab split"),
                             rng);
        }
      }
    }
  }
  EXPECT_TRUE(saw_padding) << "the configs are meant to pad the vocabulary";
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A synchronous save's pieces read the live tensors while the shard is written (live_pieces_of);
// an asynchronous one's are copies (pieces_of). Over flat ranges of every tensor of `placement`
// (ZeRO shards cut rows; a tensor split on a middle dim gives boxes that are not contiguous locally)
// both write the same shard file byte for byte and the same index fragment (the pieces' CRCs), and
// the reader is asked only for elements of the range.
void check_live_pieces_write_the_same(const Placement& placement, const std::string& what, const std::string& dir,
                                      std::mt19937_64& rng) {
  std::vector<Piece> copied, live;
  std::vector<std::vector<float>> values;  // kept alive until the live pieces are written
  int64_t out_of_range = 0, read_elements = 0, boxed_elements = 0;
  for (const TensorPlacement& t : placement.tensors()) {
    const int64_t n = t.numel();
    std::vector<float>& local = values.emplace_back(static_cast<size_t>(n));
    std::normal_distribution<float> normal;
    for (float& v : local) v = normal(rng);
    std::uniform_int_distribution<int64_t> at(0, n);
    std::vector<std::pair<int64_t, int64_t>> ranges = {{0, n}};
    for (int k = 0; k < 3; ++k) {
      const int64_t a = at(rng), b = at(rng);
      ranges.push_back({std::min(a, b), std::max(a, b)});
    }
    for (auto [lo, hi] : ranges) {
      for (Piece& p : pieces_of(t, "x." + t.spec->name, local.data(), lo, hi)) {
        boxed_elements += p.numel();
        copied.push_back(std::move(p));
      }
      const float* v = local.data();
      auto reader = [v, lo, hi, &out_of_range, &read_elements](int64_t i0, int64_t m, float* dst) {
        if (i0 < lo || i0 + m > hi) ++out_of_range;
        read_elements += m;
        std::memcpy(dst, v + i0, sizeof(float) * static_cast<size_t>(m));
      };
      for (Piece& p : live_pieces_of(t, "x." + t.spec->name, reader, lo, hi)) {
        EXPECT_TRUE(p.data.empty()) << what;
        live.push_back(std::move(p));
      }
    }
  }
  ASSERT_EQ(copied.size(), live.size()) << what;
  fs::create_directories(dir + "/a");
  fs::create_directories(dir + "/b");
  const std::string fa = write_shard(dir + "/a", 3, copied), fb = write_shard(dir + "/b", 3, live);
  EXPECT_EQ(fa, fb) << what;
  const std::string a = file_bytes(dir + "/a/" + shard_file(3)), b = file_bytes(dir + "/b/" + shard_file(3));
  EXPECT_GT(a.size(), 0u) << what;
  EXPECT_TRUE(a == b) << what << ": the shard files differ (" << a.size() << " and " << b.size() << " bytes)";
  EXPECT_EQ(out_of_range, 0) << what;
  EXPECT_EQ(read_elements, boxed_elements) << what << ": every element of the boxes read once";
  fs::remove_all(dir + "/a");
  fs::remove_all(dir + "/b");
}

TEST(Checkpoint, LivePiecesWriteTheSameShardAsCopies) {
  TempDir dir;
  ParamTable table;
  table.add({"w3", {3, 8, 5}, split_dim(1, 2), Init::kNormal, 1.0f, true});  // parts on a middle dim
  table.add({"e3", {10, 4, 3}, vocab_rows(), Init::kNormal, 1.0f, true});
  table.add({"b1", {8}, split_dim(0), Init::kZeros, 0.0f, false});
  const auto shared = std::make_shared<const ParamTable>(std::move(table));
  std::mt19937_64 rng(7);
  for (int tp : {1, 2, 4})
    for (int r = 0; r < tp; ++r)
      check_live_pieces_write_the_same(Placement(shared, ParamLayout{tp, true, 12}, r),
                                       "3-D tp " + std::to_string(tp) + " rank " + std::to_string(r), dir.path(), rng);
  for (int r = 0; r < 2; ++r)
    check_live_pieces_write_the_same(placement_of(gpt2_small(false), r, 2), "gpt2 tp 2 rank " + std::to_string(r),
                                     dir.path(), rng);
}

TEST(Checkpoint, ALivePieceIsWrittenInBoundedChunks) {
  // One 3-million-float tensor (12 MiB): the reader is called with at most 4 MiB (2^20 floats) at a time.
  TempDir dir;
  ParamTable table;
  table.add({"big", {3, 1000000}, no_split(), Init::kNormal, 1.0f, true});
  const auto shared = std::make_shared<const ParamTable>(std::move(table));
  const Placement pl(shared, ParamLayout{1, true, 1}, 0);
  const TensorPlacement& t = pl.at("big");
  std::vector<float> local(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < local.size(); ++i) local[i] = static_cast<float>(i % 9973);
  int64_t largest = 0, calls = 0;
  auto reader = [&](int64_t i0, int64_t m, float* dst) {
    largest = std::max(largest, m);
    ++calls;
    std::memcpy(dst, local.data() + i0, sizeof(float) * static_cast<size_t>(m));
  };
  const std::string frag_live = write_shard(dir.path(), 0, live_pieces_of(t, "big", reader));
  EXPECT_LE(largest, int64_t{1} << 20);
  EXPECT_EQ(calls, 3);  // 3,000,000 contiguous floats in chunks of 1,048,576
  const std::string live_file = file_bytes(dir / shard_file(0));
  fs::remove(dir / shard_file(0));
  EXPECT_EQ(write_shard(dir.path(), 0, pieces_of(t, "big", local.data())), frag_live);
  EXPECT_TRUE(file_bytes(dir / shard_file(0)) == live_file);
}

// This process's resident pages of mapped files (RssFile in /proc/self/status), in KiB.
int64_t rss_file_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("RssFile:", 0) == 0) return std::stoll(line.substr(8));
  return -1;
}

// A resume maps each shard; the pages a read has copied out leave the process's resident set (they
// stay in the page cache), so reading a 32 MiB tensor does not leave 32 MiB more resident; and a
// second read of the same tensor, after its pages were dropped, gives the same bits.
TEST(Checkpoint, AReadDropsTheShardPagesItCopied) {
  TempDir dir;
  ParamTable table;
  table.add({"big", {8, 1 << 20}, no_split(), Init::kNormal, 1.0f, true});
  const auto shared = std::make_shared<const ParamTable>(std::move(table));
  const Placement pl(shared, ParamLayout{1, true, 1}, 0);
  const TensorPlacement& t = pl.at("big");
  std::vector<float> local(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < local.size(); ++i) local[i] = static_cast<float>(i % 65521) * 0.5f;
  const std::string root = dir / "checkpoint";
  const std::string tmp = begin_save(root, "step_1");
  write_index(tmp, {write_shard(tmp, 0, pieces_of(t, "big", local.data()))}, nlohmann::json{{"step", 1}});
  commit_save(root, "step_1", 2);
  Reader rd = Reader::open(root);
  std::vector<float> got(local.size(), -1.0f);
  const int64_t before = rss_file_kib();
  ASSERT_GE(before, 0) << "no RssFile line in /proc/self/status";
  rd.read("big", t, got.data());
  const int64_t after = rss_file_kib();
  ASSERT_EQ(std::memcmp(got.data(), local.data(), local.size() * sizeof(float)), 0);
  // 32 MiB were mapped and read (the CRC pass and the copy); a few pages at the ends may stay.
  EXPECT_LT(after - before, 4 * 1024) << "RssFile grew from " << before << " to " << after << " KiB";
  std::fill(got.begin(), got.end(), -1.0f);
  rd.read("big", t, got.data(), 5, t.numel() - 7);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float want = i >= 5 && i < t.numel() - 7 ? local[static_cast<size_t>(i)] : -1.0f;
    ASSERT_EQ(std::memcmp(&want, &got[static_cast<size_t>(i)], sizeof(float)), 0) << "element " << i;
  }
}

// 1-D and 3-D tensors: split in parts on a middle dim, a vocabulary dim padded (12 rows for 10).
TEST(Checkpoint, PiecesOfCoverFlatRangesOfOneAndThreeDimTensors) {
  ParamTable table;
  table.add({"w3", {3, 8, 5}, split_dim(1, 2), Init::kNormal, 1.0f, true});
  table.add({"e3", {10, 4, 3}, vocab_rows(), Init::kNormal, 1.0f, true});
  table.add({"b1", {8}, split_dim(0), Init::kZeros, 0.0f, false});
  table.add({"v1", {10}, vocab_rows(), Init::kZeros, 0.0f, false});
  const auto shared = std::make_shared<const ParamTable>(std::move(table));
  std::mt19937_64 rng(99);
  for (bool vocab_split : {true, false}) {
    for (int tp : {1, 2, 4}) {
      for (int r = 0; r < tp; ++r) {
        const Placement p(shared, ParamLayout{tp, vocab_split, 12}, r);
        check_pieces_cover(p, "tp " + std::to_string(tp) + " rank " + std::to_string(r), rng);
      }
    }
  }
}

constexpr float kUntouched = -7777.0f;

// Every rank of `read_cfg` at `tp` reads every tensor whole and every moment in flat ranges:
// bit for bit the values scattered from the full tensors, padding zero, nothing outside the range
// written.
void check_reads(const std::string& path, const Model& m, const SmallConfig& read_cfg, int tp, std::mt19937_64& rng) {
  Reader rd = Reader::open(path);
  for (int r = 0; r < tp; ++r) {
    const Placement p = placement_of(read_cfg, r, tp);
    for (const TensorPlacement& t : p.tensors()) {
      const std::string& n = t.spec->name;
      const std::string ctx = n + " tp " + std::to_string(tp) + " rank " + std::to_string(r) +
                              (read_cfg.vocab_emb_dp ? " vocab replicated" : " vocab split");
      const size_t numel = static_cast<size_t>(t.numel());
      std::vector<float> want(numel), got(numel, kUntouched);
      Placement::scatter(t, m.full.at(n).data(), want.data());
      rd.read(n, t, got.data());
      ASSERT_EQ(std::memcmp(want.data(), got.data(), numel * sizeof(float)), 0) << ctx;
      std::uniform_int_distribution<int64_t> at(0, t.numel());
      for (const std::string prefix : {"optimizer.exp_avg.", "optimizer.exp_avg_sq."}) {
        Placement::scatter(t, m.full.at(prefix + n).data(), want.data());
        std::vector<std::pair<int64_t, int64_t>> ranges = {{0, t.numel()}};
        for (int k = 0; k < 3; ++k) {
          const int64_t a = at(rng), b = at(rng);
          ranges.push_back({std::min(a, b), std::max(a, b)});
        }
        for (auto [lo, hi] : ranges) {
          std::fill(got.begin(), got.end(), kUntouched);
          rd.read(prefix + n, t, got.data(), lo, hi);
          for (int64_t i = 0; i < t.numel(); ++i) {
            const float expect = i >= lo && i < hi ? want[static_cast<size_t>(i)] : kUntouched;
            ASSERT_EQ(std::memcmp(&expect, &got[static_cast<size_t>(i)], sizeof(float)), 0)
                << ctx << " " << prefix << " [" << lo << ", " << hi << ") element " << i;
          }
        }
      }
    }
  }
}

TEST(Checkpoint, RoundTripAcrossLayouts) {
  std::mt19937_64 rng(5);
  for (const bool llama : {false, true}) {
    for (const bool saved_vocab_dp : {false, true}) {
      TempDir dir;
      const SmallConfig cfg = llama ? llama_small(saved_vocab_dp) : gpt2_small(saved_vocab_dp);
      const Model m = random_model(cfg, 17);
      // The ZeRO cut falls inside a tensor, mid-row.
      const Placement p0 = placement_of(cfg, 0, 2);
      const int64_t cut = zero_cut(p0);
      bool mid_row = false;
      for (const TensorPlacement& t : p0.tensors())
        mid_row = mid_row || (cut > t.offset && cut < t.offset + t.numel() && (cut - t.offset) % t.local_shape.back());
      ASSERT_TRUE(mid_row);
      save(dir / "checkpoint", "step_10", 10, m, 2);
      const Reader rd = Reader::open(dir.path());  // an output_dir
      EXPECT_EQ(rd.state().at("step"), 10);
      for (const auto& [name, full] : m.full) {
        ASSERT_TRUE(rd.has(name)) << name;
        EXPECT_EQ(Reader::open(dir / "checkpoint").read_full(name), full) << name;
      }
      EXPECT_EQ(rd.names().size(), m.full.size());
      for (const bool read_vocab_dp : {false, true}) {
        const SmallConfig read_cfg = llama ? llama_small(read_vocab_dp) : gpt2_small(read_vocab_dp);
        for (int tp : {1, 2, 4}) check_reads(dir / "checkpoint", m, read_cfg, tp, rng);
      }
    }
  }
}

// The shard files are plain safetensors and the index plain JSON.
TEST(Checkpoint, ShardsAreSafetensorsWithTheIndexedSizesAndChecksums) {
  TempDir dir;
  const Model m = random_model(gpt2_small(false), 3);
  save(dir.path(), "step_1", 1, m, 2);
  const std::string ck = dir / "step_1";
  const nlohmann::json index = nlohmann::json::parse(std::ifstream(ck + "/index.json"));
  EXPECT_EQ(index.at("format"), "gridformer-checkpoint");
  EXPECT_EQ(index.at("version"), 1);
  EXPECT_EQ(index.at("files").size(), 4u);
  for (auto& [file, info] : index.at("files").items()) {
    std::ifstream in(ck + "/" + file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(static_cast<int64_t>(bytes.size()), info.at("bytes").get<int64_t>()) << file;
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", crc32c(bytes.data(), bytes.size()));
    EXPECT_EQ(info.at("crc32c").get<std::string>(), std::string(hex)) << file;
    const SafeTensorsFile st = SafeTensorsFile::open(ck + "/" + file);
    EXPECT_EQ(st.metadata().at("format"), "gridformer");
  }
  const auto& wte = index.at("tensors").at("wte.weight");
  EXPECT_EQ(wte.at("shape").get<std::vector<int64_t>>(), (std::vector<int64_t>{1000, 48}));
  EXPECT_EQ(wte.at("dtype"), "F32");
  ASSERT_EQ(wte.at("pieces").size(), 2u);  // rows 0..511 from rank 0, 512..999 from rank 1
  const auto& second = wte.at("pieces")[1];
  EXPECT_EQ(second.at("file"), "rank_00001.safetensors");
  EXPECT_EQ(second.at("offset").get<std::vector<int64_t>>(), (std::vector<int64_t>{512, 0}));
  EXPECT_EQ(second.at("extent").get<std::vector<int64_t>>(), (std::vector<int64_t>{488, 48}));
  const SafeTensorsFile st = SafeTensorsFile::open(ck + "/rank_00001.safetensors");
  const std::vector<float> rows = st.floats(second.at("key").get<std::string>());
  const std::vector<float>& full = m.full.at("wte.weight");
  EXPECT_TRUE(std::equal(rows.begin(), rows.end(), full.begin() + 512 * 48));
}

}  // namespace
}  // namespace gf::ckpt
