#!/usr/bin/env bash
# Setup per suite: sourced by the ci/ scripts, each of which calls only what it uses
# (`psi_setup_rust` for the demo; `psi_setup_java` for the Kotlin SDK, ...). Sourcing
# installs nothing. Each `psi_*_available` function decides whether a suite can run on this
# machine: it returns 0, or prints the reason on stdout and returns 1. Safe to source again.

need() { command -v "$1" >/dev/null 2>&1; }

# apt_install WHY PACKAGE...: installs Debian packages, or stops with WHY where there is no apt-get.
apt_install() {
  local why="$1"
  shift
  if need apt-get; then
    apt-get update -qq && apt-get install -y -qq "$@" >/dev/null
  else
    echo "ci/setup.sh: $why" >&2
    return 1
  fi
}

psi_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=ci/lib/crates.sh
source "$psi_root/ci/lib/crates.sh"

# Rust (stable, 1.88+) and the source of the crates (the registry, or ../shared/vendor
# where the registry does not answer: ci/lib/crates.sh). Chosen once per run.
psi_setup_rust() {
  if ! need cargo && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
  if ! need cargo; then
    echo "ci/setup.sh: cargo not found. Install Rust (rustup) 1.88 or newer." >&2
    return 1
  fi
  local rust_minor
  rust_minor="$(rustc --version | sed -E 's/^rustc 1\.([0-9]+).*/\1/')"
  if [ "$rust_minor" -lt 88 ]; then
    echo "ci/setup.sh: Rust 1.88 or newer is needed ($(rustc --version))." >&2
    return 1
  fi
  if [ "${PSI_CRATES_CHOSEN:-}" != "$psi_root" ]; then
    psi_crates_choose "$psi_root" || return 1
    export PSI_CRATES_CHOSEN="$psi_root"
  fi
}

# A C compiler and make: the bundled libsodium that the Rust tests use as an oracle.
psi_setup_cc() {
  if ! need cc || ! need make; then
    apt_install "a C compiler and make are needed (libsodium test oracle)." build-essential || return 1
  fi
}

# PostgreSQL server binaries (initdb, pg_ctl, postgres, psql): the Rust tests start their own
# throwaway cluster on loopback (rust-core/test-support), never the package's service, so a
# cluster that Debian's package may start on 5432 is neither needed nor touched. Exports
# PSI_PG_BIN, the directory the tests take them from (the newest /usr/lib/postgresql/*/bin).
psi_pg_bin_find() {
  if [ -n "${PSI_PG_BIN:-}" ] && [ -x "$PSI_PG_BIN/initdb" ]; then
    echo "$PSI_PG_BIN"
    return 0
  fi
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5,5n | tail -1)"
  if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
    echo "$d"
    return 0
  fi
  need initdb && need pg_ctl && dirname "$(command -v initdb)"
}
psi_setup_postgres() {
  local bin
  if ! bin="$(psi_pg_bin_find)"; then
    apt_install "PostgreSQL (initdb, pg_ctl) is needed for the Rust tests of the shared store." postgresql || return 1
    bin="$(psi_pg_bin_find)" || {
      echo "ci/setup.sh: PostgreSQL installed, but no initdb found in /usr/lib/postgresql/*/bin." >&2
      return 1
    }
  fi
  export PSI_PG_BIN="$bin"
}

# nginx: the load balancer in front of several `psi serve` in the Rust tests, which start
# their own on loopback (rust-core/test-support). Debian 12 has `nginx`; older releases
# also `nginx-light`.
psi_setup_nginx() {
  if need nginx || [ -x /usr/sbin/nginx ]; then
    return 0
  fi
  apt_install "nginx is needed for the Rust tests of several servers behind a load balancer." nginx ||
    apt_install "nginx is needed for the Rust tests of several servers behind a load balancer." nginx-light ||
    return 1
}

# rustfmt / clippy: whether the component is installed (rustup cannot download here).
psi_component_available() {
  local c="$1"
  if need rustup && ! rustup component list --installed 2>/dev/null | grep -q "^$c"; then
    rustup component add "$c" >/dev/null 2>&1 || true
  fi
  case "$c" in
    rustfmt) cargo fmt --version >/dev/null 2>&1 || { echo "the rustfmt component is not installed"; return 1; } ;;
    clippy) cargo clippy --version >/dev/null 2>&1 || { echo "the clippy component is not installed"; return 1; } ;;
  esac
}

# The JVM SDK: a JDK 17+ and Maven (Debian packages); Maven fetches the rest from Maven Central.
psi_setup_java() {
  if ! need java || ! need mvn; then
    apt_install "a JDK 17+ and Maven are needed for the Kotlin SDK." openjdk-17-jdk-headless maven || return 1
  fi
  local java_major
  java_major="$(java -XshowSettings:properties -version 2>&1 | sed -nE 's/^ *java\.specification\.version = ([0-9]+).*/\1/p')"
  if [ "${java_major:-0}" -lt 17 ]; then
    echo "ci/setup.sh: the Kotlin SDK needs a JDK 17 or newer (found ${java_major:-none})." >&2
    return 1
  fi
}

# Kotlin runs where Maven's default repository answers: asked for a small plugin that the
# build needs anyway (Maven names the repository; nothing here does).
psi_kotlin_available() {
  psi_setup_java >/dev/null 2>&1 || { echo "no JDK 17+ and Maven"; return 1; }
  if ! timeout 120 mvn -B -q org.apache.maven.plugins:maven-help-plugin:3.4.0:help >/dev/null 2>&1; then
    echo "Maven's default repository does not answer (Kotlin, kotlinx and OkHttp come from there)"
    return 1
  fi
}

# Swift: the toolchain (on PATH, or the machine image's /opt/swift).
psi_setup_swift() {
  if ! need swift && [ -x /opt/swift/usr/bin/swift ]; then
    export PATH="/opt/swift/usr/bin:$PATH"
  fi
  need swift
}
psi_swift_available() {
  psi_setup_swift || { echo "no Swift toolchain (swift) on this machine"; return 1; }
}

# Fuzzing: a nightly toolchain, cargo-fuzz, and the fuzz crate's own dependencies
# (libfuzzer-sys, arbitrary), which are not in the vendored copy: so the crate registry.
psi_fuzz_available() {
  if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "no nightly Rust toolchain ('cargo +nightly' failed)"
    return 1
  fi
  if psi_crates_vendored "$psi_root"; then
    echo "the crate registry does not answer (cargo-fuzz and libfuzzer-sys are not vendored)"
    return 1
  fi
  if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked >/dev/null 2>&1 || { echo "cargo-fuzz could not be installed"; return 1; }
  fi
}

# schemathesis comes from PyPI into a virtualenv (python3 with venv: Debian python3-venv).
psi_python_venv_available() {
  if ! need python3 || ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    apt_install "python3 with venv is needed for the API fuzz test (ci/schemathesis.sh)." python3 python3-venv >/dev/null 2>&1 ||
      { echo "no python3 with venv"; return 1; }
  fi
  if ! timeout 120 python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$(mktemp -d)" "six==1.16.0" >/dev/null 2>&1; then
    echo "PyPI does not answer (schemathesis comes from there)"
    return 1
  fi
}

# The field tests: root, network namespaces with veth and tbf, and Toxiproxy (built once
# with Go from the Go module proxy, or already built).
psi_field_available() {
  [ "$(id -u)" = 0 ] || { echo "the field tests need root (network namespaces, tc)"; return 1; }
  if ! need ip || ! need tc; then
    apt_install "iproute2 is needed for the field tests." iproute2 >/dev/null 2>&1 || { echo "no iproute2"; return 1; }
  fi
  local probe="psi-field-avail-$$"
  ip netns add "$probe" 2>/dev/null || { echo "cannot create network namespaces here"; return 1; }
  if ! { ip -n "$probe" link add pfa0 type veth peer name pfa1 &&
    ip netns exec "$probe" tc qdisc add dev pfa0 root tbf rate 1mbit burst 32kbit latency 50ms; } 2>/dev/null; then
    ip netns del "$probe" 2>/dev/null || true
    echo "no veth or tbf in this kernel"
    return 1
  fi
  ip netns del "$probe"
  local target="${CARGO_TARGET_DIR:-$psi_root/rust-core/target}"
  ls "$target"/field-tools/toxiproxy-*/server >/dev/null 2>&1 && return 0
  local go_bin
  go_bin="$(command -v go || true)"
  [ -z "$go_bin" ] && [ -x /usr/local/go/bin/go ] && go_bin=/usr/local/go/bin/go
  if [ -z "$go_bin" ]; then
    echo "no Go toolchain to build Toxiproxy (the latency element)"
    return 1
  fi
  local gomod
  gomod="$(mktemp -d)"
  if ! (cd "$gomod" && GOFLAGS=-mod=mod timeout 120 "$go_bin" mod download github.com/Shopify/toxiproxy/v2@v2.5.0 >/dev/null 2>&1); then
    rm -rf "$gomod"
    echo "the Go module proxy does not answer (Toxiproxy comes from there)"
    return 1
  fi
  rm -rf "$gomod"
}
