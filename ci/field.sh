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
psi_setup_rust
target="${CARGO_TARGET_DIR:-$root/rust-core/target}"
work="${PSI_FIELD_WORK:-$target/field-work}"
field="$root/tests/field/field.py"

# Where the field tests cannot run (not root, or no network namespaces / tbf in this
# kernel or container), they are skipped with a message, or fail with PSI_FIELD_REQUIRED=1
# (.ci/run sets it: the CI machine can run them).
skip() {
  if [ "${PSI_FIELD_REQUIRED:-}" = 1 ]; then
    echo "ci/field.sh: FAILED: $1 (PSI_FIELD_REQUIRED=1)" >&2
    exit 1
  fi
  echo "ci/field.sh: SKIPPED: $1" >&2
  exit 0
}
if [ "$mode" != report ]; then
  [ "$(id -u)" = 0 ] || skip "the field tests need root (network namespaces, tc)"
  if ! need ip || ! need tc || ! need curl; then
    apt_install "iproute2 and curl are needed for the field tests (ci/field.sh)." iproute2 curl
  fi
  # Probe what the harness needs: a namespace, a veth pair in it, a tbf qdisc.
  probe="psi-field-probe-$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    skip "cannot create network namespaces here"
  fi
  if ! { ip -n "$probe" link add pfp0 type veth peer name pfp1 &&
    ip netns exec "$probe" tc qdisc add dev pfp0 root tbf rate 1mbit burst 32kbit latency 50ms; } 2>/dev/null; then
    ip netns del "$probe" 2>/dev/null || true
    skip "no veth or tbf in this kernel"
  fi
  ip netns del "$probe"
  source "$root/ci/lib/toxiproxy.sh"
  psi_toxiproxy "$root"
fi
python3 "$field" cleanup # namespaces of harnesses killed earlier (SIGKILL skips their cleanup)

case "$mode" in
smoke)
  python3 "$root/tests/field/test_field.py" # the harness's own unit tests (no namespaces)
  (cd "$root/rust-core" && cargo build --quiet --locked -p psi-cli)
  out="$(mktemp "${TMPDIR:-/tmp}/psi-field-smoke.XXXXXX.json")"
  # The results stay for inspection when the check fails.
  # Bounded: 120 s per run, no run starts after 10 minutes.
  python3 "$field" run --psi "$target/debug/psi" --toxiproxy "$PSI_TOXIPROXY" --work "$work" \
    --cells smoke --run-timeout 120 --max-minutes 10 --out "$out" "$@"
  python3 "$field" table "$out"
  python3 "$field" check "$out" || { echo "ci/field.sh: results kept in $out" >&2; exit 1; }
  rm -f "$out"
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
