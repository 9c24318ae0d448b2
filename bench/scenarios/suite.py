"""The scenarios. Each runs every peer in turn, on a freshly started proxy, and
returns ``{"params": ..., "peers": {name: figures}, "errors": {name: message}}``.
"""

from __future__ import annotations

import json
import math
import os
import resource
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.measure import percentiles
from common.procs import (
    BenchError,
    Procs,
    bench_module,
    tcp_connections_to,
    tree_cpu_clock,
    tree_rss_kib,
)
from load.generators import LOAD_CPU, curl_transfer, h2load, latency_from_log, log_requests
from load.origin import BIG_SIZE, HUGE_SIZE, Origin
from peers.lineup import LAG_INTERVAL, Peer, start_peer, stop_peer

MB = 1_000_000
# The Go sidecar logs "upstream error: ..." for each request it answers with a 502.
PROBLEM_MARKS = ("WARN", "ERROR", "Traceback", "Error:", "Exception", "upstream error")


@dataclass
class Bench:
    procs: Procs
    origin: Origin
    tmp: Path
    quick: bool
    peers: list[str]
    #: How many times the peers a goal compares are measured, in turn (see _each_peer).
    rounds: int = 1
    summaries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


PeerRun = Callable[[Bench, Peer], dict[str, Any]]
PeerStart = Callable[[Bench, str], Peer]


#: The peers whose figures the goals compare, and the floor they are read against:
#: measured ``bench.rounds`` times in turn.
ROUND_PEERS = frozenset({"go", "h2ping", "h2ping-w1", "h2ping-w2", "floor"})


def _each_peer(
    bench: Bench,
    scenario: str,
    names: list[str],
    run: PeerRun,
    ping_interval: str | None = None,
    start: PeerStart | None = None,
    keys: tuple[str, ...] = (),
    rounds: int | None = None,
    after: Callable[[dict[str, Any] | None], None] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Start each peer fresh, run one measurement, stop it; a failure is noted, not fatal.

    With ``bench.rounds`` > 1 the peers in ROUND_PEERS go round that many times, one
    after the other (go, h2ping, go, h2ping, ...), so that a slow minute of a shared
    machine falls on both; their figures are then the median round's, with each of
    ``keys`` the median over the rounds (see merge_rounds). ``rounds`` overrides
    ``bench.rounds``. ``start(bench, name)`` replaces the default start-up (pinned to
    core 0); ``after(figures)`` runs once the peer is stopped, whether or not it started
    or measured (figures None then)."""
    runs: dict[str, list[dict[str, Any]]] = {}
    errors: dict[str, str] = {}
    again = [name for name in names if name in ROUND_PEERS] if keys else []
    order = names + again * ((bench.rounds if rounds is None else rounds) - 1)
    for i, name in enumerate(order):
        if name in errors:
            continue
        label = name if i < len(names) else f"{name} (round {len(runs.get(name, [])) + 1})"
        print(f"  {scenario}: {label} ...", flush=True)
        peer: Peer | None = None
        figures: dict[str, Any] | None = None
        try:
            if start is None:
                peer = start_peer(name, bench.procs, bench.origin, ping_interval=ping_interval)
            else:
                peer = start(bench, name)
            figures = run(bench, peer)
            runs.setdefault(name, []).append(figures)
        except BenchError as exc:
            errors[name] = str(exc)
            runs.pop(name, None)
            print(f"  {scenario}: {label} FAILED: {exc}", flush=True)
        finally:
            if peer is not None:
                _stop_and_collect(bench, scenario, peer, figures)
            if after is not None:
                after(figures)
    return {name: merge_rounds(each, keys) for name, each in runs.items()}, errors


def merge_rounds(runs: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, Any]:
    """One peer's figures from its rounds: the round whose ``keys[0]`` is the median
    (the lower one of an even count), each of ``keys`` replaced by its median over the
    rounds, and ``rounds`` listing every round's ``keys``. One round: itself."""
    if len(runs) == 1:
        return runs[0]
    # (A round without the figure, e.g. no event delivered, ranks last.)
    ranked = sorted(runs, key=lambda figures: (figures[keys[0]] is None, figures[keys[0]] or 0))
    merged = dict(ranked[(len(ranked) - 1) // 2])
    for key in keys:
        values = [figures[key] for figures in runs if figures.get(key) is not None]
        if values:
            merged[key] = statistics.median(values)
    merged["rounds"] = [{key: figures.get(key) for key in keys} for figures in runs]
    return merged


def _stop_and_collect(bench: Bench, scenario: str, peer: Peer, figures: dict | None) -> None:
    """Stop the proxy; keep h2ping's shutdown summary and any warnings it logged."""
    rc = stop_peer(bench.procs, peer)
    if peer.proc is None:
        return
    text = peer.proc.log_path.read_text(errors="replace")
    problems = [line for line in text.splitlines() if any(m in line for m in PROBLEM_MARKS)]
    per_worker = parse_summaries(text)
    summary = merge_summaries(per_worker)
    record: dict[str, Any] = {
        "scenario": scenario,
        "exit_code": rc,
        "summary": summary,
        "log_problems": problems[:50],  # the baseline logs one traceback per cut client
        "log_problem_count": len(problems),
    }
    if len(per_worker) > 1:
        record["worker_summaries"] = per_worker
    bench.summaries.setdefault(peer.name, []).append(record)
    if figures is not None and summary:
        figures["proxy_summary"] = summary
        if len(per_worker) > 1:
            figures["worker_summaries"] = per_worker
        if "loop_lag_p99" in summary:
            figures["loop_lag_p99_ms"] = _ms(summary["loop_lag_p99"])
            figures["loop_lag_max_ms"] = _ms(summary["loop_lag_max"])


def parse_summaries(log_text: str) -> dict[str, dict[str, str]]:
    """Per instance name, the key=value pairs of h2ping's last ``stopped: requests=...``
    line. One entry per process: ``--workers N`` logs one line per worker, named
    ``<name>/1`` ... ``<name>/N`` (text format: ``<time> INFO h2ping <name>: stopped: ...``).
    """
    found: dict[str, dict[str, str]] = {}
    for line in log_text.splitlines():
        head, sep, rest = line.partition(": stopped: ")
        if not sep:
            continue
        name = head.rsplit(" h2ping ", 1)[-1]
        found[name] = dict(pair.split("=", 1) for pair in rest.split() if "=" in pair)
    return found


def merge_summaries(per_worker: dict[str, dict[str, str]]) -> dict[str, str]:
    """One summary for the whole proxy: counters summed over the workers, loop lag (and
    ping RTT) the worst worker's. With one process, its summary unchanged."""
    if len(per_worker) <= 1:
        return next(iter(per_worker.values()), {})
    merged: dict[str, str] = {}
    for summary in per_worker.values():
        for key, value in summary.items():
            if key not in merged:
                merged[key] = value
            elif value.isdigit() and merged[key].isdigit():
                merged[key] = str(int(merged[key]) + int(value))
            elif value.endswith("ms") and merged[key].endswith("ms"):
                merged[key] = max(merged[key], value, key=_ms)
    merged["workers"] = str(len(per_worker))
    return merged


def _ms(value: str) -> float:
    """``1.2ms`` -> 1.2 (h2ping prints loop lag and PING RTT in milliseconds)."""
    return float(value.removesuffix("ms"))


def _pid(peer: Peer) -> int | None:
    """The proxy's pid, whose CPU h2load's runs measure; None for nginx alone (direct)."""
    return peer.proc.pid if peer.proc is not None else None


# 1. small requests, 50 connections ---------------------------------------------------------


def small_50(bench: Bench) -> dict[str, Any]:
    duration, warmup = (4.0, 1.0) if bench.quick else (10.0, 2.0)

    def run(bench: Bench, peer: Peer) -> dict[str, Any]:
        url = peer.url + "/tiny"
        result = h2load(
            url, h1=peer.h1, clients=50, duration=duration, warmup=warmup, cpu_of=_pid(peer)
        )
        if result.get("requests_failed") or result.get("requests_errored"):
            result["warning"] = "h2load counted failed/errored requests"
        return result

    params = {"clients": 50, "duration_s": duration, "warmup_s": warmup, "path": "/tiny"}
    params["h2ping_loop_lag_interval"] = LAG_INTERVAL
    figures, errors = _each_peer(
        bench, "small_50", bench.peers, run, keys=("req_per_s", "cpu_us_per_req")
    )
    return {"params": params, "peers": figures, "errors": errors}


# 6. small requests, 50 connections: h2ping --workers 1 vs 2 ---------------------------------

WORKER_COUNTS = (1, 2)


def workers_pinning() -> tuple[str | None, int | None, str]:
    """(proxy CPU list, load-generator CPU, description) for the workers scenario.

    With 3 or more cores h2load gets the last one to itself and the proxy the rest;
    with fewer, nothing is pinned (two workers need both cores of a 2-core machine)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 3:
        return None, None, "none: h2load -t 1, the proxy's processes and nginx float over all cores"
    proxy = ",".join(str(core) for core in cores[:-1])
    pinning = f"proxy on cores {proxy}, h2load -t 1 on core {cores[-1]}, nginx floats"
    return proxy, cores[-1], pinning


def workers(bench: Bench) -> dict[str, Any]:
    """small_50's load against h2ping with 1 and with 2 worker processes, and against
    the Go sidecar with the same cores (GOMAXPROCS follows the CPU affinity)."""
    duration, warmup = (4.0, 1.0) if bench.quick else (10.0, 2.0)
    proxy_cpus, load_cpu, pinning = workers_pinning()
    names = [name for name in ("direct-h1", "go") if name in bench.peers]
    if "h2ping" in bench.peers:
        names += [f"h2ping-w{count}" for count in WORKER_COUNTS]

    def start(bench: Bench, label: str) -> Peer:
        name, _, count = label.partition("-w")
        return start_peer(
            name, bench.procs, bench.origin, workers=int(count or 1), cpu=proxy_cpus, label=label
        )

    def run(bench: Bench, peer: Peer) -> dict[str, Any]:
        url = peer.url + "/tiny"
        result = h2load(
            url,
            h1=True,
            clients=50,
            duration=duration,
            warmup=warmup,
            cpu=load_cpu,
            cpu_of=_pid(peer),
        )
        if result.get("requests_failed") or result.get("requests_errored"):
            result["warning"] = "h2load counted failed/errored requests"
        return result

    params = {
        "clients": 50,
        "duration_s": duration,
        "warmup_s": warmup,
        "path": "/tiny",
        "pinning": pinning,
        "h2ping_loop_lag_interval": LAG_INTERVAL,
    }
    bench.origin.pin(None)  # nginx floats here, as the proxy's processes and h2load do
    try:
        figures, errors = _each_peer(
            bench, "workers", names, run, start=start, keys=("req_per_s", "cpu_us_per_req")
        )
    finally:
        bench.origin.pin({LOAD_CPU})
    one = figures.get("h2ping-w1", {}).get("req_per_s")
    go = figures.get("go", {}).get("req_per_s")
    go_cpu = figures.get("go", {}).get("cpu_us_per_req")
    for label, peer_figures in figures.items():
        if go and label != "direct-h1":
            peer_figures["vs_go"] = peer_figures["req_per_s"] / go
        if go_cpu and peer_figures.get("cpu_us_per_req") is not None:
            peer_figures["cpu_vs_go"] = peer_figures["cpu_us_per_req"] / go_cpu
        if not label.startswith("h2ping-w"):
            continue
        if one:
            peer_figures["scaling_vs_1_worker"] = peer_figures["req_per_s"] / one
        count = int(label.partition("-w")[2])
        per_worker = peer_figures.get("worker_summaries", {})
        logged = len(per_worker) if per_worker else int("proxy_summary" in peer_figures)
        if count > 1 and logged != count:
            # A worker that died (or was killed) logs no summary: its lag is missing.
            errors[label] = f"{logged} of {count} workers logged their shutdown summary"
    return {"params": params, "peers": figures, "errors": errors}


# 2. small requests, 1 connection: latency -----------------------------------------------------


def latency_1(bench: Bench) -> dict[str, Any]:
    requests = 2000 if bench.quick else 5000

    def run(bench: Bench, peer: Peer) -> dict[str, Any]:
        url = peer.url + "/tiny"
        h2load(url, h1=peer.h1, clients=1, requests=200)  # warm: upstream connection, caches
        log_file = bench.tmp / f"latency-{peer.name}.tsv"
        summary = h2load(
            url, h1=peer.h1, clients=1, requests=requests, log_file=log_file, cpu_of=_pid(peer)
        )
        figures = latency_from_log(log_file)
        figures["req_per_s"] = summary["req_per_s"]
        for key in ("proxy_cpu_s", "cpu_us_per_req"):
            if key in summary:
                figures[key] = summary[key]
        figures["failed"] = summary.get("requests_failed", 0) + summary.get("requests_errored", 0)
        return figures

    figures, errors = _each_peer(
        bench, "latency_1", bench.peers, run, keys=("mean_us", "p99_us", "cpu_us_per_req")
    )
    for base in ("direct", "direct-h1"):
        if base not in figures:
            continue
        for peer_figures in figures.values():
            for key in ("mean_us", "p99_us"):
                peer_figures[f"added_{key}_over_{base}"] = peer_figures[key] - figures[base][key]
    return {
        "params": {"clients": 1, "requests": requests, "path": "/tiny"},
        "peers": figures,
        "errors": errors,
    }


# 3. 16 MiB download and upload --------------------------------------------------------------


def transfer_16m(bench: Bench) -> dict[str, Any]:
    repeats = 3 if bench.quick else 5
    upload_file = bench.tmp / "upload-16m"
    if not upload_file.exists():
        upload_file.write_bytes(bytes(range(256)) * (BIG_SIZE // 256))

    def run(bench: Bench, peer: Peer) -> dict[str, Any]:
        ca = None if peer.h1 else bench.origin.ca_path
        downs, ups = [], []
        for _ in range(repeats):
            down = curl_transfer(peer.url + "/16m", upload=None, ca_file=ca)
            _check_transfer(down, lambda r: r["bytes"] == BIG_SIZE)
            downs.append(down["seconds"])
            up = curl_transfer(peer.url + "/upload", upload=upload_file, ca_file=ca)
            _check_transfer(up, lambda r: _uploaded_whole(r["body"]))
            ups.append(up["seconds"])
        return {
            "download_mb_per_s": BIG_SIZE / statistics.median(downs) / MB,
            "upload_mb_per_s": BIG_SIZE / statistics.median(ups) / MB,
            "download_best_mb_per_s": BIG_SIZE / min(downs) / MB,
            "upload_best_mb_per_s": BIG_SIZE / min(ups) / MB,
            "download_seconds": downs,
            "upload_seconds": ups,
        }

    figures, errors = _each_peer(
        bench, "transfer_16m", bench.peers, run, keys=("download_mb_per_s", "upload_mb_per_s")
    )
    params = {"bytes": BIG_SIZE, "repeats": repeats, "statistic": "median", "client": "curl"}
    return {"params": params, "peers": figures, "errors": errors}


def _uploaded_whole(body: str) -> bool:
    # nginx answers "ok $request_length": the head plus every byte of the body.
    parts = body.split()
    return len(parts) == 2 and parts[0] == "ok" and int(parts[1]) >= BIG_SIZE


def _check_transfer(result: dict[str, Any], body_ok: Callable[[dict[str, Any]], bool]) -> None:
    if result["status"] != 200 or not body_ok(result):
        raise BenchError(f"bad transfer: {result}")


# 8. small requests while a 200 MiB download runs through the same proxy -------------------

DURING_PEERS = ("direct-h1", "go", "h2ping")
CURL_NICE = 10  # curl shares core 1 with h2load: h2load's wake-ups go first


def small_during_download(bench: Bench) -> dict[str, Any]:
    """``h2load --h1 -c 1`` on /tiny for idle_s, then on for loaded_s while curl
    downloads /200m through the same proxy back to back. The proxy carries both on one
    upstream connection (counted from /proc while the downloads run), so the small
    responses share it with a transfer at full speed."""
    idle_s, loaded_s = (2.0, 3.0) if bench.quick else (4.0, 8.0)
    names = [name for name in bench.peers if name in DURING_PEERS]
    # The first read of the file is slower (page cache, nginx's buffers): not a peer's.
    curl_transfer(f"http://127.0.0.1:{bench.origin.h1_port}/200m", upload=None, ca_file=None)

    def run(bench: Bench, peer: Peer) -> dict[str, Any]:
        return _small_during_one(bench, peer, idle_s, loaded_s)

    figures, errors = _each_peer(bench, "small_during_download", names, run)
    notes = []
    for name, peer_figures in figures.items():
        opened = peer_figures.get("proxy_summary", {}).get("connections_opened")
        if opened is not None:
            peer_figures["connections_opened"] = int(opened)
        conns = peer_figures.get("upstream_connections")
        if (conns is not None and conns != 1) or peer_figures.get("connections_opened", 1) != 1:
            notes.append(
                f"{name}: {conns} upstream connections during the downloads, "
                f"{opened or '?'} opened: the small requests did not share the download's"
            )
    params = {
        "idle_s": idle_s,
        "loaded_s": loaded_s,
        "small": "h2load --h1 -c 1 /tiny",
        "download": f"curl /200m ({HUGE_SIZE} bytes), back to back, nice {CURL_NICE}",
        "statistic": "median of the requests that started and ended inside a download",
    }
    return {"params": params, "peers": figures, "errors": errors, "notes": notes}


def _small_during_one(bench: Bench, peer: Peer, idle_s: float, loaded_s: float) -> dict[str, Any]:
    small_url = peer.url + "/tiny"
    h2load(small_url, h1=True, clients=1, requests=200)  # warm: upstream connection, caches
    log_file = bench.tmp / f"during-{peer.name}.tsv"
    windows: list[tuple[float, float]] = []  # (first byte, end) of each download, epoch s
    downloads_done = threading.Event()
    started = time.time()
    loaded_end = started + idle_s + loaded_s
    pid = _pid(peer)
    cpu: list[tuple[float, float]] = []  # (wall, proxy CPU s) as the downloads start, end

    def download_loop() -> None:
        try:
            time.sleep(idle_s)
            if pid is not None:
                cpu.append((time.monotonic(), tree_cpu_clock(pid)))
            while time.time() < loaded_end:
                down = curl_transfer(peer.url + "/200m", upload=None, ca_file=None, nice=CURL_NICE)
                end = time.time()
                _check_transfer(down, lambda r: r["bytes"] == HUGE_SIZE)
                windows.append((end - down["seconds"] + down["first_byte_s"], end))
            if pid is not None:
                cpu.append((time.monotonic(), tree_cpu_clock(pid)))
        finally:
            downloads_done.set()

    with ThreadPoolExecutor(2) as pool:
        small = pool.submit(
            h2load, small_url, h1=True, clients=1, duration=idle_s + loaded_s, log_file=log_file
        )
        downloads = pool.submit(download_loop)
        connections = 0
        while not downloads_done.wait(0.25):
            if pid is not None and time.time() > started + idle_s:
                connections = max(connections, tcp_connections_to(pid, bench.origin.tls_port))
        summary, _ = small.result(), downloads.result()
    requests = log_requests(log_file)
    if not windows:
        raise BenchError("no 200 MiB download finished")
    idle = [us for at, _, us in requests if at + us / 1e6 < windows[0][0] and at >= started]
    loaded = [
        us
        for at, _, us in requests
        if any(start <= at and at + us / 1e6 <= end for start, end in windows)
    ]
    if not idle or not loaded:
        raise BenchError(f"too few small requests: {len(idle)} idle, {len(loaded)} loaded")
    idle_p50, idle_p99 = (v / 1000 for v in percentiles(idle, 50, 99))
    loaded_p50, loaded_p99 = (v / 1000 for v in percentiles(loaded, 50, 99))
    seconds = [end - start for start, end in windows]
    return {
        "idle_p50_ms": idle_p50,
        "idle_p99_ms": idle_p99,
        "loaded_p50_ms": loaded_p50,
        "loaded_p99_ms": loaded_p99,
        "loaded_over_idle": loaded_p50 / idle_p50,
        "idle_requests": len(idle),
        "loaded_requests": len(loaded),
        "failed": summary.get("requests_failed", 0) + summary.get("requests_errored", 0),
        "downloads": len(windows),
        "download_mb_per_s": HUGE_SIZE / statistics.median(seconds) / MB,
        "upstream_connections": connections if pid is not None else None,
        # The proxy's CPU over the downloads' wall time: how busy its core was.
        "proxy_cpu_share": (cpu[1][1] - cpu[0][1]) / (cpu[1][0] - cpu[0][0])
        if len(cpu) == 2
        else None,
    }


# 4./5. N requests in flight for T seconds -------------------------------------------------


def inflight(bench: Bench, n: int, seconds: int) -> dict[str, Any]:
    params = {"n": n, "seconds": seconds, "h2ping_ping_interval": "1s", "rss": "VmRSS, tree"}
    params["h2ping_loop_lag_interval"] = LAG_INTERVAL
    _, nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    proxies = [name for name in bench.peers if not name.startswith("direct")]
    if n + 1000 > nofile:
        reason = (
            f"skipped: {n} in flight needs RLIMIT_NOFILE > {n + 1000} in the proxy process, "
            f"the hard limit here is {nofile} (raising it needs CAP_SYS_RESOURCE)"
        )
        print(f"  inflight {n}: {reason}", flush=True)
        return {"params": params, "peers": {}, "errors": dict.fromkeys(proxies, reason)}

    def run(bench: Bench, peer: Peer) -> dict[str, Any]:
        return _inflight_one(bench, peer, n, seconds, nofile)

    # The ping interval only applies to h2ping; the other peers ignore the argument.
    figures, errors = _each_peer(bench, f"inflight_{n}", proxies, run, ping_interval="1s")
    for name, peer_figures in figures.items():
        _add_ping_rate(peer_figures, name)
    return {"params": params, "peers": figures, "errors": errors}


def _inflight_one(bench: Bench, peer: Peer, n: int, seconds: int, nofile: int) -> dict[str, Any]:
    assert peer.proc is not None
    pid = peer.proc.pid
    ready_at = time.time()
    h2load(peer.url + "/tiny", h1=True, clients=1, requests=50)  # warm: upstream connection
    time.sleep(1.0)
    idle_kib = tree_rss_kib(pid)
    timeout = seconds + max(30, seconds)
    clients = _start_clients(bench, peer, n, seconds, timeout, nofile)
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + timeout + 120
    while any(c.popen.poll() is None for c in clients):
        if time.monotonic() > deadline:
            raise BenchError("in-flight client did not finish")
        samples.append((time.time(), tree_rss_kib(pid)))
        time.sleep(0.25)
    report = _merge_client_reports([c.log_path.read_text() for c in clients])
    for client in clients:
        bench.procs.stop(client)
    peak_kib = _window_peak(samples, report)
    return {
        **report,
        "zero_failures": report["ok"] == n and not report["failures"],
        "rss_idle_kib": idle_kib,
        "rss_peak_kib": peak_kib,
        "rss_per_request_kib": (peak_kib - idle_kib) / n,
        "ready_at": ready_at,
        "stopping_at": time.time(),
    }


def _start_clients(bench: Bench, peer: Peer, n: int, seconds: int, timeout: float, nofile: int):
    # One client process holds at most nofile - 1000 sockets; split beyond that.
    count = math.ceil(n / (nofile - 1000))
    port = peer.url.rsplit(":", 1)[1]
    clients = []
    for index in range(count):
        share = n // count + (index < n % count)
        argv = [*bench_module("load.inflight_client"), "--port", port]
        argv += ["--n", str(share), "--path", f"/delay?ms={seconds * 1000}"]
        argv += ["--timeout", str(timeout), "--source-ips", str(math.ceil(share / 20000))]
        name = f"inflight-client-{peer.name}-{index}"
        clients.append(bench.procs.start(name, argv, cpu=LOAD_CPU))
    return clients


def _merge_client_reports(outputs: list[str]) -> dict[str, Any]:
    reports = []
    for text in outputs:
        lines = [line for line in text.splitlines() if line.startswith("{")]
        if not lines:
            raise BenchError("in-flight client printed no report:\n" + text[-800:])
        reports.append(json.loads(lines[-1]))
    failures: dict[str, int] = {}
    for report in reports:
        for reason, count in report["failures"].items():
            failures[reason] = failures.get(reason, 0) + count
    sent = [r["all_sent_at"] for r in reports]
    first = [r["first_done_at"] for r in reports if r["first_done_at"]]
    return {
        "ok": sum(r["ok"] for r in reports),
        "failures": failures,
        "all_sent_at": max(sent) if all(sent) else None,
        "first_done_at": min(first) if first else None,
        "connect_seconds": (max(sent) - min(r["started_at"] for r in reports))
        if all(sent)
        else None,
        "client_min_s": min((r["min_s"] for r in reports if r["min_s"]), default=None),
        "client_max_s": max((r["max_s"] for r in reports if r["max_s"]), default=None),
    }


def _window_peak(samples: list[tuple[float, int]], report: dict[str, Any]) -> int:
    """Peak RSS while everything was in flight (all sent, none answered yet)."""
    start = report["all_sent_at"] or 0.0
    end = report["first_done_at"] or float("inf")
    window = [rss for at, rss in samples if start <= at <= end]
    return max(window or [rss for _, rss in samples] or [0])


def _add_ping_rate(figures: dict[str, Any], name: str) -> None:
    summary = figures.get("proxy_summary", {})
    if name != "h2ping" or "pings_sent" not in summary:
        figures["pings_per_s"] = None
        return
    lifetime = figures["stopping_at"] - figures["ready_at"]
    figures["pings_sent"] = int(summary["pings_sent"])
    figures["pings_per_s"] = figures["pings_sent"] / lifetime
    figures["ping_window_s"] = lifetime
