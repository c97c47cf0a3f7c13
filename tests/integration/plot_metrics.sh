#!/usr/bin/env bash
# tools/plot_metrics.py on the metrics.jsonl of real runs: two tiny trainings (6 steps, evaluation
# at steps 3 and 6), the second one twice (another learning rate) into the same output_dir (two
# run_start lines). The PNG must be a PNG of the size the --dpi gives, hold each run's colour (and
# no other run's), and the printed summary must name each run, the run of its file drawn and its
# step, evaluation and throughput point counts (5 of 6: step 1's start-up line is left out). Then
# the refusals: a missing file, a directory without metrics.jsonl, a file with no step lines, a
# last run with no step lines, --labels of the wrong length, an unknown option, a garbled line.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
TOOL="$SRC/tools/plot_metrics.py"

# The tool needs matplotlib (Debian's python3-matplotlib, for the system Python).
"$PY" -c "import matplotlib" 2>/dev/null || fail "$PY cannot import matplotlib (scripts/setup.sh installs python3-matplotlib)"
plot() { "$PY" "$TOOL" "$@"; }

cli_gpt2 tiny.yaml steps=6 samples=64 top=$'do_eval: True\neval_step_interval: 3\neval_dataset: {eval_iters: 1}'

"$BIN" train --config tiny.yaml --set output_dir=a > ta.txt 2>&1 || { cat ta.txt; fail "training run a"; }
# b's two runs differ (learning rate), or the first run's curves would hide under the second's.
for lr in 0.01 0.02; do
  "$BIN" train --config tiny.yaml --set output_dir=b --set lr_schedule.learning_rate=$lr > "tb$lr.txt" 2>&1 \
    || { cat "tb$lr.txt"; fail "training run b (lr $lr)"; }
done
[ "$(grep -c '"loss"' a/metrics.jsonl)" -eq 6 ] && [ "$(grep -c '"eval_loss"' a/metrics.jsonl)" -eq 2 ] \
  || fail "run a should log 6 steps and 2 evaluations: $(cat a/metrics.jsonl)"
[ "$(grep -c '"run_start"' b/metrics.jsonl)" -eq 2 ] || fail "b/metrics.jsonl should hold 2 runs"

# png FILE W H [PRESENT_COLOURS] [ABSENT_COLOURS]: the PNG signature, the IHDR size, and for each
# colour (matplotlib's default cycle: run 1 #1f77b4, run 2 #ff7f0e, ...) whether the image has
# pixels of it (a drawn line's core is the exact colour; antialiased edges are not counted).
png() {
  "$PY" - "$@" <<'PY'
import struct, sys
import matplotlib.image as mpimg
path, w, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
present = [c for c in (sys.argv[4] if len(sys.argv) > 4 else "").split(",") if c]
absent = [c for c in (sys.argv[5] if len(sys.argv) > 5 else "").split(",") if c]
data = open(path, "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG (signature {data[:8]!r})"
assert data[12:16] == b"IHDR", f"{path}: no IHDR chunk first"
size = struct.unpack(">II", data[16:24])
assert size == (w, h), f"{path}: {size[0]}x{size[1]} pixels, expected {w}x{h}"
img = (mpimg.imread(path)[:, :, :3] * 255).round().astype(int)
for c, want in [(c, True) for c in present] + [(c, False) for c in absent]:
    rgb = [int(c[i:i + 2], 16) for i in (0, 2, 4)]
    n = int(((abs(img - rgb) <= 2).all(axis=2)).sum())
    assert (n >= 100) == want, f"{path}: {n} pixels of #{c}, expected {'some' if want else 'none'}"
    print(f"{path}: {n} pixels of #{c}")
PY
}
BLUE=1f77b4; ORANGE=ff7f0e; GREEN=2ca02c

# 1. One run directory: its only run, 6 steps, 2 evaluations, 5 throughput points; 800x600 at dpi 80.
plot a -o one.png > p1.txt 2>&1 || { cat p1.txt; fail "plot of run a"; }
cat p1.txt
grep -q "^a: a/metrics.jsonl (1 run): steps 1-6: 6 loss points .*, 2 eval loss points, 6 lr points, 5 tokens/s points (start-up line left out), 6 grad norm points" p1.txt \
  || fail "summary of run a"
grep -q "^wrote one.png (800x600 px): 1 run(s)" p1.txt || fail "no 'wrote' line"
png one.png 800 600 "$BLUE" "$ORANGE" || fail "one.png"

# 2. Both, by file and by directory, named: the last run of b (run 2 of 2); a title; dpi 100.
plot a/metrics.jsonl b --labels first,second --title "two runs" --dpi 100 -o two.png > p2.txt 2>&1 \
  || { cat p2.txt; fail "plot of a and b"; }
cat p2.txt
grep -q "^first: a/metrics.jsonl (1 run): steps 1-6: 6 loss points" p2.txt || fail "summary names no run 'first'"
grep -q "^second: b/metrics.jsonl (run 2 of 2): steps 1-6: 6 loss points .*, 2 eval loss points, 6 lr points, 5 tokens/s points" p2.txt \
  || fail "summary names no run 'second' (the last run of b)"
[ "$(grep -c 'loss points' p2.txt)" -eq 2 ] || fail "two curves expected"
png two.png 1000 750 "$BLUE,$ORANGE" "$GREEN" || fail "two.png"

# 3. --all-runs: both runs of b, each its own curve.
plot b --all-runs -o all.png > p3.txt 2>&1 || { cat p3.txt; fail "plot --all-runs"; }
cat p3.txt
grep -q "^b run 1: b/metrics.jsonl (run 1 of 2): steps 1-6: 6 loss points" p3.txt || fail "--all-runs lacks run 1"
grep -q "^b run 2: b/metrics.jsonl (run 2 of 2): steps 1-6: 6 loss points" p3.txt || fail "--all-runs lacks run 2"
png all.png 800 600 "$BLUE,$ORANGE" "$GREEN" || fail "all.png"

# 4. A run cut short while writing its last line: drawn, with a warning.
cp a/metrics.jsonl cut.jsonl
printf '{"step": 7, "epoch": 1, "lo' >> cut.jsonl
plot cut.jsonl -o cut.png > p4.txt 2>&1 || { cat p4.txt; fail "a file with an incomplete last line"; }
grep -q "cut.jsonl:10: last line is incomplete" p4.txt || fail "no warning about the incomplete line: $(cat p4.txt)"
grep -q "steps 1-6: 6 loss points" p4.txt || fail "the incomplete file's steps"

# 5. Refusals: a status other than 0, a message naming the file or option, and no PNG.
refuse() {  # refuse EXPECTED_MESSAGE ARGS...
  local want="$1"; shift
  rm -f bad.png
  set +e; plot "$@" -o bad.png > r.txt 2>&1; local status=$?; set -e
  [ "$status" -ne 0 ] || { cat r.txt; fail "accepted: $*"; }
  grep -q -- "$want" r.txt || { cat r.txt; fail "'$*' did not say '$want'"; }
  [ -e bad.png ] && fail "'$*' wrote a PNG"
  echo "refused ($*): $(tail -1 r.txt)"
}
refuse "nothere/metrics.jsonl: no such file or directory" nothere/metrics.jsonl
mkdir empty_dir
refuse "empty_dir is a directory without metrics.jsonl" empty_dir
grep '"run_start"' a/metrics.jsonl > start_only.jsonl
refuse "start_only.jsonl: no step lines" start_only.jsonl
cp a/metrics.jsonl tail_run.jsonl
grep '"run_start"' a/metrics.jsonl >> tail_run.jsonl
refuse "tail_run.jsonl: its last run (run_start at line 10) has no step lines; --all-runs" tail_run.jsonl
refuse "--labels has 1 name(s) for 2 input(s)" a b --labels only
refuse "unrecognized arguments: --bogus" a --bogus
printf '{"step": 1, "loss": 4.0}\nnot json\n{"step": 2, "loss": 3.9}\n' > garbled.jsonl
refuse "garbled.jsonl:2: not a JSON object" garbled.jsonl
# ... while --all-runs draws the earlier run of that file and says it skipped the empty one.
plot tail_run.jsonl --all-runs -o tail.png > p5.txt 2>&1 || { cat p5.txt; fail "--all-runs with an empty last run"; }
grep -q "run 2 of 2 (line 10) has no step lines; skipped" p5.txt || fail "the empty run was not reported: $(cat p5.txt)"
grep -q "^tail_run: tail_run.jsonl (run 1 of 2): steps 1-6" p5.txt || fail "--all-runs did not draw run 1: $(cat p5.txt)"

# 6. A resumed run continues the curve of the run it resumed: run 2 of resumed.jsonl starts at step 7, so the
# default draws steps 1-12 as one curve; --all-runs still draws each run.
"$PY" - a/metrics.jsonl > resumed.jsonl <<'EOF2'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
for l in lines: print(json.dumps(l))
for l in lines:
    if "step" in l: l["step"] += 6
    print(json.dumps(l))
EOF2
plot resumed.jsonl -o resumed.png > p6.txt 2>&1 || { cat p6.txt; fail "a resumed run"; }
grep -q "runs 1-2 of 2 drawn as one curve (each resumed the one before)" p6.txt || fail "the resumed runs were not joined: $(cat p6.txt)"
grep -q "steps 1-12: 12 loss points" p6.txt || fail "the joined curve's steps: $(cat p6.txt)"
# 7. Without matplotlib (python -S leaves out the site packages): a message that says what to run, no traceback.
set +e; "$PY" -S "$TOOL" a -o nomat.png > p7.txt 2>&1; status=$?; set -e
[ "$status" -ne 0 ] && grep -q "plot_metrics: matplotlib is not installed" p7.txt && ! grep -q Traceback p7.txt ||
  { cat p7.txt; fail "without matplotlib: status $status"; }

echo "plot_metrics: OK"
