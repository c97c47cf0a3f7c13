#!/usr/bin/env python3
"""Reference sentence splitter for core/data/sentence_split (preprocess_data --split-sentences).

An independent implementation of the rules documented in core/data/sentence_split.h (and
docs/sentence_split.md), in Python on str, over PyICU's sentence BreakIterator (Debian package
python3-icu). PyICU and the C++ code link the same system ICU (72.1 on Debian 12), so the breaks
ICU proposes are the same; everything after them is written here again.

Output, like Megatron's tools/preprocess_data.py Encoder.split: one JSON line per input line,
{key: [sentences], ...} for each --json-keys key. --golden writes instead, per line,
{"sentences": [...], "sentences_keep_newlines": [...]} for the "text" key, honouring two optional
per-line fields, "lang" (default --lang) and "max_chunk_chars" (default 1000000): how
tests/data/sentence_split/sentences.jsonl is made:

  /usr/bin/python3 tools/sentence_split_reference.py --golden \
      tests/data/sentence_split/corpus.jsonl > tests/data/sentence_split/sentences.jsonl
"""
import argparse
import json
import sys
import unicodedata

import icu

# NLTK punkt's pickles (Megatron's --lang) -> ICU locale (its break rules and CLDR abbreviations).
LOCALES = {
    "czech": "cs", "danish": "da", "dutch": "nl", "english": "en", "estonian": "et",
    "finnish": "fi", "french": "fr", "german": "de", "greek": "el", "italian": "it",
    "malayalam": "ml", "norwegian": "nb", "polish": "pl", "portuguese": "pt", "russian": "ru",
    "slovene": "sl", "spanish": "es", "swedish": "sv", "turkish": "tr",
}

# Rule 3: ICU's CLDR abbreviation list of the language, with these changes.
ADDED = {
    "english": "Dr. Drs. St. Gen. Gov. Sen. Adm. Cmdr. Cdr. Cpl. Pres. Supt. Messrs. Mme. Mlle. Hon. Fr. Ft. Brig. Rt.",
    "german": "Prof.",
}
REMOVED = {
    "english": "By. Up. Job. Ok. OK. In. To. Do. Joe. Is. On. Go. All. As. Or. Long. Hat. Link. Act. Card. "
               "Jam. AD. DC. PC. AA. AB. Pro. Hz. Kb. Mb. Gb.",
    "german": "Test. Art.",
}
PUNKT_TERMINATORS = ".?!"      # punkt's sent_end_chars
PUNKT_CLOSERS = "\"')]}"       # punkt's re_boundary_realignment

_SB = icu.UProperty.SENTENCE_BREAK
_ATERM = icu.Char.getPropertyValueEnum(_SB, "ATerm")
_STERM = icu.Char.getPropertyValueEnum(_SB, "STerm")
_CLOSE = icu.Char.getPropertyValueEnum(_SB, "Close")


def sentence_break(ch):
    return icu.Char.getIntPropertyValue(ch, _SB)


def is_close(ch):
    return sentence_break(ch) == _CLOSE


def is_opening(ch):
    """General_Category Ps (opening bracket) or Pi (initial quote)."""
    return unicodedata.category(ch) in ("Ps", "Pi")


def cldr_abbreviations(locale):
    """ICU's brkitr/<locale> exceptions/SentenceBreak list; [] when the locale has none of its own."""
    bundle = icu.ResourceBundle(f"icudt{icu.ICU_VERSION.split('.')[0]}l-brkitr", icu.Locale(locale))
    if str(bundle.getLocale()) != locale:  # fell back to another locale's data
        return []
    try:
        words = bundle.get("exceptions").get("SentenceBreak")
    except icu.ICUError:
        return []
    return [words.getStringEx(i) for i in range(words.getSize())]


_ABBREVIATIONS = {}


def abbreviations(lang):
    if lang not in _ABBREVIATIONS:
        removed = set(REMOVED.get(lang, "").split())
        listed = [a for a in cldr_abbreviations(LOCALES[lang]) if a not in removed]
        _ABBREVIATIONS[lang] = tuple(listed + ADDED.get(lang, "").split())
    return _ABBREVIATIONS[lang]


def icu_breaks(text, locale, _cache={}):
    """ICU's sentence boundaries in `text`, as str (code point) indices."""
    it = _cache.get(locale)
    if it is None:
        it = _cache[locale] = icu.BreakIterator.createSentenceInstance(icu.Locale(locale))
    it.setText(text)
    # ICU counts UTF-16 units; a character above U+FFFF is two of them.
    index_of_unit = []
    for i, ch in enumerate(text):
        index_of_unit.append(i)
        if ord(ch) > 0xFFFF:
            index_of_unit.append(None)  # inside a surrogate pair: never a boundary
    index_of_unit.append(len(text))
    return [index_of_unit[u] for u in it]


def ends_with_abbreviation(sentence, lang):
    """Rule 3: `sentence` (up to its final '.') ends with a letter plus '.' or a listed abbreviation
    that starts it or follows whitespace or a Close character."""
    def starts_token(i):
        return i == 0 or sentence[i - 1].isspace() or is_close(sentence[i - 1])
    if len(sentence) >= 2 and sentence[-2].isalpha() and starts_token(len(sentence) - 2):
        return True
    return any(sentence.endswith(a) and starts_token(len(sentence) - len(a)) for a in abbreviations(lang))


def keeps_break(piece, start, brk, lang):
    """Rules 1-3 for the ICU boundary `brk` inside the sentence that starts at `start`.
    Returns the end of the sentence's text (before the whitespace), or None to drop the break."""
    content = piece[start:brk].rstrip()  # str.rstrip() strips what str.isspace() calls space
    core = content
    while core and is_close(core[-1]):
        core = core[:-1]
    if not core:
        return None
    term = core[-1]
    if sentence_break(term) not in (_ATERM, _STERM):
        return None  # rule 1: a line or paragraph break, or Greek ';'
    end = start + len(content)
    closers = content[len(core):]
    if term in PUNKT_TERMINATORS:  # rule 2
        if not piece[end].isspace():
            return None
        if any(ch not in PUNKT_CLOSERS for ch in closers):
            return None
    else:
        openers = [i for i, ch in enumerate(closers) if is_opening(ch)]
        if openers:
            return start + len(core) + openers[0]
    if term == "." and not closers and ends_with_abbreviation(content, lang):  # rule 3
        return None
    return end


def split_piece(piece, lang, keep_newlines):
    sentences = []
    start = 0
    for brk in icu_breaks(piece, LOCALES[lang]):
        if brk >= len(piece):
            break
        if brk <= start:
            continue
        end = keeps_break(piece, start, brk, lang)
        if end is None:
            continue
        following = end  # the next sentence's first character
        while following < len(piece) and piece[following].isspace():
            following += 1
        if following >= len(piece):
            break
        if keep_newlines and piece[end - 1] not in PUNKT_CLOSERS:
            sentences.append(piece[start:following])
        else:
            sentences.append(piece[start:end])
        start = following
    last = piece[start:].rstrip()
    if last:
        sentences.append(last)
    return sentences


def split(text, lang="english", keep_newlines=False, max_chunk_chars=1000000):
    if lang not in LOCALES:
        raise SystemExit(f"unknown --lang {lang!r}; one of: {' '.join(sorted(LOCALES))}")
    step = max_chunk_chars or max(len(text), 1)
    out = []
    for i in range(0, len(text), step):  # Megatron: text[i:i+max_len] for i in range(0, len(text), max_len)
        out.extend(split_piece(text[i:i + step], lang, keep_newlines))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", nargs="?", help="JSON lines (default: standard input)")
    ap.add_argument("--json-keys", nargs="+", default=["text"])
    ap.add_argument("--lang", default="english")
    ap.add_argument("--keep-newlines", action="store_true")
    ap.add_argument("--golden", action="store_true", help="both modes per line (the test's golden)")
    args = ap.parse_args()
    fin = open(args.input, encoding="utf-8") if args.input else sys.stdin
    for line in fin:
        if not line.strip():
            continue
        doc = json.loads(line)
        if args.golden:
            lang = doc.get("lang", args.lang)
            chunk = doc.get("max_chunk_chars", 1000000)
            out = {
                "sentences": split(doc["text"], lang, False, chunk),
                "sentences_keep_newlines": split(doc["text"], lang, True, chunk),
            }
        else:
            out = {key: split(doc[key], args.lang, args.keep_newlines) for key in args.json_keys}
        sys.stdout.write(json.dumps(out) + "\n")  # ASCII escapes, as Megatron's json.dumps


if __name__ == "__main__":
    main()
