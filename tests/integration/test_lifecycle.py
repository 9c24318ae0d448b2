"""Connection lifecycle: GOAWAY and REFUSED_STREAM replay, retirement by age,
the memory bound on kept bodies. Users must see none of it, and no request may
reach the upstream twice when it may already have been acted on."""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import os
import pathlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from h2.errors import ErrorCodes

from h2ping import Proxy
from h2ping.process.metrics import Snapshot
from h2ping.testing import ScriptedRequest, ScriptedUpstream

from ..conftest import TLSFiles, running_proxy, scripted, wait_until
from ..nginx_answering import run_answering_nginx


def kept_bytes(proxy: Proxy) -> int:
    """The kept-body gauge, as /metrics reads it."""
    return Snapshot.of(proxy).stats.retry_buffer_bytes


def arrivals(upstream: ScriptedUpstream) -> collections.Counter[tuple[int, str]]:
    """(connection id, x-id) -> how often the server saw that request there."""
    return collections.Counter(
        (conn.id, r.header("x-id") or "") for conn in upstream.connections for r in conn.requests
    )


async def test_goaway_below_in_flight_streams(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    """The server announces GOAWAY, then completes the streams it kept (RFC 9113
    section 6.8). h2 alone would have closed its whole state machine on the GOAWAY
    and failed them."""
    release = asyncio.Event()

    async def handler(request: ScriptedRequest) -> None:
        body = await request.body()
        if request.connection.id == 1:
            await release.wait()
        await request.respond(200, body=body)

    async with scripted(tls, handler) as up, running_proxy(up.url, tls) as proxy:
        calls = [
            asyncio.create_task(
                session.post(proxy.url + "/g", data=b"%d" % i, headers={"x-id": str(i)})
            )
            for i in range(6)
        ]
        await up.wait_for(lambda: len(up.requests) == 6)
        first = up.connections[0]
        last = sorted(r.stream_id for r in first.requests)[2]
        first.goaway(last_stream_id=last)
        # The GOAWAY is processed before any stream finishes.
        await wait_until(lambda: proxy.stats.goaways == 1)
        release.set()
        responses = await asyncio.gather(*calls)
        bodies = [await r.read() for r in responses]
        stats = proxy.stats
    assert [r.status for r in responses] == [200] * 6
    assert bodies == [b"%d" % i for i in range(6)]
    kept = {r.header("x-id") for r in first.requests if r.stream_id <= last}
    above = {r.header("x-id") for r in first.requests if r.stream_id > last}
    seen = arrivals(up)
    assert len(kept) == 3 and len(above) == 3
    for x_id in kept:  # exactly once, on the first connection
        assert seen[(1, x_id)] == 1 and sum(n for (c, i), n in seen.items() if i == x_id) == 1
    for x_id in above:  # once where it was refused, once more where it was served
        assert sum(n for (c, i), n in seen.items() if i == x_id and c != 1) == 1
    assert (stats.goaways, stats.replays) == (1, 3)


async def test_two_step_graceful_goaway(tls: TLSFiles, session: aiohttp.ClientSession) -> None:
    """First GOAWAY(2^31-1): take no new streams here, keep the open ones. The
    final GOAWAY names the real last stream; later ones are replayed."""
    release = asyncio.Event()

    async def handler(request: ScriptedRequest) -> None:
        await request.body()
        if request.connection.id == 1:
            await release.wait()
        await request.respond(200, body=(request.header("x-id") or "").encode())

    async with scripted(tls, handler) as up, running_proxy(up.url, tls) as proxy:
        first_batch = [
            asyncio.create_task(session.get(proxy.url + "/a", headers={"x-id": f"a{i}"}))
            for i in range(4)
        ]
        await up.wait_for(lambda: len(up.requests) == 4)
        first = up.connections[0]
        first.goaway(last_stream_id=2**31 - 1)
        await wait_until(lambda: proxy.stats.goaways == 1)
        # New requests must not go to the announced-closing connection.
        second_batch = [
            asyncio.create_task(session.get(proxy.url + "/b", headers={"x-id": f"b{i}"}))
            for i in range(4)
        ]
        await up.wait_for(lambda: len(up.requests) == 8)
        assert len(first.requests) == 4
        last = sorted(r.stream_id for r in first.requests)[1]
        first.goaway(last_stream_id=last)
        await wait_until(lambda: proxy.stats.goaways == 2)
        release.set()
        responses = await asyncio.gather(*first_batch, *second_batch)
        bodies = sorted([(await r.read()).decode() for r in responses])
        assert proxy.stats.goaways == 2
        assert proxy.stats.replays == 2
    assert [r.status for r in responses] == [200] * 8
    assert bodies == sorted([f"a{i}" for i in range(4)] + [f"b{i}" for i in range(4)])


@pytest.mark.parametrize("kept_by_goaway", [True, False], ids=["at-or-below", "above"])
async def test_goaway_while_request_body_is_still_being_sent(
    tls: TLSFiles, kept_by_goaway: bool
) -> None:
    parts = [os.urandom(50_000) for _ in range(10)]
    halfway = asyncio.Event()
    goaway_sent = asyncio.Event()

    async def upload() -> AsyncIterator[bytes]:
        for i, part in enumerate(parts):
            if i == 5:
                halfway.set()
                await goaway_sent.wait()
            yield part

    async def handler(request: ScriptedRequest) -> None:
        body = await request.body()
        await request.respond(200, body=hashlib.sha256(body).hexdigest().encode())

    async with (
        scripted(tls, handler) as up,
        running_proxy(up.url, tls) as proxy,
        aiohttp.ClientSession() as session,
    ):
        call = asyncio.create_task(session.post(proxy.url + "/up", data=upload()))
        await asyncio.wait_for(halfway.wait(), 5)
        await up.wait_for(lambda: len(up.requests) == 1)
        (request,) = up.requests
        stream_id = request.stream_id
        up.connections[0].goaway(last_stream_id=stream_id if kept_by_goaway else stream_id - 1)
        await wait_until(lambda: proxy.stats.goaways == 1)
        goaway_sent.set()
        resp = await asyncio.wait_for(call, 10)
        assert resp.status == 200
        assert await resp.read() == hashlib.sha256(b"".join(parts)).hexdigest().encode()
        assert proxy.stats.replays == (0 if kept_by_goaway else 1)
    assert len(up.connections) == (1 if kept_by_goaway else 2)


async def test_refused_streams_are_replayed_once_each(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    arrivals_seen = 0
    refused: collections.Counter[str] = collections.Counter()
    served: collections.Counter[str] = collections.Counter()

    async def handler(request: ScriptedRequest) -> None:
        nonlocal arrivals_seen
        arrivals_seen += 1
        x_id = request.header("x-id") or ""
        # Every third stream refused, but no request more often than the replay
        # bound allows (that case is test_replays_are_bounded).
        if arrivals_seen % 3 == 0 and refused[x_id] < 2:
            refused[x_id] += 1
            request.reset(ErrorCodes.REFUSED_STREAM)
            return
        body = await request.body()
        served[request.header("x-id") or ""] += 1
        await request.respond(200, body=hashlib.sha256(body).hexdigest().encode())

    payloads = [os.urandom(10_000 + i) for i in range(30)]
    async with scripted(tls, handler) as up, running_proxy(up.url, tls) as proxy:
        responses = await asyncio.gather(
            *(
                session.post(proxy.url + "/r", data=p, headers={"x-id": str(i)})
                for i, p in enumerate(payloads)
            )
        )
        digests = [await r.read() for r in responses]
        assert proxy.stats.replays >= 10
    assert [r.status for r in responses] == [200] * 30
    assert digests == [hashlib.sha256(p).hexdigest().encode() for p in payloads]
    assert served == collections.Counter(str(i) for i in range(30))


async def test_refused_with_body_over_retry_limit_gets_502(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    async def handler(request: ScriptedRequest) -> None:
        request.reset(ErrorCodes.REFUSED_STREAM)

    async with (
        scripted(tls, handler) as up,
        running_proxy(up.url, tls, retry_body_limit=1000) as proxy,
    ):
        async with session.post(proxy.url + "/big", data=os.urandom(5000)) as resp:
            text = await resp.text()
            assert resp.status == 502
            assert "retry-body-limit" in resp.headers["proxy-status"]
            assert "retry-body-limit" in text
        assert proxy.stats.replays_refused_for_size == 1
        assert kept_bytes(proxy) == 0
    assert len(up.requests) == 1


LIMIT = 1024 * 1024


async def upload_half_way(
    proxy_port: int, up: ScriptedUpstream, framing: bytes, first: bytes
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Send a request head and the first part of its body; return once the upstream
    has read that part, so the proxy has seen every byte of it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    writer.write(b"POST /up HTTP/1.1\r\nHost: h2ping\r\n" + framing + b"\r\n\r\n" + first)
    await up.wait_for(lambda: bool(up.requests) and up.requests[0].body_bytes_received > 0)
    request = up.requests[0]
    await up.wait_for(lambda: request.body_bytes_received >= len(first) - 16)
    return reader, writer


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def test_body_declared_over_retry_limit_is_never_kept(tls: TLSFiles) -> None:
    """Known from Content-Length to be too large: not one byte of it is kept."""
    part = os.urandom(LIMIT // 2)
    async with (
        scripted(tls, None) as up,
        running_proxy(up.url, tls, retry_body_limit=LIMIT) as proxy,
    ):
        framing = b"Content-Length: %d" % (4 * len(part))
        reader, writer = await upload_half_way(proxy.port, up, framing, part)
        # The first half of the limit would fit, but keeping it would be for nothing.
        assert (kept_bytes(proxy), proxy.retry_budget.used) == (0, 0)
        writer.write(part * 3)
        head = await reader.readuntil(b"\r\n\r\n")
        body = await reader.readexactly(4 * len(part))
        writer.close()
        assert head.startswith(b"HTTP/1.1 200 ")
        assert body == part * 4
        assert proxy.retry_budget.peak == 0


async def test_chunked_body_is_kept_until_it_crosses_the_retry_limit(tls: TLSFiles) -> None:
    """No length declared: kept while it fits, released the moment it does not."""
    part = os.urandom(LIMIT // 2)
    async with (
        scripted(tls, None) as up,
        running_proxy(up.url, tls, retry_body_limit=LIMIT) as proxy,
    ):
        framing = b"Transfer-Encoding: chunked"
        reader, writer = await upload_half_way(proxy.port, up, framing, chunk(part))
        assert kept_bytes(proxy) == len(part)  # kept: it may still fit
        writer.write(chunk(part + b"x"))  # now one byte over the limit
        request = up.requests[0]
        await up.wait_for(lambda: request.body_bytes_received == 2 * len(part) + 1)
        assert (kept_bytes(proxy), proxy.retry_budget.used) == (0, 0)
        writer.write(chunk(part) + b"0\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        writer.close()
        assert head.startswith(b"HTTP/1.1 200 ")
        assert len(part) <= proxy.retry_budget.peak <= LIMIT


async def test_replays_are_bounded(tls: TLSFiles, session: aiohttp.ClientSession) -> None:
    """An upstream that refuses every stream: the request fails after as many
    replays as Go's transport makes, and within a second."""

    async def handler(request: ScriptedRequest) -> None:
        request.reset(ErrorCodes.REFUSED_STREAM)

    async with scripted(tls, handler) as up, running_proxy(up.url, tls) as proxy:
        async with session.post(proxy.url + "/x", data=b"small") as resp:
            assert resp.status == 502
            assert "gave up after 6 replays" in await resp.text()
        assert proxy.stats.replays == 6
    assert len(up.requests) == 7  # the first try and six replays


async def test_max_conn_age_rotates_under_load_without_failures(tls: TLSFiles) -> None:
    age = 1.0
    longest = 0.2

    async def handler(request: ScriptedRequest) -> None:
        await request.body()
        await asyncio.sleep(longest * (int(request.header("x-n") or 0) % 3) / 2)
        await request.respond(200, body=b"ok")

    async with (
        scripted(tls, handler) as up,
        running_proxy(up.url, tls, max_conn_age=age) as proxy,
        aiohttp.ClientSession() as session,
    ):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        statuses: collections.Counter[int] = collections.Counter()
        n = 0

        async def worker() -> None:
            nonlocal n
            while loop.time() < deadline:
                n += 1
                async with session.get(proxy.url + "/w", headers={"x-n": str(n)}) as resp:
                    await resp.read()
                    statuses[resp.status] += 1

        await asyncio.gather(*(worker() for _ in range(10)))
        retired = proxy.stats.retired
        await asyncio.sleep(longest + 0.2)  # let the last retired connection close
        lifetimes = [(c.closed_at or loop.time()) - c.opened_at for c in up.connections if c.closed]
    assert set(statuses) == {200}, statuses
    assert len(up.connections) >= 8  # ~10 s at ~1 s each
    assert retired >= 7
    # Nothing outlives its age by more than the longest request (plus scheduling slack).
    assert max(lifetimes) <= age + longest + 0.3, lifetimes


async def test_max_buffered_bytes_bounds_kept_bodies(
    tls: TLSFiles, caplog: pytest.LogCaptureFixture
) -> None:
    bound = 1024 * 1024
    payloads = [os.urandom(512 * 1024) for _ in range(8)]
    gate = asyncio.Event()

    async def handler(request: ScriptedRequest) -> None:
        await gate.wait()  # all uploads in flight at once
        body = await request.body()
        await request.respond(200, body=hashlib.sha256(body).hexdigest().encode())

    caplog.set_level(logging.WARNING, logger="h2ping")
    async with (
        scripted(tls, handler) as up,
        running_proxy(up.url, tls, max_buffered_bytes=bound) as proxy,
        aiohttp.ClientSession() as session,
    ):
        calls = [asyncio.create_task(session.post(proxy.url + "/u", data=p)) for p in payloads]
        await up.wait_for(lambda: len(up.requests) == 8)
        # The bodies come in until the bound leaves one unkept for replay.
        await wait_until(lambda: proxy.stats.unkept_bodies >= 1)
        gate.set()
        responses = await asyncio.gather(*calls)
        digests = [await r.read() for r in responses]
        assert proxy.retry_budget.peak <= bound
        assert proxy.stats.unkept_bodies >= 1
        assert kept_bytes(proxy) == 0
    assert [r.status for r in responses] == [200] * 8
    assert digests == [hashlib.sha256(p).hexdigest().encode() for p in payloads]
    assert "replay unavailable" in caplog.text


async def test_nginx_goaway_churn(tls: TLSFiles, tmp_path: pathlib.Path) -> None:
    """nginx sends GOAWAY after 50 requests per connection: 5,000 requests at 50
    concurrent must all succeed."""
    async with (
        run_answering_nginx(tls, tmp_path, "keepalive_requests 50;") as url,
        running_proxy(url, tls) as proxy,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=50)) as session,
    ):
        statuses: collections.Counter[int] = collections.Counter()
        bodies_ok = 0
        queue = list(range(5000))

        async def worker() -> None:
            nonlocal bodies_ok
            while queue:
                i = queue.pop()
                async with session.get(f"{proxy.url}/n/{i}") as resp:
                    statuses[resp.status] += 1
                    # Read first: `x += await ...` loads x before the await, and
                    # the other workers' additions meanwhile would be lost.
                    body = await resp.read()
                    bodies_ok += body == b"ok /n/%d\n" % i

        await asyncio.gather(*(worker() for _ in range(50)))
        stats = proxy.stats
    assert statuses == {200: 5000}
    assert bodies_ok == 5000
    assert stats.goaways >= 90  # 5,000 / 50
    assert stats.failed == 0


async def test_nginx_churn_loses_no_response_at_the_close(
    tls: TLSFiles, tmp_path: pathlib.Path
) -> None:
    """nginx ends each connection after 50 requests by sending the last responses,
    GOAWAY and its close together. With 20 KB responses, 50 at a time, the close
    comes while the proxy still has tens of KB of them to read: each must arrive
    whole (the loops' own SSL transports dropped what they held at the FIN)."""
    files = tmp_path / "files"
    files.mkdir()
    bodies = [os.urandom(20_000) for _ in range(10)]
    for i, body in enumerate(bodies):
        (files / str(i)).write_bytes(body)
    async with (
        run_answering_nginx(
            tls, tmp_path, f"keepalive_requests 50; location /f/ {{ alias {files}/; }}"
        ) as url,
        running_proxy(url, tls) as proxy,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=50)) as session,
    ):
        statuses: collections.Counter[int] = collections.Counter()
        wrong: list[int] = []
        queue = list(range(2000))

        async def worker() -> None:
            while queue:
                i = queue.pop()
                try:
                    async with session.get(f"{proxy.url}/f/{i % 10}") as resp:
                        statuses[resp.status] += 1
                        if await resp.read() != bodies[i % 10]:
                            wrong.append(i)
                except aiohttp.ClientError:  # a response cut short
                    wrong.append(i)

        await asyncio.gather(*(worker() for _ in range(50)))
        stats = proxy.stats
    assert statuses == {200: 2000}
    assert wrong == []
    assert stats.goaways >= 35  # 2,000 / 50, less the connections still open
    assert stats.failed == stats.aborted == 0


async def test_kept_body_is_freed_when_response_headers_arrive(tls: TLSFiles) -> None:
    headers_go = asyncio.Event()
    finish = asyncio.Event()

    async def handler(request: ScriptedRequest) -> None:
        await request.body()
        await headers_go.wait()
        await request.send_headers(200)
        await finish.wait()
        await request.send_data(b"done", end_stream=True)

    async with (
        scripted(tls, handler) as up,
        running_proxy(up.url, tls) as proxy,
        aiohttp.ClientSession() as session,
    ):
        call = asyncio.create_task(session.post(proxy.url + "/k", data=b"x" * 100_000))
        await up.wait_for(lambda: up.requests and up.requests[0].ended)
        assert kept_bytes(proxy) == 100_000  # kept while a refusal is possible
        headers_go.set()
        resp = await asyncio.wait_for(call, 5)
        assert resp.status == 200
        assert kept_bytes(proxy) == 0  # the stream is still open, the body gone
        finish.set()
        assert await resp.read() == b"done"
