"""FrameSplitter: frame boundaries, GOAWAY taken out, size and flood limits."""

from __future__ import annotations

import pytest

from h2ping.http2.engine.frames import (
    CONTROL_BURST,
    CONTROL_PER_SECOND,
    GOAWAY,
    MAX_FRAME_SIZE,
    RUN,
    FloodError,
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


@pytest.mark.parametrize(
    "frame", [PING, SETTINGS, EMPTY_DATA], ids=["ping", "settings", "empty-data"]
)
def test_a_control_frame_flood_is_refused(frame: bytes) -> None:
    splitter = FrameSplitter(clock=Clock())
    splitter.split(frame * CONTROL_BURST)
    with pytest.raises(FloodError):
        splitter.split(frame)


@pytest.mark.parametrize("frame", [PING_ACK, DATA, FakeServer.settings(ack=True)])
def test_acks_and_data_with_payload_are_not_counted(frame: bytes) -> None:
    splitter = FrameSplitter(clock=Clock())
    many = frame * (CONTROL_BURST * 2)
    assert splitter.split(many) == [(RUN, many)]
    # The allowance is still whole: a full burst of counted frames passes, one more does not.
    splitter.split(PING * CONTROL_BURST)
    with pytest.raises(FloodError):
        splitter.split(PING)


def test_the_allowance_refills_with_time_up_to_the_burst() -> None:
    clock = Clock()
    splitter = FrameSplitter(clock=clock)
    splitter.split(PING * CONTROL_BURST)
    clock.now += 2.0
    splitter.split(PING * (2 * CONTROL_PER_SECOND))
    with pytest.raises(FloodError):
        splitter.split(PING)
    clock.now += 3600.0  # a long quiet spell refills to the burst, not beyond
    splitter.split(PING * CONTROL_BURST)
    with pytest.raises(FloodError):
        splitter.split(PING)


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
