#!/usr/bin/env bash
# Runs every test suite this machine can run, then prints a table of the suites: each
# passed, failed, or not available here (with the reason). Usage: bash ci/test.sh
#
# Which suites are required (README.md, "Which machines run what"): Rust always; Swift where
# a Swift toolchain is installed; Kotlin where Maven's repository answers; the field tests
# where root, network namespaces and Go (with its module proxy) are there; the fuzz smoke
# where a nightly toolchain and the crate registry are; schemathesis where PyPI answers. A
# suite whose requirements are met is run, and the run fails if it fails. PSI_CI_LINTS=1
# (set by .ci/run) adds rustfmt and clippy, each where its component is installed.
# PSI_SUITES=rust,swift runs only the named suites (for development).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/ci/setup.sh"
psi_setup_rust || exit 1
psi_setup_cc || exit 1

names=()
states=()
notes=()
failed=0
record() { names+=("$1"); states+=("$2"); notes+=("$3"); }

wanted() { [ -z "${PSI_SUITES:-}" ] || [[ ",$PSI_SUITES," == *",$1,"* ]]; }

# suite NAME AVAILABILITY-FUNCTION|- COMMAND...: runs COMMAND where the suite is available.
suite() {
  local name="$1" avail="$2"
  shift 2
  wanted "$name" || return 0
  local why=""
  if [ "$avail" != - ]; then
    why="$("$avail" 2>/dev/null)" || {
      record "$name" "not available here" "${why:-not available}"
      echo "=== $name: not available here: ${why:-not available}"
      return 0
    }
  fi
  echo "=== $name: running"
  local start=$SECONDS
  if ( set -e; "$@" ); then
    record "$name" "passed" "$((SECONDS - start)) s"
  else
    record "$name" "failed" "$((SECONDS - start)) s; see the output above"
    failed=$((failed + 1))
  fi
}

# The Rust tests start their own PostgreSQL and nginx on loopback (rust-core/test-support).
rust_tests() {
  psi_setup_postgres
  psi_setup_nginx
  cd "$root/rust-core" && cargo test --workspace --locked --no-fail-fast
}
rustfmt_check() { cd "$root/rust-core" && cargo fmt --all -- --check; }
clippy_check() { cd "$root/rust-core" && cargo clippy --workspace --all-targets --locked -- -D warnings; }
rustfmt_available() { psi_component_available rustfmt; }
clippy_available() { psi_component_available clippy; }

suite rust - rust_tests
# The committed Swift bindings equal uniffi-bindgen's output (Rust only: every machine).
suite swift-bindings - bash "$root/ci/swift-bindings.sh"
# The Swift SDK against the real native library and a real server (ci/swift.sh).
suite swift psi_swift_available bash "$root/ci/swift.sh"
# The Kotlin SDK against the real native library and a real server; the Android Kotlin
# compiled against the Android API; the desktop sample app.
suite kotlin psi_kotlin_available bash "$root/ci/kotlin.sh"
# docs/openapi.json against a real psi serve on loopback, about 2 minutes.
suite schemathesis psi_python_venv_available env ST_MAX_EXAMPLES=30 ST_MAX_TIME=90 bash "$root/ci/schemathesis.sh"
# Two cells on emulated links (namespaces, tbf, Toxiproxy), about a minute: docs/field-tests.md.
suite field psi_field_available env PSI_FIELD_REQUIRED=1 bash "$root/ci/field.sh" smoke
# Every fuzz target builds and runs 5 s on its seed corpus (docs/reliability/fuzzing.md).
suite fuzz psi_fuzz_available bash "$root/ci/fuzz.sh" smoke
if [ "${PSI_CI_LINTS:-}" = 1 ]; then
  suite rustfmt rustfmt_available rustfmt_check
  suite clippy clippy_available clippy_check
fi

passed=0
skipped=0
echo
echo "| suite | result | note |"
echo "|---|---|---|"
for i in "${!names[@]}"; do
  echo "| ${names[$i]} | ${states[$i]} | ${notes[$i]} |"
  case "${states[$i]}" in
    passed) passed=$((passed + 1)) ;;
    "not available here") skipped=$((skipped + 1)) ;;
  esac
done
echo
echo "suites: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
