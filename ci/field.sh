#!/usr/bin/env bash
# Field tests (docs/field-tests.md): the real `psi serve` and `psi match` in two network
# namespaces joined by a veth pair, tbf for the rates, Toxiproxy for the latency.
# Needs root (network namespaces). Usage:
#   bash ci/field.sh smoke          two cells (one balanced, one unbalanced), every protocol
#                                   forced and auto if psi accepts it; asserts the results
#   bash ci/field.sh grid [OPTS]    the full grid with the release build; results into
#                                   tests/field/results/latest.json, then the table and pictures
#   bash ci/field.sh report         the table and the pictures from tests/field/results/latest.json
# OPTS go to `tests/field/field.py run` (e.g. --cells 4g/bal-2^10,3g/unb-1e6-warm,
# --protocols dh,ot,auto, --max-minutes 60, --run-timeout 300).
#   PSI_FIELD_WORK     registries and logs (default: <target>/field-work; registries are kept)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mode="${1:-smoke}"
[ $# -gt 0 ] && shift
source "$root/ci/setup.sh"
target="${CARGO_TARGET_DIR:-$root/rust-core/target}"
work="${PSI_FIELD_WORK:-$target/field-work}"
field="$root/tests/field/field.py"

if [ "$mode" != report ] && [ "$(id -u)" != 0 ]; then
  echo "ci/field.sh: SKIPPED: the field tests need root (network namespaces, tc)." >&2
  exit 0
fi
python3 "$field" cleanup # namespaces of harnesses killed earlier (SIGKILL skips their cleanup)

case "$mode" in
smoke)
  python3 "$root/tests/field/test_field.py" # the harness's own unit tests (no namespaces)
  (cd "$root/rust-core" && cargo build --quiet --locked -p psi-cli)
  out="$(mktemp "${TMPDIR:-/tmp}/psi-field-smoke.XXXXXX.json")"
  trap 'rm -f "$out"' EXIT
  # Bounded: 120 s per run, no run starts after 10 minutes.
  python3 "$field" run --psi "$target/debug/psi" --toxiproxy "$PSI_TOXIPROXY" --work "$work" \
    --cells smoke --run-timeout 120 --max-minutes 10 --out "$out" "$@"
  python3 "$field" table "$out"
  python3 "$field" check "$out"
  ;;
grid)
  (cd "$root/rust-core" && cargo build --quiet --locked --release -p psi-cli)
  mkdir -p "$root/tests/field/results"
  python3 "$field" run --psi "$target/release/psi" --toxiproxy "$PSI_TOXIPROXY" --work "$work" \
    --cells all --out "$root/tests/field/results/latest.json" "$@"
  bash "$0" report
  ;;
report)
  bash "$root/tests/field/plot.sh" "$root/tests/field/results/latest.json"
  ;;
*)
  echo "usage: bash ci/field.sh smoke|grid|report [field.py run options]" >&2
  exit 2
  ;;
esac
