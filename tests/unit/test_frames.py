"""FrameSplitter: frame boundaries, GOAWAY taken out, size limits, and what each
frame is charged to the flood budget."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hyperframe.frame import PriorityFrame

from h2ping.http2.engine import floodguard as fg
from h2ping.http2.engine.floodguard import FloodError, FloodGuard, IdleStreamError
from h2ping.http2.engine.frames import (
    FRAME,
    GOAWAY,
    MAX_FRAME_SIZE,
    RUN,
    FrameSizeError,
    FrameSplitter,
)

from ..h2fake import FakeServer

SERVER = FakeServer()
HEADERS = SERVER.headers(1, 200)
DATA = FakeServer.data(1, b"x" * 100)
GOAWAY_FRAME = FakeServer.goaway(last_stream_id=7, error_code=0)
PING = bytes.fromhex("000008060000000000") + b"12345678"
PING_ACK = FakeServer.ping_ack(b"12345678")
EMPTY_DATA = FakeServer.data(1, b"")
SETTINGS = FakeServer.settings(max_concurrent_streams=5)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_whole_frames_pass_through_in_one_piece() -> None:
    assert FrameSplitter().split(HEADERS + DATA) == [(RUN, HEADERS + DATA)]


def test_goaway_is_taken_out_between_runs_of_frames() -> None:
    pieces = FrameSplitter().split(HEADERS + GOAWAY_FRAME + DATA + GOAWAY_FRAME)
    assert pieces == [
        (RUN, HEADERS),
        (GOAWAY, GOAWAY_FRAME[9:]),
        (RUN, DATA),
        (GOAWAY, GOAWAY_FRAME[9:]),
    ]


def test_a_partial_frame_waits_for_the_rest() -> None:
    stream = HEADERS + DATA + GOAWAY_FRAME + DATA
    splitter = FrameSplitter()
    pieces: list[tuple[int, bytes]] = []
    for i in range(len(stream)):  # one byte at a time: the worst a socket can do
        pieces += splitter.split(stream[i : i + 1])
    frames_out = b"".join(p for kind, p in pieces if kind == RUN)
    assert frames_out == HEADERS + DATA + DATA
    assert [p for kind, p in pieces if kind == GOAWAY] == [GOAWAY_FRAME[9:]]
    assert splitter.split(b"") == []


def test_a_frame_over_our_max_frame_size_is_refused_from_its_header() -> None:
    header = (MAX_FRAME_SIZE + 1).to_bytes(3, "big") + b"\x00\x00\x00\x00\x00\x01"
    with pytest.raises(FrameSizeError):
        FrameSplitter().split(header)  # before any of the payload is buffered
    at_limit = FakeServer.data(1, b"y" * MAX_FRAME_SIZE)
    assert FrameSplitter().split(at_limit) == [(RUN, at_limit)]


PRIORITY = PriorityFrame(1, depends_on=0, stream_weight=16).serialize()
UNKNOWN = b"\x00\x00\x00\x20\x00\x00\x00\x00\x00"  # type 0x20, empty
EMPTY_SETTINGS = FakeServer.settings()


def unknown(length: int) -> bytes:
    return length.to_bytes(3, "big") + b"\x20\x00" + bytes(4) + bytes(length)


def settings_of(entries: int) -> bytes:
    payload = b"".join(b"\x00\x01" + (4096 + i % 2).to_bytes(4, "big") for i in range(entries))
    return len(payload).to_bytes(3, "big") + b"\x04\x00" + bytes(4) + payload


@pytest.mark.parametrize(
    ("frame", "kind"),
    [
        (PING, fg.PING),
        (PING_ACK, fg.PING),
        (EMPTY_SETTINGS, fg.SETTINGS),
        (FakeServer.settings(ack=True), fg.SETTINGS),
        (EMPTY_DATA, fg.EMPTY_DATA),
        (PRIORITY, fg.PRIORITY),
        (UNKNOWN, fg.UNKNOWN),
    ],
    ids=["ping", "ping-ack", "settings", "settings-ack", "empty-data", "priority", "unknown"],
)
def test_a_small_frame_costs_one_unit_and_a_flood_of_them_is_refused(
    frame: bytes, kind: str
) -> None:
    splitter = FrameSplitter(clock=Clock())
    splitter.split(frame * int(fg.BURST))
    with pytest.raises(FloodError) as refused:
        splitter.split(frame)
    assert refused.value.kind == kind


@pytest.mark.parametrize("frame", [DATA, HEADERS, FakeServer.data(1, b"", end_stream=True)])
def test_a_response_is_never_charged(frame: bytes) -> None:
    splitter = FrameSplitter(clock=Clock())
    many = frame * int(fg.BURST * 2)
    assert splitter.split(many) == [(RUN, many)]
    # The allowance is still whole: a full burst of counted frames passes, one more does not.
    splitter.split(PING * int(fg.BURST))
    with pytest.raises(FloodError):
        splitter.split(PING)


def test_a_settings_frame_costs_by_its_entries() -> None:
    # A 16 KiB SETTINGS frame (2,730 entries) costs what hundreds of PINGs do:
    # the first fits the budget, the second does not.
    big = settings_of(MAX_FRAME_SIZE // 6)
    splitter = FrameSplitter(clock=Clock())
    splitter.split(big)
    with pytest.raises(FloodError) as refused:
        splitter.split(big)
    assert refused.value.kind == fg.SETTINGS
    # An ordinary one (a handful of entries) costs a unit and a bit.
    splitter = FrameSplitter(clock=Clock())
    splitter.split(settings_of(6) * 400)
    splitter.split(PING * int(fg.BURST - 400 * (1 + 6 * fg.SETTINGS_ENTRY)))
    with pytest.raises(FloodError):
        splitter.split(PING)


def test_goaway_frames_are_costly_and_dropped_payloads_cost_by_size() -> None:
    splitter = FrameSplitter(clock=Clock())
    allowed = int(fg.BURST // fg.GOAWAY_COST)
    pieces = splitter.split(GOAWAY_FRAME * allowed)
    assert [kind for kind, _ in pieces] == [GOAWAY] * allowed
    with pytest.raises(FloodError) as refused:
        splitter.split(GOAWAY_FRAME)
    assert refused.value.kind == fg.GOAWAY
    splitter = FrameSplitter(clock=Clock())
    per_frame = 1 + MAX_FRAME_SIZE / fg.BYTES_PER_UNIT
    splitter.split(unknown(MAX_FRAME_SIZE) * int(fg.BURST // per_frame))
    with pytest.raises(FloodError):
        splitter.split(unknown(MAX_FRAME_SIZE))


def test_the_costliest_kind_of_a_batch_is_named() -> None:
    splitter = FrameSplitter(clock=Clock())
    with pytest.raises(FloodError) as refused:
        splitter.split(PING * 10 + PRIORITY * int(fg.BURST))
    assert refused.value.kind == fg.PRIORITY
    assert "flood of PRIORITY frames" in str(refused.value)


def test_the_allowance_refills_with_time_up_to_the_burst() -> None:
    clock = Clock()
    splitter = FrameSplitter(clock=clock)
    splitter.split(PING * int(fg.BURST))
    clock.now += 2.0
    splitter.split(PING * int(2 * fg.PER_SECOND))
    with pytest.raises(FloodError):
        splitter.split(PING)
    clock.now += 3600.0  # a long quiet spell refills to the burst, not beyond
    splitter.split(PING * int(fg.BURST))
    with pytest.raises(FloodError):
        splitter.split(PING)


def client_splitter(
    *opened: int, plain_data: bool = False
) -> tuple[FrameSplitter, FloodGuard, set[int]]:
    """A client's splitter: ``opened`` streams opened, and still served."""
    streams = set(opened)
    guard = FloodGuard(Clock(), lambda stream_id: stream_id if stream_id in streams else None)
    for stream_id in opened:
        guard.opened(stream_id)
    return FrameSplitter(guard=guard, plain_data=plain_data), guard, streams


@pytest.mark.parametrize("make", [FakeServer.rst, FakeServer.window_update])
@pytest.mark.parametrize("stream_id", [2, 5, 101])
def test_rst_stream_or_window_update_on_a_stream_never_opened_is_refused(
    make: Callable[[int, int], bytes], stream_id: int
) -> None:
    splitter, _, _ = client_splitter(1, 3)
    with pytest.raises(IdleStreamError, match=f"on stream {stream_id}, never opened"):
        splitter.split(make(stream_id, 1))
    # Opened ones, and the connection (WINDOW_UPDATE on 0), are not.
    splitter, _, _ = client_splitter(1, 3)
    splitter.split(make(1, 8) + make(3, 8) + FakeServer.window_update(0, 1))


def test_window_updates_are_paid_for_by_the_data_frames_sent() -> None:
    splitter, guard, _ = client_splitter(1)
    for _ in range(1000):  # an upload of 1,000 DATA frames
        guard.sent_data()
        # the server's application reads it 4 KiB at a time: a credit for each,
        # on the stream and on the connection
        splitter.split((FakeServer.window_update(1, 4096) + FakeServer.window_update(0, 4096)) * 4)
    with pytest.raises(FloodError) as refused:  # and without anything sent, a flood
        splitter.split(FakeServer.window_update(1, 1) * int(fg.BURST + 1))
    assert refused.value.kind == fg.WINDOW_UPDATE


def test_resets_are_paid_for_by_the_streams_opened() -> None:
    # A server refusing every stream under load: one RST_STREAM per stream.
    splitter, guard, _ = client_splitter()
    for stream_id in range(1, 20001, 2):
        guard.opened(stream_id)
        splitter.split(FakeServer.rst(stream_id, 7))
    with pytest.raises(FloodError) as refused:
        splitter.split(FakeServer.rst(1, 7) * int(fg.BURST + 1))
    assert refused.value.kind == fg.RST_STREAM


def test_what_was_in_flight_on_streams_h2ping_reset_is_not_charged() -> None:
    # A thousand clients gone at once from a thousand event streams: each stream
    # reset, with a few small events in flight on it. Not a flood.
    opened = range(1, 2001, 2)
    splitter, guard, streams = client_splitter(*opened)
    for stream_id in opened:
        streams.discard(stream_id)
        guard.reset(stream_id)
    event = b"e" * 64
    for _ in range(8):
        splitter.split(b"".join(FakeServer.data(s, event) for s in opened))
    # The trailers some had in flight too.
    splitter.split(b"".join(SERVER.headers(s, 200) for s in range(1, 101, 2)))
    # Past what may have been in flight, the frames are charged as before.
    with pytest.raises(FloodError) as refused:
        splitter.split(FakeServer.data(1, b"x") * int(fg.IN_FLIGHT_FRAMES + fg.BURST + 1))
    assert refused.value.kind == fg.CLOSED_STREAMS


def test_only_the_streams_reset_last_keep_what_was_in_flight_free() -> None:
    splitter, guard, _ = client_splitter()
    for stream_id in range(1, 2 * (fg.IN_FLIGHT_STREAMS + 1000), 2):
        guard.opened(stream_id)
        guard.reset(stream_id)
    # The 1,000 reset first are long forgotten: their small frames are charged.
    with pytest.raises(FloodError):
        splitter.split(b"".join(FakeServer.data(s, b"x") for s in range(1, 2001, 2)) * 2)
    assert not guard.in_flight(1)
    assert guard.in_flight(2 * (fg.IN_FLIGHT_STREAMS + 1000) - 1)


@pytest.mark.parametrize("plain_data", [False, True])
def test_small_frames_on_streams_let_go_are_charged_full_ones_are_not(plain_data: bool) -> None:
    """Also inside a run of one stream's DATA, as the fast layer has them."""
    splitter, _, streams = client_splitter(1, 3, plain_data=plain_data)
    streams.discard(1)  # let go (a client went away): the server may not know yet
    # What a server had in flight, in full frames: nothing to pay.
    full = FakeServer.data(1, b"d" * fg.SMALL_DATA)
    splitter.split(full * 5000)
    splitter.split(FakeServer.data(3, b"x") * 5000)  # a stream still served: nothing
    with pytest.raises(FloodError) as refused:
        splitter.split(full + FakeServer.data(1, b"x") * int(fg.BURST + 1))
    assert refused.value.kind == fg.CLOSED_STREAMS
    # HEADERS on such a stream cost by the size of their block (HPACK work).
    splitter, _, streams = client_splitter(1)
    streams.clear()
    block = SERVER.headers(1, 200, [("x-pad", "p" * 1000)])
    per_frame = 1 + (len(block) - 9) / fg.HPACK_BYTES_PER_UNIT
    splitter.split(block * int(fg.BURST // per_frame))
    with pytest.raises(FloodError):
        splitter.split(block)


def test_a_servers_splitter_charges_no_frame_a_request_explains() -> None:
    """The scripted server's splitter has no table of streams: resets, window
    credit and frames of any stream are its client's ordinary traffic."""
    splitter = FrameSplitter(clock=Clock())
    ordinary = FakeServer.rst(1, 8) + FakeServer.window_update(1, 1) + FakeServer.data(9, b"x")
    splitter.split(ordinary * int(fg.BURST * 2))


def test_take_hands_out_about_a_budget_at_a_time_and_keeps_the_rest() -> None:
    frames = [FakeServer.data(1, bytes([i]) * 1000) for i in range(20)]
    splitter = FrameSplitter()
    splitter.feed(b"".join(frames) + frames[0][:5])  # and the start of one more
    out = b""
    while splitter.ready:
        (piece,) = splitter.take(4000)
        assert piece[1] and len(piece[1]) <= 4000 + len(frames[0])  # one frame past at most
        out += piece[1]
    assert out == b"".join(frames)
    assert splitter.backlog == 5  # the partial frame waits for its rest
    splitter.feed(frames[0][5:])
    assert splitter.ready and splitter.take(1) == [(RUN, frames[0])]
    assert splitter.backlog == 0 and not splitter.ready


def test_an_oversized_frame_header_is_ready_so_it_gets_refused_at_once() -> None:
    splitter = FrameSplitter()
    splitter.feed(DATA + (MAX_FRAME_SIZE + 1).to_bytes(3, "big") + b"\x00\x00\x00\x00\x00\x01")
    assert splitter.take(1) == [(RUN, DATA)]
    assert splitter.ready
    with pytest.raises(FrameSizeError):
        splitter.take(1)


def test_the_budget_refills_with_time_and_earnings_up_to_the_burst() -> None:
    clock = Clock()
    guard = FloodGuard(clock, lambda stream_id: None)
    guard.charge({fg.PING: fg.BURST})
    for _ in range(3):
        guard.opened(1)  # 3 streams: 3 * PER_STREAM units
    guard.charge({fg.RST_STREAM: 3 * fg.PER_STREAM})
    with pytest.raises(FloodError):
        guard.charge({fg.RST_STREAM: 1})
    clock.now += 1.0  # a second: PER_SECOND units, from where the overspend left it
    guard.charge({fg.PING: fg.PER_SECOND - 1 - 0.001})
    clock.now += 3600.0
    for _ in range(1000):
        guard.sent_data()  # earnings do not raise it past the burst either
    guard.charge({fg.PING: fg.BURST})
    with pytest.raises(FloodError) as refused:
        guard.charge({fg.PING: 0.5, fg.GOAWAY: 1.5})
    assert refused.value.kind == fg.GOAWAY  # the costliest of the batch


def test_plain_data_and_whole_frames_come_out_by_stream() -> None:
    """With the fast paths on, a DATA frame with no flags comes out as its payload
    under its stream id (the reserved bit of the id ignored, RFC 9113 4.1), a DATA
    frame with END_STREAM and a plain HEADERS frame whole, anything else in a run."""
    last = FakeServer.data(3, b"end", end_stream=True)
    reserved = bytearray(FakeServer.data(5, b"r" * 7))
    reserved[5] |= 0x80  # the R bit of the stream id
    # PADDED, on stream 7: a pad length of 2, "ab", two bytes of padding.
    padded = bytes.fromhex("000005000800000007") + b"\x02ab\x00\x00"
    splitter = FrameSplitter(plain_data=True, plain_headers=True)
    pieces = splitter.split(HEADERS + DATA + last + bytes(reserved) + padded + PING)
    assert pieces == [
        (FRAME, HEADERS),
        (1, b"x" * 100),
        (FRAME, last),
        (5, b"r" * 7),
        (RUN, padded + PING),
    ]


def test_one_streams_plain_data_in_a_row_comes_out_as_one_list() -> None:
    """Plain DATA frames of one stream in a row are one piece, the list of their
    payloads, small ones (which the flood budget reads) and ones with the R bit
    set included; the run ends at another stream's frame, a flag, the budget or
    a partial frame."""
    big = [FakeServer.data(1, bytes([i]) * 2000) for i in range(6)]
    small = FakeServer.data(1, b"s" * 10)
    ended = FakeServer.data(1, b"e" * 2000, end_stream=True)
    other = FakeServer.data(3, b"o" * 2000)
    reserved = bytearray(big[0])
    reserved[5] |= 0x80  # the R bit of the stream id: the same stream, told apart
    splitter = FrameSplitter(plain_data=True)
    pieces = splitter.split(
        big[0] + big[1] + big[2] + other + big[3] + small + big[4] + bytes(reserved) + ended
    )
    assert pieces == [
        (1, [b"\x00" * 2000, b"\x01" * 2000, b"\x02" * 2000]),
        (3, b"o" * 2000),
        (1, [b"\x03" * 2000, b"s" * 10, b"\x04" * 2000, b"\x00" * 2000]),
        (FRAME, ended),
    ]
    # The budget: the frame that reaches it is the run's last; the rest waits.
    splitter.feed(b"".join(big) + big[0][:100])
    assert splitter.take(3 * 2000) == [(1, [bytes([i]) * 2000 for i in range(3)])]
    assert splitter.take(None) == [(1, [bytes([i]) * 2000 for i in range(3, 6)])]
    assert splitter.backlog == 100  # the partial frame waits for its rest
    splitter.feed(big[0][100:])
    assert splitter.take(None) == [(1, b"\x00" * 2000)]
