// Tests for the sentence splitter of preprocess_data --split-sentences (core/data/sentence_split.h):
// ICU's sentence BreakIterator with rules that make its output look like Megatron's NLTK punkt.
//
// Golden data in tests/data/sentence_split: corpus.jsonl (enwiki-style documents {"text": ...},
// some with "lang" and "max_chunk_chars") and sentences.jsonl, what tools/sentence_split_reference.py
// (PyICU and the rules written again in Python) gives for each, without and with keep_newlines:
//   /usr/bin/python3 tools/sentence_split_reference.py --golden tests/data/sentence_split/corpus.jsonl
//       > tests/data/sentence_split/sentences.jsonl   (one command line)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/data/sentence_split.h"

namespace gf::data {
namespace {

namespace fs = std::filesystem;
using Sentences = std::vector<std::string>;

const fs::path kDir = fs::path(GF_SOURCE_DIR) / "tests" / "data" / "sentence_split";

Sentences split(std::string_view text, bool keep_newlines = false, const std::string& lang = "english") {
  SentenceSplitOptions opt;
  opt.lang = lang;
  opt.keep_newlines = keep_newlines;
  return split_sentences(text, opt);
}

Sentences keep(std::string_view text) { return split(text, true); }

TEST(SentenceSplit, PlainSentences) {
  EXPECT_EQ(split("The cat sat. The dog ran. It rained."), (Sentences{"The cat sat.", "The dog ran.", "It rained."}));
  EXPECT_EQ(split("One sentence only"), (Sentences{"One sentence only"}));
  EXPECT_EQ(split("Numbers like 3.14 and 2,000.5 stay. Next."), (Sentences{"Numbers like 3.14 and 2,000.5 stay.", "Next."}));
  EXPECT_EQ(split("Visit www.example.com. It is free."), (Sentences{"Visit www.example.com.", "It is free."}));
}

TEST(SentenceSplit, QuestionAndExclamation) {
  EXPECT_EQ(split("Is it late? Yes! Go home."), (Sentences{"Is it late?", "Yes!", "Go home."}));
  EXPECT_EQ(split("Really?! Yes."), (Sentences{"Really?!", "Yes."}));
  // punkt breaks after ? and ! even before a lower-case word; so does ICU.
  EXPECT_EQ(split("Stop it!\" he shouted. Why? because."), (Sentences{"Stop it!\"", "he shouted.", "Why?", "because."}));
  // No whitespace after punkt's terminators: no break (punkt's period context needs \s+).
  EXPECT_EQ(split("Hi!Bye. Ok."), (Sentences{"Hi!Bye.", "Ok."}));
}

TEST(SentenceSplit, ClosingQuotesAndBracketsStayWithTheSentence) {
  EXPECT_EQ(split("He said \"Hi.\" She left."), (Sentences{"He said \"Hi.\"", "She left."}));
  EXPECT_EQ(split("She wrote 'Done.' Then left."), (Sentences{"She wrote 'Done.'", "Then left."}));
  EXPECT_EQ(split("(This was in 1999.) Later [again.] Next {one.} End."),
            (Sentences{"(This was in 1999.)", "Later [again.]", "Next {one.}", "End."}));
  // A curly closing quote after '.' is no punkt boundary (not NonWord, not realigned): one sentence.
  EXPECT_EQ(split("He said \u201cHi.\u201d She left."), (Sentences{"He said \u201cHi.\u201d She left."}));
}

TEST(SentenceSplit, AbbreviationsWhereIcuAndPunktAgree) {
  EXPECT_EQ(split("Dr. Smith and Mr. Brown met Prof. Green at 5 p.m. today. They talked."),
            (Sentences{"Dr. Smith and Mr. Brown met Prof. Green at 5 p.m. today.", "They talked."}));
  EXPECT_EQ(split("Use a tool, e.g. a hammer, i.e. this one. Done."),
            (Sentences{"Use a tool, e.g. a hammer, i.e. this one.", "Done."}));
  EXPECT_EQ(split("The U.S. Army paid. Mrs. Robinson left."), (Sentences{"The U.S. Army paid.", "Mrs. Robinson left."}));
  EXPECT_EQ(split("J. R. R. Tolkien wrote it. John F. Kennedy came. St. Louis is big."),
            (Sentences{"J. R. R. Tolkien wrote it.", "John F. Kennedy came.", "St. Louis is big."}));
  EXPECT_EQ(split("Apple Inc. The company grew."), (Sentences{"Apple Inc.", "The company grew."}));
  // Whole words only: "USA." is no "A." initial, "(Mr." and "x(J." follow a Close character.
  EXPECT_EQ(split("I live in the USA. It is big. (Mr. Brown) met x(J. Smith)."),
            (Sentences{"I live in the USA.", "It is big.", "(Mr. Brown) met x(J. Smith)."}));
  // Words dropped from ICU's English list end sentences.
  EXPECT_EQ(split("He said Go. Now it is OK. Then."), (Sentences{"He said Go.", "Now it is OK.", "Then."}));
}

TEST(SentenceSplit, DocumentedDisagreementsWithPunkt) {
  // punkt: "He went home.", "then he slept." (ICU never breaks before a lower-case word).
  EXPECT_EQ(split("He went home. then he slept."), (Sentences{"He went home. then he slept."}));
  // punkt: "Plan B.", "The plan failed." (every initial keeps the next word here).
  EXPECT_EQ(split("Plan B. The plan failed."), (Sentences{"Plan B. The plan failed."}));
  // punkt: one sentence ("approx" is in english.pickle); ICU breaks before "3.14".
  EXPECT_EQ(split("It cost approx. 3.14 dollars."), (Sentences{"It cost approx.", "3.14 dollars."}));
  // punkt: "U.S." then a sentence starter breaks; a listed abbreviation never breaks here.
  EXPECT_EQ(split("He lives in the U.S. He moved."), (Sentences{"He lives in the U.S. He moved."}));
}

TEST(SentenceSplit, Newlines) {
  const std::string text = "Title\n\nFirst line. Second line.\nNo period\nhere. Last.\n";
  // Without keep_newlines: no break at a newline alone, the whitespace between sentences dropped.
  EXPECT_EQ(split(text), (Sentences{"Title\n\nFirst line.", "Second line.", "No period\nhere.", "Last."}));
  // keep_newlines: the whitespace between two sentences ends the first; the text's end is stripped.
  EXPECT_EQ(keep(text), (Sentences{"Title\n\nFirst line. ", "Second line.\n", "No period\nhere. ", "Last."}));
  EXPECT_EQ(keep("Hello.\n\n\nWorld.  \t Again.\r\nEnd."), (Sentences{"Hello.\n\n\n", "World.  \t ", "Again.\r\n", "End."}));
  EXPECT_EQ(split("Hello.\n\n\nWorld.  \t Again.\r\nEnd."), (Sentences{"Hello.", "World.", "Again.", "End."}));
  // After one of punkt's closers, its realignment drops the whitespace even with --keep-newlines.
  EXPECT_EQ(keep("He said \"Hi.\"\nShe left.\n(Ok.)\n\nFive."), (Sentences{"He said \"Hi.\"", "She left.\n", "(Ok.)", "Five."}));
}

TEST(SentenceSplit, LeadingAndTrailingWhitespace) {
  EXPECT_EQ(split("   Leading. Trailing.   \n\n  "), (Sentences{"   Leading.", "Trailing."}));
  EXPECT_EQ(keep("   Leading. Trailing.   \n\n  "), (Sentences{"   Leading. ", "Trailing."}));
  EXPECT_EQ(split("One.\u00a0Two.\u3000Three.\u2028Four."), (Sentences{"One.", "Two.", "Three.", "Four."}));
  EXPECT_EQ(keep("One.\u00a0Two.\u3000Three."), (Sentences{"One.\u00a0", "Two.\u3000", "Three."}));
}

TEST(SentenceSplit, EmptyAndBlankText) {
  EXPECT_TRUE(split("").empty());
  EXPECT_TRUE(split("  \n\t ").empty());
  EXPECT_TRUE(keep(" \n ").empty());
  EXPECT_TRUE(split_sentence_spans("").empty());
  EXPECT_EQ(split("."), (Sentences{"."}));
  // UAX #29 SB8a: no break before another terminator (punkt: "?", "!", ".").
  EXPECT_EQ(split("? ! ."), (Sentences{"? ! ."}));
}

TEST(SentenceSplit, Cjk) {
  EXPECT_EQ(split("\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002\u4eba\u53e3\u306f\u591a\u3044\u3067\u3059\u304b\uff1f\u306f\u3044\uff01"),
            (Sentences{"\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002", "\u4eba\u53e3\u306f\u591a\u3044\u3067\u3059\u304b\uff1f",
                       "\u306f\u3044\uff01"}));
  // An opening bracket or quote after 。 starts the next sentence; the closing one ends this one.
  EXPECT_EQ(split("\u4ed6\u8bf4\u3002\u300c\u4f60\u597d\u3002\u300d\u5b8c\u3002"),
            (Sentences{"\u4ed6\u8bf4\u3002", "\u300c\u4f60\u597d\u3002\u300d", "\u5b8c\u3002"}));
  EXPECT_EQ(split("\u4ed6\u8bf4\u3002\u201c\u4f60\u597d\uff01\u201d\u5b8c\u3002"),
            (Sentences{"\u4ed6\u8bf4\u3002", "\u201c\u4f60\u597d\uff01\u201d", "\u5b8c\u3002"}));
}

TEST(SentenceSplit, German) {
  EXPECT_EQ(split("Es war ein gutes Jahr. Dann kam er. Prof. Dr. M\u00fcller kam z. B. sp\u00e4ter. J. S. Bach lebte. Was? Gut!",
                  false, "german"),
            (Sentences{"Es war ein gutes Jahr.", "Dann kam er.", "Prof. Dr. M\u00fcller kam z. B. sp\u00e4ter.",
                       "J. S. Bach lebte.", "Was?", "Gut!"}));
  // "v. Chr." is one of ICU's German entries with a space.
  EXPECT_EQ(split("Er kam 50 v. Chr. Nach Rom.", false, "german"), (Sentences{"Er kam 50 v. Chr. Nach Rom."}));
  // English has neither list: "Jahr." ends a sentence, "Dr." (an English title) does not.
  EXPECT_EQ(split("Prof. Dr. M\u00fcller kam.", false, "english"), (Sentences{"Prof. Dr. M\u00fcller kam."}));
}

TEST(SentenceSplit, OtherLanguages) {
  // Greek ';' is a question mark to ICU's Greek rules, not to punkt: no break.
  EXPECT_EQ(split("\u03a4\u03b9 \u03ba\u03ac\u03bd\u03b5\u03b9\u03c2; \u039a\u03b1\u03bb\u03ac. \u039d\u03b1\u03b9!", false, "greek"),
            (Sentences{"\u03a4\u03b9 \u03ba\u03ac\u03bd\u03b5\u03b9\u03c2; \u039a\u03b1\u03bb\u03ac.", "\u039d\u03b1\u03b9!"}));
  EXPECT_EQ(split("\u0410. \u0421. \u041f\u0443\u0448\u043a\u0438\u043d \u0436\u0438\u043b. \u041a\u043e\u043d\u0435\u0446.", false, "russian"),
            (Sentences{"\u0410. \u0421. \u041f\u0443\u0448\u043a\u0438\u043d \u0436\u0438\u043b.", "\u041a\u043e\u043d\u0435\u0446."}));
  for (const std::string& lang : sentence_split_languages())
    EXPECT_EQ(split("One. Two!", false, lang), (Sentences{"One.", "Two!"})) << lang;
}

TEST(SentenceSplit, Languages) {
  const std::vector<std::string>& langs = sentence_split_languages();
  EXPECT_EQ(langs.size(), 19u);
  EXPECT_TRUE(std::is_sorted(langs.begin(), langs.end()));
  EXPECT_EQ(sentence_split_locale("english"), "en");
  EXPECT_EQ(sentence_split_locale("norwegian"), "nb");
  EXPECT_EQ(sentence_split_locale("greek"), "el");
  try {
    split("Hi.", false, "klingon");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("klingon"), std::string::npos) << msg;
    for (const std::string& lang : langs) EXPECT_NE(msg.find(lang), std::string::npos) << msg;
  }
  EXPECT_THROW(sentence_split_locale("English"), std::invalid_argument);
}

TEST(SentenceSplit, InvalidUtf8IsKeptByteForByte) {
  // Ill-formed bytes stay in their sentence (segmented as U+FFFD): spans are byte ranges of the input.
  const std::string text = "Bad \xff byte. Cut \xe2\x82 here. Lone \x80\x80 ones. Ok \xf0\x9f\x98\x80.";
  EXPECT_EQ(split(text), (Sentences{"Bad \xff byte.", "Cut \xe2\x82 here.", "Lone \x80\x80 ones.", "Ok \xf0\x9f\x98\x80."}));
  EXPECT_EQ(split("Ends badly. \xc3"), (Sentences{"Ends badly.", "\xc3"}));
}

TEST(SentenceSplit, SpansAreByteRanges) {
  const std::string text = "  Caf\u00e9 \U0001F600 ok. Na\u00efve \u6771\u4eac. \u00bfS\u00ed?  ";
  const std::vector<SentenceSpan> spans = split_sentence_spans(text);
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(text.substr(spans[0].begin, spans[0].end - spans[0].begin), "  Caf\u00e9 \U0001F600 ok.");
  EXPECT_EQ(text.substr(spans[1].begin, spans[1].end - spans[1].begin), "Na\u00efve \u6771\u4eac.");
  EXPECT_EQ(text.substr(spans[2].begin, spans[2].end - spans[2].begin), "\u00bfS\u00ed?");
  EXPECT_EQ(spans[0].begin, 0u);
}

TEST(SentenceSplit, ChunksOfMaxChunkChars) {
  // Megatron splits text[i:i+1000000] piece by piece: a sentence across a cut becomes two.
  SentenceSplitOptions opt;
  opt.max_chunk_chars = 10;
  // 10 code points: "\u00e9" is one (two bytes).
  // Cuts after "Caf\u00e9 one. " and "Two three.": the third piece keeps its leading space, as punkt.
  EXPECT_EQ(split_sentences("Caf\u00e9 one. Two three. Four.", opt), (Sentences{"Caf\u00e9 one.", "Two three.", " Four."}));
  EXPECT_EQ(split_sentences("Abcdefgh. Ijklmnopqrst uvw. X.", opt), (Sentences{"Abcdefgh.", "Ijklmnopqr", "st uvw.", "X."}));
  opt.max_chunk_chars = 0;
  EXPECT_EQ(split_sentences("Abcdefgh. Ijklmnopqrst uvw. X.", opt), (Sentences{"Abcdefgh.", "Ijklmnopqrst uvw.", "X."}));

  // The default: 1,000,000 characters.
  std::string text(999990, 'a');
  text += ". Cross the line here. End.";
  const Sentences out = split_sentences(text, {});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].size(), 999991u);
  EXPECT_EQ(out[1], "Cross th");  // characters 999992 .. 999999: the first piece's end
  EXPECT_EQ(out[2], "e line here.");
  EXPECT_EQ(out[3], "End.");
}

TEST(SentenceSplit, ConcurrentCallsAgree) {
  const std::string text = "Dr. Smith went home. He slept. \u4f60\u597d\u3002 Is it late? Yes!";
  const Sentences expected = split(text);
  const Sentences expected_de = split(text, false, "german");
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      bool good = true;
      for (int i = 0; i < 200; ++i) good = good && split(text) == expected && split(text, false, "german") == expected_de;
      ok[t] = good ? 1 : 0;
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 1) << t;
}

TEST(SentenceSplit, MatchesPythonReferenceGolden) {
  std::ifstream corpus(kDir / "corpus.jsonl", std::ios::binary), golden(kDir / "sentences.jsonl", std::ios::binary);
  ASSERT_TRUE(corpus) << kDir / "corpus.jsonl";
  ASSERT_TRUE(golden) << kDir / "sentences.jsonl";
  int docs = 0;
  for (std::string line, want; std::getline(corpus, line);) {
    ASSERT_TRUE(std::getline(golden, want)) << "golden shorter than the corpus";
    const nlohmann::json doc = nlohmann::json::parse(line), ref = nlohmann::json::parse(want);
    SentenceSplitOptions opt;
    opt.lang = doc.value("lang", std::string("english"));
    opt.max_chunk_chars = doc.value("max_chunk_chars", size_t{1000000});
    const std::string text = doc.at("text").get<std::string>();
    EXPECT_EQ(split_sentences(text, opt), ref.at("sentences").get<Sentences>()) << "line " << docs + 1;
    opt.keep_newlines = true;
    EXPECT_EQ(split_sentences(text, opt), ref.at("sentences_keep_newlines").get<Sentences>()) << "line " << docs + 1;
    ++docs;
  }
  EXPECT_GE(docs, 20);
}

}  // namespace
}  // namespace gf::data
