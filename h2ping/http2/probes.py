"""One probe per fast path: a tiny known exchange, built frame by frame with
hyperframe, through a connection taking the path, compared with the same exchange
through plain h2 (or, for stream faults, which plain h2 does not have, with what
the path promises). Each returns None when the path behaves, else a short text
saying what differed; an exception means the same (a missing internal, usually).

The exchanges reach what each path touches: for ``data``, plain DATA frames and
quiet acknowledgements up to and past h2's WINDOW_UPDATE thresholds and a
content-length; for ``receive``, every branch of h2's ``_receive_frame``; for
``hpack``, repeated literal fields and the dynamic table they fill.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import h2.events
from h2.stream import StreamClosedBy
from hpack import Encoder
from hyperframe.frame import (
    DataFrame,
    Frame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from .h2conn import DATA, H2_CONFIG, HPACK, RECEIVE, STREAM_FAULTS, H2Connection
from .hpackcache import FieldCachingDecoder

_REQUEST = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"p"), (b":path", b"/")]
_HEADER_LIST_LIMIT = 1000
_PROTOCOL_ERROR, _STREAM_CLOSED, _CANCEL = 0x1, 0x5, 0x8


class _Twin:
    """A client connection fed server frames; records what it reports and writes,
    taking plain DATA and acknowledgements as the upstream connection does."""

    def __init__(self, fast: Iterable[str], streams: Iterable[int]) -> None:
        self.conn = H2Connection(H2_CONFIG, _HEADER_LIST_LIMIT, frozenset(fast))
        self.conn.initiate_connection()
        self.taken = self.quiet = 0
        self.record: list[Any] = []
        self.frames(SettingsFrame(0, settings={0x3: 100}), SettingsFrame(0, flags=["ACK"]))
        for stream_id in streams:
            self.conn.send_headers(stream_id, _REQUEST, end_stream=True)
        self.conn.data_to_send()
        self.record.clear()

    def feed(self, data: bytes) -> None:
        try:
            events = self.conn.receive_data(data)
        except Exception as exc:  # what h2 raises is part of what it does
            self.record.append(("raised", f"{type(exc).__name__}: {exc}"))
        else:
            self.record.append([_event(event) for event in events])
        self.record.append(self.conn.data_to_send())

    def frames(self, *frames: Frame) -> None:
        self.feed(b"".join(frame.serialize() for frame in frames))

    def plain_data(self, stream_id: int, size: int) -> None:
        if self.conn.take_plain_data(stream_id, size):
            self.taken += 1
            self.record.append([["DataReceived", stream_id, size]])
            self.record.append(self.conn.data_to_send())
        else:
            self.frames(_data(stream_id, size))

    def ack(self, stream_id: int, size: int) -> None:
        if self.conn.ack_quietly(stream_id, size):
            self.quiet += 1
        else:
            self.conn.acknowledge_received_data(size, stream_id)
        self.record.append(self.conn.data_to_send())


def _event(event: h2.events.Event) -> Any:
    """What an event says, comparable across connections."""
    if event.__class__.__name__ == "DataReceived":
        return ["DataReceived", event.stream_id, event.flow_controlled_length]  # type: ignore[attr-defined]
    values = ((name, getattr(event, name)) for name in dir(event) if not name.startswith("_"))
    fields = {
        name: value
        for name, value in values
        # stream_ended and the like: the event itself follows in the list.
        if not callable(value) and not isinstance(value, h2.events.Event)
    }
    # By repr: some fields hold objects (ChangedSetting) that compare by identity.
    return [event.__class__.__name__, repr(sorted(fields.items(), key=lambda item: item[0]))]


def _data(stream_id: int, size: int, end: bool = False) -> DataFrame:
    frame = DataFrame(stream_id, flags=["END_STREAM"] if end else [])
    frame.data = b"x" * size
    return frame


class _Server:
    """Response header blocks from one HPACK encoder, as a server keeps per connection."""

    def __init__(self) -> None:
        self.encoder = Encoder()

    def headers(
        self, stream_id: int, fields: list[tuple[bytes, bytes]], end: bool = False
    ) -> HeadersFrame:
        flags = ["END_HEADERS", "END_STREAM"] if end else ["END_HEADERS"]
        return HeadersFrame(stream_id, self.encoder.encode(fields), flags=flags)

    def response(self, stream_id: int, length: int | None = None) -> HeadersFrame:
        extra = [] if length is None else [(b"content-length", str(length).encode())]
        return self.headers(stream_id, [(b":status", b"200"), *extra])


def _differs(fast: _Twin, plain: _Twin) -> str | None:
    for step, (mine, theirs) in enumerate(zip(fast.record, plain.record, strict=True)):
        if mine != theirs:
            return f"step {step}: {str(mine)[:120]} where plain h2 gives {str(theirs)[:80]}"
    return None


def data() -> str | None:
    """Plain DATA and quiet acknowledgements, on both sides of every threshold."""
    twins = fast, plain = _Twin([DATA], (1, 3, 5)), _Twin([], (1, 3, 5))
    for twin in twins:
        server = _Server()
        twin.frames(server.response(1, 20_000), server.response(3), server.response(5, 10))
        for _ in range(4):
            twin.plain_data(1, 4000)
            twin.ack(1, 4000)
        # Stream 3's client reads late: 48,000 bytes held, then given back in
        # steps that cross both windows' thresholds.
        for size in (4000,) * 7 + (16_000, 4000):
            twin.plain_data(3, size)
        for size in (4000,) * 5 + (8000, 12_000, 8000):
            twin.ack(3, size)
        twin.frames(_data(1, 4000, end=True))  # content-length reached exactly
        twin.plain_data(5, 11)  # over content-length: h2's error
    if not fast.taken or not fast.quiet:
        return f"fast path not taken ({fast.taken} DATA frames, {fast.quiet} acks)"
    return _differs(fast, plain)


def receive() -> str | None:
    """Each branch of h2's ``_receive_frame``, through h2ping's copy of it."""
    twins = fast, plain = _Twin([RECEIVE], (1, 3, 5, 7)), _Twin([], (1, 3, 5, 7))
    calls = 0
    copy = fast.conn._handle_frame

    def counting(frame: Frame) -> list[h2.events.Event]:
        nonlocal calls
        calls += 1
        return copy(frame)

    fast.conn._handle_frame = counting  # type: ignore[method-assign]
    for twin in twins:
        server = _Server()
        twin.frames(
            SettingsFrame(0, settings={0x4: 100_000}),
            PingFrame(0, opaque_data=b"12345678"),
            WindowUpdateFrame(0, window_increment=1000),
        )
        twin.frames(server.response(1), _data(1, 100))
        twin.frames(server.headers(1, [(b"x-trailer", b"1")], end=True))
        twin.conn.reset_stream(3)
        twin.frames(server.response(3), _data(3, 50))  # on a stream we reset
        twin.frames(RstStreamFrame(5, error_code=_CANCEL))
        twin.conn.open_outbound_streams  # noqa: B018 -- h2 forgets closed streams here
        twin.frames(_data(3, 10))  # a forgotten stream we reset
        twin.frames(server.response(7, 0), _data(7, 0, end=True))
        twin.frames(_data(7, 10))  # after END_STREAM
        twin.frames(_data(1, 10))  # a forgotten stream that ended: a connection error
    if not calls:
        return "h2ping's _receive_frame is not called by h2"
    differs = _differs(fast, plain)
    if differs is not None:
        return differs
    # Two branches of the copy no exchange reaches on a client connection.
    if not fast.conn._stream_is_closed_by_reset(3) or not fast.conn._stream_is_closed_by_end(1):
        return "h2's _stream_is_closed_by_reset/_end answer otherwise"
    return None


def hpack() -> str | None:
    """Repeated literal fields (as nginx sends them) and the dynamic table they fill."""
    twins = fast, plain = _Twin([HPACK], (1, 3, 5)), _Twin([], (1, 3, 5))
    # :status 200; server: nginx (incremental indexing, static name); x-abc: v
    # (incremental indexing, literal name); x-def: w (never indexed).
    block = b"\x88\x76\x05nginx\x40\x05x-abc\x01v\x10\x05x-def\x01w"
    for twin in twins:
        twin.frames(HeadersFrame(1, block, flags=["END_HEADERS"]))
        twin.frames(HeadersFrame(3, block, flags=["END_HEADERS"]))
        # The two newest dynamic entries, by index: x-abc, then server.
        twin.frames(HeadersFrame(5, b"\x88\xbe\xbf", flags=["END_HEADERS", "END_STREAM"]))
    decoder = fast.conn.decoder
    if not isinstance(decoder, FieldCachingDecoder) or not decoder.hits:
        return "h2ping's decoder is not the one h2 decodes with"
    return _differs(fast, plain)


def stream_faults() -> str | None:
    """A faulty stream is reset alone, its neighbours go on, as h2ping promises
    (plain h2 would end the connection: there is nothing to compare with)."""
    twin = _Twin([STREAM_FAULTS], (1, 3, 5, 7))
    server = _Server()
    big = [(b":status", b"200"), (b"x-big", b"v" * (_HEADER_LIST_LIMIT + 1))]
    script: list[tuple[list[Frame], list[Any], list[tuple[int, int]]]] = [
        # More DATA than the content-length: a malformed response.
        (
            [server.response(1, 5), _data(1, 10)],
            [("ResponseReceived", 1), ("StreamFault", 1)],
            [(1, _PROTOCOL_ERROR)],
        ),
        ([_data(1, 10)], [], [(1, _STREAM_CLOSED)]),  # after our reset: dropped
        ([server.headers(3, big)], [("StreamFault", 3)], [(3, _CANCEL)]),  # over the limit
        (
            [server.response(5), _data(5, 5, end=True)],
            [("ResponseReceived", 5), ("DataReceived", 5), ("StreamEnded", 5)],
            [],
        ),
        ([server.response(5)], [], [(5, _STREAM_CLOSED)]),  # HEADERS after the end
        (
            [server.response(7, 0), _data(7, 0, end=True)],
            [("ResponseReceived", 7), ("DataReceived", 7), ("StreamEnded", 7)],
            [],
        ),
    ]
    for step, (frames, events, resets) in enumerate(script):
        got = twin.conn.receive_data(b"".join(frame.serialize() for frame in frames))
        said = [(event.__class__.__name__, getattr(event, "stream_id", 0)) for event in got]
        sent = _resets(twin.conn.data_to_send())
        if said != events or sent != resets:
            return f"step {step}: events {said}, resets {sent}; expected {events}, {resets}"
        if not step and twin.conn.streams[1].closed_by is not StreamClosedBy.SEND_RST_STREAM:
            return "h2 does not see a faulty stream as reset by h2ping"
    return None


def _resets(data: bytes) -> list[tuple[int, int]]:
    """The (stream, error code) of each RST_STREAM frame in ``data``."""
    found, pos = [], 0
    while pos + 9 <= len(data):
        frame, length = Frame.parse_frame_header(memoryview(data[pos : pos + 9]))
        if isinstance(frame, RstStreamFrame):
            frame.parse_body(memoryview(data[pos + 9 : pos + 9 + length]))
            found.append((frame.stream_id, frame.error_code))
        pos += 9 + length
    return found
