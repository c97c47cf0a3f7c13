#!/usr/bin/env python3
"""Writes the Hugging Face tokenizer.json fixtures of tests/data/hf_tokenizer and their goldens.

    /usr/bin/python3 tools/make_hf_tokenizer_fixture.py [--gpt2-dir data/gpt2] [--out tests/data/hf_tokenizer]

Needs GPT-2's vocabulary (scripts/fetch_gpt2_vocab.sh puts gpt2-vocab.json and gpt2-merges.txt in
data/gpt2) and python3-regex (for the goldens). Every fixture is a byte-level BPE cut from GPT-2:
the 256 byte tokens and the tokens of GPT-2's first K merges keep GPT-2's ids (256 + rank), so no
training is involved and the files stay small. Written:

  corpus.jsonl                 the inputs, {"text": ...} per line (CORPUS below)
  gpt2/tokenizer.json          GPT-2's own layout: ByteLevel pre-tokenizer (GPT-2 regex), "a b"
                               merges, <|endoftext|> added (normalized: true, as in openai-community/gpt2)
  llama3/tokenizer.json        Llama 3's layout: Split (Llama 3 regex, Isolated) + ByteLevel(use_regex
                               false), ignore_merges, [a, b] merges, <|begin_of_text|> ... specials,
                               post_processor Sequence[ByteLevel, TemplateProcessing(bos $A)]
  llama3/tokenizer_config.json bos_token, eos_token (as Meta-Llama-3's)
  qwen2/tokenizer.json         Qwen2's layout: NFC, Split (Qwen2 regex) + ByteLevel, ids shuffled,
                               special and non-special added tokens
  qwen2/tokenizer_config.json  eos_token <|endoftext|>, bos_token null, add_prefix_space false
  features/tokenizer.json      every other implemented rule: Split with String and Regex patterns,
                               Removed / MergedWithPrevious / MergedWithNext / Contiguous, invert,
                               ByteLevel(add_prefix_space), added tokens with lstrip, rstrip,
                               single_word, normalized (NFD contents), content already in the vocab,
                               overlapping contents; RobertaProcessing; Sequence normalizer
  features/tokenizer_config.json eos_token as an AddedToken object
  <fixture>/ids.txt            tools/hf_tokenizer_reference.py's ids per corpus line
  llama3/ids_with_specials.txt, features/ids_with_specials.txt   the same with --add-special-tokens
"""

import argparse
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# One document per entry. Characters are all of Unicode 14.0 or older except the one line marked
# "Unicode 15.0" (letters that PCRE2 10.42's tables lack and core/data/gpt2_pattern.cpp adds).
CORPUS = [
    "Hello, world! This is a plain ASCII sentence.",
    "",
    " ",
    "   leading spaces and trailing spaces   ",
    "DON'T SHOUT. I'M HERE, WE'LL SEE, THEY'RE YOU'VE HE'D IT'S",
    "don't I'm we'll they're you've he'd it's o'clock ''s 's",
    "Don'T mIxEd 'S 'T 'Re 'vE 'M 'Ll 'D and the long s: 'ſ 'ſt, Kelvin 'K",
    "curly apostrophe: it’s, don’t",
    "crème brûlée, naïve façade, Ærøskøbing, Łódź, São Paulo, Ñandú",
    "decomposed: cre\u0300me bru\u0302le\u0301e nai\u0308ve",
    "Vietnamese: Tiê\u0301ng Viê\u0323t, a\u0323\u0302 vs a\u0302\u0323, \u1ea1\u0302",
    "Καλημέρα κόσμε; ΟΔΥΣΣΕΥΣ ς σ · ano teleia\u0387 question\u037e",
    "Привет, мир! ЁЖИК в тумане. Україна, Беларусь",
    "你好，世界。日本語のテキスト、カタカナ。한국어 텍스트 𠀀𠀁 﨑",
    "Hangul jamo: \u1100\u1161\u11a8 \u1112\u1161\u11ab",
    "مرحبا بالعالم مُحَمَّد ٠١٢٣٤٥٦٧٨٩",
    "שָׁלוֹם עולם ﬠ",
    "नमस्ते दुनिया क़ ज़ \u0915\u093c",
    "สวัสดีชาวโลก ภาษาไทย",
    "emoji: 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇯🇵 ☃ 🤖!",
    "digits: 1 12 123 1234 12345 123456 1234567 a1234567b 3.14159 1,000,000",
    "more digits: ١٢٣٤٥ １２３ ²³ Ⅻ 𝟘𝟙𝟚 ½",
    "tabs\tbetween\t\twords\t",
    "windows\r\nline\r\nendings\r\n",
    "lone\rcarriage\n\n\nnewlines \n \n  \n",
    "nbsp:\u00a0x\u00a0\u00a0y nel:\u0085z ls:\u2028p ps:\u2029q ideographic:\u3000w\u3000\u3000v",
    "ogham:\u1680a en:\u2000b hair:\u200ac nnbsp:\u202fd mmsp:\u205fe vt:\u000bf ff:\u000cg",
    "not spaces: mvs:\u180ea zwsp:\u200bb bom:\ufeffc wj:\u2060d fs:\u001ce gs:\u001df rs:\u001eg us:\u001fh",
    "mvs run:\u180e\u180e x \u180e y\u180e",
    "space before mvs: \u180eword and \u00a0word and \u3000word",
    "Angstrom \u212b Ohm \u2126 Kelvin \u212a fi-ligature \ufb01",
    "special tokens: <|endoftext|> hello<|endoftext|>world <|endoftext|><|endoftext|>",
    "<|begin_of_text|>Hi<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nok<|end_of_text|>",
    "partial: <|eot_id <|eot_id|| <<|eot_id|>> <|reserved_special_token_1|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n<tool_call>{\"a\": 1}</tool_call><|im_end|>",
    "roberta: <mask> x   <mask>y <s>a</s> RS>   z [SW] a[SW] [SW]b ([SW])",
    "normalized added: cafe\u0301 café Å \u212b word words sword word. theory the xyabcd xyab xyabc",
    "splits: a||b||||c -- ab AB aB 12 123a b12c ... x - y",
    "symbols: ~!@#$%^&*()_+-=[]{}|;':\",./<>?`\\ «» „“ ‘’ — – … • ©®™ € £ ¥",
    "code: for (int i = 0; i < n; ++i) { x[i] = y[i] * 2; }  // comment\n\treturn 0;",
    "URL https://example.com/path?q=1&r=two#frag e-mail a.b@c.de",
    "Unicode 15.0: \U0001e030\U0001e031 \U00011f04\U00011f05 \U0001e4d0",
    "x" * 300,
    " " * 100 + "word",
    "9" * 40,
    ("The quick brown fox jumps over the lazy dog. " * 12).strip(),
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
]


def load_gpt2(gpt2_dir):
    with open(os.path.join(gpt2_dir, "gpt2-vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(gpt2_dir, "gpt2-merges.txt"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    merges = [tuple(line.split(" ")) for line in lines[1:-1]]
    inv = {i: t for t, i in vocab.items()}
    assert len(vocab) == 50257 and all(vocab[a + b] == 256 + r for r, (a, b) in enumerate(merges))
    return inv, merges


def base_model(inv, merges, k):
    """GPT-2's byte tokens and its first k merges: ids 0..255+k, as in GPT-2."""
    vocab = {inv[i]: i for i in range(256 + k)}
    return vocab, merges[:k]


def added(tid, content, special=True, normalized=False, lstrip=False, rstrip=False, single_word=False):
    return {"id": tid, "content": content, "single_word": single_word, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": normalized, "special": special}


def bpe_model(vocab, merges, pairs, ignore_merges=None, empty_affixes=False):
    model = {"type": "BPE", "dropout": None, "unk_token": None,
             "continuing_subword_prefix": "" if empty_affixes else None,
             "end_of_word_suffix": "" if empty_affixes else None, "fuse_unk": False, "byte_fallback": False}
    if ignore_merges is not None:
        model["ignore_merges"] = ignore_merges
    model["vocab"] = vocab
    model["merges"] = [[a, b] for a, b in merges] if pairs else [f"{a} {b}" for a, b in merges]
    return model


def byte_level(add_prefix_space=False, trim_offsets=True, use_regex=True):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets,
            "use_regex": use_regex}


def tokenizer_json(added_tokens, normalizer, pre_tokenizer, post_processor, decoder, model):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": post_processor,
            "decoder": decoder, "model": model}


def byte_encode(text):
    table = {}
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    n = 0
    for b in range(256):
        table[b] = chr(b) if b in bs else chr(256 + n)
        n += b not in bs
    return "".join(table[b] for b in text.encode("utf-8"))


def make_gpt2(inv, merges):
    vocab, m = base_model(inv, merges, 12000)
    eot = len(vocab)
    vocab["<|endoftext|>"] = eot
    return tokenizer_json([added(eot, "<|endoftext|>", normalized=True)], None,
                          {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True},  # no use_regex: default true
                          byte_level(), byte_level(), bpe_model(vocab, m, pairs=False, empty_affixes=True)), None


def make_llama3(inv, merges):
    k = 8000
    vocab, m = base_model(inv, merges, k)
    # Tokens no merge of the first k makes (GPT-2's next 300, and whole words of the corpus):
    # with ignore_merges a pre-token equal to one of them is that one token.
    extra = [inv[256 + r] for r in range(k, k + 300)]
    extra += [byte_encode(w) for w in [" Привет", " мир", "你好", "世界", " नमस्ते", " Καλημέρα", "123", "4567",
                                      " DON", "'T", " SHOUT", " quick brown", "ſt", " 👍"]]
    for t in extra:
        if t not in vocab:
            vocab[t] = len(vocab)
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|reserved_special_token_1|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|reserved_special_token_2|>", "<|reserved_special_token_3|>", "<|eot_id|>"]
    base = len(vocab)
    added_tokens = [added(base + i, s) for i, s in enumerate(specials)]
    bos = base
    template = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos], "tokens": ["<|begin_of_text|>"]}},
    }
    tok = tokenizer_json(
        added_tokens, None,
        {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
            byte_level(False, True, False)]},
        {"type": "Sequence", "processors": [byte_level(True, False, True), template]},
        byte_level(True, True, True),
        bpe_model(vocab, m, pairs=True, ignore_merges=True))
    config = {"bos_token": "<|begin_of_text|>", "clean_up_tokenization_spaces": True, "eos_token": "<|end_of_text|>",
              "model_input_names": ["input_ids", "attention_mask"], "model_max_length": 1000000000000000019884624838656,
              "tokenizer_class": "PreTrainedTokenizerFast"}
    return tok, config


def make_qwen2(inv, merges):
    vocab, m = base_model(inv, merges, 10000)
    # Shuffled ids: nothing may depend on byte tokens being 0..255 or on merge order = id order.
    tokens = sorted(vocab, key=lambda t: vocab[t])
    ids = list(range(len(tokens)))
    random.Random(2).shuffle(ids)
    vocab = {t: ids[i] for i, t in enumerate(tokens)}
    n = len(vocab)
    added_tokens = [added(n, "<|endoftext|>"), added(n + 1, "<|im_start|>"), added(n + 2, "<|im_end|>"),
                    added(n + 3, "<tool_call>", special=False), added(n + 4, "</tool_call>", special=False)]
    qwen_bl = byte_level(False, False, False)
    tok = tokenizer_json(
        added_tokens, {"type": "NFC"},
        {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False}, qwen_bl]},
        qwen_bl, qwen_bl, bpe_model(vocab, m, pairs=False, ignore_merges=False, empty_affixes=True))
    config = {"add_prefix_space": False, "bos_token": None, "clean_up_tokenization_spaces": False,
              "eos_token": "<|endoftext|>", "errors": "replace", "model_max_length": 32768, "pad_token": "<|endoftext|>",
              "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}
    return tok, config


def make_features(inv, merges):
    vocab, m = base_model(inv, merges, 3000)
    n = len(vocab)
    assert "the" in vocab
    added_tokens = [
        added(n, "<s>", normalized=True), added(n + 1, "</s>", normalized=True),
        added(n + 2, "<mask>", lstrip=True),
        added(n + 3, "[SW]", special=False, single_word=True),
        added(n + 4, "RS>", special=False, rstrip=True),
        added(n + 5, "cafe\u0301", special=False, normalized=True),  # matched as NFC "café"
        added(n + 6, "\u212b", special=False, normalized=True),       # matched as NFC U+00C5
        added(n + 7, "word", special=False, normalized=True, single_word=True),
        added(vocab["the"], "the", special=False, normalized=True),  # in the model vocab: keeps its id
        added(n + 8, "xyab", special=False), added(n + 9, "xyabc", special=False),
        added(n + 10, "abcd", special=False),
    ]
    tok = tokenizer_json(
        added_tokens, {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Sequence", "normalizers": [{"type": "NFC"}]}]},
        {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": "||"}, "behavior": "Removed", "invert": False},
            {"type": "Split", "pattern": {"Regex": r"(?i:ab)|[\p{N}]{2,}"}, "behavior": "MergedWithPrevious", "invert": False},
            {"type": "Split", "pattern": {"Regex": r"\s"}, "behavior": "MergedWithNext", "invert": False},
            {"type": "Split", "pattern": {"Regex": r"\p{L}|\s"}, "behavior": "Contiguous", "invert": False},
            {"type": "Split", "pattern": {"Regex": "[aeiou]"}, "behavior": "MergedWithNext", "invert": True},
            # empty matches: onig's find_iter skips one that ends where the previous match ended
            {"type": "Split", "pattern": {"Regex": "(?=[?!])|[?!]+"}, "behavior": "Isolated", "invert": False},
            byte_level(add_prefix_space=True, use_regex=True)]},
        {"type": "RobertaProcessing", "sep": ["</s>", n + 1], "cls": ["<s>", n], "trim_offsets": True,
         "add_prefix_space": True},
        byte_level(), bpe_model(vocab, m, pairs=False, ignore_merges=False))
    config = {"bos_token": "<s>", "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": False,
                                                "normalized": True, "rstrip": False, "single_word": False}}
    return tok, config


def write_json(path, obj, compact=False):
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpt2-dir", default=os.path.join(REPO, "data", "gpt2"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "hf_tokenizer"))
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.gpt2_dir, "gpt2-vocab.json")):
        sys.exit(f"make_hf_tokenizer_fixture: no GPT-2 vocabulary in {args.gpt2_dir} (run scripts/fetch_gpt2_vocab.sh)")
    inv, merges = load_gpt2(args.gpt2_dir)
    os.makedirs(args.out, exist_ok=True)
    corpus = os.path.join(args.out, "corpus.jsonl")
    with open(corpus, "w", encoding="utf-8") as f:
        for text in CORPUS:
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    reference = os.path.join(HERE, "hf_tokenizer_reference.py")
    for name, make in [("gpt2", make_gpt2), ("llama3", make_llama3), ("qwen2", make_qwen2),
                       ("features", make_features)]:
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        tok, config = make(inv, merges)
        write_json(os.path.join(d, "tokenizer.json"), tok, compact=True)
        if config is not None:
            write_json(os.path.join(d, "tokenizer_config.json"), config)
        goldens = [("ids.txt", [])]
        if name in ("llama3", "features"):
            goldens.append(("ids_with_specials.txt", ["--add-special-tokens"]))
        for golden, flags in goldens:
            with open(corpus, "rb") as fin, open(os.path.join(d, golden), "wb") as fout:
                subprocess.run([sys.executable, reference, os.path.join(d, "tokenizer.json")] + flags,
                               stdin=fin, stdout=fout, check=True)
        print(f"make_hf_tokenizer_fixture: wrote {d}")


if __name__ == "__main__":
    main()
