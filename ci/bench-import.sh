#!/usr/bin/env bash
# `psi import --synthetic N` into SQLite and into PostgreSQL, timed, with the peak RSS of the
# import (GNU time's "Maximum resident set size") and of a `psi serve` that then loads the
# registry (VmHWM once it listens); then deltas: N/100 more entries from a file, and those
# N/100 removed again with `psi import --remove` (the synthetic entries themselves are not
# valid phone numbers, so a file cannot name them). Issue 37, docs/benchmarks.md "Bulk import".
#
#   bash ci/bench-import.sh [N] [PSI]     # N: 1000000; PSI: target/release/psi
#
# The cluster is a throwaway one (initdb in a temp dir, package defaults: fsync on, 128 MB
# shared buffers), on 127.0.0.1, stopped with pg_ctl on its own data directory at the end;
# every process started here is ended by its pid.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
n="${1:-1000000}"
built="${2:-${CARGO_TARGET_DIR:-$root/rust-core/target}/release/psi}"
[ -x "$built" ] || { echo "no psi binary at $built (cargo build --release -p psi-cli)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time)" >&2; exit 1; }
if [ -z "${PSI_PG_BIN:-}" ]; then
  PSI_PG_BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
fi
[ -x "$PSI_PG_BIN/initdb" ] || { echo "no PostgreSQL server binaries (set PSI_PG_BIN)" >&2; exit 1; }

work="$(mktemp -d /tmp/psi-bench-import.XXXXXX)"
chmod 0755 "$work"
as_pg=()
if [ "$(id -u)" = 0 ]; then
  if id postgres >/dev/null 2>&1; then as_pg=(runuser -u postgres --); else as_pg=(runuser -u nobody --); fi
fi
pg_data=""
serve_pid=""
cleanup() {
  if [ -n "$serve_pid" ]; then kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; fi
  if [ -n "$pg_data" ]; then
    (cd / && "${as_pg[@]}" "$PSI_PG_BIN/pg_ctl" -D "$pg_data" stop -m fast -w -t 30 >/dev/null 2>&1) ||
      (cd / && "${as_pg[@]}" "$PSI_PG_BIN/pg_ctl" -D "$pg_data" stop -m immediate >/dev/null 2>&1) || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
psi="$work/psi"
cp "$built" "$psi"
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# timed LABEL ARGS...: runs psi ARGS under GNU time; prints wall s and peak RSS MB.
timed() {
  local label="$1"
  shift
  /usr/bin/time -f '%e %M' -o "$work/time" "$psi" "$@" >"$work/out" 2>"$work/err" || {
    echo "$label failed:" >&2
    tail -5 "$work/err" >&2
    exit 1
  }
  read -r wall kb <"$work/time"
  printf '%-40s %8.1f s %8.0f MB peak RSS   %s\n' "$label" "$wall" "$((kb / 1024))" \
    "$(tail -2 "$work/out" | head -1)"
}

# serve_peak LABEL ARGS...: psi serve ARGS until it listens; prints its VmHWM, then ends it.
serve_peak() {
  local label="$1"
  shift
  local t0
  t0=$(date +%s%N)
  "$psi" serve "$@" --listen 127.0.0.1:0 --rotate-every off >"$work/serve.out" 2>"$work/serve.log" &
  serve_pid=$!
  for _ in $(seq 6000); do
    grep -q listening "$work/serve.out" 2>/dev/null && break
    kill -0 "$serve_pid" 2>/dev/null || { echo "psi serve exited:" >&2; tail -5 "$work/serve.log" >&2; exit 1; }
    sleep 0.1
  done
  local hwm
  hwm="$(awk '/VmHWM/ { print $2 }' "/proc/$serve_pid/status")"
  printf '%-40s %8.1f s %8.0f MB peak RSS (loaded, listening)\n' "$label" \
    "$(awk -v s="$t0" -v e="$(date +%s%N)" 'BEGIN { printf "%.1f", (e - s) / 1e9 }')" "$((hwm / 1024))"
  kill "$serve_pid"
  wait "$serve_pid" 2>/dev/null || true
  serve_pid=""
}

# The delta files: N/100 valid numbers outside the synthetic range (which is +1 202 and
# any 7 digits, all of them at N = 10^7): +1 415 2xx-xxxx, to add with labels and then to
# remove.
d=$((n / 100))
python3 - "$d" "$work" <<'PY'
import sys
d, work = int(sys.argv[1]), sys.argv[2]
with open(f"{work}/add.csv", "w") as f:
    for k in range(d):
        f.write(f"+1415{2000000 + k:07d},delta-{k}\n")
with open(f"{work}/remove.txt", "w") as f:
    for k in range(d):
        f.write(f"+1415{2000000 + k:07d}\n")
PY

echo "psi import --synthetic $n ($(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg))"
sq=(--db "$work/r.sqlite" --max-client-items 1000)
timed "SQLite: import --synthetic $n" import "${sq[@]}" --synthetic "$n"
serve_peak "SQLite: psi serve" "${sq[@]}"
timed "SQLite: import $d more" import "${sq[@]}" "$work/add.csv"
timed "SQLite: import --remove $d" import "${sq[@]}" --remove "$work/remove.txt"

pg_dir="$work/pg"
mkdir -m 0700 "$pg_dir"
[ "$(id -u)" = 0 ] && chown "${as_pg[2]}" "$pg_dir"
pg_data="$pg_dir/data"
pg_port="$(free_port)"
password="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
printf '%s' "$password" >"$pg_dir/initdb.pw"
[ "$(id -u)" = 0 ] && chown "${as_pg[2]}" "$pg_dir/initdb.pw"
(cd / && "${as_pg[@]}" "$PSI_PG_BIN/initdb" -D "$pg_data" -U psi --auth=scram-sha-256 -E UTF8 \
  --locale=C --pwfile="$pg_dir/initdb.pw" >"$work/initdb.log" 2>&1) || { tail -20 "$work/initdb.log" >&2; exit 1; }
rm -f "$pg_dir/initdb.pw"
printf "listen_addresses = '127.0.0.1'\nunix_socket_directories = ''\nport = %s\n" "$pg_port" >>"$pg_data/postgresql.conf"
(cd / && "${as_pg[@]}" "$PSI_PG_BIN/pg_ctl" -D "$pg_data" -l "$pg_dir/server.log" -w -t 60 start >/dev/null) ||
  { tail -20 "$pg_dir/server.log" >&2; exit 1; }
PGPASSWORD="$password" "$PSI_PG_BIN/psql" -q -h 127.0.0.1 -p "$pg_port" -U psi -d postgres \
  -c 'create database psi' >/dev/null
umask_was="$(umask)"
umask 077
printf '%s' "$password" >"$work/db.pw"
umask "$umask_was"
"$psi" seal-key new "$work/seal.key" >/dev/null
pg=(--db "postgres://psi@127.0.0.1:$pg_port/psi" --db-password-file "$work/db.pw"
  --seal-key-file "$work/seal.key" --max-client-items 1000)
timed "PostgreSQL: import --synthetic $n" import "${pg[@]}" --synthetic "$n"
serve_peak "PostgreSQL: psi serve" "${pg[@]}"
timed "PostgreSQL: import $d more" import "${pg[@]}" "$work/add.csv"
timed "PostgreSQL: import --remove $d" import "${pg[@]}" --remove "$work/remove.txt"
echo "done ($(date -u '+%H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg))"
