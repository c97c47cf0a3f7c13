#!/usr/bin/env bash
# The house's rules that a compiler does not check (docs/architecture.md):
#  1. No MPI type, call or header outside parallel/ (and the launcher, runner/launch/): the rest of the
#     product talks between ranks through parallel/'s Communicator, Request and groups.
# The rule is checked here with grep over the product's sources (tests, tools and benchmarks may use
# MPI and names freely), and the check is shown to fire on a planted violation.
set -euo pipefail
SRC="${2:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
cd "$SRC"
PRODUCT=(core models parallel engine runner)
fail=0

mpi_violations() {  # DIR...
  grep -rnE --include='*.h' --include='*.cpp' \
    '#include *<mpi\.h>|\bMPI_(Comm|Request|Status|Datatype|Op|Group|Info|Win)\b|\bMPI_[A-Z][a-z_]+ *\(|\bMPI_(COMM|REQUEST|STATUS)[A-Z_]*\b' \
    "$@" | grep -vE '^(parallel/|runner/launch/)' || true
}
v=$(mpi_violations "${PRODUCT[@]}")
if [ -n "$v" ]; then echo "FAIL: MPI outside parallel/ and runner/launch/:"; echo "$v"; fail=1; fi

# The checks fire: a planted file of each kind is found.
plant="$(mktemp -d)"; trap 'rm -rf "$plant"' EXIT
mkdir -p "$plant/runner"
printf '#include <mpi.h>\nvoid f() { MPI_Request r; MPI_Wait(&r, MPI_STATUS_IGNORE); }\n' > "$plant/runner/bad.cpp"
(cd "$plant" && [ -n "$(mpi_violations runner)" ]) || { echo "FAIL: the MPI check misses a planted violation"; fail=1; }

[ "$fail" -eq 0 ] && echo "house rules hold"
exit "$fail"
