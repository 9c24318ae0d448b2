"""One HTTP/2 connection to the upstream: its life, its stream slots, its streams.

What goes where:

- :class:`UpstreamConnection` is the ``asyncio`` protocol, its state
  (:class:`ConnState`, changed only through the table of moves ``_MOVES``) and its
  one way to end (``_end``), whatever ends it.
- :class:`StreamTable` is its stream slots and its streams by id: what the pool
  reserves, what the streams and their slots talk to, how many the state allows.
- What the peer says to the connection as a whole (SETTINGS, GOAWAY, PING ACKs,
  WINDOW_UPDATEs) is :mod:`h2ping.http2.peerevents`' to handle; its clocks (PINGs,
  age, idle) are :mod:`h2ping.http2.clocks`'.

The connection reads whether or not a request waits (push, not pull: a PING, a
GOAWAY or a dead peer is seen on an idle connection too), pausing only while what
it read is still being handled, one share a loop turn (:mod:`h2ping.http2.inbound`).
What ``data_received`` reads goes to the connection's :class:`~.engine.H2Engine`,
which tells the stream each frame concerns, or the handler of the peer's events.
Nothing here knows about HTTP/1.1; a stream (:mod:`h2ping.http2.streams`) reports to
a :class:`StreamSink`, which the exchange implements. What is written and when is
:mod:`h2ping.http2.outbound`'s business. Dialling (TCP, TLS, ALPN) is
:mod:`h2ping.http2.dial`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable
from typing import cast

from h2.errors import ErrorCodes

from .. import errors
from ..config import Config
from ..errors import UpstreamError
from ..fields import Header
from ..stats import Stats
from .clocks import ConnectionClocks
from .engine import ConnectionFault, H2Engine, Heard
from .inbound import INBOUND_BATCH, READ_SIZE, InboundTurns
from .observer import UNOBSERVED, ConnectionObserver
from .outbound import OutboundPump
from .peerevents import PeerEventHandler
from .pingbackoff import PingBackoff, new_connection_pings
from .streams import SlotLost, StreamSink, StreamSlot, UpstreamStream
from .tunnel import proxy_of
from .windows import ReceiveWindow, WindowBudget, connection_window

log = logging.getLogger("h2ping.upstream")

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


class ConnState(enum.Enum):
    """An upstream connection's life, one state at a time."""

    CONNECTING = "connecting"  # dialled; the peer's first SETTINGS not yet here
    # (once the preface is out it takes PROVISIONAL_STREAMS, for the dial's first
    # waiter only: the pool lists it from OPEN on)
    OPEN = "open"  # takes new streams
    DRAINING = "draining"  # GOAWAY received or retired: finishes what it has
    CLOSED = "closed"  # over: every stream ended, the transport closed

    # Singletons: hashed by identity (Enum's own hash runs Python code).
    __hash__ = object.__hash__


# A module name for the tests made on every read: an enum member's load runs the
# enum metaclass's __getattr__ hook (110 ns on 3.11, 15 here).
_CLOSED = ConnState.CLOSED


_C = ConnState

#: Every move of a connection's life: ``UpstreamConnection._enter`` makes these and
#: no other. Any state but CLOSED may end (a dead peer, a protocol error, the
#: proxy's shutdown); only an open connection drains.
_MOVES: dict[ConnState, frozenset[ConnState]] = {
    # OPEN at the peer's first SETTINGS
    _C.CONNECTING: frozenset({_C.OPEN, _C.CLOSED}),
    # DRAINING at a GOAWAY, a retirement for age, the last stream id used
    _C.OPEN: frozenset({_C.DRAINING, _C.CLOSED}),
    # CLOSED once the last stream and reservation are gone
    _C.DRAINING: frozenset({_C.CLOSED}),
    _C.CLOSED: frozenset(),
}


def _unheard(conn: UpstreamConnection) -> None:
    pass


def _let_go(conn: UpstreamConnection) -> None:
    """The parts of an ended connection let go of what leads back to it. Its end
    (``UpstreamConnection._end``) calls this once what runs then has returned (the
    engine may be amid a batch of frames). The connection is then freed by its
    last user, not by a full pass of the cyclic collector, which comes seldom
    (``process/heap.py``); what it still answers (its state, what it heard) stays."""
    for part in (conn.clocks, conn.peer, conn._engine, conn._inbound, conn.table):
        part.let_go()


class StreamTable:
    """A connection's stream slots and its streams by id: what its streams and
    their slots talk to (:class:`~.streams.StreamHost`), what the pool asks for
    slots (``conn.table``), and the only writer of the stream table and of the
    counts that the pool's choosing rests on. Other modules find a stream through
    :meth:`stream`, :meth:`above` and :meth:`count`, never through ``streams``.

    How many streams may be taken follows the connection's state, which the table
    reads and never writes: the peer's limit under our own cap once open, one right
    behind the preface before (:data:`PROVISIONAL_STREAMS`), none once it stopped
    taking streams. A slot that comes free is news for the pool (``on_change``)
    while the connection is open, and may close a draining one."""

    def __init__(
        self,
        conn: UpstreamConnection,
        streams: dict[int, UpstreamStream],
        engine: H2Engine,
        on_change: Callable[[UpstreamConnection], None],
        cap: int,
    ) -> None:
        """``streams``: the table, which the engine reads to deliver each stream's
        frames; ``cap``: -max-streams-per-conn (0: none)."""
        self.id = conn.id
        self.outbound = conn.outbound
        self.streams = streams
        self.reserved = 0  # slots promised by the pool but not yet opened
        self.max_streams = 0  # 0 until the peer's first SETTINGS arrives
        self.cap = cap or MOST_STREAMS
        self._conn: UpstreamConnection | None = conn  # None once it ended (close)
        self._ended: tuple[UpstreamError | None, str] = (None, "")  # why, once it ended
        self._engine = engine
        self._on_change = on_change
        self._preface_out = False
        self.writes_blocked = False  # no stream while the peer reads none of our writes

    @property
    def free_slots(self) -> int:
        if self._conn is None:
            return 0
        state = self._conn.state
        if self.writes_blocked:
            return 0
        if state is ConnState.OPEN:
            limit = min(self.max_streams, self.cap)
        elif state is ConnState.CONNECTING and self._preface_out:
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
        if self._conn is not None and self._conn.state is ConnState.CONNECTING:
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
        conn = self._conn
        if conn is None or (
            conn.state is not ConnState.OPEN and conn.state is not ConnState.CONNECTING
        ):
            failure, reason = (
                self._ended if conn is None else (conn.setup_failure, conn.close_reason)
            )
            if failure is not None:
                # Its only slot went to the request first in line, which now fails
                # as the dial did (asking again would dial again, and again).
                raise UpstreamError(failure.error, failure.detail)
            raise SlotLost(
                errors.CONNECTION_TERMINATED,
                f"connection {self.id} stopped taking streams ({reason})",
                retryable=True,
            )
        if conn.state is ConnState.OPEN and len(self.streams) >= self.max_streams:
            # Reserved before the peer's SETTINGS, or before they lowered its limit:
            # h2 would refuse to send it. Nothing was sent, so the request asks again.
            raise SlotLost(
                errors.CONNECTION_TERMINATED,
                f"connection {self.id} allows {self.max_streams} streams now",
                retryable=True,
            )
        engine = self._engine
        stream_id = engine.next_stream_id()
        engine.send_request(stream_id, headers, end_stream)
        stream = UpstreamStream(self, engine, stream_id, sink, ended=end_stream)
        if (wanted := conn.window.extra) and (extra := conn.window.budget.take(wanted)):
            stream.widen(extra)  # the window's raises so far, as the budget allows
        self.streams[stream_id] = stream
        self.outbound.schedule_flush()
        if stream_id >= LAST_USABLE_STREAM_ID:
            conn.retire("stream ids exhausted")
        return stream

    def writes_paused(self) -> None:
        """The peer reads none of what the connection writes: no slot for now."""
        self.writes_blocked = True

    def writes_resumed(self) -> None:
        """The peer reads what the connection writes again: its slots are news."""
        self.writes_blocked = False
        if (conn := self._conn) is not None and conn.state is ConnState.OPEN:
            self._on_change(conn)

    def unreserve(self, freed: bool) -> None:
        """A reservation ended: used for a stream, or (``freed``) given back or
        failed to open."""
        self.reserved -= 1
        if (conn := self._conn) is None:
            return
        if conn.state is ConnState.DRAINING:
            self.close_if_drained()
        elif freed and conn.state is ConnState.OPEN:
            self._on_change(conn)

    def reset(self, stream: UpstreamStream, error_code: int) -> None:
        """End ``stream`` with RST_STREAM ``error_code``; its slot is free."""
        self._engine.reset_stream(stream.stream_id, error_code)
        if self._conn is not None:
            self._conn.observer.stream_reset(stream.stream_id, error_code, by_peer=False)
        self.forget(stream)
        self.outbound.schedule_flush()

    def reset_by_peer(self, stream: UpstreamStream, error_code: int) -> None:
        """The peer ended ``stream`` with RST_STREAM ``error_code``; its slot is free."""
        if self._conn is not None:
            self._conn.observer.stream_reset(stream.stream_id, error_code, by_peer=True)
        self.forget(stream)

    def forget(self, stream: UpstreamStream) -> None:
        """The stream is over: free its slot and the window credit it still holds."""
        if stream.closed:
            return
        credit = stream.close()
        conn = self._conn
        if stream.extra and conn is not None:
            conn.window.budget.give(stream.extra)
        self.streams.pop(stream.stream_id, None)
        self.outbound.forget(stream)
        if conn is None or conn.state is ConnState.CLOSED:
            return  # nothing to give back or to tell: the end is failing every stream
        if credit:
            self.outbound.give_credit(stream.stream_id, credit)
        if not self.streams:
            conn.lifetime.went_idle()
        if conn.state is ConnState.OPEN:
            self._on_change(conn)  # a slot is free
        else:
            self.close_if_drained()

    def close_if_drained(self) -> None:
        """Close a draining connection once no stream or promised slot is left."""
        conn = self._conn
        if conn is not None and conn.state is ConnState.DRAINING and not self.busy:
            conn.close(conn.close_reason)

    def widen(self, increment: int) -> None:
        """Each stream's window grew by ``increment``: tell the peer for every open
        stream, as far as the window budget allows (a new one hears of it right
        after its HEADERS, in open_stream)."""
        if self._conn is None:
            return
        budget = self._conn.window.budget
        for stream in self.streams.values():
            if extra := budget.take(increment):
                stream.widen(extra)
        self.outbound.schedule_flush()

    def let_go(self) -> None:
        """The connection ended, every stream with it: let go of it (a cycle only
        the cyclic collector would undo), keeping why, for a slot still held."""
        if (conn := self._conn) is not None:
            self._ended = (conn.setup_failure, conn.close_reason)
            self._conn = None
        self._on_change = _unheard

    def __repr__(self) -> str:
        return f"<streams of conn {self.id}: {len(self.streams)} open, {self.reserved} promised>"


class UpstreamConnection(asyncio.BufferedProtocol):
    """An HTTP/2 client connection driven by inbound bytes, never by waiting readers.

    A buffered protocol: the transport (or the TLS layer, :mod:`.tlslayer`) reads into one
    buffer of ours, where a plain protocol costs an allocation per read. Its state and its end
    are its own; its stream slots and streams are its ``table``'s, what the peer says to it its
    ``peer``'s to handle, its clocks (PINGs, age, idle, blocked writes) its ``clocks``'.
    Whoever watches it (``h2ping check``) is its ``observer``, told each moment of its life."""

    def __init__(
        self,
        config: Config,
        conn_id: int,
        on_change: Callable[[UpstreamConnection], None],
        stats: Stats,
        on_age: Callable[[UpstreamConnection], None] | None = None,
        ping_backoff: PingBackoff | None = None,
        window_budget: WindowBudget | None = None,
        observer: ConnectionObserver = UNOBSERVED,
    ) -> None:
        """``ping_backoff`` and ``window_budget``: shared by the connections to one upstream;
        ``observer`` hears of each moment of its life (:mod:`.observer`)."""
        self.upstream = config.upstream
        self.id = conn_id
        self.state = ConnState.CONNECTING
        self.close_reason = ""
        self.setup_failure: UpstreamError | None = None  # why it ended before its SETTINGS
        self._on_change = on_change
        self.observer = observer
        self._loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[None] = self._loop.create_future()
        self._transport: asyncio.Transport | None = None
        self._stats = stats
        self._read_buffer = memoryview(bytearray(READ_SIZE))
        self.ping_interval, measuring = new_connection_pings(config, ping_backoff)
        self.window = ReceiveWindow(config.max_receive_window, measuring, budget=window_budget)
        self.clocks = ConnectionClocks(self, config, self.ping_interval, stats, on_age)
        self.lifetime = self.clocks.lifetime
        self.peer = PeerEventHandler(self, self.clocks.liveness, stats, ping_backoff)
        streams: dict[int, UpstreamStream] = {}  # the table's; the engine reads it
        self._engine = H2Engine(self.peer, streams, config.max_response_header_bytes)
        self.outbound: OutboundPump = OutboundPump(self._loop, self._engine)
        cap = config.max_streams_per_conn
        self.table = StreamTable(self, streams, self._engine, on_change, cap)
        self._inbound = InboundTurns(
            self._loop, self._take_batch, self._backlog_ready, self._is_closed, self.table.count
        )

    @property
    def answered(self) -> int:
        """Response heads the peer sent: it is taking work."""
        return self._engine.responses

    @property
    def heard(self) -> Heard:
        """What the peer has said (its SETTINGS as sent, its first bytes...), for a report."""
        return self._engine.heard

    @property
    def age_limit(self) -> float:
        return self.lifetime.age_limit

    @property
    def goaway_last_stream_id(self) -> int | None:
        return self.peer.goaway_last_stream_id

    async def wait_ready(self) -> None:
        await self._ready

    def settings_received(self) -> None:
        """The peer's SETTINGS (told by ``peer``): the first opens the connection."""
        if self._enter(ConnState.OPEN):
            self._ready.set_result(None)
            self.clocks.start()
            self._stats.window_pinged(self.window.measuring)  # the preface's: HTTP/2 answered
        self.observer.settings_heard(self._engine.heard.settings or {})
        self._on_change(self)

    def ping(self, payload: bytes) -> None:
        """Send a PING now; its ACK comes to ``peer`` like any other."""
        self._engine.ping(payload)
        self.observer.ping_sent(payload)
        self.outbound.flush()

    def retire(self, reason: str) -> None:
        """Take no new streams; close cleanly (GOAWAY NO_ERROR) once the last ends."""
        self._drain(reason)
        self.table.close_if_drained()

    def close(self, reason: str) -> None:
        """Send GOAWAY(NO_ERROR) and close; streams still open fail."""
        error = UpstreamError(errors.CONNECTION_TERMINATED, f"connection closed: {reason}")
        self._end(reason, error, goaway=ErrorCodes.NO_ERROR)

    def abandon(self, error: UpstreamError) -> None:
        """The dial gave up on it (a timeout): close, and fail a stream sent
        behind the preface, or about to be, with the dial's own ``error``."""
        self._fail_ready(error)
        self._end(error.detail, error, goaway=ErrorCodes.NO_ERROR)

    def cut(self, reason: str, error: UpstreamError) -> None:
        """End at once, telling the peer nothing (it is dead); streams fail with ``error``."""
        self._end(reason, error)

    def _enter(self, state: ConnState) -> bool:
        """Move to ``state`` if the table of moves (``_MOVES``) allows it from here;
        every change of state goes through here. False if refused."""
        if state in _MOVES[self.state]:
            self.state = state
            return True
        return False

    def _drain(self, reason: str) -> None:
        if self._enter(ConnState.DRAINING):
            self.close_reason = reason
            self.lifetime.stop()  # it takes no new streams: neither clock matters now
            self._on_change(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self._inbound.attach(self._transport)
        self.outbound.attach(self._transport)
        self.clocks.writes.attach(self._transport, self._inbound, self.outbound)
        self.table.preface_sent()  # once flushed below
        self._engine.start(self.window.announced, connection_window(self.window.cap))
        if (payload := self.window.first_ping()) is not None:
            self._engine.ping(payload)
            self.observer.ping_sent(payload)
        self.outbound.flush()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(bytes(self._read_buffer[:nbytes]))

    def data_received(self, data: bytes) -> None:
        # Any inbound byte proves the peer alive (a PING ACK may wait behind megabytes of DATA).
        self.clocks.liveness.saw_bytes()
        if self.state is _CLOSED:
            return
        if (payload := self.window.received(len(data))) is not None:
            self.ping(payload)  # at once: it times the round trip
            self._stats.window_pinged()
        self._engine.feed(data)
        self._inbound.arrived()

    def connection_lost(self, exc: Exception | None) -> None:
        self.observer.socket_lost(exc, by_peer=self.state is not ConnState.CLOSED)
        # What arrived before the end is handled first: a response complete
        # before the close is a response.
        self._inbound.stop()
        while self.state is not ConnState.CLOSED and self._engine.ready:
            self._take_batch()
        if self.state is ConnState.CLOSED:
            return
        reason = f"connection lost: {exc}" if exc else "connection closed by upstream"
        if self.peer.goaway_error:
            reason += f" after GOAWAY {self.peer.goaway_error}"
        if self.state is ConnState.CONNECTING:  # a stream sent behind the preface fails so too
            reason += " before HTTP/2 SETTINGS"
        error = UpstreamError(errors.CONNECTION_TERMINATED, reason, next_hop=proxy_of(exc))
        self._fail_ready(error)
        self._end(reason, error)

    def pause_writing(self) -> None:
        self.clocks.writes.paused()  # reads and takes streams no more until resumed

    def resume_writing(self) -> None:
        self.clocks.writes.resumed()

    def _is_closed(self) -> bool:
        return self.state is _CLOSED

    def _backlog_ready(self) -> bool:
        return self._engine.ready

    def _take_batch(self, budget: int = INBOUND_BATCH) -> int:
        """Handle about ``budget`` bytes of frames; return how many."""
        try:
            taken = self._engine.handle(budget)
        except ConnectionFault as fault:
            self._protocol_error(fault.detail, fault.error_code)
            return 0
        if self.state is _CLOSED:
            return 0
        self.outbound.flush()
        return taken

    def _protocol_error(self, detail: str, code: int = ErrorCodes.PROTOCOL_ERROR) -> None:
        """A connection error: GOAWAY with ``code``, close, fail every stream."""
        log.warning("conn=%d HTTP/2 protocol error from upstream: %s", self.id, detail)
        error = UpstreamError(errors.HTTP_PROTOCOL_ERROR, detail)
        self._end(f"protocol error: {detail}", error, goaway=code)

    def _fail_ready(self, error: UpstreamError) -> None:
        if not self._ready.done():
            self.setup_failure = error
            self._ready.set_exception(error)
            self._ready.exception()  # connect() may have stopped waiting (timeout)

    def _end(self, reason: str, error: UpstreamError, goaway: int | None = None) -> None:
        """The one way a connection ends, whatever ended it: its streams fail with
        ``error``. With ``goaway`` (an error code) the peer is told so and the
        transport closes after what is written; without, it is cut. CLOSED comes
        before the streams fail, so that no slot of it is handed out meanwhile
        (their sinks may replay at once); the pool hears of it once, at the end."""
        if self.state is ConnState.CLOSED:
            return
        self.close_reason = self.close_reason or reason
        if goaway is not None and self._transport is not None:
            if not self._transport.is_closing():
                self._engine.close(goaway)
                # uvloop's transport of a dial cancelled inside create_connection
                # is shut without saying it is closing, and refuses the write.
                with contextlib.suppress(RuntimeError):
                    self.outbound.flush()
            self._transport.close()
        self._enter(ConnState.CLOSED)
        self.clocks.stop()
        self._inbound.stop()
        self._fail_ready(UpstreamError(errors.CONNECTION_TERMINATED, reason))
        if self._transport is not None and not self._transport.is_closing():
            self._transport.abort()
        streams = list(self.table.streams.values())  # the table's own, read in its module
        for stream in streams:
            self.table.forget(stream)
        for stream in streams:
            stream.got_error(error)
        self.observer.closed(self.close_reason)
        self._on_change(self)
        self._loop.call_soon(_let_go, self)

    def __repr__(self) -> str:
        return f"<conn {self.id} {self.state.value} streams={len(self.table.streams)}>"
