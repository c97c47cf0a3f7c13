// Sharded checkpoints (core/io/checkpoint.h): shard files and the index; the boxes are checkpoint_box.cpp, the
// directory steps (begin, commit, abort, list, resolve) checkpoint_dir.cpp, the reader checkpoint_reader.cpp.
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
