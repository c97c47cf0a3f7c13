// CRC-32C: the SSE4.2 crc32 instruction where the CPU has it (x86-64 since 2008: 8 bytes per
// instruction), else a slicing-by-8 table (8 bytes per step, no CPU-specific instructions). A
// checkpoint save checksums every byte twice (the file's CRC and each piece's): the table ran at
// about 1 GB/s there, a second and more of a gpt2-124M save on the 2-vCPU EPYC.
#include "core/io/crc32c.h"

#include <array>
#include <cstring>

namespace gf {
namespace {

struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
};

const Tables& tables() {
  static const Tables tb;
  return tb;
}

}  // namespace

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n) {
  const auto& t = tables().t;
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;  // little-endian hosts (x86-64, aarch64)
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
        t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
  return ~c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}
#endif

bool crc32c_has_instruction() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
#else
  return false;
#endif
}

uint32_t crc32c_extend_instruction(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (crc32c_has_instruction()) return crc32c_sse42(crc, data, n);
#endif
  return crc32c_extend_portable(crc, data, n);
}

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  return crc32c_has_instruction() ? crc32c_extend_instruction(crc, data, n) : crc32c_extend_portable(crc, data, n);
}

}  // namespace gf
