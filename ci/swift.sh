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
# they must be exactly what uniffi-bindgen makes of this library (ci/swift-bindings.sh,
# which also runs on machines without Swift).
if [ "$regenerate" = 1 ]; then
  bash "$root/ci/swift-bindings.sh" --regenerate
else
  bash "$root/ci/swift-bindings.sh"
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
# Bounded: the suite takes about a minute; a hang fails after 20 minutes. `timeout` puts
# itself and the tests in a process group of their own (its id is timeout's process id);
# the tests stop the servers they start, but a test process killed by the timeout cannot,
# so on exit whatever is left of that group (a `psi serve` of theirs) is stopped by that
# id. Never by name or pattern: other checkouts' and CI runs' servers share the machine.
PSI_BIN="$target/$profile/psi" PSI_SWIFT_SAMPLE="$bin/psi-swift-sample" \
  timeout 1200 swift test --skip-build "${swift_flags[@]}" "$@" &
tests=$!
trap 'kill -- "-$tests" 2>/dev/null || true' EXIT
wait "$tests"
