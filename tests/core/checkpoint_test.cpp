// Sharded checkpoints (core/io/checkpoint.h): the pieces of a flat range cover exactly its
// non-padding elements once; a checkpoint saved as tensor-parallel ranks and ZeRO shards would
// save it reads back bit for bit under other layouts, whole and in flat ranges; damaged,
// incomplete or mismatched checkpoints are refused with messages that name what is wrong; the
// directory steps (latest, pruning, temporaries, modes, resolve) and a file-size limit.
#include "core/io/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/io/crc32c.h"
#include "core/params/placement.h"
#include "core/io/safetensors.h"
#include "models/arch/gpt2.h"
#include "models/arch/llama.h"
#include "tests/core/small_model_config.h"

namespace gf::ckpt {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed at the end.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (fs::path(::testing::TempDir()) / ("gf_ckpt_" + std::string(info->test_suite_name()) + "_" + info->name() +
                                               "_" + std::to_string(::getpid())))
                .string();
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return (fs::path(path_) / rel).string(); }

 private:
  std::string path_;
};

using test::gpt2_small;
using test::SmallConfig;

SmallConfig llama_small(bool vocab_emb_dp) {
  SmallConfig c;
  c.type = "LlamaConfig";
  c.arch = "LlamaForCausalLM";
  c.vocab_size = 1000;
  c.seq_length = 16;
  c.max_position_embeddings = 16;
  c.hidden_size = 64;
  c.num_layers = 2;
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.intermediate_size = 96;
  c.hidden_act = "silu";
  c.vocab_emb_dp = vocab_emb_dp;
  return c;
}

Placement placement_of(const SmallConfig& c, int rank, int tp) {
  return (c.type == "LlamaConfig") ? LlamaForCausalLM::make_placement(c, c.layout(tp), rank)
                      : GPT2LMHeadModel::make_placement(c, c.layout(tp), rank);
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

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

// Full tensors of every parameter (random), and of two optimizer moments.
struct Model {
  SmallConfig cfg;
  std::map<std::string, std::vector<float>> full;  // by saved name
};

Model random_model(const SmallConfig& cfg, uint64_t seed) {
  Model m{cfg, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const Placement one = placement_of(cfg, 0, 1);
  for (const ParamSpec& s : one.table().specs()) {
    for (const std::string prefix : {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."}) {
      std::vector<float>& v = m.full[prefix + s.name];
      v.resize(static_cast<size_t>(s.global_numel()));
      for (float& x : v) x = normal(rng);
    }
  }
  return m;
}

// The arena cut between ZeRO shard 0 and 1 on a rank: mid-row of the first attention weight.
int64_t zero_cut(const Placement& p) {
  for (const TensorPlacement& t : p.tensors())
    if (t.spec->shape.size() == 2 && t.spec->name.find("attn") != std::string::npos)
      return t.offset + t.numel() / 2 + 5;
  return p.total_floats() / 2 + 5;
}

// Saves `m` as tp tensor-parallel ranks x 2 ZeRO shards would: rank (d, r) = d * tp + r writes
// the weights when d == 0 (replicated ones from r == 0 only) and both moments over its shard
// [cut_d, cut_d+1) of its arena (replicated ones from r == 0 only). Then the index and the commit.
std::vector<std::string> save(const std::string& root, const std::string& name, int64_t step, const Model& m, int tp,
                              int keep_max = 0, const std::function<bool(int rank)>& writes = nullptr) {
  const std::string tmp = begin_save(root, name);
  std::vector<std::string> fragments;
  for (int d = 0; d < 2; ++d) {
    for (int r = 0; r < tp; ++r) {
      const int rank = d * tp + r;
      if (writes && !writes(rank)) continue;
      const Placement p = placement_of(m.cfg, r, tp);
      const int64_t cut = zero_cut(p);
      const int64_t begin = d == 0 ? 0 : cut, end = d == 0 ? cut : p.total_floats();
      std::vector<Piece> pieces;
      for (const TensorPlacement& t : p.tensors()) {
        if (t.replicated && r != 0) continue;
        const std::string& n = t.spec->name;
        std::vector<float> local(static_cast<size_t>(t.numel()));
        if (d == 0) {
          Placement::scatter(t, m.full.at(n).data(), local.data());
          for (Piece& piece : pieces_of(t, n, local.data())) pieces.push_back(std::move(piece));
        }
        const int64_t lo = std::clamp(begin - t.offset, int64_t{0}, t.numel());
        const int64_t hi = std::clamp(end - t.offset, int64_t{0}, t.numel());
        if (lo >= hi) continue;
        for (const std::string prefix : {"optimizer.exp_avg.", "optimizer.exp_avg_sq."}) {
          Placement::scatter(t, m.full.at(prefix + n).data(), local.data());
          for (Piece& piece : pieces_of(t, prefix + n, local.data(), lo, hi)) pieces.push_back(std::move(piece));
        }
      }
      fragments.push_back(write_shard(tmp, rank, pieces));
    }
  }
  write_index(tmp, fragments, {{"step", step}, {"layout", {{"tp", tp}, {"dp", 2}}}});
  return commit_save(root, name, keep_max);
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

// ---- errors ----

class CheckpointErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    m_ = random_model(gpt2_small(false), 11);
    save(dir_.path(), "step_5", 5, m_, 2);
    ck_ = dir_ / "step_5";
  }
  TempDir dir_;
  Model m_;
  std::string ck_;
};

TEST_F(CheckpointErrors, MissingShard) {
  const std::string shard = ck_ + "/rank_00001.safetensors";
  ASSERT_EQ(::unlink(shard.c_str()), 0);
  const std::string msg = message_of([&] { Reader::open(dir_.path()); });
  EXPECT_TRUE(contains(msg, shard)) << msg;
  EXPECT_TRUE(contains(msg, "incomplete")) << msg;
  EXPECT_TRUE(contains(msg, "holds ")) << msg;  // and a tensor in it
}

TEST_F(CheckpointErrors, TruncatedShard) {
  const std::string shard = ck_ + "/rank_00002.safetensors";
  const auto size = fs::file_size(shard);
  fs::resize_file(shard, size - 4);
  const std::string msg = message_of([&] { Reader::open(ck_); });
  EXPECT_TRUE(contains(msg, shard)) << msg;
  EXPECT_TRUE(contains(msg, std::to_string(size))) << msg;
  EXPECT_TRUE(contains(msg, "truncated")) << msg;
}

TEST_F(CheckpointErrors, FlippedByteFailsTheChecksumNamingFileAndTensor) {
  const std::string shard = ck_ + "/rank_00001.safetensors";
  std::string bytes;
  {
    std::ifstream in(shard, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  char good[9], bad[9];
  std::snprintf(good, sizeof good, "%08x", crc32c(bytes.data(), bytes.size()));
  bytes[bytes.size() - 3] ^= 0x10;  // in the data
  std::snprintf(bad, sizeof bad, "%08x", crc32c(bytes.data(), bytes.size()));
  {
    std::ofstream out(shard, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  Reader rd = Reader::open(ck_);  // sizes agree: found on reading
  const Placement p = placement_of(m_.cfg, 0, 1);
  const TensorPlacement& t = p.at("wte.weight");  // half of it is in rank 1's shard
  std::vector<float> local(static_cast<size_t>(t.numel()));
  const std::string msg = message_of([&] { rd.read("wte.weight", t, local.data()); });
  EXPECT_TRUE(contains(msg, shard)) << msg;
  EXPECT_TRUE(contains(msg, "wte.weight")) << msg;
  EXPECT_TRUE(contains(msg, good)) << msg;
  EXPECT_TRUE(contains(msg, bad)) << msg;
  // Rank 0's shard is intact: what lies there alone still reads.
  const Placement p2 = placement_of(m_.cfg, 0, 2);
  const TensorPlacement& t2 = p2.at("wte.weight");
  std::vector<float> want(static_cast<size_t>(t2.numel())), got(want.size());
  Placement::scatter(t2, m_.full.at("wte.weight").data(), want.data());
  rd.read("wte.weight", t2, got.data());
  EXPECT_EQ(want, got);
}

TEST_F(CheckpointErrors, OtherShapeNamesBoth) {
  ParamTable table;
  table.add({"ln_f.weight", {40}, no_split(), Init::kOnes, 0.0f, false});
  const Placement p(std::move(table));
  std::vector<float> local(40);
  Reader rd = Reader::open(ck_);
  const std::string msg = message_of([&] { rd.read("ln_f.weight", p.at("ln_f.weight"), local.data()); });
  EXPECT_TRUE(contains(msg, "ln_f.weight")) << msg;
  EXPECT_TRUE(contains(msg, "[48]")) << msg;
  EXPECT_TRUE(contains(msg, "[40]")) << msg;
  EXPECT_TRUE(
      contains(message_of([&] { rd.read("no.such.weight", p.at("ln_f.weight"), local.data()); }), "no.such.weight"));
}

TEST_F(CheckpointErrors, UncoveredElementIsNamed) {
  // Only tensor-parallel rank 0 of the weights' ZeRO shard 0 saved: half of every split tensor is missing.
  TempDir other;
  save(other.path(), "part", 1, m_, 2, 0, [](int rank) { return rank == 0; });
  Reader rd = Reader::open(other.path());
  const Placement p = placement_of(m_.cfg, 1, 2);
  const TensorPlacement& t = p.at("h.0.mlp.c_fc.weight");  // [48, 192] split by columns
  std::vector<float> local(static_cast<size_t>(t.numel()));
  const std::string msg = message_of([&] { rd.read("h.0.mlp.c_fc.weight", t, local.data()); });
  EXPECT_TRUE(contains(msg, "h.0.mlp.c_fc.weight")) << msg;
  EXPECT_TRUE(contains(msg, "element [0, 96]")) << msg;  // rank 1's first column
  EXPECT_TRUE(contains(message_of([&] { rd.read_full("wte.weight"); }), "element [512, 0]"));
  // What rank 0 holds is there.
  const Placement p0 = placement_of(m_.cfg, 0, 2);
  const TensorPlacement& t0 = p0.at("h.0.mlp.c_fc.weight");
  std::vector<float> want(static_cast<size_t>(t0.numel()));
  Placement::scatter(t0, m_.full.at("h.0.mlp.c_fc.weight").data(), want.data());
  rd.read("h.0.mlp.c_fc.weight", t0, local.data());
  EXPECT_EQ(local, want);
}

TEST_F(CheckpointErrors, IndexRefusesOverlapsAndDisagreeingShapes) {
  const std::string tmp = begin_save(dir_.path(), "bad");
  const Placement p = placement_of(m_.cfg, 0, 2);
  const TensorPlacement& ln = p.at("ln_f.weight");  // replicated: both ranks hold all of it
  const std::vector<float> ones(48, 1.0f);
  const std::string a = write_shard(tmp, 0, pieces_of(ln, "ln_f.weight", ones.data()));
  const std::string b = write_shard(tmp, 1, pieces_of(ln, "ln_f.weight", ones.data()));
  std::string msg = message_of([&] { write_index(tmp, {a, b}, {{"step", 1}}); });
  EXPECT_TRUE(contains(msg, "ln_f.weight")) << msg;
  EXPECT_TRUE(contains(msg, "overlaps")) << msg;
  EXPECT_TRUE(contains(msg, "rank_00000.safetensors")) << msg;
  EXPECT_TRUE(contains(msg, "rank_00001.safetensors")) << msg;
  // The same name with another shape on rank 2.
  Piece other{"ln_f.weight", {64}, Box{{0}, {64}}, std::vector<float>(64, 0.0f)};
  const std::string c = write_shard(tmp, 2, {other});
  msg = message_of([&] { write_index(tmp, {a, c}, {{"step", 1}}); });
  EXPECT_TRUE(contains(msg, "ln_f.weight")) << msg;
  EXPECT_TRUE(contains(msg, "[48]")) << msg;
  EXPECT_TRUE(contains(msg, "[64]")) << msg;
  EXPECT_TRUE(contains(msg, "rank_00000.safetensors")) << msg;
  EXPECT_TRUE(contains(msg, "rank_00002.safetensors")) << msg;
  EXPECT_FALSE(fs::exists(tmp + "/index.json"));
  abort_save(dir_.path(), "bad");
  EXPECT_FALSE(fs::exists(tmp));
}

TEST_F(CheckpointErrors, IndexNotJsonOrNotOurs) {
  const std::string index = ck_ + "/index.json";
  {
    std::ofstream out(index, std::ios::trunc);
    out << "{\"format\": \"gridformer-checkpoint\", \"version\": ";
  }
  std::string msg = message_of([&] { Reader::open(ck_); });
  EXPECT_TRUE(contains(msg, index)) << msg;
  EXPECT_TRUE(contains(msg, "not JSON")) << msg;
  {
    std::ofstream out(index, std::ios::trunc);
    out << R"({"format": "gridformer-checkpoint", "version": 2, "state": {}, "files": {}, "tensors": {}})";
  }
  msg = message_of([&] { Reader::open(ck_); });
  EXPECT_TRUE(contains(msg, index)) << msg;
  EXPECT_TRUE(contains(msg, "version 2")) << msg;
  {
    std::ofstream out(index, std::ios::trunc);
    out << R"({"weight_map": {}})";
  }
  msg = message_of([&] { Reader::open(ck_); });
  EXPECT_TRUE(contains(msg, index)) << msg;
  EXPECT_TRUE(contains(msg, "format")) << msg;
}

// ---- the directory steps ----

std::string latest_of(const std::string& root) {
  std::ifstream in(root + "/latest");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A one-tensor checkpoint: ln_f.weight = value everywhere.
void save_small(const std::string& root, const std::string& name, int64_t step, float value, int keep_max,
                std::vector<std::string>* removed = nullptr, bool healthy = true) {
  const Placement p = placement_of(gpt2_small(false), 0, 1);
  const std::vector<float> v(48, value);
  const std::string tmp = begin_save(root, name);
  const std::string f = write_shard(tmp, 0, pieces_of(p.at("ln_f.weight"), "ln_f.weight", v.data()));
  write_index(tmp, {f}, healthy ? nlohmann::json{{"step", step}} : nlohmann::json{{"step", step}, {"healthy", false}});
  const auto gone = commit_save(root, name, keep_max);
  if (removed) *removed = gone;
}

float small_value(const std::string& path) { return Reader::open(path).read_full("ln_f.weight").at(0); }

TEST(CheckpointDirs, LatestNamesTheNewestAndPruningKeepsIt) {
  TempDir dir;
  const std::string root = dir / "checkpoint";
  std::vector<std::string> removed;
  save_small(root, "step_1", 1, 1.0f, 2, &removed);
  save_small(root, "step_2", 2, 2.0f, 2, &removed);
  EXPECT_TRUE(removed.empty());
  EXPECT_EQ(latest_of(root), "step_2\n");
  save_small(root, "step_3", 3, 3.0f, 2, &removed);
  EXPECT_EQ(latest_of(root), "step_3\n");
  EXPECT_EQ(removed, std::vector<std::string>{root + "/step_1"});
  EXPECT_FALSE(fs::exists(root + "/step_1"));
  EXPECT_EQ(small_value(root), 3.0f);
  EXPECT_EQ(small_value(dir.path()), 3.0f);
  // Ordered by state.step, not by name: step_10 is newer than step_9.
  save_small(root, "step_9", 9, 9.0f, 0);
  save_small(root, "step_10", 10, 10.0f, 3, &removed);
  EXPECT_EQ(removed, std::vector<std::string>{root + "/step_2"});
  // A save of an earlier step (a run resumed from step_3 and saving at step 4 under a new name)
  // is `latest` and stays although it is the oldest; the others go beyond keep_max 1.
  save_small(root, "resumed_4", 4, 4.0f, 1, &removed);
  EXPECT_EQ(latest_of(root), "resumed_4\n");
  EXPECT_EQ(removed.size(), 3u);
  EXPECT_TRUE(fs::exists(root + "/resumed_4/index.json"));
  EXPECT_FALSE(fs::exists(root + "/step_10"));
  EXPECT_EQ(small_value(root), 4.0f);
  // Directories that are not our checkpoints are left alone.
  fs::create_directories(root + "/notes");
  save_small(root, "step_5", 5, 5.0f, 1, &removed);
  EXPECT_EQ(removed, std::vector<std::string>{root + "/resumed_4"});
  EXPECT_TRUE(fs::exists(root + "/notes"));
  // Saving again under an existing name replaces it.
  save_small(root, "step_5", 5, 55.0f, 1, &removed);
  EXPECT_TRUE(removed.empty());
  EXPECT_EQ(small_value(root), 55.0f);
  for (const auto& e : fs::directory_iterator(root))
    EXPECT_NE(e.path().filename().string().rfind(".", 0), 0u) << "left behind: " << e.path();
}

// While the newest checkpoint is not recorded healthy, the newest healthy one before it is kept beyond
// keep_max (a resume prefers it); once a healthy one is newest, it goes as any other.
TEST(CheckpointDirs, PruningKeepsTheNewestHealthyWhileNewerOnesAreNot) {
  TempDir dir;
  const std::string root = dir / "checkpoint";
  std::vector<std::string> removed;
  save_small(root, "step_1", 1, 1.0f, 1, &removed);
  save_small(root, "step_2", 2, 2.0f, 1, &removed, false);
  EXPECT_TRUE(removed.empty());
  save_small(root, "step_3", 3, 3.0f, 1, &removed, false);
  EXPECT_EQ(removed, std::vector<std::string>{root + "/step_2"});
  const std::vector<Listed> all = list_checkpoints(root);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name, "step_1");
  EXPECT_TRUE(all[0].healthy);
  EXPECT_EQ(all[1].name, "step_3");
  EXPECT_FALSE(all[1].healthy);
  save_small(root, "step_4", 4, 4.0f, 1, &removed);
  EXPECT_EQ(removed, (std::vector<std::string>{root + "/step_1", root + "/step_3"}));
  EXPECT_TRUE(list_checkpoints(dir / "absent").empty());
}

// A flipped bit in a shard: verify() names the file, both CRCs and the tensor piece whose own CRC differs.
TEST(CheckpointVerify, NamesTheDamagedPiece) {
  TempDir dir;
  const std::string root = dir / "checkpoint";
  save_small(root, "step_1", 1, 1.0f, 0);
  EXPECT_EQ(Reader::open(root).verify(), "");
  const std::string shard = root + "/step_1/rank_00000.safetensors";
  std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-3, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  c ^= 0x04;
  f.seekp(-3, std::ios::end);
  f.write(&c, 1);
  f.close();
  const std::string problem = Reader::open(root).verify();
  EXPECT_NE(problem.find("rank_00000.safetensors: CRC-32C"), std::string::npos) << problem;
  EXPECT_NE(problem.find("damaged: tensor ln_f.weight box"), std::string::npos) << problem;
  try {
    (void)Reader::open(root).read_full("ln_f.weight");
    ADD_FAILURE() << "a damaged shard was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("damaged: tensor ln_f.weight"), std::string::npos) << e.what();
  }
}

TEST(CheckpointDirs, StaleTemporaryIsReplacedAndAbortKeepsThePrevious) {
  TempDir dir;
  const std::string root = dir.path();
  save_small(root, "step_1", 1, 1.0f, 0);
  fs::create_directories(root + "/.step_2.tmp");
  std::ofstream(root + "/.step_2.tmp/rank_00000.safetensors") << "left by a crash";
  const std::string tmp = begin_save(root, "step_2");
  EXPECT_EQ(tmp, root + "/.step_2.tmp");
  EXPECT_TRUE(fs::is_empty(tmp));
  const std::vector<float> v(48, 2.0f);
  const Placement p = placement_of(gpt2_small(false), 0, 1);
  write_shard(tmp, 0, pieces_of(p.at("ln_f.weight"), "ln_f.weight", v.data()));
  abort_save(root, "step_2");
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(root + "/step_2"));
  EXPECT_EQ(latest_of(root), "step_1\n");
  EXPECT_EQ(small_value(root), 1.0f);
  // A commit without an index is refused.
  begin_save(root, "step_3");
  EXPECT_TRUE(contains(message_of([&] { commit_save(root, "step_3", 0); }), "index.json"));
  EXPECT_EQ(latest_of(root), "step_1\n");
  EXPECT_TRUE(contains(message_of([&] { begin_save(root, "../x"); }), "../x"));
}

mode_t mode_of(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(CheckpointDirs, ModesUnderTheUmask) {
  struct RestoreUmask {
    mode_t old = ::umask(022);
    ~RestoreUmask() { ::umask(old); }
  } restore;
  for (const mode_t mask : {mode_t{022}, mode_t{077}}) {
    ::umask(mask);
    TempDir dir;
    const std::string root = dir / "out/checkpoint";
    save_small(root, "step_1", 1, 1.0f, 0);
    const mode_t d = 0750 & ~mask, f = 0640 & ~mask;
    EXPECT_EQ(mode_of(dir / "out"), d) << std::oct << mask;
    EXPECT_EQ(mode_of(root), d);
    EXPECT_EQ(mode_of(root + "/step_1"), d);
    EXPECT_EQ(mode_of(root + "/step_1/index.json"), f);
    EXPECT_EQ(mode_of(root + "/step_1/rank_00000.safetensors"), f);
    EXPECT_EQ(mode_of(root + "/latest"), f);
  }
}

TEST(CheckpointDirs, Resolve) {
  TempDir dir;
  const std::string out = dir / "run", root = out + "/checkpoint";
  EXPECT_EQ(resolve(out, true), "");  // does not exist yet
  EXPECT_TRUE(contains(message_of([&] { resolve(out); }), out));
  fs::create_directories(root);
  EXPECT_EQ(resolve(out, true), "");  // nothing saved yet
  EXPECT_EQ(resolve(root, true), "");
  const std::string msg = message_of([&] { resolve(out); });
  EXPECT_TRUE(contains(msg, out) && contains(msg, "index.json") && contains(msg, "latest")) << msg;
  EXPECT_FALSE(is_checkpoint(out));
  save_small(root, "step_1", 1, 1.0f, 0);
  EXPECT_EQ(resolve(root + "/step_1"), root + "/step_1");
  EXPECT_EQ(resolve(root), root + "/step_1");
  EXPECT_EQ(resolve(out), root + "/step_1");
  EXPECT_EQ(resolve(out, true), root + "/step_1");
  EXPECT_TRUE(is_checkpoint(out));
  EXPECT_TRUE(is_checkpoint(root + "/step_1"));
  EXPECT_FALSE(is_checkpoint(root + "/step_1/rank_00000.safetensors"));  // a file, not ours
  // `latest` naming a directory that is gone: an error naming both, even with allow_none.
  { std::ofstream(root + "/latest", std::ios::trunc) << "step_7\n"; }
  for (const bool allow_none : {false, true}) {
    const std::string m = message_of([&] { resolve(out, allow_none); });
    EXPECT_TRUE(contains(m, root + "/latest") && contains(m, root + "/step_7")) << m;
  }
}

// ---- a file-size limit ----

TEST(CheckpointDirs, FileSizeLimitIsAnErrorNamingTheFile) {
  TempDir dir;
  const std::string root = dir.path();
  save_small(root, "step_1", 1, 1.0f, 0);
  const std::string shard = root + "/.step_2.tmp/rank_00000.safetensors";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: 64 KiB at most per file, then a 4 MB shard.
    int code = 3;
    try {
      install_checkpoint_signal_handling();
      const struct rlimit lim = {65536, 65536};
      if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(4);
      const std::string tmp = begin_save(root, "step_2");
      Piece big{"big", {1024, 1024}, Box{{0, 0}, {1024, 1024}}, std::vector<float>(1024 * 1024, 1.0f)};
      write_shard(tmp, 0, {big});
      code = 1;  // no error
    } catch (const std::exception& e) {
      const std::string msg = e.what();
      code = contains(msg, shard) && contains(msg, std::strerror(EFBIG)) ? 0 : 2;
      if (code) std::fprintf(stderr, "unexpected message: %s\n", msg.c_str());
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no error, 2: a message without the file, 3/4: setup";
  EXPECT_FALSE(fs::exists(shard));  // the partial file is removed
  abort_save(root, "step_2");
  EXPECT_EQ(latest_of(root), "step_1\n");
  EXPECT_EQ(small_value(root), 1.0f);
}

}  // namespace
}  // namespace gf::ckpt
