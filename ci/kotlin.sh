#!/usr/bin/env bash
# Builds the native library and the Kotlin bindings, then builds and tests the JVM SDK
# (desktop/), compiles the Android library's Kotlin against the Android 14 API jar
# (android/), builds and tests the desktop sample app (sample-apps/desktop) and the Android
# sample app's Kotlin (sample-apps/android, Robolectric), then builds a Kotlin 2.0 app
# against the installed jar and runs it against a real server (ci/kotlin-consumer.sh).
# Usage: bash ci/kotlin.sh [extra Maven arguments]   (PSI_PROFILE=release for a release library)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/ci/setup.sh"
psi_setup_rust
psi_setup_java
profile="${PSI_PROFILE:-debug}"
cargo_flags=(--locked)
[ "$profile" = release ] && cargo_flags+=(--release)

cd "$root/rust-core"
# The native library, and the psi command the tests start as a real server.
# Two builds: built together, psi-cli would switch on psi-client's ureq transport (feature
# unification) in the library too. The desktop JVM's library carries it on purpose, behind
# the opt-in native transport (feature native-http, ADR 0049); the Android and Swift
# libraries are built without it (the platform is their transport).
cargo build "${cargo_flags[@]}" -p psi-ffi --features native-http
cargo build "${cargo_flags[@]}" -p psi-cli
# The generator's output does not depend on the profile: build it once, unoptimized.
cargo build --locked -p uniffi-bindgen
target="${CARGO_TARGET_DIR:-$root/rust-core/target}"
lib="$target/$profile/libpsi_ffi.so"

# The bindings are generated from the library itself (uniffi library mode), so the two
# always agree; they are not committed.
rm -rf "$root/bindings/kotlin/generated"
"$target/debug/uniffi-bindgen" generate --library "$lib" \
  --language kotlin --out-dir "$root/bindings/kotlin/generated" --no-format >/dev/null

# The native library as a JNA resource of the desktop jar (stripped: no debug info), in
# JNA's folder for this platform.
case "$(uname -m)" in
  x86_64) jna_platform=linux-x86-64 ;;
  aarch64) jna_platform=linux-aarch64 ;;
  *) echo "ci/kotlin.sh: no JNA platform name for $(uname -m)" >&2; exit 1 ;;
esac
native="$root/desktop/native/$jna_platform"
mkdir -p "$native"
cp "$lib" "$native/libpsi_ffi.so"
strip --strip-unneeded "$native/libpsi_ffi.so"

# Kotlin Multiplatform without Gradle: kotlinc takes each file with the fragment
# (source set) it belongs to: common <- jvm (JVM and Android) <- android.
fragment() { find "$2" -name '*.kt' | sort | sed "s|^|$1:|" | paste -sd, -; }
common="$(fragment common "$root/bindings/kotlin/src/commonMain")"
jvm="$(fragment jvm "$root/bindings/kotlin/src/jvmAndroidMain"),$(fragment jvm "$root/bindings/kotlin/generated")"
android="$(fragment android "$root/android/src/androidMain")"

cd "$root"
mvn -B -q -Dsdk.fragments.jvm="$common,$jvm" -Dsdk.fragments.android="$common,$jvm,$android" -Dpsi.bin="$target/$profile/psi" install "$@"

# An app on Kotlin 2.0 (the oldest supported) built against the SDK just installed, run
# against a real psi serve (bindings/kotlin/README.md, "Kotlin versions"). Full builds only:
# extra Maven arguments (-pl, -DskipTests) build a part.
if [ $# -eq 0 ]; then
  bash "$root/ci/kotlin-consumer.sh" "$target/$profile/psi"
fi
