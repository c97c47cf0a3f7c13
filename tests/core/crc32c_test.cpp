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

}  // namespace gf
