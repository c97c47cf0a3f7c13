// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as iSCSI (RFC 3720), TFRecord framing and
// our checkpoint index use it. crc32c("123456789") = 0xE3069283. `extend` continues a running value
// over more bytes, so a file can be checksummed in pieces.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gf {

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
// The two ways it is computed (crc32c_extend takes the instruction where the CPU has it): the SSE4.2
// crc32 instruction (the portable one where the CPU lacks it), and a slicing-by-8 table.
bool crc32c_has_instruction();
uint32_t crc32c_extend_instruction(uint32_t crc, const void* data, size_t n);
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }
// TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
inline uint32_t crc32c_masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace gf
