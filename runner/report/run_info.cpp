#include "runner/report/run_info.h"

#include <cstdio>
#include <ctime>
#include <fstream>

#include "gf_git_commit.h"  // generated in the build tree by scripts/git_commit.cmake

namespace gf {

const char* build_git_commit() { return GF_GIT_COMMIT; }

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      size_t b = line.find_first_not_of(" \t", colon + 1);
      if (b == std::string::npos) continue;
      const size_t e = line.find_last_not_of(" \t\r");
      return line.substr(b, e - b + 1);
    }
  return "unknown CPU";
}

std::string iso8601_utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string fnv1a64_hex(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace gf
