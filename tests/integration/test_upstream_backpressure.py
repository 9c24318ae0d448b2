"""An upstream that stops reading what h2ping writes, while it goes on sending.

The attack: the upstream makes h2ping reset a stream (an uppercase header name),
stops reading, and floods 1-byte DATA frames on that stream, each of which h2ping
once answered with a RST_STREAM that nobody read: memory grew for as long as it
lasted, the connection never ended, and the next request went onto it and hung.
Now such DATA goes unanswered and is charged to the flood budget, and a
connection whose writes wait (an upload the server stops reading, below) stops
reading, takes no new stream, and is cut once the upstream has taken nothing for
-write-timeout."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest
from hyperframe.frame import DataFrame

from h2ping.testing import RawPeer, RawUpstream, ScriptedRequest

from ..conftest import TLSFiles, running_proxy, scripted, wait_until

#: An upload larger than the socket buffers on the way hold.
UPLOAD = 32 * 1024 * 1024
#: Frames the attacker writes between two waits for its socket to drain.
BURST = 2000
#: h2ping's writes are blocked by then: its socket buffers hold megabytes first.
BLOCKED_WITHIN = 30.0
#: An attack that has not ended the connection by then has not been stopped.
ATTACK_LIMIT = BLOCKED_WITHIN + 20.0


class Attack:
    """The first connection resets-then-floods; every later one answers well."""

    def __init__(self) -> None:
        self.sent = 0  # flood bytes the attacker got written
        self.over = asyncio.Event()  # the attacked connection ended
        self.gave_up = False  # the attack ran ATTACK_LIMIT without the connection ending
        self.connections = 0

    async def script(self, peer: RawPeer) -> None:
        await peer.handshake()
        stream_id, _ = await peer.read_request()
        self.connections += 1
        if self.connections > 1:
            return await self._answer(peer, stream_id)
        peer.send(peer.headers_frame(stream_id, [(":status", "200"), ("X-Upper", "1")]))
        await peer.drain()
        frame = DataFrame(stream_id, b"x").serialize()
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            while loop.time() - started < ATTACK_LIMIT:
                peer.send(frame * BURST)
                await peer.drain()
                self.sent += len(frame) * BURST
            self.gave_up = True
        finally:
            self.over.set()

    async def _answer(self, peer: RawPeer, stream_id: int) -> None:
        while True:
            peer.send(peer.headers_frame(stream_id, [(":status", "200"), ("content-length", "2")]))
            peer.send(DataFrame(stream_id, b"ok", flags=["END_STREAM"]).serialize())
            await peer.drain()
            stream_id, _ = await peer.read_request()


async def test_the_reflected_reset_attack_ends_the_connection_and_the_next_request_is_served(
    session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    """The attack as it was staged against h2ping: two defences now meet it. DATA
    on a stream h2ping reset is discarded unanswered and charged to the flood
    budget, and a connection whose writes wait reads nothing more and takes no
    stream. Whichever acts first, the connection ends within seconds, once, with
    a line or two in the log, and the next request is served on a fresh one."""
    attack = Attack()
    caplog.set_level(logging.INFO, logger="h2ping")
    async with (
        RawUpstream(attack.script) as up,
        running_proxy(up.url, write_timeout=2.0) as proxy,
    ):
        async with session.get(proxy.url + "/first") as resp:
            assert resp.status == 502  # the uppercase name: that stream alone
        assert proxy.pool is not None
        await asyncio.wait_for(attack.over.wait(), ATTACK_LIMIT + 5)
        assert not attack.gave_up
        await wait_until(lambda: not proxy.pool.connections)  # type: ignore[union-attr]
        async with session.get(proxy.url + "/second") as resp:
            assert resp.status == 200 and await resp.read() == b"ok"
        assert up.connections == 2
    ended = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.getMessage().startswith("conn=1 ")
    ]
    assert 1 <= len(ended) <= 2, ended
    assert up.errors == []


async def test_an_upload_the_upstream_stops_reading_fails_with_why_over_tls(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    """A server that stops reading in the middle of an upload, over h2ping's own TLS
    layer: the request fails with a 502 that says why, and a request meanwhile
    goes to another connection."""

    async def handler(request: ScriptedRequest) -> None:
        if request.path == "/upload":
            request.connection.stop_reading()
            await asyncio.Event().wait()  # until the connection ends
        await request.respond(200, body=b"ok")

    async def body() -> AsyncIterator[bytes]:
        for _ in range(UPLOAD // 65536):
            yield b"u" * 65536

    async with (
        scripted(tls, handler, initial_window_size=UPLOAD) as up,
        running_proxy(up.url, tls, write_timeout=1.0) as proxy,
    ):
        upload = asyncio.create_task(session.post(proxy.url + "/upload", data=body()))
        assert proxy.pool is not None
        await wait_until(lambda: bool(proxy.pool.connections))  # type: ignore[union-attr]
        (stalled,) = proxy.pool.connections
        await wait_until(lambda: stalled.clocks.writes.blocked, timeout=BLOCKED_WITHIN)
        async with session.get(proxy.url + "/meanwhile") as resp:
            assert resp.status == 200 and await resp.read() == b"ok"
        assert len(up.connections) == 2
        async with await upload as resp:
            assert resp.status == 502
            status = resp.headers["proxy-status"]
        assert "error=connection_terminated" in status
        assert "stopped reading what h2ping writes" in status
