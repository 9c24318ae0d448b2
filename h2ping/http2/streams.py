"""One request/response on an upstream connection, and the slot it is opened on.

A stream owns its request body's queue, its flow-control credit (response bytes
delivered but not yet given back), both send marks and its one state. It frames
its own body as far as the peer's windows allow; the connection decides when
(:mod:`h2ping.http2.outbound`), and its stream table
(:class:`~h2ping.http2.upstream.StreamTable`) alone adds and removes streams.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import TYPE_CHECKING, Protocol

import h2.exceptions
from h2.errors import ErrorCodes

from .. import errors
from ..errors import UpstreamError
from ..fields import Header

if TYPE_CHECKING:
    from .engine import H2Engine

#: Request-body back-pressure, both marks in one place: the exchange pauses reading
#: the client while more than SEND_HIGH_WATER waits to be sent upstream
#: (:attr:`UpstreamStream.backlogged`, and :func:`send_backlog_full` for a body
#: held while a stream is awaited), and the stream tells it to resume
#: (``on_send_ready``) once that drops below SEND_LOW_WATER. An upload the peer's
#: windows hold back thus keeps at most this plus one client read in memory; more
#: would not send any sooner, as the client's next read is at hand when a
#: WINDOW_UPDATE comes.
SEND_HIGH_WATER = 64 * 1024
SEND_LOW_WATER = 16 * 1024


def send_backlog_full(nbytes: int) -> bool:
    """Whether ``nbytes`` of request body waiting to go upstream (queued on a
    stream, or held while a stream is awaited) is enough to stop reading the client."""
    return nbytes > SEND_HIGH_WATER


class StreamSink(Protocol):
    """What a stream tells the request it carries. Called from the event loop."""

    def on_informational(self, headers: list[Header]) -> None: ...
    def on_response(self, headers: list[Header], end_stream: bool) -> None: ...
    def on_data(self, data: bytes, flow_controlled_length: int) -> None: ...
    def on_end(self) -> None: ...
    def on_error(self, error: UpstreamError) -> None: ...
    def on_send_ready(self) -> None: ...


class BodyPump(Protocol):
    """What a stream asks of its connection's writing (:mod:`h2ping.http2.outbound`)."""

    def pump(self, stream: UpstreamStream) -> None: ...
    def schedule_flush(self) -> None: ...


class StreamHost(Protocol):
    """What a stream and its slot ask of their connection's stream table: named
    here, so that this module needs none of the connection's."""

    @property
    def id(self) -> int: ...
    @property
    def outbound(self) -> BodyPump: ...
    @property
    def header_list_limit(self) -> int | None: ...
    def reset(self, stream: UpstreamStream, error_code: int) -> None: ...
    def reset_by_peer(self, stream: UpstreamStream, error_code: int) -> None: ...
    def forget(self, stream: UpstreamStream) -> None: ...
    def open_stream(
        self, headers: list[Header], sink: StreamSink, end_stream: bool
    ) -> UpstreamStream: ...
    def unreserve(self, freed: bool) -> None: ...


class StreamState(enum.Enum):
    SENDING = "sending"  # the request body may still grow
    ENDING = "ending"  # the body is complete; its last bytes wait for the peer's windows
    SENT = "sent"  # END_STREAM sent: only the response is to come
    CLOSED = "closed"  # over, in whatever way; the slot is free


# A module name for the test made on every DATA frame (ack): an enum member's load
# runs the enum metaclass's __getattr__ hook (110 ns on 3.11, 15 here).
_CLOSED = StreamState.CLOSED


class UpstreamStream:
    """One request/response on a connection, as seen from the HTTP/2 side."""

    __slots__ = (
        "_engine",
        "_outq",
        "conn",
        "extra",
        "pending_bytes",
        "sink",
        "state",
        "stream_id",
        "unacked",
    )

    def __init__(
        self,
        conn: StreamHost,
        engine: H2Engine,
        stream_id: int,
        sink: StreamSink,
        ended: bool = False,
    ) -> None:
        """``ended``: the HEADERS that opened it ended the request (no body)."""
        self.conn = conn
        self._engine = engine
        self.stream_id = stream_id
        self.sink = sink
        self.state = StreamState.SENT if ended else StreamState.SENDING
        # Made with the first body chunk: most requests have none, and a deque
        # costs 600 bytes.
        self._outq: deque[memoryview] | None = None
        self.pending_bytes = 0  # request body queued here, waiting on the peer's windows
        self.unacked = 0  # response bytes delivered but not yet returned as window credit
        self.extra = 0  # receive window past the announced one, from the window budget

    # ---------------------------------------------------------- the exchange's

    @property
    def closed(self) -> bool:
        return self.state is StreamState.CLOSED

    @property
    def backlogged(self) -> bool:
        """More request body waits here than is worth reading ahead: the client
        should not be read until ``on_send_ready``."""
        return send_backlog_full(self.pending_bytes)

    def send(self, data: bytes) -> None:
        """Queue request body bytes; they leave as the peer's windows allow."""
        if self.state is not StreamState.SENDING or not data:
            return
        if self._outq is None:
            self._outq = deque()
        self._outq.append(memoryview(data))
        self.pending_bytes += len(data)
        self.conn.outbound.pump(self)

    def end(self) -> None:
        """The request body is complete (END_STREAM after the queued bytes)."""
        if self.state is not StreamState.SENDING:
            return
        self.state = StreamState.ENDING
        self.conn.outbound.pump(self)

    def ack(self, nbytes: int) -> None:
        """Give ``nbytes`` of response data back to the peer as window credit."""
        if nbytes <= 0 or self.state is _CLOSED:
            return
        self.unacked -= nbytes
        if self._engine.give_credit(self.stream_id, nbytes):
            self.conn.outbound.schedule_flush()  # a WINDOW_UPDATE is due

    def widen(self, increment: int) -> None:
        """Grow the receive window by ``increment`` (taken from the window budget,
        which :meth:`close`'s caller gives ``extra`` back to)."""
        self.extra += increment
        self._engine.widen(self.stream_id, increment)

    def ack_held(self) -> None:
        """Give back all the credit of response data delivered so far."""
        self.ack(self.unacked)

    def cancel(self, error_code: int = ErrorCodes.CANCEL) -> None:
        """Abandon the stream (the client went away): RST_STREAM upstream."""
        if self.state is not StreamState.CLOSED:
            self.conn.reset(self, error_code)

    def reject_response(self) -> None:
        """The response head broke HTTP's rules: RST_STREAM with PROTOCOL_ERROR
        (RFC 9113 section 8.1.1)."""
        self.cancel(ErrorCodes.PROTOCOL_ERROR)

    # -------------------------------------------------------- the connection's
    #
    # What the peer sent on this stream, or what became of its connection, told by
    # the connection; the stream says what it means to its sink (the only caller
    # of the sink), and asks the connection to end it where it ends.

    def got_informational(self, headers: list[Header]) -> None:
        """An interim (1xx) response head, ahead of the final one."""
        self.sink.on_informational(headers)

    def got_response(self, headers: list[Header], end_stream: bool) -> None:
        self.sink.on_response(headers, end_stream)

    def got_data(self, data: bytes, flow_controlled_length: int) -> None:
        self.unacked += flow_controlled_length
        self.sink.on_data(data, flow_controlled_length)

    def got_end(self) -> None:
        """The response is complete."""
        sink = self.sink
        if self.state is not StreamState.SENT:
            # A complete response before the whole request body (RFC 9113 8.1):
            # stop sending the rest; the response stands.
            self.conn.reset(self, ErrorCodes.NO_ERROR)
        else:
            self.conn.forget(self)
        sink.on_end()

    def got_reset(self, code: int) -> None:
        """The peer reset the stream: refused unprocessed (safe to replay), or not."""
        self.conn.reset_by_peer(self, code)
        if code == ErrorCodes.REFUSED_STREAM:
            error = UpstreamError(
                errors.CONNECTION_TERMINATED,
                "stream refused by upstream",
                retryable=True,
                reset_code=code,
            )
        else:
            name = code.name if isinstance(code, ErrorCodes) else str(code)
            error = UpstreamError(
                errors.HTTP_PROTOCOL_ERROR, f"stream reset by upstream ({name})", reset_code=code
            )
        self.sink.on_error(error)

    def got_fault(self, error: str, detail: str) -> None:
        """The response was malformed; h2 has reset the stream. Neighbours go on."""
        self.conn.forget(self)
        self.sink.on_error(UpstreamError(error, detail))

    def got_error(self, error: UpstreamError) -> None:
        """The stream failed for a reason of its connection's (which has forgotten
        or reset it already): a GOAWAY, the connection's end, a bug of ours."""
        self.sink.on_error(error)

    def got_send_ready(self) -> None:
        """Its queued body fell below SEND_LOW_WATER: the client may be read again."""
        self.sink.on_send_ready()

    @property
    def has_body_queued(self) -> bool:
        return bool(self._outq)

    def frame_body(self, budget: int) -> tuple[int, bool, bool]:
        """Turn queued body into DATA frames as far as the peer's windows and
        ``budget`` allow (a frame may pass ``budget`` by less than one frame), and
        END_STREAM once the body is complete and sent. Returns the bytes framed,
        whether ``budget`` is what stopped it, and whether the queue just fell
        below SEND_LOW_WATER (the caller then tells the sink, ``on_send_ready``,
        once its own bookkeeping is done)."""
        engine = self._engine
        queue = self._outq
        was_high = self.pending_bytes >= SEND_LOW_WATER
        left = budget
        stopped_by_budget = False
        try:
            while queue:
                if left <= 0:
                    stopped_by_budget = True
                    break
                window = engine.send_window(self.stream_id)
                if window <= 0:
                    break
                chunk = queue[0]
                size = min(len(chunk), window, engine.max_frame_size)
                if size == len(chunk):
                    queue.popleft()
                else:
                    queue[0] = chunk[size:]
                    chunk = chunk[:size]
                self.pending_bytes -= size
                left -= size
                last = self.state is StreamState.ENDING and not queue
                engine.send_data(self.stream_id, chunk, last)
                if last:
                    self.state = StreamState.SENT
            if self.state is StreamState.ENDING and not queue:
                engine.end_stream(self.stream_id)
                self.state = StreamState.SENT
        except h2.exceptions.StreamClosedError:
            self.drop_body()
        return budget - left, stopped_by_budget, was_high and self.pending_bytes < SEND_LOW_WATER

    def drop_body(self) -> None:
        """Forget the queued body: the peer will not take it."""
        self._outq = None
        self.pending_bytes = 0

    def close(self) -> int:
        """The stream is over: returns the credit it still held, to give back."""
        self.state = StreamState.CLOSED
        self.drop_body()
        credit, self.unacked = self.unacked, 0
        return credit

    def __repr__(self) -> str:
        return f"<stream {self.conn.id}/{self.stream_id} {self.state.value}>"


class SlotLost(UpstreamError):
    """The connection stopped taking streams between the reservation and its use:
    nothing was sent, so this is no attempt, only a reason to ask again."""


class StreamSlot:
    """One stream slot reserved on a connection: opened or released, exactly once."""

    __slots__ = ("_spent", "conn")

    def __init__(self, conn: StreamHost) -> None:
        self.conn = conn
        self._spent = False

    @property
    def header_list_limit(self) -> int | None:
        """The largest request header list its connection's peer takes (None: no limit)."""
        return self.conn.header_list_limit

    def open(self, headers: list[Header], sink: StreamSink, *, end_stream: bool) -> UpstreamStream:
        """Send HEADERS on this slot. Raises :class:`SlotLost` if the connection
        stopped taking streams since the slot was reserved."""
        if self._spent:
            raise RuntimeError("stream slot used twice")
        self._spent = True
        stream = None
        try:
            stream = self.conn.open_stream(headers, sink, end_stream)
        finally:
            self.conn.unreserve(freed=stream is None)
        return stream

    def release(self) -> None:
        """Give the slot back unused (the request went away meanwhile)."""
        if not self._spent:
            self._spent = True
            self.conn.unreserve(freed=True)

    def __repr__(self) -> str:
        return f"<slot on conn {self.conn.id}{' spent' if self._spent else ''}>"
