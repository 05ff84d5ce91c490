#!/usr/bin/env bash
# The committed Swift bindings (ios/Sources/PsiFFI/PsiFFI.swift and the header
# ios/Sources/PsiFFIFfi/PsiFFIFfi.h) must be exactly what the project's uniffi-bindgen makes
# of the current native library: an app on a Mac builds them without running uniffi. Needs
# Rust only, so it runs on every machine (ci/test.sh's swift-bindings suite), not only where
# Swift is; ci/swift.sh runs it too.
# Usage: bash ci/swift-bindings.sh [--regenerate]
#   --regenerate   write the generator's output into ios/Sources instead of checking it
#   PSI_PROFILE=release   check against a release library (the output is the same)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/ci/setup.sh"
psi_setup_rust
regenerate=0
if [ "${1:-}" = --regenerate ]; then
  regenerate=1
fi
profile="${PSI_PROFILE:-debug}"
cargo_flags=(--locked)
[ "$profile" = release ] && cargo_flags+=(--release)
target="${CARGO_TARGET_DIR:-$root/rust-core/target}"

cd "$root/rust-core"
cargo build "${cargo_flags[@]}" -p psi-ffi
cargo build --locked -p uniffi-bindgen

gen="$(mktemp -d)"
trap 'rm -rf "$gen"' EXIT
"$target/debug/uniffi-bindgen" generate --library "$target/$profile/libpsi_ffi.so" \
  --language swift --out-dir "$gen" --no-format >/dev/null
committed_swift="$root/ios/Sources/PsiFFI/PsiFFI.swift"
committed_header="$root/ios/Sources/PsiFFIFfi/PsiFFIFfi.h"
if [ "$regenerate" = 1 ]; then
  cp "$gen/PsiFFI.swift" "$committed_swift"
  cp "$gen/PsiFFIFfi.h" "$committed_header"
  echo "ci/swift-bindings.sh: wrote $committed_swift and $committed_header"
elif ! diff -u "$committed_swift" "$gen/PsiFFI.swift" >"$gen/diff" ||
  ! diff -u "$committed_header" "$gen/PsiFFIFfi.h" >>"$gen/diff"; then
  head -60 "$gen/diff" >&2
  echo "ci/swift-bindings.sh: FAILED: the committed Swift bindings differ from uniffi-bindgen's output for this library; run: bash ci/swift-bindings.sh --regenerate" >&2
  exit 1
else
  echo "ci/swift-bindings.sh: the committed Swift bindings match uniffi-bindgen's output"
fi

# The app developer's one command for the static library (ci/static-lib.sh): a folder
# holding libpsi_ffi.a and nothing else (checked on the debug library just built).
lib_dir="$(bash "$root/ci/static-lib.sh" --debug "$gen/static")"
[ "$(ls "$lib_dir")" = libpsi_ffi.a ] || {
  echo "ci/swift-bindings.sh: FAILED: ci/static-lib.sh left $(ls "$lib_dir" | tr '\n' ' ')in $lib_dir" >&2
  exit 1
}
echo "ci/swift-bindings.sh: ci/static-lib.sh gives a folder holding only libpsi_ffi.a"

