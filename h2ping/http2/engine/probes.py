"""One probe per fast path: a tiny known exchange, built frame by frame with
hyperframe, through a connection taking the path, compared with the same exchange
through plain h2 (or, for stream faults, which plain h2 does not have, with what
the path promises). Each returns None when the path behaves, else a short text
saying what differed; an exception means the same (a missing internal, usually).

The exchanges reach what each path touches: for ``data``, plain DATA frames and
quiet acknowledgements up to and past h2's WINDOW_UPDATE thresholds and a
content-length; for ``receive``, every branch of h2's ``_receive_frame``; for
``hpack``, repeated literal fields and the dynamic table they fill; for
``response_headers``, every kind of response head and the errors it can end
in; for ``request_headers``, requests of every kind h2ping sends, with the answers
that depend on what a request's HEADERS left in h2's state.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import h2.events
from hpack import Decoder, Encoder, NeverIndexedHeaderTuple
from hyperframe.frame import (
    DataFrame,
    Frame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from .fastconnection import FastConnection
from .hpackdecode import FieldCachingDecoder
from .manifest import (
    DATA,
    HPACK,
    RECEIVE,
    REQUEST_DATA,
    REQUEST_HEADERS,
    RESPONSE_HEADERS,
    STREAM_FAULTS,
    lookup,
)
from .plain import H2_CONFIG

_REQUEST = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"p"), (b":path", b"/")]
_HEADER_LIST_LIMIT = 1000
_PROTOCOL_ERROR, _STREAM_CLOSED, _CANCEL = 0x1, 0x5, 0x8


class _Twin:
    """A client connection fed server frames; records what it reports and writes,
    taking plain DATA and acknowledgements as the upstream connection does."""

    def __init__(self, fast: Iterable[str], streams: Iterable[int]) -> None:
        self.conn = FastConnection(H2_CONFIG, _HEADER_LIST_LIMIT, frozenset(fast))
        self.conn.initiate_connection()
        self.taken = self.quiet = 0
        self.sent = _Sent()
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
            self.record.append(_raised(exc))
        else:
            self.record.append([_event(event) for event in events])
        self.record.append(self.conn.data_to_send())

    def frames(self, *frames: Frame) -> None:
        self.feed(b"".join(frame.serialize() for frame in frames))

    def request(self, stream_id: int, headers: list[Any], end_stream: bool) -> None:
        """Send a request; record its frames with their header blocks decoded."""
        try:
            self.conn.send_request(stream_id, headers, end_stream)
        except Exception as exc:
            self.record.append(_raised(exc))
            return
        self.record.append(self.sent.frames(self.conn.data_to_send()))
        self.record.append([self.conn.state_machine.state, self.conn.highest_outbound_stream_id])
        self.record.append(_stream_state(self.conn, stream_id))

    def body(self, stream_id: int, size: int, end_stream: bool) -> None:
        """Send ``size`` bytes of a request's body; record its frames, the
        windows and the stream's state."""
        try:
            self.conn.send_body(stream_id, memoryview(bytes(range(256)) * 80)[:size], end_stream)
        except Exception as exc:
            self.record.append(_raised(exc))
        self.record.append(self.sent.frames(self.conn.data_to_send()))
        stream = self.conn.streams.get(stream_id)
        mine = (
            None
            if stream is None
            else (stream.outbound_flow_control_window, stream.state_machine.state)
        )
        self.record.append([self.conn.outbound_flow_control_window, mine])

    def plain_data(self, stream_id: int, size: int) -> None:
        if self.conn.take_data(stream_id, size):
            self.taken += 1
            self.record.append([["DataReceived", stream_id, size]])
            self.record.append(self.conn.data_to_send())
        else:
            self.frames(_data(stream_id, size))

    def last_data(self, stream_id: int, size: int) -> None:
        if self.conn.take_last_data(stream_id, size):
            self.taken += 1
            self.record.append([["DataReceived", stream_id, size], ["StreamEnded", stream_id]])
            self.record.append(self.conn.data_to_send())
        else:
            self.frames(_data(stream_id, size, end=True))
        self.record.append(_stream_state(self.conn, stream_id))

    def response_headers(self, frame: HeadersFrame) -> None:
        """Take (or refuse) ``frame``; record what it said and the stream it left."""
        self._response_headers(frame)
        self.record.append(_stream_state(self.conn, frame.stream_id))

    def _response_headers(self, frame: HeadersFrame) -> None:
        end = "END_STREAM" in frame.flags
        try:
            taken = self.conn.take_response_headers(frame.stream_id, frame.data, end)
        except Exception as exc:
            self.record.append(_raised(exc))
            self.record.append(self.conn.data_to_send())
            return
        if taken is None:
            self.frames(frame)
            return
        self.taken += 1
        headers, events = taken
        if headers is not None:  # what the engine tells: h2's events would say the same
            response = _new_event(h2.events.ResponseReceived, frame.stream_id)
            response.headers = headers
            events = [response]
            if end:
                response.stream_ended = _new_event(h2.events.StreamEnded, frame.stream_id)
                events.append(response.stream_ended)
        self.record.append([_event(event) for event in events])
        self.record.append(self.conn.data_to_send())

    def ack(self, stream_id: int, size: int) -> None:
        if self.conn.ack_quietly(stream_id, size):
            self.quiet += 1
        else:
            self.conn.acknowledge_received_data(size, stream_id)
        self.record.append(self.conn.data_to_send())


def _stream_state(conn: FastConnection, stream_id: int) -> Any:
    """Everything h2 keeps of stream ``stream_id``: its attributes, its state
    machine's and its window's, whatever they are named in this release."""
    stream = conn.streams.get(stream_id)
    if stream is None:
        return None
    kept: list[tuple[str, Any]] = []
    for name, value in sorted(vars(stream).items()):
        if value is conn.config:
            kept.append((name, "the connection's configuration"))
        elif hasattr(value, "__dict__"):  # the state machine, the window: by what they hold
            kept.append((name, sorted(vars(value).items())))
        else:
            kept.append((name, value))
    return kept


def _new_event(cls: Any, stream_id: int) -> Any:
    """An h2 event for ``stream_id`` (h2 before 4.2 takes no arguments)."""
    try:
        return cls(stream_id=stream_id)
    except TypeError:
        event = cls()
        event.stream_id = stream_id
        return event


def _raised(exc: Exception) -> tuple[str, str]:
    """What was raised, without the addresses some messages quote."""
    return ("raised", re.sub(r"0x[0-9a-f]+", "0x", f"{type(exc).__name__}: {exc}"))


def _event(event: h2.events.Event) -> Any:
    """What an event says, comparable across connections."""
    if event.__class__.__name__ == "DataReceived":
        return ["DataReceived", event.stream_id, event.flow_controlled_length]  # type: ignore[attr-defined]
    if event.__class__.__name__ == "StreamEnded":
        return ["StreamEnded", event.stream_id]  # type: ignore[attr-defined]
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


class _Sent:
    """What a client wrote, frame by frame, header blocks decoded (by one decoder,
    as the server would)."""

    def __init__(self) -> None:
        self.decoder = Decoder()
        self._block = b""

    def frames(self, data: bytes) -> list[Any]:
        out: list[Any] = []
        pos = 0
        while pos + 9 <= len(data):
            length = int.from_bytes(data[pos : pos + 3], "big")
            kind, flags = data[pos + 3], data[pos + 4]
            stream_id = int.from_bytes(data[pos + 5 : pos + 9], "big")
            payload = data[pos + 9 : pos + 9 + length]
            pos += 9 + length
            if kind not in (0x1, 0x9):  # not HEADERS or CONTINUATION
                out.append([kind, flags, stream_id, payload])
                continue
            self._block += payload
            if flags & 0x4:  # END_HEADERS: the block is whole
                decoded = self.decoder.decode(self._block)
                fields = [(type(field).__name__, *field) for field in decoded]
                resized = self._block[0] & 0xE0 == 0x20  # a dynamic table size update leads
                out.append([kind, flags & 0x1, stream_id, fields, resized])
                self._block = b""
        return out


def _differs(fast: _Twin, plain: _Twin) -> str | None:
    for step, (mine, theirs) in enumerate(zip(fast.record, plain.record, strict=True)):
        if mine != theirs:
            return f"step {step}: {str(mine)[:120]} where plain h2 gives {str(theirs)[:80]}"
    return None


def data() -> str | None:
    """Plain and last DATA and quiet acknowledgements, on both sides of every
    threshold, and DATA beyond or short of a content-length."""
    for last, ending in ((False, 11), (True, 9)):  # stream 5's content-length is 10
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
            twin.last_data(1, 4000)  # content-length reached exactly
            twin.ack(1, 4000)  # after the end: the connection's window alone
            twin.last_data(3, 0)  # an empty last frame
            twin.ack(3, 30_000)  # enough for the connection's WINDOW_UPDATE
            twin.record.append(
                [(sid, s.state_machine.state, s.closed_by) for sid, s in twin.conn.streams.items()]
            )
            if last:
                twin.last_data(5, ending)  # short of content-length: h2's error
            else:
                twin.plain_data(5, ending)  # beyond it
        if not fast.taken or not fast.quiet:
            return f"fast path not taken ({fast.taken} DATA frames, {fast.quiet} acks)"
        differs = _differs(fast, plain)
        if differs is not None:
            return differs
    return None


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
    """Repeated literal fields and blocks (as nginx sends them), the dynamic table
    they fill and indices into it, one byte or more, table size updates, and
    HPACK's errors."""
    # :status 200; server: nginx (incremental indexing, static name); x-abc: v
    # twice (incremental indexing, literal name: the second from the store of
    # fields); x-def: w (never indexed); x-ghi: u (without indexing). Stream 3's
    # block is the same: from the store of blocks.
    block = (
        b"\x88\x76\x05nginx\x40\x05x-abc\x01v\x40\x05x-abc\x01v\x10\x05x-def\x01w\x00\x05x-ghi\x01u"
    )
    # 72 more entries in three blocks, so that index 130 (two bytes: 127 + 3) names one.
    many = [b"".join(b"\x40\x04x-%02d\x01v" % i for i in range(n, n + 24)) for n in (0, 24, 48)]
    endings = [
        b"",
        b"\x80",  # index 0
        b"\xff\x7f",  # index 254: past both tables
        b"\x88\x20",  # a table size update after a field
        b"\x00\x03x-z\x7f\xd1\x0e" + b"v" * 2000,  # over the header list limit
        b"\x00\x03x-z\x05v",  # a cut string
    ]
    for ending in endings:
        streams = range(1, 17, 2)
        twins = fast, plain = _Twin([HPACK], streams), _Twin([], streams)
        for twin in twins:
            twin.frames(HeadersFrame(1, block, flags=["END_HEADERS"]))
            twin.frames(HeadersFrame(3, block, flags=["END_HEADERS"]))
            # Four dynamic entries, by index: x-abc, x-abc, server (stream 3's,
            # the kept block's entries added again), x-abc (stream 1's).
            twin.frames(
                HeadersFrame(5, b"\x88\xbe\xbf\xc0\xc1", flags=["END_HEADERS", "END_STREAM"])
            )
            # The table shrunk to 100 bytes (evicting), then grown back to 4,096.
            twin.frames(HeadersFrame(7, b"\x3f\x45\x88\xbe", flags=["END_HEADERS"]))
            twin.frames(HeadersFrame(9, b"\x3f\xe1\x1f" + many[0], flags=["END_HEADERS"]))
            twin.frames(HeadersFrame(11, many[1], flags=["END_HEADERS"]))
            twin.frames(HeadersFrame(13, many[2], flags=["END_HEADERS"]))
            twin.frames(HeadersFrame(15, b"\x88\xff\x03" + ending, flags=["END_HEADERS"]))
        decoder = fast.conn.decoder
        if (
            not isinstance(decoder, FieldCachingDecoder)
            or not decoder.hits
            or not decoder.block_hits
        ):
            return "h2ping's decoder is not the one h2 decodes with"
        differs = _differs(fast, plain)
        if differs is not None:
            return differs
    return None


def request_headers() -> str | None:
    """Requests framed by h2ping and by h2: the same frames and fields, the same
    state left behind (stream states, the method a HEAD response is judged by,
    which streams are still counted), the same refusals."""
    post = [
        (b":method", b"POST"),
        (b":scheme", b"https"),
        (b":authority", b"p"),
        (b":path", b"/v1/x?y=1"),
        (b"content-type", b"application/json"),
        (b"user-agent", b"h2ping-probe/1 (\x7f)"),
        (b"x-long-name-of-a-header", b"v" * 200),
        NeverIndexedHeaderTuple(b"authorization", b"Bearer token"),
        NeverIndexedHeaderTuple(b"x-secret", b"s"),
        (b"accept-encoding", b"gzip, deflate"),
    ]
    head = [(b":method", b"HEAD"), *_REQUEST[1:]]
    large = [*_REQUEST, *((b"x-f%d" % i, b"v" * 500) for i in range(40))]  # CONTINUATION
    twins = fast, plain = _Twin([REQUEST_HEADERS], ()), _Twin([], ())
    for twin in twins:
        server = _Server()
        twin.request(1, _REQUEST, True)
        twin.request(3, post, False)
        twin.request(5, head, True)
        twin.request(7, large, True)
        twin.request(9, post, True)
        twin.frames(SettingsFrame(0, settings={0x1: 256}))  # a dynamic table size update is due
        twin.request(11, post, True)
        twin.request(13, post, True)
        twin.frames(server.response(5, 100))  # HEAD: a content-length, and no body
        twin.frames(server.response(1), _data(1, 3, end=True))
        twin.frames(server.response(3))
        twin.conn.send_data(3, b"body", end_stream=True)
        twin.record.append(twin.sent.frames(twin.conn.data_to_send()))
        twin.frames(_data(3, 2, end=True))
        for stream_id in (7, 9, 11, 13):
            twin.conn.reset_stream(stream_id)
        twin.record.append(twin.conn.data_to_send())
        twin.frames(SettingsFrame(0, settings={0x3: 40}))
        for stream_id in range(15, 15 + 2 * 42, 2):  # up to one past the limit
            twin.request(stream_id, _REQUEST, False)
        twin.record.append([twin.conn.open_outbound_streams, twin.conn.highest_outbound_stream_id])
    indexed = [twin.conn.encoder.header_table.dynamic_entries for twin in twins]
    if indexed[0] == indexed[1]:  # h2ping's requests leave the encoder's table alone
        return "the fast path was not taken"
    return _differs(fast, plain)


def request_data() -> str | None:
    """Request bodies framed by h2ping and by h2: the same frames, windows and
    stream states, and the same refusals (a frame or a window exceeded, a stream
    that ended or was reset)."""
    twins = fast, plain = _Twin([REQUEST_DATA], ()), _Twin([], ())
    taken = 0
    copy = fast.conn._send_body_fast

    def counting(stream_id: int, data: Any, end_stream: bool) -> bool:
        nonlocal taken
        sent = copy(stream_id, data, end_stream)
        taken += sent
        return sent

    fast.conn._send_body_fast = counting  # type: ignore[method-assign]
    post = [(b":method", b"POST"), *_REQUEST[1:]]
    for twin in twins:
        server = _Server()
        for stream_id in (1, 3, 5, 7):  # opened by h2 itself: only bodies are compared
            twin.conn.send_headers(stream_id, post, end_stream=False)
        twin.conn.data_to_send()
        twin.frames(WindowUpdateFrame(0, window_increment=100_000))
        for size in (100, 0, 16_384, 16_385):  # the last is over the frame size
            twin.body(1, size, False)
        for size in (16_384, 16_384, 16_384, 16_383, 1):  # the stream's window, then past it
            twin.body(3, size, False)
        twin.frames(WindowUpdateFrame(3, window_increment=1000))
        twin.body(3, 500, True)
        twin.body(3, 1, False)  # after its end
        twin.frames(RstStreamFrame(5, error_code=_CANCEL))
        twin.body(5, 10, False)  # reset by the server
        twin.frames(server.headers(7, [(b":status", b"200")], end=True))
        twin.body(7, 10, False)  # half closed by the server: the body may go on
        twin.body(7, 10, True)
        for size in (16_384,) * 6:  # the connection's window, then past it
            twin.body(1, size, False)
    if not taken:
        return "the fast path was not taken"
    return _differs(fast, plain)


def response_headers() -> str | None:
    """Response heads of every kind, taken by h2ping or refused to h2, and the
    errors that end a stream or the connection, as h2 has them."""
    endings: list[tuple[frozenset[str], list[tuple[bytes, bytes]] | bytes | int]] = [
        (frozenset(), b"\xff\x80"),  # a cut integer: HPACK's error
        (frozenset(), [(b":status", b"200"), (b"content-length", b"x")]),  # h2's error
        (frozenset({STREAM_FAULTS}), [(b":status", b"200"), (b"content-length", b"x")]),
        (frozenset({STREAM_FAULTS}), [(b":status", b"200"), (b"x-big", b"v" * 2000)]),
        (frozenset(), [(b":status", b"200"), (b"x-big", b"v" * 2000)]),  # over the limit
        (frozenset(), 3),  # on a stream that ended: h2's connection error
        (frozenset(), 11),  # on a stream never opened
    ]
    taken = 0
    for others, ending in endings:
        twins = fast, plain = (
            _Twin({RESPONSE_HEADERS} | others, (1, 3, 5, 7, 9)),
            _Twin(others, (1, 3, 5, 7, 9)),
        )
        for twin in twins:
            server = _Server()
            twin.response_headers(server.response(1, 3))
            twin.last_data(1, 3)
            twin.response_headers(server.headers(3, [(b":status", b"204")], end=True))
            twin.response_headers(server.headers(5, [(b":status", b"103"), (b"link", b"</a>")]))
            twin.response_headers(server.response(5))
            twin.response_headers(server.headers(5, [(b"x-trailer", b"t")], end=True))
            twin.conn.reset_stream(7)
            twin.response_headers(server.response(7))  # on a stream we reset
            if isinstance(ending, int):
                twin.response_headers(server.response(ending))
            elif isinstance(ending, bytes):
                twin.response_headers(HeadersFrame(9, ending, flags=["END_HEADERS"]))
            else:
                twin.response_headers(server.headers(9, ending))
            twin.record.append([twin.conn.state_machine.state, sorted(twin.conn.streams)])
        differs = _differs(fast, plain)
        if differs is not None:
            return differs
        taken += fast.taken
    return None if taken else "the fast path was not taken"


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
        ([_data(1, 10)], [], []),  # after our reset: dropped, unanswered (RFC 9113 5.1)
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
        if not step and twin.conn.streams[1].closed_by is not lookup(
            "h2.stream.StreamClosedBy.SEND_RST_STREAM"
        ):
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
