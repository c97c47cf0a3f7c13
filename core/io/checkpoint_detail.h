// The checkpoint format's shared helpers (core/io/checkpoint.cpp defines them; the writer there and
// the reader in checkpoint_reader.cpp use them). Internal to core/io.
#pragma once
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/io/checkpoint.h"
#include "core/io/torch_pickle.h"  // shape_str
#include "core/params/placement.h"

namespace gf::ckpt::detail {

inline constexpr const char* kFormat = "gridformer-checkpoint";
inline constexpr int kVersion = 1;
inline constexpr mode_t kFileMode = 0640, kDirMode = 0750;
inline constexpr const char* kLatest = "latest";  // the file under a checkpoint root naming the newest one
inline constexpr const char* kIndex = "index.json";

// `err` is errno, read by the caller before it builds the message (which may allocate).
[[noreturn]] void sys_fail(int err, const std::string& path, const std::string& what);

// An open file descriptor, closed (without a check: only on an error path) if not closed explicitly.
class Fd {
 public:
  Fd(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  void close() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
      const int err = errno;
      sys_fail(err, path_, "cannot close");
    }
  }

 private:
  int fd_;
  std::string path_;
};

std::string show(const Box& b);
std::string hex8(uint32_t v);
bool parse_hex8(const std::string& s, uint32_t* v);
int64_t numel_of(const std::vector<int64_t>& shape);
// The intersection of two boxes (false when empty); whether a box lies inside a shape.
bool intersect(const Box& a, const Box& b, Box* out);
bool inside(const Box& b, const std::vector<int64_t>& shape);
// [lo, hi) of a tensor's local elements, checked (hi < 0: the end); `what` names the caller.
int64_t end_of(const TensorPlacement& t, int64_t lo, int64_t hi, const char* what);
// The global boxes of a tensor's local elements [lo, hi), with where each starts locally.
std::vector<SlicePiece> wanted_boxes(const TensorPlacement& t, int64_t lo, int64_t hi);
std::string read_text(const std::string& path);
// The directory steps' helpers (core/io/checkpoint_dir.cpp): fsync of a directory, a new file written whole and
// synced, the file system's questions, mkdir -p and rm -r, a checkpoint name's check, its temporary's path, the
// checkpoint `latest` names under root, and an index.json read (null when there is none).
void fsync_dir(const std::string& dir);
void write_new_file(const std::string& path, const std::string& text);
bool is_dir(const std::string& path);
bool exists(const std::string& path);
void make_dirs(const std::string& path);
void remove_tree(const std::string& path);
void check_name(const std::string& name);
std::string tmp_of(const std::string& root, const std::string& name);
std::string follow_latest(const std::string& root);
nlohmann::json read_index_or_null(const std::string& path);
// write(2) of all n bytes, and fsync, throwing with the path, the errno text and what to do.
void write_all(int fd, const std::string& path, const void* data, size_t n);
void fsync_fd(const Fd& fd, const std::string& path);
// Copies the box of extent `ext` at `soff` in the row-major array `src` (shape `sshape`) to `doff` in
// `dst` (shape `dshape`), 4-byte elements at any alignment.
void copy_box(const void* src, const std::vector<int64_t>& sshape, const std::vector<int64_t>& soff, void* dst,
              const std::vector<int64_t>& dshape, const std::vector<int64_t>& doff, const std::vector<int64_t>& ext);
// Throws when two of a tensor's boxes overlap (`where` names each box's file and key).
void check_disjoint(const std::string& context, const std::string& tensor, const std::vector<Box>& boxes,
                    const std::vector<std::string>& where);

}  // namespace gf::ckpt::detail
