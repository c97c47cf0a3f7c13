#!/usr/bin/env python3
"""Write the Python-made GPT-2 tokenizer goldens: where Python's `regex` decides the tokens.

Megatron-LM tokenizes with Python's `regex` module, whose `\\s`, `\\p{L}` and `\\p{N}` are not
JavaScript's (the npm references of tools/make_tokenizer_golden.js) nor PCRE2's (what the C++
tokenizer runs). This script writes, with tools/gpt2_encoder_reference.py, the goldens for the
characters where they differ, into tests/golden/tokenizer/:

  unicode_space.jsonl             the corpus: one Megatron input document per line, {"text": ...}
                                  (a string, or a list of sentences), every character below in
                                  many contexts. Every other line is written with raw UTF-8, the
                                  rest with \\u escapes, so both spellings reach the JSON readers.
  unicode_space_ids.txt           per document, the ids of its sentences concatenated (no EOD)
  unicode_space_text_document.bin/.idx
                                  what Megatron's tools/preprocess_data.py writes for the corpus
                                  with --json-keys text --append-eod: Encoder.encode's sentence
                                  logic, then Megatron's IndexedDatasetBuilder as transcribed in
                                  tools/megatron_index_writer_check.py
  python_regex_classes.json       which code points `regex` puts in \\s, \\p{L} and \\p{N}, as
                                  inclusive ranges, found by testing all of 0..0x10FFFF

The characters:
  * where the three `\\s` differ (computed below: U+0085, U+180E, U+FEFF);
  * other characters that look like space but are not `\\s` in `regex`: U+200B, U+2060,
    U+001C-U+001F (Python's `re` and str.isspace() count the last four as space);
  * every other `\\s` character;
  * letters and digits that Unicode 15.0 added: `regex` 2022.10.31 knows them, PCRE2 10.42
    (Unicode 14.0) does not.

Usage (needs python3-regex and numpy: `apt-get install python3-regex python3-numpy`):
  /usr/bin/python3 tools/make_tokenizer_golden_py.py [--vocab-file V --merge-file M]
  /usr/bin/python3 tools/make_tokenizer_golden_py.py --check   # compare with the committed files
The vocabulary defaults to data/gpt2/gpt2-{vocab.json,merges.txt} (scripts/fetch_gpt2_vocab.sh).
"""

import argparse
import filecmp
import json
import os
import sys
import tempfile

import regex

TOOLS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TOOLS)
sys.path.insert(0, TOOLS)

import gpt2_encoder_reference as reference  # noqa: E402
import megatron_index_writer_check as megatron  # noqa: E402

GOLDEN_DIR = os.path.join(REPO, "tests", "golden", "tokenizer")
FILES = ["unicode_space.jsonl", "unicode_space_ids.txt", "unicode_space_text_document.bin",
         "unicode_space_text_document.idx", "python_regex_classes.json"]

# `\s` of the other two engines, measured over every code point (node 20.20 `/^\s$/u`;
# PCRE2 10.42 compiled with PCRE2_UTF | PCRE2_UCP). JavaScript's is ECMA-262's WhiteSpace and
# LineTerminator (it adds U+FEFF); PCRE2's is Z plus \h and \v (it adds U+180E).
_COMMON = [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0xA0, 0x1680, *range(0x2000, 0x200B),
           0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
JAVASCRIPT_SPACE = set(_COMMON) | {0xFEFF}
PCRE2_UCP_SPACE = set(_COMMON) | {0x85, 0x180E}
NOT_SPACE_LOOKALIKES = [0x200B, 0x2060, 0x1C, 0x1D, 0x1E, 0x1F]
# First and last code point of each range of letters/digits Unicode 15.0 added (the ranges
# are in core/data/tokenizer.cpp).
UNICODE15_LETTERS = [0x1123F, 0x11240, 0x11F02, 0x11F04, 0x11F10, 0x11F12, 0x11F33, 0x1342F,
                     0x13441, 0x13446, 0x1B132, 0x1B155, 0x1DF25, 0x1DF2A, 0x1E030, 0x1E06D,
                     0x1E4D0, 0x1E4EB, 0x2B739, 0x31350, 0x323AF]
UNICODE15_DIGITS = [0x11F50, 0x11F59, 0x1D2C0, 0x1D2D3, 0x1E4F0, 0x1E4F9]

# Contexts: {c} is the character. Between letters, next to spaces, in runs, at the start and
# end of the text and of a line, next to digits, punctuation, contractions, other spaces and
# non-ASCII letters.
CONTEXTS = [
    "a{c}b", "a {c}b", "a{c} b", "a {c} b", "a  {c}b", "a{c}  b", "{c}", "{c}{c}", "{c}{c}{c}",
    "a{c}{c}b", "a {c}{c} b", "{c}start of text", "end of text{c}", "{c} start", "end {c}",
    "line one\n{c}line two", "line one{c}\nline two", "line one\n{c}\nline two", "{c}\n", "\n{c}",
    "{c}\r\n", "1{c}2", "12 {c}34", "1{c} 2", "2024{c}", "!{c}?", "a,{c}b", "({c})", "a.{c} b",
    "x {c}!", "it's{c}", "{c}'s", "{c}'re", "\t{c}\n", "{c}\t", "a\u00a0{c}b", "\u3000{c}\u3000x",
    "a {c}\u2003b", "\u65e5\u672c{c}\u8a9e", "\u00e9{c}e", "\U0001F600{c}\U0001F600",
    "<|endoftext|>{c}", "x{c}\u0085{c}\ufeff{c}\u180e y",
]
SHORT_CONTEXTS = ["a{c}b", "a {c}b", "a{c} b", "a {c} b", "{c}{c}{c}", "{c}start", "end{c}",
                  "line\n{c}x", "1{c}2", "!{c}?", " {c}!", "\u00e9 {c} \u00e9"]


def code_point_set(pattern):
    compiled = regex.compile(pattern)
    return {cp for cp in range(0x110000) if compiled.fullmatch(chr(cp))}


def to_ranges(code_points):
    ranges = []
    for cp in sorted(code_points):
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return ranges


def check_probes(space, letter, number, encoder):
    """The C++ test classifies a code point c by which of "a"+c, "1"+c, "!"+c, "\t"+c is a
    single pre-token. Check here, with `regex` itself, that this recovers the classes: on
    every code point below U+3400 and on both sides of every range boundary above."""
    samples = set(range(0x3400))
    for cps in (space, letter, number):
        for first, last in to_ranges(cps):
            samples |= {first - 1, first, last, last + 1}
    classified = space | letter | number
    for cp in sorted(samples):
        if cp < 0 or cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        single = [len(encoder.pre_tokenize(p + c)) == 1 for p in ("a", "1", "!", "\t")]
        expected = [cp in letter, cp in number, cp not in classified, cp in space]
        if single != expected:
            raise SystemExit("probe classification fails at U+%04X: %s vs %s" % (cp, single, expected))


def documents(differing):
    """The corpus: a list of Megatron documents, each {"text": str or [str]}."""
    docs = []
    for cp in sorted(differing) + NOT_SPACE_LOOKALIKES:
        docs += [{"text": ctx.replace("{c}", chr(cp))} for ctx in CONTEXTS]
    return docs


def build_documents(space, differing):
    docs = documents(differing)
    others = sorted(space - differing)
    for cp in others + UNICODE15_LETTERS + UNICODE15_DIGITS:
        docs += [{"text": ctx.replace("{c}", chr(cp))} for ctx in SHORT_CONTEXTS]
    every_space = "".join(chr(cp) for cp in sorted(space))
    lookalikes = "".join(chr(cp) for cp in NOT_SPACE_LOOKALIKES)
    docs += [
        {"text": "All White_Space in one run:" + every_space + "end"},
        {"text": "Each White_Space between words: " + " w".join(chr(cp) + "w" for cp in sorted(space))},
        {"text": "Look-alikes in one run:" + lookalikes + "end, and spaced: " + " ".join(lookalikes)},
        {"text": "Letters new in Unicode 15.0: "
                 + " ".join(chr(cp) * 3 for cp in UNICODE15_LETTERS) + " digits: "
                 + " ".join(chr(cp) * 3 for cp in UNICODE15_DIGITS)},
        {"text": ["Sentence one\u0085ends.", "", " Sentence\ufefftwo.", "\u180e three \u0085 "]},
        {"text": ""},
        {"text": ["", ""]},
        {"text": "\u0085"},
        {"text": "\ufeff"},
        {"text": "\ufeff{\"bom\": \"at the start of a JSON text\"}\u0085\u2028\u2029"},
    ]
    # The strings tools/make_tokenizer_golden.js held for these characters until its goldens
    # were found to disagree with `regex` on "a \ufeffb".
    docs += [{"text": text} for text in [
        "a\u0085b", "\u0085", "a \u0085 b", "a\u0085\u0085 b", "\ufeffBOM at start", "a\ufeff b",
        "a \ufeffb", "a\ufeff\ufeffb", "x\u2028y\u2029z", "x \u2028 y", "mongolian\u180evowel",
        "a \u180e b"]]
    return docs


def sentences_of(doc):
    text = doc["text"]
    return text if isinstance(text, list) else [text]


def write_goldens(out_dir, encoder):
    space = code_point_set(r"\s")
    letter = code_point_set(r"\p{L}")
    number = code_point_set(r"\p{N}")
    differing = (JAVASCRIPT_SPACE ^ space) | (PCRE2_UCP_SPACE ^ space) | (JAVASCRIPT_SPACE ^ PCRE2_UCP_SPACE)
    check_probes(space, letter, number, encoder)

    classes = {
        "generated_by": "tools/make_tokenizer_golden_py.py with " + reference.regex_description(),
        "note": "inclusive [first, last] code point ranges matched by regex's \\s, \\p{L}, \\p{N};"
                " every other code point (surrogates aside) is in [^\\s\\p{L}\\p{N}]",
        "space": to_ranges(space),
        "letter": to_ranges(letter),
        "number": to_ranges(number),
    }
    with open(os.path.join(out_dir, "python_regex_classes.json"), "w", encoding="ascii") as f:
        json.dump(classes, f, separators=(",", ":"))
        f.write("\n")

    docs = build_documents(space, differing)
    with open(os.path.join(out_dir, "unicode_space.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for i, doc in enumerate(docs):
            f.write(json.dumps(doc, ensure_ascii=(i % 2 == 0)) + "\n")

    # Read the corpus back as Megatron's preprocess_data.py does (text mode, line by line,
    # json.loads), then Encoder.encode's per-key logic with --append-eod.
    prefix = os.path.join(out_dir, "unicode_space")
    builder = megatron.IndexedDatasetBuilder(prefix + "_text_document.bin",
                                             dtype=megatron.DType.optimal_dtype(len(encoder.encoder)))
    id_lines = []
    with open(prefix + ".jsonl", "r", encoding="utf-8") as fin:
        for line in fin:
            doc = json.loads(line)
            doc_ids, sentence_lens = [], []
            for sentence in sentences_of(doc):
                sentence_ids = encoder.encode(sentence)
                if len(sentence_ids) > 0:
                    doc_ids.extend(sentence_ids)
                    sentence_lens.append(len(sentence_ids))
                if encoder.decode(sentence_ids) != sentence:
                    raise SystemExit("round trip fails for %r" % sentence)
            id_lines.append(" ".join(str(i) for i in doc_ids))
            if len(doc_ids) > 0:
                doc_ids.append(encoder.eod)
                sentence_lens[-1] += 1
            builder.add_document(doc_ids, sentence_lens)
    builder.finalize(prefix + "_text_document.idx")
    if len(id_lines) != len(docs):
        raise SystemExit("read %d documents back, wrote %d" % (len(id_lines), len(docs)))
    with open(prefix + "_ids.txt", "w", encoding="ascii") as f:
        f.write("\n".join(id_lines) + "\n")
    return docs, differing


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab-file", default=os.path.join(REPO, "data", "gpt2", "gpt2-vocab.json"))
    parser.add_argument("--merge-file", default=os.path.join(REPO, "data", "gpt2", "gpt2-merges.txt"))
    parser.add_argument("--check", action="store_true",
                        help="write to a temporary directory and compare with the committed files")
    args = parser.parse_args()
    encoder = reference.Encoder.from_files(args.vocab_file, args.merge_file)
    if not args.check:
        docs, differing = write_goldens(GOLDEN_DIR, encoder)
        print("%d documents; \\s differs between JavaScript, PCRE2 and regex at %s; %s"
              % (len(docs), ", ".join("U+%04X" % cp for cp in sorted(differing)),
                 reference.regex_description()))
        return
    with tempfile.TemporaryDirectory() as tmp:
        write_goldens(tmp, encoder)
        differ = [name for name in FILES
                  if not filecmp.cmp(os.path.join(tmp, name), os.path.join(GOLDEN_DIR, name), shallow=False)]
    if differ:
        raise SystemExit("differ from what %s writes now: %s" % (reference.regex_description(), ", ".join(differ)))
    print("committed Python goldens match %s" % reference.regex_description())


if __name__ == "__main__":
    main()
