#!/usr/bin/env python3
"""Field tests: the real `psi serve` and the real `psi match` over real TCP on emulated links.

Two network namespaces joined by a veth pair; `tbf` on each veth end sets the rate of its
direction; Toxiproxy (in the client namespace, on its loopback) adds the one-way latency with
a latency toxic upstream and one downstream. The client talks to Toxiproxy on 127.0.0.1 in
its namespace; Toxiproxy forwards over the veth to `psi serve` listening on the server
namespace's veth address. Nothing else carries test traffic. docs/field-tests.md has the
design, its limits and the results.

Usage (root: namespaces need CAP_NET_ADMIN):
  python3 tests/field/field.py run --psi PATH --toxiproxy PATH [--cells smoke|all|NET/WORKLOAD,...]
      [--protocols dh,ot,auto,auto-warm] [--out results.json] [--run-timeout 300] [--max-minutes 120]
  python3 tests/field/field.py check results.json     (the smoke test's assertions)
  python3 tests/field/field.py table results.json     (the Markdown table of docs/field-tests.md)
  python3 tests/field/field.py cleanup                (remove namespaces of dead harnesses)

Python standard library only.
"""

import argparse
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GRID = os.path.join(HERE, "grid.json")
NS_PREFIX = "psif"  # namespace names: psif<pid>x<rand>c / ...s
CLIENT_ADDR, SERVER_ADDR = "10.77.0.1", "10.77.0.2"
TOXI_API = "127.0.0.1:8474"  # in the client namespace
PSI_PROXY, PROBE_PROXY = "127.0.0.1:18080", "127.0.0.1:18081"  # in the client namespace
# Every connection through Toxiproxy is cut after this many bytes in either direction
# (the largest run of the grid, OT-PSI at 10^6 entries, moves 28 MB).
BYTES_CAP = 512 << 20


def load_json(path):
    with open(path) as f:
        return json.load(f)


def read_line(p, timeout):
    """The next line of a child's stdout, or "" once `timeout` seconds pass or it ends."""
    buf = b""
    deadline = time.monotonic() + timeout
    fd = p.stdout.fileno()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        b = os.read(fd, 1)
        if not b:
            break
        buf += b
        if b == b"\n":
            break
    return buf.decode(errors="replace")


def log(*a):
    print("field:", *a, file=sys.stderr, flush=True)


def sh(*cmd, check=True, timeout=60, capture=True):
    r = subprocess.run(list(cmd), capture_output=capture, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {(r.stderr or '').strip()[-500:]}")
    return r


# ---------------------------------------------------------------- the emulated link


class Link:
    """Two namespaces, a veth pair, tbf both ways, Toxiproxy with latency toxics.

    Names are unique per harness (pid + random) and everything is removed by `close`,
    which `run` calls in a `finally` and from its signal handlers."""

    def __init__(self, toxiproxy):
        tag = f"{os.getpid()}x{random.randrange(16**3):03x}"
        self.ns_c, self.ns_s = f"{NS_PREFIX}{tag}c", f"{NS_PREFIX}{tag}s"
        self.veth_c, self.veth_s = f"pf{tag}c"[:15], f"pf{tag}s"[:15]
        self.toxiproxy = toxiproxy
        self.procs = []  # (name, Popen) started by us, stopped by pid in close()
        self.network = None

    def __enter__(self):
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _setup(self):
        sh("ip", "netns", "add", self.ns_c)
        sh("ip", "netns", "add", self.ns_s)
        sh("ip", "link", "add", self.veth_c, "type", "veth", "peer", "name", self.veth_s)
        sh("ip", "link", "set", self.veth_c, "netns", self.ns_c)
        sh("ip", "link", "set", self.veth_s, "netns", self.ns_s)
        for ns, dev, addr in ((self.ns_c, self.veth_c, CLIENT_ADDR), (self.ns_s, self.veth_s, SERVER_ADDR)):
            sh("ip", "-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        log(f"namespaces {self.ns_c} (client {CLIENT_ADDR}) and {self.ns_s} (server {SERVER_ADDR})")
        self.start("toxiproxy", self.ns_c, [self.toxiproxy, "-host", "127.0.0.1", "-port", TOXI_API.split(":")[1]],
                   log_path=None)
        for _ in range(100):
            if self._api("GET", "/version", check=False).returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("toxiproxy did not start")

    def start(self, name, ns, argv, log_path, stdout=subprocess.DEVNULL):
        err = open(log_path, "ab") if log_path else subprocess.DEVNULL
        # `ip netns exec` execs the program: the Popen's pid is the program's.
        p = subprocess.Popen(["ip", "netns", "exec", ns] + argv, stdout=stdout, stderr=err,
                             start_new_session=True)
        self.procs.append((name, p))
        return p

    def stop(self, p):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        self.procs = [(n, q) for n, q in self.procs if q is not p]

    def close(self):
        for _, p in list(self.procs):
            try:
                self.stop(p)
            except Exception as e:  # keep cleaning up
                log(f"stopping {p.pid}: {e}")
        for ns in (self.ns_c, self.ns_s):
            # Anything still running in our namespaces was started by this harness.
            r = sh("ip", "netns", "pids", ns, check=False)
            for pid in (r.stdout or "").split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", ns, check=False)  # also destroys the veth pair
        self.procs = []

    def _api(self, method, path, body=None, check=True):
        cmd = ["ip", "netns", "exec", self.ns_c, "curl", "-sS", "-f", "-X", method,
               f"http://{TOXI_API}{path}"]
        if body is not None:
            cmd += ["-H", "Content-Type: application/json", "--data", json.dumps(body)]
        return sh(*cmd, check=check, timeout=20)

    def proxy(self, name, listen, upstream):
        """Creates or re-points a proxy, with its toxics (latency both ways, byte caps)."""
        if self._api("GET", f"/proxies/{name}", check=False).returncode == 0:
            self._api("POST", f"/proxies/{name}", {"upstream": upstream, "enabled": True})
            return
        self._api("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream, "enabled": True})
        for stream in ("upstream", "downstream"):
            self._api("POST", f"/proxies/{name}/toxics",
                      {"name": f"latency_{stream}", "type": "latency", "stream": stream,
                       "attributes": {"latency": 0, "jitter": 0}})
            self._api("POST", f"/proxies/{name}/toxics",
                      {"name": f"cap_{stream}", "type": "limit_data", "stream": stream,
                       "attributes": {"bytes": BYTES_CAP}})
        if self.network:
            self._latency(name, self.network)

    def _latency(self, proxy, net):
        # Toxiproxy's latency is whole milliseconds: 0.2 ms becomes 0 (the veth, the proxy
        # and loopback add about 0.05-0.2 ms each way on their own; measured at calibration).
        ms = int(round(net["one_way_ms"]))
        for stream in ("upstream", "downstream"):
            self._api("POST", f"/proxies/{proxy}/toxics/latency_{stream}",
                      {"attributes": {"latency": ms, "jitter": 0}})

    def set_network(self, net):
        """tbf on each veth end (egress: client end = upload, server end = download), and
        the latency toxics of every proxy."""
        for ns, dev, mbit in ((self.ns_c, self.veth_c, net["up_mbit"]), (self.ns_s, self.veth_s, net["down_mbit"])):
            bps = mbit * 1e6
            burst = tbf_burst(mbit)
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
               "rate", f"{int(bps)}bit", "burst", str(burst), "latency", "100ms")
        self.network = net
        r = self._api("GET", "/proxies")
        for proxy in json.loads(r.stdout):
            self._latency(proxy, net)


def tbf_burst(mbit):
    """The token bucket: 4 ms of traffic (one timer tick at HZ=250), at least 8 KiB (a few
    packets; tbf segments larger GSO packets itself). Queue: 100 ms of traffic."""
    return max(8 * 1024, int(mbit * 1e6 / 8 * 0.004))


# ---------------------------------------------------------------- calibration probe


def probe_server(host):
    """Runs in the server namespace: ping, download and upload of a requested size."""
    s = socket.create_server((host, 0))
    print(s.getsockname()[1], flush=True)
    while True:
        c, _ = s.accept()
        with c:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                head = recv_exact(c, 9)
                if head is None:
                    break
                op, n = head[:1], struct.unpack(">Q", head[1:])[0]
                n = min(n, 64 << 20)
                if op == b"D":
                    block = b"\0" * 65536
                    left = n
                    while left:
                        k = min(left, len(block))
                        c.sendall(block[:k])
                        left -= k
                elif op == b"U":
                    recv_exact(c, n)
                    c.sendall(b"k")
                else:
                    c.sendall(b"k")


def recv_exact(c, n):
    buf = bytearray()
    while len(buf) < n:
        b = c.recv(min(n - len(buf), 1 << 20))
        if not b:
            return None
        buf += b
    return bytes(buf)


def probe_client(addr, down_bytes, up_bytes, down_burst, up_burst):
    """Runs in the client namespace, through the proxy: RTT (median of 5 pings), then the
    throughput of one download and one upload (their RTT subtracted, and the token
    bucket's burst, which passes at once)."""
    host, port = addr.rsplit(":", 1)
    c = socket.create_connection((host, int(port)), timeout=60)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(5):
        t = time.monotonic()
        c.sendall(b"P" + struct.pack(">Q", 0))
        recv_exact(c, 1)
        rtts.append(time.monotonic() - t)
    rtt = statistics.median(rtts)
    t = time.monotonic()
    c.sendall(b"D" + struct.pack(">Q", down_bytes))
    recv_exact(c, down_bytes)
    t_down = time.monotonic() - t
    t = time.monotonic()
    c.sendall(b"U" + struct.pack(">Q", up_bytes))
    block = b"\0" * 65536
    left = up_bytes
    while left:
        k = min(left, len(block))
        c.sendall(block[:k])
        left -= k
    recv_exact(c, 1)
    t_up = time.monotonic() - t
    c.close()
    print(json.dumps({
        "rtt_ms": rtt * 1e3,
        "down_mbit": (down_bytes - down_burst) * 8 / max(t_down - rtt, 1e-6) / 1e6,
        "up_mbit": (up_bytes - up_burst) * 8 / max(t_up - rtt, 1e-6) / 1e6,
        "down_bytes": down_bytes, "up_bytes": up_bytes,
    }))


def best_of(measurements):
    """The link as the best of several probe transfers: the highest rate each way and the
    lowest RTT (a busy machine only ever slows a transfer down, so the best one is closest to
    what the link allows)."""
    best = dict(measurements[0])
    for m in measurements[1:]:
        best["rtt_ms"] = min(best["rtt_ms"], m["rtt_ms"])
        best["down_mbit"] = max(best["down_mbit"], m["down_mbit"])
        best["up_mbit"] = max(best["up_mbit"], m["up_mbit"])
    best["transfers"] = len(measurements)
    return best


def calibrate(link, net, timeout, transfers=2):
    """Quick transfers on the emulated link: about 1 s of traffic each way (at least 8
    token-bucket bursts, at most 16 MiB) each, through the same Toxiproxy and tbf as the
    runs; the best of `transfers` ([`best_of`])."""
    size = lambda mbit: int(min(16 << 20, max(8 * tbf_burst(mbit), mbit * 1e6 / 8)))
    d, u = net["down_mbit"], net["up_mbit"]
    ms = []
    for _ in range(transfers):
        r = sh("ip", "netns", "exec", link.ns_c, sys.executable, os.path.abspath(__file__), "_probe-client",
               PROBE_PROXY, str(size(d)), str(size(u)), str(tbf_burst(d)), str(tbf_burst(u)), timeout=timeout)
        ms.append(json.loads(r.stdout))
    m = best_of(ms)
    m["expected_rtt_ms"] = 2 * int(round(net["one_way_ms"]))  # as set (whole ms)
    return m


# ---------------------------------------------------------------- workloads


def phone(area, k):
    # NANP: the exchange (first of the 7 digits) must be 2-9 to be a valid number.
    return f"+1{area}{2000000 + k:07d}"


def registry_csv(path, n):
    with open(path, "w") as f:
        f.write("identifier,label\n")
        for k in range(n):
            f.write(f"{phone(202, k)},user-{k}\n")


def contacts_csv(path, w):
    """`matches` registered contacts spread over the registry, the rest unregistered."""
    n, m, reg = w["client"], w["matches"], w["registry"]
    step = max(1, reg // max(1, m))
    with open(path, "w") as f:
        for i in range(n):
            f.write((phone(202, (i * step) % reg) if i < m else phone(303, i)) + "\n")


def max_client_items(w):
    # The server's encoded set is sized for its largest client set (ServerArgs); the
    # default 10,000 unless a workload's client set is larger.
    return max(10_000, w["client"])


def registry_db(psi, work, w, timeout):
    """`psi import` once per registry size, reused across harness starts (`.done` marker)."""
    n, mci = w["registry"], max_client_items(w)
    db = os.path.join(work, f"registry-{n}-{mci}.sqlite")
    if os.path.exists(db + ".done"):
        return db
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    csv = os.path.join(work, f"registry-{n}.csv")
    registry_csv(csv, n)
    t = time.monotonic()
    r = sh(psi, "import", "--db", db, "--max-client-items", str(mci), "--json", csv, timeout=timeout)
    os.remove(csv)
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    if summary.get("accepted", n) != n:
        raise RuntimeError(f"psi import accepted {summary.get('accepted')} of {n} entries: {summary}")
    log(f"imported a registry of {n} entries in {time.monotonic() - t:.1f} s")
    open(db + ".done", "w").close()
    return db


# ---------------------------------------------------------------- protocols and reports


def accepted_protocols(psi):
    """Every value `psi match --protocol` accepts: candidates from its --help text, each
    confirmed by running `psi match --protocol X` on an empty contact file against a closed
    loopback port. A refused value fails with clap's "invalid value" (exit 2) or, where the
    option is parsed later, psi's "unknown protocol"; an accepted one fails otherwise (no
    items, or no server)."""
    text = sh(psi, "match", "--help").stdout
    m = re.search(r"--protocol <[^>]*>\s*\n?(.*?)(?:\n\s*\n|\n\s+--)", text, re.S)
    words = re.findall(r"\b([a-z][a-z0-9]*)\b", m.group(1) if m else "")
    cands = [w for w in dict.fromkeys(words) if re.fullmatch(r"[a-z]+\d*", w) and len(w) <= 5]
    out = []
    with tempfile.NamedTemporaryFile("w", suffix=".csv") as empty:
        for c in cands:
            r = sh(psi, "match", "--server", "http://127.0.0.1:9", "--timeout", "2", "--protocol", c,
                   empty.name, check=False, timeout=60)
            err = r.stderr.lower()
            if r.returncode != 2 and "invalid value" not in err and "unknown protocol" not in err:
                out.append(c)
    return out


_SERVE_EXTRA = {}


def serve_extra_flags(psi):
    """CM20-PSI and GBF-PSI are opt-in on a server (ADR 0021, ADR 0048: semi-honest clients
    only); the harness's client is ours, so each is enabled where the binary has its flag
    (`psi match` accepts every protocol name, so the grid forces each one). The link probe's hourly
    byte budget and the encoded-set download budget (a 10^6 set is about 8 MB: the grid downloads
    it more often an hour than the 64 MiB default allows) are lifted like the other budgets (the
    grid makes more runs per hour than a user), where the binary has the flag."""
    if psi not in _SERVE_EXTRA:
        text = sh(psi, "serve", "--help").stdout
        extra = [flag for flag in ("--enable-cm20", "--enable-gbf") if flag in text]
        for budget in ("--probe-bytes-per-hour", "--encoded-set-bytes-per-hour"):
            extra += [budget, "0"] if budget in text else []
        _SERVE_EXTRA[psi] = extra
    return _SERVE_EXTRA[psi]


def short(name):
    return str(name).lower().removesuffix("-psi") if name is not None else None


TIME_KEY = re.compile(r"(time|total|duration|seconds|secs|ms)$|^(time|total|predicted)")


PREFERRED_TIME = (("total_ms", 1e-3), ("time_ms", 1e-3), ("predicted_ms", 1e-3), ("total_s", 1.0),
                  ("time_s", 1.0), ("seconds", 1.0), ("total", 1.0), ("time", 1.0))


def _seconds(d):
    """A predicted total time in seconds from a prediction object of unknown exact shape:
    the total if named so (`total_ms`, `time_s`, ...), else a nested time object, else the
    first field that looks like a time."""
    if not isinstance(d, dict):
        return None
    for k, scale in PREFERRED_TIME:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v * scale
    for k, v in d.items():
        if isinstance(v, dict) and k in ("time", "predicted", "total"):
            s = _seconds(v)
            if s is not None:
                return s
    for k, v in d.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or "byte" in k:
            continue
        lk = k.lower()
        if not TIME_KEY.search(lk) and "time" not in lk:
            continue
        if lk.endswith("_ms") or lk == "ms":
            return v / 1e3
        if lk.endswith("_us"):
            return v / 1e6
        if lk.endswith(("_s", "_secs", "_seconds", "seconds", "secs")):
            return float(v)
    return None


def _bytes(d):
    if not isinstance(d, dict):
        return None
    for k in ("bytes", "bytes_total", "total_bytes"):
        if isinstance(d.get(k), (int, float)):
            return d[k]
    parts = [v for k, v in d.items() if "byte" in k.lower() and isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(parts) if parts else None


def predictions(report):
    """{protocol: {"time_s", "bytes"}} from the report's `choice` (or top-level
    `predictions`), whatever its exact shape; {} if there is none."""
    choice = report.get("choice") if isinstance(report.get("choice"), dict) else {}
    preds = None
    for src in (choice, report):
        for key in ("predictions", "predicted", "candidates", "protocols", "estimates", "costs"):
            if isinstance(src.get(key), (list, dict)):
                preds = src[key]
                break
        if preds is not None:
            break
    items = []
    if isinstance(preds, list):
        items = [(p.get("protocol") or p.get("name"), p) for p in preds if isinstance(p, dict)]
    elif isinstance(preds, dict):
        items = list(preds.items())
    out = {}
    for name, p in items:
        if name is None or not isinstance(p, dict):
            continue
        out[short(name)] = {"time_s": _seconds(p), "bytes": _bytes(p)}
    return out


def chosen(report):
    c = report.get("choice")
    if isinstance(c, dict):
        for k in ("protocol", "chosen", "choice", "selected"):
            if isinstance(c.get(k), str):
                return short(c[k])
    return short(report.get("protocol"))


# ---------------------------------------------------------------- one run


def psi_match(link, psi, contacts, protocol, cache_dir, run_timeout, log_path, extra=()):
    argv = ["ip", "netns", "exec", link.ns_c, psi, "match", "--server", f"http://{PSI_PROXY}",
            "--protocol", protocol, "--cache-dir", cache_dir, "--timeout", str(run_timeout),
            "--json", *extra, contacts]
    t = time.monotonic()
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=run_timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timeout after {run_timeout} s", "wall_s": time.monotonic() - t}
    wall = time.monotonic() - t
    with open(log_path, "a") as f:
        f.write(f"--- {protocol} exit {r.returncode} {wall:.3f}s\n{r.stderr}\n")
    if r.returncode != 0:
        # psi's errors never carry contact data (house rule); keep the last line.
        return {"ok": False, "error": (r.stderr.strip().splitlines() or ["?"])[-1][:300], "wall_s": wall}
    try:
        rep = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": False, "error": "no JSON report", "wall_s": wall}
    phases = rep.get("phases_ms") or {}
    client_ms = None
    for k in ("total_ms", "elapsed_ms", "wall_ms"):
        if isinstance(rep.get(k), (int, float)):
            client_ms = rep[k]
            break
    if client_ms is None:
        client_ms = sum(v for v in phases.values() if isinstance(v, (int, float)))
    return {
        "ok": True, "wall_s": wall, "client_s": client_ms / 1e3,
        "protocol_used": short(rep.get("protocol")), "chosen": chosen(rep),
        "bytes_sent": rep.get("bytes_sent"), "bytes_received": rep.get("bytes_received"),
        "requests": rep.get("requests"), "set_from_cache": rep.get("encoded_set_from_cache"),
        "matches": len(rep.get("matches") or []), "label_error": rep.get("label_error"),
        "phases_ms": phases, "choice": rep.get("choice"), "predictions": predictions(rep),
    }


class Server:
    """`psi serve` in the server namespace on one registry, limits opened for the grid."""

    def __init__(self, link, psi, db, w, log_path):
        self.link = link
        self.p = link.start("psi serve", link.ns_s, [
            psi, "serve", "--db", db, "--listen", f"{SERVER_ADDR}:0",
            "--max-client-items", str(max_client_items(w)), "--items-per-hour", "0",
            "--ot-sessions-per-hour", "0", "--max-ot-sessions-per-client", "8",
            "--request-timeout", "900", "--session-ttl", "900", "--rotate-every", "off",
            "--max-body-bytes", str(64 << 20)] + serve_extra_flags(psi),
            log_path=log_path, stdout=subprocess.PIPE)
        line = ""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = read_line(self.p, deadline - time.monotonic())
            m = re.search(r"listening on http://([0-9.]+:[0-9]+)", line)
            if m:
                self.addr = m.group(1)
                link.proxy("psi", PSI_PROXY, self.addr)
                return
            if not line and self.p.poll() is not None:
                break
        raise RuntimeError(f"psi serve did not start (see {log_path})")

    def close(self):
        self.link.stop(self.p)


# ---------------------------------------------------------------- the grid


def select_cells(grid, spec):
    nets = {n["name"]: n for n in grid["networks"]}
    works = {w["name"]: w for w in grid["workloads"]}
    names = []
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        if item == "all":
            names += [f"{n}/{w}" for w in works for n in nets]
        elif item == "smoke":
            names += grid["smoke"]
        else:
            names.append(item)
    cells = []
    for name in names:
        n, _, w = name.partition("/")
        if (n != "*" and n not in nets) or (w != "*" and w not in works):
            raise SystemExit(f"unknown cell {name!r} (NETWORK/WORKLOAD, either may be *; networks {list(nets)}, "
                             f"workloads {list(works)})")
        for nn in nets if n == "*" else [n]:
            for ww in works if w == "*" else [w]:
                if (nets[nn], works[ww]) not in cells:
                    cells.append((nets[nn], works[ww]))
    # Group by registry so each is served once; keep the grid's order otherwise.
    order = [w["name"] for w in grid["workloads"]]
    regs = []
    for w in grid["workloads"]:
        if w["registry"] not in regs:
            regs.append(w["registry"])
    cells.sort(key=lambda c: (regs.index(c[1]["registry"]), order.index(c[1]["name"])))
    return cells


def save(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


# The automatic choice, as `--protocols` names it: `auto` is a first run unless
# --auto-history; `auto-warm` is always an app that has run before (an untimed `auto` run
# first leaves its measurements), so one pass can time both beside the same forced runs.
AUTOS = ("auto", "auto-warm")


def cmd_run(a):
    if os.geteuid() != 0:
        raise SystemExit("field.py run needs root (network namespaces)")
    for tool in ("ip", "tc", "curl"):
        if not shutil.which(tool):
            raise SystemExit(f"field.py: {tool} not found")
    grid = load_json(a.grid)
    cells = select_cells(grid, a.cells)
    psi = os.path.abspath(a.psi)
    protocols = a.protocols.split(",") if a.protocols else accepted_protocols(psi)
    forced = [p for p in protocols if p not in AUTOS]
    log(f"protocols: {', '.join(protocols)}; {len(cells)} cells")
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="psi-field-", dir=work)
    log_path = os.path.join(tmp, "runs.log")
    deadline = time.monotonic() + a.max_minutes * 60
    doc = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release, "load_avg_start": os.getloadavg()},
        "psi": psi, "psi_version": sh(psi, "--version").stdout.strip(), "protocols": protocols,
        "toxiproxy": sh(a.toxiproxy, "-version", check=False).stdout.strip(),
        "auto_priors": a.auto_priors, "auto_history": a.auto_history, "repeat": a.repeat, "run_timeout_s": a.run_timeout,
        "calibration": {}, "runs": [], "skipped": [],
    }

    def on_signal(sig, _):
        raise SystemExit(f"field.py: signal {sig}")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    server = None
    try:
        with Link(os.path.abspath(a.toxiproxy)) as link:
            probe = link.start("probe", link.ns_s, [sys.executable, os.path.abspath(__file__), "_probe-server", SERVER_ADDR],
                               log_path=log_path, stdout=subprocess.PIPE)
            port = read_line(probe, 30).strip()
            if not port.isdigit():
                raise RuntimeError("the calibration probe server did not start")
            link.proxy("probe", PROBE_PROXY, f"{SERVER_ADDR}:{port}")
            # Calibration: once per harness start, every network the selected cells use.
            for net in {n["name"]: n for n, _ in cells}.values():
                link.set_network(net)
                m = calibrate(link, net, timeout=120)
                doc["calibration"][net["name"]] = m
                log(f"calibration {net['name']}: RTT {m['rtt_ms']:.1f} ms (set {m['expected_rtt_ms']:.1f}), "
                    f"down {m['down_mbit']:.2f} Mbit/s (set {net['down_mbit']}), up {m['up_mbit']:.2f} (set {net['up_mbit']})")
            link.stop(probe)
            save(a.out, doc)
            current_reg = None
            for net, w in cells:
                cell = f"{net['name']}/{w['name']}"
                if time.monotonic() > deadline:
                    doc["skipped"].append({"cell": cell, "reason": "total time budget"})
                    continue
                if current_reg != (w["registry"], max_client_items(w)):
                    if server:
                        server.close()
                    db = registry_db(psi, work, w, timeout=1800)
                    server = Server(link, psi, db, w, log_path)
                    current_reg = (w["registry"], max_client_items(w))
                link.set_network(net)
                contacts = os.path.join(tmp, f"contacts-{w['name']}.csv")
                if not os.path.exists(contacts):
                    contacts_csv(contacts, w)
                # Repeats interleave the protocols, each repeat starting one protocol later.
                plan = [(rep, protocols[(i + rep) % len(protocols)])
                        for rep in range(a.repeat) for i in range(len(protocols))]
                for rep, protocol in plan:
                    if time.monotonic() > deadline:
                        doc["skipped"].append({"cell": cell, "protocol": protocol, "reason": "total time budget"})
                        continue
                    cache = tempfile.mkdtemp(prefix="cache-", dir=tmp)  # fresh per run
                    warm = None
                    if w["cache"] == "warm":
                        # Fill the encoded-set cache with an untimed DH run on the same link.
                        warm = psi_match(link, psi, contacts, "dh", cache, a.run_timeout, log_path)
                        if not warm["ok"]:
                            log(f"{cell}: warming the cache failed: {warm['error']}")
                    extra = []
                    if protocol in AUTOS and a.auto_priors:
                        # The network's nominal figures as priors, like a platform's link hints.
                        extra = ["--down-mbit", str(net["down_mbit"]), "--up-mbit", str(net["up_mbit"]),
                                 "--rtt-ms", str(2 * net["one_way_ms"])]
                    history = None
                    if protocol == "auto-warm" or (protocol == "auto" and a.auto_history):
                        # An app that has run before on this network against this server: an
                        # untimed auto run leaves its measurements (device costs, the server's
                        # health, the link estimate); only measurements.json is kept, so the
                        # timed run's encoded-set cache stays as the workload says.
                        scratch = tempfile.mkdtemp(prefix="history-", dir=tmp)
                        history = psi_match(link, psi, contacts, "auto", scratch, a.run_timeout, log_path, extra)
                        kept = os.path.join(scratch, "measurements.json")
                        if history["ok"] and os.path.exists(kept):
                            shutil.copy(kept, os.path.join(cache, "measurements.json"))
                        else:
                            log(f"{cell}: the history run failed: {history.get('error', 'no measurements.json')}")
                        shutil.rmtree(scratch, ignore_errors=True)
                    r = psi_match(link, psi, contacts, "auto" if protocol in AUTOS else protocol, cache,
                                  a.run_timeout, log_path, extra)
                    shutil.rmtree(cache, ignore_errors=True)
                    r.update({"cell": cell, "network": net["name"], "workload": w["name"], "protocol": protocol,
                              "repeat": rep,
                              "expected_matches": w["matches"], "cache": w["cache"],
                              "warmed": None if warm is None else warm["ok"],
                              "history": None if history is None else history["ok"],
                              "load_avg": os.getloadavg()[0]})
                    doc["runs"].append(r)
                    save(a.out, doc)
                    if r["ok"]:
                        log(f"{cell} {protocol}: {r['wall_s']:.2f} s (client {r['client_s']:.2f} s), "
                            f"up {r['bytes_sent']} B, down {r['bytes_received']} B, "
                            f"{r['matches']}/{w['matches']} matches" + (f", chose {r['chosen']}" if protocol in AUTOS else ""))
                    else:
                        log(f"{cell} {protocol}: FAILED: {r['error']}")
            if server:
                server.close()
                server = None
    finally:
        doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        doc["machine"]["load_avg_end"] = os.getloadavg()
        save(a.out, doc)
        shutil.rmtree(tmp, ignore_errors=True) if not a.keep else log(f"kept {tmp}")
    log(f"results in {a.out}")
    return 0


# ---------------------------------------------------------------- summary, table, checks


def summarize(doc):
    """Per cell: each protocol's representative run (the median wall time of its successful
    repeats; a failure if none succeeded), the best forced protocol, auto's ratio to it, and
    the prediction error of each forced protocol."""
    cells = {}
    for r in doc["runs"]:
        cells.setdefault(r["cell"], {}).setdefault(r["protocol"], []).append(r)
    out = []
    for cell, by_proto in cells.items():
        runs = {}
        for p, rs in by_proto.items():
            ok = sorted((r for r in rs if r["ok"]), key=lambda r: r["wall_s"])
            rep = dict(ok[(len(ok) - 1) // 2] if ok else rs[0])
            if ok:
                rep["wall_s"] = statistics.median(r["wall_s"] for r in ok)
            rep["n_ok"], rep["n_failed"] = len(ok), len(rs) - len(ok)
            if p in AUTOS and ok:
                choices = [r["chosen"] for r in ok]
                rep["chosen"] = max(set(choices), key=choices.count)
            runs[p] = rep
        forced = {p: r for p, r in runs.items() if p not in AUTOS and r["ok"]}
        best = min(forced, key=lambda p: forced[p]["wall_s"]) if forced else None
        # Each automatic kind's ratio to the best forced run and its choice.
        ratios, choices = {}, {}
        for kind in AUTOS:
            k = runs.get(kind)
            ratios[kind] = k["wall_s"] / forced[best]["wall_s"] if k and k["ok"] and best else None
            choices[kind] = k.get("chosen") if k and k["ok"] else None
        # Predictions: the auto run's, else any run's.
        preds = {}
        for p in list(AUTOS) + list(runs):
            if p in runs and runs[p].get("predictions"):
                preds = runs[p]["predictions"]
                break
        # The model predicts the run (requests and computation), so its error is against the
        # client's own total; the process wall time adds start-up and the session's deletion.
        errors = {}
        for p, r in forced.items():
            t = (preds.get(p) or {}).get("time_s")
            measured = r.get("client_s") or r["wall_s"]
            if t and measured:
                errors[p] = t / measured - 1
        out.append({"cell": cell, "runs": runs, "best": best, "ratio": ratios["auto"], "predictions": preds,
                    "errors": errors, "choice": choices["auto"], "ratios": ratios, "choices": choices})
    return out


def fmt_t(r):
    return f"{r['wall_s']:.2f}" if r and r["ok"] else ("fail" if r else "-")


def fmt_mb(r):
    if not r or not r["ok"]:
        return "-"
    return f"{r['bytes_sent'] / 1e6:.2f}/{r['bytes_received'] / 1e6:.2f}"


def cmd_table(a):
    doc = load_json(a.results)
    protos = doc["protocols"]
    forced = [p for p in protos if p not in AUTOS]
    autos = [k for k in AUTOS if k in protos]
    head = ["cell", "runs"] + [f"{p} s" for p in forced] + [f"{p} MB up/down" for p in forced]
    for k in autos:
        head += [f"{k} s", f"{k}'s choice", "ratio"]
    s = summarize(doc)
    with_preds = any(c["predictions"] for c in s)
    if with_preds:
        head += [f"{p} predicted s (vs client total)" for p in forced]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in s:
        runs = c["runs"]
        row = [c["cell"], str(min(r["n_ok"] + r["n_failed"] for r in runs.values()))]
        row += [f"**{fmt_t(runs.get(p))}**" if p == c["best"] else fmt_t(runs.get(p)) for p in forced]
        row += [fmt_mb(runs.get(p)) for p in forced]
        for k in autos:
            r = c["ratios"][k]
            row += [fmt_t(runs.get(k)), c["choices"][k] or "-", f"{r:.2f}" if r else "-"]
        for p in forced if with_preds else []:
            t = (c["predictions"].get(p) or {}).get("time_s")
            row.append(f"{t:.2f} ({c['errors'][p]:+.0%})" if t and p in c["errors"] else "-")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    for k in autos:
        ratios = [c["ratios"][k] for c in s if c["ratios"][k] is not None]
        if not ratios:
            continue
        within = sum(r <= 1.10 for r in ratios)
        lines.append(f"{k} within 1.10x of the best forced protocol in {within} of {len(ratios)} cells "
                     f"({within / len(ratios):.0%}; target 95%); worst ratio {max(ratios):.2f} (target 1.25).")
    if not any(c["ratios"][k] is not None for c in s for k in AUTOS):
        lines.append("No `auto` runs in these results (the binary's `psi match --protocol` did not accept `auto`).")
    if not with_preds:
        lines.append("No run's report carries predictions (no `choice` object), so no prediction error.")
    errs = [abs(e) for c in s for e in c["errors"].values()]
    if errs:
        lines.append(f"Prediction error |predicted/measured - 1|: median {statistics.median(errs):.0%}, "
                     f"max {max(errs):.0%} over {len(errs)} protocol runs.")
    cal = doc.get("calibration") or {}
    if cal:
        lines += ["", "| network | RTT ms (set) | down Mbit/s | up Mbit/s |", "|---|---|---|---|"]
        for n, m in cal.items():
            lines.append(f"| {n} | {m['rtt_ms']:.1f} ({m['expected_rtt_ms']:.1f}) | {m['down_mbit']:.2f} | {m['up_mbit']:.2f} |")
    if doc.get("skipped"):
        lines += ["", f"Skipped (time budget): {len(doc['skipped'])} runs."]
    print("\n".join(lines))
    return 0


def cmd_check(a):
    """The smoke test's assertions: every selected run ran, found exactly the expected
    matches, moved bytes both ways, took at least the link's round-trip floor, and the
    calibration saw the configured link (rates within 25%, RTT from 0.8x - 1 ms to
    1.5x + 20 ms of the set one)."""
    doc = load_json(a.results)
    grid = {n["name"]: n for n in load_json(a.grid)["networks"]}
    problems = []
    for name, m in doc["calibration"].items():
        net = grid[name]
        for d in ("down", "up"):
            got, want = m[f"{d}_mbit"], net[f"{d}_mbit"]
            if not 0.75 * want <= got <= 1.25 * want:
                problems.append(f"calibration {name}: {d} {got:.2f} Mbit/s, configured {want}")
        # The lower bound is strict (a missing latency toxic shows at once); the upper one
        # leaves room for a loaded machine's scheduling delays.
        want = m["expected_rtt_ms"]
        if not 0.8 * want - 1 <= m["rtt_ms"] <= 1.5 * want + 20:
            problems.append(f"calibration {name}: RTT {m['rtt_ms']:.1f} ms, configured {m['expected_rtt_ms']:.1f}")
    if not doc["runs"]:
        problems.append("no runs")
    # A run skipped for the time budget is a run the smoke test did not check.
    for sk in doc.get("skipped", []):
        problems.append(f"skipped {sk.get('cell')} {sk.get('protocol', '(every protocol)')}: {sk.get('reason')}")
    for r in doc["runs"]:
        tag = f"{r['cell']} {r['protocol']}"
        if not r["ok"]:
            problems.append(f"{tag}: {r['error']}")
            continue
        if r["matches"] != r["expected_matches"]:
            problems.append(f"{tag}: {r['matches']} matches, expected {r['expected_matches']}")
        if not (r["bytes_sent"] or 0) > 0 or not (r["bytes_received"] or 0) > 0:
            problems.append(f"{tag}: no bytes counted")
        # At least two round trips (session, query) cross the emulated latency.
        floor = 2 * 2 * grid[r["network"]]["one_way_ms"] / 1e3
        if r["wall_s"] < floor:
            problems.append(f"{tag}: {r['wall_s']:.3f} s is below the link's floor {floor:.3f} s")
        if r["protocol"] in AUTOS and r["chosen"] not in doc["protocols"]:
            problems.append(f"{tag}: auto's choice {r['chosen']!r} is not a known protocol")
        if r["protocol"] not in AUTOS and r["protocol_used"] != r["protocol"]:
            problems.append(f"{tag}: ran {r['protocol_used']}")
        if r["cache"] == "warm" and r["protocol_used"] == "dh" and not r["set_from_cache"]:
            problems.append(f"{tag}: warm cache, but the encoded set was not taken from it")
    for p in problems:
        print("field check:", p, file=sys.stderr)
    print(f"field check: {len(doc['runs'])} runs, {len(problems)} problems")
    return 1 if problems else 0


def cmd_merge(a):
    """One results file from several starts (e.g. the grid once, then small cells again
    with --repeat): runs concatenated (the table takes each protocol's median per cell),
    the calibration of each start kept, the latest one shown."""
    docs = [load_json(p) for p in a.results]
    out = dict(docs[-1])
    out["started"] = min(d["started"] for d in docs)
    out["finished"] = max(d.get("finished", d["started"]) for d in docs)
    out["protocols"] = list(dict.fromkeys(p for d in docs for p in d["protocols"]))
    out["sources"] = [{k: d.get(k) for k in ("started", "finished", "machine", "psi_version", "repeat",
                                             "auto_priors", "auto_history", "calibration")} for d in docs]
    out["calibration"] = {}
    out["runs"], out["skipped"] = [], []
    for i, d in enumerate(docs):
        out["calibration"].update(d["calibration"])
        out["runs"] += [dict(r, source=i) for r in d["runs"]]
        out["skipped"] += d.get("skipped", [])
    save(a.out, out)
    return 0


def cmd_cleanup(_):
    """Removes namespaces left by harnesses that were killed (SIGKILL skips the cleanup)."""
    for line in sh("ip", "netns", "list").stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = re.fullmatch(NS_PREFIX + r"(\d+)x[0-9a-f]{3}[cs]", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            for pid in sh("ip", "netns", "pids", name, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            sh("ip", "netns", "del", name, check=False)
            log(f"removed {name}")
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_probe-server":
        return probe_server(sys.argv[2])
    if len(sys.argv) > 1 and sys.argv[1] == "_probe-client":
        return probe_client(sys.argv[2], *map(int, sys.argv[3:7]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run cells of the grid")
    r.add_argument("--psi", required=True, help="the psi binary (release for the grid)")
    r.add_argument("--toxiproxy", required=True, help="the toxiproxy server binary (v2.5.0)")
    r.add_argument("--grid", default=GRID)
    r.add_argument("--cells", default="smoke", help="smoke, all, or NETWORK/WORKLOAD,... (either may be *)")
    r.add_argument("--protocols", help="comma separated (default: every value `psi match --protocol` accepts)")
    r.add_argument("--out", default="field-results.json")
    r.add_argument("--work", default=os.environ.get("PSI_FIELD_WORK", "/tmp/psi-field"),
                   help="registries (kept between starts) and a per-start temporary directory")
    r.add_argument("--run-timeout", type=int, default=300, help="seconds per psi match")
    r.add_argument("--max-minutes", type=float, default=180, help="no run starts after this")
    r.add_argument("--auto-history", action="store_true",
                   help="before each timed auto run, an untimed auto run on the same link whose measurements "
                        "(device costs, server health, link estimate; not the encoded set) the timed run starts "
                        "from, as in an app that has run before; default: a fresh cache (a first run)")
    r.add_argument("--auto-priors", action="store_true",
                   help="give auto the network's nominal rates and RTT as priors (--down-mbit, --up-mbit, "
                        "--rtt-ms), as a platform's link hints would; default: none (auto measures)")
    r.add_argument("--repeat", type=int, default=1, help="runs per protocol and cell (the table takes the median)")
    r.add_argument("--keep", action="store_true", help="keep the per-start directory (logs)")
    r.set_defaults(fn=cmd_run)
    t = sub.add_parser("table", help="print the Markdown table")
    t.add_argument("results")
    t.set_defaults(fn=cmd_table)
    c = sub.add_parser("check", help="assert the smoke test's conditions")
    c.add_argument("results")
    c.add_argument("--grid", default=GRID)
    c.set_defaults(fn=cmd_check)
    m = sub.add_parser("merge", help="merge results files of several starts")
    m.add_argument("results", nargs="+")
    m.add_argument("--out", required=True)
    m.set_defaults(fn=cmd_merge)
    k = sub.add_parser("cleanup", help="remove namespaces of dead harnesses")
    k.set_defaults(fn=cmd_cleanup)
    a = ap.parse_args()
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
