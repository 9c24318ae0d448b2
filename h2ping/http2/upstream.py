"""One HTTP/2 connection to the upstream: the protocol, what its moves mean, its end.

What goes where:

- :class:`UpstreamConnection` is the ``asyncio`` protocol, what each move of its
  state means (open, draining) and its one way to end (``_end``), whatever ends it.
  Its state (:class:`~.lifetime.ConnState`) is its :class:`~.lifetime.Lifetime`'s,
  changed only through that module's table of moves.
- Its :class:`~.streams.StreamTable` is its stream slots and its streams by id:
  what the pool reserves, what the streams and their slots talk to, how many the
  state allows. It tells the connection one thing: a draining connection has
  nothing left (the connection then closes).
- What the peer says to the connection as a whole (SETTINGS, GOAWAY, PING ACKs,
  WINDOW_UPDATEs) is :mod:`h2ping.http2.peerevents`' to handle, which moves the
  state through the connection's two entries for it (``settings_received``,
  ``retire``); its clocks (PINGs, age, idle) are :mod:`h2ping.http2.clocks`'.

The connection reads whether or not a request waits (push, not pull: a PING, a
GOAWAY or a dead peer is seen on an idle connection too), pausing only while what
it read is still being handled, one share a loop turn (:mod:`h2ping.http2.inbound`).
What ``data_received`` reads goes to the connection's :class:`~.engine.H2Engine`,
which tells the stream each frame concerns, or the handler of the peer's events.
Nothing here knows about HTTP/1.1; a stream (:mod:`h2ping.http2.streams`) reports to
a :class:`~.streams.StreamSink`, which the exchange implements. What is written and when is
:mod:`h2ping.http2.outbound`'s business. Dialling (TCP, TLS, ALPN) is
:mod:`h2ping.http2.dial`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import cast

from h2.errors import ErrorCodes

from .. import errors
from ..config import Config
from ..errors import UpstreamError
from .clocks import ConnectionClocks
from .engine import ConnectionFault, H2Engine, Heard, new_engine
from .inbound import INBOUND_BATCH, READ_SIZE, InboundTurns
from .lifetime import ConnState
from .observer import UNOBSERVED, ConnectionObserver
from .outbound import OutboundPump
from .peerevents import PeerEventHandler
from .pingbackoff import PingBackoff, new_connection_pings
from .streams import PROVISIONAL_HEADER_LIST, StreamTable
from .tunnel import proxy_of
from .windows import ReceiveWindow, WindowBudget, connection_window

__all__ = ["PROVISIONAL_HEADER_LIST", "ConnState", "UpstreamConnection"]

log = logging.getLogger("h2ping.upstream")

# A module name for the tests made on every read: an enum member's load runs the
# enum metaclass's __getattr__ hook (110 ns on 3.11, 15 here).
_CLOSED = ConnState.CLOSED


def _let_go(conn: UpstreamConnection) -> None:
    """The parts of an ended connection let go of what leads back to it. Its end
    (``UpstreamConnection._end``) calls this once what runs then has returned (the
    engine may be amid a batch of frames). The connection is then freed by its
    last user, not by a full pass of the cyclic collector, which comes seldom
    (``process/heap.py``); what it still answers (its state, what it heard) stays."""
    for part in (conn.clocks, conn.peer, conn._engine, conn._inbound, conn.table):
        part.let_go()


class UpstreamConnection(asyncio.BufferedProtocol):
    """An HTTP/2 client connection driven by inbound bytes, never by waiting readers.

    A buffered protocol: the transport (or the TLS layer, :mod:`.tlslayer`) reads into one
    buffer of ours, where a plain protocol costs an allocation per read. Its end is its own, and
    what each move of its state means; the state is its ``lifetime``'s, its stream slots and
    streams its ``table``'s, what the peer says to it its ``peer``'s to handle, its clocks
    (PINGs, age, idle, blocked writes) its ``clocks``'. Whoever watches it (the proxy's
    counters and log, ``h2ping check``) is its ``observer``, told each moment of its life."""

    def __init__(
        self,
        config: Config,
        conn_id: int,
        on_change: Callable[[UpstreamConnection, ConnState], None],
        on_age: Callable[[UpstreamConnection], None] | None = None,
        ping_backoff: PingBackoff | None = None,
        window_budget: WindowBudget | None = None,
        observer: ConnectionObserver = UNOBSERVED,
    ) -> None:
        """``ping_backoff`` and ``window_budget``: shared by the connections to one upstream;
        ``observer`` hears of each moment of its life (:mod:`.observer`)."""
        self.upstream = config.upstream
        self.id = conn_id
        self._on_change = on_change
        self.observer = observer
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._read_buffer = memoryview(bytearray(READ_SIZE))
        self.ping_interval, measuring = new_connection_pings(config, ping_backoff)
        self.window = ReceiveWindow(config.max_receive_window, measuring, budget=window_budget)
        self.clocks = ConnectionClocks(self, config, self.ping_interval, on_age)
        self.lifetime = self.clocks.lifetime  # its state, and its age and idle clocks
        self.peer = PeerEventHandler(self, self.clocks.liveness, ping_backoff)
        self._engine: H2Engine = new_engine(self.peer, config.max_response_header_bytes)
        self.outbound: OutboundPump = OutboundPump(self._loop, self._engine)
        self.table = StreamTable(
            conn_id,
            self.lifetime,
            self._engine,
            self.outbound,
            self.window,
            observer,
            functools.partial(on_change, self),
            self._drained,
            config.max_streams_per_conn,
        )
        self._inbound = InboundTurns(self._loop, self._take_turn)

    @property
    def state(self) -> ConnState:
        """Where its life stands (its lifetime's, moved only there)."""
        return self.lifetime.state

    @property
    def close_reason(self) -> str:
        """Why it stopped taking streams, or ended."""
        return self.lifetime.reason

    @property
    def setup_failure(self) -> UpstreamError | None:
        """Why it ended before the peer's first SETTINGS."""
        return self.lifetime.setup_failure

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
        await self.lifetime.ready

    # What the peer said that moves the connection's state, told by ``peer``: each
    # moves it once, through its lifetime, and tells the pool.

    def settings_received(self) -> None:
        """The peer's SETTINGS: the first opens the connection (its dial is
        answered, its clocks run)."""
        if self.lifetime.open():
            self.clocks.start()
        self.observer.settings_heard(self._engine.heard.settings or {})
        self._on_change(self, self.lifetime.state)

    def ping(self, payload: bytes, for_window: bool = False) -> None:
        """Send a PING now (``for_window``: one that times the round trip for the
        receive window); its ACK comes to ``peer`` like any other."""
        self._engine.ping(payload)
        self.observer.ping_sent(payload, for_window)
        self.outbound.flush()

    def retire(self, reason: str) -> None:
        """Take no new streams; close cleanly (GOAWAY NO_ERROR) once the last ends:
        now, if none is in flight, else when the table says it is drained."""
        if self.lifetime.drain(reason):
            self._on_change(self, ConnState.DRAINING)
            if not self.table.busy:
                self.close(reason)

    def _drained(self) -> None:
        """The table's news: draining, the connection has no stream or slot left."""
        self.close(self.lifetime.reason)

    def close(self, reason: str) -> None:
        """Send GOAWAY(NO_ERROR) and close; streams still open fail."""
        error = UpstreamError(errors.CONNECTION_TERMINATED, f"connection closed: {reason}")
        self._end(reason, error, goaway=ErrorCodes.NO_ERROR)

    def abandon(self, error: UpstreamError) -> None:
        """The dial gave up on it (a timeout): close, and fail a stream sent
        behind the preface, or about to be, with the dial's own ``error``."""
        self.lifetime.fail_setup(error)
        self._end(error.detail, error, goaway=ErrorCodes.NO_ERROR)

    def cut(self, reason: str, error: UpstreamError) -> None:
        """End at once, telling the peer nothing (it is dead); streams fail with ``error``."""
        self._end(reason, error)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self._inbound.attach(self._transport)
        self.outbound.attach(self._transport)
        self.clocks.writes.attach(self._transport, self._inbound, self.outbound, self.table)
        self.table.preface_sent()  # once flushed below
        self._engine.start(self.window.announced, connection_window(self.window.cap))
        if (payload := self.window.first_ping()) is not None:
            self.ping(payload, for_window=True)  # written with the preface
        else:
            self.outbound.flush()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(bytes(self._read_buffer[:nbytes]))

    def data_received(self, data: bytes) -> None:
        # Any inbound byte proves the peer alive (a PING ACK may wait behind megabytes of DATA).
        self.clocks.liveness.saw_bytes()
        if self.lifetime.state is _CLOSED:
            return
        if (payload := self.window.received(len(data))) is not None:
            self.ping(payload, for_window=True)  # at once: it times the round trip
        self._engine.feed(data)
        self._take_turn()

    def connection_lost(self, exc: Exception | None) -> None:
        self.observer.socket_lost(exc, by_peer=self.lifetime.state is not ConnState.CLOSED)
        # What arrived before the end is handled first: a response complete
        # before the close is a response.
        self._inbound.stop()
        while self.lifetime.state is not ConnState.CLOSED and self._engine.ready:
            self._take_batch()
        if self.lifetime.state is ConnState.CLOSED:
            return
        reason = f"connection lost: {exc}" if exc else "connection closed by upstream"
        if self.peer.goaway_error:
            reason += f" after GOAWAY {self.peer.goaway_error}"
        if (
            self.lifetime.state is ConnState.CONNECTING
        ):  # a stream sent behind the preface fails so too
            reason += " before HTTP/2 SETTINGS"
        error = UpstreamError(errors.CONNECTION_TERMINATED, reason, next_hop=proxy_of(exc))
        self.lifetime.fail_setup(error)
        self._end(reason, error)

    def pause_writing(self) -> None:
        self.clocks.writes.paused()  # reads and takes streams no more until resumed

    def resume_writing(self) -> None:
        self.clocks.writes.resumed()

    def _take_turn(self, scheduled: bool = False) -> None:
        """Handle what arrived, as much as the inbound schedule's budget says,
        and tell it what came of it. It schedules the rest: the loop calls this
        again next iteration (``scheduled``)."""
        budget = self._inbound.budget(self.table.count(), scheduled)
        if budget is None:
            return  # a turn is scheduled: it takes these bytes too
        taken = self._take_batch(budget)
        if self.lifetime.state is not _CLOSED:
            self._inbound.took(taken, self._engine.ready)

    def _take_batch(self, budget: int = INBOUND_BATCH) -> int:
        """Handle about ``budget`` bytes of frames; return how many."""
        try:
            taken = self._engine.handle(budget)
        except ConnectionFault as fault:
            self._protocol_error(fault.detail, fault.error_code)
            return 0
        if self.lifetime.state is _CLOSED:
            return 0
        if self.outbound.opened:  # the peer opened windows: request bodies go on
            self.outbound.pump_opened()
        self.outbound.flush()
        return taken

    def _protocol_error(self, detail: str, code: int = ErrorCodes.PROTOCOL_ERROR) -> None:
        """A connection error: GOAWAY with ``code``, close, fail every stream."""
        log.warning("conn=%d HTTP/2 protocol error from upstream: %s", self.id, detail)
        error = UpstreamError(errors.HTTP_PROTOCOL_ERROR, detail)
        self._end(f"protocol error: {detail}", error, goaway=code)

    def _end(self, reason: str, error: UpstreamError, goaway: int | None = None) -> None:
        """The one way a connection ends, whatever ended it: its streams fail with
        ``error``. With ``goaway`` (an error code) the peer is told so and the
        transport closes after what is written; without, it is cut. CLOSED comes
        before the streams fail, so that no slot of it is handed out meanwhile
        (their sinks may replay at once); the pool hears of it once, at the end."""
        if self.lifetime.state is ConnState.CLOSED:
            return
        if goaway is not None and self._transport is not None:
            if not self._transport.is_closing():
                self._engine.close(goaway)
                # uvloop's transport of a dial cancelled inside create_connection
                # is shut without saying it is closing, and refuses the write.
                with contextlib.suppress(RuntimeError):
                    self.outbound.flush()
            self._transport.close()
        self.lifetime.end(reason)
        self.clocks.stop()
        self._inbound.stop()
        self.lifetime.fail_setup(UpstreamError(errors.CONNECTION_TERMINATED, reason))
        if self._transport is not None and not self._transport.is_closing():
            self._transport.abort()
        self.table.fail_all(error)
        self.observer.closed(self.close_reason)
        self._on_change(self, ConnState.CLOSED)
        self._loop.call_soon(_let_go, self)

    def __repr__(self) -> str:
        return f"<conn {self.id} {self.lifetime.state.value} streams={self.table.count()}>"
