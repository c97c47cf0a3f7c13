#!/usr/bin/python3
"""Check the step timeline that `profile: True` writes (README, "Profiling a step"; runner/report/profiler.h).

    /usr/bin/python3 tools/check_trace.py OUTPUT_DIR --ranks N --steps FIRST LAST --layers L
        [--clip] [--memory] [--comm-group G ...] [--pipeline] [--split-backward] [--all-to-all]

OUTPUT_DIR is the run's output_dir: it holds profile/trace.json (the merged trace, rank 0's),
profile/rank_R/trace.json (each rank's) and metrics.jsonl (the last run in it is used). Checks:

  * the Trace Event Format (the JSON Perfetto and chrome://tracing open): an object with a
    traceEvents list and displayTimeUnit "ms"; every event has ph, name, pid, tid; every complete
    event ("X") a numeric ts and dur >= 0, a cat and args; counters ("C") numeric args; instants ("i")
    a scope;
  * each rank's own file holds the events the merged file has for its pid; every rank 0..N-1 is in
    the merged file, named by process_name metadata with its dp/tp/pp/ep coordinates;
  * the spans on one thread nest: any two either do not overlap or one holds the other;
  * the profiled steps and only those: one span "step S" per rank for each S in [FIRST, LAST];
  * the direct children of each step span sum to within 5% of the step span's duration;
  * the expected spans in every step: data, grad norm, optimizer (and grad clip with --clip); each
    layer's forward and backward ("layer l fwd", "layer l bwd", or with --split-backward its input and
    weight passes), the embedding and the head, over the ranks that hold them (all of them on every
    rank without --pipeline); with --comm-group G, collectives of group G with their bytes (> 0) in
    args; with --all-to-all, the MoE all-to-alls of group ep; with --pipeline, the executor's actions
    (Forward, Backward or BackwardInput/BackwardWeight, SendForward, RecvForward...) with micro and
    chunk in args; with --memory, memory counters with a resident set > 0;
  * the runner's measured time: metrics.jsonl's step_ms of each profiled step (per_print_times 1:
    one step per line) is the interval between the trace's "interval start" instants of that step and
    the next, minus the spans the runner does not count (args.excluded: evaluation, checkpoint saves),
    within 0.05 ms + 0.5% (the trace's clock and the runner's agree); and the interval is covered, to
    within 5% of step_ms, by the step's span and the log line before it (nothing unaccounted for), less the
    time the kernel kept the thread off its CPU before the step's span when it was preempted there (the
    thread CPU time and involuntary switches the interval start and the step span carry in args).

Prints a line per rank and step and "check_trace: OK"; exits 1 with the reasons otherwise.
"""
import argparse
import json
import os
import re
import sys

EPS_US = 0.01  # timestamps are written to the nanosecond: ends computed from ts + dur may differ by rounding


def load(path, errors):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        errors.append(f"{path}: not readable JSON: {e}")
        return None


def check_format(doc, where, errors):
    """The Trace Event Format's fields; returns the events."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        errors.append(f"{where}: no traceEvents list")
        return []
    if doc.get("displayTimeUnit") != "ms":
        errors.append(f"{where}: displayTimeUnit is {doc.get('displayTimeUnit')!r}, not 'ms'")
    num = (int, float)
    for i, e in enumerate(doc["traceEvents"]):
        at = f"{where}: traceEvents[{i}]"
        for k in ("ph", "name", "pid", "tid"):
            if k not in e:
                errors.append(f"{at} has no {k}: {e}")
        ph = e.get("ph")
        if ph == "X":
            if not isinstance(e.get("ts"), num) or not isinstance(e.get("dur"), num) or e["dur"] < 0:
                errors.append(f"{at}: a complete event needs numeric ts and dur >= 0: {e}")
            if not isinstance(e.get("cat"), str) or not isinstance(e.get("args"), dict):
                errors.append(f"{at}: a complete event without cat or args: {e}")
        elif ph == "C":
            if not isinstance(e.get("ts"), num) or not e.get("args") or \
                    not all(isinstance(v, num) for v in e["args"].values()):
                errors.append(f"{at}: a counter needs ts and numeric args: {e}")
        elif ph == "i":
            if not isinstance(e.get("ts"), num) or e.get("s") not in ("t", "p", "g"):
                errors.append(f"{at}: an instant needs ts and a scope s: {e}")
        elif ph != "M":
            errors.append(f"{at}: unexpected phase {ph!r}")
    return doc["traceEvents"]


def end(e):
    return e["ts"] + e["dur"]


def nest(spans, where, errors):
    """Spans of one thread as a forest: returns {id(span): [direct children]} and the roots."""
    order = sorted(spans, key=lambda e: (e["ts"], -e["dur"]))
    children = {id(e): [] for e in order}
    roots, stack = [], []
    for e in order:
        while stack and end(stack[-1]) <= e["ts"] + EPS_US:
            stack.pop()
        if stack:
            parent = stack[-1]
            if end(e) > end(parent) + EPS_US:
                errors.append(f"{where}: '{e['name']}' [{e['ts']:.3f}, {end(e):.3f}] overlaps '{parent['name']}' "
                              f"[{parent['ts']:.3f}, {end(parent):.3f}] without nesting")
            children[id(parent)].append(e)
        else:
            roots.append(e)
        stack.append(e)
    return children, roots


def descendants(e, children):
    out, todo = [], list(children[id(e)])
    while todo:
        x = todo.pop()
        out.append(x)
        todo.extend(children[id(x)])
    return out


def last_run_steps(path):
    lines = []
    with open(path) as f:
        for raw in f:
            raw = raw.strip()
            if not raw:
                continue
            j = json.loads(raw)
            if j.get("event") == "run_start":
                lines = []
            elif "loss" in j and "step_ms" in j:
                lines.append(j)
    return {j["step"]: j for j in lines}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("output_dir")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--steps", type=int, nargs=2, required=True, metavar=("FIRST", "LAST"))
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--clip", action="store_true")
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--comm-group", action="append", default=[])
    ap.add_argument("--pipeline", action="store_true")
    ap.add_argument("--split-backward", action="store_true")
    ap.add_argument("--all-to-all", action="store_true")
    a = ap.parse_args()
    errors = []
    prof = os.path.join(a.output_dir, "profile")
    merged_doc = load(os.path.join(prof, "trace.json"), errors)
    if merged_doc is None:
        return fail(errors)
    merged = check_format(merged_doc, "profile/trace.json", errors)
    if errors:  # the rest reads the fields the format requires
        return fail(errors)
    ranks = list(range(a.ranks))

    # Every rank in the merged file, named, and its own file the same events.
    names = {e["pid"]: e["args"].get("name", "") for e in merged if e.get("ph") == "M" and e.get("name") == "process_name"}
    pids = {e["pid"] for e in merged if e.get("ph") != "M"}
    if pids != set(ranks):
        errors.append(f"merged trace: events of ranks {sorted(pids)}, expected {ranks}")
    for r in ranks:
        if not re.fullmatch(rf"rank {r} \(dp \d+, tp \d+, pp \d+, ep \d+\)", names.get(r, "")):
            errors.append(f"merged trace: rank {r}'s process_name is {names.get(r)!r}, not 'rank {r} (dp., tp., pp., ep.)'")
        own_doc = load(os.path.join(prof, f"rank_{r}", "trace.json"), errors)
        if own_doc is None:
            continue
        own = [e for e in check_format(own_doc, f"profile/rank_{r}/trace.json", errors) if e.get("ph") != "M"]
        mine = [e for e in merged if e.get("pid") == r and e.get("ph") != "M"]
        key = lambda e: (e.get("ph"), e.get("name"), e.get("ts"), e.get("dur", 0))
        if sorted(map(key, own)) != sorted(map(key, mine)):
            errors.append(f"profile/rank_{r}/trace.json: {len(own)} events, not the {len(mine)} of pid {r} in the merged file")
        if any(e.get("pid") != r for e in own):
            errors.append(f"profile/rank_{r}/trace.json: events of another pid")

    metrics = last_run_steps(os.path.join(a.output_dir, "metrics.jsonl"))
    first, last = a.steps
    want_steps = list(range(first, last + 1))
    layers_seen = {"fwd": set(), "bwd": set()}
    ends_seen = {"embedding fwd": 0, "head fwd": 0, "embedding bwd": 0, "head bwd": 0}
    for r in ranks:
        events = [e for e in merged if e.get("pid") == r]
        threads = sorted({e["tid"] for e in events if e["ph"] == "X"})
        forest = {}
        for t in threads:
            children, roots = nest([e for e in events if e["ph"] == "X" and e["tid"] == t], f"rank {r} tid {t}", errors)
            forest.update(children)
        steps = [e for e in events if e["ph"] == "X" and e.get("cat") == "step" and re.fullmatch(r"step \d+", e["name"])]
        got = sorted(int(e["name"].split()[1]) for e in steps)
        if got != want_steps:
            errors.append(f"rank {r}: step spans {got}, expected {want_steps} (the profiled steps, once each)")
            continue
        markers = {int(e["args"]["step"]): e for e in events if e["ph"] == "i" and e["name"] == "interval start"}
        top = sorted((e for e in events if e["ph"] == "X" and id(e) not in
                      {id(c) for cs in forest.values() for c in cs}), key=lambda e: e["ts"])
        for s in sorted(steps, key=lambda e: e["ts"]):
            n = int(s["name"].split()[1])
            kids = forest[id(s)]
            covered = sum(k["dur"] for k in kids)
            share = covered / s["dur"] if s["dur"] > 0 else 0
            if not 0.95 <= share <= 1.0 + 1e-6:
                errors.append(f"rank {r} step {n}: its direct children sum to {covered:.1f} us of its {s['dur']:.1f} us "
                              f"({100 * share:.1f}%, not within 5%): "
                              + ", ".join(sorted({k['name'] for k in kids})))
            inside = descendants(s, forest)
            names_in = {e["name"] for e in inside}
            need = ["data", "grad norm", "optimizer"] + (["grad clip"] if a.clip else [])
            for nm in need:
                if nm not in names_in:
                    errors.append(f"rank {r} step {n}: no '{nm}' span")
            for e in inside:
                m = re.fullmatch(r"layer (\d+) (fwd|bwd|bwd input|bwd weight)", e["name"])
                if m:
                    layers_seen["fwd" if m.group(2) == "fwd" else "bwd"].add(int(m.group(1)))
                    if a.split_backward and m.group(2) == "bwd":
                        errors.append(f"rank {r} step {n}: '{e['name']}' where the backward is split")
                base = re.sub(r" (input|weight)$", "", e["name"])
                if base in ends_seen:
                    ends_seen[base] = 1
            mine = {e["name"] for e in inside if re.fullmatch(r"layer \d+ fwd", e["name"])}
            if not a.pipeline and len(mine) != a.layers:
                errors.append(f"rank {r} step {n}: forward spans of {len(mine)} layers, expected {a.layers}")
            if a.pipeline and not mine:
                errors.append(f"rank {r} step {n}: no layer's forward (a pipeline stage holds at least one layer)")
            for g in a.comm_group:
                comm = [e for e in inside if e.get("cat") == "comm" and e["args"].get("group") == g]
                if not any(e["args"].get("bytes", 0) > 0 for e in comm):
                    errors.append(f"rank {r} step {n}: no collective of group {g} with bytes in args")
            if a.all_to_all and not any(e["name"] == "all-to-all" and e["args"].get("group") == "ep"
                                        and e["args"].get("bytes", 0) > 0 for e in inside):
                errors.append(f"rank {r} step {n}: no MoE all-to-all of group ep")
            if a.pipeline:
                acts = [e for e in inside if e.get("cat") == "pipeline"]
                kinds = {e["name"] for e in acts}
                bwd = {"BackwardInput", "BackwardWeight"} if a.split_backward else {"Backward"}
                for k in {"Forward"} | bwd:
                    if k not in kinds:
                        errors.append(f"rank {r} step {n}: no pipeline action {k} (has {sorted(kinds)})")
                if not kinds & {"SendForward", "RecvForward", "SendBackward", "RecvBackward"}:
                    errors.append(f"rank {r} step {n}: no pipeline send or receive")
                for e in acts:
                    if e["name"][0].isupper() and not ("micro" in e["args"] and "chunk" in e["args"]):
                        errors.append(f"rank {r} step {n}: pipeline action {e['name']} without micro and chunk args")
            if a.memory:
                mem = [e for e in events if e["ph"] == "C" and e["name"] == "memory" and s["ts"] <= e["ts"] <= end(s)]
                if len(mem) < 2 or not all(e["args"].get("rss_bytes", 0) > 0 for e in mem):
                    errors.append(f"rank {r} step {n}: {len(mem)} memory counters (need >= 2 with rss_bytes > 0)")

            # The runner's measured time (metrics.jsonl holds rank 0's).
            line = metrics.get(n)
            if r != 0:
                print(f"rank {r} step {n}: {s['dur'] / 1000:.3f} ms, children {100 * share:.1f}%")
                continue
            if line is None or line.get("interval_steps") != 1:
                errors.append(f"metrics.jsonl: no line of step {n} alone (per_print_times 1 expected)")
                continue
            if n not in markers or n + 1 not in markers:
                errors.append(f"rank 0: no 'interval start' instants of steps {n} and {n + 1}")
                continue
            t0, t1 = markers[n]["ts"], markers[n + 1]["ts"]
            window = [e for e in top if t0 - EPS_US <= e["ts"] < t1]
            excluded = sum(e["dur"] for e in window if e["args"].get("excluded"))
            measured_us = line["step_ms"] * 1000.0
            interval = t1 - t0 - excluded
            if abs(measured_us - interval) > 50.0 + 0.005 * measured_us:
                errors.append(f"step {n}: metrics.jsonl step_ms {line['step_ms']:.3f} ms, the trace's interval "
                              f"{interval / 1000:.3f} ms (instants {t0:.1f}-{t1:.1f} us less {excluded / 1000:.3f} ms excluded)")
            counted = sum(min(end(e), t1) - e["ts"] for e in window if not e["args"].get("excluded"))
            off_cpu = preempted_us(markers[n], s)
            if s["dur"] > measured_us + 50.0 or measured_us - counted - off_cpu > 0.05 * measured_us:
                errors.append(f"step {n}: step span {s['dur'] / 1000:.3f} ms and log spans cover "
                              f"{counted / 1000:.3f} ms of step_ms {line['step_ms']:.3f} ms (more than 5% unaccounted"
                              + (f", after {off_cpu / 1000:.3f} ms preempted before the step's span)" if off_cpu else ")"))
            print(f"rank 0 step {n}: {s['dur'] / 1000:.3f} ms, children {100 * share:.1f}%; step_ms {line['step_ms']:.3f}, "
                  f"trace interval {interval / 1000:.3f}, spans in it {counted / 1000:.3f}")

    # Every layer's forward and backward, the embedding and the head, somewhere (a stage's own on pipelines).
    for kind in ("fwd", "bwd"):
        missing = sorted(set(range(a.layers)) - layers_seen[kind])
        if missing:
            errors.append(f"no '{kind}' span of layers {missing}")
    for nm, seen in ends_seen.items():
        if not seen:
            errors.append(f"no '{nm}' span on any rank")
    if errors:
        return fail(errors)
    print(f"check_trace: OK ({a.ranks} ranks, steps {first}-{last}, {len(merged)} events)")
    return 0


def preempted_us(marker, step):
    """The time the kernel kept rank 0's thread off its CPU between the interval's start and the step's span (the
    loop's few microseconds outside any span, where a preemption on a busy machine lands as unaccounted time): the
    wall time between them less the thread's CPU time, when its involuntary context switches rose. 0 when the
    trace has no thread times or nothing preempted the thread. A preemption inside the log or memory span in that
    gap is counted twice (there and here), so the check may let that much uncovered work through on such a step;
    an unloaded machine has none."""
    a, b = marker.get("args", {}), step.get("args", {})
    keys = ("thread_cpu_us", "preemptions")
    if not all(k in a and k in b for k in keys) or b["preemptions"] <= a["preemptions"]:
        return 0.0
    return max(0.0, (step["ts"] - marker["ts"]) - (b["thread_cpu_us"] - a["thread_cpu_us"]))


def fail(errors):
    for e in errors[:40]:
        print("FAIL:", e)
    if len(errors) > 40:
        print(f"... and {len(errors) - 40} more")
    return 1


if __name__ == "__main__":
    sys.exit(main())
