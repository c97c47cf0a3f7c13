// The docs' key lists against the config schema's marks: no key that README.md or docs/ lists as **ignored**
// is one the loader reads (runner/config/keys.cpp's built or checked rules, for GPT2Config and LlamaConfig).
// The README once listed predict's generation keys and processor.* as ignored while predict read them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "runner/config/schema.h"

namespace gf {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The backticked names in the text after each **ignored** to the end of its paragraph (a blank line, or the
// next list item or bold mark), that name a key some rule of the schemas reads (built or checked) and no rule
// of them leaves unread: "<doc>: `key` listed as ignored, but <rule path> is read (<why>)". A name right after
// "is " or "see " points to the key that does the job instead ("ZeRO-1 here is `parallel.enable_parallel_optimizer`"):
// a reference, not a claim.
std::vector<std::string> ignored_but_read(const std::string& doc, const std::string& text) {
  std::vector<KeyRule> rules = key_rules_of("GPT2Config");
  for (const KeyRule& r : key_rules_of("LlamaConfig")) rules.push_back(r);
  std::vector<std::string> found;
  size_t at = 0;
  while ((at = text.find("**ignored**", at)) != std::string::npos) {
    at += 11;
    size_t end = text.find("\n\n", at);
    for (const char* stop : {"\n- ", "\n* ", "**"}) end = std::min(end, text.find(stop, at));
    const std::string part = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    static const std::regex name("`([A-Za-z_][A-Za-z0-9_.]*)`");
    for (std::sregex_iterator m(part.begin(), part.end(), name), e; m != e; ++m) {
      const std::string key = (*m)[1];
      const std::string before = part.substr(0, static_cast<size_t>(m->position()));
      const auto ends_with = [&](const char* w) { const std::string s(w); return before.size() >= s.size() && before.compare(before.size() - s.size(), s.size(), s) == 0; };
      if (ends_with("is ") || ends_with("see ")) continue;
      const KeyRule* read = nullptr;
      bool unread = false;
      for (const KeyRule& r : rules) {
        if (r.path != key && !(r.path.size() > key.size() && r.path.compare(r.path.size() - key.size() - 1, std::string::npos, "." + key) == 0))
          continue;
        if (r.use == KeyUse::kBuilt || r.use == KeyUse::kChecked) read = &r;
        else unread = true;
      }
      if (read != nullptr && !unread)
        found.push_back(doc + ": `" + key + "` listed as ignored, but " + read->path + " is read (" + read->why + ")");
    }
  }
  return found;
}

TEST(DocsKeys, TheCheckSeesAReadKeyListedAsIgnored) {
  const auto f = ignored_but_read("t.md", "- **ignored**: `top_k`, `use_kvcache_op`\n\nlater `top_p`\n");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].find("`top_k` listed as ignored, but model.model_config.top_k is read"), std::string::npos) << f[0];
  EXPECT_TRUE(ignored_but_read("t.md", "**ignored**: `use_kvcache_op`, `bos_token_id`\n").empty());
  EXPECT_TRUE(ignored_but_read("t.md", "**ignored**: `parallel_optimizer` (ZeRO-1 here is `parallel.enable_parallel_optimizer`)\n").empty());
}

TEST(DocsKeys, NoDocListsAReadKeyAsIgnored) {
  std::vector<fs::path> docs{fs::path(GF_SOURCE_DIR) / "README.md"};
  for (const auto& e : fs::directory_iterator(fs::path(GF_SOURCE_DIR) / "docs"))
    if (e.path().extension() == ".md") docs.push_back(e.path());
  std::string problems;
  size_t lists = 0;
  for (const fs::path& d : docs) {
    const std::string text = read_text(d);
    for (size_t at = 0; (at = text.find("**ignored**", at)) != std::string::npos; at += 11) ++lists;
    for (const std::string& p : ignored_but_read(d.filename().string(), text)) problems += "\n  " + p;
  }
  EXPECT_GE(lists, 2u) << "the docs' **ignored** lists were not found";
  EXPECT_TRUE(problems.empty()) << problems;
}

}  // namespace
}  // namespace gf
