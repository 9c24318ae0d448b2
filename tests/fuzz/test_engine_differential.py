"""The engine's fast layer does what the plain engine does: a differential test.

The plain engine (``h2ping.http2.engine.plain``, h2's documented API alone) is
the reference. Two upstream connections get the same generated script: requests of any size
(CONTINUATION included) with and without bodies, and a server's answers to
them (responses with and without content-length, 1xx, trailers, padded and
prioritised HEADERS, padded DATA, RST_STREAM, WINDOW_UPDATE, SETTINGS, PING,
GOAWAY mid-stream, dynamic table size updates both ways), and the client's
acknowledgements and cancellations. One connection has the fast layer, taking
every fast path that promises to do what h2 does; the other is the plain
engine. ``stream_faults`` changes what plain h2 does (one stream's fault fails
that stream alone, DATA on a stream h2ping reset goes unanswered), so a second
pairing compares the fast layer with every path against the fast layer with
that one alone. After every step they must agree on every frame written to the server (header blocks
compared decoded, since h2ping encodes requests its own way, and every other
frame byte for byte), on what each stream told its sink, and on h2's own
flow-control, content-length and state-machine state. Windows are small, so
scripts reach empty windows, WINDOW_UPDATE thresholds and flow-control
violations in a few frames.

``DIFFERENTIAL_EXAMPLES`` sets how many scripts hypothesis tries, drawn afresh
each run; by default the same 200 (derandomized) every run.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import hpack
import pytest
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    HeadersFrame,
    PingFrame,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h2ping.fields import Header
from h2ping.http2 import windows
from h2ping.http2.engine import H2Engine, probes
from h2ping.http2.engine.fast import FastEngine
from h2ping.http2.engine.frames import FRAME, RUN, FrameSplitter
from h2ping.http2.engine.manifest import FAST_PATHS, STREAM_FAULTS
from h2ping.http2.streams import UpstreamStream
from h2ping.http2.upstream import ConnState

from ..h2fake import (
    REQUEST,
    FakeServer,
    Harness,
    RecordingSink,
    forget_to_count_plain_data,
    only_fast_paths,
)

SMALL_STREAM_WINDOW = 4096
SMALL_CONNECTION_WINDOW = 80_000  # h2 cannot go below 65,535 here
STREAMS = (1, 3, 5)
#: Stream ids a script may name: the three opened first, two it may open, one never opened.
NAMED = (1, 3, 5, 7, 9, 11)
LONG_RUN = int(os.environ.get("DIFFERENTIAL_EXAMPLES", "0"))
EXAMPLES = LONG_RUN or 200
#: Request heads by size: one frame, several kilobytes, past one frame (CONTINUATION).
HEAD_SIZES = {"small": 0, "medium": 3_000, "large": 40_000}
#: (the fast layer's paths, the reference's): none is the plain engine.
PLAIN = (frozenset(FAST_PATHS) - {STREAM_FAULTS}, frozenset())
WITH_STREAM_FAULTS = (frozenset(FAST_PATHS), frozenset({STREAM_FAULTS}))
PAIRS = [pytest.param(PLAIN, id="plain"), pytest.param(WITH_STREAM_FAULTS, id="stream_faults")]
Pair = tuple[frozenset[str], frozenset[str]]


def request(size: str, n: int) -> list[Header]:
    """A request head of about ``HEAD_SIZES[size]`` bytes; ``n`` varies its fields."""
    head = [*REQUEST, (b"user-agent", b"aiohttp/3"), (b"x-n", b"%d" % n)]
    fill = HEAD_SIZES[size]
    for i in range(fill // 1000):
        head.append((b"x-fill-%d" % i, b"v" * 990))
    return head


class AckingSink(RecordingSink):
    """Gives the credit back at once, as the exchange does for a client keeping up,
    unless ``holding`` (a paused client): then only through an ``ack_held`` step."""

    def __init__(self, holding: bool) -> None:
        super().__init__()
        self.holding = holding
        self.stream: UpstreamStream | None = None
        self.responses: list[list[Header]] = []

    def on_response(self, headers: list[Header], end_stream: bool) -> None:
        self.responses.append([*headers, (b"end", b"%d" % end_stream)])

    def on_data(self, data: bytes, flow_controlled_length: int) -> int:
        super().on_data(data, flow_controlled_length)
        if self.holding or self.stream is None:
            return 0
        return flow_controlled_length  # taken at once: the engine gives it back


class Written:
    """What a connection wrote, frame by frame (the probes' reader: header blocks
    decoded by one decoder, as the server's would be)."""

    def __init__(self, start: int) -> None:
        self.sent = probes._Sent()
        # Any size the script's SETTINGS may allow: the size updates themselves
        # are compared between the twins.
        self.sent.decoder.max_allowed_table_size = 100_000
        self.frames: list[Any] = []
        self._read = start  # what the connection's start wrote is its own

    def update(self, written: bytearray) -> None:
        data = bytes(written[self._read :])  # writes are whole frames
        self._read = len(written)
        self.frames += self.sent.frames(data)


class Twin:
    def __init__(
        self, paths: frozenset[str], holding: tuple[bool, ...], sizes: tuple[str, ...]
    ) -> None:
        """``paths``: the fast paths taken; none is the plain engine."""
        with only_fast_paths(paths):
            self.h = Harness(max_streams=10, max_receive_window=65535)
        engine = self.h.conn._engine
        assert type(engine) is (FastEngine if paths else H2Engine)
        assert engine.fast == paths
        self.server = FakeServer()  # one per twin: HPACK state is per connection
        self.encoder = hpack.Encoder()  # the server's, for the headers it builds itself
        # The preface and its SETTINGS differ: the plain engine repeats its
        # header list limit in a second SETTINGS frame (h2 applies it on the ACK).
        self.written = Written(len(self.h.transport.written))
        self.sinks: dict[int, AckingSink] = {}
        self.streams: dict[int, UpstreamStream] = {}
        for hold, size in zip(holding, sizes, strict=True):
            self.open(hold, size, end_stream=True)

    def open(self, holding: bool, size: str, end_stream: bool) -> None:
        slot = self.h.conn.table.try_reserve()
        if slot is None:
            return  # no slot (the connection drains or ended): the same on both
        sink = AckingSink(holding)
        stream = slot.open(request(size, len(self.sinks)), sink, end_stream=end_stream)
        sink.stream = stream
        self.sinks[stream.stream_id] = sink
        self.streams[stream.stream_id] = stream

    def headers(self, stream_id: int, fields: list[tuple[bytes, bytes]], op: tuple) -> bytes:
        """A header block in HEADERS (padded, prioritised or cut into
        CONTINUATION frames as ``op`` asks), from the server's encoder."""
        _, _, _, end, pad, priority, cut, table = op
        if table is not None:
            self.encoder.header_table_size = table  # a size update leads the block
        block = self.encoder.encode(fields)
        pieces = [block] if not cut else [block[: len(block) // 2], block[len(block) // 2 :]]
        first = HeadersFrame(stream_id, pieces[0], flags=["END_STREAM"] if end else [])
        if pad:
            first.flags.add("PADDED")
            first.pad_length = pad
        if priority:
            first.flags.add("PRIORITY")
            first.depends_on, first.stream_weight = 0, 15
        frames: list[Frame] = [first, *(ContinuationFrame(stream_id, p) for p in pieces[1:])]
        frames[-1].flags.add("END_HEADERS")
        return b"".join(frame.serialize() for frame in frames)

    def step(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        feed = self.h.feed
        if kind == "headers":
            status, length = op[2]
            fields = [(b":status", b"%d" % status), (b"server", b"test"), (b"x-r", b"1")]
            if length is not None:
                fields.append((b"content-length", b"%d" % length))
            feed(self.headers(op[1], fields, op))
        elif kind == "trailers":
            feed(self.headers(op[1], [(b"x-t", b"1")], op))
        elif kind == "data":
            _, stream_id, size, end, pad = op
            frame = DataFrame(stream_id, flags=["END_STREAM"] if end else [])
            frame.data = bytes([stream_id]) * size
            if pad:
                frame.flags.add("PADDED")
                frame.pad_length = pad
            feed(frame.serialize())
        elif kind == "burst":
            # Plain DATA frames read at once: runs of one stream's are one piece.
            feed(b"".join(FakeServer.data(sid, bytes([sid]) * size) for sid, size in op[1]))
        elif kind == "rst":
            feed(FakeServer.rst(op[1], op[2]))
        elif kind == "window":
            feed(FakeServer.window_update(op[1], op[2]))
        elif kind == "goaway":
            feed(FakeServer.goaway(op[1], op[2]))
        elif kind == "settings":
            feed(FakeServer.settings(**{op[1]: op[2]}))
        elif kind == "ping":
            feed(PingFrame(0, opaque_data=b"pingpong").serialize())
        elif kind == "ack_held":
            if op[1] in self.streams:
                self.streams[op[1]].ack_held()
        elif kind == "cancel":
            if op[1] in self.streams:
                self.streams[op[1]].cancel()
        elif kind == "open":
            self.open(False, op[1], end_stream=op[2])
        elif kind == "body":
            stream = self.streams.get(op[1])
            if stream is not None:
                stream.send(b"b" * op[2])
                stream.end()

    def observed(self) -> dict[str, Any]:
        conn = self.h.conn
        h2conn: Any = conn._engine._h2
        self.written.update(self.h.transport.written)
        windows = {0: dict(vars(h2conn._inbound_flow_control_window_manager))}
        outbound = {0: h2conn.outbound_flow_control_window}
        lengths = {}
        # A closed stream stays in h2's table until h2 counts its open streams,
        # which the request_headers path does less often than h2: closed ones
        # may differ here, and h2 treats frames on them alike (the probes check).
        live = {sid: s for sid, s in h2conn.streams.items() if not s.closed}
        for stream_id, stream in live.items():
            windows[stream_id] = dict(vars(stream._inbound_window_manager))
            outbound[stream_id] = stream.outbound_flow_control_window
            lengths[stream_id] = (
                stream._expected_content_length,
                stream._actual_content_length,
                sorted(vars(stream.state_machine).items()),  # its state, and all it remembers
                stream.request_method,
                stream._authority,
            )
        return {
            "written": self.written.frames,
            "state": conn.state,
            "h2_state": h2conn.state_machine.state,
            "live_streams": sorted(live),
            "windows": windows,
            "outbound": outbound,
            "lengths": lengths,
            "sinks": {
                stream_id: (
                    sink.responses,
                    bytes(sink.data),
                    sink.ended,
                    None if sink.error is None else (sink.error.error, sink.error.detail),
                )
                for stream_id, sink in self.sinks.items()
            },
            "unacked": {sid: s.unacked for sid, s in self.streams.items()},
        }


named = st.sampled_from(NAMED)
opened = st.sampled_from(STREAMS)
pads = st.sampled_from([0, 0, 0, 7])
#: (status, content-length): a final response, or an informational one.
heads_of = st.one_of(
    st.tuples(st.sampled_from([200, 204, 404]), st.none() | st.integers(0, 9000)),
    st.tuples(st.sampled_from([100, 103]), st.none()),
)
header_block_options = (
    st.booleans(),  # END_STREAM
    pads,
    st.booleans(),  # PRIORITY
    st.booleans(),  # cut into HEADERS + CONTINUATION
    st.sampled_from([None, None, None, 0, 256, 4096]),  # a table size update first
)
ops = st.one_of(
    st.tuples(st.just("headers"), named, heads_of, *header_block_options),
    st.tuples(st.just("trailers"), opened, st.none(), *header_block_options),
    st.tuples(st.just("data"), named, st.integers(0, 5000), st.booleans(), pads),
    st.tuples(st.just("rst"), named, st.sampled_from([0x7, 0x8, 0x2])),
    st.tuples(st.just("window"), st.sampled_from([0, 1, 3, 7]), st.integers(1, 70_000)),
    st.tuples(st.just("goaway"), st.sampled_from([0, 1, 3, 5, 7]), st.sampled_from([0, 0x2])),
    st.tuples(
        st.just("settings"),
        st.sampled_from(["header_table_size", "initial_window_size", "max_concurrent_streams"]),
        st.sampled_from([0, 100, 4096, 100_000]),
    ),
    st.tuples(st.just("ping")),
    st.tuples(st.just("ack_held"), opened),
    st.tuples(st.just("cancel"), named),
    st.tuples(st.just("open"), st.sampled_from(sorted(HEAD_SIZES)), st.booleans()),
    st.tuples(st.just("body"), named, st.integers(1, 20_000)),
)
plain_data = st.tuples(st.just("data"), opened, st.integers(1, 3000), st.just(False), st.just(0))
#: Plain DATA frames in one read: runs of a stream, switches between streams,
#: an empty frame that breaks a run, a stream never opened.
burst = st.tuples(
    st.just("burst"),
    st.lists(
        st.tuples(st.sampled_from([1, 1, 1, 3, 5, 7]), st.sampled_from([0, 1, 700, 1500, 3000])),
        min_size=2,
        max_size=8,
    ),
)
scripts = st.lists(st.one_of(plain_data, burst, ops), min_size=1, max_size=40)
first_heads = st.tuples(*[st.just(False) | st.none() | st.integers(0, 9000)] * 3)
head_sizes = st.tuples(*[st.sampled_from(sorted(HEAD_SIZES))] * 3)


def small_windows(
    monkeypatch: pytest.MonkeyPatch,
    stream: int = SMALL_STREAM_WINDOW,
    connection: int = SMALL_CONNECTION_WINDOW,
) -> None:
    # The Harness sends no PINGs: each stream's window is the unmeasured one.
    monkeypatch.setattr(windows, "UNMEASURED_WINDOW", stream)
    monkeypatch.setattr(windows, "CONNECTION_WINDOW", connection)


async def compare(
    script: list[tuple[Any, ...]],
    holding: tuple[bool, ...],
    heads: tuple[int | bool | None, ...] = (None, None, None),
    sizes: tuple[str, ...] = ("small", "small", "small"),
    pair: Pair = PLAIN,
    burst_reads: bool = True,
) -> tuple[Twin, Twin]:
    """``heads``: per stream, the response head sent before the script: False for
    none, None for one without content-length, N for ``content-length: N``;
    ``pair``: the fast layer's paths and the reference's; ``burst_reads``:
    a ``burst`` step's frames arrive in one read (else in one read each)."""
    fast, slow = Twin(pair[0], holding, sizes), Twin(pair[1], holding, sizes)
    first = [
        ("headers", sid, (200, head), False, 0, False, False, None)
        for sid, head in zip(STREAMS, heads, strict=True)
        if head is not False
    ]
    steps = [*first, *script]
    if not burst_reads:
        steps = [
            one
            for op in steps
            for one in ([("burst", [frame]) for frame in op[1]] if op[0] == "burst" else [op])
        ]
    for op in steps:
        for twin in (fast, slow):
            twin.step(op)
            await twin.h.settle()
        await asyncio.sleep(0)  # the coalesced writes of both
        if op[0] == "burst" and pair[1] and slow.h.conn.state is ConnState.CLOSED:
            # A read ending the connection, against the fast layer with
            # stream_faults alone as reference: that one hands h2 the read's
            # frames in one call, and h2 drops what the frames before the one it
            # refuses said (DATA, a stream's own fault; the plain engine, the
            # PLAIN pair's reference, tells it). Both must end the connection,
            # failing the same streams.
            assert fast.h.conn.state is ConnState.CLOSED, op
            assert _failed(fast) == _failed(slow), op
            break
        assert fast.observed() == slow.observed(), op
        if fast.h.conn.state is ConnState.CLOSED:
            break
    return fast, slow


def _failed(twin: Twin) -> set[int]:
    return {sid for sid, sink in twin.sinks.items() if sink.error is not None}


@settings(
    max_examples=EXAMPLES,
    derandomize=not LONG_RUN,  # the suite's 200 the same each run; a long run explores
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=scripts, holding=st.tuples(*[st.booleans()] * 3), heads=first_heads, sizes=head_sizes)
@pytest.mark.parametrize("pair", PAIRS)
def test_the_fast_layer_does_what_the_plain_engine_does(
    monkeypatch: pytest.MonkeyPatch,
    pair: Pair,
    script: list[tuple[Any, ...]],
    holding: tuple[bool, ...],
    heads: tuple[int | bool | None, ...],
    sizes: tuple[str, ...],
) -> None:
    small_windows(monkeypatch)
    # The fast layer with stream_faults alone, the second pair's reference,
    # hands h2 the frames of a read that it takes no fast path for in one call,
    # so that h2 says what they say in another order than one frame at a time
    # (a RST_STREAM before the WINDOW_UPDATE of a frame ahead of it) and drops
    # it all when it refuses one: reads of several frames are held to the plain
    # engine, which takes frames one by one, and to the second reference only
    # in the scripted edge cases (a few of their own).
    asyncio.run(compare(script, holding, heads, sizes, pair, burst_reads=pair == PLAIN))


def block(*options: Any) -> tuple[Any, ...]:
    """``header_block_options`` for a scripted step: END_STREAM, pad, priority, cut, size."""
    defaults = (False, 0, False, False, None)
    return (*options, *defaults[len(options) :])


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
            [("rst", 1, 8), ("data", 1, 100, False, 0), ("cancel", 5), ("data", 5, 100, False, 0)],
        ),
        # Trailers, then DATA after them.
        (
            (None, None, None),
            [("data", 1, 10, False, 0), ("trailers", 1, None, *block(True)),
             ("data", 1, 10, False, 0)],
        ),
        # Enough acknowledged to cross h2's WINDOW_UPDATE thresholds on both windows.
        ((None, None, None), [("data", sid, 3000, False, 0) for sid in (1, 3, 5, 1, 3, 5)]),
        # 1xx, then the response, padded, with a size update first, and cut in two.
        (
            (False, False, False),
            [("headers", 1, (103, None), *block()),
             ("headers", 1, (200, 5), *block(False, 7, True, True, 0)),
             ("data", 1, 5, True, 0)],
        ),
        # A GOAWAY mid-stream: stream 1 finishes, 3 and 5 are replayable.
        (
            (None, None, False),
            [("data", 1, 10, False, 0), ("goaway", 1, 0), ("data", 1, 10, True, 0),
             ("headers", 3, (200, None), *block(True))],
        ),
        # Runs of plain DATA read at once (stream 5's client reads nothing):
        # past stream 5's window on the run's third frame,
        ((None, None, None), [("burst", [(5, 1500), (5, 1500), (5, 1500), (5, 10)])]),
        # past stream 1's content-length on its third (stream 1 alone is reset),
        ((10, 100, None), [("burst", [(1, 4), (1, 4), (1, 4), (1, 4), (3, 50), (3, 50)])]),
        # after another stream's DATA, held meanwhile; then the end of a run's
        # stream (trailers), and a run on it after,
        ((None, None, None), [("burst", [(3, 100), (1, 100), (1, 100), (1, 100), (3, 5)]),
                              ("trailers", 1, None, *block(True)),
                              ("burst", [(1, 10), (1, 10)])]),
        # an empty frame inside a run, a run up to its content-length then past
        # it, and a stream never opened after a run (a connection error).
        ((None, 200, None), [("burst", [(1, 10), (1, 0), (1, 10), (1, 5)]),
                             ("burst", [(3, 100), (3, 100), (3, 1)]),
                             ("burst", [(1, 10), (1, 10), (7, 10), (1, 5)])]),
        # HEADERS on a stream h2ping reset (DATA before its head), after a request
        # that may make h2 forget the stream: discarded unanswered either way.
        ((None, False, None), [("data", 3, 1, False, 0), ("open", "medium", False),
                               ("headers", 3, (200, None), *block())]),
        ((None, False, None), [("data", 3, 1, False, 0), ("open", "medium", False),
                               ("headers", 3, (200, None), *block(False, 0, True))]),
        # A padded HEADERS whose padding is its whole payload (its block, one
        # byte, cut in two), given to h2 with its CONTINUATION: the fault names
        # the HEADERS, as when h2 is given each frame alone.
        ((False, None, None), [("trailers", 1, None, *block()), ("data", 1, 1, False, 0),
                               ("trailers", 1, None, *block(False, 7, False, True))]),
        # The server shrinks our encoder's table: the next request's block leads with an update.
        ((None, None, None), [("settings", "header_table_size", 0), ("open", "small", True),
                              ("settings", "header_table_size", 4096), ("open", "large", True)]),
    ],
)  # fmt: skip
@pytest.mark.parametrize("pair", PAIRS)
async def test_edge_cases_agree(
    monkeypatch: pytest.MonkeyPatch,
    heads: tuple[int | bool | None, ...],
    script: list[Any],
    pair: Pair,
) -> None:
    small_windows(monkeypatch)
    # Streams 1 and 3 ack at once; stream 5's client reads nothing.
    await compare(script, (False, False, True), heads, pair=pair)


async def test_a_run_past_the_connection_window_fails_on_its_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Streams 3 and 5 hold what they get; one read brings runs of both that go
    past the connection window on their last frame: h2's flow-control error,
    told after the frames before it, on both twins."""
    small_windows(monkeypatch, stream=40_000, connection=70_000)
    run = [(3, 16_000), (3, 16_000), (5, 16_000), (5, 16_000), (5, 5_000), (5, 2_000), (5, 1)]
    fast, _ = await compare([("burst", run)], (False, True, True))
    assert fast.h.conn.state is ConnState.CLOSED
    assert len(fast.sinks[5].data) == 16_000 * 2 + 5_000


async def test_a_run_of_frames_is_counted_in_one_step() -> None:
    """The comparisons above would also pass if runs were taken frame by frame."""
    fast = Twin(frozenset(FAST_PATHS), (False,), ("small",))
    h2conn: Any = fast.h.conn._engine._h2
    calls: dict[str, int] = {}
    counting(h2conn, "take_data", lambda stream: stream is not None, calls)
    fast.step(("headers", 1, (200, None), *block()))
    fast.step(("burst", [(1, 1000)] * 8))
    await fast.h.settle()
    assert calls == {"take_data": 1}
    assert bytes(fast.sinks[1].data) == b"\x01" * 8000


async def test_an_empty_connection_window_gets_its_update_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Streams 3 and 5 hold 64,000 bytes; stream 1's 6,000 then empty the
    connection window. h2 sends its WINDOW_UPDATE for as little as that (the
    window is empty), long before half of it is processed: no quiet ack there."""
    small_windows(monkeypatch, stream=40_000, connection=70_000)
    held = [("data", sid, 16_000, False, 0) for sid in (3, 5, 3, 5)]
    await compare([*held, ("data", 1, 6000, False, 0)], (False, True, True))


def counting(h2conn: Any, name: str, taken: Any, calls: dict[str, int]) -> None:
    """Count in ``calls`` the calls of ``h2conn.name`` for which ``taken(result)`` holds."""
    calls[name] = 0
    method = getattr(h2conn, name)

    def wrapper(*args: Any) -> Any:
        result = method(*args)
        calls[name] += bool(taken(result))
        return result

    setattr(h2conn, name, wrapper)


async def test_every_fast_path_is_taken_in_the_comparisons() -> None:
    """The comparisons above would also pass if no fast path ran."""
    fast = Twin(frozenset(FAST_PATHS), (False,), ("small",))
    h2conn: Any = fast.h.conn._engine._h2
    # The request left without hpack's encoder: its dynamic table is still empty.
    assert not h2conn.encoder.header_table.dynamic_entries
    calls: dict[str, int] = {}
    counting(h2conn, "take_response_headers", lambda events: events is not None, calls)
    for name in ("take_data", "take_last_data", "ack_quietly", "ack_taken"):
        counting(h2conn, name, bool, calls)
    fast.step(("headers", 1, (200, 10_005), *block()))
    for _ in range(10):
        fast.step(("data", 1, 1000, False, 0))
    fast.step(("data", 1, 5, True, 0))
    await fast.h.settle()
    assert calls == {
        "take_response_headers": 1,
        "take_data": 11,  # the last DATA's too (take_last_data's own call)
        "take_last_data": 1,
        "ack_quietly": 0,  # each frame's credit goes back through the stream it was counted in
        "ack_taken": 11,  # the last DATA's too
    }
    sink = fast.sinks[1]
    assert (bytes(sink.data), sink.ended) == (b"\x01" * 10_005, True)


async def test_the_comparison_sees_a_fast_path_that_differs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fast DATA path that forgets to count a frame in the stream's window:
    the comparison must say so."""
    forget_to_count_plain_data(monkeypatch)
    with pytest.raises(AssertionError):
        await compare([("data", 1, 100, False, 0)], (False, False, False))


def test_the_splitter_hands_out_plain_frames_only() -> None:
    server = FakeServer()
    headers = server.headers(1, 200)
    plain = FakeServer.data(1, b"abc")
    last = FakeServer.data(1, b"z", end_stream=True)
    empty_last = FakeServer.data(1, b"", end_stream=True)
    empty = FakeServer.data(1, b"")
    padded = DataFrame(1, b"p", flags=["END_STREAM", "PADDED"], pad_length=2).serialize()
    split = FrameSplitter(plain_data=True).split
    other = FakeServer.data(3, b"de")
    assert split(plain + plain + other + plain + empty + plain + plain) == [
        (1, [b"abc", b"abc"]),
        (3, b"de"),
        (1, b"abc"),
        (RUN, empty),
        (1, [b"abc", b"abc"]),
    ]
    splitter = FrameSplitter(plain_data=True)
    splitter.feed(plain * 3)
    assert splitter.take(9 + 3 + 1) == [(1, [b"abc", b"abc"])]  # up to the budget's frame
    splitter.feed(plain * 3 + plain[:5])
    assert splitter.take() == [(1, [b"abc"] * 4)]  # a partial frame waits
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
        (FRAME, trailers),  # the fast layer's FastConnection declines trailers: they go to h2
        (RUN, priority + on_zero),
    ]
    # Inside a header block (HEADERS without END_HEADERS) every frame is h2's,
    # which refuses anything but CONTINUATION there.
    big = server.headers(3, 200, [("x-big", "v" * 20000)])
    cut = 9 + int.from_bytes(big[:3], "big")  # HEADERS | CONTINUATION...
    splitter = FrameSplitter(plain_data=True)
    assert splitter.split(big[:cut] + plain) == [(0, big[:cut] + plain)]
    assert FrameSplitter(plain_data=True).split(big + plain) == [(0, big), (1, b"abc")]
    assert FrameSplitter().split(plain) == [(0, plain)]  # off unless asked for
