#!/usr/bin/env bash
# The house's rules that a compiler does not check (docs/architecture.md):
#  1. No MPI type, call or header outside parallel/ (and the launcher, runner/launch/): the rest of the
#     product talks between ranks through parallel/'s Communicator, Request and groups.
#  2. No registered architecture's name compared as a string outside the two registries
#     (models/registry.*, runner/config/arch_section.*) and the architectures' own files (models/arch/,
#     runner/config/arch/):
#     what differs between architectures is a field of their entries, not an `if (type == "...")`.
# Each rule is checked here with grep over the product's sources (tests, tools and benchmarks may use
# MPI and names freely), and the check is shown to fire on a planted violation.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
cd "$SRC"
PRODUCT=(core models parallel engine runner)
broken=0  # every rule is checked and reported before the exit

mpi_violations() {  # DIR...
  grep -rnE --include='*.h' --include='*.cpp' \
    '#include *<mpi\.h>|\bMPI_(Comm|Request|Status|Datatype|Op|Group|Info|Win)\b|\bMPI_[A-Z][a-z_]+ *\(|\bMPI_(COMM|REQUEST|STATUS)[A-Z_]*\b' \
    "$@" | grep -vE '^(parallel/|runner/launch/)' || true
}
v=$(mpi_violations "${PRODUCT[@]}")
if [ -n "$v" ]; then echo "FAIL: MPI outside parallel/ and runner/launch/:"; echo "$v"; broken=1; fi

# The registered names: model.arch.type and model.model_config.type of the built-in entries.
names=$(grep -hoE '\{"[A-Za-z0-9_]+", *"[A-Za-z0-9_]+Config"' models/registry.cpp | grep -oE '"[A-Za-z0-9_]+"' | sort -u | tr -d '"')
[ -n "$names" ] || fail "found no registered architecture names in models/registry.cpp"
name_violations() {  # DIR...
  local alt; alt=$(echo "$names" | paste -sd'|')
  grep -rnE --include='*.h' --include='*.cpp' "(==|!=) *\"($alt)\"|\"($alt)\" *(==|!=)|is_llama\(\)" "$@" \
    | grep -vE '^(models/registry\.|models/arch/|runner/config/arch_section\.|runner/config/arch/)' || true
}
v=$(name_violations "${PRODUCT[@]}")
if [ -n "$v" ]; then echo "FAIL: an architecture's name compared outside the registries:"; echo "$v"; broken=1; fi

# The checks fire: a planted file of each kind is found.
plant="$WORK/plant"
mkdir -p "$plant/runner"
printf '#include <mpi.h>\nvoid f() { MPI_Request r; MPI_Wait(&r, MPI_STATUS_IGNORE); }\n' > "$plant/runner/bad.cpp"
printf 'bool g(const std::string& t) { return t == "%s"; }\n' "$(echo "$names" | head -1)" > "$plant/runner/bad2.cpp"
(cd "$plant" && [ -n "$(mpi_violations runner)" ]) || { echo "FAIL: the MPI check misses a planted violation"; broken=1; }
(cd "$plant" && [ -n "$(name_violations runner)" ]) || { echo "FAIL: the name check misses a planted violation"; broken=1; }

[ "$broken" -eq 0 ] && echo "house rules hold (registered names: $(echo $names))"
exit "$broken"
