"""Fault scenarios, h2ping and the Go sidecar side by side, in one command.

    python bench/faults.py [--quick] [--peers h2ping,go] [--out FILE] [--keep-tmp]

a. ``header``: one response carries a 120 KiB header block while 20 ordinary
   requests are in flight on the same upstream connection: how many of the 21 are ok.
b. ``storm``: the origin refuses 50% of streams (RST_STREAM REFUSED_STREAM) for 10 s
   while 40 clients POST back to back: failures, ok latency p50/p99/max.
c. ``fairness``: small GETs (4 connections, one every 10 ms each) while another
   client downloads 200 MiB as fast as it can: their p50/p99 then, against idle.
d. ``uploads``: 10 concurrent 20 MiB uploads whose Content-Length is above
   ``-retry-body-limit`` (16 MiB, both proxies' default): proxy RSS idle, peak, after.
e. ``floods``: an origin floods the connection of one request with frames that cost
   the proxy work (``load/flood_origin.py``: 16 KiB SETTINGS at 95/s, PRIORITY,
   unknown types, 103 heads, GOAWAY, RST_STREAM on idle streams, DATA after the
   proxy's reset), each for up to 10 s (5 s with --quick): per attack, the proxy's
   CPU seconds and RSS growth, whether and when it ended the connection and with
   which code, its log lines, and whether the next request is served.

Every request carries an id; bodies are checked by hash, and the origin counts each
id, so each scenario also says whether any request was processed twice or left
hanging. a, b and d use ``load/fault_origin.py`` (h2ping.testing's ScriptedUpstream);
c uses nginx (load/origin.py), which serves the 200 MiB fast, and its access log.

Everything is on 127.0.0.1: the proxy pinned to core 0, this process (the clients),
the origins and curl to core 1. Every step has a time limit; every process started
is stopped at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from common.measure import percentiles
from common.procs import BENCH_DIR, BenchError, find_tool, write_results

PEERS = ("h2ping", "go")
MIB = 1024 * 1024
STORM_CLIENTS = 40
UPLOADS, UPLOAD_SIZE = 10, 20 * MIB
SMALL_CONNECTIONS, SMALL_EVERY_S = 4, 0.010


# a. a 120 KiB response header block among 20 ordinary requests ------------------------


async def header_case(run: Run) -> dict[str, Any]:
    from load.fault_origin import big_headers, body_for
    from load.h1client import fetch

    origin = await run.fault_origin("--hold", "21", "--big-header-kib", "120")
    port = await run.proxy(origin)
    warm = await fetch(port, "GET", "/warm?id=warm", timeout=10)
    # Go writes headers sorted by name: compare them as a set, not in order.
    expected_big = sorted((n.encode(), v.encode()) for n, v in big_headers(120))

    async def one(path: str, request_id: str) -> str:
        try:
            response = await fetch(port, "GET", f"{path}?id={request_id}", timeout=15)
        except (OSError, TimeoutError) as exc:
            return f"{type(exc).__name__}"
        if response.status != 200:
            return f"status {response.status}"
        if path == "/big":
            got = sorted((n, v) for n, v in response.headers if n.startswith(b"x-big-"))
            return "ok" if got == expected_big else "header block altered"
        return "ok" if response.body == body_for(request_id) else "bad body"

    ids = ["big"] + [f"ok-{i}" for i in range(20)]
    outcomes = await asyncio.gather(*(one("/big" if i == "big" else "/ok", i) for i in ids))
    stats = await run.stop_origin()
    first_connections = {stats["connections"].get(i, [0])[0] for i in ids}
    return {
        "warm_status": warm.status,
        "ok": outcomes.count("ok"),
        "of": len(ids),
        "big_ok": outcomes[0] == "ok",
        "outcomes": dict(collections.Counter(outcomes)),
        "same_connection": len(first_connections) == 1,
        "header_block_bytes": stats["big_block_bytes"],
        **_origin_checks(stats),
    }


# b. a refusal storm under 40 concurrent POSTs ---------------------------------------


async def storm_case(run: Run) -> dict[str, Any]:
    from load.h1client import Connection, fetch

    seconds = 4.0 if run.quick else 10.0
    origin = await run.fault_origin("--storm-seconds", str(seconds), "--refuse", "0.5")
    port = await run.proxy(origin)
    await fetch(port, "GET", "/warm?id=warm", timeout=10)
    latencies: list[float] = []
    outcomes: collections.Counter[str] = collections.Counter()
    client_ok: set[str] = set()
    started = time.monotonic()

    async def client(index: int) -> None:
        conn = Connection(port)
        try:
            await requests(conn, index)
        finally:
            conn.close()

    async def requests(conn: Connection, index: int) -> None:
        n = 0
        while time.monotonic() - started < seconds:
            n += 1
            request_id = f"s{index}-{n}"
            body = hashlib.sha256(request_id.encode()).digest() * 128  # 4 KiB
            try:
                response = await conn.request(
                    "POST", f"/storm?id={request_id}", [("Content-Type", "x/y")], body, 60
                )
            except TimeoutError:
                outcomes["hanging (no answer in 60 s)"] += 1
                continue
            except OSError as exc:
                outcomes[type(exc).__name__] += 1
                continue
            if response.status != 200:
                outcomes[f"status {response.status}"] += 1
            elif response.body != hashlib.sha256(body).hexdigest().encode():
                outcomes["bad body"] += 1
            else:
                outcomes["ok"] += 1
                client_ok.add(request_id)
                latencies.append(response.seconds)

    await asyncio.gather(*(client(i) for i in range(STORM_CLIENTS)))
    stats = await run.stop_origin()
    ok = outcomes.pop("ok", 0)
    answered = {i for i in stats["answered"] if i.startswith("s")}
    return {
        "storm_seconds": seconds,
        "requests": ok + sum(outcomes.values()),
        "ok": ok,
        "failed": sum(outcomes.values()),
        "failures": dict(outcomes),
        **_latency(latencies),
        "refused_by_origin": stats["refused"],
        "ok_but_not_answered": len(client_ok - answered),
        **_origin_checks(stats),
    }


# c. small requests beside one fast download ---------------------------------------------


async def fairness_case(run: Run) -> dict[str, Any]:
    from common.procs import tree_cpu_seconds
    from load.h1client import Connection
    from load.origin import HUGE_SIZE

    idle_s = 2.0 if run.quick else 4.0
    port = await run.proxy(run.nginx)
    prefix = f"{run.peer}-{run.scenario_started:.0f}"
    samples: list[tuple[float, float]] = []  # (start, seconds) of ok small GETs
    failures: collections.Counter[str] = collections.Counter()
    stop = asyncio.Event()
    sent = 0

    async def small(index: int) -> None:
        conn = Connection(port)
        try:
            await smalls_on(conn, index)
        finally:
            conn.close()

    async def smalls_on(conn: Connection, index: int) -> None:
        nonlocal sent
        n = 0
        while not stop.is_set():
            n += 1
            sent += 1
            began = time.monotonic()
            headers = [("X-Request-Id", f"{prefix}-t{index}-{n}")]
            try:
                response = await conn.request("GET", "/tiny", headers, timeout=30)
            except (OSError, TimeoutError) as exc:
                failures[type(exc).__name__] += 1
                continue
            if response.status == 200 and response.body == b"hello from the origin\n":
                samples.append((began, response.seconds))
            else:
                failures[f"status {response.status}"] += 1
            await asyncio.sleep(max(0.0, SMALL_EVERY_S - (time.monotonic() - began)))

    smalls = [asyncio.create_task(small(i)) for i in range(SMALL_CONNECTIONS)]
    try:
        await asyncio.sleep(idle_s)
        assert run.proxy_proc is not None
        cpu_before = tree_cpu_seconds(run.proxy_proc.pid)
        download_at = time.monotonic()
        digest, download_s = await _download(port, f"{prefix}-download", timeout=120)
        download_end = time.monotonic()
        proxy_cpu_share = (tree_cpu_seconds(run.proxy_proc.pid) - cpu_before) / (
            download_end - download_at
        )
        await asyncio.sleep(0.2)
    finally:
        stop.set()
        await asyncio.gather(*smalls)
    idle = [s for at, s in samples if at < download_at]
    during = [s for at, s in samples if download_at <= at <= download_end]
    processed = _access_log_counts(run.access_log, prefix)
    zeros = hashlib.sha256(bytes(HUGE_SIZE)).hexdigest()
    idle_fig, during_fig = _latency(idle), _latency(during)
    return {
        "idle": idle_fig,
        "during": during_fig,
        "samples_during": len(during),
        "p50_during_over_idle": _ratio(during_fig.get("p50_ms"), idle_fig.get("p50_ms")),
        "download_mb_per_s": HUGE_SIZE / download_s / 1e6,
        "proxy_cpu_share": proxy_cpu_share,
        "download_hash_ok": digest == zeros,
        "small_failures": dict(failures),
        "small_sent": sent,
        "processed_twice": sum(1 for n in processed.values() if n > 1),
        "hanging": failures.get("TimeoutError", 0),  # no answer within 30 s
    }


def _warm_download(h1_port: int) -> None:
    """One 200 MiB download straight from nginx before any peer's: the first read of
    the file (page cache, nginx's buffers) is slower, and whichever peer ran first
    paid for it (several times the small requests' latency)."""
    curl = find_tool("curl") or "curl"
    url = f"http://127.0.0.1:{h1_port}/200m"
    subprocess.run([curl, "-sS", "-o", "/dev/null", url], check=True, timeout=120)


async def _download(port: int, request_id: str, timeout: float) -> tuple[str, float]:
    """curl the 200 MiB through the proxy into sha256sum, at a lower priority than the
    small requests' client; returns (digest, seconds)."""
    curl = find_tool("curl") or "curl"
    url = f"http://127.0.0.1:{port}/200m"
    script = f"set -o pipefail; {curl} -sS -H 'X-Request-Id: {request_id}' {url} | sha256sum"
    began = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        "nice", "-n", "10", "bash", "-c", script,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except BaseException as exc:  # the time limit, or Ctrl-C: leave no curl behind
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await asyncio.shield(proc.wait())
        if isinstance(exc, TimeoutError):
            raise BenchError(f"the 200 MiB download did not finish in {timeout:.0f} s") from None
        raise
    if proc.returncode != 0:
        raise BenchError(f"download failed: {err.decode(errors='replace').strip()[-300:]}")
    return out.decode().split()[0], time.monotonic() - began


def _access_log_counts(path: Path, prefix: str) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 2 and fields[1].startswith(prefix):
                counts[fields[1]] += 1
    return counts


# d. uploads above the replay limit ------------------------------------------------------


async def uploads_case(run: Run) -> dict[str, Any]:
    from common.procs import tree_rss_kib
    from load.h1client import fetch

    origin = await run.fault_origin()
    port = await run.proxy(origin)
    await fetch(port, "GET", "/warm?id=warm", timeout=10)
    await asyncio.sleep(1.0)
    assert run.proxy_proc is not None
    pid = run.proxy_proc.pid
    idle_kib = tree_rss_kib(pid)
    body = bytes(range(256)) * (UPLOAD_SIZE // 256)
    expected = hashlib.sha256(body).hexdigest().encode()
    peak_kib = idle_kib
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak_kib
        while not done.is_set():
            peak_kib = max(peak_kib, tree_rss_kib(pid))
            await asyncio.sleep(0.1)

    async def upload(index: int) -> tuple[str, float]:
        path = f"/upload?id=up-{index}"
        headers = [("Content-Type", "application/octet-stream")]
        try:
            response = await fetch(port, "POST", path, headers, body, timeout=120)
        except (OSError, TimeoutError) as exc:
            return type(exc).__name__, 0.0
        if response.status != 200:
            return f"status {response.status}", response.seconds
        return ("ok" if response.body == expected else "bad body"), response.seconds

    sampler = asyncio.create_task(sample())
    started = time.monotonic()
    results = await asyncio.gather(*(upload(i) for i in range(UPLOADS)))
    elapsed = time.monotonic() - started
    done.set()
    await sampler
    await asyncio.sleep(2.0 if run.quick else 5.0)
    after_kib = tree_rss_kib(pid)
    stats = await run.stop_origin()
    outcomes = collections.Counter(outcome for outcome, _ in results)
    return {
        "ok": outcomes.pop("ok", 0),
        "of": UPLOADS,
        "failures": dict(outcomes),
        "seconds": elapsed,
        "rss_idle_mb": idle_kib * 1024 / 1e6,
        "rss_peak_mb": peak_kib * 1024 / 1e6,
        "rss_after_mb": after_kib * 1024 / 1e6,
        **_origin_checks(stats),
    }


# e. floods ---------------------------------------------------------------------------------

FLOODS = ("settings", "priority", "unknown", "hints", "goaway", "resets", "reflect")


async def floods_case(run: Run) -> dict[str, Any]:
    from common.procs import tree_cpu_seconds, tree_rss_kib
    from load.h1client import fetch

    seconds = 5.0 if run.quick else 10.0
    origin = await run.flood_origin("--seconds", str(seconds))
    port = await run.proxy(origin)
    warm = await fetch(port, "GET", "/warm", timeout=10)
    assert run.proxy_proc is not None
    pid, log_path = run.proxy_proc.pid, run.proxy_proc.log_path
    attacks: dict[str, Any] = {}
    for name in FLOODS:
        await asyncio.sleep(0.5)
        cpu, rss, lines = tree_cpu_seconds(pid), tree_rss_kib(pid), _line_count(log_path)
        started = time.monotonic()
        try:
            response = await fetch(port, "GET", f"/flood/{name}", timeout=seconds + 10)
            status: Any = response.status
        except (OSError, TimeoutError) as exc:
            status = type(exc).__name__
        answered = time.monotonic() - started
        # The same window for every proxy: the whole flood (a proxy may answer
        # the request at once and still be flooded), then a second for what it
        # left queued.
        await asyncio.sleep(max(0.0, started + seconds - time.monotonic()) + 1.0)
        try:
            after = (await fetch(port, "GET", "/next", timeout=10)).status
        except (OSError, TimeoutError) as exc:
            after = type(exc).__name__
        attacks[name] = {
            "cpu_s": tree_cpu_seconds(pid) - cpu,
            "rss_growth_mib": (tree_rss_kib(pid) - rss) / 1024,
            "status": status,
            "answered_s": answered,
            "next_status": after,
            "log_lines": _line_count(log_path) - lines,
        }
    stats = await run.stop_origin()
    for record in stats["records"]:
        attacks.get(record["attack"], {}).update(record)
    return {"warm_status": warm.status, "flood_seconds": seconds, "attacks": attacks}


def _line_count(path: Path) -> int:
    with contextlib.suppress(OSError):
        return len(path.read_bytes().splitlines())
    return 0


def render_floods(results: dict[str, Any], peers: list[str]) -> list[str]:
    """One row per attack: each peer's CPU s, RSS growth, and how the attack ended."""
    per_peer = results.get("floods", {})
    first = next((f for f in per_peer.values() if "attacks" in f), None)
    if first is None:
        return []
    lines = [
        f"e. floods of up to {first['flood_seconds']:g} s on one request's connection: "
        "proxy CPU s / RSS growth MiB / the proxy ended it (its GOAWAY code, after s, "
        "frames the origin wrote by then) / proxy log lines / next request"
    ]
    for name in FLOODS:
        cells = [f"  {name:9s}"]
        for peer in peers:
            a = per_peer.get(peer, {}).get("attacks", {}).get(name)
            if a is None:
                cells.append(f"{peer}: ERROR")
                continue
            ended = (
                f"yes ({_code(a.get('client_goaway'))}, {a.get('seconds', 0):.2f} s, "
                f"{a.get('frames_sent', 0):,} frames)"
                if a.get("client_ended_it")
                else f"no ({a.get('frames_sent', 0):,} frames written"
                + (", then it stopped reading)" if a.get("client_stopped_reading") else ")")
            )
            cells.append(
                f"{peer}: {a['cpu_s']:.2f} / {a['rss_growth_mib']:+.1f} / {ended} / "
                f"{a['log_lines']} / {a['next_status']}"
            )
        lines.append("  ".join(cells))
    lines.append("")
    return lines


def _code(code: int | None) -> str:
    if code is None:
        return "no GOAWAY"
    from h2.errors import ErrorCodes

    try:
        return ErrorCodes(code).name
    except ValueError:
        return str(code)


# shared ---------------------------------------------------------------------------------


def _latency(seconds: list[float]) -> dict[str, Any]:
    if not seconds:
        return {"n": 0}
    p50, p99 = percentiles(seconds, 50, 99)
    return {
        "n": len(seconds),
        "p50_ms": p50 * 1000,
        "p99_ms": p99 * 1000,
        "max_ms": max(seconds) * 1000,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _origin_checks(stats: dict[str, Any]) -> dict[str, Any]:
    return {
        "processed_twice": len(stats["answered_more_than_once"]),
        "hanging": stats["open_at_end"],
        "arrived_again": stats["arrived_more_than_once"],
    }


class Run:
    """One scenario against one peer: starts origins and the proxy, stops them all."""

    def __init__(self, ctx: Context, peer: str) -> None:
        self.ctx = ctx
        self.peer = peer
        self.quick = ctx.quick
        self.nginx = ctx.nginx
        self.access_log = ctx.access_log
        self.scenario_started = time.time()
        self.origin_proc: Any = None
        self.proxy_proc: Any = None
        self.peer_obj: Any = None

    async def fault_origin(self, *extra: str) -> Any:
        from common.procs import bench_module, free_port, wait_port
        from load.origin import Origin

        port = free_port()
        argv = [*bench_module("load.fault_origin"), "--port", str(port)]
        argv += ["--cert", str(self.ctx.tmp / "origin-cert.pem")]
        argv += ["--key", str(self.ctx.tmp / "origin-key.pem"), *extra]
        self.origin_proc = self.ctx.procs.start("fault-origin", argv)  # our core: the load's
        await asyncio.to_thread(wait_port, port, self.origin_proc)
        return Origin(port, 0, self.ctx.ca_path, self.origin_proc.pid)

    async def flood_origin(self, *extra: str) -> Any:
        from common.procs import bench_module, free_port, wait_port
        from load.origin import Origin

        port = free_port()
        argv = [*bench_module("load.flood_origin"), "--port", str(port)]
        argv += ["--cert", str(self.ctx.tmp / "origin-cert.pem")]
        argv += ["--key", str(self.ctx.tmp / "origin-key.pem"), *extra]
        self.origin_proc = self.ctx.procs.start("flood-origin", argv)
        await asyncio.to_thread(wait_port, port, self.origin_proc)
        return Origin(port, 0, self.ctx.ca_path, self.origin_proc.pid)

    async def stop_origin(self) -> dict[str, Any]:
        proc, self.origin_proc = self.origin_proc, None
        await asyncio.to_thread(self.ctx.procs.stop, proc, signal.SIGTERM, 10.0)
        lines = [x for x in proc.log_path.read_text(errors="replace").splitlines() if x[:1] == "{"]
        if not lines:
            raise BenchError("the fault origin printed no counts:\n" + proc.log_tail())
        return json.loads(lines[-1])

    async def proxy(self, origin: Any) -> int:
        from peers.lineup import PROXY_CPU, start_peer

        peer = await asyncio.to_thread(start_peer, self.peer, self.ctx.procs, origin, cpu=PROXY_CPU)
        self.peer_obj = peer
        self.proxy_proc = peer.proc
        return int(peer.url.rsplit(":", 1)[1])

    async def close(self) -> dict[str, Any]:
        """Stop what is still running; the proxy's exit code and logged problems."""
        from peers.lineup import stop_peer
        from scenarios.suite import PROBLEM_MARKS, merge_summaries, parse_summaries

        if self.origin_proc is not None:
            await asyncio.to_thread(self.ctx.procs.stop, self.origin_proc, signal.SIGTERM, 10.0)
        if self.proxy_proc is None:
            return {}
        code = await asyncio.to_thread(stop_peer, self.ctx.procs, self.peer_obj)
        text = self.proxy_proc.log_path.read_text(errors="replace")
        problems = [x for x in text.splitlines() if any(m in x for m in PROBLEM_MARKS)]
        return {
            "exit_code": code,
            "log_problem_count": len(problems),
            "log_problems": problems[:5],
            "summary": merge_summaries(parse_summaries(text)),
        }


class Context:
    def __init__(self, args: argparse.Namespace, tmp: Path, procs: Any) -> None:
        self.quick = args.quick
        self.tmp = tmp
        self.procs = procs
        self.access_log = tmp / "nginx-access.log"
        self.nginx: Any = None
        self.ca_path = tmp / "ca.pem"


SCENARIOS: dict[str, Callable[[Run], Awaitable[dict[str, Any]]]] = {
    "header": header_case,
    "storm": storm_case,
    "fairness": fairness_case,
    "uploads": uploads_case,
    "floods": floods_case,
}


async def run_all(ctx: Context, peers: list[str], names: list[str]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name in names:
        results[name] = {}
        for peer in peers:
            print(f"  {name}: {peer} ...", flush=True)
            run = Run(ctx, peer)
            figures: dict[str, Any]
            try:
                figures = await asyncio.wait_for(SCENARIOS[name](run), 300)
            except (BenchError, OSError, TimeoutError, KeyError) as exc:
                figures = {"error": f"{type(exc).__name__}: {exc}"}
                print(f"  {name}: {peer} FAILED: {figures['error']}", flush=True)
            figures["proxy"] = await run.close()
            results[name][peer] = figures
    return results


# the table ------------------------------------------------------------------------------

Row = tuple[str, Callable[[dict[str, Any]], Any]]
TABLE: dict[str, tuple[str, list[Row]]] = {
    "header": (
        "a. one response with a 120 KiB header block, 20 ordinary requests on its connection",
        [
            ("ok, of 21", lambda f: f"{f['ok']}/{f['of']}"),
            ("the big response intact", lambda f: "yes" if f["big_ok"] else "no"),
            ("all 21 on one upstream connection", lambda f: _yes(f["same_connection"])),
            ("outcomes", lambda f: _counts(f["outcomes"])),
        ],
    ),
    "storm": (
        "b. origin refuses 50% of streams for {storm_seconds:g} s, 40 clients POST back to back",
        [
            ("requests / failed", lambda f: f"{f['requests']} / {f['failed']}"),
            ("failures", lambda f: _counts(f["failures"]) or "-"),
            ("ok p50 / p99 / max", lambda f: _ms3(f)),
            ("refused by the origin", lambda f: f["refused_by_origin"]),
        ],
    ),
    "fairness": (
        "c. small GETs (4 connections x 100/s) while one client downloads 200 MiB",
        [
            ("idle p50 / p99", lambda f: _ms2(f["idle"])),
            ("during download p50 / p99", lambda f: _ms2(f["during"])),
            ("p50 during / idle (target <= 2x)", lambda f: _x(f["p50_during_over_idle"])),
            ("samples during the download", lambda f: f["samples_during"]),
            ("download MB/s, hash ok", lambda f: _mbps(f)),
            ("proxy CPU during the download", lambda f: f"{f['proxy_cpu_share']:.0%}"),
            ("small GETs failed", lambda f: _counts(f["small_failures"]) or "0"),
        ],
    ),
    "uploads": (
        "d. 10 concurrent 20 MiB uploads, Content-Length above -retry-body-limit (16 MiB)",
        [
            ("ok, of 10", lambda f: f"{f['ok']}/{f['of']}"),
            ("proxy RSS idle / peak / after, MB", lambda f: _rss(f)),
            ("seconds for all 10", lambda f: f"{f['seconds']:.1f}"),
        ],
    ),
}
CHECKS: list[Row] = [
    ("processed twice / left hanging", lambda f: f"{f['processed_twice']} / {f['hanging']}"),
    ("proxy log: warnings+errors", lambda f: f["proxy"].get("log_problem_count", "?")),
]


def _yes(flag: bool) -> str:
    return "yes" if flag else "NO"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {what}" for what, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _ms2(lat: dict[str, Any]) -> str:
    return f"{lat['p50_ms']:.1f} / {lat['p99_ms']:.1f} ms" if lat.get("n") else "no samples"


def _ms3(f: dict[str, Any]) -> str:
    if not f.get("n"):
        return "no ok requests"
    return f"{f['p50_ms'] / 1000:.2f} / {f['p99_ms'] / 1000:.2f} / {f['max_ms'] / 1000:.2f} s"


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}x"


def _mbps(f: dict[str, Any]) -> str:
    return f"{f['download_mb_per_s']:,.0f}, {'yes' if f['download_hash_ok'] else 'NO'}"


def _rss(f: dict[str, Any]) -> str:
    return f"{f['rss_idle_mb']:.0f} / {f['rss_peak_mb']:.0f} / {f['rss_after_mb']:.0f}"


def render(results: dict[str, Any], peers: list[str]) -> str:
    lines = render_floods(results, peers)
    for name, per_peer in results.items():
        if name == "floods":
            continue
        first = next((f for f in per_peer.values() if "error" not in f), {})
        title, rows = TABLE[name]
        lines.append(title.format(**first) if first else title.split("{")[0])
        table = [["", *peers]]
        for label, getter in [*rows, *CHECKS]:
            cells = [label]
            for peer in peers:
                figures = per_peer.get(peer, {})
                if "error" in figures:
                    cells.append("ERROR")
                    continue
                try:
                    cells.append(str(getter(figures)))
                except (KeyError, TypeError):
                    cells.append("?")
            table.append(cells)
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        for row in table:
            rest = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
            cells = [row[0].ljust(widths[0]), *rest]
            lines.append("  " + "  ".join(cells))
        for peer in peers:
            if "error" in per_peer.get(peer, {}):
                lines.append(f"  {peer}: {per_peer[peer]['error'].splitlines()[0]}")
        lines.append("")
    return "\n".join(lines)


# main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="fault scenarios, h2ping and Go side by side")
    parser.add_argument("--quick", action="store_true", help="a 4 s storm, shorter waits")
    parser.add_argument("--peers", default=",".join(PEERS), help="comma list of h2ping, go")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=",".join(SCENARIOS))
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "faults.json")
    parser.add_argument("--keep-tmp", action="store_true")
    args = parser.parse_args(argv)
    peers = [p for p in args.peers.split(",") if p]
    names = [s for s in args.scenarios.split(",") if s]
    bad = [p for p in peers if p not in PEERS] + [s for s in names if s not in SCENARIOS]
    if bad:
        parser.error(f"unknown peers or scenarios: {bad}")
    missing = [tool for tool in ("nginx", "curl", "sha256sum", "taskset") if not find_tool(tool)]
    if missing:
        print(f"missing {missing}: apt-get install -y nginx curl coreutils util-linux")
        return 2
    if "go" in peers:
        from peers import gopeer

        if gopeer.cached_binary() is None:
            peers.remove("go")
    from common.procs import Procs, raise_nofile
    from load.generators import LOAD_CPU
    from load.origin import start_origin

    raise_nofile()
    with contextlib.suppress(OSError):  # the clients, origins and curl: the load's core
        os.sched_setaffinity(0, {LOAD_CPU})
    signal.signal(signal.SIGTERM, _interrupt)
    tmp = Path(tempfile.mkdtemp(prefix="h2ping-faults-"))
    procs = Procs(tmp)
    ctx = Context(args, tmp, procs)
    doc: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": [sys.executable, *sys.argv],
        "quick": args.quick,
        "peers": peers,
        "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
    }
    started, code = time.monotonic(), 0
    try:
        ctx.nginx = start_origin(procs, tmp, access_log=ctx.access_log)
        if "fairness" in names:
            _warm_download(ctx.nginx.h1_port)
        doc["results"] = asyncio.run(run_all(ctx, peers, names))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except BenchError as exc:
        print(f"faults failed: {exc}", file=sys.stderr)
        code = 1
    finally:
        procs.close()
        if args.keep_tmp:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    doc["wall_seconds"] = round(time.monotonic() - started, 1)
    doc["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    if "results" in doc:
        print(
            f"\n==== h2ping faults, {doc['date']}, {os.cpu_count()} cores, "
            f"{'quick' if args.quick else 'full'} run, {doc['wall_seconds']} s, "
            f"loadavg {' '.join(doc['loadavg_start'])} -> {' '.join(doc['loadavg_end'])}"
        )
        print(render(doc["results"], peers))
    write_results(doc, args.out)
    return code


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
