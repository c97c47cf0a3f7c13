# Sourced by the bench/device_*.sh scripts: unpacks the bundle of our binaries
# (../shared/tools/device-bundle/make_bundle.sh) into a temporary directory and sets up its runtime.
#   BUNDLE=path/to/bundle.tar.xz; . bench/device_unpack.sh
# After it: B (the unpacked bundle; its env.sh sourced: Open MPI relocated, PATH), BLD (the bundle's
# library path, kept out of LD_LIBRARY_PATH so that python3 does not load its older libraries), and
#   device_wrap DIR "ENV=V ..." TOOL...   DIR/TOOL: runs the bundle's bin/TOOL with its libraries
#   device_wrap_mpirun DIR                DIR/mpirun: the bundle's mpirun with its libraries
X="$(mktemp -d)"
tar -xJf "$BUNDLE" -C "$X"
export B="$X/bundle"
. "$B/env.sh"
BLD="${LD_LIBRARY_PATH:-}"; unset LD_LIBRARY_PATH

device_wrap() {
  local dir="$1" env="$2" t; shift 2
  mkdir -p "$dir"
  for t in "$@"; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s %s exec %s/bin/%s "$@"\n' "$BLD" "$env" "$B" "$t" > "$dir/$t"
    chmod +x "$dir/$t"
  done
}

device_wrap_mpirun() {
  mkdir -p "$1"
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$BLD" "$(PATH="$B/usr/bin:$B/bin:$PATH" command -v mpirun)" \
    > "$1/mpirun"
  chmod +x "$1/mpirun"
}
