#include "core/data/sentencepiece_tokenizer.h"

#include "core/data/spm_module.h"

#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace gf::data {

struct SentencePieceTokenizer::Impl {
  explicit Impl(const std::string& model_file) : sp(model_file) {}
  SpmProcessor sp;
  bool megatron = true;
  int32_t pieces = 0;
  // Megatron mode: special tokens in Megatron's insertion order, their ids, and added tokens by id.
  std::vector<std::pair<std::string, int32_t>> specials;
  std::unordered_map<int32_t, std::string> special_by_id;
  std::vector<std::string> added;  // ids pieces, pieces + 1, ...
  int32_t eod = -1, bos = -1, eos = -1;

  void encode_plain(std::string_view text, std::vector<int32_t>& out) const { sp.encode_append(text, out); }
};

SentencePieceTokenizer SentencePieceTokenizer::from_file(const std::string& model_file, bool megatron_specials,
                                                         int vocab_extra_ids) {
  auto impl = std::make_shared<Impl>(model_file);
  impl->megatron = megatron_specials;
  impl->pieces = impl->sp.piece_size();
  const auto piece_or = [&](int id, const char* fallback) -> std::string {
    return id >= 0 && id < impl->pieces ? impl->sp.id_to_piece(id) : std::string(fallback);
  };
  if (!megatron_specials) {
    impl->bos = impl->sp.bos_id();
    impl->eos = impl->sp.eos_id();
    impl->eod = impl->eos;
    return SentencePieceTokenizer(std::move(impl));
  }
  // Megatron's _SentencePieceTokenizer._initalize: _add_special_token for each, in this order.
  const auto add = [&](const std::string& token) -> int32_t {
    for (const auto& [t, id] : impl->specials)
      if (t == token) return id;  // listed twice (e.g. the pad piece is "<PAD>"): the same id
    int32_t id = impl->sp.piece_to_id(token);
    // PieceToId answers unk for an unknown piece; only the unk piece itself maps there.
    if (id == impl->sp.unk_id() && impl->sp.id_to_piece(id) != token) id = -1;
    if (id < 0) {
      for (size_t i = 0; i < impl->added.size(); ++i)
        if (impl->added[i] == token) id = impl->pieces + static_cast<int32_t>(i);
    }
    if (id < 0) {
      id = impl->pieces + static_cast<int32_t>(impl->added.size());
      impl->added.push_back(token);
    }
    impl->specials.emplace_back(token, id);
    impl->special_by_id.emplace(id, token);
    return id;
  };
  add("<CLS>");
  add("<SEP>");
  impl->eod = add("<EOD>");
  add("<MASK>");
  add(piece_or(impl->sp.pad_id(), "<PAD>"));
  impl->bos = add(piece_or(impl->sp.bos_id(), "<BOS>"));
  impl->eos = add(piece_or(impl->sp.eos_id(), "<EOS>"));
  for (int i = 0; i < vocab_extra_ids; ++i) add("<extra_id_" + std::to_string(i) + ">");
  return SentencePieceTokenizer(std::move(impl));
}

void SentencePieceTokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  const Impl& m = *impl_;
  if (!m.megatron) return m.encode_plain(text, out);
  // NeMo/Megatron tokenize: repeatedly find the leftmost special token string; ties go to the one
  // listed first (Python's min over the dict keeps the first minimum). Byte offsets order matches
  // Python's code-point offsets: a valid UTF-8 needle only matches at a character boundary.
  size_t idx = 0;
  for (;;) {
    size_t best = std::string_view::npos;
    const std::pair<std::string, int32_t>* which = nullptr;
    for (const auto& s : m.specials) {
      const size_t at = text.find(s.first, idx);
      if (at != std::string_view::npos && (best == std::string_view::npos || at < best)) best = at, which = &s;
    }
    if (!which) break;
    m.encode_plain(text.substr(idx, best - idx), out);
    out.push_back(which->second);
    idx = best + which->first.size();
  }
  m.encode_plain(text.substr(idx), out);
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view utf8) const {
  std::vector<int32_t> out;
  encode_append(utf8, out);
  return out;
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& m = *impl_;
  const auto decode_run = [&](std::span<const int32_t> run) {
    for (const int32_t id : run)
      if (id < 0 || id >= m.pieces) throw std::out_of_range("SentencePiece id " + std::to_string(id) + " out of range");
    return m.sp.decode(run);
  };
  if (!m.megatron) return decode_run(ids);
  std::string text;
  size_t last = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto it = m.special_by_id.find(ids[i]);
    if (it == m.special_by_id.end()) {
      if (ids[i] < 0 || ids[i] >= vocab_size())
        throw std::out_of_range("SentencePiece id " + std::to_string(ids[i]) + " out of range");
      continue;
    }
    text += decode_run(ids.subspan(last, i - last)) + " ";
    text += it->second + " ";
    last = i + 1;
  }
  return text + decode_run(ids.subspan(last));
}

bool SentencePieceTokenizer::megatron_specials() const { return impl_->megatron; }
int32_t SentencePieceTokenizer::eod_id() const { return impl_->eod; }
int32_t SentencePieceTokenizer::bos_id() const { return impl_->bos; }
int32_t SentencePieceTokenizer::eos_id() const { return impl_->eos; }
int32_t SentencePieceTokenizer::piece_size() const { return impl_->pieces; }
int32_t SentencePieceTokenizer::vocab_size() const {
  return impl_->pieces + static_cast<int32_t>(impl_->added.size());
}

}  // namespace gf::data
