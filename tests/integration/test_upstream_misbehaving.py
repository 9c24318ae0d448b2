"""An upstream that violates HTTP/2 or floods: the affected streams fail with 502
and a precise Proxy-Status, the connection is closed when the error is
connection-level, other connections are untouched, the proxy stays healthy."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from hyperframe.frame import DataFrame, PingFrame, RstStreamFrame, SettingsFrame

from h2ping.testing import RawPeer, RawUpstream

from ..conftest import TLSFiles, running_proxy

Misbehaviour = Callable[[RawPeer, int], Awaitable[None]]


async def answer_well(peer: RawPeer, stream_id: int) -> None:
    peer.send(peer.headers_frame(stream_id, [(":status", "200"), ("content-length", "2")]))
    peer.send(DataFrame(stream_id, b"ok", flags=["END_STREAM"]).serialize())
    await peer.drain()


def first_request_misbehaves(misbehave: Misbehaviour) -> Callable[[RawPeer], Awaitable[None]]:
    """The first request of the run is answered badly; every later one well."""
    requests = 0

    async def script(peer: RawPeer) -> None:
        nonlocal requests
        await peer.handshake()
        while True:
            stream_id, _ = await peer.read_request()
            requests += 1
            await (misbehave if requests == 1 else answer_well)(peer, stream_id)

    return script


async def connection_header(peer: RawPeer, stream_id: int) -> None:
    peer.send(
        peer.headers_frame(
            stream_id, [(":status", "200"), ("connection", "close")], end_stream=True
        )
    )


async def uppercase_name(peer: RawPeer, stream_id: int) -> None:
    peer.send(
        peer.headers_frame(stream_id, [(":status", "200"), ("X-Upper", "1")], end_stream=True)
    )


async def missing_status(peer: RawPeer, stream_id: int) -> None:
    peer.send(peer.headers_frame(stream_id, [("content-type", "text/plain")], end_stream=True))


async def hpack_bomb(peer: RawPeer, stream_id: int) -> None:
    # One 4 KB field, then 1,200 one-byte references to it: 5 MB from 7 KB, past
    # what the proxy decodes at all (a larger header list fails its stream only:
    # see test_stream_faults.py).
    bomb = [("x-bomb", "v" * 4000)] * 1200
    peer.send(peer.headers_frame(stream_id, [(":status", "200"), *bomb], end_stream=True))


async def malformed_ping(peer: RawPeer, stream_id: int) -> None:
    peer.send(b"\x00\x00\x04\x06\x00\x00\x00\x00\x00" + b"abcd")  # PING must carry 8 bytes


async def oversized_frame(peer: RawPeer, stream_id: int) -> None:
    peer.send(b"\x10\x00\x00\x00\x00" + stream_id.to_bytes(4, "big"))  # announces 1 MiB DATA


async def ping_flood(peer: RawPeer, stream_id: int) -> None:
    peer.send(b"".join(PingFrame(0, opaque_data=os.urandom(8)).serialize() for _ in range(5000)))


async def settings_flood(peer: RawPeer, stream_id: int) -> None:
    peer.send(SettingsFrame(0).serialize() * 5000)


async def empty_data_flood(peer: RawPeer, stream_id: int) -> None:
    peer.send(peer.headers_frame(stream_id, [(":status", "200")]))
    peer.send(DataFrame(stream_id, b"").serialize() * 5000)


async def garbage(peer: RawPeer, stream_id: int) -> None:
    peer.send(os.urandom(4096))


HEADER_BLOCK = "malformed response header block"
FLOOD = "flood of"
# case: (misbehaviour, Proxy-Status detail, whether only the stream fails)
MISBEHAVIOURS: dict[str, tuple[Misbehaviour, str, bool]] = {
    "connection-specific header": (connection_header, HEADER_BLOCK, True),
    "uppercase header name": (uppercase_name, HEADER_BLOCK, True),
    "missing :status": (missing_status, HEADER_BLOCK, True),
    "HPACK bomb": (hpack_bomb, "header list too large to decode", False),
    "malformed PING": (malformed_ping, "frame shorter than its fixed fields", False),
    "frame over max size": (oversized_frame, "SETTINGS_MAX_FRAME_SIZE", False),
    "PING flood": (ping_flood, FLOOD, False),
    "SETTINGS flood": (settings_flood, FLOOD, False),
    "empty DATA flood": (empty_data_flood, FLOOD, False),
    "garbage bytes": (garbage, "", False),
}


@pytest.mark.parametrize("case", list(MISBEHAVIOURS))
async def test_misbehaving_upstream_gives_502_then_recovers(
    case: str, session: aiohttp.ClientSession
) -> None:
    misbehave, detail, stream_level = MISBEHAVIOURS[case]
    async with (
        RawUpstream(first_request_misbehaves(misbehave)) as up,
        running_proxy(up.url) as proxy,
    ):
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with session.get(proxy.url + "/first") as resp:
            text = await resp.text()
            assert resp.status == 502, text
            assert "error=http_protocol_error" in resp.headers["proxy-status"]
            assert detail in resp.headers["proxy-status"]
        assert loop.time() - started < 3.0
        # The proxy stays healthy. A stream-level error leaves the connection up;
        # after a connection-level one the next request goes over a fresh one.
        async with session.get(proxy.url + "/second") as resp:
            assert resp.status == 200
            assert await resp.read() == b"ok"
        assert up.connections == (1 if stream_level else 2)
        assert up.errors == []


async def test_data_beyond_content_length_cuts_the_response(session: aiohttp.ClientSession) -> None:
    client_has_head = asyncio.Event()

    async def too_long(peer: RawPeer, stream_id: int) -> None:
        peer.send(peer.headers_frame(stream_id, [(":status", "200"), ("content-length", "3")]))
        await peer.drain()
        await asyncio.wait_for(client_has_head.wait(), 5)
        peer.send(DataFrame(stream_id, b"abcdefgh", flags=["END_STREAM"]).serialize())

    async with (
        RawUpstream(first_request_misbehaves(too_long)) as up,
        running_proxy(up.url) as proxy,
    ):
        async with session.get(proxy.url + "/long") as resp:
            client_has_head.set()
            assert resp.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await resp.read()
        async with session.get(proxy.url + "/again") as resp:
            assert resp.status == 200


async def test_other_connections_are_untouched() -> None:
    """Connection 1 serves a slow request well; connection 2 floods. Only the
    request on connection 2 fails."""
    connections = 0
    slow_arrived = asyncio.Event()

    async def script(peer: RawPeer) -> None:
        nonlocal connections
        connections += 1
        mine = connections
        await peer.handshake({SettingsFrame.MAX_CONCURRENT_STREAMS: 1})
        stream_id, _ = await peer.read_request()
        if mine == 1:
            slow_arrived.set()
            await asyncio.sleep(1.0)  # held open: the flooded request needs another connection
            await answer_well(peer, stream_id)
            await asyncio.sleep(1.0)
        else:
            await ping_flood(peer, stream_id)
            await asyncio.sleep(1.0)

    async with (
        RawUpstream(script) as up,
        running_proxy(up.url) as proxy,
        aiohttp.ClientSession() as session,
    ):
        slow = asyncio.create_task(session.get(proxy.url + "/slow"))
        await asyncio.wait_for(slow_arrived.wait(), 5)
        async with session.get(proxy.url + "/flooded") as resp:
            assert resp.status == 502
        good = await asyncio.wait_for(slow, 5)
        assert good.status == 200
        assert await good.read() == b"ok"


async def test_reset_storm_fails_only_the_reset_stream(session: aiohttp.ClientSession) -> None:
    """RST_STREAM for ours, repeated hundreds of times (within the flood budget;
    on streams never opened see test_upstream_floods.py): our stream fails, the
    connection itself stays usable."""

    async def storm(peer: RawPeer, stream_id: int) -> None:
        peer.send(RstStreamFrame(stream_id, error_code=8).serialize() * 500)

    async with RawUpstream(first_request_misbehaves(storm)) as up, running_proxy(up.url) as proxy:
        async with session.get(proxy.url + "/x") as resp:
            assert resp.status == 502
            assert "stream reset by upstream (CANCEL)" in resp.headers["proxy-status"]
        async with session.get(proxy.url + "/y") as resp:
            assert resp.status == 200
        assert up.connections == 1


async def test_garbage_instead_of_tls_handshake(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(os.urandom(2048))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with running_proxy(f"https://127.0.0.1:{port}", tls) as proxy:
            async with session.get(proxy.url + "/") as resp:
                assert resp.status == 502
                assert "error=tls_protocol_error" in resp.headers["proxy-status"]
    finally:
        server.close()


async def test_http1_server_on_h2c_port(session: aiohttp.ClientSession) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with running_proxy(f"http://127.0.0.1:{port}") as proxy:
            async with session.get(proxy.url + "/") as resp:
                assert resp.status == 502
                assert "error=" in resp.headers["proxy-status"]
    finally:
        server.close()
