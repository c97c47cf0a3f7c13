// A rank's shard of a checkpoint: its pieces (boxes of global tensors, copied or read live) and the
// safetensors file they are written to (core/io/checkpoint.h).
#include <fcntl.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/io/checkpoint_detail.h"
#include "core/io/crc32c.h"
#include "core/io/safetensors.h"

namespace gf::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace detail;

std::vector<Piece> pieces_of(const TensorPlacement& t, const std::string& name, const float* local, int64_t lo,
                             int64_t hi) {
  hi = end_of(t, lo, hi, "pieces_of");
  std::vector<Piece> out;
  const std::vector<int64_t> zero(t.local_shape.size(), 0);
  for (SlicePiece& w : wanted_boxes(t, lo, hi)) {
    Piece p;
    p.tensor = name;
    p.shape = t.spec->shape;
    p.data.resize(static_cast<size_t>(w.global.numel()));
    copy_box(local, t.local_shape, w.local_offset, p.data.data(), w.global.extent, zero, w.global.extent);
    p.box = std::move(w.global);
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<Piece> live_pieces_of(const TensorPlacement& t, const std::string& name, LocalReader read, int64_t lo,
                                  int64_t hi) {
  if (!read) throw std::invalid_argument("live_pieces_of: " + name + ": no reader");
  hi = end_of(t, lo, hi, "live_pieces_of");
  std::vector<Piece> out;
  for (SlicePiece& w : wanted_boxes(t, lo, hi)) {
    Piece p;
    p.tensor = name;
    p.shape = t.spec->shape;
    p.read = read;
    p.local_shape = t.local_shape;
    p.local_offset = std::move(w.local_offset);
    p.box = std::move(w.global);
    out.push_back(std::move(p));
  }
  return out;
}

std::string shard_file(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.safetensors", rank);
  return buf;
}

void install_checkpoint_signal_handling() {
  // A write past RLIMIT_FSIZE raises SIGXFSZ, whose default action kills the process (leaving a
  // half-written temporary and no message); ignored, write() fails with EFBIG and we say so.
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_IGN;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGXFSZ, &sa, nullptr) != 0) {
    const int err = errno;
    throw std::runtime_error(std::string("cannot ignore SIGXFSZ: ") + std::strerror(err));
  }
}

namespace {

// Calls f(local flat index, count) for each run of elements contiguous in the local tensor, in the
// box's row-major order. (copy_box folds runs the same way for a copy between two arrays; here the
// elements come through a reader, so only the local side has runs.)
template <typename F>
void for_each_run(const std::vector<int64_t>& shape, const std::vector<int64_t>& off, const std::vector<int64_t>& ext,
                  F&& f) {
  const size_t n = ext.size();
  for (int64_t e : ext)
    if (e <= 0) return;
  std::vector<int64_t> stride(n, 1);
  for (size_t k = n - 1; k > 0; --k) stride[k - 1] = stride[k] * shape[k];
  // The innermost dims the box holds whole fold into one run.
  size_t j = n - 1;
  int64_t run = ext[j];
  while (j > 0 && ext[j] == shape[j]) {
    --j;
    run *= ext[j];
  }
  std::vector<int64_t> idx(j, 0);  // odometer over dims [0, j)
  for (;;) {
    int64_t at = off[j] * stride[j];
    for (size_t k = 0; k < j; ++k) at += (off[k] + idx[k]) * stride[k];
    for (size_t k = j + 1; k < n; ++k) at += off[k] * stride[k];
    f(at, run);
    size_t k = j;
    while (k > 0 && ++idx[k - 1] == ext[k - 1]) idx[--k] = 0;
    if (k == 0) return;
  }
}

constexpr int64_t kLiveChunk = int64_t{1} << 20;  // floats: 4 MiB

}  // namespace

std::string write_shard(const std::string& dir, int rank, const std::vector<Piece>& pieces) {
  const std::string file = shard_file(rank);
  const std::string path = (fs::path(dir) / file).string();
  std::vector<StWriteTensor> heads;
  std::map<std::string, int64_t> count;
  std::vector<std::pair<std::string, size_t>> entry_of;  // each piece's tensor and index in its "pieces"
  json tensors = json::object();
  for (const Piece& p : pieces) {
    if (p.shape.empty() || !inside(p.box, p.shape))
      throw std::invalid_argument(path + ": tensor " + p.tensor + ": box " + show(p.box) + " is not inside its shape " +
                                  shape_str(p.shape));
    if (p.read ? !p.data.empty() || p.local_shape.size() != p.shape.size() || p.local_offset.size() != p.shape.size()
               : static_cast<int64_t>(p.data.size()) != p.box.numel())
      throw std::invalid_argument(path + ": tensor " + p.tensor + ": " +
                                  (p.read ? std::string("a live piece without its local place, or with data")
                                          : std::to_string(p.data.size()) + " values for a box of " +
                                                std::to_string(p.box.numel()) + " elements"));
    json& entry = tensors[p.tensor];
    if (entry.contains("shape") && entry["shape"].get<std::vector<int64_t>>() != p.shape)
      throw std::invalid_argument(path + ": tensor " + p.tensor + ": pieces of shapes " + entry["shape"].dump() +
                                  " and " + shape_str(p.shape));
    entry["shape"] = p.shape;
    const std::string key = p.tensor + "@" + std::to_string(count[p.tensor]++);
    entry["pieces"].push_back({{"file", file}, {"key", key}, {"offset", p.box.offset}, {"extent", p.box.extent}});
    entry_of.emplace_back(p.tensor, entry["pieces"].size() - 1);
    heads.push_back({key, StDtype::kF32, p.box.extent, nullptr});
  }
  const std::string header = safetensors_header(heads, {{"format", "gridformer"}});
  // The data goes straight from the pieces to the file (no second copy of a rank's state in
  // memory), checksummed on the way: the file's CRC-32C, and each piece's own, so a damaged file
  // names the tensors it damaged.
  Fd fd(::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, kFileMode), path);
  if (fd.get() < 0) {
    const int err = errno;
    sys_fail(err, path, "cannot create the checkpoint shard");
  }
  int64_t bytes = 0;
  uint32_t crc = 0;
  std::vector<float> chunk;
  try {
    write_all(fd.get(), path, header.data(), header.size());
    crc = crc32c_extend(crc, header.data(), header.size());
    bytes += static_cast<int64_t>(header.size());
    for (size_t i = 0; i < pieces.size(); ++i) {
      const Piece& p = pieces[i];
      uint32_t piece_crc = 0;
      auto put = [&](const float* v, int64_t n) {
        const size_t nb = static_cast<size_t>(n) * sizeof(float);
        write_all(fd.get(), path, v, nb);
        crc = crc32c_extend(crc, v, nb);
        piece_crc = crc32c_extend(piece_crc, v, nb);
        bytes += static_cast<int64_t>(nb);
      };
      if (!p.read) {
        put(p.data.data(), static_cast<int64_t>(p.data.size()));
      } else {
        for_each_run(p.local_shape, p.local_offset, p.box.extent, [&](int64_t at, int64_t run) {
          for (int64_t k = 0; k < run; k += kLiveChunk) {
            const int64_t n = std::min(kLiveChunk, run - k);
            if (chunk.size() < static_cast<size_t>(n)) chunk.resize(static_cast<size_t>(n));
            p.read(at + k, n, chunk.data());
            put(chunk.data(), n);
          }
        });
      }
      tensors[entry_of[i].first]["pieces"][entry_of[i].second]["crc32c"] = hex8(piece_crc);
    }
    fsync_fd(fd, path);
    fd.close();
  } catch (...) {
    ::unlink(path.c_str());
    throw;
  }
  json fragment;
  fragment["files"][file] = {{"bytes", bytes}, {"crc32c", hex8(crc)}};
  fragment["tensors"] = std::move(tensors);
  return fragment.dump();
}

}  // namespace gf::ckpt
