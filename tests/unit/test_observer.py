"""A connection's observer hears each moment of its life, in the order promised."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Mapping

import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import PingFrame

from h2ping.errors import UpstreamError
from h2ping.http2.engine import Goaway
from h2ping.http2.observer import UNOBSERVED, reported
from h2ping.http2.upstream import ConnState, UpstreamConnection
from h2ping.stats import Stats

from ..fakes import FakeTransport
from ..h2fake import REQUEST, FakeServer, RecordingSink, config, of


class Recorder:
    """A ConnectionObserver that writes down what it hears, and what the
    connection's streams looked like at that moment."""

    def __init__(self) -> None:
        self.heard: list[tuple[object, ...]] = []
        self.sinks: list[RecordingSink] = []

    def failed(self) -> int:
        return sum(sink.error is not None for sink in self.sinks)

    def dialled(self) -> None:
        self.heard.append(("dialled",))

    def tls_done(self, ssl_object: ssl.SSLObject) -> None:
        self.heard.append(("tls",))

    def settings_heard(self, settings: Mapping[int, int]) -> None:
        self.heard.append(("settings", dict(settings)))

    def ping_sent(self, payload: bytes, for_window: bool) -> None:
        self.heard.append(("ping", payload, for_window))

    def ping_acked(self, payload: bytes, round_trip: float | None, for_window: bool) -> None:
        self.heard.append(("ack", payload, round_trip is not None, for_window))

    def window_widened(self, size: int, round_trip: float) -> None:
        self.heard.append(("widened", size))

    def peer_dead(
        self, silent_for: float, since_ping: float, timeout: float, open_streams: int
    ) -> None:
        self.heard.append(("dead", open_streams, self.failed()))

    def went_idle(self, seconds: float) -> None:
        self.heard.append(("idle",))

    def writes_stalled(
        self, waiting: int, stalled_for: float, timeout: float, open_streams: int
    ) -> None:
        self.heard.append(("stalled", open_streams, self.failed()))

    def goaway_received(self, goaway: Goaway, open_streams: int) -> None:
        self.heard.append(("goaway", goaway.last_stream_id, self.failed()))

    def stream_reset(self, stream_id: int, error_code: int, by_peer: bool) -> None:
        self.heard.append(("reset", stream_id, error_code, by_peer))

    def socket_lost(self, exc: Exception | None, by_peer: bool) -> None:
        self.heard.append(("lost", by_peer, self.failed()))

    def closed(self, reason: str) -> None:
        self.heard.append(("closed", reason, self.failed()))


def _open(recorder: Recorder) -> tuple[UpstreamConnection, FakeServer]:
    conn = UpstreamConnection(config(), 1, lambda c, s: None, observer=recorder)
    conn.connection_made(FakeTransport())
    server = FakeServer()
    conn.data_received(server.settings(max_concurrent_streams=5))
    return conn, server


def _request(conn: UpstreamConnection, recorder: Recorder) -> int:
    sink = RecordingSink()
    recorder.sinks.append(sink)
    slot = conn.table.try_reserve()
    assert slot is not None
    return slot.open(REQUEST, sink, end_stream=True).stream_id


async def test_the_observer_hears_settings_pings_resets_goaway_and_the_end() -> None:
    recorder = Recorder()
    conn, server = _open(recorder)
    assert recorder.heard == [("settings", {0x3: 5})]
    conn.ping(b"12345678")
    conn.data_received(server.ping_ack(b"12345678"))
    first, second, third = (_request(conn, recorder) for _ in range(3))
    conn.data_received(server.rst(first, ErrorCodes.REFUSED_STREAM))
    assert recorder.sinks[0].error is not None  # the stream hears of it as before
    conn.table.reset(conn.table.stream(second), ErrorCodes.CANCEL)  # type: ignore[arg-type]
    # GOAWAY: told before the stream above its last id fails.
    conn.data_received(server.goaway(second, ErrorCodes.NO_ERROR))
    assert recorder.sinks[2].error is not None and recorder.sinks[2].error.retryable
    assert conn.state is ConnState.CLOSED
    conn.close("again")  # told once
    conn.connection_lost(None)
    assert recorder.heard[1:] == [
        ("ping", b"12345678", False),
        ("ack", b"12345678", False, False),  # no PING of its own in flight
        ("reset", first, ErrorCodes.REFUSED_STREAM, True),
        ("reset", second, ErrorCodes.CANCEL, False),
        ("goaway", second, 1),  # only the refused stream had failed yet
        ("reset", third, ErrorCodes.CANCEL, False),  # unprocessed: replayed elsewhere
        # The last stream's reset drained the connection, which closed before
        # that stream was told the GOAWAY's error.
        ("closed", "GOAWAY NO_ERROR", 1),
        ("lost", False, 2),  # after the connection ended it itself
    ]


async def test_the_loss_of_the_socket_is_told_before_the_streams_fail() -> None:
    recorder = Recorder()
    conn, _ = _open(recorder)
    _request(conn, recorder)
    conn.connection_lost(ConnectionResetError("reset by peer"))
    assert recorder.heard[1:] == [
        ("lost", True, 0),
        ("closed", "connection lost: reset by peer", 1),
    ]
    assert conn.state is ConnState.CLOSED


async def test_an_observer_may_end_the_connection_from_a_hook() -> None:
    """The check ends a connection whose peer sent GOAWAY before its SETTINGS:
    the connection's own handling of the GOAWAY then finds it ended."""
    recorder = Recorder()
    conn = UpstreamConnection(config(), 1, lambda c, s: None, observer=recorder)
    conn.connection_made(FakeTransport())
    ready = conn.wait_ready()

    def end(goaway: Goaway, open_streams: int) -> None:
        Recorder.goaway_received(recorder, goaway, open_streams)
        conn.close("GOAWAY before SETTINGS")

    recorder.goaway_received = end  # type: ignore[method-assign]
    conn.data_received(FakeServer.goaway(0, ErrorCodes.ENHANCE_YOUR_CALM))
    assert conn.state is ConnState.CLOSED and conn.close_reason == "GOAWAY before SETTINGS"
    try:
        await ready
    except UpstreamError as exc:
        assert "GOAWAY before SETTINGS" in exc.detail
    else:
        raise AssertionError("the dial's wait did not fail")
    assert [event[0] for event in recorder.heard] == ["goaway", "closed"]


async def test_a_connection_nobody_watches_tells_the_one_no_op_observer() -> None:
    conn = UpstreamConnection(config(), 1, lambda c, s: None)
    assert conn.observer is UNOBSERVED


async def test_the_proxys_observers_count_and_log_a_goaway_then_tell_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What the proxy counts and logs of a connection's life is its observers':
    the connection tells them, then the observer it was given besides."""
    caplog.set_level(logging.INFO, logger="h2ping")
    stats, recorder = Stats(), Recorder()
    conn = UpstreamConnection(config(), 7, lambda c, s: None, observer=reported(stats, 7, recorder))
    conn.connection_made(FakeTransport())
    server = FakeServer()
    conn.data_received(server.settings(max_concurrent_streams=5))
    kept, unprocessed = _request(conn, recorder), _request(conn, recorder)
    conn.data_received(server.goaway(kept, ErrorCodes.NO_ERROR))
    conn.data_received(server.goaway(kept, ErrorCodes.NO_ERROR))  # no news: not logged again
    assert stats.goaways == 2
    lines = [r.getMessage() for r in caplog.records if "GOAWAY" in r.getMessage()]
    assert lines == [f"conn=7 GOAWAY received: last_stream_id={kept} error=NO_ERROR open_streams=2"]
    # Told each time, after its counting and logging, before the stream above fails.
    goaways = [h for h in recorder.heard if h[0] == "goaway"]
    assert goaways == [("goaway", kept, 0), ("goaway", kept, 1)]
    assert recorder.sinks[1].error is not None and not recorder.sinks[0].error
    assert unprocessed > kept and conn.state is ConnState.DRAINING


async def _until_closed(conn: UpstreamConnection) -> None:
    for _ in range(200):
        if conn.state is ConnState.CLOSED:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the connection did not end")


async def test_a_dead_peer_is_told_before_its_streams_fail_then_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The keepalive's PING, the silence after it and the cut: each told as it
    comes, the death before the stream fails; the proxy's observers count the
    PINGs (the window's once the peer spoke HTTP/2) and log the death."""
    caplog.set_level(logging.INFO, logger="h2ping")
    stats, recorder = Stats(), Recorder()
    conn = UpstreamConnection(
        config(ping_interval=0.02, ping_timeout=0.03),
        4,
        lambda c, s: None,
        observer=reported(stats, 4, recorder),
    )
    conn.connection_made(FakeTransport())
    assert [h[0] for h in recorder.heard] == ["ping"] and recorder.heard[0][2]  # the window's
    assert stats.window_pings == 0
    conn.data_received(FakeServer().settings(max_concurrent_streams=5))
    assert stats.window_pings == 1
    _request(conn, recorder)
    await _until_closed(conn)
    told = [h for h in recorder.heard[1:] if h[0] != "settings"]
    assert told[0][0] == "ping" and not told[0][2]  # the keepalive's
    assert told[1:] == [("dead", 1, 0), ("closed", "ping timeout", 1)]
    assert (stats.pings_sent, stats.ping_timeouts, stats.ping_acks) == (1, 1, 0)
    (line,) = [r.getMessage() for r in caplog.records if "dead" in r.getMessage()]
    assert line.startswith("conn=4 dead: nothing received for ")
    assert line.endswith("after a PING (ping-timeout 0.03s); failing 1 stream")


async def test_an_idle_connection_is_told_before_it_closes_then_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="h2ping")
    recorder = Recorder()
    conn = UpstreamConnection(
        config(idle_conn_timeout=0.05),
        5,
        lambda c, s: None,
        observer=reported(Stats(), 5, recorder),
    )
    conn.connection_made(FakeTransport())
    conn.data_received(FakeServer().settings(max_concurrent_streams=5))
    await _until_closed(conn)
    assert recorder.heard[1:] == [("idle",), ("closed", "idle-conn-timeout", 0)]
    lines = [r.getMessage() for r in caplog.records if "idle" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("conn=5 idle for ")
    assert lines[0].endswith("s: closing")


async def test_a_keepalive_ack_carries_its_round_trip_and_a_window_ack_widens() -> None:
    """The ACK of the keepalive's PING in flight is told with its round trip; the
    window's ACK is told as the window's, and its growth after it."""
    stats, recorder = Stats(), Recorder()
    conn = UpstreamConnection(
        config(ping_interval=0.02, ping_timeout=5.0),
        6,
        lambda c, s: None,
        observer=reported(stats, 6, recorder),
    )
    transport = FakeTransport()
    conn.connection_made(transport)
    (window_ping,) = of(PingFrame, transport.frames())
    server = FakeServer()
    conn.data_received(server.settings(max_concurrent_streams=5))
    await asyncio.sleep(0.03)  # widened by a round trip of 30 ms
    conn.data_received(server.ping_ack(window_ping.opaque_data))
    for _ in range(100):
        keepalive = [f for f in of(PingFrame, transport.frames()) if not f.flags]
        if keepalive:
            break
        await asyncio.sleep(0.01)
    conn.data_received(server.ping_ack(keepalive[0].opaque_data))
    told = [h for h in recorder.heard if h[0] in ("ack", "widened")]
    assert told[0] == ("ack", window_ping.opaque_data, True, True)
    assert told[1][0] == "widened" and told[1][1] > 0
    assert told[2] == ("ack", keepalive[0].opaque_data, True, False)
    assert (stats.ping_acks, stats.window_raises, stats.window_pings) == (1, 1, 1)
    assert stats.last_ping_rtt is not None
    conn.close("done")
