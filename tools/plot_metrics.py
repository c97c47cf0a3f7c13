#!/usr/bin/python3
"""Draw the loss, learning rate, throughput and gradient norm of one or more runs from metrics.jsonl.

Run with Debian's Python (python3-matplotlib; the pyenv `python3` on PATH has no matplotlib):

    /usr/bin/python3 tools/plot_metrics.py RUN_DIR_OR_METRICS_JSONL [more ...] -o out.png \\
        [--labels a,b] [--title T] [--all-runs] [--dpi 80]

Plots without TensorBoard: one PNG of four panels (loss with the evaluation loss as markers, lr,
tokens/s, grad norm), the runs overlaid in one colour each with a legend. A RUN_DIR is a run's
output_dir, which holds metrics.jsonl. The file's lines (README, "Using it"):

  * {"event": "run_start", ...} opens each run. `gridformer train` appends, so a file may hold
    several runs (a rerun in the same output_dir, a resumed run). A run whose first step is past 1
    resumed the one before it and continues its curve; a run from step 1 starts a new one. The last
    curve is drawn (a resumed run with the run it resumed), and --all-runs draws each run as its own
    curve. Other events (checkpoint) are skipped.
  * Step lines are the ones with "loss", as every reader of the file selects them
    (tests/integration/compare_runs.py, bench/*.py). Their timing figures (tokens_per_s) are means
    over the interval since the previous line; step 1's line ("startup": true) is start-up time
    (first-touch allocation, oneDNN primitives, cold caches) and is left out of the throughput panel.
    A grad_norm that was not finite (an overflowing fp16 step) is written as null (nlohmann::json
    writes NaN and Inf so) and leaves a gap in its curve.
  * Evaluation lines have "eval_loss" (and "ppl").

The figure is 10 x 7.5 inches, so --dpi 80 (the default) gives 800 x 600 pixels. The tool prints,
per curve, what it drew: the steps, how many step, evaluation, tokens/s and grad-norm points.
"""
import argparse
import json
import math
import os
import sys

FIG_INCHES = (10.0, 7.5)


def fail(msg):
    sys.exit(f"plot_metrics: {msg}")


def metrics_path(arg):
    """The metrics.jsonl named by a run directory or given as a file."""
    if os.path.isdir(arg):
        path = os.path.join(arg, "metrics.jsonl")
        if not os.path.isfile(path):
            fail(f"{arg} is a directory without metrics.jsonl: give a run's output_dir "
                 "(where `gridformer train` writes metrics.jsonl) or the file itself")
        return path
    if not os.path.isfile(arg):
        fail(f"{arg}: no such file or directory: give a run's output_dir or its metrics.jsonl")
    return arg


def read_runs(path):
    """The runs of one metrics.jsonl: a list of dicts {start_line, steps, evals}, in file order."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        fail(f"{path}: cannot read: {e.strerror}")
    runs = []
    current = None
    last = max((i for i, l in enumerate(lines) if l.strip()), default=-1)
    for i, text in enumerate(lines):
        if not text.strip():
            continue
        try:
            j = json.loads(text)
        except json.JSONDecodeError as e:
            # A run killed while writing leaves at most its last line cut short: the rest is
            # still worth drawing. A bad line anywhere else means this is not a metrics file.
            if i == last:
                print(f"plot_metrics: {path}:{i + 1}: last line is incomplete (a run stopped while "
                      "writing it?); skipped", file=sys.stderr)
                continue
            fail(f"{path}:{i + 1}: not a JSON object ({e.msg}); metrics.jsonl has one per line")
        if not isinstance(j, dict):
            fail(f"{path}:{i + 1}: not a JSON object; metrics.jsonl has one per line")
        if j.get("event") == "run_start" or current is None:
            # Lines before any run_start (a file from before run_start existed) form a run too.
            current = {"start_line": i + 1 if j.get("event") == "run_start" else None, "steps": [], "evals": []}
            runs.append(current)
        if "event" in j:
            continue
        if "loss" in j:
            if "step" not in j:
                fail(f"{path}:{i + 1}: a step line (it has \"loss\") without \"step\"")
            current["steps"].append(j)
        elif "eval_loss" in j:
            if "step" not in j:
                fail(f"{path}:{i + 1}: an evaluation line (it has \"eval_loss\") without \"step\"")
            current["evals"].append(j)
    return runs


def number(v):
    """A drawable value: JSON null (a non-finite figure) and missing keys become NaN, a gap."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return math.nan
    return float(v)


def series(rows, key, keep=lambda r: True, gaps=False):
    """(steps, values) of key; with gaps a missing value stays as NaN, which breaks the line there."""
    pts = [(r["step"], number(r.get(key))) for r in rows if keep(r)]
    if not gaps:
        pts = [(s, v) for s, v in pts if not math.isnan(v)]
    return [s for s, _ in pts], [v for _, v in pts]


def curves(args):
    """One curve per run drawn: (label, path, run index, run count, run)."""
    paths = [metrics_path(a) for a in args.inputs]
    if args.labels is not None:
        labels = [l.strip() for l in args.labels.split(",")]
        if len(labels) != len(paths) or any(not l for l in labels):
            fail(f"--labels has {len(labels)} name(s) for {len(paths)} input(s): give one non-empty "
                 "name per input, comma-separated")
    else:
        # A run is known by its output_dir (a metrics.jsonl under another name by that name); when
        # two share a name (a/out, b/out) the path as given tells them apart.
        names = [os.path.basename(os.path.dirname(os.path.abspath(p))) if os.path.basename(p) == "metrics.jsonl"
                 else os.path.splitext(os.path.basename(p))[0] for p in paths]
        given = [os.path.dirname(a) if os.path.basename(a) == "metrics.jsonl" else a.rstrip("/") for a in args.inputs]
        labels = [n if names.count(n) == 1 else g or n for n, g in zip(names, given)]
    out = []
    for label, path in zip(labels, paths):
        runs = read_runs(path)
        if not any(r["steps"] for r in runs):
            fail(f"{path}: no step lines (lines with \"loss\"): did the run train at least one step? "
                 "(run_mode: eval writes none)")
        if args.all_runs:
            with_steps = [(k, r) for k, r in enumerate(runs) if r["steps"]]
            for k, r in enumerate(runs):
                if not r["steps"]:
                    print(f"plot_metrics: {path}: run {k + 1} of {len(runs)} (line {r['start_line']}) has no "
                          "step lines; skipped")
            for k, r in with_steps:
                name = label if len(with_steps) == 1 else f"{label} run {k + 1}"
                out.append((name, path, k + 1, len(runs), r))
        else:
            r = runs[-1]
            if not r["steps"]:
                fail(f"{path}: its last run (run_start at line {r['start_line']}) has no step lines; "
                     "--all-runs draws the earlier runs")
            # The runs the last one resumed, back to the one that started at step 1: one curve.
            first = len(runs) - 1
            while first > 0 and runs[first]["steps"] and number(runs[first]["steps"][0].get("step")) > 1 \
                    and runs[first - 1]["steps"]:
                first -= 1
            if first < len(runs) - 1:
                r = {"start_line": runs[first]["start_line"],
                     "steps": [s for x in runs[first:] for s in x["steps"]],
                     "evals": [e for x in runs[first:] for e in x["evals"]]}
                print(f"plot_metrics: {path}: runs {first + 1}-{len(runs)} of {len(runs)} drawn as one curve "
                      "(each resumed the one before)")
            out.append((label, path, len(runs), len(runs), r))
    return out


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Example: /usr/bin/python3 tools/plot_metrics.py output -o loss.png")
    ap.add_argument("inputs", nargs="+", metavar="RUN_DIR_OR_METRICS_JSONL",
                    help="a run's output_dir (holding metrics.jsonl) or a metrics.jsonl")
    ap.add_argument("-o", "--output", required=True, help="the PNG to write")
    ap.add_argument("--labels", help="comma-separated legend names, one per input (default: the run directories)")
    ap.add_argument("--title", help="the figure's title (default: the runs' names)")
    ap.add_argument("--all-runs", action="store_true",
                    help="draw every run a file holds (each run_start begins one), not only the last")
    ap.add_argument("--dpi", type=int, default=80, help="pixels per inch; the figure is 10 x 7.5 inches (default 80)")
    args = ap.parse_args()
    if args.dpi <= 0:
        ap.error("--dpi must be positive")

    drawn = curves(args)

    # Agg: no display on a build machine or over ssh; the PNG is all we want.
    try:
        import matplotlib
    except ImportError:
        fail(f"matplotlib is not installed for {sys.executable}: run this with Debian's /usr/bin/python3 "
             "(python3-matplotlib, which scripts/setup.sh installs)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(2, 2, figsize=FIG_INCHES, dpi=args.dpi, sharex=True)
    ax_loss, ax_lr, ax_tps, ax_gn = axes[0][0], axes[0][1], axes[1][0], axes[1][1]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    any_eval = False
    def drawn_points(lines):
        # The summary counts what the axes hold, not what was read: it says what the PNG shows.
        return sum(int((~np.isnan(np.asarray(l.get_ydata(), dtype=float))).sum()) for l in lines)

    for n, (label, path, k, count, run) in enumerate(drawn):
        c = colors[n % len(colors)]
        steps = run["steps"]
        xs, ys = series(steps, "loss")
        loss = ax_loss.plot(xs, ys, color=c, label=label)
        ex, ey = series(run["evals"], "eval_loss")
        evals = []
        if ex:
            evals = ax_loss.plot(ex, ey, linestyle="none", marker="o", markersize=5, color=c)
            any_eval = True
        lr = ax_lr.plot(*series(steps, "lr"), color=c)
        tps = ax_tps.plot(*series(steps, "tokens_per_s", keep=lambda r: r.get("startup") is not True),
                          color=c, marker=".")
        gn = ax_gn.plot(*series(steps, "grad_norm", gaps=True), color=c)
        which = f"run {k} of {count}" if count > 1 else "1 run"
        print(f"{label}: {path} ({which}): steps {steps[0]['step']}-{steps[-1]['step']}: {drawn_points(loss)} loss "
              f"points (loss {ys[0]:.4f} -> {ys[-1]:.4f}), {drawn_points(evals)} eval loss points, "
              f"{drawn_points(lr)} lr points, {drawn_points(tps)} tokens/s points (start-up line left out), "
              f"{drawn_points(gn)} grad norm points")

    ax_loss.set_title("loss")
    ax_loss.set_ylabel("cross-entropy (nats)")
    ax_lr.set_title("learning rate")
    ax_lr.set_ylabel("lr")
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    ax_tps.set_title("throughput (mean over each log interval)")
    ax_tps.set_ylabel("tokens/s")
    ax_gn.set_title("gradient norm (before clipping)")
    ax_gn.set_ylabel("grad norm")
    for ax in (ax_tps, ax_gn):
        ax.set_xlabel("step")
    for ax in (ax_loss, ax_lr, ax_tps, ax_gn):
        ax.grid(True, alpha=0.3)
    # One legend for the figure: a run's colour is the same in every panel; evaluation points are
    # the markers in its colour.
    handles, names = ax_loss.get_legend_handles_labels()
    if any_eval:
        from matplotlib.lines import Line2D
        handles.append(Line2D([], [], linestyle="none", marker="o", markersize=5, color="0.3"))
        names.append("eval loss (markers)")
    ax_loss.legend(handles, names, fontsize="small")
    fig.suptitle(args.title if args.title is not None else "gridformer: " + ", ".join(d[0] for d in drawn))
    fig.tight_layout()
    try:
        # format given: the file is a PNG whatever its name ends with.
        fig.savefig(args.output, format="png", dpi=args.dpi)
    except OSError as e:
        fail(f"{args.output}: cannot write the PNG: {e.strerror}")
    w, h = (round(v * args.dpi) for v in FIG_INCHES)
    print(f"wrote {args.output} ({w}x{h} px): {len(drawn)} run(s), panels loss, lr, tokens/s, grad norm")


if __name__ == "__main__":
    main()
