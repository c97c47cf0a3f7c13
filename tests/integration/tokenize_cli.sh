#!/usr/bin/env bash
# `gridformer tokenize` end to end: the real GPT-2 vocabulary, ids per input line, --decode back.
set -euo pipefail
BUILD="$1"; SRC="$2"
V="$SRC/data/gpt2/gpt2-vocab.json"; M="$SRC/data/gpt2/gpt2-merges.txt"
[ -f "$V" ] && [ -f "$M" ] || { echo "FAIL: $V missing: run scripts/setup.sh"; exit 1; }
out="$(printf 'Hello world\n\nIt'"'"'s 2024!\n' | "$BUILD/bin/gridformer" tokenize --vocab-file "$V" --merge-file "$M")"
expected=$'15496 995\n\n1026 338 48609 0'
[ "$out" = "$expected" ] || { echo "FAIL: got [$out], expected [$expected]"; exit 1; }
back="$(printf '%s\n' "$out" | "$BUILD/bin/gridformer" tokenize --decode --vocab-file "$V" --merge-file "$M")"
[ "$back" = $'Hello world\n\nIt\'s 2024!' ] || { echo "FAIL: decode gave [$back]"; exit 1; }
echo "tokenize_cli: ok"
