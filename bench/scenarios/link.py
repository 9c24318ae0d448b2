"""The link scenario: h2ping and the Go binary across a long link, side by side.

    python bench/link.py [--rtts 30,80] [--rounds 3] [--peers go,h2ping] [--proxy]

Between each proxy and nginx sits ``h2ping.testing.DelayLink`` (a process of its
own): every byte half a round trip late each way, so TLS, HTTP/2's SETTINGS and
the flow-control windows cost what they cost across the internet (TCP's own
handshake is the one thing not delayed). The client is aiohttp on loopback, one
connection per request. Per RTT and peer, in turn, ``--rounds`` times, medians:

- first request after start: the proxy started, its port open, one GET /tiny;
- warm small request: the median of 20 GET /tiny one after another;
- 20 at once: the slowest of 20 GET /tiny sent together;
- 512 KiB POST: the median of 5 (to /upload);
- 16 MiB download and upload: MB/s (10^6 bytes), the median of 3;
- across rotation: 150 GET /tiny over 12 s with ``-max-conn-age 8s``, the slowest.

With ``--proxy``, h2ping's connections go through squid (``-proxy``), started by
the bench on loopback in front of the link, as a cluster's egress proxy sits in
front of the internet: every row then includes a CONNECT and squid's relaying.
The Go binary cannot use a proxy (it ignores HTTPS_PROXY) and goes directly; the
peer ``h2ping-direct`` runs h2ping without the proxy in the same run, so that
what the proxy costs is its own column (``--peers go,h2ping,h2ping-direct``).

Results as JSON in bench/results/link-TIME.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from common.procs import (
    BENCH_DIR,
    BenchError,
    Procs,
    bench_module,
    free_port,
    run_on_uvloop,
    serve_until_killed,
    wait_port,
    write_results,
)
from common.squid import Squid
from load.origin import BIG_SIZE, start_origin
from peers import gopeer

ROTATION_AGE = "8s"
ROTATION_REQUESTS, ROTATION_SECONDS = 150, 12.0
ROWS = (
    "first_request_ms",
    "warm_ms",
    "twenty_slowest_ms",
    "post_512k_ms",
    "download_mb_s",
    "upload_mb_s",
    "rotation_slowest_ms",
)


def main() -> None:
    args = parse_args()
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": [sys.executable, *sys.argv],
        "proxy": "squid" if args.proxy else None,
        "rtts": {},
    }
    with tempfile.TemporaryDirectory(prefix="h2ping-link-") as tmp_name:
        tmp = Path(tmp_name)
        procs = Procs(tmp)
        try:
            origin = start_origin(procs, tmp, max_streams=128)
            for rtt in args.rtts:
                link_port = free_port()
                argv = [*bench_module("scenarios.link"), "--link"]
                link = procs.start(
                    f"link-{rtt}", [*argv, str(origin.tls_port), str(link_port), str(rtt)]
                )
                wait_port(link_port, link)
                upstream = f"https://localhost:{link_port}"
                squid = Squid(procs, [link_port]) if args.proxy else None
                via = squid.url if squid is not None else None
                rounds: dict[str, list[dict[str, float]]] = {peer: [] for peer in args.peers}
                for _ in range(args.rounds):
                    for peer in args.peers:
                        ca = str(origin.ca_path)
                        rounds[peer].append(run_peer(procs, peer, upstream, ca, via))
                medians = {peer: _medians(runs) for peer, runs in rounds.items()}
                results["rtts"][str(rtt)] = {"rounds": rounds, "medians": medians}
                if squid is not None:
                    results["rtts"][str(rtt)]["proxy_tunnels"] = squid.tunnels()
                    squid.stop()
                print_table(rtt, medians, via is not None)
                procs.stop(link)
        finally:
            procs.close()
    out = BENCH_DIR / "results" / f"link-{time.strftime('%Y%m%d-%H%M%S')}.json"
    write_results(results, out)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rtts", default="30,80", help="round trips in ms, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peers", default="go,h2ping", help="go, h2ping, h2ping-direct")
    parser.add_argument(
        "--proxy",
        action="store_true",
        help="h2ping through squid (-proxy), started in front of the link; Go goes directly",
    )
    args = parser.parse_args()
    args.rtts = [int(rtt) for rtt in args.rtts.split(",")]
    args.peers = args.peers.split(",")
    return args


def run_peer(
    procs: Procs, name: str, upstream: str, ca: str, via: str | None = None
) -> dict[str, float]:
    """Every row but rotation on one start of the peer, then rotation on another;
    ``via``: the forward proxy h2ping goes through (``h2ping-direct`` and Go do not)."""
    figures: dict[str, float] = {}
    proxy, port, stop = start_proxy(procs, name, upstream, ca, rotate=False, via=via)
    try:
        figures.update(run_on_uvloop(_rows(port)))
    finally:
        procs.stop(proxy, stop, 30)
    proxy, port, stop = start_proxy(procs, name, upstream, ca, rotate=True, via=via)
    try:
        figures["rotation_slowest_ms"] = run_on_uvloop(_rotation(port))
    finally:
        procs.stop(proxy, stop, 30)
    return figures


def start_proxy(
    procs: Procs, name: str, upstream: str, ca: str, *, rotate: bool, via: str | None = None
) -> tuple[Any, int, int]:
    port = free_port()
    if name in ("h2ping", "h2ping-direct"):
        argv = [sys.executable, "-m", "h2ping", "-listen", f"127.0.0.1:{port}"]
        argv += ["-upstream", upstream, "-ca-file", ca]
        if via is not None and name == "h2ping":
            argv += ["-proxy", via]
        env, stop = None, signal.SIGINT
    else:
        binary = gopeer.sidecar_binary()
        if binary is None:
            raise BenchError("the Go sidecar could not be built (see above)")
        argv = [str(binary), "-listen", f"127.0.0.1:{port}", "-upstream", upstream]
        argv += ["-shutdown-grace", "5s"]
        env, stop = {"SSL_CERT_FILE": ca, "PATH": "/usr/bin:/bin"}, signal.SIGTERM
    if rotate:
        argv += ["-max-conn-age", ROTATION_AGE]
    proxy = procs.start(name, argv, env=env)
    wait_port(port, proxy)
    return proxy, port, stop


async def _rows(port: int) -> dict[str, float]:
    base = f"http://127.0.0.1:{port}"
    figures = {"first_request_ms": await _timed_get(f"{base}/tiny")}
    warm = [await _timed_get(f"{base}/tiny") for _ in range(20)]
    figures["warm_ms"] = statistics.median(warm)
    figures["twenty_slowest_ms"] = max(
        await asyncio.gather(*(_timed_get(f"{base}/tiny") for _ in range(20)))
    )
    body = b"p" * (512 * 1024)
    figures["post_512k_ms"] = statistics.median(
        [await _timed_post(f"{base}/upload", body) for _ in range(5)]
    )
    figures["download_mb_s"] = statistics.median(
        [BIG_SIZE / 1e6 / (await _timed_get(f"{base}/16m", BIG_SIZE) / 1000) for _ in range(3)]
    )
    big = b"u" * BIG_SIZE
    figures["upload_mb_s"] = statistics.median(
        [BIG_SIZE / 1e6 / (await _timed_post(f"{base}/upload", big) / 1000) for _ in range(3)]
    )
    return figures


async def _rotation(port: int) -> float:
    """150 GETs spread over 12 s, across the retirement at 7.2-8 s: the slowest."""
    base = f"http://127.0.0.1:{port}"
    await _timed_get(f"{base}/tiny")  # the connection that will retire
    pause = ROTATION_SECONDS / ROTATION_REQUESTS
    tasks = []
    for _ in range(ROTATION_REQUESTS):
        tasks.append(asyncio.ensure_future(_timed_get(f"{base}/tiny")))
        await asyncio.sleep(pause)
    return max(await asyncio.gather(*tasks))


async def _timed_get(url: str, size: int | None = None) -> float:
    started = time.perf_counter()
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session, session.get(url) as resp:
        data = await resp.read()
    if resp.status != 200 or (size is not None and len(data) != size):
        raise BenchError(f"GET {url}: {resp.status}, {len(data)} bytes")
    return (time.perf_counter() - started) * 1000


async def _timed_post(url: str, body: bytes) -> float:
    started = time.perf_counter()
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(url, data=body) as resp,
    ):
        text = await resp.text()
    if resp.status != 200 or not text.startswith("ok "):
        raise BenchError(f"POST {url}: {resp.status} {text[:80]!r}")
    return (time.perf_counter() - started) * 1000


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {row: statistics.median(run[row] for run in runs) for row in ROWS}


def print_table(rtt: int, medians: dict[str, dict[str, float]], proxied: bool = False) -> None:
    peers = list(medians)
    through = " (h2ping through squid, go directly)" if proxied else ""
    print(f"\nRTT {rtt} ms (medians){through}", flush=True)
    print(f"  {'row':<22}" + "".join(f"{peer:>15}" for peer in peers) + "   h2ping/go")
    for row in ROWS:
        values = [medians[peer][row] for peer in peers]
        ratio = ""
        if "go" in medians and "h2ping" in medians and medians["go"][row]:
            ratio = f"{medians['h2ping'][row] / medians['go'][row]:>10.2f}x"
        print(f"  {row:<22}" + "".join(f"{v:>15.1f}" for v in values) + ratio, flush=True)
    print(json.dumps({"rtt_ms": rtt, "medians": medians}), flush=True)


# ---------------------------------------------------------------------- the link


def link(target_port: int, port: int, rtt_ms: int) -> None:
    """A DelayLink in a process of its own, until killed."""
    from h2ping.testing import DelayLink

    serve_until_killed(lambda: DelayLink("127.0.0.1", target_port, rtt=rtt_ms / 1000, port=port))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--link":
        link(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
