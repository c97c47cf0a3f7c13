// Single-thread throughput of HFTokenizer::encode (core/data/hf_tokenizer.h), document by document.
//
//   hf_tokenizer_speed [--tokenizer tokenizer.json]... [--corpus corpus.jsonl | --text FILE] [--mb 10] [--runs 5]
//   hf_tokenizer_speed --load-only [--tokenizer tokenizer.json]... [--runs 5]
//
// --load-only times HFTokenizer::from_file instead (reading, parsing and loading the file, then
// destroying the tokenizer): the median of --runs loads of each tokenizer, in seconds.
//
// Run from the repository root. Defaults: the four fixtures of tests/data/hf_tokenizer (gpt2,
// llama3, qwen2, features) and their corpus.jsonl (one {"text": ...} per line: every script and
// whitespace class), its documents repeated until they hold --mb megabytes (10^6 bytes). --text
// FILE takes the lines of a plain text file as the documents instead (e.g. a Debian fortunes
// file), likewise repeated. Each run loads the tokenizer afresh (loading not timed; the word cache
// starts empty) and encodes every document with encode(); the median of --runs runs is printed in
// MB/s and tokens/s, by wall clock and by the thread's CPU time (CLOCK_THREAD_CPUTIME_ID, which
// other processes on a busy machine disturb less), with the CPU's name from /proc/cpuinfo. The
// CPU-time figure is compared with the 5 MB/s one-core target.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/data/hf_tokenizer.h"

namespace {

using gf::data::HFTokenizer;

constexpr double kTargetMBps = 5.0;

struct Options {
  std::vector<std::string> tokenizers;
  std::string corpus = "tests/data/hf_tokenizer/corpus.jsonl";
  std::string text;
  double mb = 10;
  int runs = 5;
  bool load_only = false;
};

Options parse_args(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--tokenizer") opt.tokenizers.push_back(value());
    else if (arg == "--corpus") opt.corpus = value();
    else if (arg == "--text") opt.text = value();
    else if (arg == "--mb") opt.mb = std::stod(value());
    else if (arg == "--runs") opt.runs = std::max(1, std::stoi(value()));
    else if (arg == "--load-only") opt.load_only = true;
    else throw std::runtime_error("unknown argument " + arg);
  }
  if (opt.tokenizers.empty())
    for (const char* name : {"gpt2", "llama3", "qwen2", "features"})
      opt.tokenizers.push_back(std::string("tests/data/hf_tokenizer/") + name + "/tokenizer.json");
  return opt;
}

std::vector<std::string> read_documents(const Options& opt) {
  const std::string path = opt.text.empty() ? opt.corpus : opt.text;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<std::string> docs;
  for (std::string line; std::getline(in, line);) {
    if (opt.text.empty()) docs.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
    else if (!line.empty()) docs.push_back(line + "\n");
  }
  if (docs.empty()) throw std::runtime_error("no documents in " + path);
  return docs;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options opt = parse_args(argc, argv);
    if (opt.load_only) {
      for (const std::string& path : opt.tokenizers) {
        std::vector<double> wall;
        int32_t size = 0;
        for (int run = 0; run < opt.runs; ++run) {
          const auto w0 = std::chrono::steady_clock::now();
          {
            const HFTokenizer tok = HFTokenizer::from_file(path);
            size = tok.vocab_size();
          }
          wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
        }
        std::sort(wall.begin(), wall.end());
        std::printf("%-48s load %.3f s (median of %d; min %.3f, max %.3f; %d tokens)\n", path.c_str(),
                    gf::bench::median(wall), opt.runs, wall.front(), wall.back(), size);
      }
      return 0;
    }
    const std::vector<std::string> base = read_documents(opt);
    std::vector<std::string> docs;
    size_t bytes = 0;
    while (bytes < opt.mb * 1e6)
      for (const std::string& d : base) docs.push_back(d), bytes += d.size();
    std::printf("cpu: %s\n", gf::bench::cpu_model().c_str());
    std::printf("text: %zu documents, %.2f MB (%s, repeated)\n", docs.size(), bytes / 1e6,
                (opt.text.empty() ? opt.corpus : opt.text).c_str());
    bool all_pass = true;
    for (const std::string& path : opt.tokenizers) {
      std::vector<double> wall, cpu;
      size_t tokens = 0;
      for (int run = 0; run < opt.runs; ++run) {
        const HFTokenizer tok = HFTokenizer::from_file(path);
        tokens = 0;
        const double c0 = thread_cpu_seconds();
        const auto w0 = std::chrono::steady_clock::now();
        for (const std::string& d : docs) tokens += tok.encode(d).size();
        wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
        cpu.push_back(thread_cpu_seconds() - c0);
      }
      const double w = gf::bench::median(wall), c = gf::bench::median(cpu);
      const bool pass = bytes / c / 1e6 >= kTargetMBps;
      all_pass = all_pass && pass;
      std::printf("%-48s wall %7.2f MB/s  cpu %7.2f MB/s  %10.0f tokens/s  (%zu tokens, median of %d)  %s\n",
                  path.c_str(), bytes / w / 1e6, bytes / c / 1e6, tokens / c, tokens, opt.runs,
                  pass ? "PASS" : "FAIL");
    }
    std::printf("target >= %.1f MB/s on one core (cpu time): %s\n", kTargetMBps, all_pass ? "PASS" : "FAIL");
    return all_pass ? 0 : 2;
  } catch (const std::exception& e) {
    std::cerr << "hf_tokenizer_speed: " << e.what() << "\n";
    return 1;
  }
}
