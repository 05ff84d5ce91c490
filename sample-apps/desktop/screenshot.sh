#!/usr/bin/env bash
# Takes the README's screenshot (docs/images/desktop-sample.png) of the desktop sample:
# a virtual X display (Xvfb) with a small window manager (openbox), a real `psi serve` with
# the sample registry (samples/registry.csv), and the app started with --auto-match on
# samples/contacts.vcf; once the run has finished, ImageMagick's `import` grabs the screen.
# Everything started here is stopped on exit.
#
# Usage: bash sample-apps/desktop/screenshot.sh [output.png]
# Needs the app's jar (bash ci/kotlin.sh builds it) and the psi command (PSI_BIN, default
# rust-core/target/debug/psi). Installs xvfb, openbox and imagemagick with apt-get if missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
psi="${PSI_BIN:-$root/rust-core/target/debug/psi}"
jar="$here/target/psi-desktop-sample-0.1.0-jar-with-dependencies.jar"
out="${1:-$root/docs/images/desktop-sample.png}"

need() { command -v "$1" >/dev/null 2>&1; }
if ! need Xvfb || ! need openbox || ! need import; then
  if need apt-get; then
    apt-get update -qq && apt-get install -y -qq xvfb openbox imagemagick fonts-dejavu-core >/dev/null
  else
    echo "screenshot.sh: install Xvfb, openbox and ImageMagick first" >&2
    exit 1
  fi
fi
[ -x "$psi" ] || { echo "screenshot.sh: no psi command at $psi (cargo build -p psi-cli)" >&2; exit 1; }
[ -f "$jar" ] || { echo "screenshot.sh: no $jar (build it: bash ci/kotlin.sh)" >&2; exit 1; }

work="$(mktemp -d)"
pids=()
cleanup() {
  # Stop what this script started, newest first, by process id.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# Waits up to $2 seconds for the file $1 to contain a line matching $3.
wait_for() {
  local deadline=$((SECONDS + $2))
  until grep -q "$3" "$1" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      echo "screenshot.sh: timed out waiting for '$3' in $1" >&2
      cat "$1" >&2 || true
      return 1
    fi
    sleep 0.2
  done
}

# A free display number, and a screen a little larger than the window.
display=""
for n in $(seq 90 130); do
  if [ ! -e "/tmp/.X11-unix/X$n" ] && [ ! -e "/tmp/.X$n-lock" ]; then display=":$n"; break; fi
done
[ -n "$display" ] || { echo "screenshot.sh: no free X display" >&2; exit 1; }
Xvfb "$display" -screen 0 1000x690x24 -nolisten tcp >"$work/xvfb.log" 2>&1 &
pids+=($!)
deadline=$((SECONDS + 20))
until [ -e "/tmp/.X11-unix/X${display#:}" ]; do
  ((SECONDS < deadline)) || { echo "screenshot.sh: Xvfb did not start" >&2; cat "$work/xvfb.log" >&2; exit 1; }
  sleep 0.2
done
export DISPLAY="$display"
export XDG_CACHE_HOME="$work/cache" # the app's registry cache: left nowhere else
openbox >"$work/openbox.log" 2>&1 &
pids+=($!)

# The server: the 30 sample registry entries (phone numbers and emails with labels).
"$psi" import --db "$work/registry.sqlite" "$here/samples/registry.csv" >"$work/import.log" 2>&1
"$psi" serve --db "$work/registry.sqlite" --listen 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.log" &
pids+=($!)
wait_for "$work/serve.out" 30 "listening on http://"
url="$(grep -o 'http://[^ ]*' "$work/serve.out" | head -n 1)"

# The app, matching the sample vCard at start; it prints the outcome when the run ends.
java -jar "$jar" --server "$url" --file "$here/samples/contacts.vcf" --auto-match >"$work/app.log" 2>&1 &
pids+=($!)
wait_for "$work/app.log" 60 "^psi-desktop-sample: "
cat "$work/app.log"
sleep 2 # let Swing paint the last state

mkdir -p "$(dirname "$out")"
import -window root "$out"
echo "screenshot.sh: wrote $out"
