"""Receive windows that follow the link (h2ping.http2.windows), on a fake clock,
and on an upstream connection: the PINGs that measure, the WINDOW_UPDATEs that
widen open and new streams."""

from __future__ import annotations

import asyncio
import functools
from unittest import mock

import pytest
from hyperframe.frame import HeadersFrame, PingFrame, SettingsFrame, WindowUpdateFrame

from h2ping.http2 import upstream, windows
from h2ping.http2.observer import reported
from h2ping.http2.pingbackoff import PingBackoff
from h2ping.http2.streams import UpstreamStream
from h2ping.http2.upstream import UpstreamConnection
from h2ping.http2.windows import (
    ASSUMED_RATE,
    FLOOR_WINDOW,
    PING_SPACING,
    SIZING_RTT,
    UNMEASURED_WINDOW,
    ReceiveWindow,
    WindowBudget,
)
from h2ping.stats import Stats

from ..fakes import FakeTransport
from ..h2fake import REQUEST, FakeServer, RecordingSink, config, of

CAP = 16 * 1024 * 1024


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def measured(rtt: float, cap: int = CAP) -> tuple[ReceiveWindow, Clock]:
    """A window whose preface PING came back after ``rtt`` seconds."""
    clock = Clock()
    window = ReceiveWindow(cap, measuring=True, clock=clock)
    payload = window.first_ping()
    assert payload is not None
    clock.now += rtt
    window.acked(payload)
    return window, clock


def sample(window: ReceiveWindow, clock: Clock, nbytes: int, rtt: float) -> int | None:
    """Enough data to start a PING, then ``nbytes`` more before its ACK after ``rtt``."""
    clock.now += PING_SPACING
    payload = window.received(window.size)
    assert payload is not None, "no PING after a window's worth of data"
    window.received(nbytes)
    clock.now += rtt
    return window.acked(payload)


def test_the_preface_announces_the_floor_and_its_ping_sizes_the_window() -> None:
    window = ReceiveWindow(CAP, measuring=True, clock=Clock())
    assert window.announced == window.size == FLOOR_WINDOW and window.rtt is None
    assert window.first_ping() is not None
    for rtt, size in ((0.030, int(0.030 * ASSUMED_RATE)), (0.080, int(0.080 * ASSUMED_RATE))):
        window, _ = measured(rtt)
        assert (window.size, window.announced, window.extra) == (
            size,
            FLOOR_WINDOW,
            size - FLOOR_WINDOW,
        )
        assert window.rtt == pytest.approx(rtt)
    short, _ = measured(0.0002)  # loopback: what 160 MB/s moves in 0.2 ms is below the floor
    assert (short.size, short.extra) == (FLOOR_WINDOW, 0)
    far, _ = measured(1.0)  # never past the cap
    assert far.size == CAP


def test_a_short_links_preface_round_trip_leaves_the_window_at_the_floor() -> None:
    """On loopback the preface's PING came back after 1.3 ms, mostly what the
    server does first on a new connection (session tickets, its SETTINGS), where
    the PINGs after it saw 0.3 ms: sized from it, the window would be 208 KB, all
    of it ahead of any other response. Below SIZING_RTT the floor stays until
    the samples say more."""
    window, clock = measured(0.0013)
    assert (window.size, window.extra) == (FLOOR_WINDOW, 0)
    assert window.rtt == pytest.approx(0.0013)
    # What the link shows it needs still grows it: a full window at its least round trip.
    assert sample(window, clock, window.size, rtt=0.0009)
    assert window.size == 2 * FLOOR_WINDOW
    at_least, _ = measured(SIZING_RTT)
    assert at_least.size == int(SIZING_RTT * ASSUMED_RATE)


def test_a_window_that_holds_the_link_back_grows_to_twice_what_the_link_holds() -> None:
    window, clock = measured(0.030)
    before = window.size
    grown = sample(window, clock, int(0.75 * before), rtt=0.030)  # h2's credit: 3/4 in flight
    assert grown == window.size - before and window.size == pytest.approx(1.5 * before, abs=2)
    # Again, up to the cap and no further; at the cap no PING goes out.
    while window.size < CAP:
        assert sample(window, clock, window.size, rtt=0.030)
    assert window.size == CAP
    clock.now += PING_SPACING
    assert window.received(CAP) is None


def test_a_longer_round_trip_from_queueing_does_not_grow_the_window() -> None:
    """Loopback: a full window arrives, but only because the round trip grew 25x
    while bytes queued: at the least round trip the link holds far less."""
    window, clock = measured(0.0002)
    assert sample(window, clock, window.size, rtt=0.005) == 0
    assert window.size == FLOOR_WINDOW


def test_a_window_the_link_does_not_fill_does_not_grow() -> None:
    window, clock = measured(0.030)
    assert sample(window, clock, int(0.5 * window.size), rtt=0.030) == 0


def test_pings_go_one_at_a_time_spaced_and_only_while_responses_flow() -> None:
    window, clock = measured(0.030)
    quarter = window.size // 4
    assert window.received(quarter - 1) is None  # a trickle sends no PING
    assert window.received(1) is None  # enough, but too soon after the last ACK
    clock.now += PING_SPACING
    payload = window.received(1)
    assert payload is not None
    assert window.received(window.size) is None  # one at a time
    assert window.acked(b"\x00" * 7 + b"\x01") is None  # a liveness PING's ACK: not ours
    assert window.acked(payload) is not None
    assert window.acked(payload) is None  # answered once


def test_unmeasured_windows_are_fixed_and_send_no_ping() -> None:
    window = ReceiveWindow(CAP, measuring=False, clock=Clock())
    assert window.first_ping() is None and window.received(CAP) is None
    assert window.size == window.announced == UNMEASURED_WINDOW
    assert ReceiveWindow(65535, measuring=False).announced == 65535  # capped
    assert windows.connection_window(CAP) == windows.CONNECTION_WINDOW
    assert windows.connection_window(2**31 - 1) == 2**31 - 1


# -- on an upstream connection ---------------------------------------------------------


def connection(
    clock: Clock, budget: WindowBudget | None = None, stats: Stats | None = None
) -> tuple[UpstreamConnection, FakeTransport]:
    # The connection's own window, on the test's clock (-max-receive-window: CAP);
    # counted in ``stats`` as the proxy counts its connections.
    on_clock = functools.partial(ReceiveWindow, clock=clock)
    with mock.patch.object(upstream, "ReceiveWindow", on_clock):
        conn = UpstreamConnection(
            config(ping_interval=60.0, max_receive_window=CAP),
            1,
            lambda c, s: None,
            window_budget=budget,
            observer=reported(stats or Stats(), 1),
        )
    assert conn.window.measuring and conn.window.cap == CAP
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport


async def test_the_preface_carries_the_floor_and_a_ping_and_the_ack_widens_every_stream() -> None:
    clock, stats = Clock(), Stats()
    conn, transport = connection(clock, stats=stats)
    preface = transport.frames()
    settings = {k: v for f in of(SettingsFrame, preface) for k, v in f.settings.items()}
    assert settings[0x4] == FLOOR_WINDOW  # INITIAL_WINDOW_SIZE
    (ping,) = of(PingFrame, preface)
    assert stats.window_pings == 0  # counted once the peer speaks HTTP/2
    conn.data_received(FakeServer.settings(max_concurrent_streams=10))
    await conn.wait_ready()
    # Two streams open before the round trip is known: each gets the raise.
    streams = [
        conn.table.try_reserve().open(REQUEST, RecordingSink(), end_stream=True)  # type: ignore[union-attr]
        for _ in range(2)
    ]
    await asyncio.sleep(0)
    transport.frames()
    clock.now += 0.080
    conn.data_received(FakeServer.ping_ack(ping.opaque_data))
    await asyncio.sleep(0)
    raise_by = int(0.080 * ASSUMED_RATE) - FLOOR_WINDOW
    updates = {(f.stream_id, f.window_increment) for f in of(WindowUpdateFrame, transport.frames())}
    assert updates == {(s.stream_id, raise_by) for s in streams}
    assert stats.window_raises == 1 and stats.window_pings == 1
    assert stats.ping_acks == 0  # the window's ACK is no keepalive's
    # A new stream hears of the raise right after its HEADERS.
    third = conn.table.try_reserve().open(REQUEST, RecordingSink(), end_stream=True)  # type: ignore[union-attr]
    await asyncio.sleep(0)
    frames = transport.frames()
    kinds = [(type(f), f.stream_id) for f in frames if f.stream_id == third.stream_id]
    assert kinds == [(HeadersFrame, third.stream_id), (WindowUpdateFrame, third.stream_id)]
    assert of(WindowUpdateFrame, frames)[0].window_increment == raise_by


async def test_with_pings_off_nothing_is_measured() -> None:
    conn = UpstreamConnection(config(ping_interval=0.0), 1, lambda c, s: None)
    transport = FakeTransport()
    conn.connection_made(transport)
    preface = transport.frames()
    assert not of(PingFrame, preface)
    settings = {k: v for f in of(SettingsFrame, preface) for k, v in f.settings.items()}
    assert settings[0x4] == UNMEASURED_WINDOW


async def test_after_a_server_punished_pings_new_connections_measure_nothing() -> None:
    """GOAWAY(ENHANCE_YOUR_CALM, too_many_pings): new connections to that upstream
    send no measuring PING either, and keep the unmeasured window."""
    stats = Stats()
    backoff = PingBackoff(60.0, stats)
    before = UpstreamConnection(config(ping_interval=60.0), 1, lambda c, s: None, None, backoff)
    assert before.window.measuring
    backoff.punished(1, 60.0)
    after = UpstreamConnection(config(ping_interval=60.0), 2, lambda c, s: None, None, backoff)
    transport = FakeTransport()
    after.connection_made(transport)
    assert not after.window.measuring and not of(PingFrame, transport.frames())
    assert after.window.size == UNMEASURED_WINDOW


def stream_updates(transport: FakeTransport) -> dict[int, int]:
    """Stream id -> the window increments written for it since the last look."""
    grown: dict[int, int] = {}
    for frame in of(WindowUpdateFrame, transport.frames()):
        if frame.stream_id:
            grown[frame.stream_id] = grown.get(frame.stream_id, 0) + frame.window_increment
    return grown


async def test_the_windows_of_every_connection_grow_out_of_one_budget() -> None:
    """Slow clients hold their streams' whole windows: the windows' growth, over
    all connections, stays within the budget; a stream's share comes back when it ends."""
    clock = Clock()
    raise_by = int(0.010 * ASSUMED_RATE) - FLOOR_WINDOW  # a 10 ms round trip
    budget = WindowBudget(2 * raise_by + raise_by // 2)
    pair = [connection(clock, budget) for _ in range(2)]
    opened: list[list[UpstreamStream]] = []
    for conn, transport in pair:
        ping = of(PingFrame, transport.frames())[0]
        conn.data_received(FakeServer.settings(max_concurrent_streams=10))
        await conn.wait_ready()
        opened.append(
            [
                conn.table.try_reserve().open(REQUEST, RecordingSink(), end_stream=True)  # type: ignore[union-attr]
                for _ in range(2)
            ]
        )
        await asyncio.sleep(0)
        transport.frames()
        clock.now += 0.010
        conn.data_received(FakeServer.ping_ack(ping.opaque_data))
        await asyncio.sleep(0)
    (first, first_transport), (second, second_transport) = pair
    # The first connection's two streams took their raises; the second's got the rest.
    assert stream_updates(first_transport) == {1: raise_by, 3: raise_by}
    assert stream_updates(second_transport) == {1: raise_by // 2}
    assert budget.granted == budget.limit
    # Spent: a new stream gets the announced window only.
    late = first.table.try_reserve().open(REQUEST, RecordingSink(), end_stream=True)  # type: ignore[union-attr]
    await asyncio.sleep(0)
    assert stream_updates(first_transport) == {}
    # A stream that ends gives its share back: the next stream has it.
    first.data_received(FakeServer().headers(1, 200, end_stream=True))
    assert opened[0][0].closed and budget.granted == budget.limit - raise_by
    again = first.table.try_reserve().open(REQUEST, RecordingSink(), end_stream=True)  # type: ignore[union-attr]
    await asyncio.sleep(0)
    assert stream_updates(first_transport) == {again.stream_id: raise_by}
    assert late.extra == 0 and again.extra == raise_by
    # A connection that ends gives back all its streams had.
    second.close("test")
    first.close("test")
    assert budget.granted == 0
