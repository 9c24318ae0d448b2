"""One request/response on an upstream connection, the slot it is opened on, and
the connection's table of both.

A stream owns its request body's queue, its flow-control credit (response bytes
delivered but not yet given back), both send marks and its one state. It frames
its own body as far as the peer's windows allow; the connection decides when
(:mod:`h2ping.http2.outbound`). Its :class:`StreamTable` alone adds and removes
streams, and hands out the slots they are opened on: the streams, their slots and
the table talk to one another here, and to the connection not at all. The table
reads the connection's state from its :class:`~h2ping.http2.lifetime.Lifetime`
and reports two things up, each to one listener: a slot came free (the pool's
news) and a draining connection has nothing left (the connection then closes).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import h2.exceptions
from h2.errors import ErrorCodes

from .. import errors
from ..errors import UpstreamError
from ..fields import Header
from .lifetime import ConnState, Lifetime

if TYPE_CHECKING:
    from .engine import H2Engine
    from .observer import ConnectionObserver
    from .windows import ReceiveWindow

#: Streams a connection takes before the peer's SETTINGS say how many: the first
#: request goes right behind the preface (RFC 9113 section 3.4), any other waits
#: the round trip for the peer's limit, which no server sets below one.
PROVISIONAL_STREAMS = 1
#: The largest request header list (RFC 9113 section 6.5.2 sizes: name, value and
#: 32 per field) sent before the peer's SETTINGS say its limit: as much as the
#: smallest limit servers commonly advertise (16 KiB). A larger head waits the
#: round trip for the peer's own figure.
PROVISIONAL_HEADER_LIST = 16 * 1024
#: Stop opening streams on a connection close to the 31-bit stream id limit.
LAST_USABLE_STREAM_ID = 2**31 - 1 - 2
#: The most streams a connection carries at once, whatever the peer allows.
MOST_STREAMS = 2**31

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
    def on_data(self, data: bytes, flow_controlled_length: int) -> int:
        """``data`` of the response; returns the credit to give back at once: the
        flow-controlled bytes its client took now (``flow_controlled_length``),
        or 0 while the client reads nothing (it is given later, ``ack_held``)."""
        ...

    def on_end(self) -> None: ...
    def on_error(self, error: UpstreamError) -> None: ...
    def on_send_ready(self) -> None: ...


class BodyPump(Protocol):
    """What the streams tell their connection's writing
    (:class:`~h2ping.http2.outbound.OutboundPump`, which imports this module):
    a stream frames its own body within its ``budget`` and says what came of it
    (``framed``); the pump's own turns frame a waiting stream's body the same way."""

    budget: int

    def framed(
        self, stream: UpstreamStream, nbytes: int, spent: bool, queued: bool, ready: bool
    ) -> None: ...
    def schedule_flush(self) -> None: ...
    def flush_first(self) -> None: ...
    def forget(self, stream: UpstreamStream) -> None: ...
    def give_credit(self, stream_id: int, nbytes: int) -> None: ...


class StreamState(enum.Enum):
    SENDING = "sending"  # the request body may still grow
    ENDING = "ending"  # the body is complete; its last bytes wait for the peer's windows
    SENT = "sent"  # END_STREAM sent: only the response is to come
    CLOSED = "closed"  # over, in whatever way; the slot is free


# Module names for the states tested on every request and DATA frame: an enum
# member's load runs the enum metaclass's __getattr__ hook (110 ns on 3.11, 15
# here). Writes name the enum: the ownership rule (tests/unit/test_layers.py) reads them.
_SENDING, _ENDING, _SENT, _CLOSED = (
    StreamState.SENDING,
    StreamState.ENDING,
    StreamState.SENT,
    StreamState.CLOSED,
)
_CONNECTING, _OPEN, _DRAINING, _CONN_CLOSED = (
    ConnState.CONNECTING,
    ConnState.OPEN,
    ConnState.DRAINING,
    ConnState.CLOSED,
)


class UpstreamStream:
    """One request/response on a connection, as seen from the HTTP/2 side."""

    __slots__ = (
        "_engine",
        "_outq",
        "extra",
        "pending_bytes",
        "sink",
        "state",
        "stream_id",
        "table",
        "unacked",
    )

    def __init__(
        self,
        table: StreamTable,
        engine: H2Engine,
        stream_id: int,
        sink: StreamSink,
        ended: bool = False,
    ) -> None:
        """``ended``: the HEADERS that opened it ended the request (no body)."""
        self.table = table
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
        return self.state is _CLOSED

    @property
    def backlogged(self) -> bool:
        """More request body waits here than is worth reading ahead: the client
        should not be read until ``on_send_ready``."""
        return send_backlog_full(self.pending_bytes)

    def send(self, data: bytes) -> None:
        """Queue request body bytes; they leave as the peer's windows allow."""
        if self.state is not _SENDING or not data:
            return
        if self._outq is None:
            self._outq = deque()
        self._outq.append(memoryview(data))
        self.pending_bytes += len(data)
        self._pump()

    def end(self) -> None:
        """The request body is complete (END_STREAM after the queued bytes)."""
        if self.state is not _SENDING:
            return
        self.state = StreamState.ENDING
        self._pump()

    def _pump(self) -> None:
        """Frame what the body has for the peer now, within the write's share
        (the pump's ``budget``), and tell the pump what came of it. The sink,
        which is amid its ``send`` or ``end``, hears that it may send again
        (``on_send_ready``) from the pump's next turn, not from within."""
        outbound = self.table.outbound
        framed, spent, ready, queued = self.frame_body(outbound.budget)
        outbound.framed(self, framed, spent, queued, ready)

    def ack(self, nbytes: int) -> None:
        """Give ``nbytes`` of response data back to the peer as window credit,
        later than it was delivered (its client drained): through the writing,
        which has the engine queue the WINDOW_UPDATE and writes it."""
        if nbytes <= 0 or self.state is _CLOSED:
            return
        self.unacked -= nbytes
        self.table.outbound.give_credit(self.stream_id, nbytes)

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
        if self.state is not _CLOSED:
            self.table.reset(self, error_code)

    def reject_response(self) -> None:
        """The response head broke HTTP's rules: RST_STREAM with PROTOCOL_ERROR
        (RFC 9113 section 8.1.1)."""
        self.cancel(ErrorCodes.PROTOCOL_ERROR)

    # -------------------------------------------------------- the connection's
    #
    # What the peer sent on this stream, or what became of its connection, told by
    # the engine or the table; the stream says what it means to its sink (the only
    # caller of the sink), and asks its table to end it where it ends.

    def got_informational(self, headers: list[Header]) -> None:
        """An interim (1xx) response head, ahead of the final one."""
        self.sink.on_informational(headers)

    def got_response(self, headers: list[Header], end_stream: bool) -> None:
        self.sink.on_response(headers, end_stream)

    def got_data(self, data: bytes, flow_controlled_length: int) -> int:
        """Response data; returns the credit the engine gives back now (what the
        sink's client took at once). The rest is held here until ``ack``."""
        taken = self.sink.on_data(data, flow_controlled_length)
        if self.state is _CLOSED:
            # Ended meanwhile (its client went away): its end gave back what it
            # held; this data's credit goes back too, by the engine.
            return flow_controlled_length
        if taken != flow_controlled_length:
            self.unacked += flow_controlled_length - taken
        return taken

    def got_end(self) -> None:
        """The response is complete."""
        sink = self.sink
        try:
            sink.on_end()  # the client's answer first: the table's bookkeeping is off its way
        finally:
            if self.state is not _SENT:
                # A complete response before the whole request body (RFC 9113 8.1):
                # stop sending the rest; the response stands.
                self.table.reset(self, ErrorCodes.NO_ERROR)
            else:
                self.table.forget(self)

    def got_reset(self, code: int) -> None:
        """The peer reset the stream: refused unprocessed (safe to replay), or not."""
        self.table.reset_by_peer(self, code)
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
        self.table.forget(self)
        self.sink.on_error(UpstreamError(error, detail))

    def got_error(self, error: UpstreamError) -> None:
        """The stream failed for a reason of its connection's (which has forgotten
        or reset it already): a GOAWAY, the connection's end, a bug of ours."""
        self.sink.on_error(error)

    def got_send_ready(self) -> None:
        """Its queued body fell below SEND_LOW_WATER: the client may be read again."""
        self.sink.on_send_ready()

    def frame_body(self, budget: int) -> tuple[int, bool, bool, bool]:
        """Turn queued body into DATA frames as far as the peer's windows and
        ``budget`` allow (a frame may pass ``budget`` by less than one frame), and
        END_STREAM once the body is complete and sent. Returns the bytes framed,
        whether ``budget`` is what stopped it, whether the queue just fell below
        SEND_LOW_WATER (the caller then tells the sink, ``on_send_ready``, once
        the pump's bookkeeping is done), and whether body still waits."""
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
                last = self.state is _ENDING and not queue
                engine.send_data(self.stream_id, chunk, last)
                if last:
                    self.state = StreamState.SENT
            if self.state is _ENDING and not queue:
                engine.end_stream(self.stream_id)
                self.state = StreamState.SENT
        except h2.exceptions.StreamClosedError:
            self.drop_body()
        ready = was_high and self.pending_bytes < SEND_LOW_WATER
        return budget - left, stopped_by_budget, ready, bool(self._outq)

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
        return f"<stream {self.table.id}/{self.stream_id} {self.state.value}>"


class SlotLost(UpstreamError):
    """The connection stopped taking streams between the reservation and its use:
    nothing was sent, so this is no attempt, only a reason to ask again."""


class StreamSlot:
    """One stream slot reserved on a connection: opened or released, exactly once."""

    __slots__ = ("_spent", "conn_id", "table")

    def __init__(self, table: StreamTable) -> None:
        self.table = table
        self.conn_id = table.id  # the number of its connection, for the request's log
        self._spent = False

    @property
    def header_list_limit(self) -> int | None:
        """The largest request header list its connection's peer takes (None: no limit)."""
        return self.table.header_list_limit

    def open(self, headers: list[Header], sink: StreamSink, *, end_stream: bool) -> UpstreamStream:
        """Send HEADERS on this slot. Raises :class:`SlotLost` if the connection
        stopped taking streams since the slot was reserved."""
        if self._spent:
            raise RuntimeError("stream slot used twice")
        self._spent = True
        stream = None
        try:
            stream = self.table.open_stream(headers, sink, end_stream)
        finally:
            self.table.unreserve(freed=stream is None)
        return stream

    def release(self) -> None:
        """Give the slot back unused (the request went away meanwhile)."""
        if not self._spent:
            self._spent = True
            self.table.unreserve(freed=True)

    def __repr__(self) -> str:
        return f"<slot on conn {self.table.id}{' spent' if self._spent else ''}>"


def _unheard(state: ConnState | None = None) -> None:
    pass


class StreamTable:
    """A connection's stream slots and its streams by id: what its streams and
    their slots talk to, what the pool asks for slots (``conn.table``), and the
    only writer of the stream table and of the counts that the pool's choosing
    rests on. Other modules find a stream through :meth:`stream`, :meth:`above`
    and :meth:`count`, never through ``streams``.

    How many streams may be taken follows the connection's state (its ``life``),
    which the table reads and never moves but for one case (the last stream id
    used drains it): the peer's limit under our own cap once open, one right
    behind the preface before (:data:`PROVISIONAL_STREAMS`), none once it stopped
    taking streams. A slot that comes free is news for the pool (``on_change``)
    while the connection is open; once a draining connection has no stream or
    promised slot left, the table says so (``on_drained``), once."""

    def __init__(
        self,
        conn_id: int,
        life: Lifetime,
        engine: H2Engine,
        outbound: BodyPump,
        window: ReceiveWindow,
        observer: ConnectionObserver,
        on_change: Callable[[ConnState], None],
        on_drained: Callable[[], None],
        cap: int,
    ) -> None:
        """``window``: the connection's receive window, whose raises each new
        stream takes as far as its budget allows; ``cap``: -max-streams-per-conn
        (0: none). The engine finds who hears a stream through the table's lookup
        (``streams.get``): the table is the only holder of its streams."""
        self.id = conn_id
        self.outbound = outbound
        self.streams: dict[int, UpstreamStream] = {}
        self.reserved = 0  # slots promised by the pool but not yet opened
        self.max_streams = 0  # 0 until the peer's first SETTINGS arrives
        self.cap = cap or MOST_STREAMS
        self.writes_blocked = False  # no stream while the peer reads none of our writes
        self._life = life
        self._engine = engine
        self._window = window
        self._observer = observer
        self._on_change = on_change
        self._on_drained = on_drained
        self._preface_out = False
        engine.heard_through(self.streams.get)

    @property
    def free_slots(self) -> int:
        state = self._life.state
        if self.writes_blocked:
            return 0
        if state is _OPEN:
            limit = min(self.max_streams, self.cap)
        elif state is _CONNECTING and self._preface_out:
            limit = PROVISIONAL_STREAMS
        else:
            return 0
        return limit - len(self.streams) - self.reserved

    @property
    def busy(self) -> bool:
        """Carrying a stream, or promised one."""
        return bool(self.streams or self.reserved)

    @property
    def header_list_limit(self) -> int | None:
        """The largest request header list the peer takes now (None: no limit):
        its SETTINGS_MAX_HEADER_LIST_SIZE, or PROVISIONAL_HEADER_LIST before its
        first SETTINGS. A head over it makes servers end the whole connection."""
        if self._life.state is _CONNECTING:
            return PROVISIONAL_HEADER_LIST
        return self._engine.peer_header_list_limit

    def count(self) -> int:
        return len(self.streams)

    def stream(self, stream_id: int) -> UpstreamStream | None:
        """The open stream of that id, if there is one."""
        return self.streams.get(stream_id)

    def above(self, last_stream_id: int) -> list[UpstreamStream]:
        """The open streams above ``last_stream_id`` (a GOAWAY's), lowest id first."""
        return [s for sid, s in sorted(self.streams.items()) if sid > last_stream_id]

    def preface_sent(self) -> None:
        """One stream may now go right behind the preface, before the peer's SETTINGS."""
        self._preface_out = True

    def peer_allows(self, max_concurrent_streams: int) -> None:
        """The peer's SETTINGS_MAX_CONCURRENT_STREAMS, as it stands now."""
        self.max_streams = min(max_concurrent_streams, MOST_STREAMS)

    # try_reserve() hands a slot out, and StreamSlot.open() or .release() gives it
    # back exactly once (unreserve()).

    def try_reserve(self) -> StreamSlot | None:
        """One stream slot for the caller, if the connection takes streams and has room."""
        if self.free_slots <= 0:
            return None
        self.reserved += 1
        return StreamSlot(self)

    def open_stream(
        self, headers: list[Header], sink: StreamSink, end_stream: bool
    ) -> UpstreamStream:
        """HEADERS for a new stream (by its :class:`StreamSlot` only)."""
        life = self._life
        state = life.state
        if state is not _OPEN and state is not _CONNECTING:
            if (failure := life.setup_failure) is not None:
                # Its only slot went to the request first in line, which now fails
                # as the dial did (asking again would dial again, and again).
                raise UpstreamError(failure.error, failure.detail)
            raise SlotLost(
                errors.CONNECTION_TERMINATED,
                f"connection {self.id} stopped taking streams ({life.reason})",
                retryable=True,
            )
        if state is _OPEN and len(self.streams) >= self.max_streams:
            # Reserved before the peer's SETTINGS, or before they lowered its limit:
            # h2 would refuse to send it. Nothing was sent, so the request asks again.
            raise SlotLost(
                errors.CONNECTION_TERMINATED,
                f"connection {self.id} allows {self.max_streams} streams now",
                retryable=True,
            )
        engine = self._engine
        stream_id = engine.next_stream_id()
        stream = UpstreamStream(self, engine, stream_id, sink, ended=end_stream)
        engine.send_request(stream_id, headers, end_stream)
        window = self._window
        if (wanted := window.extra) and (extra := window.budget.take(wanted)):
            stream.widen(extra)  # the window's raises so far, as the budget allows
        self.streams[stream_id] = stream
        if end_stream:  # the request is whole: nothing of it waits for the turn's end
            self.outbound.flush_first()
        else:
            self.outbound.schedule_flush()
        if stream_id >= LAST_USABLE_STREAM_ID and life.drain("stream ids exhausted"):
            self._on_change(life.state)  # it takes no new streams; this one goes on
        return stream

    def writes_paused(self) -> None:
        """The peer reads none of what the connection writes: no slot for now."""
        self.writes_blocked = True

    def writes_resumed(self) -> None:
        """The peer reads what the connection writes again: its slots are news."""
        self.writes_blocked = False
        if self._life.state is _OPEN:
            self._on_change(_OPEN)

    def unreserve(self, freed: bool) -> None:
        """A reservation ended: used for a stream, or (``freed``) given back or
        failed to open."""
        self.reserved -= 1
        state = self._life.state
        if state is _DRAINING:
            if not self.busy:
                self._on_drained()
        elif freed and state is _OPEN:
            self._on_change(state)

    def reset(self, stream: UpstreamStream, error_code: int) -> None:
        """End ``stream`` with RST_STREAM ``error_code``; its slot is free."""
        self._engine.reset_stream(stream.stream_id, error_code)
        self._observer.stream_reset(stream.stream_id, error_code, by_peer=False)
        self.forget(stream)
        self.outbound.schedule_flush()

    def reset_by_peer(self, stream: UpstreamStream, error_code: int) -> None:
        """The peer ended ``stream`` with RST_STREAM ``error_code``; its slot is free."""
        self._observer.stream_reset(stream.stream_id, error_code, by_peer=True)
        self.forget(stream)

    def refuse_above(self, last_stream_id: int, error: Callable[[bool], UpstreamError]) -> None:
        """A GOAWAY: the streams above ``last_stream_id`` were never processed.
        Each is reset (CANCEL) and fails with ``error(first)``, ``first`` for the
        lowest of them; the streams at or below it go on."""
        unprocessed = self.above(last_stream_id)
        for stream in unprocessed:
            self.reset(stream, ErrorCodes.CANCEL)
            stream.got_error(error(stream is unprocessed[0]))

    def fail_all(self, error: UpstreamError) -> None:
        """The connection ended: every stream is forgotten, then fails with ``error``
        (none is told before all are gone: their sinks may replay at once)."""
        streams = list(self.streams.values())
        for stream in streams:
            self.forget(stream)
        for stream in streams:
            stream.got_error(error)

    def forget(self, stream: UpstreamStream) -> None:
        """The stream is over: free its slot and the window credit it still holds."""
        if stream.closed:
            return
        credit = stream.close()
        if stream.extra:
            self._window.budget.give(stream.extra)
        self.streams.pop(stream.stream_id, None)  # the engine's lookup too: nobody hears it
        self.outbound.forget(stream)
        state = self._life.state
        if state is _CONN_CLOSED:
            return  # nothing to give back or to tell: the end is failing every stream
        if credit:
            self.outbound.give_credit(stream.stream_id, credit)
        if not self.streams:
            self._life.went_idle()
        if state is _OPEN:
            self._on_change(state)  # a slot is free
        elif state is _DRAINING and not self.busy:
            self._on_drained()

    def widen(self, increment: int) -> None:
        """Each stream's window grew by ``increment``: tell the peer for every open
        stream, as far as the window budget allows (a new one hears of it right
        after its HEADERS, in open_stream)."""
        if self._life.state is _CONN_CLOSED:
            return
        budget = self._window.budget
        for stream in self.streams.values():
            if extra := budget.take(increment):
                stream.widen(extra)
        self.outbound.schedule_flush()

    def let_go(self) -> None:
        """The connection ended, every stream with it: let go of its listeners,
        which lead back to it (a cycle only the cyclic collector would undo)."""
        self._on_change = self._on_drained = _unheard

    def __repr__(self) -> str:
        return f"<streams of conn {self.id}: {len(self.streams)} open, {self.reserved} promised>"
