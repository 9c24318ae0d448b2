"""The fast paths for responses do what h2 does, or leave the frame to h2.

Two connections get the same frames from the same server script: one takes
response HEADERS, plain and last DATA frames and quiet acknowledgements on the
fast paths (``H2Connection.take_response_headers``, ``take_plain_data``,
``take_last_data`` and ``ack_quietly``), the other has them all turned off, so
h2 handles every frame. After every step they must agree on every byte
written to the server (WINDOW_UPDATE, RST_STREAM, GOAWAY), on what each stream
reported to its sink, and on h2's own flow-control and content-length state.
Windows are small here, so scripts reach empty windows, WINDOW_UPDATE thresholds
and flow-control violations in a few frames.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hyperframe.frame import DataFrame, HeadersFrame
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h2ping.http2 import upstream
from h2ping.http2.frames import FRAME, RUN, FrameSplitter
from h2ping.http2.streams import UpstreamStream
from h2ping.http2.upstream import ConnState

from .h2fake import REQUEST, FakeServer, Harness, RecordingSink

SMALL_STREAM_WINDOW = 4096
SMALL_CONNECTION_WINDOW = 80_000  # h2 cannot go below 65,535 here
STREAMS = (1, 3, 5)


class AckingSink(RecordingSink):
    """Gives the credit back at once, as the exchange does for a client keeping up,
    unless ``holding`` (a paused client): then only through an ``ack_held`` step."""

    def __init__(self, holding: bool) -> None:
        super().__init__()
        self.holding = holding
        self.stream: UpstreamStream | None = None

    def on_data(self, data: bytes, flow_controlled_length: int) -> None:
        super().on_data(data, flow_controlled_length)
        if not self.holding and self.stream is not None:
            self.stream.ack(flow_controlled_length)


class Twin:
    def __init__(self, fast: bool, holding: tuple[bool, ...]) -> None:
        self.h = Harness(max_streams=10)
        self.server = FakeServer()  # one per twin: HPACK state is per connection
        if not fast:
            h2conn: Any = self.h.conn._h2
            h2conn.take_plain_data = lambda stream_id, size: False
            h2conn.take_last_data = lambda stream_id, size: False
            h2conn.take_response_headers = lambda stream_id, block, end: None
            h2conn.ack_quietly = lambda stream_id, size: False
        self.sinks: dict[int, AckingSink] = {}
        self.streams: dict[int, UpstreamStream] = {}
        for hold in holding:
            sink = AckingSink(hold)
            stream = self.h.slot().open(REQUEST, sink, end_stream=True)
            sink.stream = stream
            self.sinks[stream.stream_id] = sink
            self.streams[stream.stream_id] = stream

    def step(self, op: tuple[Any, ...]) -> None:
        kind, stream_id = op[0], op[1]
        server = self.server
        if kind == "headers":
            _, _, length, end = op
            extra = [] if length is None else [("content-length", str(length))]
            self.h.feed(server.headers(stream_id, 200, extra, end_stream=end))
        elif kind == "data":
            _, _, size, end, pad = op
            frame = DataFrame(stream_id, flags=["END_STREAM"] if end else [])
            frame.data = bytes([stream_id]) * size
            if pad:
                frame.flags.add("PADDED")
                frame.pad_length = pad
            self.h.feed(frame.serialize())
        elif kind == "trailers":
            self.h.feed(server.headers(stream_id, None, [("x-t", "1")], end_stream=op[2]))
        elif kind == "rst":
            self.h.feed(server.rst(stream_id, 8))
        elif kind == "ack_held":
            self.streams[stream_id].ack_held()
        elif kind == "cancel":
            self.streams[stream_id].cancel()

    def observed(self) -> dict[str, Any]:
        conn = self.h.conn
        h2conn = conn._h2
        windows = {0: dict(vars(h2conn._inbound_flow_control_window_manager))}
        lengths = {}
        for stream_id, stream in h2conn.streams.items():
            windows[stream_id] = dict(vars(stream._inbound_window_manager))
            lengths[stream_id] = (stream._actual_content_length, stream.state_machine.state)
        return {
            "written": bytes(self.h.transport.written),
            "state": conn.state,
            "h2_state": h2conn.state_machine.state,
            "windows": windows,
            "lengths": lengths,
            "sinks": {
                stream_id: (
                    sink.status,
                    bytes(sink.data),
                    sink.ended,
                    None if sink.error is None else (sink.error.error, sink.error.detail),
                )
                for stream_id, sink in self.sinks.items()
            },
            "unacked": {sid: s.unacked for sid, s in self.streams.items()},
        }


stream_ids = st.sampled_from(STREAMS)
ops = st.one_of(
    st.tuples(st.just("headers"), stream_ids, st.none() | st.integers(0, 9000), st.booleans()),
    st.tuples(
        st.just("data"),
        stream_ids,
        st.integers(1, 5000),
        st.booleans(),
        st.sampled_from([0, 0, 0, 7]),
    ),
    st.tuples(st.just("trailers"), stream_ids, st.booleans()),
    st.tuples(st.just("rst"), stream_ids),
    st.tuples(st.just("ack_held"), stream_ids),
    st.tuples(st.just("cancel"), stream_ids),
)
scripts = st.lists(
    st.one_of(*[st.tuples(st.just("data"), st.just(sid), st.integers(1, 3000),
                          st.just(False), st.just(0)) for sid in STREAMS], ops),
    min_size=1,
    max_size=40,
)  # fmt: skip


def small_windows(
    monkeypatch: pytest.MonkeyPatch,
    stream: int = SMALL_STREAM_WINDOW,
    connection: int = SMALL_CONNECTION_WINDOW,
) -> None:
    monkeypatch.setattr(upstream, "STREAM_WINDOW", stream)
    monkeypatch.setattr(upstream, "CONNECTION_WINDOW", connection)


async def compare(
    script: list[tuple[Any, ...]],
    holding: tuple[bool, ...],
    heads: tuple[int | bool | None, ...] = (None, None, None),
) -> None:
    """``heads``: per stream, the response head sent before the script: False for
    none, None for one without content-length, N for ``content-length: N``."""
    fast, slow = Twin(True, holding), Twin(False, holding)
    first = [
        ("headers", sid, head, False)
        for sid, head in zip(STREAMS, heads, strict=True)
        if head is not False
    ]
    for op in [*first, *script]:
        for twin in (fast, slow):
            twin.step(op)
            await twin.h.settle()
        await asyncio.sleep(0)  # the coalesced writes of both
        assert fast.observed() == slow.observed(), op
        if fast.h.conn.state is ConnState.CLOSED:
            break


heads = st.tuples(*[st.just(False) | st.none() | st.integers(0, 9000)] * 3)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(script=scripts, holding=st.tuples(*[st.booleans()] * 3), heads=heads)
def test_the_fast_path_does_what_h2_does(
    monkeypatch: pytest.MonkeyPatch,
    script: list[tuple[Any, ...]],
    holding: tuple[bool, ...],
    heads: tuple[int | bool | None, ...],
) -> None:
    small_windows(monkeypatch)
    asyncio.run(compare(script, holding, heads))


@pytest.mark.parametrize(
    ("heads", "script"),
    [
        # Content-length overrun: h2 faults the stream; the fast path must decline.
        ((10, None, None), [("data", 1, 6, False, 0), ("data", 1, 5, False, 0)]),
        # DATA before the response headers: a stream error too.
        ((None, False, None), [("data", 3, 100, False, 0)]),
        # More than the stream window (stream 5 never gives credit back).
        ((None, None, None), [("data", 5, 4000, False, 0), ("data", 5, 200, False, 0)]),
        # Padded and END_STREAM frames are h2's, plain ones around them the fast path's.
        (
            (None, None, None),
            [("data", 1, 100, False, 9), ("data", 1, 100, False, 0), ("data", 1, 5, True, 0)],
        ),
        # After a reset by the server, and after the client cancelled.
        (
            (None, None, None),
            [("rst", 1), ("data", 1, 100, False, 0), ("cancel", 5), ("data", 5, 100, False, 0)],
        ),
        # Trailers, then DATA after them.
        (
            (None, None, None),
            [("data", 1, 10, False, 0), ("trailers", 1, True), ("data", 1, 10, False, 0)],
        ),
        # Enough acknowledged to cross h2's WINDOW_UPDATE thresholds on both windows.
        ((None, None, None), [("data", sid, 3000, False, 0) for sid in (1, 3, 5, 1, 3, 5)]),
    ],
)
async def test_edge_cases_agree(
    monkeypatch: pytest.MonkeyPatch, heads: tuple[int | bool | None, ...], script: list[Any]
) -> None:
    small_windows(monkeypatch)
    # Streams 1 and 3 ack at once; stream 5's client reads nothing.
    await compare(script, (False, False, True), heads)


async def test_an_empty_connection_window_gets_its_update_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Streams 3 and 5 hold 64,000 bytes; stream 1's 6,000 then empty the
    connection window. h2 sends its WINDOW_UPDATE for as little as that (the
    window is empty), long before half of it is processed: no quiet ack there."""
    small_windows(monkeypatch, stream=40_000, connection=70_000)
    held = [("data", sid, 16_000, False, 0) for sid in (3, 5, 3, 5)]
    await compare([*held, ("data", 1, 6000, False, 0)], (False, True, True))


async def test_plain_data_is_taken_on_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparisons above would also pass if the fast path never ran."""
    fast = Twin(True, (False,))
    calls = {"taken": 0, "quiet": 0}
    h2conn: Any = fast.h.conn._h2
    take, quiet = h2conn.take_plain_data, h2conn.ack_quietly

    def counting_take(stream_id: int, size: int) -> bool:
        taken = take(stream_id, size)
        calls["taken"] += taken
        return taken

    def counting_quiet(stream_id: int, size: int) -> bool:
        quietly = quiet(stream_id, size)
        calls["quiet"] += quietly
        return quietly

    h2conn.take_plain_data, h2conn.ack_quietly = counting_take, counting_quiet
    fast.step(("headers", 1, None, False))
    for _ in range(10):
        fast.step(("data", 1, 1000, False, 0))
    await fast.h.settle()
    assert calls == {"taken": 10, "quiet": 10}
    assert bytes(fast.sinks[1].data) == b"\x01" * 10_000


async def test_headers_and_last_data_are_taken_on_the_fast_paths() -> None:
    """As above, for the request's HEADERS and the response's HEADERS and last DATA."""
    fast = Twin(True, (False,))
    h2conn: Any = fast.h.conn._h2
    # The request left without hpack's encoder: its dynamic table is still empty.
    assert not h2conn.encoder.header_table.dynamic_entries
    calls = {"headers": 0, "last": 0}
    take_headers, take_last = h2conn.take_response_headers, h2conn.take_last_data

    def counting_headers(stream_id: int, block: bytes, end_stream: bool) -> Any:
        events = take_headers(stream_id, block, end_stream)
        calls["headers"] += events is not None
        return events

    def counting_last(stream_id: int, size: int) -> bool:
        taken = take_last(stream_id, size)
        calls["last"] += taken
        return taken

    h2conn.take_response_headers, h2conn.take_last_data = counting_headers, counting_last
    fast.step(("headers", 1, 5, False))
    fast.step(("data", 1, 5, True, 0))
    await fast.h.settle()
    assert calls == {"headers": 1, "last": 1}
    sink = fast.sinks[1]
    assert (sink.status, bytes(sink.data), sink.ended) == (200, b"\x01" * 5, True)


def test_the_splitter_hands_out_plain_frames_only() -> None:
    server = FakeServer()
    headers = server.headers(1, 200)
    plain = FakeServer.data(1, b"abc")
    last = FakeServer.data(1, b"z", end_stream=True)
    empty_last = FakeServer.data(1, b"", end_stream=True)
    empty = FakeServer.data(1, b"")
    padded = DataFrame(1, b"p", flags=["END_STREAM", "PADDED"], pad_length=2).serialize()
    split = FrameSplitter(plain_data=True).split
    assert split(headers + plain + last + empty + empty_last + padded + plain) == [
        (RUN, headers),
        (1, b"abc"),
        (FRAME, last),
        (RUN, empty),
        (FRAME, empty_last),
        (RUN, padded),
        (1, b"abc"),
    ]
    trailers = server.headers(1, None, [("x-t", "1")], end_stream=True)
    priority = HeadersFrame(1, b"\x88", flags=["END_HEADERS", "PRIORITY"]).serialize()
    on_zero = b"\x00\x00\x01\x01\x04\x00\x00\x00\x00\x88"  # HEADERS on stream 0
    split = FrameSplitter(plain_headers=True).split
    assert split(headers + plain + trailers + priority + on_zero) == [
        (FRAME, headers),
        (RUN, plain),
        (FRAME, trailers),  # h2ping's H2Connection declines trailers: they go to h2
        (RUN, priority + on_zero),
    ]
    # Inside a header block (HEADERS without END_HEADERS) every frame is h2's,
    # which refuses anything but CONTINUATION there.
    block = server.headers(3, 200, [("x-big", "v" * 20000)])
    cut = 9 + int.from_bytes(block[:3], "big")  # HEADERS | CONTINUATION...
    splitter = FrameSplitter(plain_data=True)
    assert splitter.split(block[:cut] + plain) == [(0, block[:cut] + plain)]
    assert FrameSplitter(plain_data=True).split(block + plain) == [(0, block), (1, b"abc")]
    assert FrameSplitter().split(plain) == [(0, plain)]  # off unless asked for
