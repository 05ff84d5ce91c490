#!/usr/bin/env bash
# The Swift SDK's overhead: the same match of 1,000 contacts against a 10^5-entry registry,
# from Swift (in-process time of the call with a new client, so no registry cache, after 1
# untimed call in the same process) and from `psi match` (wall time of the process, no
# cache), interleaved, 5 runs each per protocol; prints the medians and their ratios, and the
# sizes of the stripped static library (and the shared one) built here. Release builds.
# Usage: bash ci/bench-swift.sh [runs]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
runs="${1:-5}"
source "$root/ci/setup.sh"
psi_setup_rust
psi_setup_swift
target="${CARGO_TARGET_DIR:-$root/rust-core/target}"
(cd "$root/rust-core" && cargo build --quiet --locked --release -p psi-ffi && cargo build --quiet --locked --release -p psi-cli)
link="$target/swift-link/release"
mkdir -p "$link"
cp "$target/release/libpsi_ffi.a" "$link/"
(cd "$root" && swift build -c release -Xlinker "-L$link" --product psi-swift-bench >/dev/null)
bench="$(cd "$root" && swift build -c release -Xlinker "-L$link" --show-bin-path)/psi-swift-bench"
psi="$target/release/psi"
work="$(mktemp -d)"
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

source "$root/ci/lib/bench-server.sh"
psi_bench_server "$psi" "$work"

for protocol in dh ot; do
  for i in $(seq "$runs"); do
    start=$(date +%s%N)
    "$psi" match --server "$url" --protocol "$protocol" "$work/contacts.txt" >/dev/null
    echo "cli $protocol $(( ($(date +%s%N) - start) / 1000000 ))"
    "$bench" "$url" "$work/contacts.txt" "$protocol" 1 1
  done
done | tee "$work/times.txt"
echo
echo "| protocol | psi match ms | Swift ms | Swift / CLI | native run in Swift ms | Swift / native run |"
echo "|---|---:|---:|---:|---:|---:|"
ratio() { awk -v k="$1" -v c="$2" 'BEGIN { printf "%.2f", k / c }'; }
for protocol in dh ot; do
  median() { grep "^$1 $protocol " "$work/times.txt" | awk -v f="${2:-3}" '{print $f}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  c=$(median cli); s=$(median swift-1); r=$(median swift-1 7)
  echo "| $protocol | $c | $s | $(ratio "$s" "$c") | $r | $(ratio "$s" "$r") |"
done
echo "(medians of $runs runs each, interleaved)"
echo
cp "$target/release/libpsi_ffi.a" "$work/libpsi_ffi.a" && strip --strip-debug "$work/libpsi_ffi.a"
cp "$target/release/libpsi_ffi.so" "$work/libpsi_ffi.so" && strip --strip-unneeded "$work/libpsi_ffi.so"
echo "libpsi_ffi.a, x86_64-unknown-linux-gnu, release, debug info stripped: $(stat -c %s "$work/libpsi_ffi.a") bytes"
echo "libpsi_ffi.so, x86_64-unknown-linux-gnu, release, stripped: $(stat -c %s "$work/libpsi_ffi.so") bytes"
echo "psi-swift-bench executable (static native library inside), stripped: $(strip -o "$work/bench" "$bench" && stat -c %s "$work/bench") bytes"
