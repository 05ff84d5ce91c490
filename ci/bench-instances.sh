#!/usr/bin/env bash
# Several instances on one PostgreSQL beside one on SQLite (issue 22), in one batch on this
# machine: (A) one `psi serve` on a SQLite file; (B) three `psi serve` instances on a
# throwaway PostgreSQL cluster behind nginx, configured by docs/deploy/nginx.conf itself
# (its example addresses replaced by loopback ports). Both hold the same synthetic registry
# (`psi import --synthetic N`, once per store, timed). Then `psi loadgen` (DH-PSI with labels,
# 1,000 contacts per run, 200 clients, the same fixed number of runs, every result checked)
# against A, B, A, B, ... so that drift shows, and prints a markdown table per round
# (results, latency, runs/s, and the CPU seconds of each process group, to see where the
# time goes), the median runs/s of each and their ratio B / A. The goal on a two-core
# machine is at most 10% lower throughput for B (the same total work, not scaling).
# Budgets off and per-caller caps raised, as every loadgen client comes from 127.0.0.1.
#
# A bench command, not a CI suite (ci/test.sh does not run it). Release build.
# Usage: bash ci/bench-instances.sh
# Environment (defaults in brackets):
#   PSI_BENCH_REGISTRY  registry entries [1000000]
#   PSI_BENCH_RUNS      runs per loadgen round, the same for A and B [600]
#   PSI_BENCH_ROUNDS    rounds of each setup, interleaved [3]
#   PSI_BENCH_CLIENTS   concurrent loadgen clients [200]
#   PSI_BENCH_PSI       a psi binary to use instead of building one [the release build]
#   PSI_BENCH_B_STORE   postgres [postgres]; or sqlite-copies: B's three instances each on a
#                       copy of A's SQLite file (nginx and three instances without the shared
#                       store, to tell the proxy's cost from the database's)
# Exits 1 when a run failed or returned a wrong result.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
n="${PSI_BENCH_REGISTRY:-1000000}"
runs="${PSI_BENCH_RUNS:-600}"
rounds="${PSI_BENCH_ROUNDS:-3}"
clients="${PSI_BENCH_CLIENTS:-200}"
b_store="${PSI_BENCH_B_STORE:-postgres}"
contacts=1000
instances=(psi1 psi2 psi3)
case "$b_store" in postgres | sqlite-copies) ;; *)
  echo "PSI_BENCH_B_STORE: postgres or sqlite-copies, not $b_store" >&2
  exit 2
  ;;
esac

source "$root/ci/setup.sh"
psi_setup_rust
psi_setup_nginx
[ "$b_store" = postgres ] && psi_setup_postgres
if [ -z "${PSI_BENCH_PSI:-}" ]; then
  (cd "$root/rust-core" && cargo build --quiet --locked --release -p psi-cli)
fi
# The commit the batch ran (`-dirty`: with uncommitted changes in the tree it was built from).
commit="$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
built="${PSI_BENCH_PSI:-${CARGO_TARGET_DIR:-$root/rust-core/target}/release/psi}"
nginx="$(command -v nginx || echo /usr/sbin/nginx)"

# Everything started here is recorded so the trap stops it: the psi serve processes, nginx
# (foreground, its own pid), and the cluster (pg_ctl stop).
work="$(mktemp -d /tmp/psi-bench-instances.XXXXXX)"
chmod 0755 "$work" # the cluster's user (postgres, as root) must reach its directory
serve_pids=()
serve_names=()
nginx_pid=""
pg_data=""
as_pg=() # the cluster runs as `postgres` when we are root (initdb refuses root)
if [ "$(id -u)" = 0 ]; then
  if id postgres >/dev/null 2>&1; then as_pg=(runuser -u postgres --); else as_pg=(runuser -u nobody --); fi
fi
cleanup() {
  local p
  local p i rc
  for p in "${serve_pids[@]}" $nginx_pid; do kill "$p" 2>/dev/null || true; done
  for p in "${serve_pids[@]}" $nginx_pid; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  # An instance that did not stop cleanly on SIGTERM says why (its log is about to go).
  for i in "${!serve_pids[@]}"; do
    rc=0
    wait "${serve_pids[$i]}" 2>/dev/null || rc=$?
    if [ "$rc" != 0 ] && [ "$rc" != 143 ]; then
      echo "psi serve (${serve_names[$i]}) exited with status $rc on SIGTERM; its log ends:" >&2
      { grep -m1 -A1 panicked "$work/${serve_names[$i]}.log" || tail -5 "$work/${serve_names[$i]}.log"; } >&2
    fi
  done
  if [ -n "$pg_data" ]; then
    (cd / && "${as_pg[@]}" "$PSI_PG_BIN/pg_ctl" -D "$pg_data" stop -m fast -w -t 30 >/dev/null 2>&1) ||
      (cd / && "${as_pg[@]}" "$PSI_PG_BIN/pg_ctl" -D "$pg_data" stop -m immediate >/dev/null 2>&1) || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# A copy, so that a build in the same target directory during the batch changes nothing.
psi="$work/psi"
cp "$built" "$psi"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
secs_since() { awk -v s="$1" -v e="$(date +%s%N)" 'BEGIN { printf "%.1f", (e - s) / 1e9 }'; }

# start_serve NAME ARGS...: `psi serve ARGS` in the background; waits until it listens
# (loading a 10^6 registry takes a while) and sets `url`.
start_serve() {
  local name="$1"
  shift
  "$psi" serve "$@" --listen 127.0.0.1:0 >"$work/$name.out" 2>"$work/$name.log" &
  serve_pids+=($!)
  serve_names+=("$name")
  local pid=$!
  for _ in $(seq 6000); do
    grep -q listening "$work/$name.out" 2>/dev/null && break
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "psi serve ($name) exited before listening:" >&2
      tail -20 "$work/$name.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  url="$(grep -o 'http://[^ ]*' "$work/$name.out" || true)"
  if [ -z "$url" ]; then
    echo "psi serve ($name) did not listen within 600 s" >&2
    exit 1
  fi
}

# What a load of 200 clients from one address needs, on every instance of A and B: no
# budgets (items, encoded-set bytes, health), per-caller session and connection caps above
# the client count, no key rotation during the batch.
serve_flags=(--max-client-items "$contacts" --items-per-hour 0 --encoded-set-bytes-per-hour 0
  --health-per-hour 0 --max-sessions-per-client 4096 --max-sessions-per-block 4096
  --max-connections-per-address 4096 --rotate-every off)

# --- A: one instance on SQLite.
t=$(date +%s%N)
"$psi" import --db "$work/a.sqlite" --max-client-items "$contacts" --synthetic "$n" >/dev/null
import_a="$(secs_since "$t")"
start_serve a --db "$work/a.sqlite" "${serve_flags[@]}"
url_a="$url"
a_pid="${serve_pids[-1]}"

# --- B: three instances on one store behind nginx.
db_b=()
pg_pid=""
if [ "$b_store" = postgres ]; then
  pg_dir="$work/pg"
  mkdir -m 0700 "$pg_dir"
  [ "$(id -u)" = 0 ] && chown "${as_pg[2]}" "$pg_dir"
  pg_data="$pg_dir/data"
  pg_port="$(free_port)"
  password="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  printf '%s' "$password" >"$pg_dir/initdb.pw"
  [ "$(id -u)" = 0 ] && chown "${as_pg[2]}" "$pg_dir/initdb.pw"
  (cd / && "${as_pg[@]}" "$PSI_PG_BIN/initdb" -D "$pg_data" -U psi --auth=scram-sha-256 -E UTF8 \
    --locale=C --pwfile="$pg_dir/initdb.pw" >"$work/initdb.log" 2>&1) || {
    tail -20 "$work/initdb.log" >&2
    exit 1
  }
  rm -f "$pg_dir/initdb.pw"
  # The package's defaults but for where it listens: durable (fsync on), 128 MB buffers.
  printf "listen_addresses = '127.0.0.1'\nunix_socket_directories = ''\nport = %s\n" "$pg_port" \
    >>"$pg_data/postgresql.conf"
  (cd / && "${as_pg[@]}" "$PSI_PG_BIN/pg_ctl" -D "$pg_data" -l "$pg_dir/server.log" -w -t 60 start \
    >/dev/null) || {
    tail -20 "$pg_dir/server.log" >&2
    exit 1
  }
  pg_pid="$(head -1 "$pg_data/postmaster.pid")"
  PGPASSWORD="$password" "$PSI_PG_BIN/psql" -q -h 127.0.0.1 -p "$pg_port" -U psi -d postgres \
    -c 'create database psi' >/dev/null
  umask_was="$(umask)"
  umask 077
  printf '%s' "$password" >"$work/db.pw"
  umask "$umask_was"
  "$psi" seal-key new "$work/seal.key" >/dev/null
  db_b=(--db "postgres://psi@127.0.0.1:$pg_port/psi" --db-password-file "$work/db.pw"
    --seal-key-file "$work/seal.key")
  t=$(date +%s%N)
  "$psi" import "${db_b[@]}" --max-client-items "$contacts" --synthetic "$n" >/dev/null
  import_b="$(secs_since "$t")"
fi
b_pids=()
b_addrs=()
for name in "${instances[@]}"; do
  if [ "$b_store" = sqlite-copies ]; then
    cp "$work/a.sqlite" "$work/$name.sqlite"
    db_b=(--db "$work/$name.sqlite")
  fi
  start_serve "$name" "${db_b[@]}" "${serve_flags[@]}" --instance "$name" --trusted-proxy 127.0.0.1
  b_pids+=("${serve_pids[-1]}")
  b_addrs+=("${url#http://}")
done

# nginx with docs/deploy/nginx.conf inside its http block, as on Debian (conf.d), but the
# listen address and the instances' addresses replaced (as psi-server/tests/routing.rs does).
mkdir "$work/nginx"
nginx_port="$(free_port)"
conf="$(cat "$root/docs/deploy/nginx.conf")"
swap() {
  if [[ "$conf" != *"$1"* ]]; then
    echo "docs/deploy/nginx.conf has no \`$1\`" >&2
    exit 1
  fi
  conf="${conf//"$1"/"$2"}"
}
swap "listen 80;" "listen 127.0.0.1:$nginx_port;"
for i in "${!instances[@]}"; do swap "10.0.0.1$((i + 1)):8080" "${b_addrs[$i]}"; done
d="$work/nginx"
{
  echo "daemon off;"
  echo "worker_processes auto;"
  [ "$(id -u)" = 0 ] && echo "user root;"
  echo "pid $d/nginx.pid;"
  echo "error_log $d/error.log notice;"
  echo "events { worker_connections 1024; }"
  echo "http {"
  echo "    access_log $d/access.log;"
  for tmp in client_body proxy fastcgi uwsgi scgi; do echo "    ${tmp}_temp_path $d/$tmp;"; done
  echo "$conf"
  echo "}"
} >"$d/nginx.conf"
"$nginx" -p "$d" -c "$d/nginx.conf" -e "$d/error.log" </dev/null >/dev/null 2>"$d/stderr.log" &
nginx_pid=$!
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$nginx_port") 2>/dev/null && break
  if ! kill -0 "$nginx_pid" 2>/dev/null; then
    cat "$d/stderr.log" "$d/error.log" >&2
    exit 1
  fi
  sleep 0.1
done
url_b="http://127.0.0.1:$nginx_port"

# CPU seconds (user + system) of processes and their children, from /proc (the cluster's
# backends, nginx's workers; a child that exited counts in its parent's cutime/cstime).
tck="$(getconf CLK_TCK)"
cpu_ticks() {
  local p q total=0 t
  for p in "$@"; do
    [ -n "$p" ] || continue
    for q in "$p" $(ps -o pid= --ppid "$p" 2>/dev/null); do
      t="$(sed 's/^.*) //' "/proc/$q/stat" 2>/dev/null | awk '{ print $12 + $13 + $14 + $15 }')" || t=0
      total=$((total + ${t:-0}))
    done
  done
  echo "$total"
}
# Busy ticks of the whole machine (all but idle and iowait), to show what else ran.
machine_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
secs() { awk -v t="$1" -v k="$tck" 'BEGIN { printf "%.1f", t / k }'; }

field() { sed -n "s/^ *\"$1\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" "$2" | head -1; }
ms_to_s() { awk -v m="$1" 'BEGIN { printf "%.1f", m / 1000 }'; }

# round SETUP URL I: one loadgen run; appends a row to rows.txt and cpu.txt.
status=0
round() {
  local setup="$1" url="$2" i="$3" out="$work/loadgen-$1-$3.json"
  local c_a c_b c_pg c_ng c_m rc=0
  c_a=$(cpu_ticks "$a_pid") c_b=$(cpu_ticks "${b_pids[@]}") c_pg=$(cpu_ticks "$pg_pid")
  c_ng=$(cpu_ticks "$nginx_pid") c_m=$(machine_ticks)
  local TIMEFORMAT='%R %U %S'
  { time "$psi" loadgen --server "$url" --registry-size "$n" --clients "$clients" \
    --contacts "$contacts" --runs "$runs" --max-secs 3600 --protocol dh \
    >"$out" 2>"$work/loadgen.err"; } 2>"$work/time.txt" || rc=$?
  c_a=$(($(cpu_ticks "$a_pid") - c_a)) c_b=$(($(cpu_ticks "${b_pids[@]}") - c_b))
  c_pg=$(($(cpu_ticks "$pg_pid") - c_pg)) c_ng=$(($(cpu_ticks "$nginx_pid") - c_ng))
  c_m=$(($(machine_ticks) - c_m))
  if [ "$rc" != 0 ] && ! grep -q runs_ok "$out"; then
    echo "psi loadgen against $setup failed:" >&2
    cat "$work/loadgen.err" >&2
    exit 1
  fi
  [ "$rc" = 0 ] || status=1
  local first_error
  first_error="$(sed -n 's/^ *"first_error": "\(.*\)",\{0,1\}$/\1/p' "$out")"
  [ -z "$first_error" ] || echo "$setup round $i, first error: $first_error" >&2
  echo "$setup $i $(field runs_ok "$out") $(field runs_wrong "$out") $(field runs_failed "$out")" \
    "$(field latency_ms_p50 "$out") $(field latency_ms_p95 "$out") $(field latency_ms_p99 "$out")" \
    "$(field runs_per_s "$out")" >>"$work/rows.txt"
  read -r wall user sys <"$work/time.txt"
  echo "$setup $i $wall $(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.1f", u + s }')" \
    "$(secs "$c_a") $(secs "$c_b") $(secs "$c_pg") $(secs "$c_ng") $(secs "$c_m")" >>"$work/cpu.txt"
  echo "round $i, $setup: $(field runs_per_s "$out") runs/s" >&2
}

b_label="B: 3 instances on PostgreSQL behind nginx"
[ "$b_store" = sqlite-copies ] && b_label="B: 3 instances on SQLite copies behind nginx"
for i in $(seq "$rounds"); do
  round A "$url_a" "$i"
  round B "$url_b" "$i"
done

echo
echo "Registry of $n entries, $clients clients x $contacts contacts, DH-PSI with labels," \
  "$runs runs per round; $(nproc) cores; commit $commit; ended $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "import --synthetic $n: A (SQLite) ${import_a} s${import_b:+, B (PostgreSQL) ${import_b} s}"
echo
echo "| setup | round | runs ok | wrong / failed | p50 s | p95 s | p99 s | runs/s |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
while read -r setup i ok wrong failed p50 p95 p99 rps; do
  label="A: 1 instance on SQLite"
  [ "$setup" = B ] && label="$b_label"
  printf '| %s | %s | %s | %s / %s | %s | %s | %s | %.1f |\n' "$label" "$i" "$ok" "$wrong" "$failed" \
    "$(ms_to_s "$p50")" "$(ms_to_s "$p95")" "$(ms_to_s "$p99")" "$rps"
done <"$work/rows.txt"
echo
echo "CPU seconds during each round (2 cores give 2 CPU seconds per second of wall time):"
echo
echo "| setup | round | wall s | psi loadgen | A's psi serve | B's 3 psi serve | postgres | nginx | anything else | whole machine |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
while read -r setup i wall lg a b pg ng m; do
  rest="$(awk -v m="$m" -v s="$lg $a $b $pg $ng" 'BEGIN { split(s, x, " "); r = m; for (k in x) r -= x[k]; printf "%.1f", r < 0 ? 0 : r }')"
  printf '| %s | %s | %.1f | %s | %s | %s | %s | %s | %s | %s |\n' "$setup" "$i" "$wall" "$lg" "$a" "$b" "$pg" "$ng" "$rest" "$m"
done <"$work/cpu.txt"
echo
median() { awk -v s="$1" '$1 == s { print $9 }' "$work/rows.txt" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
med_a="$(median A)"
med_b="$(median B)"
ratio="$(awk -v a="$med_a" -v b="$med_b" 'BEGIN { printf "%.2f", b / a }')"
printf 'median runs/s: A %.1f, B %.1f; B / A = %s' "$med_a" "$med_b" "$ratio"
if awk -v r="$ratio" 'BEGIN { exit !(r >= 0.90) }'; then
  echo " (goal: at least 0.90: met)"
else
  echo " (goal: at least 0.90: not met)"
fi
exit "$status"
