// Facts about a run for its records (metrics.jsonl's run_start line, the machine probe): the commit
// the binary was built from, the CPU, the time, a hash of the resolved config.
#pragma once
#include <cstdint>
#include <string>

namespace gf {

// `git rev-parse --short HEAD` of the source tree at build time ("-dirty" when tracked files
// differed), or "unknown" when built outside a git checkout (scripts/git_commit.cmake).
const char* build_git_commit();

// /proc/cpuinfo's first "model name" ("unknown CPU" when it has none).
std::string cpu_model_name();

// The current time in ISO 8601, UTC, to the second: 2026-11-22T16:23:05Z.
std::string iso8601_utc_now();

// FNV-1a, 64 bits, as 16 hex digits: a short stable fingerprint of a text (not cryptographic).
std::string fnv1a64_hex(const std::string& text);

}  // namespace gf
