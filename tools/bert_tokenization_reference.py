#!/usr/bin/env python3
"""Reference BERT WordPiece tokenizer: a transcription of Google BERT's tokenization.py.

What Megatron-LM's BertWordPieceLowerCase / BertWordPieceCase compute
(megatron/training/tokenizer/bert_tokenization.py is a copy of google-research/bert's
tokenization.py; _BertWordPieceTokenizer.tokenize is convert_tokens_to_ids(tokenize(text))).
Written from the published semantics, standard library only (unicodedata), so the C++
tokenizer (core/data/wordpiece.cpp, ICU) is checked against Python's Unicode tables.

    bert_tokenization_reference.py --vocab vocab.txt [--lower | --cased] < docs.jsonl > ids.txt

Each input line is a JSON object {"text": ...}; each output line is that text's ids, separated
by single spaces (an empty line for no ids). --eod appends Megatron's end-of-document id ([EOS],
added to the vocabulary after [BOS] when absent) to every non-empty output line.
"""

import argparse
import collections
import json
import sys
import unicodedata


def convert_to_unicode(text):
    if isinstance(text, str):
        return text
    if isinstance(text, bytes):
        return text.decode("utf-8", "ignore")
    raise ValueError("Unsupported string type: %s" % (type(text)))


def load_vocab(vocab_file):
    vocab = collections.OrderedDict()
    index = 0
    with open(vocab_file, "r", encoding="utf-8") as reader:
        while True:
            token = convert_to_unicode(reader.readline())
            if not token:
                break
            token = token.strip()
            vocab[token] = index
            index += 1
    return vocab


def whitespace_tokenize(text):
    text = text.strip()
    if not text:
        return []
    return text.split()


def _is_whitespace(char):
    if char == " " or char == "\t" or char == "\n" or char == "\r":
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char):
    if char == "\t" or char == "\n" or char == "\r":
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char):
    cp = ord(char)
    if (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126):
        return True
    return unicodedata.category(char).startswith("P")


class BasicTokenizer(object):
    def __init__(self, do_lower_case=True):
        self.do_lower_case = do_lower_case

    def tokenize(self, text):
        text = convert_to_unicode(text)
        text = self._clean_text(text)
        text = self._tokenize_chinese_chars(text)
        orig_tokens = whitespace_tokenize(text)
        split_tokens = []
        for token in orig_tokens:
            if self.do_lower_case:
                token = token.lower()
                token = self._run_strip_accents(token)
            split_tokens.extend(self._run_split_on_punc(token))
        return whitespace_tokenize(" ".join(split_tokens))

    def _run_strip_accents(self, text):
        text = unicodedata.normalize("NFD", text)
        return "".join(c for c in text if unicodedata.category(c) != "Mn")

    def _run_split_on_punc(self, text):
        chars = list(text)
        i = 0
        start_new_word = True
        output = []
        while i < len(chars):
            char = chars[i]
            if _is_punctuation(char):
                output.append([char])
                start_new_word = True
            else:
                if start_new_word:
                    output.append([])
                start_new_word = False
                output[-1].append(char)
            i += 1
        return ["".join(x) for x in output]

    def _tokenize_chinese_chars(self, text):
        output = []
        for char in text:
            if self._is_chinese_char(ord(char)):
                output.append(" ")
                output.append(char)
                output.append(" ")
            else:
                output.append(char)
        return "".join(output)

    @staticmethod
    def _is_chinese_char(cp):
        return ((0x4E00 <= cp <= 0x9FFF) or (0x3400 <= cp <= 0x4DBF) or (0x20000 <= cp <= 0x2A6DF)
                or (0x2A700 <= cp <= 0x2B73F) or (0x2B740 <= cp <= 0x2B81F) or (0x2B820 <= cp <= 0x2CEAF)
                or (0xF900 <= cp <= 0xFAFF) or (0x2F800 <= cp <= 0x2FA1F))

    def _clean_text(self, text):
        output = []
        for char in text:
            cp = ord(char)
            if cp == 0 or cp == 0xFFFD or _is_control(char):
                continue
            output.append(" " if _is_whitespace(char) else char)
        return "".join(output)


class WordpieceTokenizer(object):
    def __init__(self, vocab, unk_token="[UNK]", max_input_chars_per_word=200):  # Megatron's and Google BERT's default
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word

    def tokenize(self, text):
        text = convert_to_unicode(text)
        output_tokens = []
        for token in whitespace_tokenize(text):
            chars = list(token)
            if len(chars) > self.max_input_chars_per_word:
                output_tokens.append(self.unk_token)
                continue
            is_bad = False
            start = 0
            sub_tokens = []
            while start < len(chars):
                end = len(chars)
                cur_substr = None
                while start < end:
                    substr = "".join(chars[start:end])
                    if start > 0:
                        substr = "##" + substr
                    if substr in self.vocab:
                        cur_substr = substr
                        break
                    end -= 1
                if cur_substr is None:
                    is_bad = True
                    break
                sub_tokens.append(cur_substr)
                start = end
            if is_bad:
                output_tokens.append(self.unk_token)
            else:
                output_tokens.extend(sub_tokens)
        return output_tokens


class FullTokenizer(object):
    def __init__(self, vocab_file, do_lower_case=True):
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)

    def tokenize(self, text):
        split_tokens = []
        for token in self.basic_tokenizer.tokenize(text):
            for sub_token in self.wordpiece_tokenizer.tokenize(token):
                split_tokens.append(sub_token)
        return split_tokens

    def convert_tokens_to_ids(self, tokens):
        return [self.vocab[t] for t in tokens]

    def vocab_size(self):
        return len(self.vocab)


def megatron_eod(tokenizer):
    """Megatron's _BertWordPieceTokenizer: add_token('[BOS]'), add_token('[EOS]'); eod is [EOS]."""
    for t in ("[BOS]", "[EOS]"):
        if t not in tokenizer.vocab:
            tokenizer.vocab[t] = len(tokenizer.vocab)
    return tokenizer.vocab["[EOS]"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", required=True)
    case = ap.add_mutually_exclusive_group()
    case.add_argument("--lower", dest="lower", action="store_true", default=True)
    case.add_argument("--cased", dest="lower", action="store_false")
    ap.add_argument("--eod", action="store_true", help="append [EOS] (Megatron's eod) to non-empty documents")
    ap.add_argument("--key", default="text")
    args = ap.parse_args()
    tok = FullTokenizer(args.vocab, do_lower_case=args.lower)
    eod = megatron_eod(tok)
    out = sys.stdout
    for line in sys.stdin.buffer:
        line = line.decode("utf-8")
        if not line.strip():
            continue
        ids = tok.convert_tokens_to_ids(tok.tokenize(json.loads(line)[args.key]))
        if args.eod and ids:
            ids.append(eod)
        out.write(" ".join(str(i) for i in ids) + "\n")


if __name__ == "__main__":
    main()
