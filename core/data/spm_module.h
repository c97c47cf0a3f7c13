// SentencePiece through plugins/sentencepiece_shim.cpp (libgf_sentencepiece.so), loaded at first use
// with RTLD_LOCAL | RTLD_DEEPBIND: Debian's libsentencepiece carries its own protobuf, which must not
// meet the libprotobuf that gridformer links (see the shim). The module is looked for in
// $GF_SENTENCEPIECE_MODULE, then beside the running executable, then in the build's bin directory.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gf::data {

// One loaded SentencePiece model. Const members may be called concurrently (the processor keeps no
// per-call state). Throws std::runtime_error naming the model or the module on failure.
class SpmProcessor {
 public:
  explicit SpmProcessor(const std::string& model_file);
  ~SpmProcessor();
  SpmProcessor(const SpmProcessor&) = delete;
  SpmProcessor& operator=(const SpmProcessor&) = delete;

  int32_t piece_size() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t pad_id() const;
  int32_t unk_id() const;
  int32_t piece_to_id(std::string_view piece) const;
  std::string id_to_piece(int32_t id) const;
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;
  std::string decode(std::span<const int32_t> ids) const;

 private:
  void* handle_ = nullptr;
};

}  // namespace gf::data
