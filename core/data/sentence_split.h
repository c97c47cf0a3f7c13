// Sentence splitting for preprocess_data --split-sentences (Megatron-LM's Encoder.split), over ICU.
//
// Megatron's tools/preprocess_data.py splits each JSON field with NLTK's punkt
// (tokenizers/punkt/{--lang}.pickle) after cutting it into pieces of 1,000,000 characters
// (text[i:i+1000000], each piece split on its own, the pieces' sentences concatenated); with
// --keep-newlines it swaps in CustomLanguageVars, whose _period_context_fmt reads `\s*` after the
// sentence end so that the whitespace between two sentences stays at the end of the first.
// Punkt is a trained, unsupervised model (abbreviations, collocations, sentence starters and
// orthographic statistics learned per language); this is a rule-based replacement: ICU's sentence
// BreakIterator (icu::BreakIterator::createSentenceInstance for the language's locale, Unicode
// UAX #29 rules) proposes the breaks, and the rules below keep, drop and trim them so that the
// output looks like punkt's.
//
// THE RULES. ICU's break iterator runs over each piece (UTF-16); for every break b it reports
// inside the piece (not its end), in the sentence that starts at s:
//  1. Terminator. Let e be b less the whitespace before it (Python's str.isspace(), what punkt's
//     `\s` and rstrip() see) and c be e less the characters of Sentence_Break=Close before it
//     (quotes and brackets: " ' ( ) [ ] { } “ ” ‘ ’ « » 「 」 ...), neither going below s. The break
//     is kept only if c > s and the character before c has Sentence_Break ATerm or STerm (. ? ! 。
//     ！ ？ ‼ ...). This drops ICU's breaks after a line or paragraph separator that ends no
//     sentence (punkt never breaks at a newline alone) and ICU-Greek's ';' (punkt's sent_end_chars
//     are only . ? !).
//  2. When that character is one of punkt's '.', '?', '!': the closers [c, e) must all be among
//     punkt's realignment set " ' ) ] } and the character at e must be whitespace; otherwise the
//     break is dropped, as punkt's period context (NonWord or \s+ after the mark) never yields it:
//     `He said “Hi.” She left.` and `Hi!Bye.` stay one sentence. Other terminators (。！？ of CJK
//     text, written without spaces) break as ICU says, except that an opening bracket or quote
//     (General_Category Ps or Pi) that ICU counted among the closers starts the next sentence: e
//     moves back to the first one (`…首都。「你好。」` -> `…首都。`, `「你好。」`).
//  3. Abbreviations. When c == e and the character before e is '.', the break is dropped if the
//     sentence's text [s, e) ends with an abbreviation that starts the sentence or follows
//     whitespace or a Close character: a single letter (General_Category L*) plus '.' (initials:
//     "J." in "J. R. R. Tolkien", "z." in "z. B.", "А." in "А. С. Пушкин"; punkt keeps initials
//     before names by its orthographic heuristic) or an entry, exactly (case-sensitive), of the
//     language's CLDR list in ICU's data (brkitr/<locale>, exceptions/SentenceBreak, the locale's
//     own data only: en de es fr it pt ru have one) with these changes: English adds the titles
//     Dr. Drs. St. Gen. Gov. Sen. Adm. Cmdr. Cdr. Cpl. Pres. Supt. Messrs. Mme. Mlle. Hon. Fr. Ft.
//     Brig. Rt. and drops the words and acronyms that end sentences By. Up. Job. Ok. OK. In. To.
//     Do. Joe. Is. On. Go. All. As. Or. Long. Hat. Link. Act. Card. Jam. AD. DC. PC. AA. AB. Pro.
//     Hz. Kb. Mb. Gb.; German adds Prof. and drops Test. Art. (ICU's own use of these lists,
//     the locale keyword "ss=standard", matches any suffix: German "Jahr. Dann" would stay one
//     sentence, for "r."; hence whole words here, and no "ss=standard".) An entry with a space
//     ("v. Chr.") only counts when the sentence ends with all of it.
//  4. Whitespace, as punkt's span_tokenize slices it. A kept break ends the sentence at e (the
//     closers are the sentence's: punkt's _realign_boundaries) and the next sentence starts at the
//     first non-whitespace character at or after e; the whitespace between is dropped, or with
//     keep_newlines appended to the first sentence (all of it: spaces, tabs and newlines, as
//     CustomLanguageVars' `\s*`), except after a sentence whose last character is one of punkt's
//     closers " ' ) ] }, where punkt's realignment drops it even with --keep-newlines
//     (`He said "Hi."\nShe left.` -> `He said "Hi."`, `She left.`). The piece's first sentence keeps
//     the piece's leading whitespace; its last sentence loses trailing whitespace (punkt's
//     text.rstrip()) in both modes. Empty sentences are not returned: empty or whitespace-only
//     text gives no sentence.
//
// HOW THE RESULT DIFFERS FROM PUNKT (english.pickle), measured with NLTK 3.8's punkt code or read
// from its algorithm; docs/sentence_split.md has more examples:
//  * Lowercase after a period: ICU never breaks before a lower-case word (UAX #29 SB8), punkt does
//    unless the word before is a known abbreviation: `He went home. then he slept.` is one
//    sentence here, two with punkt.
//  * Abbreviations: listed ones never break, even before a word that starts a sentence
//    (`He lives in the U.S. He moved.` stays one); punkt breaks after an abbreviation when the next
//    word is a frequent sentence starter or orthographically one. Unlisted ones break before a
//    capital or a number with a period: `It cost approx. 3.14 dollars.` -> `It cost approx.`,
//    `3.14 dollars.`; punkt knows "approx" from training.
//  * Initials: every single letter plus '.' keeps the next word, so `Plan B. The plan failed.`
//    and `World War I. It ended.` stay one sentence where punkt breaks.
//  * Ellipsis: ICU breaks after `...` before a capital (`Wait... Bob came.` -> two); punkt only
//    when the next word is a known sentence starter (orthographic heuristic).
//  * Numbers: `on the 3. Oktober` (German ordinal) breaks after "3."; punkt too unless it learned
//    the collocation.
//  * Terminators in a row: UAX #29 SB8a never breaks before a terminator (`? ! .` is one
//    sentence; punkt: three).
//  * Non-ASCII terminators (。！？‼ ...) break here; punkt ignores them (no break in CJK text).
//  * Whitespace: NLTK's _match_potential_end_contexts looks for ASCII whitespace only, so punkt
//    loses a break followed by U+00A0 or U+3000 when another sentence end follows before any
//    ASCII space (`One.\u00a0Two. Three.` -> `One.\u00a0Two.`, `Three.`); here any Python
//    whitespace separates.
//
// Input bytes. Megatron reads str (valid Unicode), and preprocess_data's JSON parser rejects
// invalid UTF-8, but plain-text input may hold it: each ill-formed subsequence (Unicode's maximal
// subpart) is kept, byte for byte, in the sentence that holds it and is segmented as one U+FFFD
// (Sentence_Break Other). Every sentence is a byte range of the input, so the
// tokenizer treats those bytes exactly as without --split-sentences. Pieces: the text is cut
// every max_chunk_chars code points (an ill-formed subsequence counts as one), as Megatron cuts
// every 1,000,000 Python characters; a sentence that crosses a cut is two sentences, there too.
//
// ICU version: the splits depend on ICU's rules and CLDR data (libicu 72.1 on Debian 12, which
// PyICU on the same system also uses; tools/sentence_split_reference.py and the golden in
// tests/data/sentence_split were made with it).
//
// Thread safety: split_sentences may be called concurrently (one cached BreakIterator per thread
// and language).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gf::data {

struct SentenceSplitOptions {
  // Megatron's --lang: one of NLTK punkt's language names (sentence_split_languages()).
  std::string lang = "english";
  // Megatron's --keep-newlines: the whitespace between two sentences stays at the end of the first.
  bool keep_newlines = false;
  // Megatron splits text[i:i+1000000] piece by piece; 0: the whole text at once.
  size_t max_chunk_chars = 1000000;
};

// One sentence: bytes [begin, end) of the input.
struct SentenceSpan {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const SentenceSpan&) const = default;
};

// The sentences of `utf8`, in order (see the rules above). Throws std::invalid_argument for an
// unknown opt.lang (the message lists the supported names), std::runtime_error when ICU fails.
std::vector<std::string> split_sentences(std::string_view utf8, const SentenceSplitOptions& opt = {});
std::vector<SentenceSpan> split_sentence_spans(std::string_view utf8, const SentenceSplitOptions& opt = {});

// NLTK punkt's language names, sorted: czech danish dutch english estonian finnish french german
// greek italian malayalam norwegian polish portuguese russian slovene spanish swedish turkish.
const std::vector<std::string>& sentence_split_languages();
// The ICU locale used for `lang` ("english" -> "en", "greek" -> "el", "norwegian" -> "nb").
// Throws std::invalid_argument, naming the supported languages, when `lang` is not one of them.
std::string sentence_split_locale(std::string_view lang);

}  // namespace gf::data
