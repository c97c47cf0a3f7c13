#!/usr/bin/env bash
# The shipped one-rank tiny configs (GPT-2, Llama, Mixtral, GPT-2 MoE) mutated 300 ways (tests/integration/config_fuzz.py: values swapped for 0, -1, +-10^12, 2^31,
# 2^63, 1e308, NaN, "", 10,000 characters, an emoji, a list or a map; keys deleted; the YAML text broken), seeded:
# every variant is answered by `config`, `plan` and a one-step `train`, none crashes or spins (num_layers 2^31 made
# plan spin for minutes), each answer is taken (0) or refused before any work (2, with an error line), and every
# value taken lies in the range docs/config_values.md gives its key (a key missing there fails too).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_vocab
need_corpus
ln -s "$SRC/data" data  # the shipped configs name ./data/fortunes/... and ./data/gpt2/...
"$PY" "$SRC/tests/integration/config_fuzz.py" "$BIN" fz --variants 300 --seed 55 --timeout 5 --values "$SRC/docs/config_values.md" \
  --configs "$SRC/configs/gpt2/run_gpt2_tiny.yaml" "$SRC/configs/llama/run_llama_tiny.yaml" \
  "$SRC/configs/moe/run_mixtral_tiny.yaml" "$SRC/configs/moe/run_gpt2_moe_tiny.yaml" || fail "a mutated config crashed, spun, answered otherwise than 0 or 2, or took a value outside docs/config_values.md"
