#!/usr/bin/env bash
# Builds and runs `psi demo`: private contact discovery on an embedded address book.
# Usage: bash ci/demo.sh [demo options, e.g. --threads 1 --registry-size 100000]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/ci/setup.sh"
psi_setup_rust  # the demo needs Rust alone
cd "$root/rust-core"
cargo run --release --locked -p psi-cli --bin psi -- demo "$@"
