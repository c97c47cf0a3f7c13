// Reading our checkpoints (core/io/checkpoint.h: Reader): the index, each shard's header, and the
// boxes a placement asks for, checked (CRC-32C of every shard) as they are read.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/io/checkpoint_detail.h"
#include "core/io/crc32c.h"
#include "core/io/safetensors.h"

namespace gf::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace detail;

// ---- reading --------------------------------------------------------------------------------

namespace {
bool g_crc_checks = true;
}

void set_crc_checks(bool on) { g_crc_checks = on; }

// A shard file as a resume reads it: mapped read-only (map, map_bytes), its tensors parsed over the mapping.
struct Reader::Shard {
  SafeTensorsFile st;
  const uint8_t* map = nullptr;
  size_t map_bytes = 0;

  // Unmaps from this process the whole pages inside [p, p + n) that lie in the mapping: they leave its
  // resident set and stay in the page cache, and a later read faults the same bytes back in (the mapping
  // is a private one of a file, never written). Without it a resume's peak RSS counted every shard
  // byte it had read on top of the weights they fill (gpt2-124M: 1.37x the plan). Bytes outside the
  // mapping are never touched: on anonymous memory MADV_DONTNEED would clear them.
  void drop(const void* p, size_t n) const {
    static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t lo = std::max(reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(map));
    const uintptr_t hi = std::min(reinterpret_cast<uintptr_t>(p) + n, reinterpret_cast<uintptr_t>(map) + map_bytes);
    const uintptr_t a = (lo + page - 1) / page * page, b = hi / page * page;
    if (map != nullptr && a < b) ::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
  }
};

Reader Reader::open(const std::string& path) {
  Reader r;
  r.dir_ = resolve(path);
  const std::string index_path = (fs::path(r.dir_) / kIndex).string();
  json index;
  {
    const std::string text = read_text(index_path);
    try {
      index = json::parse(text);
    } catch (const json::exception& e) {
      throw std::runtime_error(index_path + ": not JSON (" + e.what() +
                               "); the checkpoint is damaged, resume from another one");
    }
  }
  if (!index.is_object() || index.value("format", json()) != kFormat)
    throw std::runtime_error(index_path + ": not a gridformer checkpoint index (its \"format\" is not \"" + kFormat +
                             "\")");
  if (index.value("version", json()) != kVersion)
    throw std::runtime_error(index_path + ": version " + index.value("version", json()).dump() +
                             "; this build reads version " + std::to_string(kVersion) +
                             " (a checkpoint from a newer gridformer?)");
  std::map<std::string, std::string> holds;  // file -> a tensor in it, for the messages
  try {
    r.state_ = index.at("state");
    for (auto& [file, info] : index.at("files").items()) {
      uint32_t crc = 0;
      if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos)
        throw std::runtime_error(index_path + ": file name \"" + file + "\" is not a file of the checkpoint directory");
      if (!parse_hex8(info.at("crc32c").get<std::string>(), &crc))
        throw std::runtime_error(index_path + ": file " + file + ": crc32c " + info.at("crc32c").dump() +
                                 " is not 8 lowercase hex digits");
      r.files_[file] = {info.at("bytes").get<int64_t>(), crc};
    }
    for (auto& [name, t] : index.at("tensors").items()) {
      SavedTensor s;
      s.shape = t.at("shape").get<std::vector<int64_t>>();
      if (s.shape.empty())
        throw std::runtime_error(index_path + ": tensor " + name + ": no shape (a saved tensor has at least one dim)");
      if (t.value("dtype", "F32") != "F32")
        throw std::runtime_error(index_path + ": tensor " + name + ": dtype " + t.at("dtype").dump() +
                                 "; this build reads F32");
      std::vector<Box> boxes;
      std::vector<std::string> where;
      for (const json& p : t.at("pieces")) {
        SavedPiece sp{p.at("file").get<std::string>(), p.at("key").get<std::string>(),
                      Box{p.at("offset").get<std::vector<int64_t>>(), p.at("extent").get<std::vector<int64_t>>()}};
        if (p.contains("crc32c")) {
          sp.has_crc = parse_hex8(p.at("crc32c").get<std::string>(), &sp.crc);
          if (!sp.has_crc)
            throw std::runtime_error(index_path + ": tensor " + name + ": piece crc32c " + p.at("crc32c").dump() +
                                     " is not 8 lowercase hex digits");
        }
        if (!r.files_.count(sp.file))
          throw std::runtime_error(index_path + ": tensor " + name + ": file " + sp.file + " is not in \"files\"");
        if (!inside(sp.box, s.shape))
          throw std::runtime_error(index_path + ": tensor " + name + ": box " + show(sp.box) + " in " + sp.file +
                                   " is not inside its shape " + shape_str(s.shape));
        holds.try_emplace(sp.file, name);
        boxes.push_back(sp.box);
        where.push_back(sp.file + " key " + sp.key);
        s.pieces.push_back(std::move(sp));
      }
      check_disjoint(index_path, name, boxes, where);
      r.tensors_[name] = std::move(s);
    }
  } catch (const json::exception& e) {
    throw std::runtime_error(index_path + ": malformed index (" + e.what() + "); the checkpoint is damaged");
  }
  for (const auto& [file, info] : r.files_) {
    const std::string fpath = (fs::path(r.dir_) / file).string();
    const auto h = holds.find(file);
    const std::string what = h == holds.end() ? "" : " (it holds " + h->second + ")";
    struct stat st;
    if (::stat(fpath.c_str(), &st) != 0) {
      const int err = errno;
      throw std::runtime_error(fpath + ": " + std::strerror(err) + what +
                               ": the checkpoint is incomplete or damaged; resume from another one");
    }
    if (static_cast<int64_t>(st.st_size) != info.first)
      throw std::runtime_error(fpath + ": " + std::to_string(st.st_size) + " bytes, the index records " +
                               std::to_string(info.first) + what +
                               ": the checkpoint is truncated or damaged; resume from another one");
  }
  return r;
}

const std::vector<int64_t>& Reader::shape(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw std::runtime_error("checkpoint " + dir_ + ": no tensor " + name);
  return it->second.shape;
}

std::vector<std::string> Reader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

void Reader::release() { open_.clear(); }

const Reader::Shard& Reader::shard(const std::string& file, const std::string& tensor) {
  const auto it = open_.find(file);
  if (it != open_.end()) return *it->second;
  const auto [bytes, crc] = files_.at(file);
  const std::string path = (fs::path(dir_) / file).string();
  // The file is mapped, not read into a buffer of our own: a resume then neither zero-fills nor copies
  // the shard (gpt2-124M: 1.4 GiB), and its pages are the page cache's. The length is checked first:
  // touching a mapped page past the end of a file raises SIGBUS.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC), path);
  if (fd.get() < 0) {
    const int err = errno;
    sys_fail(err, path, "cannot open (reading " + tensor + ")");
  }
  struct stat sb;
  if (::fstat(fd.get(), &sb) != 0) {
    const int err = errno;
    sys_fail(err, path, "cannot stat (reading " + tensor + ")");
  }
  if (sb.st_size < bytes)
    throw std::runtime_error(path + ": ends after " + std::to_string(sb.st_size) + " bytes, the index records " +
                             std::to_string(bytes) + " (reading " + tensor + "): the checkpoint is damaged");
  const size_t n = static_cast<size_t>(bytes);
  void* m = n > 0 ? ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd.get(), 0) : nullptr;
  if (m == MAP_FAILED) {
    const int err = errno;
    sys_fail(err, path, "cannot map (reading " + tensor + ")");
  }
  fd.close();
  std::shared_ptr<const void> mapping(m, [n](const void* p) {
    if (p != nullptr) ::munmap(const_cast<void*>(p), n);
  });
  const auto* data = static_cast<const uint8_t*>(m);
  auto s = std::make_shared<Shard>();
  s->map = data;
  s->map_bytes = n;
  // The file's CRC in chunks, each dropped once summed, so the check does not hold the whole file.
  uint32_t have = 0;
  constexpr size_t kChunk = size_t{64} << 20;
  for (size_t at = 0; at < n; at += kChunk) {
    const size_t len = std::min(kChunk, n - at);
    have = crc32c_extend(have, data + at, len);
    s->drop(data + at, len);
  }
  if (have != crc && g_crc_checks)
    throw std::runtime_error(path + ": CRC-32C " + hex8(have) + ", the index records " + hex8(crc) + " (reading " +
                             tensor + "; " + damaged_pieces(file, std::vector<uint8_t>(data, data + n)) +
                             "): the shard is damaged; restore it or resume from another checkpoint");
  s->st = SafeTensorsFile::parse(path, data, n, std::move(mapping));
  return *(open_[file] = std::move(s));
}

std::string Reader::damaged_pieces(const std::string& file, const std::vector<uint8_t>& data) const {
  const std::string path = (fs::path(dir_) / file).string();
  std::string out;
  try {
    const SafeTensorsFile st = SafeTensorsFile::parse(path, std::vector<uint8_t>(data));
    for (const auto& [name, t] : tensors_)
      for (const SavedPiece& p : t.pieces) {
        if (p.file != file || !p.has_crc || !st.has(p.key)) continue;
        const StTensor& x = st.get(p.key);
        const uint32_t c = crc32c(x.data, static_cast<size_t>(x.nbytes));
        if (c != p.crc)
          out += (out.empty() ? "" : ", ") + std::string("tensor ") + name + " box " + show(p.box) + " (CRC-32C " +
                 hex8(c) + ", saved " + hex8(p.crc) + ")";
      }
  } catch (const std::exception& e) {
    return std::string("its header does not parse: ") + e.what();
  }
  return out.empty() ? "no tensor piece differs from its own CRC: the header or padding is damaged" : "damaged: " + out;
}

std::string Reader::verify() const {
  for (const auto& [file, info] : files_) {
    const std::string path = (fs::path(dir_) / file).string();
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC), path);
    if (fd.get() < 0) return path + ": " + std::strerror(errno);
    std::vector<uint8_t> buf(size_t{1} << 22);
    uint32_t have = 0;
    int64_t got = 0;
    for (;;) {
      const ssize_t r = ::read(fd.get(), buf.data(), buf.size());
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return path + ": cannot read: " + std::strerror(errno);
      if (r == 0) break;
      have = crc32c_extend(have, buf.data(), static_cast<size_t>(r));
      got += r;
    }
    fd.close();
    if (got != info.first)
      return path + ": " + std::to_string(got) + " bytes, the index records " + std::to_string(info.first);
    if (have == info.second) continue;
    std::vector<uint8_t> data(static_cast<size_t>(info.first));  // read again whole, to name the damage
    std::string problem = path + ": CRC-32C " + hex8(have) + ", the index records " + hex8(info.second);
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      const size_t n = std::fread(data.data(), 1, data.size(), f);
      std::fclose(f);
      if (n == data.size()) problem += " (" + damaged_pieces(file, data) + ")";
    }
    return problem;
  }
  return "";
}

void Reader::fill(const std::string& name, const SavedTensor& s, const std::vector<SlicePiece>& wanted,
                  const std::vector<int64_t>& local_shape, float* local) {
  for (const SlicePiece& w : wanted) {
    int64_t covered = 0;
    for (const SavedPiece& p : s.pieces) {
      Box both;
      if (!intersect(w.global, p.box, &both)) continue;
      const Shard& sh = shard(p.file, name);
      const std::string path = (fs::path(dir_) / p.file).string();
      if (!sh.st.has(p.key))
        throw std::runtime_error(path + ": no tensor '" + p.key + "', which the index names for " + name +
                                 ": the checkpoint is damaged");
      const StTensor& st = sh.st.get(p.key);
      if (st.dtype != StDtype::kF32 || st.shape != p.box.extent)
        throw std::runtime_error(path + ": tensor '" + p.key + "' is not F32 of shape " + shape_str(p.box.extent) +
                                 " as the index records for " + name + ": the checkpoint is damaged");
      std::vector<int64_t> soff(both.offset.size()), doff(both.offset.size());
      for (size_t k = 0; k < soff.size(); ++k) {
        soff[k] = both.offset[k] - p.box.offset[k];
        doff[k] = w.local_offset[k] + both.offset[k] - w.global.offset[k];
      }
      copy_box(st.data, p.box.extent, soff, local, local_shape, doff, both.extent);
      sh.drop(st.data, static_cast<size_t>(st.nbytes));
      covered += both.numel();
    }
    // The saved boxes are disjoint (checked at open), so the sum of the overlaps is the count.
    if (covered == w.global.numel()) continue;
    // Find an element no saved box holds, to name it.
    const size_t n = w.global.offset.size();
    std::vector<int64_t> g = w.global.offset;
    for (;;) {
      bool held = false;
      for (const SavedPiece& p : s.pieces) {
        held = true;
        for (size_t k = 0; k < n && held; ++k)
          held = g[k] >= p.box.offset[k] && g[k] < p.box.offset[k] + p.box.extent[k];
        if (held) break;
      }
      if (!held)
        throw std::runtime_error("checkpoint " + dir_ + ": tensor " + name + ": element " + shape_str(g) + " of shape " +
                                 shape_str(s.shape) +
                                 " is in no saved piece; the checkpoint does not hold everything this layout needs");
      size_t k = n;
      while (k > 0) {
        --k;
        if (++g[k] < w.global.offset[k] + w.global.extent[k]) break;
        g[k] = w.global.offset[k];
        if (k == 0) throw std::logic_error("checkpoint " + dir_ + ": " + name + ": coverage count disagrees");
      }
    }
  }
}

const Reader::SavedTensor& Reader::saved(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw std::runtime_error("checkpoint " + dir_ + ": no tensor " + name + " among its " +
                             std::to_string(tensors_.size()) + " tensors (saved from another model?)");
  return it->second;
}

void Reader::read(const std::string& name, const TensorPlacement& t, float* local, int64_t lo, int64_t hi) {
  const SavedTensor& s = saved(name);
  hi = end_of(t, lo, hi, "Reader::read");
  if (s.shape != t.spec->shape)
    throw std::runtime_error("checkpoint " + dir_ + ": tensor " + name + " has shape " + shape_str(s.shape) +
                             " in the checkpoint but " + shape_str(t.spec->shape) +
                             " in this model; resume with the model config it was saved with");
  int64_t held = 0;
  for (const SlicePiece& p : t.pieces) held += p.global.numel();
  if (held < t.numel()) std::fill(local + lo, local + hi, 0.0f);  // padding
  fill(name, s, wanted_boxes(t, lo, hi), t.local_shape, local);
}

std::vector<float> Reader::read_full(const std::string& name) {
  const SavedTensor& s = saved(name);
  std::vector<float> out(static_cast<size_t>(numel_of(s.shape)));
  if (out.empty()) return out;
  const std::vector<int64_t> zero(s.shape.size(), 0);
  fill(name, s, {SlicePiece{Box{zero, s.shape}, zero}}, s.shape, out.data());
  return out;
}

}  // namespace gf::ckpt
