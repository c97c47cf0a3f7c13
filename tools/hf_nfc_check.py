#!/usr/bin/env python3
"""NFC in the HuggingFaceTokenizer (core/data/hf_tokenizer.h, "NFC tables") against the Rust crate
`tokenizers` itself (its npm binding, tools/hf_tokenizer_rust.js) on Unicode's NormalizationTest.txt.

    python3 tools/hf_nfc_check.py --gridformer build/bin/gridformer [--tokenizer TOKENIZER_JSON]
        [--normalization-test FILE] [--write-fixture FILE]

For each test line (source column c1, NFC column c2):
  rust     = tokenizers' ids of c1 with the file's normalizer (NFC);
  unicode  = tokenizers' ids of c2 with the normalizer removed (Unicode's own NFC, as the test file
             states it, tokenized the same way);
  ours     = `gridformer tokenize` of c1, GF_HF_NFC unset (must equal rust on every line);
  ours_uni = the same with GF_HF_NFC=unicode (must equal unicode on every line).
The lines where rust and unicode differ are where the crate's Unicode 9.0 tables fall short;
--write-fixture writes them (c1 as hex code points, rust ids, unicode ids; tab-separated) for
tests/core/data/hf_tokenizer_nfc_test.cpp. The tokenizer must have an NFC normalizer and no
post-processor specials (default: tests/data/hf_tokenizer/qwen2/tokenizer.json). The binding is
found through NODE_PATH (default: node_modules of the source tree).
Exit status 0 when all four agree as stated, 1 otherwise.
"""
import argparse
import bz2
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)


def read_tests(path):
    opener = bz2.open if path.endswith(".bz2") else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("@"):
                continue
            cols = line.split(";")
            rows.append([[int(h, 16) for h in c.split()] for c in cols[:5]])
    return rows


def text(cps):
    return "".join(chr(c) for c in cps)


def rust_ids(tokenizer, texts, patch, tmp):
    corpus = os.path.join(tmp, "corpus.jsonl")
    with open(corpus, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    cmd = ["node", os.path.join(HERE, "hf_tokenizer_rust.js"), tokenizer, corpus]
    if patch is not None:
        cmd += ["--patch", json.dumps(patch)]
    env = dict(os.environ)
    env.setdefault("NODE_PATH", os.path.join(SRC, "node_modules"))
    out = subprocess.run(cmd, check=True, capture_output=True, env=env).stdout.decode()
    return out.split("\n")[: len(texts)]


def our_ids(gridformer, tokenizer, texts, nfc):
    env = dict(os.environ)
    env.pop("GF_HF_NFC", None)
    if nfc:
        env["GF_HF_NFC"] = nfc
    data = "".join(t + "\n" for t in texts).encode()
    cmd = [gridformer, "tokenize", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", tokenizer]
    out = subprocess.run(cmd, input=data, check=True, capture_output=True, env=env).stdout.decode()
    return [l.strip() for l in out.split("\n")[: len(texts)]]


def find_normalization_test():
    for p in ("/usr/share/unicode/NormalizationTest.txt", "/usr/share/unicode/NormalizationTest.txt.bz2",
              "/usr/share/unicode-data/NormalizationTest.txt"):
        if os.path.exists(p):
            return p
    sys.exit("NormalizationTest.txt not found (Debian's unicode-data has it); pass --normalization-test")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gridformer", required=True)
    ap.add_argument("--tokenizer", default=os.path.join(SRC, "tests", "data", "hf_tokenizer", "qwen2", "tokenizer.json"))
    ap.add_argument("--normalization-test", default=None)
    ap.add_argument("--write-fixture", default=None)
    args = ap.parse_args()
    rows = read_tests(args.normalization_test or find_normalization_test())
    c1 = [text(r[0]) for r in rows]
    c2 = [text(r[1]) for r in rows]
    with tempfile.TemporaryDirectory() as tmp:
        rust = rust_ids(args.tokenizer, c1, None, tmp)
        unicode = rust_ids(args.tokenizer, c2, {"normalizer": None}, tmp)
    ours = our_ids(args.gridformer, args.tokenizer, c1, None)
    ours_uni = our_ids(args.gridformer, args.tokenizer, c1, "unicode")
    n = len(rows)
    crate_wrong = [i for i in range(n) if rust[i] != unicode[i]]
    bad_default = [i for i in range(n) if ours[i] != rust[i]]
    bad_unicode = [i for i in range(n) if ours_uni[i] != unicode[i]]
    print(f"{args.tokenizer}: {n} lines; tokenizers' NFC differs from Unicode's on {len(crate_wrong)}")
    print(f"  default (tokenizers' tables): {n - len(bad_default)} of {n} equal to tokenizers")
    print(f"  GF_HF_NFC=unicode:            {n - len(bad_unicode)} of {n} equal to Unicode's NFC column")
    for name, bad, ref, got in (("default", bad_default, rust, ours), ("unicode", bad_unicode, unicode, ours_uni)):
        for i in bad[:10]:
            print(f"  {name} differs: {' '.join('%04X' % c for c in rows[i][0])}: expected [{ref[i]}] got [{got[i]}]")
    if args.write_fixture:
        with open(args.write_fixture, "w", encoding="utf-8") as f:
            for i in crate_wrong:
                f.write(" ".join("%04X" % c for c in rows[i][0]) + "\t" + rust[i] + "\t" + unicode[i] + "\n")
        print(f"wrote {len(crate_wrong)} lines to {args.write_fixture}")
    return 0 if not bad_default and not bad_unicode else 1


if __name__ == "__main__":
    sys.exit(main())
