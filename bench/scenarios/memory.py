"""Memory over a long run: does anything stay behind as connections come and go?

    python bench/memory.py [--requests 140000] [--clients 200000] [--peers h2ping,go]
    python bench/memory.py --quick          # 30,000 of each, about 2 minutes

nginx (HTTP/2 over TLS, ``keepalive_requests 50``, as in churn.py) ends every
upstream connection after 50 streams. Two phases per peer, each on a freshly
started proxy pinned to core 0 (nginx and h2load on core 1):

- ``rotation``: h2load sends ``--requests`` POSTs of 2,000 bytes over 50
  kept-alive HTTP/1.1 connections, in rounds of ``--round``: nginx retires one
  upstream connection every 50 requests;
- ``clients``: ``--clients`` requests, each on a client connection of its own
  (``Connection: close``; h2load connects again), in rounds of ``--round``: one
  client connection retired per request, and upstream ones as above.

After each round (and ``--pause`` seconds) the proxy's RSS is read, and for
h2ping its live objects by type (peers/counted.py: what the cyclic collector
tracks, start-up's objects left out, garbage that waits for it counted in). The
first ``--warmup`` requests (40,000) and clients (20,000) warm the process up:
caches fill, the heap reaches its working size. Reported per phase and peer:
RSS after the warm-up and at the end, the growth between, and the slope, in KiB
per 1,000 connections retired (upstream ones in ``rotation``, client ones in
``clients``; least squares over the samples from the warm-up on; goal: 0 within
noise); for h2ping, live objects then and at the end, and the types that grew.
``h2ping`` runs on uvloop (what ``python -m h2ping`` uses), ``h2ping-asyncio`` on
asyncio's own loop, ``go`` is the Go sidecar (peers/gopeer.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.measure import cpu_model
from common.procs import (
    BENCH_DIR,
    BenchError,
    Proc,
    Procs,
    bench_module,
    find_tool,
    free_port,
    tree_rss_kib,
    wait_port,
    write_results,
)
from load.origin import ECHO_MODULE, missing_echo_origin, write_certs
from peers import gopeer

from .churn import BODY_SIZE, CONNECTIONS, H2LOAD_LINE, NGINX_CONF, STATUS_LINE

PEERS = ("h2ping", "go")
KNOWN_PEERS = ("h2ping", "h2ping-asyncio", "go")
#: nginx's keepalive_requests in NGINX_CONF: one upstream connection per this many requests.
STREAMS_PER_CONNECTION = 50


@dataclass
class Sample:
    requests: int  # sent in the phase so far
    retired: int  # connections retired so far (what the phase counts)
    rss_kib: int
    objects: dict[str, int] | None = None  # h2ping's live objects by type


@dataclass
class Phase:
    name: str
    warmup: int  # requests
    samples: list[Sample] = field(default_factory=list)
    not_2xx: int = 0

    def after_warmup(self) -> list[Sample]:
        return [s for s in self.samples if s.requests >= self.warmup]

    def report(self) -> dict[str, Any]:
        kept = self.after_warmup()
        first, last = kept[0], kept[-1]
        report: dict[str, Any] = {
            "requests": last.requests,
            "retired": last.retired,
            "not_2xx": self.not_2xx,
            "rss_kib": [s.rss_kib for s in self.samples],
            "rss_after_warmup_kib": first.rss_kib,
            "rss_end_kib": last.rss_kib,
            "growth_kib": last.rss_kib - first.rss_kib,
            "kib_per_1000_retired": slope([(s.retired, s.rss_kib) for s in kept]) * 1000,
        }
        if first.objects is not None and last.objects is not None:
            report["objects_after_warmup"] = sum(first.objects.values())
            report["objects_end"] = sum(last.objects.values())
            grown = {
                name: last.objects.get(name, 0) - first.objects.get(name, 0)
                for name in first.objects.keys() | last.objects.keys()
            }
            report["objects_grown"] = dict(
                sorted(((n, d) for n, d in grown.items() if d), key=lambda nd: -nd[1])[:8]
            )
        return report


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (0 with fewer than two distinct x)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if not spread:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


class Proxy:
    """One peer's proxy process, and what can be read of it."""

    def __init__(self, peer: str, procs: Procs, tmp: Path, upstream: str) -> None:
        self.port = free_port()
        self.counts = tmp / f"objects-{self.port}.json"
        listen = f"127.0.0.1:{self.port}"
        if peer == "go":
            binary = gopeer.sidecar_binary()
            if binary is None:
                raise BenchError("the Go sidecar is not available")
            argv = [str(binary), "-listen", listen, "-upstream", upstream]
            env = {**os.environ, "SSL_CERT_FILE": str(tmp / "ca.pem")}
            self.counted = False
        else:
            loop = ["--asyncio"] if peer == "h2ping-asyncio" else []
            argv = [*bench_module("peers.counted"), str(self.counts), *loop]
            argv += ["-listen", listen, "-upstream", upstream, "-ca-file", str(tmp / "ca.pem")]
            env = dict(os.environ)
            self.counted = True
        self.procs = procs
        self.proc: Proc = procs.start(peer, argv, cpu=0, env=env)
        wait_port(self.port, self.proc)

    def objects(self, timeout: float = 30.0) -> dict[str, int] | None:
        if not self.counted:
            return None
        with contextlib.suppress(FileNotFoundError):
            self.counts.unlink()
        os.kill(self.proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while not self.counts.exists():
            if time.monotonic() > deadline:
                raise BenchError(f"no object counts from the proxy:\n{self.proc.log_tail()}")
            time.sleep(0.02)
        by_type: dict[str, int] = json.loads(self.counts.read_text())["by_type"]
        return by_type

    def stop(self) -> None:
        self.procs.stop(self.proc, signal.SIGTERM, 30.0)


def h2load(port: int, body: Path, requests: int, close: bool) -> int:
    """Send ``requests`` POSTs through the proxy; return how many got a 2xx."""
    argv = ["taskset", "-c", "1", find_tool("h2load") or "h2load", "--h1", "-n", str(requests)]
    argv += ["-c", str(CONNECTIONS), "-t", "1", "-d", str(body)]
    if close:
        argv += ["-H", "Connection: close"]
    out = subprocess.run(
        [*argv, f"http://127.0.0.1:{port}/echo"], capture_output=True, text=True, timeout=1800
    ).stdout
    statuses = STATUS_LINE.search(out)
    if H2LOAD_LINE.search(out) is None or statuses is None:
        raise BenchError(f"h2load printed no summary:\n{out[-2000:]}")
    return int(statuses.group(1))


def run_phase(
    peer: str, name: str, procs: Procs, tmp: Path, upstream: str, args: argparse.Namespace
) -> Phase:
    close = name == "clients"
    total = args.clients if close else args.requests
    phase = Phase(name, args.client_warmup if close else args.warmup)
    proxy = Proxy(peer, procs, tmp, upstream)
    body = tmp / "body"
    body.write_bytes(os.urandom(BODY_SIZE))
    sent = 0
    try:
        while sent < total:
            count = min(args.round, total - sent)
            phase.not_2xx += count - h2load(proxy.port, body, count, close)
            sent += count
            time.sleep(args.pause)
            retired = sent if close else sent // STREAMS_PER_CONNECTION
            phase.samples.append(
                Sample(sent, retired, tree_rss_kib(proxy.proc.pid), proxy.objects())
            )
            print(
                f"  {peer} {name}: {sent} requests, RSS {phase.samples[-1].rss_kib} KiB",
                flush=True,
            )
    finally:
        proxy.stop()
    return phase


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=140_000, help="rotation phase")
    parser.add_argument("--clients", type=int, default=200_000, help="clients phase")
    parser.add_argument("--warmup", type=int, default=40_000, help="rotation requests")
    parser.add_argument("--client-warmup", type=int, default=20_000, help="clients")
    parser.add_argument("--round", type=int, default=10_000, help="requests per sample")
    parser.add_argument("--pause", type=float, default=1.5, help="seconds before a sample")
    parser.add_argument("--phases", default="rotation,clients")
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--quick", action="store_true", help="30,000 of each, rounds of 5,000")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "memory.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests = args.clients = 30_000
        args.warmup = args.client_warmup = 10_000
        args.round = 5_000
    peers = args.peers.split(",")
    if unknown := set(peers) - set(KNOWN_PEERS):
        parser.error(f"unknown peers: {', '.join(sorted(unknown))}")
    if missing := missing_echo_origin():
        print(missing)
        return 2
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="h2ping-memory-") as name:
        tmp = Path(name)
        write_certs(tmp)
        procs = Procs(tmp)
        try:
            port = free_port()
            conf = tmp / "nginx.conf"
            conf.write_text(NGINX_CONF.format(tmp=tmp, echo_module=ECHO_MODULE, port=port))
            nginx_argv = [find_tool("nginx") or "nginx", "-p", str(tmp), "-c", str(conf)]
            nginx = procs.start("nginx", [*nginx_argv, "-g", "daemon off;"], cpu=1)
            wait_port(port, nginx)
            for phase in args.phases.split(","):
                for peer in peers:
                    done = run_phase(peer, phase, procs, tmp, f"https://127.0.0.1:{port}", args)
                    results.setdefault(phase, {})[peer] = done.report()
        finally:
            procs.close()
    doc = {
        "scenario": "memory",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpu": cpu_model(),
        "nproc": os.cpu_count(),
        "args": vars(args) | {"out": str(args.out)},
        "phases": results,
    }
    write_results(doc, args.out)
    print_table(results)
    return 0


def print_table(results: dict[str, dict[str, Any]]) -> None:
    print(
        f"\n{'phase':<9} {'peer':<15} {'requests':>9} {'retired':>8} {'not 2xx':>7} "
        f"{'RSS warm':>9} {'RSS end':>8} {'growth':>7} {'KiB/1k retired':>15}"
    )
    for phase, peers in results.items():
        for peer, r in peers.items():
            print(
                f"{phase:<9} {peer:<15} {r['requests']:>9} {r['retired']:>8} {r['not_2xx']:>7} "
                f"{r['rss_after_warmup_kib'] / 1024:>7.1f}Mi {r['rss_end_kib'] / 1024:>6.1f}Mi "
                f"{r['growth_kib']:>5}Ki {r['kib_per_1000_retired']:>15.1f}"
            )
    for phase, peers in results.items():
        for peer, r in peers.items():
            if "objects_end" in r:
                grown = ", ".join(f"{n} {d:+d}" for n, d in r["objects_grown"].items())
                print(
                    f"{peer} {phase}: live objects {r['objects_after_warmup']} after warm-up, "
                    f"{r['objects_end']} at the end; grew: {grown or 'none'}"
                )


if __name__ == "__main__":
    sys.exit(main())
