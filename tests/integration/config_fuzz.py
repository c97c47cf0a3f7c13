#!/usr/bin/env python3
"""Mutates the shipped configs and asks gridformer about each variant (tests/integration/config_fuzz.sh).

    config_fuzz.py BIN OUT_DIR --configs A.yaml B.yaml ... [--variants N] [--seed S] [--timeout SEC] [--values MD]

A variant is one shipped config with one change of the kinds a user's typo or a broken tool makes: a
value swapped for 0, -1, +-10^12, 2^31, 2^63, 1e308, NaN, "", 10,000 characters, an emoji, a list or a
map; a key deleted; or the YAML text broken. Each variant is answered by `config`, `plan` and a one-step
`train` (made small: one sample, one layer of width 64, each set unless it is the leaf mutated or deleted),
each within the bound: TIMEOUT seconds, or on a slower or busier machine three times what the
unmutated configs' own one-step train takes there (measured first; a config that spins on a size runs for
minutes, far beyond either). An answer is good when it is status 0 (taken) or 2 (refused before any work,
with an `error` line); anything else (a signal, an abort, another status, no answer in time) is printed
with the variant and counts as a failure. With --values docs/config_values.md, a mutated value that an answer
takes (status 0) must lie in its key's range there (`config` and `plan` are held to the keys the table marks as
checked by config; `train` to all), and a mutated key without a row fails too. Exits 1 when any answer failed
or a taken value is out of range. Seeded: the same seed gives the same variants.
"""

import argparse
import math
import os
import random
import shutil
import subprocess
import sys
import time

import yaml

VALUES = [0, -1, 10**12, -10**12, 2**31, 2**63, 1e308, float("nan"), "", "x" * 10000, "\U0001F99C", [1, 2], {"a": 1}]


def leaves(node, path=()):
    """Every (path, value) of a scalar in the YAML tree."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from leaves(v, path + (i,))
    else:
        yield path, node


def set_at(tree, path, value, delete=False):
    node = tree
    for p in path[:-1]:
        node = node[p]
    if delete:
        if isinstance(node, dict):
            del node[path[-1]]
        else:
            node.pop(path[-1])
    else:
        node[path[-1]] = value


class Dumper(yaml.SafeDumper):
    pass


def _float(dumper, v):  # NaN and infinities as YAML writes them, big floats in full
    if math.isnan(v):
        return dumper.represent_scalar("tag:yaml.org,2002:float", ".nan")
    return dumper.represent_scalar("tag:yaml.org,2002:float", repr(v))


Dumper.add_representer(float, _float)


def variants(configs, n, rng):
    texts = {c: open(c, encoding="utf-8").read() for c in configs}
    trees = {c: yaml.safe_load(texts[c]) for c in configs}
    out = []
    while len(out) < n:
        c = rng.choice(configs)
        kind = rng.random()
        if kind < 0.05:  # broken YAML text
            t = texts[c]
            cut = rng.randrange(len(t))
            broken = rng.choice([t[:cut] + ":\n\t- [" + t[cut:], t[:cut] + '"' + t[cut:], t[:cut] + "\n  - }" + t[cut:]])
            out.append((c, "broken YAML at character %d" % cut, broken, None, None))
            continue
        tree = yaml.safe_load(texts[c])
        path, old = rng.choice(list(leaves(trees[c])))
        name = ".".join(map(str, path))
        if kind < 0.15:
            set_at(tree, path, None, delete=True)
            what = "%s deleted" % name
            mutated = None
        else:
            v = rng.choice(VALUES)
            set_at(tree, path, v)
            shown = repr(v) if not (isinstance(v, str) and len(v) > 20) else "'x' * %d" % len(v)
            what = "%s: %r -> %s" % (name, old, shown)
            mutated = (table_key(path), v)
        out.append((c, what, yaml.dump(tree, Dumper=Dumper, allow_unicode=True, sort_keys=False, width=1 << 20),
                    mutated, name))
    return out


# The keys the one-step train command sets itself (so a mutation of them is not what train took).
TRAIN_SETS = ("runner_config.train_steps", "output_dir")
# And the run made small, each key set unless it is the leaf mutated or deleted: a micro batch of 1 sample, not 8,
# and one layer of width 64, not four of 256 (the step, and the initialisation of every weight, are the suite's time;
# the vocabulary stays the shipped one, which the data's ids need).
SMALL_RUN = (("runner_config.batch_size", "1"), ("model.model_config.hidden_size", "64"),
             ("model.model_config.num_layers", "1"))


def train_cmd(binary, config, out, leaf):
    cmd = [binary, "train", "--config", config, "--set", "runner_config.train_steps=1", "--set", "output_dir=" + out]
    for key, value in SMALL_RUN:
        if key != leaf:
            cmd += ["--set", f"{key}={value}"]
    return cmd


def value_table(path):
    """docs/config_values.md's table: {key: (accepts, checked_by)}."""
    rows = {}
    for line in open(path, encoding="utf-8"):
        cells = [c.strip() for c in line.strip().strip("|").replace("\\|", "\x00").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`") and cells[1].startswith("`"):
            rows[cells[0].strip("`")] = (cells[1].strip("`").replace("\x00", "|"), cells[2])
    return rows


def _within(v, bound):
    """v against a bound of the table: '>= N', '> N', '[a, b]', '(a, b)', '[a, b)', '(a, b]', or ''."""
    bound = bound.strip()
    if not bound:
        return True
    for op in (">=", ">"):
        if bound.startswith(op):
            x = float(bound[len(op):])
            return v >= x if op == ">=" else v > x
    lo, hi = (float(t) for t in bound[1:-1].split(","))
    return (v >= lo if bound[0] == "[" else v > lo) and (v <= hi if bound[-1] == "]" else v < hi)


def in_range(spec, v):
    """Whether the YAML value v is one the table's `accepts` cell `spec` allows (docs/config_values.md's grammar)."""
    for alt in (a.strip() for a in spec.split(" | ")):
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        if alt.startswith("integer"):
            if isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63 and _within(v, alt[7:]):
                return True
        elif alt.startswith("number"):
            if number and math.isfinite(v) and _within(v, alt[6:]):
                return True
        elif alt == "boolean":
            if isinstance(v, bool):
                return True
        elif alt == "string":
            if v is not None and not isinstance(v, (list, dict)):
                return True
        elif alt == "list":
            if isinstance(v, list):
                return True
        elif alt == "map":
            if isinstance(v, dict):
                return True
        elif alt.startswith("one of:"):
            if isinstance(v, str) and v in [n.strip() for n in alt[7:].split(",")]:
                return True
        elif number and float(alt) == v:  # a literal special value, e.g. -1
            return True
    return False


def table_key(path):
    """The table's name of a mutated leaf: list indices as `*`, train_dataset_task.dataset_config as train_dataset."""
    name = ".".join("*" if isinstance(p, int) else p for p in path)
    return "train_dataset." + name[len("train_dataset_task.dataset_config."):] \
        if name.startswith("train_dataset_task.dataset_config.") else name


def check_the_checker():
    """in_range tells values apart (so a pass of the range check means something)."""
    cases = [("integer >= 1 | -1", 1, True), ("integer >= 1 | -1", -1, True), ("integer >= 1 | -1", 0, False),
             ("integer >= 1", 2**63, False), ("integer >= 1", 1e308, False), ("number > 0", float("nan"), False),
             ("number > 0", 1e308, True), ("number [0, 1)", 1, False), ("number (0, 1]", 1, True),
             ("boolean", 0, False), ("string", 0, True), ("string", [1, 2], False), ("one of: a, b", "c", False),
             ("one of: a, b", "b", True), ("number (0, 3.4e38] | map", {"a": 1}, True), ("integer", "", False)]
    for spec, v, want in cases:
        assert in_range(spec, v) == want, f"in_range({spec!r}, {v!r}) is {not want}"


def ask(cmd, timeout):
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", time.monotonic() - t0
    return p.returncode, p.stderr.decode("utf-8", "replace"), time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("out")
    ap.add_argument("--configs", nargs="+", required=True)
    ap.add_argument("--variants", type=int, default=300)
    ap.add_argument("--seed", type=int, default=55)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--values", help="docs/config_values.md: every taken value must lie in its key's range there")
    a = ap.parse_args()
    check_the_checker()
    table = value_table(a.values) if a.values else None
    out_of_range, checked = [], 0
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    baseline = 0.0
    for c in a.configs:
        status, err, secs = ask(train_cmd(a.bin, c, os.path.join(a.out, "baseline"), None), 600)
        if status != 0:
            print(f"FAIL: the unmutated {c} does not train one step: status {status}; {err.strip()[-300:]}")
            return 1
        baseline = max(baseline, secs)
    bound = max(a.timeout, 3 * baseline)
    print(f"one-step train of the unmutated configs: {baseline:.1f} s at most; each answer's bound {bound:.1f} s")
    bad, counts, slowest = [], {"taken": 0, "refused": 0}, (0.0, "")
    for i, (src, what, text, mutated, leaf) in enumerate(variants(a.configs, a.variants, rng)):
        f = os.path.join(a.out, "v%03d.yaml" % i)
        with open(f, "w", encoding="utf-8") as fh:
            fh.write(text)
        cmds = [("config", [a.bin, "config", "--config", f]), ("plan", [a.bin, "plan", "--config", f]),
                ("train", train_cmd(a.bin, f, os.path.join(a.out, "run%03d" % i), leaf))]
        for name, cmd in cmds:
            status, err, secs = ask(cmd, bound)
            if secs > slowest[0]:
                slowest = (secs, "%s of v%03d (%s: %s)" % (name, i, os.path.basename(src), what))
            if status == 0:
                counts["taken"] += 1
                if table is not None and mutated is not None:
                    key, v = mutated
                    row = table.get(key)
                    shown = repr(v) if not (isinstance(v, str) and len(v) > 20) else "'x' * %d" % len(v)
                    if row is None:
                        out_of_range.append("v%03d %s (%s): `%s` has no row in %s" % (i, name, os.path.basename(src), key,
                                                                                    a.values))
                    elif name == "train" and key in TRAIN_SETS:
                        pass  # train's own --set replaced the mutated value: what it took is that
                    elif name == "train" or row[1] != "train":
                        checked += 1
                        if not in_range(row[0], v):
                            out_of_range.append("v%03d %s (%s): took `%s: %s`, outside `%s`" % (
                                i, name, os.path.basename(src), key, shown, row[0]))
            elif status == 2 and "error" in err:
                counts["refused"] += 1
            else:
                why = "no answer within %.1f s" % bound if status is None else "status %d" % status
                last = err.strip().splitlines()[-1][:300] if err.strip() else ""
                bad.append("v%03d %s (%s: %s): %s; %s" % (i, name, os.path.basename(src), what, why, last))
        shutil.rmtree(os.path.join(a.out, "run%03d" % i), ignore_errors=True)  # its checkpoint: 200 MB
    print("%d variants: %d answers taken (status 0), %d refused (status 2 with an error); slowest %.1f s: %s"
          % (a.variants, counts["taken"], counts["refused"], slowest[0], slowest[1]))
    if table is not None:
        print("%d taken mutated values checked against %s's ranges: %d outside" % (checked, a.values, len(out_of_range)))
    for b in bad:
        print("FAIL:", b)
    for b in out_of_range:
        print("FAIL:", b)
    return 1 if bad or out_of_range else 0


if __name__ == "__main__":
    sys.exit(main())
