#!/usr/bin/env bash
# Runs every test of the SDK. Usage: bash ci/test.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/ci/setup.sh"
cd "$root/rust-core"
cargo test --workspace --locked
