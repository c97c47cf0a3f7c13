// CRC-32C against published check values: RFC 3720 B.4's vectors and the catalogue's "123456789".
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/io/crc32c.h"

namespace gf {

TEST(Crc32c, PublishedVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<unsigned char>(i), dec[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(dec.data(), 32), 0x113FDB5Cu);
}

TEST(Crc32c, ExtendEqualsWhole) {
  std::string s;
  for (int i = 0; i < 1000; ++i) s += static_cast<char>(i * 7 + 3);
  const uint32_t whole = crc32c(s.data(), s.size());
  for (size_t cut : {0ul, 1ul, 7ul, 8ul, 13ul, 500ul, 999ul, 1000ul})
    EXPECT_EQ(crc32c_extend(crc32c(s.data(), cut), s.data() + cut, s.size() - cut), whole) << cut;
}

// The SSE4.2 instruction and the table agree on every length (the 8-byte steps and every tail) and
// alignment, continuing from any running value; both meet the published vectors.
TEST(Crc32c, InstructionAndTableAgree) {
  EXPECT_EQ(crc32c_extend_portable(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c_extend_instruction(0, "123456789", 9), 0xE3069283u);
  std::vector<unsigned char> buf(4096 + 16);
  uint32_t x = 12345;
  for (auto& b : buf) b = static_cast<unsigned char>((x = x * 1103515245u + 12345u) >> 24);
  for (size_t align = 0; align < 8; ++align)
    for (size_t n : {0ul, 1ul, 7ul, 8ul, 9ul, 15ul, 16ul, 63ul, 64ul, 1000ul, 4096ul})
      for (uint32_t start : {0u, 0xE3069283u, 0xffffffffu})
        EXPECT_EQ(crc32c_extend_instruction(start, buf.data() + align, n), crc32c_extend_portable(start, buf.data() + align, n))
            << "align " << align << " n " << n << " start " << start;
  if (!crc32c_has_instruction()) GTEST_SKIP() << "no SSE4.2 here: the instruction path fell back to the table";
}

}  // namespace gf
