#include "core/data/spm_module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>

#ifndef GF_SENTENCEPIECE_MODULE_DIR
#define GF_SENTENCEPIECE_MODULE_DIR ""
#endif

namespace gf::data {
namespace {

constexpr const char* kModule = "libgf_sentencepiece.so";

struct Api {
  int (*version)();
  void* (*load)(const char*, char*, int);
  void (*free)(void*);
  int (*piece_size)(void*);
  int (*special_id)(void*, int);
  int (*piece_to_id)(void*, const char*, size_t);
  size_t (*id_to_piece)(void*, int, char*, size_t);
  int (*encode)(void*, const char*, size_t, int**, size_t*, char*, int);
  int (*decode)(void*, const int*, size_t, char**, size_t*, char*, int);
  void (*release)(void*);
};

std::string executable_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

template <typename F>
void bind(void* lib, const char* name, F& f, const std::string& path) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f) throw std::runtime_error(path + ": no symbol " + name + " (a module from another gridformer build?)");
}

const Api& api() {
  static Api a{};
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> tried;
    if (const char* env = std::getenv("GF_SENTENCEPIECE_MODULE"); env && *env) tried.emplace_back(env);
    if (const std::string dir = executable_dir(); !dir.empty()) tried.push_back(dir + "/" + kModule);
    if (*GF_SENTENCEPIECE_MODULE_DIR) tried.push_back(std::string(GF_SENTENCEPIECE_MODULE_DIR) + "/" + kModule);
    void* lib = nullptr;
    std::string path, errors;
    for (const std::string& p : tried) {
      lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (lib) {
        path = p;
        break;
      }
      errors += "\n  " + p + ": " + dlerror();
    }
    if (!lib) {
      failure = std::string("SentencePiece tokenizers need ") + kModule + " (built with gridformer, beside its binaries; "
                "Debian's libsentencepiece0 installed); not loaded:" + errors;
      return;
    }
    try {
      bind(lib, "gf_spm_version", a.version, path);
      if (a.version() != 1) throw std::runtime_error(path + ": interface version " + std::to_string(a.version()) + ", expected 1");
      bind(lib, "gf_spm_load", a.load, path);
      bind(lib, "gf_spm_free", a.free, path);
      bind(lib, "gf_spm_piece_size", a.piece_size, path);
      bind(lib, "gf_spm_special_id", a.special_id, path);
      bind(lib, "gf_spm_piece_to_id", a.piece_to_id, path);
      bind(lib, "gf_spm_id_to_piece", a.id_to_piece, path);
      bind(lib, "gf_spm_encode", a.encode, path);
      bind(lib, "gf_spm_decode", a.decode, path);
      bind(lib, "gf_spm_release", a.release, path);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw std::runtime_error(failure);
  return a;
}

}  // namespace

SpmProcessor::SpmProcessor(const std::string& model_file) {
  char err[512] = {};
  handle_ = api().load(model_file.c_str(), err, sizeof(err));
  if (!handle_) throw std::runtime_error(model_file + ": cannot load SentencePiece model: " + err);
}

SpmProcessor::~SpmProcessor() {
  if (handle_) api().free(handle_);
}

int32_t SpmProcessor::piece_size() const { return api().piece_size(handle_); }
int32_t SpmProcessor::bos_id() const { return api().special_id(handle_, 0); }
int32_t SpmProcessor::eos_id() const { return api().special_id(handle_, 1); }
int32_t SpmProcessor::pad_id() const { return api().special_id(handle_, 2); }
int32_t SpmProcessor::unk_id() const { return api().special_id(handle_, 3); }

int32_t SpmProcessor::piece_to_id(std::string_view piece) const {
  return api().piece_to_id(handle_, piece.data(), piece.size());
}

std::string SpmProcessor::id_to_piece(int32_t id) const {
  std::string s(64, '\0');
  size_t n = api().id_to_piece(handle_, id, s.data(), s.size());
  if (n > s.size()) {
    s.resize(n);
    n = api().id_to_piece(handle_, id, s.data(), s.size());
  }
  s.resize(n);
  return s;
}

void SpmProcessor::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  int* ids = nullptr;
  size_t n = 0;
  char err[512] = {};
  if (api().encode(handle_, text.data(), text.size(), &ids, &n, err, sizeof(err)) != 0)
    throw std::runtime_error(std::string("SentencePiece Encode failed: ") + err);
  out.insert(out.end(), ids, ids + n);
  api().release(ids);
}

std::string SpmProcessor::decode(std::span<const int32_t> ids) const {
  std::vector<int> v(ids.begin(), ids.end());
  char* text = nullptr;
  size_t n = 0;
  char err[512] = {};
  if (api().decode(handle_, v.data(), v.size(), &text, &n, err, sizeof(err)) != 0)
    throw std::runtime_error(std::string("SentencePiece Decode failed: ") + err);
  std::string s(text, n);
  api().release(text);
  return s;
}

}  // namespace gf::data
