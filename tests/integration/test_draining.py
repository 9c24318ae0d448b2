"""A draining connection takes every frame a server may still send on it.

After a GOAWAY (or once h2ping retired the connection), the server goes on
answering the streams at or below ``last_stream_id``, and may send PINGs, the
ACKs of h2ping's PINGs, SETTINGS, WINDOW_UPDATE and RST_STREAM meanwhile and
after the last response, often in the same read (nginx sends its last
responses, the GOAWAY and the close together). None of them is a protocol
error: every stream the server kept completes byte for byte, and no "protocol
error" is logged for a connection that ended normally.
"""

from __future__ import annotations

import asyncio
import logging
import os

import aiohttp
import pytest
from h2.errors import ErrorCodes
from h2.settings import SettingCodes

from h2ping.testing import ScriptedConnection, ScriptedRequest

from ..conftest import TLSFiles, running_proxy, scripted

REQUESTS = 5
BODY = 3000  # small: the server's whole last write fits one TLS record, one read


def control_frames(conn: ScriptedConnection) -> None:
    """A PING, a SETTINGS and a WINDOW_UPDATE from the server."""
    conn.ping(os.urandom(8))
    conn.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
    conn.window_update(1 << 16)


@pytest.mark.parametrize("how", ["goaway", "retired"])
async def test_a_draining_connection_takes_every_frame_a_server_may_send(
    tls: TLSFiles, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    caplog.set_level(logging.INFO, logger="h2ping")
    answer = asyncio.Event()
    bodies = [os.urandom(BODY) for _ in range(REQUESTS)]
    received: dict[int, bytes] = {}  # the first connection's request bodies, by stream

    async def handler(request: ScriptedRequest) -> None:
        body = await request.body()
        if request.connection.id == 1:
            received[request.stream_id] = body
            await answer.wait()
            return  # the test answers these itself, all in one write
        await request.respond(200, [("content-length", str(len(body)))], body)

    # PING ACKs held from the start: the ACK of h2ping's first PING (sent with
    # its preface) reaches it only once the connection drains.
    async with scripted(tls, handler, auto_ping_ack=False) as up:
        async with running_proxy(up.url, tls) as proxy:
            calls = [
                asyncio.create_task(
                    session.post(proxy.url + "/d", data=body, headers={"x-id": str(i)})
                )
                for i, body in enumerate(bodies)
            ]
            await up.wait_for(lambda: len(up.requests) == REQUESTS)
            first = up.connections[0]
            assert len(first.requests) == REQUESTS  # one connection carries them all
            assert first.held_ping_acks >= 1
            ordered = sorted(first.requests, key=lambda r: r.stream_id)
            kept, above = ordered[:-1], ordered[-1]
            # Every request body has been read: nothing more comes from h2ping
            # on these streams but its window credit.
            await up.wait_for(lambda: len(received) == REQUESTS)
            (conn,) = proxy.pool.connections
            settings_acked = first.settings_acked
            with first.corked():
                if how == "goaway":
                    first.goaway(last_stream_id=kept[-1].stream_id)
                    # The stream above it was never processed: refused, as nginx does.
                    above.reset(ErrorCodes.REFUSED_STREAM)
                else:
                    conn.retire("test")  # h2ping's own retirement: no GOAWAY yet
                    await above.respond(
                        200, [("content-length", str(BODY))], received[above.stream_id]
                    )
                first.release_ping_acks()  # the ACK of a PING sent before
                control_frames(first)
                for request in kept:
                    await request.respond(
                        200, [("content-length", str(BODY))], received[request.stream_id]
                    )
                    control_frames(first)
                first.hold_ping_acks = False
            answer.set()
            responses = await asyncio.gather(*calls)
            got = [await r.read() for r in responses]
            await up.wait_for(lambda: first.closed)
            stats = proxy.stats
        # The server's PINGs and SETTINGS while the streams were answered were
        # acknowledged (those after the last response may not be: h2ping closed).
        assert len(first.ping_acks_received) >= 1
        assert first.settings_acked > settings_acked
        assert first.goaway_received == ErrorCodes.NO_ERROR
    assert [r.status for r in responses] == [200] * REQUESTS
    assert got == bodies
    assert stats.replays == (1 if how == "goaway" else 0)
    problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert problems == []
