"""What ends leaves nothing behind: upstream connections, their streams, the
exchanges and the client connections are freed as they end, by reference counting
alone, however they end.

The proxy sets the cyclic collector's full passes far apart (process/heap.py), so
an object kept alive only by a reference cycle stays until one comes, and over
days of connections rotating that is memory that only grows. Each test runs with
the collector off, and then looks for what is still alive: weak references to the
connections it saw in use, and a sweep of every object the collector tracks for
the rest (streams and exchanges have ``__slots__`` and no weak references;
connections whose dial failed never reach the pool).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import aiohttp
import pytest

from h2ping import Proxy
from h2ping.forward.exchange import Exchange
from h2ping.http1.listener import ClientConnection
from h2ping.http2.streams import UpstreamStream
from h2ping.http2.upstream import ConnState, UpstreamConnection
from h2ping.testing import RawUpstream, ScriptedRequest, ScriptedUpstream
from h2ping.testing.raw import RawPeer

from ..conftest import TLSFiles, free_port, running_proxy, scripted, wait_until

ROTATIONS = 6


@contextmanager
def no_cyclic_collector() -> Iterator[None]:
    """The cyclic collector off (what it would have freed is collected first)."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Watch:
    """Weak references to the upstream and client connections of ``proxy`` in use
    whenever :meth:`note` is called (from an upstream's handler, while a request
    is in flight), and what of them, or of any stream or exchange, is still alive."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.conns: weakref.WeakSet[UpstreamConnection] = weakref.WeakSet()
        self.clients: weakref.WeakSet[ClientConnection] = weakref.WeakSet()
        self.notes = 0

    def note(self) -> None:
        assert self.proxy.pool is not None
        self.conns.update(self.proxy.pool.connections)
        self.clients.update(self.proxy.clients)
        self.notes += 1

    def left_behind(self, dialling: bool = True) -> list[object]:
        """What ended and is still alive (with the collector off, nothing else
        can free it now): closed upstream connections (or, unless a dial may be
        under way, any not in the pool), client connections no longer in the
        proxy's set, and every stream and exchange (none is in flight)."""
        assert self.proxy.pool is not None
        pooled = self.proxy.pool.connections
        seen: list[object] = [c for c in self.conns if c.state is ConnState.CLOSED]
        seen += [c for c in self.clients if c not in self.proxy.clients]
        for obj in gc.get_objects():
            if isinstance(obj, UpstreamStream | Exchange) or (
                isinstance(obj, UpstreamConnection)
                and (obj.state is ConnState.CLOSED or not dialling)
                and obj not in pooled
                and obj not in seen
            ):
                seen.append(obj)
        return seen


@asynccontextmanager
async def unrecorded(logger: str) -> AsyncIterator[None]:
    """``logger``'s records not kept by pytest for its report: a record's
    arguments keep a failure, and with it what its traceback holds."""
    log = logging.getLogger(logger)
    log.propagate = False
    try:
        yield
    finally:
        log.propagate = True


async def settle(proxy: Proxy) -> None:
    """Every client connection gone, and a few loop turns for what ends after."""
    await wait_until(lambda: not proxy.clients and not proxy.exchanges)
    for _ in range(5):
        await asyncio.sleep(0.01)


@asynccontextmanager
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    """The calling framework's client, one connection per request: client
    connections come and go as well."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session


async def get(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url) as resp:
        await resp.read()
        return resp.status


def rotating_every(streams: int, watch: Callable[[], Watch]) -> Any:
    """A handler that answers, and sends GOAWAY after every ``streams`` streams."""

    async def handler(request: ScriptedRequest) -> None:
        watch().note()
        await request.body()
        await request.respond(200, body=b"ok")
        conn = request.connection
        if conn.streams_opened % streams == 0 and conn.goaway_sent is None:
            conn.goaway()

    return handler


def answering(watch: Callable[[], Watch]) -> Any:
    async def handler(request: ScriptedRequest) -> None:
        watch().note()
        await request.body()
        await request.respond(200, body=b"ok")

    return handler


def never_answering(watch: Callable[[], Watch]) -> Any:
    async def handler(request: ScriptedRequest) -> None:
        watch().note()
        await asyncio.Event().wait()

    return handler


class Late:
    """The watch, made once the proxy is (the handlers come before it)."""

    def __init__(self) -> None:
        self.watch: Watch | None = None

    def __call__(self) -> Watch:
        assert self.watch is not None
        return self.watch


def assert_freed(watch: Watch, rotations: int, dialling: bool = True) -> None:
    assert watch.notes >= rotations, "the scenario did not run"
    left = watch.left_behind(dialling)
    assert not left, f"{len(left)} objects of what ended still alive: {left[:6]}"


async def test_connections_rotated_by_goaway_leave_nothing(tls: TLSFiles) -> None:
    late = Late()
    async with (
        scripted(tls, rotating_every(3, late)) as up,
        running_proxy(up.url, tls) as proxy,
        client() as session,
    ):
        late.watch = watch = Watch(proxy)
        with no_cyclic_collector():
            for _ in range(3 * ROTATIONS):
                assert await get(session, proxy.url + "/x") == 200
            await settle(proxy)
            assert len(up.connections) >= ROTATIONS
            assert_freed(watch, ROTATIONS)


async def test_connections_retired_at_their_age_leave_nothing(tls: TLSFiles) -> None:
    late = Late()
    async with (
        scripted(tls, answering(late)) as up,
        running_proxy(up.url, tls, max_conn_age=0.25) as proxy,
        client() as session,
    ):
        late.watch = watch = Watch(proxy)
        with no_cyclic_collector():
            while len(up.connections) <= ROTATIONS:
                assert await get(session, proxy.url + "/x") == 200
                await asyncio.sleep(0.05)
            await settle(proxy)
            assert_freed(watch, ROTATIONS)


async def test_connections_the_peer_closes_leave_nothing(tls: TLSFiles) -> None:
    late = Late()
    async with (
        scripted(tls, answering(late)) as up,
        running_proxy(up.url, tls) as proxy,
        client() as session,
    ):
        late.watch = watch = Watch(proxy)
        assert proxy.pool is not None
        pool = proxy.pool
        with no_cyclic_collector():
            for _ in range(ROTATIONS):
                assert await get(session, proxy.url + "/x") == 200
                up.connections[-1].close()  # a TCP reset, no GOAWAY
                await wait_until(lambda: not pool.connections)
            await settle(proxy)
            assert_freed(watch, ROTATIONS)


async def test_connections_idle_too_long_leave_nothing(tls: TLSFiles) -> None:
    late = Late()
    async with (
        scripted(tls, answering(late)) as up,
        running_proxy(up.url, tls, idle_conn_timeout=0.1) as proxy,
        client() as session,
    ):
        late.watch = watch = Watch(proxy)
        assert proxy.pool is not None
        pool = proxy.pool
        with no_cyclic_collector():
            for _ in range(ROTATIONS):
                assert await get(session, proxy.url + "/x") == 200
                await wait_until(lambda: not pool.connections)
            await settle(proxy)
            assert_freed(watch, ROTATIONS)


async def test_connections_found_dead_by_ping_leave_nothing(tls: TLSFiles) -> None:
    """Each request waits on a connection whose peer has gone silent: its PING
    goes unanswered, the connection is cut, the request fails."""
    late = Late()
    async with (
        scripted(tls, never_answering(late), auto_ping_ack=False) as up,
        running_proxy(up.url, tls, ping_interval=0.05, ping_timeout=0.15) as proxy,
        client() as session,
    ):
        late.watch = watch = Watch(proxy)
        with no_cyclic_collector():
            for _ in range(ROTATIONS):
                assert await get(session, proxy.url + "/x") == 502
            await settle(proxy)
            assert len(up.connections) >= ROTATIONS
            assert_freed(watch, ROTATIONS)


async def test_connections_ended_by_a_protocol_error_leave_nothing() -> None:
    """Each request is answered by a malformed PING: the connection ends with
    GOAWAY(PROTOCOL_ERROR), the request fails (h2c: the loop's own transport)."""
    late = Late()

    async def script(peer: RawPeer) -> None:
        await peer.handshake()
        await peer.read_request()
        late().note()
        peer.send(b"\x00\x00\x04\x06\x00\x00\x00\x00\x00" + b"abcd")  # PING must carry 8 bytes
        while await peer.reader.read(65536):  # until the proxy closes
            pass

    async with (
        RawUpstream(script) as up,
        running_proxy(up.url) as proxy,
        client() as session,
    ):
        late.watch = watch = Watch(proxy)
        with no_cyclic_collector():
            for _ in range(ROTATIONS):
                assert await get(session, proxy.url + "/x") == 502
            await settle(proxy)
            assert up.connections >= ROTATIONS
            assert_freed(watch, ROTATIONS)


@pytest.mark.parametrize("failure", ["no h2 in ALPN", "connection refused"])
async def test_connections_whose_setup_fails_leave_nothing(tls: TLSFiles, failure: str) -> None:
    """Every dial fails: after TLS (the server offers no h2), or before the
    connection is made at all (nothing listens)."""
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(unrecorded("h2ping.exchange"))
        if failure == "no h2 in ALPN":
            server = ScriptedUpstream(ssl_context=tls.server_context(), alpn_protocols=["http/1.1"])
            url = (await stack.enter_async_context(server)).url
        else:
            url = f"https://127.0.0.1:{free_port()}"
        proxy = await stack.enter_async_context(running_proxy(url, tls))
        session = await stack.enter_async_context(client())
        watch = Watch(proxy)
        with no_cyclic_collector():
            for _ in range(ROTATIONS):
                assert await get(session, proxy.url + "/x") == 502
                watch.notes += 1
            await settle(proxy)
            assert_freed(watch, ROTATIONS, dialling=False)


async def test_a_proxy_shut_down_with_requests_in_flight_leaves_nothing(tls: TLSFiles) -> None:
    late = Late()
    async with scripted(tls, never_answering(late)) as up:
        proxy = Proxy(upstream=up.url, listen="127.0.0.1:0", ca_file=tls.ca_file)
        late.watch = watch = Watch(proxy)
        with no_cyclic_collector():
            await proxy.start()
            async with client() as session:
                requests = [asyncio.create_task(get(session, proxy.url + "/x")) for _ in range(5)]
                await wait_until(lambda: watch.notes == 5)
                await proxy.stop(grace=0)
                results = await asyncio.gather(*requests, return_exceptions=True)
            assert all(isinstance(r, aiohttp.ClientError) for r in results), results
            await settle(proxy)
            assert_freed(watch, 1)


async def test_client_connections_that_come_and_go_leave_nothing(tls: TLSFiles) -> None:
    """Clients that each make one request, keep-alive ones that then leave, one
    that leaves mid-request and one whose request is malformed."""
    late = Late()
    held = asyncio.Event()

    async def handler(request: ScriptedRequest) -> None:
        late().note()
        if request.path == "/held":
            held.set()
            await asyncio.Event().wait()
        await request.body()
        await request.respond(200, body=b"ok")

    async with scripted(tls, handler) as up, running_proxy(up.url, tls) as proxy:
        late.watch = watch = Watch(proxy)
        with no_cyclic_collector():
            async with client() as session:
                for _ in range(ROTATIONS):
                    assert await get(session, proxy.url + "/x") == 200
            async with aiohttp.ClientSession() as session:  # keep-alive
                for _ in range(3):
                    assert await get(session, proxy.url + "/x") == 200
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n")
            await held.wait()
            watch.note()
            writer.close()  # gone mid-request: the stream is reset
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"GET /x HTTP/1.1\r\nHost: x\r\nContent-Length: z\r\n\r\n")
            assert (await reader.read()).startswith(b"HTTP/1.1 400 ")
            writer.close()
            await up.wait_for(lambda: up.open_streams == 0)
            await settle(proxy)
            assert_freed(watch, ROTATIONS)
            assert len(watch.clients) == 0, list(watch.clients)


async def test_streams_refused_by_goaway_and_replayed_leave_nothing(tls: TLSFiles) -> None:
    """Streams above a GOAWAY's last_stream_id fail on their connection and go
    again on the next one: the refused streams and the exchanges are freed."""
    late = Late()

    async def handler(request: ScriptedRequest) -> None:
        late().note()
        conn = request.connection
        if conn.id == 1 and request.stream_id == 1:
            await up.wait_for(lambda: conn.streams_opened == 3)
            conn.goaway(request.stream_id)  # the two others were never processed
        elif conn.id == 1:
            await request.reset_by_client.wait()  # by the GOAWAY
            return
        await request.respond(200, body=b"ok")

    async with scripted(tls, handler) as up, running_proxy(up.url, tls) as proxy:
        late.watch = watch = Watch(proxy)
        with no_cyclic_collector():
            async with client() as session:
                statuses = await asyncio.gather(*(get(session, proxy.url + "/x") for _ in range(3)))
            assert statuses == [200, 200, 200]
            assert len(up.connections) == 2
            await settle(proxy)
            assert_freed(watch, 3)
