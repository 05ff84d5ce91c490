#!/usr/bin/env python3
"""Group PSI (issue 38 §2) on an emulated link: the real `psi serve` (the relay) on
loopback, Toxiproxy in front of it with a latency and a bandwidth toxic each way, and `t`
phones as separate `psi group create` / `psi group join` processes whose every connection
goes through that proxy. Toxiproxy applies its toxics per connection, so each phone gets a
link of its own with the given rates (a phone's requests are sequential on one keep-alive
connection). Prints a markdown table: per cell the median of `runs` runs of the leader's and
the slowest member's wall time (from the phone's own report), their bytes, and the check
that every phone's result is the plain intersection.

Usage: bench_group.py --psi PATH --toxiproxy PATH [--link 4g] [--runs 3]
       [--cells 2:10,4:10,8:10,2:12,4:12,8:12] [--threads 1]
Links are tests/field/grid.json's networks (one-way latency, down and up rates), plus
`loopback` (no proxy).
"""

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(port, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read()


def wait_for(pred, what, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise SystemExit(f"bench_group: {what} did not come up in {timeout:.0f} s")


def stop(proc):
    """Ends one process we started, by its pid."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def books(t, n, work):
    """t address books of n emails: n/4 every phone holds, the rest each phone's own.
    Returns the files and the expected common set."""
    common = [f"common{i}@example.com" for i in range(max(1, n // 4))]
    files = []
    for p in range(t):
        own = [f"phone{p}.own{i}@example.org" for i in range(n - len(common))]
        path = os.path.join(work, f"book-{t}-{n}-{p}.txt")
        with open(path, "w") as f:
            f.write("\n".join(common + own) + "\n")
        files.append(path)
    return files, set(common)


def one_run(psi, url, files, expected, threads, deadline):
    t = len(files)
    common_args = ["--server", url, "--json", "--threads", str(threads), "--deadline", str(deadline)]
    leader = subprocess.Popen(
        [psi, "group", "create", *common_args, "--size", str(t), files[0]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = [leader]
    try:
        first = leader.stdout.readline()
        if not first:
            raise SystemExit(f"bench_group: the leader printed no code: {leader.stderr.read()[:500]}")
        code = json.loads(first)["code"]
        for f in files[1:]:
            procs.append(subprocess.Popen(
                [psi, "group", "join", *common_args, "--code", code, f],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        reports = []
        for p in procs:
            out, err = p.communicate(timeout=deadline + 30)
            if p.returncode != 0:
                raise SystemExit(f"bench_group: a phone failed ({p.returncode}): {err.strip()[:500]}")
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            stop(p)
    ok = all(set(r["common"] or []) == expected for r in reports)
    return reports, ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--psi", required=True)
    ap.add_argument("--toxiproxy", required=True)
    ap.add_argument("--link", default="4g")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cells", default="2:10,4:10,8:10,2:12,4:12,8:12")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--deadline", type=int, default=3600)
    a = ap.parse_args()
    grid = json.load(open(os.path.join(ROOT, "tests", "field", "grid.json")))
    links = {n["name"]: n for n in grid["networks"]}
    if a.link != "loopback" and a.link not in links:
        raise SystemExit(f"bench_group: unknown link {a.link!r} (loopback, {', '.join(links)})")
    cells = [tuple(int(x) for x in c.split(":")) for c in a.cells.split(",")]
    work = tempfile.mkdtemp(prefix="psi-bench-group-")
    procs = []
    try:
        port = free_port()
        serve = subprocess.Popen(
            [a.psi, "serve", "--db", os.path.join(work, "relay.sqlite"),
             "--listen", f"127.0.0.1:{port}", "--group-bytes-per-hour", "0",
             "--items-per-hour", "0", "--max-groups-per-client", "64",
             "--group-ttl", "3600"],
            stdout=open(os.path.join(work, "serve.out"), "w"),
            stderr=open(os.path.join(work, "serve.log"), "w"))
        procs.append(serve)
        wait_for(lambda: "listening" in open(os.path.join(work, "serve.out")).read(), "psi serve")
        url = f"http://127.0.0.1:{port}"
        if a.link != "loopback":
            net = links[a.link]
            tport, pport = free_port(), free_port()
            tox = subprocess.Popen([a.toxiproxy, "-host", "127.0.0.1", "-port", str(tport)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(tox)

            def up():
                try:
                    api(tport, "GET", "/version")
                    return True
                except OSError:
                    return False
            wait_for(up, "toxiproxy")
            api(tport, "POST", "/proxies", {"name": "phone", "listen": f"127.0.0.1:{pport}",
                                            "upstream": f"127.0.0.1:{port}", "enabled": True})
            for stream, mbit in (("downstream", net["down_mbit"]), ("upstream", net["up_mbit"])):
                api(tport, "POST", "/proxies/phone/toxics",
                    {"name": f"latency_{stream}", "type": "latency", "stream": stream,
                     "attributes": {"latency": int(round(net["one_way_ms"])), "jitter": 0}})
                api(tport, "POST", "/proxies/phone/toxics",
                    {"name": f"rate_{stream}", "type": "bandwidth", "stream": stream,
                     "attributes": {"rate": max(1, int(mbit * 125))}})
            url = f"http://127.0.0.1:{pport}"
            print(f"link: {net['label']} ({net['down_mbit']} Mbit/s down, {net['up_mbit']} up, "
                  f"{net['one_way_ms']} ms one way; Toxiproxy, per connection)")
        else:
            print("link: loopback (no proxy)")
        print()
        print("| t | n per phone | leader s (median, min-max) | slowest member s | "
              "leader MB sent / received | member MB sent / received | leader CPU s | correct |")
        print("|---:|---:|---:|---:|---:|---:|---:|---|")
        for t, l in cells:
            files, expected = books(t, 1 << l, work)
            lead_s, memb_s, cpu, oks, last = [], [], [], [], None
            for _ in range(a.runs):
                reports, ok = one_run(a.psi, url, files, expected, a.threads, a.deadline)
                reports.sort(key=lambda r: r["party"])
                lead_s.append(reports[0]["elapsed_ms"] / 1e3)
                memb_s.append(max(r["elapsed_ms"] for r in reports[1:]) / 1e3)
                cpu.append(reports[0]["compute_ms"] / 1e3)
                oks.append(ok)
                last = reports
            m = max(last[1:], key=lambda r: r["bytes_received"])
            print(f"| {t} | 2^{l} | {statistics.median(lead_s):.3f} ({min(lead_s):.3f}-{max(lead_s):.3f}) | "
                  f"{statistics.median(memb_s):.3f} | "
                  f"{last[0]['bytes_sent'] / 1e6:.2f} / {last[0]['bytes_received'] / 1e6:.2f} | "
                  f"{m['bytes_sent'] / 1e6:.2f} / {m['bytes_received'] / 1e6:.2f} | "
                  f"{statistics.median(cpu):.3f} | {'yes' if all(oks) else 'NO'} |", flush=True)
            if not all(oks):
                raise SystemExit("bench_group: a group's result is not the plain intersection")
        print(f"\n(medians of {a.runs} runs; {a.threads} worker thread(s) per phone; the phones "
              f"are processes on this machine's cores, so their computation competes for them)")
    finally:
        for p in reversed(procs):
            stop(p)


if __name__ == "__main__":
    main()
