#!/usr/bin/env bash
# The Proof issue's injected faults that need no change to gridformer: the comparisons every layout test relies on
# must fail when the fault is there.
#  (a) A Llama tensor perturbed: a tiny Llama's dp2 run passes compare_runs.py against one rank; the same run with
#      element 0 of one tensor moved by the mean step's learning rate (one wrong update, as compare_runs'
#      self-check makes it) fails it, naming the tensor,
#      for every tensor kind compare_runs' self-check perturbs in a Llama (the final norm, an MLP down projection) and
#      for two it does not (an attention projection, a row of the embedding), with and without a floor probe.
#  (b) A floor probe made wrong: the GEMM-backend probe (GF_GEMM=eigen) moved past the floor's ceiling (1e-4 of
#      a tensor's scale) fails compare_runs.py --floor and floor_check.py, each naming the probe, where the true
#      probe passes; floor_check.py holds the loss and the model's L2 to 1e-5 whatever the probes say.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_corpus
CMP="$SRC/tests/integration/compare_runs.py"
FLOOR="$SRC/tests/integration/floor_check.py"
PERTURB="$SRC/tests/integration/perturb_run.py"

tiny_config llama llama.yaml
train one llama.yaml --save-weights one/weights.safetensors
mpi_train 2 dp2 llama.yaml --set parallel_config.data_parallel=2 --set runner_config.batch_size=1 \
  --save-weights dp2/weights.safetensors
GF_GEMM=eigen train eigen llama.yaml --save-weights eigen/weights.safetensors

# expect_fail NAME PATTERN CMD...: CMD must exit 1 and print PATTERN (fixed string)
expect_fail() {
  local name=$1 pattern=$2; shift 2
  run "$name" "$@"
  ((STATUS == 1)) || { cat "$name.log"; fail "$name: status $STATUS, expected 1 (the fault went unseen)"; }
  grep -qF -- "$pattern" "$name.log" || { cat "$name.log"; fail "$name: no '$pattern' in its output"; }
  ok "$name: fails: $(grep -F -- "$pattern" "$name.log" | head -1)"
}

run clean "$PY" "$CMP" one dp2
((STATUS == 0)) || { cat clean.log; fail "the unperturbed dp2 run does not pass compare_runs.py"; }
run clean_floor "$PY" "$CMP" one --floor=eigen dp2
((STATUS == 0)) || { cat clean_floor.log; fail "the unperturbed dp2 run does not pass compare_runs.py --floor"; }
ok "dp2 passes compare_runs.py against one rank, with and without the eigen floor"

# (a)
# The embedding (50257 x 256): one element's wrong update is 7.7e-6 of the tensor, under the criterion, so the fault
# there is a token's row given one wrong update (what a lost or doubled gradient of one token does).
for t in model.norm.weight model.layers.0.mlp.down_proj.weight model.layers.1.self_attn.q_proj.weight \
         model.embed_tokens.weight; do
  row=(); [ "$t" = model.embed_tokens.weight ] && row=(--row)
  "$PY" "$PERTURB" dp2 "bad_$t" "$t" lr "${row[@]}" > /dev/null
  expect_fail "perturbed.$t" "FAIL: bad_$t: $t differs" "$PY" "$CMP" one "bad_$t"
  expect_fail "perturbed_floor.$t" "FAIL: bad_$t: $t differs" "$PY" "$CMP" one --floor=eigen "bad_$t"
done

# (b) The probe moved by 2e-4 of its tensor's norm: a rounding probe never goes that far (FLOOR_CEILING 1e-4).
"$PY" "$PERTURB" eigen bad_probe model.layers.0.mlp.down_proj.weight rel:2e-4 > /dev/null
expect_fail probe_compare "FAIL: bad_probe: the probe's model.layers.0.mlp.down_proj.weight moved by" \
  "$PY" "$CMP" one --floor=bad_probe dp2
run floor_clean "$PY" "$FLOOR" train one eigen dp2
((STATUS == 0)) || { cat floor_clean.log; fail "floor_check.py does not pass dp2 on the true probe"; }
expect_fail probe_floor_check "FAIL: bad_probe: the probe's model.layers.0.mlp.down_proj.weight" \
  "$PY" "$FLOOR" train one bad_probe dp2
# The loss and model L2 are never floored: with a probe that allows the embedding 1e-4 (moved by 5e-5 of its norm,
# under the ceiling), a layout whose embedding is off by 4e-5 of its norm passes as a tensor but fails on the
# model's L2 (the embedding holds most of it).
"$PY" "$PERTURB" eigen wide_probe model.embed_tokens.weight rel:5e-5 > /dev/null
"$PY" "$PERTURB" dp2 far_l2 model.embed_tokens.weight rel:4e-5 > /dev/null
expect_fail l2_not_floored "FAIL: far_l2: model L2" "$PY" "$FLOOR" train one wide_probe far_l2
! grep -q "FAIL: far_l2: model.embed_tokens.weight" l2_not_floored.log \
  || fail "l2_not_floored: the embedding itself failed, so the model L2's own bound is not what was shown"
