# The binding benchmarks' workload, shared by ci/bench-kotlin.sh and ci/bench-swift.sh:
# psi_bench_server PSI WORK writes a registry of 10^5 emails with labels and an address
# book of 1,000 contacts (100 registered) into WORK (registry.csv, contacts.txt), imports the
# registry, starts `psi serve` on loopback without a rate limit, and sets `server_pid` and
# `url`. The caller stops the server (kill "$server_pid").
psi_bench_server() {
  local psi="$1" work="$2"
  awk 'BEGIN { for (i = 1; i <= 100000; i++) printf "member%d@example.com,Member %d\n", i, i }' >"$work/registry.csv"
  awk 'BEGIN { for (i = 1; i <= 1000; i++) if (i % 10 == 0) printf "member%d@example.com\n", i * 7; else printf "outsider%d@example.org\n", i }' >"$work/contacts.txt"
  "$psi" import --db "$work/r.sqlite" --max-client-items 2000 "$work/registry.csv" >/dev/null
  "$psi" serve --db "$work/r.sqlite" --max-client-items 2000 --items-per-hour 0 --ot-sessions-per-hour 0 \
    --encoded-set-bytes-per-hour 0 --probe-bytes-per-hour 0 \
    --listen 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.log" &
  server_pid=$!
  for _ in $(seq 100); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
  url="$(grep -o 'http://[^ ]*' "$work/serve.out")"
}
