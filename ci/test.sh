#!/usr/bin/env bash
# Runs every test of the SDK (Rust, then Kotlin/JVM). Usage: bash ci/test.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/ci/setup.sh"
cd "$root/rust-core"
cargo test --workspace --locked
# Every fuzz target builds and runs 5 s on its seed corpus (docs/reliability/fuzzing.md).
bash "$root/ci/fuzz.sh" smoke
# --- schemathesis: docs/openapi.json against a real psi serve on loopback, about 2 minutes.
ST_MAX_EXAMPLES=30 ST_MAX_TIME=90 bash "$root/ci/schemathesis.sh"
# --- end schemathesis
# --- field tests: two cells on emulated links (namespaces, tbf, Toxiproxy; needs root,
# skipped with a message otherwise), about a minute: docs/field-tests.md.
bash "$root/ci/field.sh" smoke
# --- end field tests
# The Kotlin SDK against the real native library and a real server; the Android Kotlin
# compiled against the Android API; the desktop sample app.
bash "$root/ci/kotlin.sh"
