#!/usr/bin/env python3
"""Hugging Face `tokenizers` byte-level BPE, in Python: the reference for core/data/hf_tokenizer.h.

Written for this repository from the published semantics of the Rust crate `tokenizers`
(github.com/huggingface/tokenizers, tokenizers/src/...), not from our C++. For one text,
`Tokenizer::encode(text, add_special_tokens)` does:

 1. AddedVocabulary::extract_and_normalize (tokenizer/added_vocabulary.rs)
    a. the added tokens with `normalized: false` are found in the raw text: leftmost-longest,
       non-overlapping (daachorse MatchKind::LeftmostLongest, `leftmost_find_iter`). A match is
       dropped (and the search goes on after it) when the token is `single_word` and a word
       character (Rust regex `\\w`: Alphabetic, M, Nd, Pc, Join_Control) touches it on either
       side. `lstrip` widens the match leftwards over the White_Space run before it (never past
       the previous match), `rstrip` rightwards over the run after it.
    b. every piece between them is normalized (the `normalizer`), then the `normalized: true`
       tokens are found in it the same way, matched by their normalized content.
    Each match becomes that token's id directly; empty pieces vanish.
 2. The pre-tokenizer (pre_tokenizers/*.rs) cuts each remaining piece:
    * Split {pattern: {Regex|String}, behavior, invert}: the pattern is searched with Oniguruma
      (utils/onig.rs; onig's find_iter drops an empty match that ends where the previous match
      ended and moves one character on), giving (span, is_match) pieces covering the text
      (tokenizer/pattern.rs), flipped by `invert`, then grouped by `behavior`
      (tokenizer/normalizer.rs NormalizedString::split): Removed, Isolated,
      MergedWithPrevious, MergedWithNext, Contiguous.
    * ByteLevel {add_prefix_space, use_regex} (pre_tokenizers/byte_level.rs): prepends " " to
      each piece that does not start with one, then (use_regex) splits it with GPT-2's pattern
      's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+ Isolated;
      then maps every UTF-8 byte to GPT-2's printable character (bytes_char).
    * Sequence: each one over all the pieces of the one before.
 3. The BPE model (models/bpe/model.rs, word.rs): with `ignore_merges`, a piece that is a vocab
    token is that token. Otherwise one symbol per character (a byte, after ByteLevel), then the
    adjacent pair with the lowest merge rank is merged, the leftmost of equal ranks first
    (a min-heap of (rank, position)), until no adjacent pair has a merge.
 4. With add_special_tokens (transformers' default, so Megatron's HuggingFaceTokenizer.tokenize),
    the post_processor adds its special tokens: TemplateProcessing's `single` template,
    RobertaProcessing / BertProcessing's cls ... sep, ByteLevel nothing, Sequence each in turn.

Regular expressions here run on Python's third-party `regex` module, whose `\\s` is the Unicode
White_Space property as Oniguruma's is; `\\p{L}`/`\\p{N}` follow regex's Unicode tables (15.0
for python3-regex 2022.10.31), Oniguruma's follow its own (15.1 and later in the onig_sys that
tokenizers bundles). Inputs that hold characters assigned after Unicode 14.0 can split
differently between the engines. NFC uses Python's unicodedata (Unicode 14.0 in Python 3.11).

What this reference refuses (stops with a message), as the C++ does: models other than BPE,
BPE dropout, continuing_subword_prefix / end_of_word_suffix other than null or "", a vocabulary
that lacks one of the 256 byte-level characters (then unk_token, fuse_unk and byte_fallback
would matter), normalizers other than NFC and Sequence, pre-tokenizers other than Split,
ByteLevel and Sequence, post-processors other than TemplateProcessing, RobertaProcessing,
BertProcessing, ByteLevel and Sequence.

The layouts that are not byte-level (SentencePiece-style BPE with byte_fallback, Metaspace,
Digits, WordPiece) are not transcribed here: core/data/hf_tokenizer.h checks them against the Rust
crate itself through its npm binding (tools/hf_tokenizer_rust.js, tools/make_hf_real_fixtures.py,
tests/integration/hf_tokenizer_real.sh).

Needs the `regex` module: Debian `apt-get install python3-regex` (run with /usr/bin/python3).

    hf_tokenizer_reference.py TOKENIZER_JSON [--add-special-tokens] [--pieces] < corpus.jsonl
        reads one JSON object {"text": ...} per line and prints, per line, the ids
        space-separated (--pieces: the pre-tokens as a JSON list of [text, added id or null]).
"""

import argparse
import heapq
import json
import sys
import unicodedata

import regex

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Rust regex's Unicode \w and \s (the `regex` crate used by added_vocabulary.rs).
WORD_CHAR = regex.compile(r"[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]")
SPACE_CHAR = regex.compile(r"[\p{White_Space}]")


class Refused(Exception):
    pass


def bytes_char():
    """pre_tokenizers/byte_level.rs bytes_char: printable Latin-1 bytes keep their code point,
    the other 68 get U+0100.. in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = list(bs)
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTES_CHAR = bytes_char()
CHAR_BYTES = {c: b for b, c in BYTES_CHAR.items()}


# ------------------------------------------------------------------------------------------
# Normalizers

def make_normalizer(spec):
    if spec is None:
        return None
    kind = spec.get("type")
    if kind == "NFC":
        return lambda s: unicodedata.normalize("NFC", s)
    if kind == "Sequence":
        parts = [make_normalizer(n) for n in spec["normalizers"]]
        parts = [p for p in parts if p is not None]

        def run(s):
            for p in parts:
                s = p(s)
            return s
        return run
    raise Refused(f"normalizer type {kind!r} is not supported")


# ------------------------------------------------------------------------------------------
# Patterns (tokenizer/pattern.rs, utils/onig.rs)

def onig_find_iter(rx, text):
    """onig::Regex::find_iter: successive searches from the end of the last match; an empty match
    ending where the previous match ended is skipped by moving on one character."""
    last_end = 0
    last_match_end = None
    while last_end <= len(text):
        m = rx.search(text, last_end)
        if m is None:
            return
        s, e = m.span()
        if s == e and last_match_end == e:
            last_end += 1
            continue
        last_end = e
        last_match_end = e
        yield s, e


def find_matches(rx, text):
    """Pattern::find_matches for a SysRegex: (start, end, is_match) covering the text."""
    if not text:
        return [(0, 0, False)]
    out = []
    prev = 0
    for s, e in onig_find_iter(rx, text):
        if prev != s:
            out.append((prev, s, False))
        out.append((s, e, True))
        prev = e
    if prev != len(text):
        out.append((prev, len(text), False))
    return out


def split_by_behavior(matches, behavior):
    """NormalizedString::split: the kept spans, in order (empty ones included; callers drop them)."""
    if behavior == "Isolated":
        return [(s, e) for s, e, _ in matches]
    if behavior == "Removed":
        return [(s, e) for s, e, m in matches if not m]
    acc = []
    prev_match = False
    if behavior == "Contiguous":
        for s, e, m in matches:
            if m == prev_match:
                if acc:
                    acc[-1][1] = e
                else:
                    acc.append([s, e])
            else:
                acc.append([s, e])
            prev_match = m
        return [tuple(x) for x in acc]
    if behavior == "MergedWithPrevious":
        for s, e, m in matches:
            if m and not prev_match:
                if acc:
                    acc[-1][1] = e
                else:
                    acc.append([s, e])
            else:
                acc.append([s, e])
            prev_match = m
        return [tuple(x) for x in acc]
    if behavior == "MergedWithNext":
        for s, e, m in reversed(matches):
            if m and not prev_match:
                if acc:
                    acc[-1][0] = s
                else:
                    acc.append([s, e])
            else:
                acc.append([s, e])
            prev_match = m
        acc.reverse()
        return [tuple(x) for x in acc]
    raise Refused(f"Split behavior {behavior!r} is not supported")


# ------------------------------------------------------------------------------------------
# Pre-tokenizers: each maps a list of strings to a list of strings (empty ones dropped).

class SplitPre:
    def __init__(self, spec):
        pattern = spec["pattern"]
        if "Regex" in pattern:
            self.rx = regex.compile(pattern["Regex"])
        elif "String" in pattern:
            self.rx = regex.compile(regex.escape(pattern["String"]))
        else:
            raise Refused(f"Split pattern {pattern!r}")
        self.behavior = spec["behavior"]
        self.invert = bool(spec["invert"])

    def __call__(self, pieces):
        out = []
        for p in pieces:
            matches = find_matches(self.rx, p)
            if self.invert:
                matches = [(s, e, not m) for s, e, m in matches]
            out.extend(p[s:e] for s, e in split_by_behavior(matches, self.behavior) if e > s)
        return out


class ByteLevelPre:
    rx = regex.compile(GPT2_PATTERN)

    def __init__(self, spec):
        self.add_prefix_space = bool(spec.get("add_prefix_space", True))
        self.use_regex = bool(spec.get("use_regex", True))

    def __call__(self, pieces):
        out = []
        for p in pieces:
            if self.add_prefix_space and not p.startswith(" "):
                p = " " + p
            if self.use_regex:
                out.extend(p[s:e] for s, e, _ in find_matches(self.rx, p) if e > s)
            elif p:
                out.append(p)
        return out


def make_pre_tokenizer(spec):
    if spec is None:
        raise Refused("pre_tokenizer null: no ByteLevel pre-tokenizer")
    kind = spec.get("type")
    if kind == "Split":
        return [SplitPre(spec)]
    if kind == "ByteLevel":
        return [ByteLevelPre(spec)]
    if kind == "Sequence":
        steps = []
        for s in spec["pretokenizers"]:
            steps.extend(make_pre_tokenizer(s))
        return steps
    raise Refused(f"pre_tokenizer type {kind!r} is not supported")


# ------------------------------------------------------------------------------------------
# BPE model

class BPE:
    def __init__(self, spec):
        if spec.get("type", "BPE") != "BPE":
            raise Refused(f"model type {spec.get('type')!r} is not supported")
        if spec.get("dropout") not in (None, 0, 0.0):
            raise Refused("BPE dropout")
        for key in ("continuing_subword_prefix", "end_of_word_suffix"):
            if spec.get(key) not in (None, ""):
                raise Refused(f"BPE {key}")
        self.vocab = dict(spec["vocab"])
        missing = [b for b in range(256) if BYTES_CHAR[b] not in self.vocab]
        if missing:
            raise Refused(f"vocab lacks the byte-level character of byte {missing[0]}")
        self.ignore_merges = bool(spec.get("ignore_merges", False))
        merges = spec["merges"]
        pairs = []
        for rank, m in enumerate(merges):
            if isinstance(m, str):
                if m.startswith("#version"):
                    continue
                parts = m.split(" ")
                if len(parts) != 2:
                    raise Refused(f"bad merge {m!r}")
                pairs.append((parts[0], parts[1]))
            else:
                pairs.append((m[0], m[1]))
        self.merges = {}
        for rank, (a, b) in enumerate(pairs):
            ids = (self.vocab[a], self.vocab[b])
            self.merges[ids] = (rank, self.vocab[a + b])  # a repeated pair keeps its last rank

    def tokenize(self, word):
        """word: a byte-level string (one character per byte)."""
        if not word:
            return []
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        # word.rs Word::merge_all with symbols as a linked list.
        ids = [self.vocab[c] for c in word]
        n = len(ids)
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n)) + [-1]
        alive = [True] * n
        heap = []
        for i in range(n - 1):
            m = self.merges.get((ids[i], ids[i + 1]))
            if m:
                heapq.heappush(heap, (m[0], i, m[1]))
        while heap:
            rank, pos, new_id = heapq.heappop(heap)
            if not alive[pos] or nxt[pos] == -1:
                continue
            right = nxt[pos]
            m = self.merges.get((ids[pos], ids[right]))
            if m is None or m[1] != new_id:
                continue
            ids[pos] = new_id
            alive[right] = False
            nxt[pos] = nxt[right]
            if nxt[right] != -1:
                prev[nxt[right]] = pos
            if prev[pos] >= 0:
                m = self.merges.get((ids[prev[pos]], ids[pos]))
                if m:
                    heapq.heappush(heap, (m[0], prev[pos], m[1]))
            if nxt[pos] != -1:
                m = self.merges.get((ids[pos], ids[nxt[pos]]))
                if m:
                    heapq.heappush(heap, (m[0], pos, m[1]))
        out = []
        i = 0
        while i != -1:
            out.append(ids[i])
            i = nxt[i]
        return out


# ------------------------------------------------------------------------------------------
# Added vocabulary

class AddedVocabulary:
    def __init__(self, tokens, model_vocab, normalizer):
        self.by_id = {}
        content_to_id = {}
        next_id = len(model_vocab)
        for t in tokens:
            content = t["content"]
            if not content:
                continue
            if content in content_to_id:
                new_id = content_to_id[content]
            elif content in model_vocab:
                new_id = model_vocab[content]
            else:
                new_id = next_id
                next_id += 1
            if new_id != t["id"]:
                raise Refused(f"added token {content!r} has id {t['id']} but tokenizers gives it {new_id}")
            content_to_id[content] = new_id
            info = dict(t)
            info["pattern"] = normalizer(content) if (t.get("normalized", True) and normalizer) else content
            self.by_id[new_id] = info
        self.raw = {info["pattern"]: i for i, info in self.by_id.items() if not info.get("normalized", True)}
        self.norm = {info["pattern"]: i for i, info in self.by_id.items() if info.get("normalized", True)}

    @staticmethod
    def leftmost_longest(text, patterns):
        """Non-overlapping leftmost-longest matches (start, end, id)."""
        by_first = {}
        for p, i in patterns.items():
            by_first.setdefault(p[0], []).append((p, i))
        for lst in by_first.values():
            lst.sort(key=lambda x: -len(x[0]))
        pos = 0
        while pos < len(text):
            found = None
            for p, i in by_first.get(text[pos], ()):
                if text.startswith(p, pos):
                    found = (pos, pos + len(p), i)
                    break
            if found:
                yield found
                pos = found[1]
            else:
                pos += 1

    def find_matches(self, sentence, patterns):
        """AddedVocabulary::find_matches: [(id or None, start, end)]."""
        if not sentence:
            return [(None, 0, 0)]
        if not patterns:
            return [(None, 0, len(sentence))]
        start_offset = 0
        splits = []
        for start, stop, tid in self.leftmost_longest(sentence, patterns):
            tok = self.by_id[tid]
            if tok.get("single_word"):
                start_space = start == 0 or not WORD_CHAR.fullmatch(sentence[start - 1])
                stop_space = stop == len(sentence) or not WORD_CHAR.fullmatch(sentence[stop])
                if not start_space or not stop_space:
                    continue
            if tok.get("lstrip"):
                newstart = start
                while newstart > 0 and SPACE_CHAR.fullmatch(sentence[newstart - 1]):
                    newstart -= 1
                start = max(newstart, start_offset)
            if tok.get("rstrip"):
                while stop < len(sentence) and SPACE_CHAR.fullmatch(sentence[stop]):
                    stop += 1
            if start_offset < start:
                splits.append((None, start_offset, start))
            splits.append((tid, start, stop))
            start_offset = stop
        if start_offset != len(sentence):
            splits.append((None, start_offset, len(sentence)))
        return splits

    def extract_and_normalize(self, text, normalizer):
        """[(piece, id or None)] with pieces normalized (those without an id)."""
        out = []
        for tid, s, e in self.find_matches(text, self.raw):
            piece = text[s:e]
            if not piece:
                continue
            if tid is not None:
                out.append((piece, tid))
                continue
            if normalizer:
                piece = normalizer(piece)
            for tid2, s2, e2 in self.find_matches(piece, self.norm):
                if e2 > s2:
                    out.append((piece[s2:e2], tid2))
        return out


# ------------------------------------------------------------------------------------------
# Post-processors: (prefix ids, suffix ids) around the single sequence.

def post_processor_specials(spec):
    if spec is None:
        return [], []
    kind = spec.get("type")
    if kind == "ByteLevel":
        return [], []
    if kind in ("RobertaProcessing", "BertProcessing"):
        return [spec["cls"][1]], [spec["sep"][1]]
    if kind == "TemplateProcessing":
        prefix, suffix, seen = [], [], False
        for piece in spec["single"]:
            if "Sequence" in piece:
                if piece["Sequence"]["id"] != "A" or seen:
                    raise Refused("TemplateProcessing single template")
                seen = True
            else:
                ids = spec["special_tokens"][piece["SpecialToken"]["id"]]["ids"]
                (suffix if seen else prefix).extend(ids)
        return prefix, suffix
    if kind == "Sequence":
        prefix, suffix = [], []
        for p in spec["processors"]:
            a, b = post_processor_specials(p)
            prefix, suffix = a + prefix, suffix + b
        return prefix, suffix
    raise Refused(f"post_processor type {kind!r} is not supported")


# ------------------------------------------------------------------------------------------

class Tokenizer:
    def __init__(self, path):
        with open(path, "r", encoding="utf-8") as f:
            spec = json.load(f)
        self.normalizer = make_normalizer(spec.get("normalizer"))
        self.steps = make_pre_tokenizer(spec.get("pre_tokenizer"))
        if not isinstance(self.steps[-1], ByteLevelPre):
            raise Refused("the pre-tokenizer does not end with ByteLevel")
        self.model = BPE(spec["model"])
        self.added = AddedVocabulary(spec.get("added_tokens") or [], self.model.vocab, self.normalizer)
        self.prefix, self.suffix = post_processor_specials(spec.get("post_processor"))

    def pieces(self, text):
        out = []
        for piece, tid in self.added.extract_and_normalize(text, self.normalizer):
            if tid is not None:
                out.append((piece, tid))
                continue
            words = [piece]
            for step in self.steps:
                words = step(words)
            out.extend((w, None) for w in words)
        return out

    def encode(self, text, add_special_tokens=False):
        ids = []
        for piece, tid in self.pieces(text):
            if tid is not None:
                ids.append(tid)
            else:
                mapped = "".join(BYTES_CHAR[b] for b in piece.encode("utf-8"))
                ids.extend(self.model.tokenize(mapped))
        if add_special_tokens:
            ids = self.prefix + ids + self.suffix
        return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tokenizer_json")
    ap.add_argument("--add-special-tokens", action="store_true",
                    help="add the post_processor's special tokens (transformers' default)")
    ap.add_argument("--pieces", action="store_true", help="print the pre-tokens instead of ids")
    args = ap.parse_args()
    try:
        tok = Tokenizer(args.tokenizer_json)
    except Refused as e:
        sys.exit(f"hf_tokenizer_reference: {args.tokenizer_json}: refused: {e}")
    out = sys.stdout
    for line in sys.stdin.buffer.read().decode("utf-8").split("\n"):
        if not line:
            continue
        text = json.loads(line)["text"]
        if args.pieces:
            out.write(json.dumps(tok.pieces(text), ensure_ascii=False) + "\n")
        else:
            out.write(" ".join(map(str, tok.encode(text, args.add_special_tokens))) + "\n")


if __name__ == "__main__":
    main()
