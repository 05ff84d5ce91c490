#!/usr/bin/env bash
# Builds ios/build/PsiFFIFfi.xcframework, the native library of the Swift SDK for Apple
# platforms: iOS devices (arm64), the iOS simulator (arm64 + x86_64) and macOS (arm64 +
# x86_64), each a static library with the uniffi header and a module map.
#
# Runs on a Mac with Xcode (xcodebuild, lipo) and rustup. NOT RUN on the project's Linux
# machines (no Apple SDKs there): written with care, checked there by `bash -n` only.
#
# Usage: bash ios/build-xcframework.sh [--zip]
#   --zip   also write ios/build/PsiFFIFfi.xcframework.zip and print its SwiftPM checksum,
#           for a release's `.binaryTarget(url:checksum:)`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/ios/build"
targets=(aarch64-apple-ios aarch64-apple-ios-sim x86_64-apple-ios aarch64-apple-darwin x86_64-apple-darwin)

for tool in cargo rustup xcodebuild lipo; do
  command -v "$tool" >/dev/null || { echo "build-xcframework.sh: $tool not found (this script runs on a Mac with Xcode)" >&2; exit 1; }
done
rustup target add "${targets[@]}"

cd "$root/rust-core"
# The minimum OS versions of Package.swift.
export IPHONEOS_DEPLOYMENT_TARGET=15.0 MACOSX_DEPLOYMENT_TARGET=12.0
for t in "${targets[@]}"; do
  cargo build --locked --release -p psi-ffi --target "$t"
done
target="${CARGO_TARGET_DIR:-$root/rust-core/target}"

rm -rf "$out"
mkdir -p "$out/headers" "$out/ios-simulator" "$out/macos"
# The header is the committed one, which ci/swift.sh checks against uniffi-bindgen's output.
cp "$root/ios/Sources/PsiFFIFfi/PsiFFIFfi.h" "$out/headers/"
cat >"$out/headers/module.modulemap" <<'MAP'
module PsiFFIFfi {
    header "PsiFFIFfi.h"
    export *
}
MAP
lipo -create "$target/aarch64-apple-ios-sim/release/libpsi_ffi.a" "$target/x86_64-apple-ios/release/libpsi_ffi.a" \
  -output "$out/ios-simulator/libpsi_ffi.a"
lipo -create "$target/aarch64-apple-darwin/release/libpsi_ffi.a" "$target/x86_64-apple-darwin/release/libpsi_ffi.a" \
  -output "$out/macos/libpsi_ffi.a"
xcodebuild -create-xcframework \
  -library "$target/aarch64-apple-ios/release/libpsi_ffi.a" -headers "$out/headers" \
  -library "$out/ios-simulator/libpsi_ffi.a" -headers "$out/headers" \
  -library "$out/macos/libpsi_ffi.a" -headers "$out/headers" \
  -output "$out/PsiFFIFfi.xcframework"
echo "build-xcframework.sh: wrote $out/PsiFFIFfi.xcframework"
for lib in "$target/aarch64-apple-ios/release/libpsi_ffi.a" "$out/ios-simulator/libpsi_ffi.a" "$out/macos/libpsi_ffi.a"; do
  cp "$lib" "$out/stripped.a" && strip -S "$out/stripped.a" && echo "  $(basename "$(dirname "$lib")"): $(wc -c <"$out/stripped.a") bytes stripped"
done
rm -f "$out/stripped.a"

if [ "${1:-}" = --zip ]; then
  (cd "$out" && rm -f PsiFFIFfi.xcframework.zip && zip -qry PsiFFIFfi.xcframework.zip PsiFFIFfi.xcframework)
  echo "checksum: $(cd "$root" && swift package compute-checksum "$out/PsiFFIFfi.xcframework.zip")"
fi
