#!/usr/bin/env bash
# The Swift SDK (Package.swift, ios/): builds the native library with cargo, checks that the
# committed generated bindings are what uniffi-bindgen makes of the current library, builds
# the package (the public wrapper in Swift 6 mode with warnings as errors) and runs its tests
# against the real native library and a real `psi serve` on loopback.
# Usage: bash ci/swift.sh [--regenerate] [extra `swift test` arguments, e.g. --filter Transport]
#   --regenerate     write the generated bindings into ios/Sources instead of checking them
#   PSI_PROFILE=release   a release native library and server (default debug)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/ci/setup.sh"
psi_setup_rust
psi_setup_swift || { echo "ci/swift.sh: no Swift toolchain (swift)" >&2; exit 1; }
regenerate=0
if [ "${1:-}" = --regenerate ]; then
  regenerate=1
  shift
fi
profile="${PSI_PROFILE:-debug}"
cargo_flags=(--locked)
[ "$profile" = release ] && cargo_flags+=(--release)
target="${CARGO_TARGET_DIR:-$root/rust-core/target}"

cd "$root/rust-core"
# Two builds, as for Kotlin: built together, psi-cli would switch on psi-client's own HTTP
# transport in the library (feature unification); the platform is the library's transport.
cargo build "${cargo_flags[@]}" -p psi-ffi
cargo build "${cargo_flags[@]}" -p psi-cli
cargo build --locked -p uniffi-bindgen

# The generated bindings are committed (an app on a Mac builds without running uniffi):
# they must be exactly what uniffi-bindgen makes of this library.
gen="$(mktemp -d)"
# The tests stop the servers they start; a test process killed by the timeout cannot, so
# whatever `psi serve` of theirs is left (their databases are in psi-swift-test-* folders)
# is stopped on exit.
stop_test_servers() { pkill -f -- "--db [^ ]*psi-swift-test-" 2>/dev/null || true; }
trap 'stop_test_servers; rm -rf "$gen"' EXIT
"$target/debug/uniffi-bindgen" generate --library "$target/$profile/libpsi_ffi.so" \
  --language swift --out-dir "$gen" --no-format >/dev/null
committed_swift="$root/ios/Sources/PsiFFI/PsiFFI.swift"
committed_header="$root/ios/Sources/PsiFFIFfi/PsiFFIFfi.h"
if [ "$regenerate" = 1 ]; then
  cp "$gen/PsiFFI.swift" "$committed_swift"
  cp "$gen/PsiFFIFfi.h" "$committed_header"
  echo "ci/swift.sh: wrote $committed_swift and $committed_header"
elif ! diff -u "$committed_swift" "$gen/PsiFFI.swift" >"$gen/diff" ||
  ! diff -u "$committed_header" "$gen/PsiFFIFfi.h" >>"$gen/diff"; then
  head -60 "$gen/diff" >&2
  echo "ci/swift.sh: FAILED: the committed Swift bindings differ from uniffi-bindgen's output for this library; run: bash ci/swift.sh --regenerate" >&2
  exit 1
else
  echo "ci/swift.sh: the committed Swift bindings match uniffi-bindgen's output"
fi

# The linker gets a folder holding only the static library (with the .so beside it, the
# linker would take the .so, which then needs an rpath).
link="$target/swift-link/$profile"
mkdir -p "$link"
cp "$target/$profile/libpsi_ffi.a" "$link/libpsi_ffi.a"

cd "$root"
swift_flags=(-Xlinker "-L$link")
[ "$profile" = release ] && swift_flags+=(-c release)
swift build --build-tests "${swift_flags[@]}"
bin="$(swift build "${swift_flags[@]}" --show-bin-path)"
# Bounded: the suite takes about a minute; a hang fails after 20 minutes.
PSI_BIN="$target/$profile/psi" PSI_SWIFT_SAMPLE="$bin/psi-swift-sample" \
  timeout 1200 swift test --skip-build "${swift_flags[@]}" "$@"
