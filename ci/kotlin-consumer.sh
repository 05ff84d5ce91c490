#!/usr/bin/env bash
# Proves that an app on Kotlin 2.0 (the oldest the SDK supports) can use the SDK: builds
# ci/kotlin-consumer with the Kotlin 2.0.21 compiler against dev.psisdk:psi-sdk-jvm in the
# local Maven repository (`bash ci/kotlin.sh` installs it and calls this at its end), runs it
# against a real `psi serve` on loopback, and checks the matches, labels and protocol it prints.
# Usage: bash ci/kotlin-consumer.sh [PSI_COMMAND]   (default: rust-core/target/debug/psi)
# PSI_CONSUMER_KOTLIN=2.2.21 builds the app with another Kotlin.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/ci/setup.sh"
psi_setup_java
psi="${1:-$root/rust-core/target/debug/psi}"
[ -x "$psi" ] || { echo "ci/kotlin-consumer.sh: no psi command at $psi (bash ci/kotlin.sh builds it)" >&2; exit 1; }
app="$root/ci/kotlin-consumer"
fail() { echo "ci/kotlin-consumer.sh: $*" >&2; exit 1; }

work="$(mktemp -d)"
server=""
stop_server() {
  [ -n "$server" ] || return 0
  kill "$server" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  server=""
}
trap 'stop_server; rm -rf "$work"' EXIT

# bindings/kotlin/README.md shows this program as the smallest one: word for word.
WANT="$(cat "$app/src/main/kotlin/example/Main.kt")" awk '
  /^```kotlin$/ { inside = 1; block = ""; next }
  /^```$/ { if (inside && block == ENVIRON["WANT"] "\n") found = 1; inside = 0; next }
  inside { block = block $0 "\n" }
  END { exit !found }' "$root/bindings/kotlin/README.md" ||
  fail "bindings/kotlin/README.md does not show ci/kotlin-consumer/src/main/kotlin/example/Main.kt as it is"

start=$SECONDS
kotlin_args=()
[ -n "${PSI_CONSUMER_KOTLIN:-}" ] && kotlin_args+=("-Dkotlin.version=$PSI_CONSUMER_KOTLIN")
(cd "$app" && timeout 600 mvn -B -q "${kotlin_args[@]}" clean compile) ||
  fail "the Kotlin ${PSI_CONSUMER_KOTLIN:-2.0.21} app did not build against the installed SDK"

# A registry with labels (identifier,label), one entry without.
cat > "$work/registry.csv" <<'EOF'
+14155550123,Alice
+14155550124,Bob
carol@example.com,Carol
dave@example.com
+442079460958,Erin
EOF
"$psi" import --db "$work/registry.sqlite" "$work/registry.csv" > "$work/import.log" 2>&1 ||
  fail "psi import failed: $(cat "$work/import.log")"
"$psi" serve --db "$work/registry.sqlite" --listen 127.0.0.1:0 > "$work/serve.out" 2> "$work/serve.log" &
server=$!
# `psi serve` prints `psi serve: listening on http://...` once it accepts connections.
url=""
for _ in $(seq 300); do
  url="$(sed -nE 's|^psi serve: listening on (http://[^ ]+)$|\1|p' "$work/serve.out")"
  [ -n "$url" ] && break
  kill -0 "$server" 2>/dev/null || fail "psi serve exited: $(cat "$work/serve.log")"
  sleep 0.1
done
[ -n "$url" ] || fail "psi serve did not listen within 30 s: $(cat "$work/serve.log")"

timeout 120 java -cp "$app/target/classes:$(cat "$app/target/classpath.txt")" example.MainKt "$url" \
  "(415) 555-0123" "+1 415 555 0124" "Carol@Example.com" "dave@example.com" \
  "+1 212 555 0100" "stranger@example.org" "not a contact" > "$work/out.txt" 2>&1 ||
  fail "the app failed: $(cat "$work/out.txt")"
stop_server

cat "$work/out.txt"
expected='match: (415) 555-0123 -> +14155550123 (Alice)
match: +1 415 555 0124 -> +14155550124 (Bob)
match: Carol@Example.com -> carol@example.com (Carol)
match: dave@example.com -> dave@example.com (no label)'
[ "$(grep '^match: ' "$work/out.txt")" = "$expected" ] || fail "expected these matches:
$expected"
grep -qE '^server: 5 entries, protocols \[' "$work/out.txt" || fail "expected health() to report 5 entries"
grep -qE '^protocol: (DH|OT|CM20)$' "$work/out.txt" || fail "expected the protocol that ran"
echo "ci/kotlin-consumer.sh: a Kotlin ${PSI_CONSUMER_KOTLIN:-2.0.21} app built against the installed SDK and matched against psi serve ($((SECONDS - start)) s)"
