// Sharded checkpoints (core/io/checkpoint.h): boxes, shard files and the index; the directory steps (begin,
// commit, abort, list, resolve) are checkpoint_dir.cpp, the reader checkpoint_reader.cpp.
//
// The shard files follow the safetensors format as huggingface/safetensors publishes it (README.md
// "Format" and safetensors/src/tensor.rs): an 8-byte little-endian header length, a JSON header
// padded with spaces to a multiple of 8 bytes, then the data, every byte of which belongs to
// exactly one tensor, as the reference reader requires (it refuses holes and trailing bytes).
//
// Durability: data reaches the disk by fsync of each file, then of its directory before that
// directory is renamed into place, then of the root after the rename; `latest` is replaced the
// same way. POSIX calls throughout, every return checked, because a checkpoint that looks complete
// but is not costs a whole run.
#include "core/io/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "core/io/checkpoint_detail.h"
#include "core/io/crc32c.h"
#include "core/io/safetensors.h"
#include "core/io/torch_pickle.h"

namespace gf::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;

// The shard data is the host's floats written as they are; safetensors is little-endian.
static_assert(std::endian::native == std::endian::little, "checkpoint shards are written in host byte order");

// The helpers the reader (checkpoint_reader.cpp) shares are declared in checkpoint_detail.h.
namespace detail {

void sys_fail(int err, const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what + ": " + std::strerror(err));
}



std::string show(const Box& b) { return "offset " + shape_str(b.offset) + " extent " + shape_str(b.extent); }

std::string hex8(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

bool parse_hex8(const std::string& s, uint32_t* v) {
  if (s.size() != 8) return false;
  uint32_t r = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return false;
    r = r << 4 | static_cast<uint32_t>(d);
  }
  *v = r;
  return true;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- boxes ----------------------------------------------------------------------------------

// a ∩ b; false when empty.
bool intersect(const Box& a, const Box& b, Box* out) {
  const size_t n = a.offset.size();
  out->offset.resize(n);
  out->extent.resize(n);
  for (size_t k = 0; k < n; ++k) {
    const int64_t lo = std::max(a.offset[k], b.offset[k]);
    const int64_t hi = std::min(a.offset[k] + a.extent[k], b.offset[k] + b.extent[k]);
    if (hi <= lo) return false;
    out->offset[k] = lo;
    out->extent[k] = hi - lo;
  }
  return true;
}

// Whether `b` has `shape`'s rank and lies inside it.
bool inside(const Box& b, const std::vector<int64_t>& shape) {
  if (b.offset.size() != shape.size() || b.extent.size() != shape.size()) return false;
  for (size_t k = 0; k < shape.size(); ++k)
    if (b.offset[k] < 0 || b.extent[k] < 0 || b.offset[k] + b.extent[k] > shape[k]) return false;
  return true;
}

// Copies the box of extent `ext` at `soff` in the row-major array `src` (shape `sshape`) to `doff`
// in `dst` (shape `dshape`), 4-byte elements. One memcpy per run of the innermost dims, trailing
// dims that both arrays hold whole folded into the run (a box of whole rows is one memcpy); an
// odometer steps the outer dims, so no division per element or per run. Bytes rather than floats
// so a shard's data may sit at any alignment.
void copy_box(const void* src, const std::vector<int64_t>& sshape, const std::vector<int64_t>& soff, void* dst,
              const std::vector<int64_t>& dshape, const std::vector<int64_t>& doff, const std::vector<int64_t>& ext) {
  constexpr int64_t kElem = 4;
  const size_t n = ext.size();
  for (int64_t e : ext)
    if (e <= 0) return;
  std::vector<int64_t> ss(n, kElem), ds(n, kElem);  // byte strides
  for (size_t k = n - 1; k > 0; --k) {
    ss[k - 1] = ss[k] * sshape[k];
    ds[k - 1] = ds[k] * dshape[k];
  }
  size_t j = n - 1;
  int64_t run = ext[j] * kElem;
  while (j > 0 && ext[j] == sshape[j] && ext[j] == dshape[j]) {
    --j;
    run *= ext[j];
  }
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for (size_t k = 0; k < n; ++k) {
    s += soff[k] * ss[k];
    d += doff[k] * ds[k];
  }
  if (j == 0) {
    std::memcpy(d, s, static_cast<size_t>(run));
    return;
  }
  std::vector<int64_t> idx(j, 0);  // over dims 0..j-1
  for (;;) {
    std::memcpy(d, s, static_cast<size_t>(run));
    size_t k = j;
    for (;;) {
      --k;
      if (++idx[k] < ext[k]) {
        s += ss[k];
        d += ds[k];
        break;
      }
      s -= (ext[k] - 1) * ss[k];
      d -= (ext[k] - 1) * ds[k];
      idx[k] = 0;
      if (k == 0) return;
    }
  }
}

// Flat elements [lo, hi) of the sub-tensor shape[d..] (the dims before d fixed at prefix[0..d))
// as boxes of the whole tensor: a partial first row (recursively), the whole rows, a partial last
// row (recursively). At most 2 (ndim - 1) + 1 boxes.
void flat_boxes(const std::vector<int64_t>& shape, size_t d, int64_t lo, int64_t hi, std::vector<int64_t>& prefix,
                std::vector<Box>& out) {
  if (lo >= hi) return;
  const size_t n = shape.size();
  auto rows = [&](int64_t first, int64_t count) {  // rows [first, first + count) of dim d, whole below
    Box b;
    b.offset.assign(n, 0);
    b.extent.assign(n, 1);
    for (size_t k = 0; k < d; ++k) b.offset[k] = prefix[k];
    b.offset[d] = first;
    b.extent[d] = count;
    for (size_t k = d + 1; k < n; ++k) b.extent[k] = shape[k];
    out.push_back(std::move(b));
  };
  if (d + 1 == n) {
    rows(lo, hi - lo);
    return;
  }
  int64_t row = 1;
  for (size_t k = d + 1; k < n; ++k) row *= shape[k];
  int64_t r0 = lo / row;
  const int64_t r1 = hi / row;
  if (r0 == r1) {  // inside one row
    prefix[d] = r0;
    flat_boxes(shape, d + 1, lo - r0 * row, hi - r0 * row, prefix, out);
    prefix[d] = 0;
    return;
  }
  if (lo % row != 0) {
    prefix[d] = r0;
    flat_boxes(shape, d + 1, lo % row, row, prefix, out);
    ++r0;
  }
  if (r1 > r0) rows(r0, r1 - r0);
  if (hi % row != 0) {
    prefix[d] = r1;
    flat_boxes(shape, d + 1, 0, hi % row, prefix, out);
  }
  prefix[d] = 0;
}

int64_t end_of(const TensorPlacement& t, int64_t lo, int64_t hi, const char* what) {
  if (!t.spec) throw std::invalid_argument(std::string(what) + ": a TensorPlacement without its ParamSpec");
  if (t.local_shape.empty() || t.local_shape.size() != t.spec->shape.size())
    throw std::invalid_argument(std::string(what) + ": " + t.spec->name + ": local shape " + shape_str(t.local_shape) +
                                " does not match the rank of the global shape " + shape_str(t.spec->shape));
  const int64_t n = t.numel();
  if (hi < 0) hi = n;
  if (lo < 0 || lo > hi || hi > n)
    throw std::invalid_argument(std::string(what) + ": " + t.spec->name + ": flat range [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + ") outside its " + std::to_string(n) + " local elements");
  return hi;
}

// Local elements [lo, hi) of t as global boxes, each with where it starts in the local tensor:
// the range's boxes of the local tensor intersected with t's pieces (padding is in none).
std::vector<SlicePiece> wanted_boxes(const TensorPlacement& t, int64_t lo, int64_t hi) {
  std::vector<Box> flat;
  std::vector<int64_t> prefix(t.local_shape.size(), 0);
  flat_boxes(t.local_shape, 0, lo, hi, prefix, flat);
  std::vector<SlicePiece> out;
  for (const Box& b : flat) {
    for (const SlicePiece& p : t.pieces) {
      const Box held{p.local_offset, p.global.extent};  // the piece, in local coordinates
      Box both;
      if (!intersect(b, held, &both)) continue;
      SlicePiece w;
      w.global.offset.resize(both.offset.size());
      for (size_t k = 0; k < both.offset.size(); ++k)
        w.global.offset[k] = p.global.offset[k] + both.offset[k] - p.local_offset[k];
      w.global.extent = both.extent;
      w.local_offset = both.offset;
      out.push_back(std::move(w));
    }
  }
  return out;
}

// Throws when two of a tensor's boxes overlap (`where` names each box's file and key). Sorted by
// their first dim's offset, each box is compared with the following ones that start before it
// ends on that dim only.
void check_disjoint(const std::string& context, const std::string& tensor, const std::vector<Box>& boxes,
                    const std::vector<std::string>& where) {
  std::vector<size_t> order(boxes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return boxes[a].offset[0] < boxes[b].offset[0]; });
  for (size_t i = 0; i < order.size(); ++i) {
    const Box& a = boxes[order[i]];
    if (a.numel() == 0) continue;
    for (size_t j = i + 1; j < order.size(); ++j) {
      const Box& b = boxes[order[j]];
      if (b.offset[0] >= a.offset[0] + a.extent[0]) break;
      Box both;
      if (b.numel() > 0 && intersect(a, b, &both))
        throw std::runtime_error(context + ": tensor " + tensor + ": box " + show(a) + " (" + where[order[i]] +
                                 ") overlaps box " + show(b) + " (" + where[order[j]] +
                                 "); each element must be saved by exactly one rank");
    }
  }
}

// ---- files ----------------------------------------------------------------------------------


const char* const kWriteHint = " (a full disk or a file-size limit: free space, raise `ulimit -f`, or save elsewhere)";

void write_all(int fd, const std::string& path, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw std::runtime_error(path + ": cannot write: " + std::strerror(err) + kWriteHint);
    }
    if (w == 0) throw std::runtime_error(path + ": write() wrote nothing" + kWriteHint);
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void fsync_fd(const Fd& fd, const std::string& path) {
  if (::fsync(fd.get()) != 0) {
    const int err = errno;
    throw std::runtime_error(path + ": fsync failed: " + std::strerror(err) + kWriteHint);
  }
}

void fsync_dir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC), dir);
  if (fd.get() < 0) {
    const int err = errno;
    sys_fail(err, dir, "cannot open the directory to fsync it");
  }
  if (::fsync(fd.get()) != 0) {
    const int err = errno;
    sys_fail(err, dir, "cannot fsync the directory");
  }
  fd.close();
}

// A new file holding `text`, fsync'ed (removed again if it cannot be written whole).
void write_new_file(const std::string& path, const std::string& text) {
  Fd fd(::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, kFileMode), path);
  if (fd.get() < 0) {
    const int err = errno;
    sys_fail(err, path, "cannot create");
  }
  try {
    write_all(fd.get(), path, text.data(), text.size());
    fsync_fd(fd, path);
    fd.close();
  } catch (...) {
    ::unlink(path.c_str());
    throw;
  }
}

std::string read_text(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC), path);
  if (fd.get() < 0) {
    const int err = errno;
    sys_fail(err, path, "cannot open");
  }
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t r = ::read(fd.get(), buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      sys_fail(err, path, "cannot read");
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  fd.close();
  return out;
}

bool is_dir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// mkdir -p with kDirMode for every directory it creates.
void make_dirs(const std::string& path) {
  std::string prefix;
  for (const auto& part : fs::path(path)) {
    prefix = prefix.empty() ? part.string() : (fs::path(prefix) / part).string();
    if (part.empty() || part == "/" || is_dir(prefix)) continue;
    if (::mkdir(prefix.c_str(), kDirMode) != 0) {
      const int err = errno;
      if (err != EEXIST || !is_dir(prefix)) sys_fail(err, prefix, "cannot create the checkpoint directory");
    }
  }
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) throw std::runtime_error(path + ": cannot remove: " + ec.message());
}

void check_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name[0] == '.' || name == kLatest ||
      name.find('/') != std::string::npos)
    throw std::invalid_argument("checkpoint name '" + name +
                                "': must be a plain directory name, not starting with '.' and not `latest`");
}

std::string tmp_of(const std::string& root, const std::string& name) {
  return (fs::path(root) / ("." + name + ".tmp")).string();
}

// The checkpoint a root's `latest` names (a complete one, else an error naming both).
std::string follow_latest(const std::string& root) {
  const std::string latest = (fs::path(root) / kLatest).string();
  std::string name = read_text(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    throw std::runtime_error(latest + ": does not hold a checkpoint name (\"" + name +
                             "\"); rewrite it with the name of a directory beside it, or remove it");
  const std::string dir = (fs::path(root) / name).string();
  if (!exists((fs::path(dir) / kIndex).string()))
    throw std::runtime_error(latest + " names " + name + ", but " + dir +
                             (is_dir(dir) ? " has no index.json" : " does not exist") +
                             "; point it at a complete checkpoint directory of " + root + " or remove it");
  return dir;
}

// A checkpoint directory's index, or null when it is not one of ours.
json read_index_or_null(const std::string& path) {
  try {
    json j = json::parse(read_text(path));
    if (j.is_object() && j.value("format", "") == kFormat) return j;
  } catch (const std::exception&) {
  }
  return nullptr;
}

}  // namespace detail

using namespace detail;

namespace {

// The rank fragments' pieces, merged by tensor (write_index).
struct MergedPiece {
  std::string file, key, crc;  // crc: the piece's CRC-32C ("" in a fragment without one)
  int64_t number;  // k of key "<tensor>@<k>"
  Box box;
};
struct Merged {
  std::vector<int64_t> shape;
  std::string shape_file;  // the file its shape was first seen in
  std::vector<MergedPiece> pieces;
};

// Every fragment's files and tensors into `files` and `tensors`, checked: a file in two fragments,
// a tensor of two shapes, a piece in an unlisted file, a malformed key or a box outside its shape
// throws naming the index `path`.
void merge_fragments(const std::string& path, const std::vector<std::string>& fragments,
                     std::map<std::string, json>& files, std::map<std::string, Merged>& tensors) {
  for (size_t i = 0; i < fragments.size(); ++i) {
    const std::string frag_name = path + ": fragment " + std::to_string(i);
    try {
      const json f = json::parse(fragments[i]);
      const json& frag_files = f.at("files");
      for (auto& [file, info] : frag_files.items()) {
        if (files.count(file))
          throw std::runtime_error(frag_name + ": file " + file +
                                   " is in two fragments (two ranks with one rank number?)");
        files[file] = info;
      }
      for (auto& [name, t] : f.at("tensors").items()) {
        const auto shape = t.at("shape").get<std::vector<int64_t>>();
        if (shape.empty()) throw std::runtime_error(frag_name + ": tensor " + name + " has no shape");
        const json& pieces = t.at("pieces");
        const std::string file = pieces.empty() ? frag_name : pieces[0].at("file").get<std::string>();
        auto [it, fresh] = tensors.try_emplace(name, Merged{shape, file, {}});
        if (!fresh && it->second.shape != shape)
          throw std::runtime_error(path + ": tensor " + name + " has shape " + shape_str(it->second.shape) + " in " +
                                   it->second.shape_file + " but " + shape_str(shape) + " in " + file +
                                   "; the ranks saved different models");
        for (const json& p : pieces) {
          MergedPiece mp{p.at("file").get<std::string>(), p.at("key").get<std::string>(), p.value("crc32c", ""), 0,
                         Box{p.at("offset").get<std::vector<int64_t>>(), p.at("extent").get<std::vector<int64_t>>()}};
          if (!frag_files.contains(mp.file))
            throw std::runtime_error(frag_name + ": tensor " + name + ": piece in file " + mp.file +
                                     ", which the fragment does not list");
          const size_t at = mp.key.rfind('@');
          if (at == std::string::npos || mp.key.compare(0, at, name) != 0 || at + 1 == mp.key.size() ||
              mp.key.find_first_not_of("0123456789", at + 1) != std::string::npos)
            throw std::runtime_error(frag_name + ": tensor " + name + ": key \"" + mp.key + "\" is not \"" + name +
                                     "@<k>\"");
          mp.number = std::stoll(mp.key.substr(at + 1));
          if (!inside(mp.box, shape))
            throw std::runtime_error(path + ": tensor " + name + ": box " + show(mp.box) + " in " + mp.file +
                                     " is not inside its shape " + shape_str(shape));
          it->second.pieces.push_back(std::move(mp));
        }
      }
    } catch (const json::exception& e) {
      throw std::runtime_error(frag_name + " is not an index fragment from write_shard: " + e.what());
    }
  }
}

// The index's text. Written by hand rather than by dump(indent), which puts every number of every box
// on a line of its own: one line per file and per piece keeps a GPT-2 index readable in a pager.
std::string index_text(const std::string& path, const nlohmann::json& state, const std::map<std::string, json>& files,
                       std::map<std::string, Merged>& tensors) {
  auto q = [](const std::string& s) { return json(s).dump(); };
  std::string text = "{\n \"format\": " + q(kFormat) + ",\n \"version\": " + std::to_string(kVersion) +
                     ",\n \"state\": " + state.dump() + ",\n \"files\": {";
  const char* sep = "\n  ";
  for (const auto& [file, info] : files) {
    text += sep + q(file) + ": " + info.dump();
    sep = ",\n  ";
  }
  text += "\n },\n \"tensors\": {";
  sep = "\n  ";
  for (auto& [name, m] : tensors) {
    // By file, then by the piece's number in it, so the same save gives the same index.
    std::sort(m.pieces.begin(), m.pieces.end(), [](const MergedPiece& a, const MergedPiece& b) {
      return a.file != b.file ? a.file < b.file : a.number < b.number;
    });
    std::vector<Box> boxes;
    std::vector<std::string> where;
    for (const MergedPiece& p : m.pieces) {
      boxes.push_back(p.box);
      where.push_back(p.file + " key " + p.key);
    }
    check_disjoint(path, name, boxes, where);
    text += sep + q(name) + ": {\"shape\": " + json(m.shape).dump() + ", \"dtype\": \"F32\", \"pieces\": [";
    const char* psep = "\n   ";
    for (const MergedPiece& p : m.pieces) {
      nlohmann::ordered_json piece{{"file", p.file}, {"key", p.key}, {"offset", p.box.offset}, {"extent", p.box.extent}};
      if (!p.crc.empty()) piece["crc32c"] = p.crc;
      text += psep + piece.dump();
      psep = ",\n   ";
    }
    text += "]}";
    sep = ",\n  ";
  }
  text += "\n }\n}\n";
  return text;
}

}  // namespace

void write_index(const std::string& dir, const std::vector<std::string>& fragments, const nlohmann::json& state) {
  const std::string path = (fs::path(dir) / kIndex).string();
  if (!state.is_object() || !state.contains("step") || !state["step"].is_number_integer())
    throw std::invalid_argument(path + ": the state must be an object with an integer \"step\" (got " + state.dump() +
                                ")");
  std::map<std::string, json> files;
  std::map<std::string, Merged> tensors;
  merge_fragments(path, fragments, files, tensors);
  write_new_file(path, index_text(path, state, files, tensors));
}

}  // namespace gf::ckpt
