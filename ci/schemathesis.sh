#!/usr/bin/env bash
# Runs schemathesis (PyPI) against a real `psi serve` on loopback, driven by
# docs/openapi.json: no 5xx, every status, content type, header and body as documented
# (docs/reliability/openapi.md). Usage: bash ci/schemathesis.sh
#   ST_MAX_EXAMPLES  test cases per operation and phase (default 30)
#   ST_MAX_TIME      time budget of the whole schemathesis run in seconds (default 90)
#   ST_SEED          random seed (default: a fresh one, printed by schemathesis)
#   ST_VENV          the virtualenv to use or create (default: <target>/schemathesis-venv)
#   ST_AUTH=1        authentication on: the server gets a static token, schemathesis sends it
#   ST_CHECKS        the checks (default: the five below)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/ci/setup.sh"
psi_setup_rust
target="${CARGO_TARGET_DIR:-$root/rust-core/target}"
st_version="4.32.5"
venv="${ST_VENV:-$target/schemathesis-venv}"

# schemathesis, pinned, in its own virtualenv (needs python3 with venv: Debian python3-venv).
if [ "$("$venv/bin/st" --version 2>/dev/null || true)" != "st, version $st_version" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$st_version"
fi

(cd "$root/rust-core" && cargo build --quiet --locked -p psi-cli)
psi="$target/debug/psi"

work="$(mktemp -d "${TMPDIR:-/tmp}/psi-schemathesis.XXXXXX")"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

# A throwaway registry: a few entries, some labeled.
cat >"$work/registry.csv" <<'EOF'
identifier,label
+12025550101,alice
+12025550102,bob
+12025550103
carol@example.com,carol
dave@example.com
EOF
"$psi" import --db "$work/registry.sqlite" "$work/registry.csv" >/dev/null

auth_serve=()
auth_st=()
if [ "${ST_AUTH:-0}" = 1 ]; then
  token="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
  (umask 077 && echo "$token" >"$work/tokens")
  auth_serve=(--token-file "$work/tokens")
  auth_st=(-H "Authorization: Bearer $token")
fi

# Limits raised so that schemathesis's many sessions are not answered 429/503 (those are
# documented, but not_a_server_error flags every 5xx); everything else is the default.
"$psi" serve --db "$work/registry.sqlite" --listen 127.0.0.1:0 \
  --items-per-hour 0 --ot-sessions-per-hour 0 --probe-bytes-per-hour 0 \
  --max-sessions 100000 --max-sessions-per-client 100000 \
  --max-ot-sessions 100000 --max-ot-sessions-per-client 100000 \
  --max-connections-per-address 100000 --health-per-hour 0 --invalid-tokens-per-hour 0 \
  --max-groups 100000 --max-groups-per-client 100000 --group-bytes-per-hour 0 \
  --session-ttl 600 --request-timeout 30 "${auth_serve[@]}" \
  >"$work/serve.out" 2>"$work/serve.log" &
server_pid=$!
url=""
for _ in $(seq 1 100); do
  url="$(sed -nE 's|^psi serve: listening on (http://127\.0\.0\.1:[0-9]+)$|\1|p' "$work/serve.out")"
  [ -n "$url" ] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$url" ]; then
  echo "ci/schemathesis.sh: psi serve did not start" >&2
  cat "$work/serve.log" >&2
  exit 1
fi
echo "ci/schemathesis.sh: schemathesis $st_version against $url"

seed=()
[ -n "${ST_SEED:-}" ] && seed=(--seed "$ST_SEED")
status=0
# Run from the temporary directory: schemathesis keeps its cache in ./.schemathesis.
# One worker: with two, hypothesis's concurrent ast.parse hit CPython 3.11's "AST
# constructor recursion depth mismatch" SystemError (a tool error, not a finding).
cd "$work"
"$venv/bin/st" run "$root/docs/openapi.json" --url "$url" \
  --checks "${ST_CHECKS:-not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance}" \
  --max-examples "${ST_MAX_EXAMPLES:-30}" --max-time "${ST_MAX_TIME:-90}" \
  --request-timeout 30 --workers 1 --warnings off "${seed[@]}" "${auth_st[@]}" \
  --report junit --report-junit-path "$work/junit.xml" || status=$?

# The server must still be serving after the run.
if ! kill -0 "$server_pid" 2>/dev/null; then
  echo "ci/schemathesis.sh: psi serve exited during the run" >&2
  tail -n 50 "$work/serve.log" >&2
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "ci/schemathesis.sh: schemathesis found problems (exit $status); server log tail:" >&2
  tail -n 20 "$work/serve.log" >&2
fi
exit "$status"
