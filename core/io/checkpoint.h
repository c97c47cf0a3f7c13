// Sharded checkpoints: every rank writes its slices of every tensor it is chosen to write, under
// the tensor's global name, with the global shape and the box (offset, extent per dim) each slice
// fills; one JSON index names every tensor's boxes, the file and key of each, and every file's size
// and CRC-32C. Readable without our code: the shard files are safetensors, the index is JSON.
//
//   <root>/<name>/index.json                 the index (written last, by rank 0)
//   <root>/<name>/rank_00000.safetensors     rank 0's pieces (keys "<tensor>@<k>")
//   <root>/latest                            "<name>\n": the newest complete checkpoint
//
// A save goes into <root>/.<name>.tmp (0750), its files written 0640 and fsync'ed, then is renamed
// into place, the root directory fsync'ed, and `latest` replaced (write to a temporary, fsync,
// rename) last; then the oldest complete checkpoints beyond keep_max are removed. A run killed at
// any moment leaves `latest` naming a complete checkpoint (or none). Modes are subject to the
// process umask when it is stricter.
//
// Reading: each rank asks for the region its own layout holds (the elements of a TensorPlacement,
// optionally a flat range of them, as ZeRO shards the optimizer) and gets it assembled from every
// saved box that overlaps it, so a checkpoint saved under one layout loads under any other.
//
// No MPI here: the trainer gathers the ranks' index fragments to rank 0 and orders the steps
// (every rank writes its shard, then rank 0 writes the index and commits).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/params/placement.h"

namespace gf::ckpt {

// Reads local elements [i0, i0 + n) of a tensor (flat, row-major over its local shape) into dst.
using LocalReader = std::function<void(int64_t i0, int64_t n, float* dst)>;

// One box of one global tensor, with its values (row-major over box.extent): held in `data` (a copy,
// a snapshot that outlives changes to the tensor), or, when `read` is set, read from the live tensor
// while the shard is written (a synchronous save: no copy of a rank's state in memory).
struct Piece {
  std::string tensor;          // global name ("h.0.attn.c_attn.weight", "optimizer.exp_avg.h.0.attn.c_attn.weight")
  std::vector<int64_t> shape;  // the global tensor's shape
  Box box;
  std::vector<float> data;     // box.numel() floats; empty when `read` is set
  LocalReader read;            // the box's values from the tensor's local elements
  std::vector<int64_t> local_shape, local_offset;  // with `read`: where the box lies in the local tensor
  int64_t numel() const { return box.numel(); }
};

// The pieces of local elements [lo, hi) of tensor `t` (flat index into t's local storage, row-major
// over t.local_shape; hi = -1: to the end), whose values are local[lo..hi), saved under `name` (the
// parameter's own name, or a prefixed one for optimizer state). A flat range that cuts rows is split
// into boxes (a partial first row, whole rows, a partial last row, recursively per dim); local
// elements in no SlicePiece (vocabulary padding) are left out. `local` points at the tensor's first
// local element (arena + t.offset); the values are copied.
std::vector<Piece> pieces_of(const TensorPlacement& t, const std::string& name, const float* local, int64_t lo = 0,
                             int64_t hi = -1);
// The same boxes, their values read through `read` when the shard is written (read is called only
// for local elements in [lo, hi), in runs of contiguous elements).
std::vector<Piece> live_pieces_of(const TensorPlacement& t, const std::string& name, LocalReader read,
                                  int64_t lo = 0, int64_t hi = -1);

// Writes `pieces` to dir/shard_file(rank) (safetensors, F32, keys "<tensor>@<k>", k counting per
// tensor from 0 on this rank; 0640; fsync'ed) and returns this rank's fragment of the index as JSON
// text: {"files": {file: {"bytes": n, "crc32c": "xxxxxxxx"}}, "tensors": {name: {"shape": [...],
// "pieces": [{"file", "key", "offset", "extent", "crc32c"}]}}} (each piece's data has its own CRC-32C, so a
// damaged file names the tensors it damaged). Throws std::runtime_error naming the file (and
// the errno text: a full disk, a file-size limit) when anything cannot be written; the caller
// removes the temporary directory. SIGXFSZ must be ignored by the process for a file-size limit to
// come back as an error (install_checkpoint_signal_handling does it). Live pieces are read in chunks
// of at most 4 MiB through one buffer, so writing them holds no more memory than that.
std::string shard_file(int rank);
std::string write_shard(const std::string& dir, int rank, const std::vector<Piece>& pieces);
void install_checkpoint_signal_handling();

// Rank 0: merges the ranks' fragments into dir/index.json together with `state` (the training state,
// config and layout: {"step": ..., ...}, kept as the index's "state") and fsyncs it. Throws if two
// fragments describe the same tensor with different shapes, or a tensor's boxes overlap.
void write_index(const std::string& dir, const std::vector<std::string>& fragments, const nlohmann::json& state);

// The directory steps, on rank 0 only (the other ranks wait at a barrier the trainer places):
// begin_save creates root (0750, parents too) and a fresh temporary root/.<name>.tmp (removing every
// stale .<any name>.tmp, .old and .removing directory a killed save or commit left), and returns the temporary's path; commit_save renames it to root/<name> (replacing an
// existing directory of that name), fsyncs root, points `latest` at it, and removes the oldest
// complete checkpoints (directories of root with an index.json, ordered by their index's
// state.step, then name) so that at most keep_max remain (keep_max <= 0: keep all); `latest` is
// never removed. abort_save removes the temporary. Return the checkpoints removed, for the log.
std::string begin_save(const std::string& root, const std::string& name);
std::vector<std::string> commit_save(const std::string& root, const std::string& name, int keep_max);
void abort_save(const std::string& root, const std::string& name);

// The complete checkpoints of `root` (directories with an index.json), oldest first (by the state's
// step, then name), with whether each is recorded healthy (state.healthy; a checkpoint from before the
// record counts as healthy). An absent root gives none.
struct Listed {
  std::string name;
  int64_t step = -1;
  bool healthy = true;
};
std::vector<Listed> list_checkpoints(const std::string& root);

// `path` resolved to one checkpoint's directory: a directory with index.json is one; a directory
// with a `latest` file (a run's checkpoint/ directory) gives the one it names; a run's output_dir
// (with checkpoint/latest) too. Throws naming what was looked for. Returns "" instead of throwing
// when `allow_none` and the directory holds neither (a run with nothing saved yet).
std::string resolve(const std::string& path, bool allow_none = false);
// Whether `path` looks like one of ours (resolves without throwing): the trainer tells our
// checkpoints from Hugging Face weights by it.
bool is_checkpoint(const std::string& path);

// Whether reading a shard checks its CRC-32C (default true). gridformer replay turns it off to replay
// a checkpoint it has reported damaged, so the damage's effect on the steps shows.
void set_crc_checks(bool on);

class Reader {
 public:
  // Opens resolve(path): reads index.json and checks that every file it names exists with its
  // recorded size (a missing or truncated shard is refused here, naming the file and a tensor it
  // holds). Each shard's CRC-32C is checked when the shard is first read; a mismatch throws naming
  // the file and the tensor being read. Shards are read whole on first use and kept until
  // release().
  static Reader open(const std::string& path);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& state() const { return state_; }
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  const std::vector<int64_t>& shape(const std::string& name) const;  // throws naming a missing tensor
  std::vector<std::string> names() const;

  // Fills local elements [lo, hi) of `t` (as pieces_of numbers them; padding elements set to 0)
  // from the saved boxes of `name` that overlap them. Throws std::runtime_error naming the
  // checkpoint and tensor when the tensor is missing, its saved global shape differs from
  // t.spec->shape (both shapes in the message), or some wanted element is in no saved box.
  void read(const std::string& name, const TensorPlacement& t, float* local, int64_t lo = 0, int64_t hi = -1);
  // Every file of the checkpoint read through once (not kept) and checked against its recorded size and
  // CRC-32C: "" when all agree, else what differs: the file, both CRCs, and each tensor piece whose own
  // CRC-32C differs (its name and box), or the file's header when no piece does.
  std::string verify() const;
  // The whole global tensor (every element must be covered).
  std::vector<float> read_full(const std::string& name);
  void release();  // drops the shards read so far

 private:
  struct SavedPiece {
    std::string file, key;
    Box box;
    bool has_crc = false;
    uint32_t crc = 0;
  };
  struct SavedTensor {
    std::vector<int64_t> shape;
    std::vector<SavedPiece> pieces;
  };
  struct Shard;
  // The pieces of `file` (its bytes `data`, whose CRC-32C is not the recorded one) whose own CRC differs.
  std::string damaged_pieces(const std::string& file, const std::vector<uint8_t>& data) const;
  const Shard& shard(const std::string& file, const std::string& tensor);
  const SavedTensor& saved(const std::string& name) const;  // throws naming a missing tensor
  // Fills the `wanted` boxes (global boxes at their offsets in `local`, of shape local_shape) from
  // the saved boxes of `name` that overlap them; throws naming an element none holds.
  void fill(const std::string& name, const SavedTensor& s, const std::vector<SlicePiece>& wanted,
            const std::vector<int64_t>& local_shape, float* local);
  std::string dir_;
  nlohmann::json state_;
  std::map<std::string, SavedTensor> tensors_;
  std::map<std::string, std::pair<int64_t, uint32_t>> files_;  // bytes, crc32c
  std::map<std::string, std::shared_ptr<Shard>> open_;
};

// A test hook for the crash tests (tests/integration/checkpoint_crash.sh): when the environment has
// GF_CHECKPOINT_FAULT=<point> and the save in progress is of step GF_CHECKPOINT_FAULT_STEP (default
// any), the process that reaches fault_point(<point>) kills itself with SIGKILL, as a power cut or
// the OOM killer would. Points: "begin" (before anything is written), "shard" (a rank's shard
// written, no index), "index" (the index written, not renamed), "renamed" (renamed into place,
// `latest` not changed), "replaced" (`latest` changed, the older checkpoint of the name that a commit
// exchanged out not yet removed), "latest" (the commit done). Unset, it costs one getenv per call.
void set_fault_step(int64_t step);
void fault_point(const char* point);

}  // namespace gf::ckpt
