#!/usr/bin/env bash
# Sets up if needed (packages, build, default data), then runs every test with ctest.
#   bash scripts/test.sh [extra ctest args, e.g. -R Config]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
BUILD="${GF_BUILD_DIR:-$ROOT/build}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$BUILD"
ctest --output-on-failure -j "${GF_TEST_JOBS:-2}" "$@"
