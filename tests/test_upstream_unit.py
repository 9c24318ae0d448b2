"""UpstreamConnection driven directly: a fake transport and server frames as bytes."""

from __future__ import annotations

import pytest

from h2ping.stats import Stats
from h2ping.upstream import ConnState, SlotLost, UpstreamConnection

from .h2fake import REQUEST, FakeServer, FakeTransport, RecordingSink, config


def open_conn(max_streams: int = 10) -> tuple[UpstreamConnection, FakeTransport]:
    conn = UpstreamConnection(config(), 1, lambda c: None, Stats())
    transport = FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(FakeServer.settings(max_concurrent_streams=max_streams))
    assert conn.state is ConnState.OPEN
    return conn, transport


async def test_retired_connection_closes_when_its_pending_reservation_is_used() -> None:
    conn, transport = open_conn()
    slot = conn.try_reserve()
    assert slot is not None
    conn.retire("max-conn-age")
    assert conn.state is ConnState.DRAINING
    with pytest.raises(SlotLost):
        slot.open(REQUEST, RecordingSink(), end_stream=True)
    assert conn.state is ConnState.CLOSED
    assert transport.closed


async def test_retired_connection_closes_when_its_pending_reservation_is_released() -> None:
    conn, transport = open_conn()
    slot = conn.try_reserve()
    assert slot is not None
    conn.retire("max-conn-age")
    slot.release()
    assert conn.state is ConnState.CLOSED
    assert transport.closed
