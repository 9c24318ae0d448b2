"""The streaming scenario: C server-sent-event streams through each proxy at once.

An HTTP/2 TLS origin (load/sse_origin.py) sends each stream a 64-byte event every 20 ms,
stamped with its send time; one client process (load/sse_client.py) holds the C streams
over HTTP/1.1 through the proxy. Both run on the load core; the proxy is pinned to
its own. Figures come from one measuring window after a warm-up: events delivered
per second against the rate asked, delay origin -> client (p50, p99, max), and the
proxy's CPU seconds (/proc utime + stime) per 10,000 events, and where events wait
when they are late: unread in the proxy's upstream socket (the proxy is behind) or in
the client's sockets (the load generator is).

The load generator must not be what limits a row: the Go sidecar delivering the
full rate proves it for that C, and the origin's and client's own CPU in the window
(the load core's share, "load core") shows how much room was left.
"""

from __future__ import annotations

import json
import signal
import time
from typing import Any

from common.procs import BenchError, Proc, bench_module, free_port, wait_port
from load.generators import LOAD_CPU
from load.origin import Origin
from peers.lineup import Peer, start_peer
from scenarios.suite import Bench, _each_peer

CASES = {"sse_500": 500, "sse_1000": 1000, "sse_2000": 2000}
INTERVAL_MS = 20
EVENT_BYTES = 64
FULL_RATE = 0.99  # delivered / asked, in the window, to count as the full rate
# The aiohttp+httpx baseline is left out: httpx carries 100 streams per connection
# and queues the rest, so most streams would never start.
STREAMING_PEERS = ("go", "nghttpx", "h2ping")


def sse(bench: Bench, name: str, flush_each: bool = True, stall: float = 0.0) -> dict[str, Any]:
    """``flush_each``: the origin writes every event on its own as it falls due (one
    TLS record each, so the proxy reads them one by one); else once per loop iteration,
    every event that fell due together in one record. ``stall``: each proxy is stopped
    (SIGSTOP) this many seconds, 1 s into the window, to see whether it catches up."""
    streams = CASES[name]
    warmup, seconds = (1.0, 4.0) if bench.quick else (3.0, 15.0)
    params = {
        "streams": streams,
        "interval_ms": INTERVAL_MS,
        "bytes": EVENT_BYTES,
        "asked_per_s": streams * 1000 // INTERVAL_MS,
        "warmup_s": warmup,
        "seconds": seconds,
        "full_rate": FULL_RATE,
        "origin_writes": "one per event" if flush_each else "one per loop iteration",
        "stall_s": stall,
    }
    origin: dict[str, Any] = {}  # the origin of the peer being measured

    def start(bench: Bench, peer_name: str) -> Peer:
        origin["proc"], origin["origin"] = _start_origin(bench, flush_each)
        return start_peer(peer_name, bench.procs, origin["origin"])

    def run(bench: Bench, peer: Peer) -> dict[str, Any]:
        return _run_client(bench, peer, origin["proc"], origin["origin"].tls_port, params)

    def after(figures: dict[str, Any] | None) -> None:
        proc = origin.pop("proc", None)
        origin.pop("origin", None)
        if proc is not None:
            stats = _stop_origin(bench, proc)
            if figures is not None:
                figures["origin"] = stats

    names = [p for p in bench.peers if p in STREAMING_PEERS]
    figures, errors = _each_peer(
        bench,
        name,
        names,
        run,
        start=start,
        keys=ROUND_KEYS,
        rounds=1 if stall else None,  # a stop of the proxy is a diagnosis, not a goal row
        after=after,
    )
    for merged in figures.values():
        full_rate_every_round(merged)
    notes = _compare(figures, params)
    return {"params": params, "peers": figures, "errors": errors, "notes": notes}


def full_rate_every_round(merged: dict[str, Any]) -> None:
    """A peer measured in rounds had the full rate only if it had it in every round:
    so a row counts only where Go kept up each time."""
    rounds = merged.get("rounds")
    if rounds:
        merged["full_rate"] = all(r["full_rate"] for r in rounds)


#: The figures taken as medians over the rounds; ``full_rate`` is listed so that
#: each round's is kept, and then replaced by whether every round had it.
ROUND_KEYS = ("cpu_per_10k_events", "delay_p50_ms", "delay_p99_ms", "events_per_s", "full_rate")


def _start_origin(bench: Bench, flush_each: bool) -> tuple[Proc, Origin]:
    port = free_port()
    argv = [*bench_module("load.sse_origin"), "--port", str(port)]
    if flush_each:
        argv.append("--flush-each")
    # The nginx origin's certificate (issued by the bench CA for 127.0.0.1).
    argv += ["--cert", str(bench.tmp / "origin-cert.pem")]
    argv += ["--key", str(bench.tmp / "origin-key.pem")]
    proc = bench.procs.start("sse-origin", argv, cpu=LOAD_CPU)
    wait_port(port, proc)
    return proc, Origin(tls_port=port, h1_port=0, ca_path=bench.origin.ca_path, pid=proc.pid)


def _stop_origin(bench: Bench, proc: Proc) -> dict[str, Any]:
    bench.procs.stop(proc, signal.SIGTERM, timeout=10.0)
    lines = [x for x in proc.log_path.read_text(errors="replace").splitlines() if x[:1] == "{"]
    return json.loads(lines[-1]) if lines else {}


def _run_client(
    bench: Bench, peer: Peer, origin: Proc, origin_port: int, params: dict[str, Any]
) -> dict[str, Any]:
    assert peer.proc is not None
    port = peer.url.rsplit(":", 1)[1]
    path = f"/sse?interval_ms={params['interval_ms']}&bytes={params['bytes']}"
    argv = [*bench_module("load.sse_client"), "--port", port]
    argv += ["--streams", str(params["streams"]), "--path", path]
    argv += ["--interval-ms", str(params["interval_ms"])]
    argv += ["--warmup", str(params["warmup_s"]), "--seconds", str(params["seconds"])]
    argv += ["--cpu", f"proxy={peer.proc.pid}", "--cpu", f"origin={origin.pid}"]
    argv += ["--origin-port", str(origin_port)]
    if params["stall_s"]:
        argv += ["--stall", str(params["stall_s"])]
    client = bench.procs.start(f"sse-client-{peer.name}", argv, cpu=LOAD_CPU)
    limit = 30 + params["warmup_s"] + params["seconds"] + 30  # heads, window, slack
    deadline = time.monotonic() + limit
    while client.popen.poll() is None:
        if time.monotonic() > deadline:
            bench.procs.stop(client)
            raise BenchError(f"streaming client did not finish in {limit:.0f}s")
        time.sleep(0.2)
    bench.procs.stop(client)
    lines = [x for x in client.log_path.read_text(errors="replace").splitlines() if x[:1] == "{"]
    if not lines:
        raise BenchError("streaming client printed no report:\n" + client.log_tail())
    report = json.loads(lines[-1])
    return _derive(report, params)


def _derive(report: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    events, window = report["events"], report["window_s"]
    proxy_cpu = report["cpu_s"]["proxy"]
    load_cpu = report["cpu_s"]["origin"] + report["client_cpu_s"]
    full = (
        report["heads"] == report["streams"]
        and report["gaps"] == 0
        and report["events_per_s"] >= FULL_RATE * params["asked_per_s"]
    )
    return {
        **report,
        "cpu_per_10k_events": proxy_cpu / events * 10_000 if events else None,
        "proxy_cpu_share": proxy_cpu / window,
        "load_core_share": load_cpu / window,
        "full_rate": full,
    }


def _compare(figures: dict[str, Any], params: dict[str, Any]) -> list[str]:
    """The lines under the table: Go's full-rate check, and h2ping's p99 above Go's."""
    go, mine = figures.get("go"), figures.get("h2ping")
    notes = []
    if params["stall_s"]:
        notes.append(
            f"each proxy was stopped {params['stall_s']:g} s, 1 s into the window "
            "(--sse-stall): 'behind s' is the stop and the catching up; no goal is judged"
        )
    if go is None:
        return [*notes, "no Go column: nothing proves the load generator kept up in this run"]
    if go["full_rate"]:
        notes.append(f"Go delivered the full rate ({params['asked_per_s']:,}/s asked): ok")
    else:
        notes.append(
            f"Go did NOT deliver the full rate ({go['events_per_s']:,.0f} of "
            f"{params['asked_per_s']:,}/s asked, load core {go['load_core_share']:.0%} busy): "
            "the load generator (or Go) was the limit, so this row compares nothing"
        )
    if mine is not None and go.get("delay_p99_ms") is not None and mine.get("delay_p99_ms"):
        extra = {q: mine[f"delay_{q}_ms"] - go[f"delay_{q}_ms"] for q in ("p50", "p99")}
        notes.append(
            f"h2ping delay over Go's: p50 {extra['p50']:+.1f} ms, p99 {extra['p99']:+.1f} ms "
            "(the goals table judges 1,000 streams)"
        )
        mine["delay_p50_over_go_ms"], mine["delay_p99_over_go_ms"] = extra["p50"], extra["p99"]
    return notes
