"""The Pool with connections that need no socket."""

from __future__ import annotations

import asyncio

import pytest

from h2ping.errors import UpstreamError
from h2ping.pool import Pool
from h2ping.stats import Stats
from h2ping.upstream import UpstreamConnection

from .h2fake import REQUEST, FakeServer, FakeTransport, RecordingSink, config


@pytest.mark.parametrize("death", ["connection-lost", "ping-timeout"])
async def test_a_dying_connection_is_not_handed_to_a_waiting_request(death: str) -> None:
    dialled: list[UpstreamConnection] = []
    never = asyncio.get_running_loop().create_future()

    async def fake_connect(cfg, ssl_context, conn_id, on_change, stats, on_age=None):
        if dialled:
            await never  # the second connection never comes up
        conn = UpstreamConnection(cfg, conn_id, on_change, stats, on_age)
        conn.connection_made(FakeTransport())
        conn.data_received(FakeServer.settings(max_concurrent_streams=1))
        dialled.append(conn)
        return conn

    cfg = config(ping_interval=0.01, ping_timeout=0.02) if death == "ping-timeout" else config()
    pool = Pool(cfg, None, Stats(), dial=fake_connect)
    slot = await pool.acquire()
    sink = RecordingSink()
    slot.open(REQUEST, sink, end_stream=True)
    waiter = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0)  # queued; a second connection is being dialled
    if death == "connection-lost":
        dialled[0].connection_lost(ConnectionResetError("reset by peer"))
        await asyncio.sleep(0)
    else:  # the fake server never answers the PING
        for _ in range(100):
            await asyncio.sleep(0.01)
            if sink.error is not None:
                break
    assert sink.error is not None
    assert not waiter.done(), "the dead connection's freed slot went to a waiting request"
    pool.close()
    with pytest.raises(UpstreamError):
        await waiter
