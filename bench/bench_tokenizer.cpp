// Single-thread throughput of GPT2Tokenizer::encode on English text.
//
//   build/bin/bench_tokenizer [--vocab-file V] [--merge-file M] [--runs N] [TEXT_FILE...]
//
// Defaults: V = data/gpt2/gpt2-vocab.json, M = data/gpt2/gpt2-merges.txt (run from the repo
// root after scripts/fetch_gpt2_vocab.sh), N = 7, and as text the Debian `fortunes` files
// (/usr/share/games/fortunes/*, without .dat/.u8) concatenated in name order.
// Prints the median of N runs with a cold word cache (a freshly loaded tokenizer per run;
// loading is not timed) and with a warm one (the same tokenizer again), in MB/s (10^6
// bytes) and tokens/s. Each run is timed twice: wall clock, and the thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID), which other processes on a busy machine disturb far less.
// The cold-cache CPU-time figure is compared with the 5 MB/s one-core target.
// bench/bench_tokenizer_reference.js measures the JavaScript references on the same text.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/data/tokenizer.h"

namespace {

using namespace gf::bench;

namespace fs = std::filesystem;
using gf::data::GPT2Tokenizer;

constexpr double kTargetMBps = 5.0;
const char* kFortunesDir = "/usr/share/games/fortunes";

struct Options {
  std::string vocab = "data/gpt2/gpt2-vocab.json";
  std::string merges = "data/gpt2/gpt2-merges.txt";
  int runs = 7;
  std::vector<std::string> files;
};

Options parse_args(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--vocab-file") opt.vocab = value();
    else if (arg == "--merge-file") opt.merges = value();
    else if (arg == "--runs") opt.runs = std::max(1, std::stoi(value()));
    else opt.files.push_back(arg);
  }
  return opt;
}

std::vector<std::string> fortunes_files() {
  std::vector<std::string> files;
  if (!fs::is_directory(kFortunesDir)) return files;
  for (const auto& entry : fs::directory_iterator(kFortunesDir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.find('.') == std::string::npos) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_all(const std::vector<std::string>& files) {
  std::string text;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + file);
    std::ostringstream contents;
    contents << in.rdbuf();
    text += contents.str();
  }
  return text;
}

struct Timing {
  std::vector<double> wall, cpu;  // seconds per run
};

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void time_encode(const GPT2Tokenizer& tokenizer, const std::string& text, size_t& tokens, Timing& timing) {
  const double cpu_start = thread_cpu_seconds();
  const auto wall_start = std::chrono::steady_clock::now();
  tokens = tokenizer.encode(text).size();
  timing.wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count());
  timing.cpu.push_back(thread_cpu_seconds() - cpu_start);
}


void report(const char* label, const Timing& timing, size_t bytes, size_t tokens) {
  for (const auto& [clock, seconds] : {std::pair{"wall", &timing.wall}, std::pair{"cpu ", &timing.cpu}}) {
    const double s = median(*seconds);
    std::printf("%-34s %s %8.2f MB/s  %10.0f tokens/s  (median of %zu, %.3f s)\n", label, clock,
                bytes / s / 1e6, tokens / s, seconds->size(), s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options opt = parse_args(argc, argv);
    if (opt.files.empty()) opt.files = fortunes_files();
    if (opt.files.empty()) {
      std::cerr << "no text: pass text files, or install the `fortunes` package\n";
      return 1;
    }
    const std::string text = read_all(opt.files);
    std::printf("text: %zu bytes from %zu file(s)%s\n", text.size(), opt.files.size(),
                opt.files.size() > 1 ? " (concatenated in name order)" : "");

    Timing cold, warm, ignored;
    size_t tokens = 0;
    for (int run = 0; run < opt.runs; ++run) {
      const GPT2Tokenizer fresh = GPT2Tokenizer::from_files(opt.vocab, opt.merges);
      time_encode(fresh, text, tokens, cold);
    }
    const GPT2Tokenizer tokenizer = GPT2Tokenizer::from_files(opt.vocab, opt.merges);
    time_encode(tokenizer, text, tokens, ignored);  // fills this thread's word cache
    for (int run = 0; run < opt.runs; ++run) time_encode(tokenizer, text, tokens, warm);

    std::printf("tokens: %zu (%.2f bytes/token)\n", tokens, double(text.size()) / tokens);
    report("encode, 1 thread, cold word cache:", cold, text.size(), tokens);
    report("encode, 1 thread, warm word cache:", warm, text.size(), tokens);
    const double cold_mbps = text.size() / median(cold.cpu) / 1e6;
    std::printf("target >= %.1f MB/s on one core: %s (cold cache, cpu time: %.2f MB/s = %.1fx target)\n",
                kTargetMBps, cold_mbps >= kTargetMBps ? "PASS" : "FAIL", cold_mbps, cold_mbps / kTargetMBps);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_tokenizer: " << e.what() << '\n';
    return 1;
  }
}
