"""The run: upstream, relays, h2ping and the clients on one event loop, traffic and
faults until the end, then quiescence and the checks. ``main`` is bench/soak.py."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import os
import platform
import random
import ssl
import sys
import time

import aiohttp

from common.measure import cpu_model, rss_mib
from h2ping import Proxy
from h2ping.testing import (
    BlackholeRelay,
    ScriptedUpstream,
)
from scenarios.soak.checks import Snapshot, check_invariants, print_report
from scenarios.soak.client import Client, LoopErrors, ProxyLog
from scenarios.soak.faults import Faults, WatchedIdleCutRelay
from scenarios.soak.settings import (
    IDLE_CUT,
    MAX_CONN_AGE,
    MAX_STREAMS,
    PING_INTERVAL,
    PING_TIMEOUT,
)
from scenarios.soak.upstream import SoakServer

# --help's line, the first of the package's docstring.
DESCRIPTION = "Soak: minutes of mixed traffic through h2ping while faults are injected."


async def watch_loop_lag(lags: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        await asyncio.sleep(0.1)
        lags.append(loop.time() - start - 0.1)


def machine() -> str:
    cpus = f"{os.cpu_count()} CPUs ({cpu_model()})"
    return f"{platform.node()}, {cpus}, Python {platform.python_version()}"


def tls_contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    client.set_alpn_protocols(["h2"])
    return server, client


async def soak(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    loop_errors = LoopErrors()
    loop.set_exception_handler(loop_errors)
    rng = random.Random(args.seed)
    proxy_log = ProxyLog()
    logging.getLogger().addHandler(proxy_log)
    logging.getLogger().setLevel(logging.INFO)
    server = SoakServer(random.Random(args.seed + 1))
    server_ctx, client_ctx = tls_contexts() if args.tls else (None, None)

    upstream = ScriptedUpstream(
        server.handle,
        ssl_context=server_ctx,
        max_concurrent_streams=MAX_STREAMS,
        initial_window_size=1024 * 1024,
    )
    await upstream.start()
    blackhole = BlackholeRelay("127.0.0.1", upstream.port)
    await blackhole.start()
    idle_cut = WatchedIdleCutRelay("127.0.0.1", blackhole.port, idle_cut=IDLE_CUT)
    await idle_cut.start()
    scheme = "https" if args.tls else "http"
    proxy = Proxy(
        ssl_context=client_ctx,
        upstream=f"{scheme}://127.0.0.1:{idle_cut.port}",
        listen="127.0.0.1:0",
        ping_interval=PING_INTERVAL,
        ping_timeout=PING_TIMEOUT,
        max_conn_age=MAX_CONN_AGE,
        connect_timeout=5.0,
    )
    await proxy.start()
    assert proxy.pool is not None
    idle_cut.proxy = proxy
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
    )
    client = Client(session, proxy.url, rng, proxy_log)
    # Proxy, relays and upstream are running, with no connection among them yet:
    # the end must look the same once the pooled connections are retired.
    start = Snapshot.take()
    faults = Faults(upstream, server, blackhole, random.Random(args.seed + 2))
    started = loop.time()
    until = started + args.minutes * 60
    lags: list[float] = []
    lag_task = asyncio.create_task(watch_loop_lag(lags))
    mode = "TLS" if args.tls else "h2c"
    print(
        f"h2ping soak: {args.minutes:g} min, {args.clients} clients, {mode}, "
        f"{args.loop}, seed {args.seed}\n"
        f"  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M:%S} UTC on {machine()}\n"
        f"  aiohttp -> h2ping (ping {PING_INTERVAL:g}s, timeout {PING_TIMEOUT:g}s, "
        f"max-conn-age {MAX_CONN_AGE:g}s) -> IdleCutRelay ({IDLE_CUT:g}s) -> BlackholeRelay "
        f"-> ScriptedUpstream ({MAX_STREAMS} streams per connection)",
        flush=True,
    )

    rss_warm: float | None = None
    rss_peak = start.rss_mib

    async def progress() -> None:
        nonlocal rss_warm, rss_peak
        every = min(60.0, args.minutes * 60 / 4)
        while True:
            await asyncio.sleep(every)
            rss = rss_mib()
            rss_peak = max(rss_peak, rss)
            elapsed = loop.time() - started
            if rss_warm is None and elapsed >= min(60.0, args.minutes * 60 / 4):
                rss_warm = rss  # after warm-up: what later growth is measured from
            t = client.tally
            print(
                f"  [{elapsed:5.0f}s] sent {t.sent} ok {t.succeeded} aborted {t.aborted} "
                f"failed {t.failed} hung {t.hung} | replays {proxy.stats.replays} "
                f"in flight {proxy.in_flight} conns {proxy.connection_states()} "
                f"| RSS {rss:.0f} MiB, loop lag max {max(lags, default=0) * 1000:.0f} ms",
                flush=True,
            )

    async def housekeeping() -> None:
        while True:
            await asyncio.sleep(5.0)
            server.prune(upstream)

    progress_task = asyncio.create_task(progress())
    housekeeping_task = asyncio.create_task(housekeeping())
    wall = time.monotonic()
    await asyncio.gather(faults.run(until), *(client.worker(until) for _ in range(args.clients)))
    duration = time.monotonic() - wall
    for task in (progress_task, housekeeping_task, lag_task):
        task.cancel()
    for result in await asyncio.gather(
        progress_task, housekeeping_task, lag_task, return_exceptions=True
    ):
        if not isinstance(result, asyncio.CancelledError):
            raise RuntimeError("a soak background task failed") from result
    rss_peak = max(rss_peak, rss_mib())

    # Quiescence: traffic has stopped; nothing of any request may be left.
    await session.close()
    quiet_deadline = loop.time() + 10
    while loop.time() < quiet_deadline and (
        proxy.exchanges or proxy.clients or upstream.open_streams
    ):
        await asyncio.sleep(0.05)
    leftovers = {
        "proxy exchanges": len(proxy.exchanges),
        "proxy client connections": len(proxy.clients),
        "pool streams": sum(c.table.count() + c.table.reserved for c in proxy.pool.connections),
        "retry-buffer bytes": proxy.retry_budget.used,
        "retry budget used": proxy.retry_budget.used,
        "upstream open streams": upstream.open_streams,
    }
    pooled = len(proxy.pool.connections)
    # Retire the pooled connections (GOAWAY NO_ERROR, as max-conn-age does); then
    # fds, sockets and tasks must be those of the start: proxy, relays and
    # upstream are still running, with no connection among them.
    faults.heal()
    end = Snapshot.take()
    settle_deadline = loop.time() + 15
    while loop.time() < settle_deadline:
        for conn in proxy.pool.connections:
            conn.retire("soak finished")
        await asyncio.sleep(0.2)
        end = Snapshot.take()
        if (end.fds, end.sockets, end.tasks) == (start.fds, start.sockets, start.tasks):
            break
    print_report(
        args, client.tally, server, faults.counts, proxy, idle_cut, proxy_log, loop_errors,
        start, end, rss_warm, rss_peak, lags, leftovers, pooled, duration,
    )  # fmt: skip
    await proxy.stop(grace=0)
    await idle_cut.stop()
    await blackhole.stop()
    await upstream.stop()
    logging.getLogger().removeHandler(proxy_log)
    failed = check_invariants(
        client.tally, server, proxy_log, loop_errors, start, end, rss_warm, leftovers,
        len(idle_cut.live_cuts),
    )  # fmt: skip
    if failed:
        print("INVARIANTS FAILED: " + "; ".join(failed))
        return 1
    print("invariants: all hold")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=300, help="concurrent client workers")
    parser.add_argument("--tls", action="store_true", help="TLS upstream (trustme) instead of h2c")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--list-failures", action="store_true", help="every failed request id")
    args = parser.parse_args()
    if args.loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(soak(args))


if __name__ == "__main__":
    sys.exit(main())
