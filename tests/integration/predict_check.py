#!/usr/bin/env python3
"""Checks for tests/integration/predict.sh.

  same A.jsonl B.jsonl            the two runs generated the same ids for every prompt
  differ A.jsonl B.jsonl          they did not (another sampling seed)
  stdout OUT ids.jsonl VOCAB MERGES EOS
                                  stdout is, for each prompt in order, the prompt's bytes, its
                                  continuation's (the end-of-text id left out), then a newline,
                                  decoded with the Python GPT-2 reference (tools/gpt2_encoder_reference.py)
  lengths ids.jsonl N EOS         each prompt got N new tokens, or fewer ending with EOS
  metrics METRICS ids.jsonl       the last predict line of metrics.jsonl counts the prompts' tokens and
                                  the decode tokens (every generated token but each prompt's first)
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    cmd = sys.argv[1]
    if cmd in ("same", "differ"):
        a, b = load(sys.argv[2]), load(sys.argv[3])
        if [x["prompt"] for x in a] != [x["prompt"] for x in b]:
            fail("the prompts differ between %s and %s" % (sys.argv[2], sys.argv[3]))
        same = [x["generated"] for x in a] == [x["generated"] for x in b]
        if cmd == "same" and not same:
            for i, (x, y) in enumerate(zip(a, b)):
                if x["generated"] != y["generated"]:
                    fail("prompt %d: %s vs %s" % (i + 1, x["generated"], y["generated"]))
        if cmd == "differ" and same:
            fail("%s and %s generated the same ids" % (sys.argv[2], sys.argv[3]))
    elif cmd == "stdout":
        from gpt2_encoder_reference import Encoder
        out = open(sys.argv[2], "rb").read()
        runs = load(sys.argv[3])
        enc = Encoder.from_files(sys.argv[4], sys.argv[5])
        eos = int(sys.argv[6])

        def raw(ids):
            return bytes(enc.byte_decoder[c] for c in "".join(enc.decoder[i] for i in ids))

        want = b"".join(raw(r["prompt"]) + raw([t for t in r["generated"] if t != eos]) + b"\n" for r in runs)
        if out != want:
            fail("stdout is not the prompts and their continuations:\n%r\nwanted\n%r" % (out[:400], want[:400]))
    elif cmd == "lengths":
        n, eos = int(sys.argv[3]), int(sys.argv[4])
        for i, r in enumerate(load(sys.argv[2])):
            g = r["generated"]
            if not (len(g) == n or (0 < len(g) < n and g[-1] == eos)) or eos in g[:-1]:
                fail("prompt %d: %d new tokens %s, wanted %d (or fewer ending with %d)" % (i + 1, len(g), g, n, eos))
    elif cmd == "metrics":
        lines = [x for x in load(sys.argv[2]) if x.get("event") == "predict"]
        if not lines:
            fail("no predict line in " + sys.argv[2])
        m, runs = lines[-1], load(sys.argv[3])
        prompt = sum(len(r["prompt"]) for r in runs)
        decode = sum(len(r["generated"]) - 1 for r in runs)
        if m["prompts"] != len(runs) or m["prompt_tokens"] != prompt or m["decode_tokens"] != decode:
            fail("metrics %s: wanted %d prompts, %d prompt tokens, %d decode tokens" % (m, len(runs), prompt, decode))
        if not (m["prompt_tokens_per_s"] > 0 and m["decode_tokens_per_s"] > 0):
            fail("metrics %s: throughput not positive" % m)
    else:
        fail("unknown check " + cmd)


if __name__ == "__main__":
    main()
