#!/usr/bin/env bash
# Fuzz targets of rust-core/fuzz (cargo fuzz, libFuzzer; needs `cargo +nightly` and
# cargo-fuzz, see ci/setup.sh). Usage:
#   bash ci/fuzz.sh smoke [TARGET...]   build every target, run each 5 s on its corpus (CI)
#   bash ci/fuzz.sh long  [TARGET...]   run each for FUZZ_SECONDS (default 60) seconds
#   FUZZ_RUNS=10000000 bash ci/fuzz.sh long wire_frame   stop after N executions instead
# Exits non-zero if a target does not build or finds a crash (its input is then in
# rust-core/fuzz/artifacts/<target>/). New corpus entries go to a scratch directory;
# the committed seeds in rust-core/fuzz/corpus/ are only read. Build output goes to
# FUZZ_TARGET_DIR (default rust-core/fuzz/target, gitignored).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mode="${1:-smoke}"
shift || true
source "$root/ci/setup.sh"
psi_setup_rust
cd "$root/rust-core"
target_dir="${FUZZ_TARGET_DIR:-$root/rust-core/fuzz/target}"
if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo +nightly fuzz list)
fi
case "$mode" in
  smoke) seconds=5 ;;
  long) seconds="${FUZZ_SECONDS:-60}" ;;
  *) echo "usage: ci/fuzz.sh smoke|long [TARGET...]" >&2; exit 2 ;;
esac
limit=(-max_total_time="$seconds")
if [ -n "${FUZZ_RUNS:-}" ]; then
  limit=(-runs="$FUZZ_RUNS")
fi
cargo +nightly fuzz build --target-dir "$target_dir"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t"
  echo "== fuzz $t ($mode: ${limit[*]})"
  # -rss_limit_mb: a message may make a target allocate; more than 2 GB is a finding.
  if ! cargo +nightly fuzz run --target-dir "$target_dir" "$t" "$scratch/$t" "fuzz/corpus/$t" -- \
    "${limit[@]}" -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 >"$scratch/$t.log" 2>&1; then
    tail -n 60 "$scratch/$t.log" >&2
    echo "ci/fuzz.sh: $t failed (crash input in rust-core/fuzz/artifacts/$t/)" >&2
    exit 1
  fi
  # The last coverage line (features and edges reached) and the final statistics.
  grep -E 'cov: [0-9]+ ft: [0-9]+' "$scratch/$t.log" | tail -n 1
  grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec)' "$scratch/$t.log"
done
echo "ci/fuzz.sh: ${#targets[@]} targets, $mode run, no crash"
