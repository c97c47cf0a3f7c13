#!/usr/bin/env bash
# One command from a fresh machine to a trained tiny GPT-2: installs, builds, prepares the default
# corpus, then trains configs/gpt2/run_gpt2_tiny.yaml on it. Extra arguments go to `train`,
# e.g.  bash scripts/quickstart.sh --set runner_config.train_steps=50
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "${GF_BUILD_DIR:-$ROOT/build}/bin/gridformer" train --config configs/gpt2/run_gpt2_tiny.yaml "$@"
