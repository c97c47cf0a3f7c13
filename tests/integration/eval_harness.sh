#!/usr/bin/env bash
# `gridformer eval`: lm-evaluation-harness's seven tasks on the hand-written files of tests/data/harness, scored by
# a tiny GPT-2 (the real GPT-2 BPE, 20 steps on the default corpus), against tools/harness_reference.py (PyTorch, an
# independent transcription of the harness's formatting, request types and metrics from the same weights):
#  * every task's acc and acc_norm equal, perplexities and bits per byte within 1e-5 relative, every request's
#    loglikelihood within 1e-5 (of max(1, |ll|)) and its greedy flag equal; the JSON in the harness's shape;
#  * the same under model_parallel 2 (the heads and vocabulary split), data_parallel 2 (the requests dealt over the
#    ranks), pipeline_stage 2 (each stage its layers and their cache, the last stage scoring) and with one request
#    per call;
#  * refused with the reason: an unknown task, a line without a field, a missing task file.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_vocab
need_corpus
need_python torch regex
tiny_config gpt2 gpt2.yaml --set model.model_config.seq_length=64 --set runner_config.train_steps=20 \
  --set runner_config.batch_size=4
train run gpt2.yaml
run tohf "$BIN" convert --from run --to hf
((STATUS == 0)) || { cat tohf.log; fail "convert to Hugging Face failed"; }
TASKS=hellaswag,arc_easy,arc_challenge,piqa,winogrande,lambada_openai,wikitext
DATA="$SRC/tests/data/harness"
run ev "$BIN" eval --config gpt2.yaml --load_checkpoint run --tasks $TASKS --data "$DATA" --output ev/results.json
((STATUS == 0)) || { tail -20 ev.log; fail "eval failed"; }
grep -q "|hellaswag" ev.log || { cat ev.log; fail "no results table"; }
"$PY" "$SRC/tools/harness_reference.py" --weights hf/model.safetensors --hf-config hf/config.json \
  --vocab "$VOCAB" --merges "$MERGES" --data "$DATA" --tasks $TASKS --max-length 64 --out ref.json > ref.log 2>&1 ||
  { tail -20 ref.log; fail "the reference failed"; }

# compare OURS_DIR: results and per-request loglikelihoods against ref.json.
compare() {
  "$PY" - "$1" ref.json <<'EOF'
import json, os, sys
ours_dir, ref = sys.argv[1], json.load(open(sys.argv[2]))
ours = json.load(open(os.path.join(ours_dir, "results.json")))
for k in ("results", "versions", "n-shot", "config"):
    assert k in ours, f"no '{k}' in results.json"
bad, worst = [], 0.0
for task, want in ref["results"].items():
    got = ours["results"][task]
    for key, w in want.items():
        if key == "alias" or "_stderr" in key:
            continue
        g = got.get(key)
        if g is None:
            bad.append(f"{task}: no {key}")
        elif not isinstance(w, float) or key.startswith(("acc,", "acc_norm,")):
            if g != w: bad.append(f"{task} {key}: {g} vs {w}")
        elif abs(g - w) > 1e-5 * abs(w):
            bad.append(f"{task} {key}: {g} vs {w}")
    for key in ("acc_stderr,none", "acc_norm_stderr,none"):
        if key in want and isinstance(want[key], float) and abs(got[key] - want[key]) > 1e-9:
            bad.append(f"{task} {key}: {got[key]} vs {want[key]}")
    samples = [json.loads(l) for l in open(os.path.join(ours_dir, f"samples_{task}.jsonl"))]
    for doc, s in zip(ref["samples"][task], samples):
        lls = [r["loglikelihood"] for r in doc["requests"]]
        if task == "wikitext":
            pairs = [(sum(lls), None, s["resps"][0][0], None)]
        else:
            pairs = [(r["loglikelihood"], r["is_greedy"], ll, gr) for r, (ll, gr) in zip(doc["requests"], s["resps"])]
        for want_ll, want_g, got_ll, got_g in pairs:
            err = abs(got_ll - want_ll) / max(1.0, abs(want_ll))
            worst = max(worst, err)
            if err > 1e-5: bad.append(f"{task} doc {doc['doc_id']}: loglikelihood {got_ll} vs {want_ll}")
            if want_g is not None and bool(got_g) != bool(want_g): bad.append(f"{task} doc {doc['doc_id']}: greedy flag")
for b in bad:
    print("FAIL:", b)
print(f"{ours_dir}: {len(ref['results'])} tasks, worst loglikelihood difference {worst:.2e} of max(1, |ll|)")
sys.exit(1 if bad else 0)
EOF
}
compare ev || fail "eval differs from the reference"
"$PY" - ref.json <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
norm_differs = [t for t, m in r.items() if "acc_norm,none" in m and m["acc_norm,none"] != m["acc,none"]]
print("tasks where acc_norm differs from acc:", norm_differs or "none")
EOF
mpirun -np 2 --oversubscribe "$BIN" eval --config gpt2.yaml --load_checkpoint run --tasks $TASKS --data "$DATA" \
  --output ev_mp2/results.json --set parallel_config.model_parallel=2 > ev_mp2.log 2>&1 || { tail -20 ev_mp2.log; fail "eval at mp2"; }
compare ev_mp2 || fail "eval at mp2 differs from the reference"
mpirun -np 2 --oversubscribe "$BIN" eval --config gpt2.yaml --load_checkpoint run --tasks $TASKS --data "$DATA" \
  --output ev_dp2/results.json --set parallel_config.data_parallel=2 --set runner_config.batch_size=2 > ev_dp2.log 2>&1 ||
  { tail -20 ev_dp2.log; fail "eval at dp2"; }
compare ev_dp2 || fail "eval at dp2 (the requests dealt over the ranks) differs from the reference"
mpirun -np 2 --oversubscribe "$BIN" eval --config gpt2.yaml --load_checkpoint run --tasks $TASKS --data "$DATA" \
  --output ev_pp2/results.json --set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 > ev_pp2.log 2>&1 || { tail -20 ev_pp2.log; fail "eval at pp2"; }
grep -q "eval: 2 pipeline stages" ev_pp2.log || { tail -20 ev_pp2.log; fail "eval at pp2 ran no pipeline"; }
compare ev_pp2 || fail "eval at pp2 (each stage its layers, the last one scoring) differs from the reference"
run ev_b1 "$BIN" eval --config gpt2.yaml --load_checkpoint run --tasks $TASKS --data "$DATA" --output ev_b1/results.json \
  --batch_size 1
((STATUS == 0)) || { tail -20 ev_b1.log; fail "eval --batch_size 1"; }
compare ev_b1 || fail "eval with one request a call differs from the reference"

refused 2 "unknown task 'hellaswg'" unknown "$BIN" eval --config gpt2.yaml --load_checkpoint run --tasks hellaswg --data "$DATA"
mkdir bad && printf '%s\n' '{"goal": "x", "sol1": "a", "label": 0}' > bad/piqa.jsonl
refused 2 "piqa.jsonl line 1: no field \"sol2\"" nofield "$BIN" eval --config gpt2.yaml --load_checkpoint run --tasks piqa --data bad
refused 2 "cannot read" nofile "$BIN" eval --config gpt2.yaml --load_checkpoint run --tasks arc_easy --data bad
ok "eval: seven tasks equal the PyTorch reference, at mp2, dp2, pp2 and one request a call; refusals"
