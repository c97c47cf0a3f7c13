// Sharded checkpoints (core/io/checkpoint.h), continued from tests/core/checkpoint_test.cpp: damaged,
// incomplete or mismatched checkpoints are refused with messages that name what is wrong; the
// directory steps (latest, pruning, temporaries, modes, resolve) and a file-size limit.
#include "core/io/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/io/crc32c.h"
#include "core/params/placement.h"
#include "tests/core/checkpoint_test_util.h"
#include "tests/core/small_model_config.h"
#include "tests/test_util.h"

namespace gf::ckpt {
namespace {

namespace fs = std::filesystem;

using namespace checkpoint_test;  // the helpers both halves share (checkpoint_test_util.h)

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

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

// A kill after a commit exchanged a checkpoint over an older one of its name, before the old one was
// removed, leaves it as that name's .tmp; the run goes on under other names, so the next save clears
// every leftover of ours (and leaves the dot-entries that are not).
TEST(CheckpointDirs, TheNextSaveClearsLeftoversOfOtherNames) {
  TempDir dir;
  const std::string root = dir.path();
  save_small(root, "step_1", 1, 1.0f, 0);
  for (const char* left : {"/.step_1.tmp", "/.step_0.old", "/.step_0.removing", "/.notes.d", "/.git"}) {
    fs::create_directories(root + left);
    std::ofstream(root + left + "/rank_00000.safetensors") << "left by a kill";
  }
  std::ofstream(root + "/.x.tmp") << "a file, not a save's directory";
  save_small(root, "step_2", 2, 2.0f, 0);
  EXPECT_FALSE(fs::exists(root + "/.step_1.tmp"));
  EXPECT_FALSE(fs::exists(root + "/.step_0.old"));
  EXPECT_FALSE(fs::exists(root + "/.step_0.removing"));
  EXPECT_TRUE(fs::exists(root + "/.notes.d/rank_00000.safetensors"));
  EXPECT_TRUE(fs::exists(root + "/.git/rank_00000.safetensors"));
  EXPECT_TRUE(fs::exists(root + "/.x.tmp"));
  EXPECT_EQ(small_value(root + "/step_1"), 1.0f);
  EXPECT_EQ(small_value(root), 2.0f);
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
