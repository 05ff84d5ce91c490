#!/usr/bin/env bash
# Sync mode at scale (issue 37, docs/protocol/sync.md, docs/benchmarks.md "Sync mode"): the
# first sync, a day's delta at 0.1% churn and runs of 1, 100 and 1,000 contacts at the
# registry sizes given, each measured through psi-core's real messages and printed beside
# the formula of psi_core::sync::sizes with its value at 10^8; then the example's peak RSS.
#
#   bash ci/bench-sync.sh [SIZES...]     # default 1000000 10000000 (about 1 minute, 1.6 GB)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/ci/setup.sh"
psi_setup_rust
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time)" >&2; exit 1; }
(cd "$root/rust-core" && cargo build --quiet --locked --release -p psi-core --example sync_scale)
bin="${CARGO_TARGET_DIR:-$root/rust-core/target}/release/examples/sync_scale"
echo "# bash ci/bench-sync.sh $*: $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
/usr/bin/time -v "$bin" "$@" 2>"$log"
grep -E '^R = ' "$log" || true
grep -E 'Maximum resident set size' "$log" | sed 's/^[[:space:]]*//'
