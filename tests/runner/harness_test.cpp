// lm-evaluation-harness's formatting and request types as runner/infer/harness.h transcribes them, on hand
// examples whose expected values follow from the harness's code (lm_eval/tasks/hellaswag/utils.py preprocess,
// wikitext/preprocess_wikitext.py, winogrande/preprocess_winogrande.py, lm_eval/utils.py
// get_rolling_token_windows + make_disjoint_window, api/model.py _encode_pair). The whole path against PyTorch is
// tests/integration/eval_harness.sh.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runner/infer/harness.h"

namespace gf {
namespace {

// One token a byte (id = the byte), so token lists can be read off the text.
class ByteTokenizer : public data::TextTokenizer {
 public:
  ByteTokenizer() : data::TextTokenizer("ByteTokenizer") {}
  void encode_append(std::string_view s, std::vector<int32_t>& out) const override {
    for (unsigned char c : s) out.push_back(c);
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t i : ids) s += static_cast<char>(i);
    return s;
  }
  int32_t eod_id() const override { return 0; }
  int32_t vocab_size() const override { return 256; }
};

std::string write_jsonl(const std::string& name, const std::string& text) {
  const std::string dir = std::string(GF_BINARY_DIR) + "/test_output/harness";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name + ".jsonl";
  std::ofstream(path) << text;
  return path;
}

TEST(Harness, HellaSwagPreprocessAsTheHarness) {
  EXPECT_EQ(hellaswag_preprocess("  How to cook rice [title] Rinse the rice.  "), "How to cook rice. Rinse the rice.");
  EXPECT_EQ(hellaswag_preprocess("[header] Step one [step] stir"), " Step one stir");
  EXPECT_EQ(hellaswag_preprocess("a   b"), "a  b");  // str.replace("  ", " ") once, left to right
  EXPECT_EQ(hellaswag_preprocess("a [x\ny] b"), "a [x\ny] b");  // '.' stops at a newline
}

TEST(Harness, WikiTextDetokenizerAndCounts) {
  EXPECT_EQ(wikitext_detokenize(" = = Early life = = \n The 1 @,@ 000 @-@ year ( old ) road ; it 's 3 @.@ 5 km . \n"),
            " == Early life ==\nThe 1,000-year (old) road; it's 3.5 km.\n");
  EXPECT_EQ(split_whitespace_count("a b  c"), 3);
  EXPECT_EQ(split_whitespace_count(" a b "), 4);  // re.split keeps the empty ends
}

TEST(Harness, MultipleChoiceContextsContinuationsAndGold) {
  const std::string p = write_jsonl(
      "hellaswag", R"({"activity_label": "Baking", "ctx_a": "She mixes flour.", "ctx_b": "then SHE", "endings": ["bakes it.", "sings [title] loudly."], "label": "1"})"
                   "\n");
  const HarnessTask h = read_harness_task("hellaswag", p);
  ASSERT_EQ(h.docs.size(), 1u);
  EXPECT_EQ(h.docs[0].requests[0].context, "Baking: She mixes flour. Then she");
  EXPECT_EQ(h.docs[0].requests[1].continuation, " sings. loudly.");
  EXPECT_EQ(h.docs[0].gold, 1);
  EXPECT_EQ(h.docs[0].choice_chars[1], 14.0);  // len("sings. loudly.")
  const HarnessTask arc = read_harness_task(
      "arc_easy", write_jsonl("arc_easy", R"({"question": "Q?", "choices": {"text": ["x", "y", "z"], "label": ["1", "2", "3"]}, "answerKey": "3"})"
                                          "\n"));
  EXPECT_EQ(arc.docs[0].requests[2].context, "Question: Q?\nAnswer:");
  EXPECT_EQ(arc.docs[0].requests[2].continuation, " z");
  EXPECT_EQ(arc.docs[0].gold, 2);
  const HarnessTask w = read_harness_task(
      "winogrande", write_jsonl("winogrande", R"({"sentence": "Tom gave Bob a book because _ was done with it.", "option1": "Tom", "option2": "Bob", "answer": "1"})"
                                              "\n"));
  EXPECT_EQ(w.docs[0].requests[1].context, "Tom gave Bob a book because Bob");
  EXPECT_EQ(w.docs[0].requests[0].continuation, " was done with it.");
  EXPECT_EQ(w.docs[0].gold, 0);
  EXPECT_FALSE(w.acc_norm);
  const HarnessTask l = read_harness_task("lambada_openai", write_jsonl("lambada_openai", R"({"text": "a b  c d"})"
                                                                                          "\n"));
  EXPECT_EQ(l.docs[0].requests[0].context, "a b  c");  // split(' ') keeps the empty word
  EXPECT_EQ(l.docs[0].requests[0].continuation, " d");
}

// One request of `kind` encoded with the byte tokenizer for a model of max_length positions.
std::vector<TokenRequest> encode_one(HarnessKind kind, const HarnessRequest& req, int64_t max_length, int32_t eot) {
  HarnessTask t;
  t.kind = kind;
  HarnessDoc d;
  d.requests = {req};
  t.docs = {d};
  ByteTokenizer tok;
  std::vector<int64_t> of;
  return encode_task(t, tok, max_length, eot, of);
}

TEST(Harness, EncodePairMovesTrailingSpacesAndTruncatesFromTheLeft) {
  const std::vector<TokenRequest> r = encode_one(HarnessKind::kMultipleChoice, {"ab ", "cd"}, 3, 0);
  ASSERT_EQ(r.size(), 1u);
  // context "ab", continuation " cd"; ab + " cd" = 5 tokens; the last max_length + 1 = 4 without the last: "b c".
  EXPECT_EQ(r[0].continuation, (std::vector<int32_t>{' ', 'c', 'd'}));
  EXPECT_EQ(r[0].input, (std::vector<int32_t>{'b', ' ', 'c'}));
}

TEST(Harness, RollingWindowsAsGetRollingTokenWindows) {
  const std::vector<TokenRequest> r = encode_one(HarnessKind::kRolling, {"", "0123456789"}, 4, 'E');
  auto s = [](const std::vector<int32_t>& v) { return std::string(v.begin(), v.end()); };
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(s(r[0].input), "E012");
  EXPECT_EQ(s(r[0].continuation), "0123");
  EXPECT_EQ(s(r[1].input), "3456");
  EXPECT_EQ(s(r[1].continuation), "4567");
  EXPECT_EQ(s(r[2].input), "5678");
  EXPECT_EQ(s(r[2].continuation), "89");
}

TEST(Harness, MetricsAsTheHarness) {
  HarnessTask t;
  t.name = "piqa";
  t.kind = HarnessKind::kMultipleChoice;
  // Doc 0: choice 1 has the higher loglikelihood, but per character choice 0 wins; doc 1: choice 0 both ways.
  t.docs = {HarnessDoc{{{"c", " a"}, {"c", " b"}}, 0, {10, 1}}, HarnessDoc{{{"c", " a"}, {"c", " b"}}, 0, {2, 2}}};
  const std::vector<int64_t> of = {0, 0, 1, 1};
  const std::vector<Scored> s = {{-2.0, false}, {-1.5, true}, {-1.0, true}, {-3.0, false}};
  std::vector<nlohmann::json> samples;
  const nlohmann::json r = harness_metrics(t, of, s, samples);
  EXPECT_EQ(r["acc,none"], 0.5);
  EXPECT_EQ(r["acc_norm,none"], 1.0);
  EXPECT_NEAR(r["acc_stderr,none"].get<double>(), 0.5, 1e-12);  // sqrt(0.5 / 1) / sqrt(2)
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0]["acc"], 0.0);
}

TEST(Harness, UnknownTaskAndMissingFieldAreRefusedByName) {
  EXPECT_THROW(read_harness_task("hellaswg", "x"), std::runtime_error);
  try {
    read_harness_task("piqa", write_jsonl("piqa", "{\"goal\": \"g\", \"sol1\": \"a\", \"label\": 0}\n"));
    ADD_FAILURE() << "accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("line 1: no field \"sol2\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gf
