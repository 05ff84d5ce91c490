#!/usr/bin/env bash
# The binding's overhead: the same match of 1,000 contacts against a 10^5-entry registry,
# from Kotlin (the JVM SDK, in-process time of the call with a new client, so no registry
# cache: in a fresh JVM after 1 untimed run, "cold", after 10, "warm", and after 100, "hot":
# HotSpot's C2 compiler is still compiling the per-call code, mostly JNA's, during runs
# 10-25 and competes with the run for the 2 cores; after 100 it has settled) and from
# `psi match` (wall time of the process, no cache), interleaved, 5 runs each per protocol;
# the Kotlin runs twice: with the default OkHttp transport ("Kotlin") and with the desktop
# library's own (`ContactDiscovery.withNativeTransport`, "native"). Prints the medians and
# their ratios. Also the sizes of the stripped native
# library and of the JVM jar. Release builds. Usage: bash ci/bench-kotlin.sh [runs]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
runs="${1:-5}"
PSI_PROFILE=release bash "$root/ci/kotlin.sh" -pl desktop -am -DskipTests >/dev/null
psi="${CARGO_TARGET_DIR:-$root/rust-core/target}/release/psi"
work="$(mktemp -d)"
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

source "$root/ci/lib/bench-server.sh"
psi_bench_server "$psi" "$work"

cd "$root/desktop"
mvn -q -B dependency:build-classpath -Dmdep.outputFile="$work/cp.txt" >/dev/null
cp="target/classes:target/test-classes:$(cat "$work/cp.txt")"
for protocol in dh ot; do
  for i in $(seq "$runs"); do
    start=$(date +%s%N)
    "$psi" match --server "$url" --protocol "$protocol" "$work/contacts.txt" >/dev/null
    echo "cli $protocol $(( ($(date +%s%N) - start) / 1000000 ))"
    java -cp "$cp" dev.psisdk.bench.BindingBenchKt "$url" "$work/contacts.txt" "$protocol" 1 1
    java -cp "$cp" dev.psisdk.bench.BindingBenchKt "$url" "$work/contacts.txt" "$protocol" 1 10
    java -cp "$cp" dev.psisdk.bench.BindingBenchKt "$url" "$work/contacts.txt" "$protocol" 1 100
    java -cp "$cp" dev.psisdk.bench.BindingBenchKt "$url" "$work/contacts.txt" "$protocol" 1 1 native
    java -cp "$cp" dev.psisdk.bench.BindingBenchKt "$url" "$work/contacts.txt" "$protocol" 1 10 native
  done
done | tee "$work/times.txt"
echo
echo "| protocol | psi match ms | Kotlin cold ms | Kotlin warm ms | Kotlin hot ms | cold / CLI | warm / CLI | hot / CLI | native run in the JVM, warm ms | warm / native run |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
ratio() { awk -v k="$1" -v c="$2" 'BEGIN { printf "%.2f", k / c }'; }
for protocol in dh ot; do
  median() { grep "^$1 $protocol " "$work/times.txt" | awk -v f="${2:-3}" '{print $f}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  c=$(median cli); k1=$(median kotlin-1); k10=$(median kotlin-10); k100=$(median kotlin-100); r10=$(median kotlin-10 7)
  echo "| $protocol | $c | $k1 | $k10 | $k100 | $(ratio "$k1" "$c") | $(ratio "$k10" "$c") | $(ratio "$k100" "$c") | $r10 | $(ratio "$k10" "$r10") |"
done
echo
echo "Native transport (ContactDiscovery.withNativeTransport), the same runs:"
echo
echo "| protocol | psi match ms | native cold ms | native warm ms | cold / CLI | warm / CLI | native run in the JVM, warm ms | warm / native run |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for protocol in dh ot; do
  median() { grep "^$1 $protocol " "$work/times.txt" | awk -v f="${2:-3}" '{print $f}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  c=$(median cli); k1=$(median native-1); k10=$(median native-10); r10=$(median native-10 7)
  echo "| $protocol | $c | $k1 | $k10 | $(ratio "$k1" "$c") | $(ratio "$k10" "$c") | $r10 | $(ratio "$k10" "$r10") |"
done
echo "(medians of $runs runs each, interleaved)"
echo
lib="$(ls "$root"/desktop/native/*/libpsi_ffi.so | head -1)"
jar="$root/desktop/target/psi-sdk-jvm-0.1.0.jar"
echo "stripped libpsi_ffi.so (release, $(basename "$(dirname "$lib")")): $(stat -c %s "$lib") bytes"
echo "psi-sdk-jvm jar (with the library): $(stat -c %s "$jar") bytes"
