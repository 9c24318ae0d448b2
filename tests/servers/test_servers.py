"""h2ping in front of independently written HTTP/2 servers (tests/servers/):
Apache httpd with mod_http2, h2o, HAProxy, Node's http2 module, Granian and
nginx, each started by the test on a free loopback port. The client is aiohttp,
as in production.

Every case runs on both loops, except the idle minute: it runs once, for all
servers at once, on uvloop (the loop the command uses), to keep the suite's
time down."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import pathlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from ..conftest import TLSFiles, running_proxy
from . import BIG_SIZE, STREAM_CHUNKS, STREAM_GAP_MS, Origin, big_body, stream_chunk
from .apache import run_apache
from .granian import run_granian
from .h2o import run_h2o
from .haproxy import run_haproxy
from .nginx import run_nginx
from .node import run_node

#: The whole file is the `servers` mark: CI runs it on one Python only.
pytestmark = pytest.mark.servers

RUNNERS: dict[str, Callable[..., contextlib.AbstractAsyncContextManager[Origin]]] = {
    "apache": run_apache,
    "h2o": run_h2o,
    "haproxy": run_haproxy,
    "node": run_node,
    "granian": run_granian,
    "nginx": run_nginx,
}

# Those that can end a connection after N streams: nginx (keepalive_requests) and
# Node (session.close() on the Nth stream). Apache's MaxKeepAliveRequests does not
# apply to HTTP/2 sessions (one connection carried 300 streams with it at 50);
# HAProxy 2.6, h2o 2.2 and Granian have no such setting.
CHURNING = ["nginx", "node"]

uvloop_only = pytest.mark.asyncio(loop_factories=["uvloop"])


@pytest.fixture(params=list(RUNNERS))
async def origin(
    request: pytest.FixtureRequest, tls: TLSFiles, tmp_path: pathlib.Path
) -> AsyncIterator[Origin]:
    async with RUNNERS[request.param](tls, tmp_path) as running:
        yield running


async def wait_until(condition: Callable[[], Any], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_get_and_post_echo(
    origin: Origin, tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    body = bytes(range(256)) * 64 + os.urandom(50_000)
    async with running_proxy(origin.url, tls) as proxy:
        async with session.get(proxy.url + "/hello") as resp:
            assert resp.status == 200
            assert await resp.read() == b"hello\n"
        async with session.post(proxy.url + "/echo", data=body) as resp:
            assert resp.status == 200
            assert await resp.read() == body
        assert proxy.stats.failed == 0


async def test_16_mib_each_way(
    origin: Origin, tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    upload = os.urandom(BIG_SIZE)
    async with running_proxy(origin.url, tls) as proxy:
        async with session.post(proxy.url + "/sha256", data=upload) as resp:
            assert resp.status == 200
            assert await resp.text() == hashlib.sha256(upload).hexdigest()
        async with session.get(proxy.url + "/big") as resp:
            assert resp.status == 200
            digest = hashlib.sha256()
            received = 0
            async for chunk in resp.content.iter_any():
                digest.update(chunk)
                received += len(chunk)
        assert received == BIG_SIZE
        assert digest.hexdigest() == hashlib.sha256(big_body()).hexdigest()


async def test_streamed_response_arrives_in_pieces(
    origin: Origin, tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    """The origin writes a chunk every STREAM_GAP_MS; each must reach the client
    when it is written, not with the end of the response."""
    arrivals: list[tuple[float, bytes]] = []
    async with running_proxy(origin.url, tls) as proxy:
        async with session.get(proxy.url + "/stream") as resp:
            assert resp.status == 200
            async for chunk in resp.content.iter_any():
                arrivals.append((time.monotonic(), chunk))
    assert b"".join(chunk for _, chunk in arrivals) == b"".join(
        stream_chunk(i) for i in range(STREAM_CHUNKS)
    )
    spread = arrivals[-1][0] - arrivals[0][0]
    nominal = (STREAM_CHUNKS - 1) * STREAM_GAP_MS / 1000
    # Generous margins for a busy machine: a buffered response arrives in one piece,
    # with no spread at all.
    assert len(arrivals) >= STREAM_CHUNKS // 2, arrivals
    assert spread >= nominal / 2, arrivals


@pytest.mark.parametrize("origin", list(RUNNERS), indirect=True)
async def test_graceful_reload_with_requests_in_flight(
    origin: Origin, tls: TLSFiles, caplog: pytest.LogCaptureFixture
) -> None:
    """20 slow requests are at the origin when it reloads, and 40 more, slow too,
    are sent over the 2.4 s after: all answered, each processed once.

    Apache 2.4.71's mod_http2 now and then (about one reload in ten here) ends
    the old generation's session with GOAWAY(last_stream_id=39, error
    0xfffffc7a, "The user callback function failed") without sending the last
    two responses; the Go binary loses the same two requests then. Those, and
    only those, may fail: with a 502 naming the GOAWAY's error, never replayed."""
    caplog.set_level(logging.INFO, logger="h2ping")
    bodies = {str(i): os.urandom(2048) for i in range(60)}
    async with (
        running_proxy(origin.url, tls) as proxy,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
    ):

        async def call(key: str, path: str) -> tuple[int, bool]:
            async with session.post(
                proxy.url + path, data=bodies[key], headers={"x-id": key}
            ) as resp:
                return resp.status, await resp.read() == bodies[key]

        slow = [asyncio.create_task(call(str(i), "/slow?ms=1000")) for i in range(20)]
        await wait_until(lambda: len(origin.seen()) == 20)
        await origin.reload()
        rest = []
        for i in range(20, 60):
            rest.append(asyncio.create_task(call(str(i), "/slow?ms=300")))
            await asyncio.sleep(0.06)
        results = await asyncio.gather(*slow, *rest)
        stats = proxy.stats
    failed = [i for i, result in enumerate(results) if result != (200, True)]
    if failed:
        # Only what a server's own error GOAWAY cut, each failure saying so.
        errors = [r.getMessage() for r in caplog.records if "GOAWAY received" in r.getMessage()]
        assert any("error=NO_ERROR" not in line for line in errors), (failed, errors)
        assert all(results[i] == (502, False) for i in failed), results
        cut = [r.getMessage() for r in caplog.records if "after GOAWAY" in r.getMessage()]
        assert len(cut) == len(failed) == stats.failed, cut
    assert stats.aborted == 0
    assert origin.seen() == dict.fromkeys(bodies, 1)  # none processed twice, none lost


@pytest.mark.parametrize("name", CHURNING)
async def test_churn_post_echo(name: str, tls: TLSFiles, tmp_path: pathlib.Path) -> None:
    """The server ends each connection after 50 streams: 2,000 POSTs with 2 KB
    bodies, 50 concurrent. Every one is answered with its own body and reaches the
    origin once (a replay happens only for streams the server never processed)."""
    total, concurrency = 2000, 50
    bodies = [os.urandom(2000) for _ in range(total)]
    failures: list[str] = []
    async with (
        RUNNERS[name](tls, tmp_path, max_requests=50) as origin,
        running_proxy(origin.url, tls) as proxy,
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency),
            timeout=aiohttp.ClientTimeout(total=60),
        ) as session,
    ):
        queue = list(range(total))

        async def worker() -> None:
            while queue:
                i = queue.pop()
                try:
                    async with session.post(
                        proxy.url + "/echo", data=bodies[i], headers={"x-id": str(i)}
                    ) as resp:
                        body = await resp.read()
                        if resp.status != 200 or body != bodies[i]:
                            failures.append(f"{i}: {resp.status} {len(body)} bytes")
                except aiohttp.ClientError as e:  # a cut response: count it, go on
                    failures.append(f"{i}: {e!r}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        stats = proxy.stats
        seen = origin.seen()
    assert failures == []
    assert stats.failed == 0 and stats.aborted == 0
    assert stats.goaways >= total // 50 // 2  # the churn did happen
    assert seen == {str(i): 1 for i in range(total)}


@uvloop_only
async def test_idle_minute_keeps_the_connection(tls: TLSFiles, tmp_path: pathlib.Path) -> None:
    """A minute of idle with a PING every second, against all the servers at once:
    none sends GOAWAY or closes, and the connection that served the first request
    serves the last."""
    async with contextlib.AsyncExitStack() as stack:
        proxies = {}
        skipped = []
        for name, run in RUNNERS.items():
            (tmp_path / name).mkdir()
            try:
                origin = await stack.enter_async_context(run(tls, tmp_path / name))
            except pytest.skip.Exception:
                skipped.append(name)
                continue
            proxies[name] = await stack.enter_async_context(
                running_proxy(origin.url, tls, ping_interval=1.0)
            )
        if not proxies:
            pytest.skip(f"none of the servers is installed: {skipped}")
        session = await stack.enter_async_context(aiohttp.ClientSession())

        async def hello(name: str) -> list[int]:
            async with session.get(proxies[name].url + "/hello") as resp:
                assert resp.status == 200, name
                assert await resp.read() == b"hello\n"
            pool = proxies[name].pool
            assert pool is not None
            return [conn.id for conn in pool.connections]

        before = {name: await hello(name) for name in proxies}
        await asyncio.sleep(60)
        after = {name: await hello(name) for name in proxies}
        stats = {name: proxy.stats for name, proxy in proxies.items()}
    assert {name: len(ids) for name, ids in before.items()} == dict.fromkeys(proxies, 1)
    assert after == before
    assert {name: s.goaways for name, s in stats.items()} == dict.fromkeys(proxies, 0)
    assert {name: s.connections_opened for name, s in stats.items()} == dict.fromkeys(proxies, 1)
    # About 60 each; the margin is for a busy machine.
    assert all(s.ping_acks >= 30 for s in stats.values()), {
        n: s.ping_acks for n, s in stats.items()
    }
