"""Many clients that go away at once do not end their neighbours' responses.

Three hundred clients each follow an event stream on one upstream connection,
beside a neighbour's. They all go away at once (a job's requests cancelled
together): h2ping resets their 300 streams. The server had more events in
flight on each, small DATA frames it sent before it read the resets, and they
arrive after them. They are what any server has in flight, not a flood: the
neighbour's response goes on to its end, on the same connection, with no
GOAWAY from h2ping. Past what may have been in flight, small frames on a reset
stream are still charged as the flood they are (tests/unit/test_frames.py).
"""

from __future__ import annotations

import asyncio
import contextlib

from hyperframe.frame import DataFrame, GoAwayFrame, RstStreamFrame, SettingsFrame

from h2ping.testing import RawPeer, RawUpstream

from ..conftest import running_proxy

LEAVING = 300
#: Events each leaving stream still has in flight when its reset arrives: 2,400
#: small frames in all, over twice the flood budget's burst.
IN_FLIGHT = 8
EVENT = b"data: " + b"e" * 56 + b"\n\n"  # 64 bytes, a streamed token's size
NEIGHBOUR_EVENTS = 50


async def test_events_in_flight_on_reset_streams_spare_the_neighbour() -> None:
    resets: set[int] = set()
    goaways: list[GoAwayFrame] = []
    leaving: list[int] = []
    neighbour_stream = 0
    all_open = asyncio.Event()
    all_reset = asyncio.Event()
    heard_out = asyncio.Event()

    async def read_resets(peer: RawPeer) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                frame = await peer.read_frame()
                if isinstance(frame, RstStreamFrame):
                    resets.add(frame.stream_id)
                    if resets.issuperset(leaving):
                        all_reset.set()
                elif isinstance(frame, GoAwayFrame):
                    goaways.append(frame)

    async def script(peer: RawPeer) -> None:
        nonlocal neighbour_stream
        await peer.handshake({SettingsFrame.MAX_CONCURRENT_STREAMS: 1000})
        while len(leaving) < LEAVING or not neighbour_stream:
            stream_id, headers = await peer.read_request()
            if dict(headers)[":path"] == "/neighbour":
                neighbour_stream = stream_id
            else:
                leaving.append(stream_id)
            peer.send(peer.headers_frame(stream_id, [(":status", "200")]))
            peer.send(DataFrame(stream_id, EVENT).serialize())
            await peer.drain()
        all_open.set()
        reader = asyncio.create_task(read_resets(peer))
        await asyncio.wait_for(all_reset.wait(), 10)
        # What was in flight when the resets were sent, read after them.
        for _ in range(IN_FLIGHT):
            peer.send(b"".join(DataFrame(s, EVENT).serialize() for s in leaving))
        for _ in range(NEIGHBOUR_EVENTS):
            peer.send(DataFrame(neighbour_stream, EVENT).serialize())
        peer.send(DataFrame(neighbour_stream, b"", flags=["END_STREAM"]).serialize())
        await peer.drain()
        await asyncio.sleep(0.5)  # h2ping's answer to the flood, were it one
        reader.cancel()
        heard_out.set()

    async def follow(port: int, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET %s HTTP/1.1\r\nHost: events\r\n\r\n" % path.encode())
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        return reader, writer

    async with RawUpstream(script) as up, running_proxy(up.url) as proxy:
        port = int(proxy.url.rsplit(":", 1)[1])
        neighbour_reader, neighbour_writer = await follow(port, "/neighbour")
        clients = await asyncio.gather(*(follow(port, "/events") for _ in range(LEAVING)))
        await asyncio.wait_for(all_open.wait(), 10)
        for _, writer in clients:  # all gone at once
            writer.transport.abort()
        # To its last chunk; cut short, the read fails.
        body = await asyncio.wait_for(neighbour_reader.readuntil(b"\r\n0\r\n\r\n"), 10)
        neighbour_writer.close()
        await asyncio.wait_for(heard_out.wait(), 10)
        assert goaways == []  # (one comes when the proxy stops)
        assert up.errors == []
        assert up.connections == 1
    # The neighbour's 51 events, chunked, and the last chunk: nothing cut.
    assert body.count(EVENT) == NEIGHBOUR_EVENTS + 1
    assert body.endswith(b"0\r\n\r\n")
