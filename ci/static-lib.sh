#!/usr/bin/env bash
# The native library as an app on Linux links it: libpsi_ffi.a alone in a folder of its own
# (with the .so beside it, a linker given `-L` takes the .so, and the app then fails at
# launch without an rpath). Works offline: ci/setup.sh points cargo at the vendored crates
# where the registry does not answer (ADR 0030).
# Usage: bash ci/static-lib.sh [--debug] [OUT_DIR]
#   default OUT_DIR: rust-core/target/psi-ffi-static/<profile>; prints the folder's path.
# Then, e.g.: swift build -Xlinker -L"$(bash ci/static-lib.sh)"
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/ci/setup.sh"
psi_setup_rust >&2
profile=release
if [ "${1:-}" = --debug ]; then
  profile=debug
  shift
fi
cargo_flags=(--locked)
[ "$profile" = release ] && cargo_flags+=(--release)
target="${CARGO_TARGET_DIR:-$root/rust-core/target}"
out="${1:-$target/psi-ffi-static/$profile}"
(cd "$root/rust-core" && cargo build "${cargo_flags[@]}" -p psi-ffi >&2)
mkdir -p "$out"
rm -f "$out"/libpsi_ffi.so
cp "$target/$profile/libpsi_ffi.a" "$out/libpsi_ffi.a"
cd "$out" && pwd
