"""Upstream connections as Go's transport treats them, counted at the origin: idle
ones close, retired ones close as soon as they carry nothing, refused requests are
replayed until they succeed while the upstream takes work, and never run twice."""

from __future__ import annotations

import asyncio
import collections
import hashlib
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from h2.errors import ErrorCodes

from h2ping import Proxy
from h2ping.forward.replay import MAX_REPLAYS_WITH_PROGRESS
from h2ping.http2.upstream import ConnState
from h2ping.testing import ScriptedRequest, ScriptedUpstream

from ..conftest import TLSFiles, running_proxy, scripted

Handler = Callable[[ScriptedRequest], Awaitable[None]]


async def echo_digest(request: ScriptedRequest) -> None:
    body = await request.body()
    await request.respond(200, body=hashlib.sha256(body).hexdigest().encode())


def open_at_origin(up: ScriptedUpstream) -> list[int]:
    return [conn.id for conn in up.connections if not conn.closed]


@asynccontextmanager
async def proxy_before(
    tls: TLSFiles, handler: Handler, **options: Any
) -> AsyncIterator[tuple[ScriptedUpstream, Proxy]]:
    """A scripted upstream running ``handler``, and a proxy before it with ``options``."""
    async with scripted(tls, handler) as up, running_proxy(up.url, tls, **options) as proxy:
        yield up, proxy


async def post_ok(session: aiohttp.ClientSession, proxy: Proxy, path: str, body: bytes) -> None:
    async with session.post(proxy.url + path, data=body) as resp:
        assert resp.status == 200


def pool_states(proxy: Proxy) -> list[ConnState]:
    assert proxy.pool is not None
    return [conn.state for conn in proxy.pool.connections]


async def post_all(
    proxy: Proxy, ids: list[str], concurrency: int, payload: Callable[[str], bytes]
) -> dict[str, tuple[int, bytes]]:
    """POST each id (as ``x-id``) from ``concurrency`` keep-alive clients at once."""
    results: dict[str, tuple[int, bytes]] = {}
    queue = list(reversed(ids))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while queue:
                x_id = queue.pop()
                async with session.post(
                    proxy.url + "/p", data=payload(x_id), headers={"x-id": x_id}
                ) as resp:
                    results[x_id] = (resp.status, await resp.read())

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


# --------------------------------------------------------------------- idle connections


async def test_an_idle_connection_closes_with_goaway_and_the_next_request_opens_one(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    async with proxy_before(tls, echo_digest, idle_conn_timeout=0.3) as (up, proxy):
        await post_ok(session, proxy, "/a", b"a")
        answered_at = asyncio.get_running_loop().time()
        first = up.connections[0]
        await up.wait_for(lambda: first.closed)
        assert first.goaway_received == ErrorCodes.NO_ERROR
        assert first.closed_at - answered_at >= 0.25, "closed before it was idle that long"
        assert open_at_origin(up) == [] and pool_states(proxy) == []
        await post_ok(session, proxy, "/b", b"b")
        assert [c.id for c in up.connections] == [1, 2] and open_at_origin(up) == [2]
        assert proxy.stats.failed == 0


async def test_a_connection_carrying_a_long_request_is_not_idle(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    async def slow(request: ScriptedRequest) -> None:
        await request.body()
        await asyncio.sleep(0.8)  # held open past the idle timeout
        await request.respond(200, body=b"slow")

    async with proxy_before(tls, slow, idle_conn_timeout=0.3) as (up, proxy):
        async with session.get(proxy.url + "/slow") as resp:
            assert await resp.read() == b"slow"
        assert open_at_origin(up) == [1]
        await up.wait_for(lambda: up.connections[0].closed)
        assert len(up.connections) == 1 and proxy.stats.failed == 0


async def test_idle_conn_timeout_zero_keeps_connections(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    async with proxy_before(tls, echo_digest, idle_conn_timeout=0) as (up, proxy):
        await post_ok(session, proxy, "/a", b"a")
        await asyncio.sleep(0.6)  # silence: twice the 0.3 s that closes one above
        assert open_at_origin(up) == [1] and pool_states(proxy) == [ConnState.OPEN]


async def test_readiness_opens_a_connection_that_then_idles_out(tls: TLSFiles) -> None:
    async with proxy_before(tls, echo_digest, idle_conn_timeout=0.3) as (up, proxy):
        assert await proxy.readiness(2.0) is None
        assert open_at_origin(up) == [1]
        await up.wait_for(lambda: up.connections[0].closed)
        assert pool_states(proxy) == []
        assert await proxy.readiness(2.0) is None  # ready again: a fresh connection
        assert open_at_origin(up) == [2]


# --------------------------------------------------------------------- max-conn-age


async def test_an_idle_connection_at_its_age_is_replaced_before_it_closes(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    """The successor is up before the old one goes, so the next request waits for
    no handshake; a successor no request comes to closes at its own age with none
    after it, and an idle proxy holds no connection."""
    async with proxy_before(tls, echo_digest, max_conn_age=0.4, idle_conn_timeout=0.6) as (
        up,
        proxy,
    ):
        await post_ok(session, proxy, "/a", b"a")
        await up.wait_for(lambda: up.connections[0].closed)
        assert up.connections[0].goaway_received == ErrorCodes.NO_ERROR
        assert len(up.connections) == 2 and not up.connections[1].closed  # before the close
        assert proxy.stats.retired == 1
        await post_ok(session, proxy, "/b", b"b")  # on the successor
        assert len(up.connections) == 2
        await up.wait_for(lambda: all(conn.closed for conn in up.connections), timeout=5)
        count = len(up.connections)
        await asyncio.sleep(0.5)  # more than an age: none opens
        assert len(up.connections) == count and pool_states(proxy) == []


async def test_a_new_connection_resumes_the_tls_session_of_the_last(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    """The successor at max-conn-age resumes the session its predecessor was given
    (a TLS 1.3 ticket, which arrives after the handshake): one round trip less."""
    async with proxy_before(tls, echo_digest, max_conn_age=0.4, idle_conn_timeout=0) as (up, proxy):
        await post_ok(session, proxy, "/a", b"a")
        assert proxy.stats.tls_resumptions == 0  # the first has nothing to resume
        await up.wait_for(lambda: len(up.connections) >= 2)
        await post_ok(session, proxy, "/b", b"b")
        assert [conn.tls_resumed for conn in up.connections[:2]] == [False, True]
        assert proxy.stats.tls_resumptions >= 1


async def test_max_conn_age_moves_new_requests_while_a_slow_one_finishes_on_the_old(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    release = asyncio.Event()

    async def handler(request: ScriptedRequest) -> None:
        body = await request.body()
        if request.path == "/slow":
            await release.wait()
        await request.respond(200, body=body)

    async with proxy_before(tls, handler, max_conn_age=0.4, idle_conn_timeout=0) as (up, proxy):
        slow = asyncio.create_task(session.post(proxy.url + "/slow", data=b"slow"))
        await up.wait_for(lambda: len(up.requests) == 1)
        # At its age the busy connection gets a successor, then stops taking streams.
        await up.wait_for(lambda: ConnState.DRAINING in pool_states(proxy))
        assert ConnState.OPEN in pool_states(proxy)
        for i in range(5):
            async with session.post(proxy.url + "/quick", data=b"%d" % i) as resp:
                assert await resp.read() == b"%d" % i
        first = up.connections[0]
        assert [r.path for r in first.requests] == ["/slow"]
        assert not first.closed, "the old connection closed under its slow request"
        release.set()
        resp = await slow
        assert (resp.status, await resp.read()) == (200, b"slow")
        await up.wait_for(lambda: first.closed)
        assert first.goaway_received == ErrorCodes.NO_ERROR
        assert sum(len(c.requests) for c in up.connections[1:]) == 5
        # Nothing in flight: the used ones get a successor, which, never used, retires
        # at its own age with none after it.
        await up.wait_for(lambda: open_at_origin(up) == [])
        count = len(up.connections)
        await asyncio.sleep(0.5)  # silence: more than an age passes, and none opens
        assert len(up.connections) == count and pool_states(proxy) == []
        assert proxy.stats.failed == 0


# --------------------------------------------------------------------- replays


def goaway_after(streams: int, served: collections.Counter[str]) -> Callable[..., Awaitable[None]]:
    """A server that, like nginx's keepalive_requests, takes ``streams`` streams per
    connection, then sends GOAWAY naming the last and refuses the rest. Each request
    takes it up to 20 ms, so several connections overlap (with instant answers the
    replays queue up in order and hardly any is refused twice)."""
    rng = random.Random(3)

    async def handler(request: ScriptedRequest) -> None:
        conn = request.connection
        index = conn.requests.index(request)
        if index >= streams:  # above our GOAWAY's last_stream_id: never processed
            request.reset(ErrorCodes.REFUSED_STREAM)
            return
        if index == streams - 1:
            conn.goaway(last_stream_id=request.stream_id)
        body = await request.body()
        served[request.header("x-id") or ""] += 1
        await asyncio.sleep(rng.random() * 0.02)
        await request.respond(200, body=hashlib.sha256(body).hexdigest().encode())

    return handler


def payload(x_id: str) -> bytes:
    return x_id.encode() * (100 + int(x_id) % 50)


async def test_goaway_every_20_streams_with_40_in_flight_loses_no_request(
    tls: TLSFiles,
) -> None:
    served: collections.Counter[str] = collections.Counter()
    ids = [str(i) for i in range(400)]
    async with proxy_before(tls, goaway_after(20, served)) as (up, proxy):
        results = await post_all(proxy, ids, 40, payload)
        stats = proxy.stats
    failed = {x: r for x, r in results.items() if r[0] != 200}
    assert not failed, f"{len(failed)} of 400 failed: {next(iter(failed.values()))}"
    assert all(results[x][1] == hashlib.sha256(payload(x)).hexdigest().encode() for x in ids)
    assert served == collections.Counter(ids), "a request was processed twice, or never"
    assert len(up.connections) >= 20 and stats.replays > 0 and stats.failed == 0


STORM_REFUSALS = 1000


async def test_a_refusal_storm_costs_no_request(tls: TLSFiles) -> None:
    """Half of all streams refused (REFUSED_STREAM) until 1,000 have been, 40 POSTs
    at once: every request succeeds, none runs twice, and replays never pile onto
    the origin (each request has one stream at a time). The storm is counted, not
    timed, so a slow machine sees the same storm."""
    rng = random.Random(7)
    served: collections.Counter[str] = collections.Counter()
    refused = 0
    peak = 0
    calm = asyncio.Event()  # the storm is over

    async def handler(request: ScriptedRequest) -> None:
        nonlocal refused, peak
        peak = max(peak, up.open_streams)
        if not calm.is_set() and rng.random() < 0.5:
            refused += 1
            if refused == STORM_REFUSALS:
                calm.set()
            request.reset(ErrorCodes.REFUSED_STREAM)
            return
        body = await request.body()
        served[request.header("x-id") or ""] += 1
        await request.respond(200, body=hashlib.sha256(body).hexdigest().encode())

    async with proxy_before(tls, handler) as (up, proxy):
        sent: list[str] = []
        statuses: collections.Counter[int] = collections.Counter()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=40)) as session:

            async def worker(w: int) -> None:
                n = after = 0
                while after < 3:  # three more requests each once the storm is over
                    after += calm.is_set()
                    x_id = f"{w}-{n}"
                    n += 1
                    sent.append(x_id)
                    async with session.post(
                        proxy.url + "/s", data=os.urandom(2000), headers={"x-id": x_id}
                    ) as resp:
                        await resp.read()
                        statuses[resp.status] += 1

            async with asyncio.timeout(60):
                await asyncio.gather(*(worker(w) for w in range(40)))
        stats = proxy.stats
    assert refused == STORM_REFUSALS, "the storm did not happen"
    assert statuses == {200: len(sent)}, statuses
    assert served == collections.Counter(sent)
    assert stats.failed == 0
    assert peak <= 40


async def test_replays_go_on_while_the_upstream_answers_others_but_not_forever(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    """One request is always refused while others succeed: it is replayed past the
    plain bound, since the upstream is taking work, but within an overall one."""

    async def handler(request: ScriptedRequest) -> None:
        if request.path == "/refused":
            request.reset(ErrorCodes.REFUSED_STREAM)
            return
        await request.body()
        await request.respond(200, body=b"ok")

    async with proxy_before(tls, handler) as (up, proxy):
        refused = asyncio.create_task(session.post(proxy.url + "/refused", data=b"r"))

        async def steady() -> int:
            n = 0
            while not refused.done():
                async with session.get(proxy.url + "/ok") as resp:
                    assert await resp.read() == b"ok"
                n += 1
                await asyncio.sleep(0.01)
            return n

        ok = await asyncio.gather(steady(), steady())
        resp = await refused
        assert resp.status == 502
        text = await resp.text()
    attempts = sum(r.path == "/refused" for r in up.requests)
    assert attempts > 7, "stopped at the plain bound although the upstream took other work"
    assert f"gave up after {attempts - 1} replays" in text
    assert attempts <= MAX_REPLAYS_WITH_PROGRESS + 1 and sum(ok) > attempts
