// CRC-32C throughput (core/io/crc32c.h): the SSE4.2 instruction against the slicing-by-8 table, on one
// buffer in the same run, interleaved rounds. A checkpoint save checksums every byte it writes twice.
//
//   build/bin/bench_crc32c [--rounds 5] [--mib 256]
//
// Prints the CPU, each round's GB/s for both, the medians and their ratio.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/io/crc32c.h"

int main(int argc, char** argv) {
  int rounds = 5;
  long mib = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--mib") == 0) mib = std::atol(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_crc32c [--rounds 5] [--mib 256]\n");
      return 2;
    }
  }
  std::vector<unsigned char> buf(static_cast<size_t>(mib) << 20);
  uint32_t x = 1;
  for (auto& b : buf) b = static_cast<unsigned char>((x = x * 1103515245u + 12345u) >> 24);
  std::printf("CPU %s; %ld MiB, one thread; SSE4.2 instruction %s\n", gf::bench::cpu_model().c_str(), mib,
              gf::crc32c_has_instruction() ? "present" : "absent (both rows are the table)");
  std::vector<double> table, instr;
  for (int r = 0; r < rounds; ++r) {
    double t0 = gf::bench::wall_seconds();
    const uint32_t a = gf::crc32c_extend_portable(0, buf.data(), buf.size());
    double t1 = gf::bench::wall_seconds();
    const uint32_t b = gf::crc32c_extend_instruction(0, buf.data(), buf.size());
    double t2 = gf::bench::wall_seconds();
    if (a != b) {
      std::fprintf(stderr, "the two CRCs differ: %08x %08x\n", a, b);
      return 1;
    }
    table.push_back(static_cast<double>(buf.size()) / (t1 - t0) / 1e9);
    instr.push_back(static_cast<double>(buf.size()) / (t2 - t1) / 1e9);
    std::printf("round %d: table %.2f GB/s, instruction %.2f GB/s\n", r + 1, table.back(), instr.back());
  }
  const double mt = gf::bench::median(table), mi = gf::bench::median(instr);
  std::printf("median: table %.2f GB/s, instruction %.2f GB/s, %.2fx\n", mt, mi, mi / mt);
}
