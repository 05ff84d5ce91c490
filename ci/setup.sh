#!/usr/bin/env bash
# Checks (and where possible installs) what building and testing the SDK needs.
# Sourced by ci/test.sh and ci/demo.sh; safe to run again.
set -euo pipefail

need() { command -v "$1" >/dev/null 2>&1; }

# apt_install WHY PACKAGE...: installs Debian packages, or stops with WHY where there is no apt-get.
apt_install() {
  local why="$1"
  shift
  if need apt-get; then
    apt-get update -qq && apt-get install -y -qq "$@" >/dev/null
  else
    echo "ci/setup.sh: $why" >&2
    exit 1
  fi
}

# Rust: the machine image ships rustup with a stable toolchain. rustup's own download
# server is not reachable from this workplace, so we can only use what is there.
if ! need cargo && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! need cargo; then
  echo "ci/setup.sh: cargo not found. Install Rust (https://rustup.rs) 1.88 or newer." >&2
  exit 1
fi
rust_minor="$(rustc --version | sed -E 's/^rustc 1\.([0-9]+).*/\1/')"
if [ "$rust_minor" -lt 88 ]; then
  echo "ci/setup.sh: Rust 1.88 or newer is needed ($(rustc --version))." >&2
  exit 1
fi
if need rustup; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" ||
      rustup component add "$c" || echo "ci/setup.sh: could not add $c" >&2
  done
fi

# A C compiler and make build the bundled libsodium used as a test oracle.
if ! need cc || ! need make; then
  apt_install "a C compiler and make are needed (libsodium test oracle)." build-essential
fi

# The JVM SDK: a JDK 17+ and Maven (Debian packages); Maven fetches the rest from Maven Central.
if ! need java || ! need mvn; then
  apt_install "a JDK 17+ and Maven are needed for the Kotlin SDK." openjdk-17-jdk-headless maven
fi
java_major="$(java -XshowSettings:properties -version 2>&1 | sed -nE 's/^ *java\.specification\.version = ([0-9]+).*/\1/p')"
if [ "${java_major:-0}" -lt 17 ]; then
  echo "ci/setup.sh: the Kotlin SDK needs a JDK 17 or newer (found ${java_major:-none})." >&2
  exit 1
fi

# Fuzzing (ci/fuzz.sh): libFuzzer needs a nightly toolchain (installed beside stable on
# this machine image; rustup's server is not reachable, so it cannot be added here) and
# cargo-fuzz (from crates.io).
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "ci/setup.sh: the fuzz smoke run needs a nightly toolchain ('cargo +nightly' failed): rustup toolchain install nightly" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
# --- schemathesis (ci/schemathesis.sh): python3 with venv and pip, for a pinned virtualenv.
if ! need python3 || ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  apt_install "python3 with venv is needed for the API fuzz test (ci/schemathesis.sh)." python3 python3-venv
fi
# --- end schemathesis
