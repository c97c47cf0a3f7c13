#!/usr/bin/env python3
"""GPT-2's byte-level BPE encoder as Python runs it: the reference for Megatron-identical tokens.

This is a transcription, written for this repository, of what OpenAI's GPT-2 `src/encoder.py`
does (bytes_to_unicode, get_pairs, bpe, encode). Megatron-LM's GPT2BPETokenizer
(megatron/training/tokenizer/gpt2_tokenization.py, used by tools/preprocess_data.py) and
Hugging Face's slow GPT2Tokenizer (tokenization_gpt2.py) run the same algorithm with the same
pre-tokenisation pattern, compiled with the third-party `regex` module:

    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

In `regex`, `\\s` is the Unicode White_Space property (U+0009-U+000D, U+0020, U+0085, U+00A0,
U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000); `\\p{L}` and `\\p{N}` follow the
Unicode version built into the installed `regex`. What the C++ tokenizer (core/data/tokenizer.cpp)
must reproduce is therefore what *this* module computes with `regex`, not what JavaScript, PCRE2
or Python's `re` call whitespace.

Like Megatron (and unlike the 2019 encoder.py, which later put `<\\|endoftext\\|>` in its
pattern), "<|endoftext|>" in the text is ordinary characters; the end-of-document id is
appended by the caller.

Needs the `regex` module: Debian `apt-get install python3-regex` (then run with /usr/bin/python3)
or `pip install regex`.

    gpt2_encoder_reference.py --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt < text
        prints the ids of stdin's text (decoded as UTF-8), one line, space-separated.
"""

import argparse
import json
import sys

import regex

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode():
    """Map every byte to a printable character: bytes that print as themselves in Latin-1
    ('!'..'~', '¡'..'¬', '®'..'ÿ') keep their code point, the other 68 (controls, space,
    0x7F-0xA0, 0xAD) get U+0100, U+0101, ... in increasing byte order."""
    kept = [b for b in range(256) if ord("!") <= b <= ord("~") or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    mapping = {b: chr(b) for b in kept}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def get_pairs(word):
    """The set of adjacent symbol pairs of a word (a tuple of symbols)."""
    return {(word[i], word[i + 1]) for i in range(len(word) - 1)}


class Encoder:
    def __init__(self, vocab, merges):
        """vocab: token string -> id; merges: list of (left, right) in rank order."""
        self.encoder = vocab
        self.decoder = {i: t for t, i in vocab.items()}
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {c: b for b, c in self.byte_encoder.items()}
        self.bpe_ranks = {}
        for rank, pair in enumerate(merges):
            self.bpe_ranks[pair] = rank  # a repeated pair keeps its last rank, as dict(zip()) does
        self.pattern = regex.compile(GPT2_PATTERN)
        self.cache = {}

    @classmethod
    def from_files(cls, vocab_file, merge_file):
        with open(vocab_file, "r", encoding="utf-8") as f:
            vocab = json.load(f)
        with open(merge_file, "r", encoding="utf-8") as f:
            lines = f.read().split("\n")
        # First line is "#version: ...", the text ends with a newline: encoder.py's [1:-1].
        merges = [tuple(line.split()) for line in lines[1:-1]]
        return cls(vocab, merges)

    def bpe(self, token):
        """Merge the best-ranked adjacent pair everywhere it occurs, repeat until no adjacent
        pair has a rank. Returns the symbols joined by single spaces (encoder.py's form)."""
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        if len(word) < 2:
            return token
        inf = float("inf")
        while len(word) > 1:
            best = min(get_pairs(word), key=lambda pair: self.bpe_ranks.get(pair, inf))
            if best not in self.bpe_ranks:
                break
            first, second = best
            merged = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == first and word[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = tuple(merged)
        result = " ".join(word)
        self.cache[token] = result
        return result

    def pre_tokenize(self, text):
        """The pieces regex.findall cuts `text` into (before byte encoding)."""
        return self.pattern.findall(text)

    def encode(self, text):
        ids = []
        for piece in self.pre_tokenize(text):
            chars = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[symbol] for symbol in self.bpe(chars).split(" "))
        return ids

    def decode(self, ids):
        chars = "".join(self.decoder[i] for i in ids)
        return bytes(self.byte_decoder[c] for c in chars).decode("utf-8", errors="replace")

    @property
    def eod(self):
        return self.encoder["<|endoftext|>"]


def regex_description():
    """The installed `regex`: its release and the Unicode version of its tables. `regex` does not
    export the latter, so it is read off letters each version added (U+1E290 in 14.0, U+31350 in
    15.0, U+2EBF0 in 15.1)."""
    try:
        from importlib.metadata import version

        release = version("regex")
    except Exception:  # not installed as a distribution: fall back to the module's own number
        release = regex.__version__
    unicode = "before 14.0"
    for name, code_point in (("14.0", 0x1E290), ("15.0", 0x31350), ("15.1 or later", 0x2EBF0)):
        if regex.fullmatch(r"\p{L}", chr(code_point)):
            unicode = name
    return "regex {} (Unicode {})".format(release, unicode)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab-file", required=True)
    parser.add_argument("--merge-file", required=True)
    args = parser.parse_args()
    encoder = Encoder.from_files(args.vocab_file, args.merge_file)
    text = sys.stdin.buffer.read().decode("utf-8")
    print(" ".join(str(i) for i in encoder.encode(text)))


if __name__ == "__main__":
    main()
