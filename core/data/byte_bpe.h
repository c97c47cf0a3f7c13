// The byte-level BPE pieces that GPT-2's tokenizer (core/data/tokenizer.cpp) and the Hugging Face
// tokenizer.json one (core/data/hf_tokenizer*.cpp) share: GPT-2's byte <-> unicode map, UTF-8 run
// helpers, the merge table and the per-thread cache of encoded pre-tokens. Internal to those files (and
// core/data/oniguruma.cpp, which takes lead_length).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace gf::data::byte_bpe {

constexpr size_t kMaxCachedWordBytes = 64;    // longer pre-tokens are not cached
constexpr size_t kMaxCachedWords = 1u << 16;  // cache is cleared when it grows past this

// ---------------------------------------------------------------------------------------
// GPT-2's byte <-> unicode map: printable Latin-1 bytes map to themselves, the other 68
// bytes (controls, space, 0x7F-0xA0, 0xAD) map to U+0100.. in byte order.

struct ByteUnicodeMap {
  std::array<char32_t, 256> to_unicode{};
  std::array<int16_t, 512> to_byte{};  // code point -> byte, -1 if not in the map
};

inline ByteUnicodeMap make_byte_unicode_map() {
  ByteUnicodeMap map;
  map.to_byte.fill(-1);
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  char32_t next_extra = 256;
  for (int b = 0; b < 256; ++b) {
    char32_t cp = printable(b) ? static_cast<char32_t>(b) : next_extra++;
    map.to_unicode[b] = cp;
    map.to_byte[cp] = static_cast<int16_t>(b);
  }
  return map;
}

inline const ByteUnicodeMap& byte_unicode_map() {
  static const ByteUnicodeMap map = make_byte_unicode_map();
  return map;
}

// ---------------------------------------------------------------------------------------
// UTF-8 helpers.

// Length of the well-formed UTF-8 sequence starting at s[0] (Unicode Table 3-7: no
// overlongs, no surrogates, nothing above U+10FFFF), or 0 if it is not well formed.
inline size_t utf8_sequence_length(const unsigned char* s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  auto cont = [&](size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return i < n && s[i] >= lo && s[i] <= hi;
  };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return cont(1, lo, hi) && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return cont(1, lo, hi) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

// Length of the longest valid UTF-8 prefix of s.
inline size_t valid_utf8_prefix(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size(), i = 0;
  while (i < n) {
    if (i + 8 <= n) {  // ASCII fast path, 8 bytes at a time
      uint64_t block;
      std::memcpy(&block, s + i, 8);
      if ((block & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    size_t len = utf8_sequence_length(s + i, n - i);
    if (len == 0) break;
    i += len;
  }
  return i;
}

// Length of the longest prefix of s in which no well-formed UTF-8 sequence starts.
inline size_t invalid_utf8_prefix(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0;
  while (i < text.size() && utf8_sequence_length(s + i, text.size() - i) == 0) ++i;
  return i;
}

// Length of the UTF-8 sequence lead byte c starts (1 for ASCII; the string is valid UTF-8).
inline size_t lead_length(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

// Decodes one code point of a string already checked to be valid UTF-8.
inline char32_t next_code_point(std::string_view s, size_t& i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t len = lead_length(c);
  char32_t cp = len == 1 ? c : c & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

// ---------------------------------------------------------------------------------------
// Merge table: (left id, right id) -> (rank, merged id), open addressing on a 64-bit key.

struct Merge {
  int32_t rank;
  int32_t merged_id;
};

class MergeTable {
 public:
  void reserve(size_t count) {
    size_t capacity = 16;
    while (capacity < 2 * count) capacity *= 2;
    slots_.assign(capacity, Slot{kEmpty, Merge{-1, -1}});
    mask_ = capacity - 1;
  }
  // Later entries replace earlier ones, as Python's dict(zip(merges, ranks)) does.
  void insert(int32_t left, int32_t right, Merge merge) {
    Slot& slot = find_slot(key(left, right));
    slot = Slot{key(left, right), merge};
  }
  const Merge* find(int32_t left, int32_t right) const {
    const Slot& slot = const_cast<MergeTable*>(this)->find_slot(key(left, right));
    return slot.key == kEmpty ? nullptr : &slot.merge;
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  struct Slot {  // key and value side by side: one cache line per probe
    uint64_t key;
    Merge merge;
  };
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  Slot& find_slot(uint64_t k) {
    size_t i = static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 29) & mask_;
    while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask_;
    return slots_[i];
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};


// Turns a token written with the byte-unicode map back into bytes; false if it holds a character
// outside the map (or is not UTF-8).
inline bool token_to_bytes(std::string_view token, std::string& bytes) {
  const auto& map = byte_unicode_map();
  bytes.clear();
  if (valid_utf8_prefix(token) != token.size()) return false;
  for (size_t i = 0; i < token.size();) {
    char32_t cp = next_code_point(token, i);
    if (cp >= map.to_byte.size() || map.to_byte[cp] < 0) return false;
    bytes.push_back(static_cast<char>(map.to_byte[cp]));
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// Per-thread cache of encoded pre-tokens.

// A fast 64-bit hash for short byte strings (never 0, which marks an empty cache slot).
inline uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xFF51AFD7ED558CCDull);
  const char* p = s.data();
  size_t n = s.size();
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t k;
    std::memcpy(&k, p, 8);
    h = (h ^ k) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p, n);
  h = (h ^ tail) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  return h == 0 ? 1 : h;
}

// Recently encoded pre-tokens -> their ids. Open addressing over flat arrays: the words
// live in one byte arena and the ids in one id arena, so a hit costs a few cache lines.
class WordCache {
 public:
  bool lookup(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const {
    for (size_t i = hash & mask_; slots_[i].hash != 0; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.hash == hash && slot.word_size == word.size() &&
          std::memcmp(words_.data() + slot.word_offset, word.data(), word.size()) == 0) {
        out.insert(out.end(), ids_.begin() + slot.ids_offset,
                   ids_.begin() + slot.ids_offset + slot.ids_size);
        return true;
      }
    }
    return false;
  }
  void store(std::string_view word, uint64_t hash, const int32_t* ids, size_t count) {
    if (word.size() > kMaxCachedWordBytes) return;
    if (size_ >= kMaxCachedWords) clear();
    size_t i = hash & mask_;
    while (slots_[i].hash != 0) i = (i + 1) & mask_;
    slots_[i] = Slot{hash, static_cast<uint32_t>(words_.size()), static_cast<uint32_t>(ids_.size()),
                     static_cast<uint16_t>(word.size()), static_cast<uint16_t>(count)};
    words_.append(word);
    ids_.insert(ids_.end(), ids, ids + count);
    ++size_;
  }
  void clear() {
    if (slots_.empty()) {
      slots_.resize(2 * kMaxCachedWords);  // load factor stays <= 1/2
      mask_ = slots_.size() - 1;
    } else if (size_ > 0) {
      std::fill(slots_.begin(), slots_.end(), Slot{});
    }
    words_.clear();
    ids_.clear();
    size_ = 0;
  }

 private:
  struct Slot {
    uint64_t hash = 0;  // 0: empty
    uint32_t word_offset = 0;
    uint32_t ids_offset = 0;
    uint16_t word_size = 0;
    uint16_t ids_size = 0;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
  std::string words_;
  std::vector<int32_t> ids_;
};

// Appends code point c to `out` in UTF-8 (c a scalar value: no surrogate, at most U+10FFFF).
inline void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

}  // namespace gf::data::byte_bpe
