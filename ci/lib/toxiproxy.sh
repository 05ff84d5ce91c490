# Toxiproxy (the latency element of the field tests, and the emulated link of
# ci/bench-group.sh), built with Go from the Go module proxy only (no fallback to
# version-control hosts) into the cargo target directory, once. Sourced after ci/setup.sh.
# psi_toxiproxy ROOT: sets PSI_TOXIPROXY to the server binary, building it if needed.
psi_toxiproxy() {
  local root="$1" version="2.5.0" go_bin
  PSI_TOXIPROXY="${CARGO_TARGET_DIR:-$root/rust-core/target}/field-tools/toxiproxy-$version/server"
  if [ ! -x "$PSI_TOXIPROXY" ]; then
    go_bin="$(command -v go || true)"
    [ -z "$go_bin" ] && [ -x /usr/local/go/bin/go ] && go_bin=/usr/local/go/bin/go
    if [ -z "$go_bin" ]; then
      apt_install "Go is needed to build Toxiproxy (ci/lib/toxiproxy.sh)." golang-go
      go_bin="$(command -v go)"
    fi
    GOBIN="$(dirname "$PSI_TOXIPROXY")" GOPROXY=https://proxy.golang.org GOFLAGS=-mod=mod \
      "$go_bin" install "github.com/Shopify/toxiproxy/v2/cmd/server@v$version"
  fi
}
