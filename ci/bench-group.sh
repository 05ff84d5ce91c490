#!/usr/bin/env bash
# Group PSI (issue 38 §2) over the real relay: `psi serve` on loopback, t phones as separate
# `psi group create` / `psi group join` processes, on loopback and on an emulated link
# (Toxiproxy: latency and bandwidth each way, per connection; tests/field/grid.json's
# networks). Release build. Prints one table per link (docs/benchmarks.md, "Group PSI").
# Usage: bash ci/bench-group.sh [links] [runs] [cells]
#   links  comma separated (default loopback,4g); cells t:log2n,... (default 2:10,...,8:12)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
links="${1:-loopback,4g}"
runs="${2:-3}"
cells="${3:-2:10,4:10,8:10,2:12,4:12,8:12}"
source "$root/ci/setup.sh"
psi_setup_rust
source "$root/ci/lib/toxiproxy.sh"
psi_toxiproxy "$root"
(cd "$root/rust-core" && cargo build --quiet --locked --release -p psi-cli)
psi="${CARGO_TARGET_DIR:-$root/rust-core/target}/release/psi"
echo "# bash ci/bench-group.sh $links $runs $cells: $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for link in ${links//,/ }; do
  echo
  python3 "$root/ci/lib/bench_group.py" --psi "$psi" --toxiproxy "$PSI_TOXIPROXY" \
    --link "$link" --runs "$runs" --cells "$cells"
done
