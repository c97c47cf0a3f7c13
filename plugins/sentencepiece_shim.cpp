// The part of SentencePiece that core/data/sentencepiece_tokenizer.cpp uses, behind a C interface in a
// module of its own (libgf_sentencepiece.so, beside the executables).
//
// Why a module: Debian's libsentencepiece.so.0 carries its own copy of protobuf-lite and exports its
// symbols. Linked into a process that also links libprotobuf.so (gridformer: MindSpore checkpoints,
// TensorBoard events), libprotobuf's static initialisers bind to sentencepiece's copy and the process
// crashes before main. core/data/spm_module.h loads this module with RTLD_LOCAL | RTLD_DEEPBIND, so
// each library keeps its own protobuf.
#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void set_error(char* err, int len, const std::string& what) {
  if (err == nullptr || len <= 0) return;
  std::strncpy(err, what.c_str(), static_cast<size_t>(len) - 1);
  err[len - 1] = '\0';
}

sentencepiece::SentencePieceProcessor& sp(void* h) { return *static_cast<sentencepiece::SentencePieceProcessor*>(h); }

}  // namespace

extern "C" {

// The interface version core/data/spm_module.cpp checks.
int gf_spm_version() { return 1; }

void* gf_spm_load(const char* path, char* err, int errlen) {
  auto* p = new sentencepiece::SentencePieceProcessor();
  const auto status = p->Load(path);
  if (!status.ok()) {
    set_error(err, errlen, status.ToString());
    delete p;
    return nullptr;
  }
  return p;
}

void gf_spm_free(void* h) { delete &sp(h); }

int gf_spm_piece_size(void* h) { return sp(h).GetPieceSize(); }

// which: 0 bos, 1 eos, 2 pad, 3 unk
int gf_spm_special_id(void* h, int which) {
  switch (which) {
    case 0: return sp(h).bos_id();
    case 1: return sp(h).eos_id();
    case 2: return sp(h).pad_id();
    default: return sp(h).unk_id();
  }
}

int gf_spm_piece_to_id(void* h, const char* piece, size_t n) { return sp(h).PieceToId(std::string(piece, n)); }

// Writes the piece (not terminated) into buf when it fits; returns its length.
size_t gf_spm_id_to_piece(void* h, int id, char* buf, size_t cap) {
  const std::string& p = sp(h).IdToPiece(id);
  if (p.size() <= cap) std::memcpy(buf, p.data(), p.size());
  return p.size();
}

// *ids: malloc'd, released with gf_spm_release. Returns 0, or -1 with err set.
int gf_spm_encode(void* h, const char* text, size_t n, int** ids, size_t* count, char* err, int errlen) {
  std::vector<int> v;
  const auto status = sp(h).Encode(std::string_view(text, n), &v);
  if (!status.ok()) {
    set_error(err, errlen, status.ToString());
    return -1;
  }
  *count = v.size();
  *ids = static_cast<int*>(std::malloc(sizeof(int) * (v.empty() ? 1 : v.size())));
  if (!v.empty()) std::memcpy(*ids, v.data(), sizeof(int) * v.size());
  return 0;
}

// *text: malloc'd, released with gf_spm_release. Returns 0, or -1 with err set.
int gf_spm_decode(void* h, const int* ids, size_t n, char** text, size_t* len, char* err, int errlen) {
  std::string out;
  const auto status = sp(h).Decode(std::vector<int>(ids, ids + n), &out);
  if (!status.ok()) {
    set_error(err, errlen, status.ToString());
    return -1;
  }
  *len = out.size();
  *text = static_cast<char*>(std::malloc(out.empty() ? 1 : out.size()));
  if (!out.empty()) std::memcpy(*text, out.data(), out.size());
  return 0;
}

void gf_spm_release(void* p) { std::free(p); }

}  // extern "C"
