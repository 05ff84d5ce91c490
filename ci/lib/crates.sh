# Chooses where cargo gets crates from, once per run; sourced by ci/setup.sh.
#
# First the crate registry, as on any machine that reaches it (`cargo fetch --locked`, which
# also succeeds offline when every locked crate is already in cargo's cache). Where it does
# not answer, the vendored copy of every locked crate in ../shared/vendor (beside the
# checkout; PSI_VENDOR_DIR overrides), through a cargo config file that this script writes at
# the checkout's root (`.cargo/config.toml`, gitignored), so that every cargo command run
# under the checkout, by these scripts or by hand, uses the same source. On a machine that
# reaches the registry again, the file is removed. Cargo.lock is never changed (--locked).
# See docs/adr/0030-offline-crates.md.

psi_crates_marker="# written by ci/lib/crates.sh"

# psi_crates_vendored ROOT: true when the checkout's cargo config is ours (the vendored copy).
psi_crates_vendored() {
  [ -f "$1/.cargo/config.toml" ] && head -1 "$1/.cargo/config.toml" | grep -qF "$psi_crates_marker"
}

psi_crates_choose() {
  local root="$1"
  local conf_dir="$root/.cargo"
  local conf="$conf_dir/config.toml"
  local marker="$psi_crates_marker"
  # A config of ours from an earlier run is set aside while the registry is probed.
  if psi_crates_vendored "$root"; then
    rm -f "$conf"
  fi
  if [ -f "$conf" ]; then
    echo "ci: crates: using the cargo config $conf (not written by ci/)" >&2
    return 0
  fi
  local log
  log="$(mktemp)"
  if (cd "$root/rust-core" && CARGO_NET_RETRY=1 timeout 300 cargo fetch --locked >"$log" 2>&1); then
    echo "ci: crates: from the crate registry (or cargo's cache of it)" >&2
    rm -f "$log"
    return 0
  fi
  local vendor="${PSI_VENDOR_DIR:-$root/../shared/vendor}"
  if [ ! -d "$vendor" ]; then
    echo "ci: crates: the crate registry did not answer and there is no vendored copy at $vendor:" >&2
    tail -3 "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
  # The physical path: crates that find files relative to their own sources (askama's
  # templates in uniffi_bindgen) walk `..` through a symlinked path wrongly.
  vendor="$(cd "$vendor" && pwd -P)"
  mkdir -p "$conf_dir"
  cat >"$conf" <<CONF
$marker: the crate registry did not answer on $(date -u +%Y-%m-%dT%H:%MZ).
# Removed by the next ci/ script run on a machine that reaches the registry.
[source.crates-io]
replace-with = "psi-vendored"

[source.psi-vendored]
directory = "$vendor"

[net]
offline = true
CONF
  if ! (cd "$root/rust-core" && cargo fetch --locked >/dev/null 2>&1); then
    echo "ci: crates: the vendored copy at $vendor does not hold every crate of Cargo.lock" >&2
    (cd "$root/rust-core" && cargo fetch --locked 2>&1 | tail -5) >&2
    return 1
  fi
  echo "ci: crates: the crate registry did not answer; using the vendored copy at $vendor (offline)" >&2
}
