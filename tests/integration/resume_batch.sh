#!/usr/bin/env bash
# Resume with a new global batch and rank count (the Resilience issue's item 5, Megatron's
# consumed-samples rule). A run on 2 ranks with global batch 8 (dp2 x batch 4) stops after step 4
# (exit_interval) with its checkpoint; it is resumed on 4 ranks with global batch 16 (dp4 x batch 4)
# to step 10. GF_SAMPLE_TRACE records every micro-batch each rank reads. Checked:
#  - the two runs together read samples [0, 128) each exactly once, the same list as one
#    uninterrupted 2-rank run of 16 steps of 8 (32 + 6 x 16 = 128 samples);
#  - the resumed run's step 5 starts at sample 32 (the first not consumed), each of its steps reads 16
#    samples, and metrics.jsonl's consumed_samples is 32 + 16 (s - 4) after step s;
#  - the resume's log names the change of global batch.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
random_gpt2 tiny.yaml seed=3 steps=10 batch=4 clip= lr_end= optimizer= samples=1000 model= \
  ckpt="prefix: tiny, save_checkpoint_steps: 100"
# The trace's micro-batches as sample indices, one per line, sorted numerically.
samples() { awk '{for (i = 0; i < $7; ++i) print $6 + i}' "$@" | sort -n; }

GF_SAMPLE_TRACE="$WORK/a.trace" mpirun -np 2 --oversubscribe "$BIN" train --config tiny.yaml \
  --set output_dir=run --set parallel_config.data_parallel=2 --set runner_config.exit_interval=4 > a.log 2>&1 ||
  fail "the first run (dp2, global batch 8): $(tail -5 a.log)"
[ "$(awk '{print $2}' a.trace | sort -un | tail -1)" = 4 ] || fail "the first run did not stop after step 4: $(tail -3 a.trace)"
GF_SAMPLE_TRACE="$WORK/b.trace" mpirun -np 4 --oversubscribe "$BIN" train --config tiny.yaml \
  --set output_dir=run --set parallel_config.data_parallel=4 --set resume_training=True > b.log 2>&1 ||
  fail "the resumed run (dp4, global batch 16): $(tail -5 b.log)"
grep -q "global batch changes at the resume: 8 samples per step up to step 4, 16 from step 5" b.log ||
  fail "the resume's log does not name the change of global batch: $(grep -i resum b.log | head -3)"
GF_SAMPLE_TRACE="$WORK/c.trace" mpirun -np 2 --oversubscribe "$BIN" train --config tiny.yaml \
  --set output_dir=whole --set parallel_config.data_parallel=2 --set runner_config.train_steps=16 > c.log 2>&1 ||
  fail "the uninterrupted run: $(tail -5 c.log)"

samples a.trace b.trace > resumed.txt
samples c.trace > whole.txt
[ "$(wc -l < whole.txt)" = 128 ] || fail "the uninterrupted run read $(wc -l < whole.txt) samples, not 16 x 8 = 128"
[ -z "$(uniq -d resumed.txt)" ] || fail "samples read twice across the resume: $(uniq -d resumed.txt | head -5 | tr '\n' ' ')"
cmp -s resumed.txt whole.txt || fail "the two runs' samples differ from the uninterrupted run's: $(diff resumed.txt whole.txt | head -6 | tr '\n' ' ')"
first5=$(awk '$2 == 5 {print $6}' b.trace | sort -n | head -1)
[ "$first5" = 32 ] || fail "the resumed run's step 5 starts at sample $first5, not 32"
for s in 5 6 7 8 9 10; do
  n=$(awk -v s=$s '$2 == s {n += $7} END {print n + 0}' b.trace)
  [ "$n" = 16 ] || fail "the resumed run's step $s read $n samples, not 16"
  lo=$(awk -v s=$s '$2 == s {print $6}' b.trace | sort -n | head -1)
  [ "$lo" = $((32 + 16 * (s - 5))) ] || fail "step $s starts at sample $lo, not $((32 + 16 * (s - 5)))"
done
"$PY" - run/metrics.jsonl <<'PY' || fail "consumed_samples in metrics.jsonl"
import json, sys
want = {s: 8 * s for s in range(1, 5)} | {s: 32 + 16 * (s - 4) for s in range(5, 11)}
got = {j["step"]: j["consumed_samples"] for j in map(json.loads, open(sys.argv[1])) if "loss" in j}
assert got == want, (got, want)
PY
echo "PASS: dp2 x global batch 8 for 4 steps, then dp4 x global batch 16 for 6, read samples [0, 128) once each, as one uninterrupted run"
