#!/usr/bin/env bash
# One rank, no mpirun and no rank table: `gridformer train --config CONFIG --set run_mode=RUN_MODE`
# in the foreground (console output as usual; the rank's log goes to <output_dir>/log/rank_0/gridformer.log).
# See docs/distributed.md.
set -uo pipefail

PROG=run_standalone.sh
usage() {
  cat >&2 <<'EOF'
usage: bash scripts/run_standalone.sh CONFIG RUN_MODE

  CONFIG    YAML config (MindFormers layout); its parallel_config must describe one rank
  RUN_MODE  train | finetune | eval (passed as --set run_mode=RUN_MODE)

environment: GRIDFORMER_BIN (default: <this script's dir>/../build/bin/gridformer).
RANK_TABLE_FILE is ignored (unset for the run): a standalone run has no rank table.
EOF
  exit "${1:-2}"
}
die() { echo "$PROG: error: $*" >&2; exit 2; }

[ $# -ge 1 ] && { [ "$1" = "-h" ] || [ "$1" = "--help" ]; } && usage 0
[ $# -eq 2 ] || { echo "$PROG: expected 2 arguments, got $#" >&2; usage; }
CONFIG=$1 RUN_MODE=$2
[ -f "$CONFIG" ] || die "CONFIG '$CONFIG' is not a file"
case "$RUN_MODE" in
  train | finetune | eval | predict) ;;
  *) die "RUN_MODE '$RUN_MODE': expected train, finetune or eval" ;;
esac
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN=${GRIDFORMER_BIN:-$HERE/../build/bin/gridformer}
[ -x "$BIN" ] || die "no gridformer binary at $BIN: build it (cmake -S . -B build && cmake --build build -j) or set GRIDFORMER_BIN"

unset RANK_TABLE_FILE
# exec: SIGINT/SIGTERM reach the runner directly, which stops between steps (status 130/143).
exec "$BIN" train --config "$CONFIG" --set run_mode="$RUN_MODE"
