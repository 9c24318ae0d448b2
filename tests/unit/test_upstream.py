"""UpstreamConnection driven directly: a fake transport, server frames as bytes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import (
    DataFrame,
    GoAwayFrame,
    HeadersFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from h2ping import errors
from h2ping.errors import UpstreamError
from h2ping.http2 import clocks
from h2ping.http2.engine.manifest import DATA, FAST_PATHS
from h2ping.http2.lifetime import Lifetime
from h2ping.http2.outbound import PUMP_BATCH
from h2ping.http2.streams import SEND_LOW_WATER, SlotLost, StreamState, UpstreamStream
from h2ping.http2.upstream import PROVISIONAL_HEADER_LIST, ConnState, UpstreamConnection
from h2ping.http2.windows import CONNECTION_WINDOW, UNMEASURED_WINDOW
from h2ping.http2.writeblock import WriteBlock

from ..fakeloop import FakeLoop
from ..fakes import FakeTransport
from ..h2fake import (
    REQUEST,
    FakeServer,
    Harness,
    RecordingSink,
    config,
    data_bytes,
    of,
    only_fast_paths,
)


async def test_handshake_raises_windows_and_opens_on_the_peers_settings() -> None:
    conn = UpstreamConnection(config(), 1, lambda c, s: None)
    transport = FakeTransport()
    conn.connection_made(transport)
    frames = transport.frames()
    settings = {k: v for f in of(SettingsFrame, frames) for k, v in f.settings.items()}
    assert settings[0x2] == 0  # ENABLE_PUSH
    assert settings[0x4] == UNMEASURED_WINDOW  # INITIAL_WINDOW_SIZE, with no PINGs
    (update,) = of(WindowUpdateFrame, frames)
    assert (update.stream_id, update.window_increment) == (0, CONNECTION_WINDOW - 65535)
    # Before the peer's SETTINGS: one stream, right behind the preface, and no more.
    assert conn.state is ConnState.CONNECTING and conn.table.free_slots == 1
    early = conn.table.try_reserve()
    assert early is not None and conn.table.try_reserve() is None
    stream = early.open(REQUEST, RecordingSink(), end_stream=True)
    await asyncio.sleep(0)
    (headers,) = of(HeadersFrame, transport.frames())
    assert headers.stream_id == stream.stream_id == 1
    ready = asyncio.ensure_future(conn.wait_ready())
    conn.data_received(FakeServer.settings(max_concurrent_streams=7))
    await ready
    assert (conn.state, conn.table.max_streams, conn.table.free_slots) == (ConnState.OPEN, 7, 6)


async def test_a_stream_sent_behind_the_preface_fails_as_the_setup_does() -> None:
    """The peer closes before its SETTINGS: the early stream fails with the words
    the dial's own error has, and the connection offers no slot any more."""
    conn = UpstreamConnection(config(), 1, lambda c, s: None)
    conn.connection_made(FakeTransport())
    sink = RecordingSink()
    conn.table.try_reserve().open(REQUEST, sink, end_stream=True)  # type: ignore[union-attr]
    ready = asyncio.ensure_future(conn.wait_ready())
    conn.connection_lost(None)
    assert sink.error is not None and not sink.error.retryable
    assert sink.error.detail == "connection closed by upstream before HTTP/2 SETTINGS"
    with pytest.raises(UpstreamError, match="before HTTP/2 SETTINGS"):
        await ready
    assert conn.table.free_slots == 0 and conn.table.try_reserve() is None


async def test_a_request_and_its_response() -> None:
    h = Harness()
    stream, sink = h.open()
    (headers,) = of(HeadersFrame, await h.sent())
    assert headers.stream_id == stream.stream_id == 1
    assert "END_STREAM" in headers.flags
    h.feed(
        h.server.headers(1, 200, [("content-type", "text/plain")]),
        h.server.data(1, b"hello "),
        h.server.data(1, b"world", end_stream=True),
    )
    assert (sink.status, bytes(sink.data), sink.ended, sink.error) == (
        200,
        b"hello world",
        True,
        None,
    )
    assert stream.closed and not h.conn.table.streams
    assert h.conn.table.free_slots == 10 and h.conn.answered == 1


async def test_never_more_streams_than_the_peer_allows() -> None:
    h = Harness(max_streams=2)
    first, second = h.slot(), h.slot()
    assert h.conn.table.try_reserve() is None
    first.release()
    first.release()  # a second release gives nothing back twice
    assert h.conn.table.free_slots == 1
    second.open(REQUEST, RecordingSink(), end_stream=True)
    with pytest.raises(RuntimeError):
        second.open(REQUEST, RecordingSink(), end_stream=True)
    second.release()  # after open: nothing to give back
    assert (h.conn.table.reserved, len(h.conn.table.streams), h.conn.table.free_slots) == (0, 1, 1)


async def test_released_slot_tells_the_pool() -> None:
    h = Harness()
    slot = h.slot()
    before = h.changes
    slot.release()
    assert h.changes == before + 1


async def test_graceful_goaway_finishes_streams_below_it_and_refuses_those_above() -> None:
    h = Harness()
    kept, kept_sink = h.open()
    above, above_sink = h.open()
    await h.sent()
    h.feed(h.server.goaway(last_stream_id=kept.stream_id))
    assert h.conn.state is ConnState.DRAINING and h.conn.table.try_reserve() is None
    assert above_sink.error is not None and above_sink.error.retryable
    assert "last_stream_id=1" in above_sink.error.detail
    (rst,) = of(RstStreamFrame, await h.sent())
    assert (rst.stream_id, rst.error_code) == (above.stream_id, ErrorCodes.CANCEL)
    # h2 alone would have closed its state machine: the kept stream still completes.
    h.feed(h.server.headers(1, 200), h.server.data(1, b"done", end_stream=True))
    assert (kept_sink.status, bytes(kept_sink.data), kept_sink.ended) == (200, b"done", True)
    (goaway,) = of(GoAwayFrame, await h.sent())
    assert goaway.error_code == ErrorCodes.NO_ERROR
    assert h.conn.state is ConnState.CLOSED and h.transport.closed


async def test_a_goaway_with_an_error_code_suspects_the_first_stream_it_left_unprocessed() -> None:
    """That one may be what the server choked on (a head too large for it, say):
    it is marked so, and gets one more try only; the others replay as usual."""
    h = Harness()
    kept, kept_sink = h.open(end_stream=False)
    opened = [h.open() for _ in range(3)]
    await h.sent()
    h.feed(h.server.goaway(last_stream_id=kept.stream_id, error_code=ErrorCodes.ENHANCE_YOUR_CALM))
    errors = [sink.error for _, sink in opened]
    assert all(error is not None and error.retryable for error in errors)
    assert [error.suspect for error in errors if error is not None] == [True, False, False]
    assert errors[0] is not None and "GOAWAY ENHANCE_YOUR_CALM right after" in errors[0].detail
    assert kept_sink.error is None


async def test_a_graceful_goaway_suspects_no_stream() -> None:
    h = Harness()
    kept, _ = h.open(end_stream=False)
    _, above = h.open()
    h.feed(h.server.goaway(last_stream_id=kept.stream_id))
    assert above.error is not None and above.error.retryable and not above.error.suspect


async def test_a_slot_says_its_peers_header_list_limit() -> None:
    h = Harness()
    assert h.slot().header_list_limit is None  # the peer set none: unlimited
    h.feed(h.server.settings(max_header_list_size=8192))
    assert h.slot().header_list_limit == 8192


async def test_before_the_peers_settings_a_slot_says_the_provisional_limit() -> None:
    conn = UpstreamConnection(config(), 1, lambda conn, s: None)
    conn.connection_made(FakeTransport())
    slot = conn.table.try_reserve()  # the one behind the preface
    assert slot is not None and slot.header_list_limit == PROVISIONAL_HEADER_LIST
    slot.release()


async def test_goaway_with_nothing_in_flight_closes_at_once() -> None:
    h = Harness()
    h.feed(h.server.goaway(last_stream_id=0))
    assert h.conn.state is ConnState.CLOSED and h.transport.closed


@pytest.mark.parametrize(
    ("code", "retryable"),
    [(ErrorCodes.REFUSED_STREAM, True), (ErrorCodes.INTERNAL_ERROR, False)],
)
async def test_reset_by_the_peer(code: ErrorCodes, retryable: bool) -> None:
    h = Harness()
    stream, sink = h.open()
    other, other_sink = h.open()
    h.feed(h.server.rst(stream.stream_id, code))
    assert sink.error is not None and sink.error.retryable is retryable
    if not retryable:
        assert sink.error.error == errors.HTTP_PROTOCOL_ERROR
        assert "INTERNAL_ERROR" in sink.error.detail
    assert stream.closed and not other.closed and other_sink.error is None
    assert h.conn.state is ConnState.OPEN and h.conn.table.free_slots == 9


async def test_complete_response_before_the_request_body_resets_with_no_error() -> None:
    h = Harness()
    stream, sink = h.open(end_stream=False)
    stream.send(b"part of a body")
    await h.sent()
    h.feed(h.server.headers(1, 413, end_stream=True))
    assert sink.status == 413 and sink.end_stream_with_headers and sink.ended
    (rst,) = of(RstStreamFrame, await h.sent())
    assert rst.error_code == ErrorCodes.NO_ERROR
    stream.send(b"the rest")  # dropped: the stream is over
    assert data_bytes(await h.sent(), 1) == 0


async def test_request_body_waits_for_window_updates() -> None:
    h = Harness(window=100_000)
    h.feed(h.server.window_update(0, 1_000_000))  # only the stream window limits
    stream, sink = h.open(end_stream=False)
    stream.send(b"x" * 250_000)
    stream.end()
    frames = await h.sent_all()
    assert data_bytes(frames, 1) == 100_000
    assert stream.pending_bytes == 150_000 and not sink.send_ready
    h.feed(h.server.window_update(1, 100_000))
    frames = await h.sent_all()
    assert data_bytes(frames, 1) == 100_000 and not of(DataFrame, frames)[-1].flags
    assert stream.pending_bytes > SEND_LOW_WATER and not sink.send_ready
    h.feed(h.server.window_update(1, 100_000))
    frames = await h.sent_all()
    assert data_bytes(frames, 1) == 50_000 and "END_STREAM" in of(DataFrame, frames)[-1].flags
    assert stream.state is StreamState.SENT and stream.pending_bytes == 0
    assert sink.send_ready == 1  # below the low-water mark: the client's reads resume


async def test_a_sink_hears_it_may_send_again_from_the_loop_not_within_its_send() -> None:
    """The queue falls below the low mark within the sink's own send (a write
    went out since the rest waited): the stream tells the pump, and the sink
    hears it in the loop's next turn, not from inside the call it is making."""
    h = Harness(window=1_000_000)
    h.feed(h.server.window_update(0, 1_000_000))
    stream, sink = h.open(end_stream=False)
    stream.send(b"x" * (PUMP_BATCH + 2 * SEND_LOW_WATER))  # a batch framed, the rest waits
    assert stream.pending_bytes == 2 * SEND_LOW_WATER
    h.conn.outbound.flush()  # the write: the next batch may be framed
    stream.send(b"y")  # frames all that waited
    assert stream.pending_bytes == 0 and sink.send_ready == 0
    await asyncio.sleep(0)
    assert sink.send_ready == 1


async def test_a_full_socket_buffer_stops_turning_body_into_frames() -> None:
    h = Harness(window=2**31 - 1)
    h.feed(h.server.window_update(0, 2**31 - 1 - 65535))
    stream, _ = h.open(end_stream=False)
    await h.sent()
    h.conn.pause_writing()
    stream.send(b"y" * 100_000)
    stream.end()
    assert data_bytes(await h.sent(), 1) == 0, "DATA framed while the socket was paused"
    h.conn.resume_writing()
    frames = await h.sent_all()
    assert data_bytes(frames, 1) == 100_000 and "END_STREAM" in of(DataFrame, frames)[-1].flags


async def test_a_large_window_is_filled_one_batch_per_callback() -> None:
    h = Harness(window=2**31 - 1)
    h.feed(h.server.window_update(0, 2**31 - 1 - 65535))
    stream, _ = h.open(end_stream=False)
    await h.sent()
    stream.send(b"z" * (PUMP_BATCH * 3))
    assert stream.pending_bytes == PUMP_BATCH * 2  # the rest waits for the next loop turn
    total = 0
    for _ in range(5):
        total += data_bytes(await h.sent(), 1)
    assert total == PUMP_BATCH * 3 and stream.pending_bytes == 0


async def test_uploads_with_room_to_send_take_turns_one_batch_per_write() -> None:
    """However many streams could send, one write to the socket carries about one
    batch (TLS keeps a buffer the size of the largest write it took), and the
    streams take turns."""
    h = Harness(window=2**31 - 1)
    h.feed(h.server.window_update(0, 2**31 - 1 - 65535))
    streams = [h.open(end_stream=False)[0] for _ in range(4)]
    await h.sent()
    h.transport.writes.clear()
    for stream in streams:
        stream.send(b"z" * (PUMP_BATCH * 2))
    served = []
    for _ in range(8):
        served.append({f.stream_id for f in of(DataFrame, await h.sent())})
    # In the order they queued: stream 1 was back in line before the others came.
    assert served == [{1}, {1}, {3}, {5}, {7}, {3}, {5}, {7}]
    assert all(stream.pending_bytes == 0 for stream in streams)
    frame_headers = 9 * (PUMP_BATCH // 16384 + 1)
    assert max(len(data) for data in h.transport.writes) <= PUMP_BATCH + frame_headers


async def test_slot_on_a_connection_that_stopped_taking_streams() -> None:
    h = Harness()
    busy, _ = h.open()
    slot = h.slot()
    await h.sent()
    h.feed(h.server.goaway(last_stream_id=busy.stream_id))
    with pytest.raises(SlotLost) as info:
        slot.open(REQUEST, RecordingSink(), end_stream=True)
    assert info.value.retryable
    assert not of(HeadersFrame, await h.sent())
    assert h.conn.table.reserved == 0 and h.conn.state is ConnState.DRAINING
    h.feed(h.server.headers(1, 204, end_stream=True))
    assert h.conn.state is ConnState.CLOSED


async def test_retired_connection_closes_when_its_pending_reservation_is_used() -> None:
    h = Harness()
    slot = h.slot()
    h.conn.retire("max-conn-age")
    assert h.conn.state is ConnState.DRAINING
    with pytest.raises(SlotLost):
        slot.open(REQUEST, RecordingSink(), end_stream=True)
    assert h.conn.state is ConnState.CLOSED
    assert h.transport.closed


async def test_retired_connection_closes_when_its_pending_reservation_is_released() -> None:
    h = Harness()
    slot = h.slot()
    h.conn.retire("max-conn-age")
    slot.release()
    assert h.conn.state is ConnState.CLOSED
    assert h.transport.closed


async def test_retired_connection_finishes_its_streams_then_closes() -> None:
    h = Harness()
    _, sink = h.open()
    h.conn.retire("max-conn-age")
    assert h.conn.state is ConnState.DRAINING and not h.transport.closed
    h.feed(h.server.headers(1, 200, end_stream=True))
    assert sink.ended and h.conn.state is ConnState.CLOSED
    (goaway,) = of(GoAwayFrame, await h.sent())
    assert goaway.error_code == ErrorCodes.NO_ERROR


@pytest.mark.parametrize("death", ["connection-lost", "protocol-error", "close"])
async def test_a_dying_connection_is_closed_before_its_streams_fail(death: str) -> None:
    """While each stream's sink hears of the failure (and may replay at once), the
    connection must already refuse slots; the pool hears of it once, at the end."""
    h = Harness()
    seen: list[tuple[ConnState, object, int]] = []
    sinks = []
    for _ in range(3):
        _, sink = h.open()
        sink.on_error_hook = lambda e: seen.append(
            (h.conn.state, h.conn.table.try_reserve(), h.changes)
        )
        sinks.append(sink)
    before = h.changes
    if death == "connection-lost":
        h.conn.connection_lost(ConnectionResetError("reset by peer"))
    elif death == "protocol-error":
        h.feed(h.server.data(99, b"DATA on a stream never opened"))
    else:
        h.conn.close("proxy shutting down")
    assert seen == [(ConnState.CLOSED, None, before)] * 3
    assert h.changes == before + 1
    assert all(s.error is not None and not s.error.retryable for s in sinks)
    assert h.conn.state is ConnState.CLOSED and not h.conn.table.streams


async def test_protocol_error_sends_goaway_with_its_code() -> None:
    h = Harness()
    h.feed(h.server.data(99, b"DATA on a stream never opened"))
    (goaway,) = of(GoAwayFrame, h.transport.frames())
    assert goaway.error_code == ErrorCodes.PROTOCOL_ERROR
    assert h.transport.is_closing()


async def test_frame_flood_ends_the_connection_with_enhance_your_calm() -> None:
    h = Harness()
    h.feed(FakeServer.settings() * 1200)
    (goaway,) = of(GoAwayFrame, h.transport.frames())
    assert goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
    assert h.conn.state is ConnState.CLOSED


async def test_ping_ack_is_counted() -> None:
    h = Harness()
    h.feed(h.server.ping_ack(b"\0" * 8))
    assert h.stats.ping_acks == 1 and h.conn.state is ConnState.OPEN


async def test_cancel_resets_the_stream_and_frees_its_slot() -> None:
    h = Harness(max_streams=1)
    stream, sink = h.open()
    assert h.conn.table.try_reserve() is None
    stream.cancel()
    (rst,) = of(RstStreamFrame, await h.sent())
    assert rst.error_code == ErrorCodes.CANCEL
    assert h.conn.table.free_slots == 1 and sink.error is None
    # Late frames for the abandoned stream are dropped, not delivered.
    h.feed(h.server.headers(1, 200), h.server.data(1, b"late"))
    assert sink.status is None and not sink.data and h.conn.state is ConnState.OPEN


async def test_a_connection_without_streams_for_idle_conn_timeout_closes_with_goaway(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeLoop()  # the connection's idle clock only: the rest runs on the real loop
    monkeypatch.setattr(clocks, "Lifetime", lambda _loop, *args: Lifetime(clock, *args))
    h = Harness(idle_conn_timeout=0.05)
    stream, _ = h.open()
    clock.advance(0.08)  # the check at 0.05 found it busy; the next is at 0.10
    assert h.conn.state is ConnState.OPEN, "closed while carrying a stream"
    h.feed(h.server.headers(stream.stream_id, 200, end_stream=True))
    clock.advance(0.03)
    assert h.conn.state is ConnState.OPEN, "the idle clock did not restart at the last stream"
    slot = h.slot()
    clock.advance(0.1)
    assert h.conn.state is ConnState.OPEN, "closed while a slot was reserved"
    slot.release()
    clock.advance(0.1)
    assert h.conn.state is ConnState.CLOSED and h.transport.closed
    (goaway,) = of(GoAwayFrame, h.transport.frames())
    assert goaway.error_code == ErrorCodes.NO_ERROR
    assert h.changes > 0 and h.conn.table.try_reserve() is None


async def test_response_credit_is_held_on_the_stream_until_given_back() -> None:
    """A slow client's stream keeps its credit: no WINDOW_UPDATE until ack_held."""
    h = Harness()
    stream, sink = h.open()
    await h.sent()
    chunk = b"d" * 16384
    h.feed(h.server.headers(1, 200), *(h.server.data(1, chunk) for _ in range(150)))
    await h.settle()
    assert len(sink.data) == stream.unacked == 150 * 16384
    assert not [f for f in of(WindowUpdateFrame, await h.sent()) if f.stream_id == 1]
    stream.ack_held()
    updates = [f for f in of(WindowUpdateFrame, await h.sent()) if f.stream_id == 1]
    assert sum(f.window_increment for f in updates) == 150 * 16384
    assert stream.unacked == 0
    stream.ack_held()  # nothing more to give
    assert not of(WindowUpdateFrame, await h.sent())


class Taking(RecordingSink):
    """A client keeping up: takes every piece at once; ``log`` gets each delivery."""

    def __init__(self, log: list[tuple[int, bytes]], stream_id: int) -> None:
        super().__init__()
        self.log, self.stream_id = log, stream_id

    def on_data(self, data: bytes, flow_controlled_length: int) -> int:
        self.log.append((self.stream_id, bytes(data)))
        return flow_controlled_length


async def test_data_of_streams_in_turn_is_delivered_in_frame_order_a_run_in_one_piece() -> None:
    """DATA of one stream in a row is held and delivered in one piece; another
    stream's DATA hands it over, so the streams hear it in frame order; the
    credit their clients took at once is counted in h2's windows, stream by
    stream, quietly (no WINDOW_UPDATE is due yet). Every fast path taken,
    whatever the probes of this process said."""
    with only_fast_paths(FAST_PATHS):
        h = Harness()
    assert DATA in h.conn._engine.fast
    log: list[tuple[int, bytes]] = []
    streams = [h.slot().open(REQUEST, Taking(log, sid), end_stream=True) for sid in (1, 3)]
    await h.sent()
    data = h.server.data
    h.feed(
        h.server.headers(1, 200)
        + h.server.headers(3, 200)
        + data(1, b"a")
        + data(3, b"bb")
        + data(3, b"ccc")
        + data(1, b"dddd")
        + data(1, b"eeeee")
        + data(1, b"f" * 6, end_stream=True)
        + data(3, b"g" * 7)
    )
    await h.settle()
    assert log == [(1, b"a"), (3, b"bbccc"), (1, b"ddddeeeeeffffff"), (3, b"g" * 7)]
    h2conn: Any = h.conn._engine._h2
    assert h2conn._inbound_flow_control_window_manager._bytes_processed == 28
    window: Any = h2conn.streams[3]._inbound_window_manager
    assert window._bytes_processed == 12
    assert not of(WindowUpdateFrame, await h.sent())
    assert [s.unacked for s in streams] == [0, 0]


async def test_a_new_stream_takes_the_peers_settings_as_they_stand() -> None:
    """The request_headers path reads the settings a new stream takes once
    between SETTINGS frames: one that changes them is seen by the next stream."""
    with only_fast_paths(FAST_PATHS):
        h = Harness(window=65535)
    h.open()  # settings read, and kept
    h.feed(h.server.settings(initial_window_size=1000))
    second, _ = h.open()
    h2conn: Any = h.conn._engine._h2
    assert h2conn.streams[second.stream_id].outbound_flow_control_window == 1000


class Leaving(RecordingSink):
    """A client that goes away while its second piece of data is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.stream: UpstreamStream | None = None

    def on_data(self, data: bytes, flow_controlled_length: int) -> int:
        super().on_data(data, flow_controlled_length)
        if len(self.data) > 1000 and self.stream is not None:
            self.stream.cancel()  # as the exchange does when its client is gone
        return 0  # a slow client: it holds its credit


async def test_a_client_leaving_as_its_data_is_written_gives_the_connection_all_its_credit() -> (
    None
):
    """Its stream ends inside the delivery: the credit it held goes back as it
    ends, and the credit of the data being delivered goes back too (the engine
    gives it, as the stream returns it), so the connection's window, which every
    other stream shares, loses nothing."""
    h = Harness()
    sink = Leaving()
    stream = sink.stream = h.slot().open(REQUEST, sink, end_stream=True)
    await h.sent()
    h.feed(h.server.headers(1, 200), h.server.data(1, b"a" * 1000))
    await h.settle()
    assert stream.unacked == 1000
    h.feed(h.server.data(1, b"b" * 3000))
    await h.settle()
    assert stream.closed and len(sink.data) == 4000
    connection: Any = h.conn._engine._h2._inbound_flow_control_window_manager
    assert connection._bytes_processed == 4000  # no WINDOW_UPDATE due yet: all counted


# ------------------------------------------------------ an upstream that does not read


async def test_blocked_writes_stop_reading_and_new_streams_until_they_drain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeLoop()  # the write deadline's clock only
    monkeypatch.setattr(clocks, "WriteBlock", lambda _loop, *args: WriteBlock(clock, *args))
    h = Harness(write_timeout=5.0)
    stream, sink = h.open()
    before = h.changes
    h.conn.pause_writing()  # what the transport says past its high-water mark
    assert not h.transport.reading, "reading goes on while nothing is written"
    assert h.conn.table.free_slots == 0 and h.conn.table.try_reserve() is None
    # A backlog handled meanwhile leaves reading off.
    h.feed(h.server.headers(stream.stream_id, 200))
    await h.sent()
    assert not h.transport.reading and sink.status == 200
    h.conn.resume_writing()
    assert h.transport.reading and h.conn.table.free_slots == 9
    assert h.changes > before, "the pool was not told the slots are back"
    assert clock.pending == 0, "the deadline outlived the block"
    assert h.conn.state is ConnState.OPEN


async def test_writes_blocked_past_the_deadline_cut_the_connection(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeLoop()
    monkeypatch.setattr(clocks, "WriteBlock", lambda _loop, *args: WriteBlock(clock, *args))
    h = Harness(write_timeout=5.0)
    _, sink = h.open()
    h.transport.buffered = 300_000
    h.conn.pause_writing()
    clock.advance(4.9)
    h.transport.buffered = 200_000  # a slow link: it took some, the clock starts again
    clock.advance(0.2)
    assert h.conn.state is ConnState.OPEN
    clock.advance(4.7)
    assert h.conn.state is ConnState.OPEN
    clock.advance(0.5)  # five seconds with none of it taken
    assert h.conn.state is ConnState.CLOSED and h.transport.aborted
    assert sink.error is not None and not sink.error.retryable
    assert sink.error.error == errors.CONNECTION_TERMINATED
    assert sink.error.detail == (
        "upstream connection 1 stopped reading what h2ping writes (200000 bytes unread for 5.0s)"
    )
    (line,) = [r.getMessage() for r in caplog.records if "not reading" in r.getMessage()]
    assert line == (
        "conn=1 upstream is not reading what h2ping writes: 200000 bytes waiting, none taken "
        "for 5.0s (write-timeout 5s); closing, failing 1 stream"
    )
    assert clock.pending == 0


async def test_the_write_deadline_ends_with_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeLoop()
    monkeypatch.setattr(clocks, "WriteBlock", lambda _loop, *args: WriteBlock(clock, *args))
    h = Harness()
    h.conn.pause_writing()
    assert clock.pending == 1
    h.conn.close("test")
    assert clock.pending == 0


async def test_a_slot_reserved_before_settings_that_allow_no_streams_is_lost_not_a_crash() -> None:
    """Taken behind the preface, used once the peer's SETTINGS said 0: nothing is
    sent, and the request asks the pool again."""
    conn = UpstreamConnection(config(), 1, lambda c, s: None)
    transport = FakeTransport()
    conn.connection_made(transport)
    slot = conn.table.try_reserve()
    assert slot is not None
    conn.data_received(FakeServer.settings(max_concurrent_streams=0))
    with pytest.raises(SlotLost) as lost:
        slot.open(REQUEST, RecordingSink(), end_stream=True)
    assert lost.value.retryable and lost.value.detail == "connection 1 allows 0 streams now"
    await asyncio.sleep(0)
    assert not of(HeadersFrame, transport.frames()) and conn.table.reserved == 0


async def test_a_request_whole_in_its_headers_leaves_at_once_the_rest_with_the_turn() -> None:
    h = Harness()
    await h.sent()  # the handshake's writes
    get, _ = h.open(end_stream=True)
    # Written before the loop turns: the rest of the turn's work comes after it.
    assert [f.stream_id for f in of(HeadersFrame, h.transport.frames())] == [get.stream_id]
    second, _ = h.open(end_stream=True)
    post, _ = h.open(end_stream=False)
    assert not h.transport.frames()  # later in the same turn: its one write
    frames = await h.sent()
    assert [f.stream_id for f in of(HeadersFrame, frames)] == [second.stream_id, post.stream_id]
    await h.sent()
    h.open(end_stream=False)
    assert not h.transport.frames()  # a body is to come: it goes with the turn's write


async def test_a_response_is_told_before_its_stream_leaves_the_table_which_it_leaves_anyway() -> (
    None
):
    h = Harness()
    seen: list[bool] = []

    class Told(RecordingSink):
        def on_end(self) -> None:
            seen.append(stream.stream_id in h.conn.table.streams)
            super().on_end()

    class Broken(RecordingSink):
        def on_end(self) -> None:
            raise RuntimeError("a bug in the sink")

    told, broken = Told(), Broken()
    stream = h.slot().open(REQUEST, told, end_stream=True)
    other = h.slot().open(REQUEST, broken, end_stream=True)
    h.feed(h.server.headers(stream.stream_id, 200, end_stream=True))
    h.feed(h.server.headers(other.stream_id, 200, end_stream=True))
    await h.settle()
    assert told.ended and seen == [True]  # told first: the table's bookkeeping after
    assert h.conn.table.streams == {}  # the broken sink's stream left too
    assert h.conn.state is ConnState.OPEN
