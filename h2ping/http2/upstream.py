"""One HTTP/2 connection to the upstream: its stream slots, its streams, its life.

The connection is an ``asyncio.Protocol`` that reads whether or not a request
waits (push, not pull: a PING, a GOAWAY or a dead peer is seen on an idle
connection too), pausing only while what it read is still being handled, one
share a loop turn (:mod:`h2ping.http2.inbound`). What ``data_received`` reads
goes to the connection's :class:`~.engine.H2Engine`, which tells it, call by
call, what the peer said; each call goes to the stream it concerns. Nothing here
knows about HTTP/1.1; a stream (:mod:`h2ping.http2.streams`) reports to a
:class:`StreamSink`, which the exchange implements. When inbound frames are
handled is :mod:`h2ping.http2.inbound`'s business, what is written and when
:mod:`h2ping.http2.outbound`'s. Dialling (TCP, TLS, ALPN) is :mod:`h2ping.http2.dial`.

A GOAWAY drains the connection here, and is never given to h2: h2 closes its whole
state machine on any received GOAWAY, which would fail the streams the server has
promised to finish (RFC 9113 section 6.8 lets them complete).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from typing import cast

from h2.errors import ErrorCodes

from .. import errors
from ..config import Config
from ..errors import UpstreamError
from ..fields import Header
from ..logs import plural
from ..stats import Stats
from .engine import ConnectionFault, Goaway, H2Engine, Heard
from .inbound import INBOUND_BATCH, READ_SIZE, InboundTurns
from .lifetime import Lifetime
from .liveness import Liveness
from .outbound import OutboundPump
from .pingbackoff import PingBackoff, punishes_pings
from .streams import SlotLost, StreamSink, StreamSlot, UpstreamStream
from .windows import ReceiveWindow, connection_window

log = logging.getLogger("h2ping.upstream")

#: Streams a connection takes before the peer's SETTINGS say how many: the first
#: request goes right behind the preface (RFC 9113 section 3.4), any other waits
#: the round trip for the peer's limit, which no server sets below one.
PROVISIONAL_STREAMS = 1
#: Stop opening streams on a connection close to the 31-bit stream id limit.
LAST_USABLE_STREAM_ID = 2**31 - 1 - 2
_DEAD = (
    "conn=%d dead: nothing received for %.1fs, %.1fs after a PING (ping-timeout %gs); failing %s"
)


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


class UpstreamConnection(asyncio.BufferedProtocol):
    """An HTTP/2 client connection driven by inbound bytes, never by waiting readers.

    A buffered protocol: the transport (or the TLS layer, :mod:`.tlslayer`) reads
    into one buffer of ours, where a plain protocol costs an allocation per read."""

    def __init__(
        self,
        config: Config,
        conn_id: int,
        on_change: Callable[[UpstreamConnection], None],
        stats: Stats,
        on_age: Callable[[UpstreamConnection], None] | None = None,
        ping_backoff: PingBackoff | None = None,
    ) -> None:
        """``ping_backoff``, shared by the connections to one upstream, gives the PING
        interval and hears of a GOAWAY that punishes PINGs."""
        self.upstream = config.upstream
        self.id = conn_id
        self.state = ConnState.CONNECTING
        self.streams: dict[int, UpstreamStream] = {}
        self.reserved = 0  # slots promised by the pool but not yet opened
        self.max_streams = 0  # 0 until the peer's first SETTINGS arrives
        # -max-streams-per-conn: our own cap below the peer's (0: none).
        self._stream_cap = config.max_streams_per_conn or 2**31
        self.goaway_last_stream_id: int | None = None
        self._goaway_error = ""  # the error code of a GOAWAY that had one
        self.close_reason = ""
        self._on_change = on_change
        self._loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[None] = self._loop.create_future()
        self._setup_failure: UpstreamError | None = None  # why it ended before its SETTINGS
        self._transport: asyncio.Transport | None = None
        self._stats = stats
        self._engine = H2Engine(self, self.streams, config.max_response_header_bytes)
        self._read_buffer = memoryview(bytearray(READ_SIZE))
        self._inbound = InboundTurns(
            self._loop, self._take_batch, self._backlog_ready, self._is_closed, self._open_streams
        )
        self._ping_backoff = ping_backoff
        self.ping_interval = config.ping_interval if ping_backoff is None else ping_backoff.interval
        measuring = self.ping_interval > 0 and not (ping_backoff and ping_backoff.punishing)
        self.window = ReceiveWindow(config.max_receive_window, measuring)
        self._liveness = Liveness(
            self.ping_interval, config.ping_timeout, self._send_ping, self._declare_dead, stats
        )
        self._on_age = on_age
        self.lifetime = Lifetime(
            self._loop,
            config.max_conn_age,
            config.idle_conn_timeout,
            None if on_age is None else self._reached_age,
            self._on_idle,
            self._is_busy,
        )
        self.outbound = OutboundPump(self._loop, self._engine)

    # ----------------------------------------------------------------- capacity
    # The connection alone counts its stream slots: try_reserve() hands one out, and
    # StreamSlot.open() or .release() gives it back exactly once (unreserve()).

    @property
    def free_slots(self) -> int:
        if self.state is ConnState.OPEN:
            limit = min(self.max_streams, self._stream_cap)
        elif self.state is ConnState.CONNECTING and self._transport is not None:
            limit = PROVISIONAL_STREAMS  # the preface is out
        else:
            return 0
        return limit - len(self.streams) - self.reserved

    @property
    def answered(self) -> int:
        """Response heads the peer sent: it is taking work."""
        return self._engine.responses

    @property
    def heard(self) -> Heard:
        """What the peer has said (its SETTINGS as sent, its first bytes...), for a
        report of the connection."""
        return self._engine.heard

    @property
    def age_limit(self) -> float:
        return self.lifetime.age_limit

    @property
    def busy(self) -> bool:
        """Carrying a stream, or promised one."""
        return bool(self.streams or self.reserved)

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
        if self.state is not ConnState.OPEN and self.state is not ConnState.CONNECTING:
            if (failure := self._setup_failure) is not None:
                # Its only slot went to the request first in line, which now fails
                # as the dial did (asking again would dial again, and again).
                raise UpstreamError(failure.error, failure.detail)
            raise SlotLost(
                errors.CONNECTION_TERMINATED,
                f"connection {self.id} stopped taking streams ({self.close_reason})",
                retryable=True,
            )
        stream_id = self._engine.next_stream_id()
        self._engine.send_request(stream_id, headers, end_stream)
        if extra := self.window.extra:
            self._engine.widen(stream_id, extra)
        stream = UpstreamStream(self, self._engine, stream_id, sink, ended=end_stream)
        self.streams[stream_id] = stream
        self.outbound.schedule_flush()
        if stream_id >= LAST_USABLE_STREAM_ID:
            self._drain("stream ids exhausted")
        return stream

    def unreserve(self, freed: bool) -> None:
        """A reservation ended: used for a stream, or (``freed``) given back or
        failed to open."""
        self.reserved -= 1
        if self.state is ConnState.DRAINING:
            self._close_if_drained()
        elif freed and self.state is ConnState.OPEN:
            self._on_change(self)

    async def wait_ready(self) -> None:
        await self._ready

    def retire(self, reason: str) -> None:
        """Take no new streams; close cleanly (GOAWAY NO_ERROR) once the last ends."""
        self._drain(reason)
        self._close_if_drained()

    def ping(self, payload: bytes) -> None:
        """Send a PING now; its ACK comes to :meth:`on_ping_ack` like any other."""
        self._send_ping(payload)

    def close(self, reason: str) -> None:
        """Send GOAWAY(NO_ERROR) and close; streams still open fail."""
        error = UpstreamError(errors.CONNECTION_TERMINATED, f"connection closed: {reason}")
        self._end(reason, error, goaway=ErrorCodes.NO_ERROR)

    def abandon(self, error: UpstreamError) -> None:
        """The dial gave up on it (a timeout): close, and fail a stream sent
        behind the preface, or about to be, with the dial's own ``error``."""
        self._fail_ready(error)
        self._end(error.detail, error, goaway=ErrorCodes.NO_ERROR)

    # ----------------------------------------------------------------- protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self._inbound.attach(self._transport)
        self.outbound.attach(self._transport)
        window = self.window
        self._engine.start(window.announced, connection_window(window.cap))
        if (payload := window.first_ping()) is not None:
            self._engine.ping(payload)
            self._stats.window_pinged()
        self.outbound.flush()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(bytes(self._read_buffer[:nbytes]))

    def data_received(self, data: bytes) -> None:
        # Any inbound byte proves the peer alive, even while a PING ACK is still
        # queued behind megabytes of DATA.
        self._liveness.saw_bytes()
        if self.state is ConnState.CLOSED:
            return
        if (payload := self.window.received(len(data))) is not None:
            self._send_ping(payload)  # at once: it times the round trip
            self._stats.window_pinged()
        self._engine.feed(data)
        self._inbound.arrived()

    def connection_lost(self, exc: Exception | None) -> None:
        # What arrived before the end is handled first: a response complete
        # before the close is a response.
        self._inbound.stop()
        while self.state is not ConnState.CLOSED and self._engine.ready:
            self._take_batch()
        if self.state is ConnState.CLOSED:
            return
        reason = f"connection lost: {exc}" if exc else "connection closed by upstream"
        if self._goaway_error:
            reason += f" after GOAWAY {self._goaway_error}"
        if self.state is ConnState.CONNECTING:  # a stream sent behind the preface fails so too
            reason += " before HTTP/2 SETTINGS"
        error = UpstreamError(errors.CONNECTION_TERMINATED, reason)
        self._fail_ready(error)
        self._end(reason, error)

    def _enter(self, state: ConnState) -> bool:
        """Move to ``state`` if the table of moves (``_MOVES``) allows it from here;
        every change of state goes through here. False if refused."""
        if state in _MOVES[self.state]:
            self.state = state
            return True
        return False

    def _is_closed(self) -> bool:
        return self.state is ConnState.CLOSED

    def _backlog_ready(self) -> bool:
        return self._engine.ready

    def _open_streams(self) -> int:
        return len(self.streams)

    def _is_busy(self) -> bool:
        return self.busy

    def _reached_age(self) -> None:
        assert self._on_age is not None  # the clock is wired only with it
        self._on_age(self)

    def _take_batch(self, budget: int = INBOUND_BATCH) -> int:
        """Handle about ``budget`` bytes of frames; return how many."""
        try:
            taken = self._engine.handle(budget)
        except ConnectionFault as fault:
            self._protocol_error(fault.detail, fault.error_code)
            return 0
        if self.state is ConnState.CLOSED:
            return 0
        self.outbound.flush()
        return taken

    # ------------------------------------------------- what the peer said (PeerEvents)

    def on_unclaimed_data(self, stream_id: int, flow_controlled_length: int) -> None:
        # An abandoned stream's data still counts against the connection window.
        self.outbound.give_credit(stream_id, flow_controlled_length)

    def on_ping_ack(self, payload: bytes) -> None:
        grown = self.window.acked(payload)
        if grown is None:
            self._liveness.on_ack(payload)
        elif grown:
            self._widen(grown)

    def _widen(self, increment: int) -> None:
        """Each stream's window grew by ``increment``: tell the peer for every open
        stream (a new one hears of it after its HEADERS, in open_stream)."""
        for stream_id in self.streams:
            self._engine.widen(stream_id, increment)
        self._stats.window_raised()
        rtt = self.window.rtt or 0.0
        log.debug(
            "conn=%d stream windows now %d bytes (round trip %.2f ms)",
            self.id,
            self.window.size,
            rtt * 1000,
        )
        self.outbound.schedule_flush()

    def on_internal_error(self, stream_id: int) -> None:
        log.exception("conn=%d stream=%d: internal error", self.id, stream_id)
        stream = self.streams.get(stream_id)
        if stream is not None:
            self.reset(stream, ErrorCodes.INTERNAL_ERROR)
            stream.got_error(UpstreamError(errors.PROXY_INTERNAL_ERROR, "internal error"))

    def on_settings(self, max_concurrent_streams: int, initial_window_changed: bool) -> None:
        self.max_streams = min(max_concurrent_streams, 2**31)
        if initial_window_changed:
            self.on_window_update(0)
        if self._enter(ConnState.OPEN):
            self._ready.set_result(None)
            self._liveness.start()
            self.lifetime.start()
        self._on_change(self)

    def on_goaway(self, goaway: Goaway) -> None:
        last = goaway.last_stream_id
        if self.goaway_last_stream_id is not None:
            last = min(last, self.goaway_last_stream_id)
        self.goaway_last_stream_id = last
        self._stats.goaway_received()
        described = goaway.describe(last)
        log.info(
            "conn=%d GOAWAY received: %s open_streams=%d", self.id, described, len(self.streams)
        )
        if goaway.error_code != ErrorCodes.NO_ERROR:
            self._goaway_error = goaway.code_name
        backoff = self._ping_backoff
        if backoff is not None and punishes_pings(goaway.error_code, goaway.debug_data):
            self._ping_backoff = None  # once per connection
            backoff.punished(self.id, self.ping_interval)
        self._drain(f"GOAWAY {goaway.code_name}")
        # Streams above last_stream_id were never processed: safe to replay.
        for stream in [s for sid, s in self.streams.items() if sid > last]:
            self.reset(stream, ErrorCodes.CANCEL)
            why = f"GOAWAY last_stream_id={last} before the stream was processed"
            stream.got_error(UpstreamError(errors.CONNECTION_TERMINATED, why, retryable=True))
        self._close_if_drained()

    # ----------------------------------------------------------------- outbound

    def pause_writing(self) -> None:
        self.outbound.pause_writing()

    def resume_writing(self) -> None:
        self.outbound.resume_writing()

    def on_window_update(self, stream_id: int) -> None:
        if not stream_id:
            self.outbound.window_opened(None)
        elif (stream := self.streams.get(stream_id)) is not None:
            self.outbound.window_opened(stream)

    def reset(self, stream: UpstreamStream, error_code: int) -> None:
        """End ``stream`` with RST_STREAM ``error_code``; its slot is free."""
        self._engine.reset_stream(stream.stream_id, error_code)
        self.forget(stream)
        self.outbound.schedule_flush()

    def forget(self, stream: UpstreamStream) -> None:
        """The stream is over: free its slot and the window credit it still holds."""
        if stream.closed:
            return
        credit = stream.close()
        self.streams.pop(stream.stream_id, None)
        self.outbound.forget(stream)
        if self.state is ConnState.CLOSED:
            return  # nothing to give back or to tell: _end is failing every stream
        if credit:
            self.outbound.give_credit(stream.stream_id, credit)
        if not self.streams:
            self.lifetime.went_idle()
        if self.state is ConnState.OPEN:
            self._on_change(self)  # a slot is free
        else:
            self._close_if_drained()

    def _send_ping(self, payload: bytes) -> None:
        self._engine.ping(payload)
        self.outbound.flush()

    def _declare_dead(self, silent_for: float, since_ping: float) -> None:
        timeout, failing = self._liveness.timeout, plural(len(self.streams), "stream")
        log.warning(_DEAD, self.id, silent_for, since_ping, timeout, failing)
        why = f"upstream connection {self.id} dead: no frame for {silent_for:.1f}s after a PING"
        self._end("ping timeout", UpstreamError(errors.CONNECTION_TERMINATED, why))

    # ----------------------------------------------------------------- ending

    def _drain(self, reason: str) -> None:
        if self._enter(ConnState.DRAINING):
            self.close_reason = reason
            self.lifetime.stop()  # it takes no new streams: neither clock matters now
            self._on_change(self)

    def _on_idle(self, seconds: float) -> None:
        log.info("conn=%d idle for %.1fs: closing", self.id, seconds)
        self.close("idle-conn-timeout")

    def _close_if_drained(self) -> None:
        if self.state is ConnState.DRAINING and not self.streams and not self.reserved:
            self.close(self.close_reason)

    def _protocol_error(self, detail: str, code: int = ErrorCodes.PROTOCOL_ERROR) -> None:
        """A connection error: GOAWAY with ``code``, close, fail every stream."""
        log.warning("conn=%d HTTP/2 protocol error from upstream: %s", self.id, detail)
        error = UpstreamError(errors.HTTP_PROTOCOL_ERROR, detail)
        self._end(f"protocol error: {detail}", error, goaway=code)

    def _fail_ready(self, error: UpstreamError) -> None:
        if not self._ready.done():
            self._setup_failure = error
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
                self.outbound.flush()
            self._transport.close()
        self._enter(ConnState.CLOSED)
        self._liveness.stop()
        self.lifetime.stop()
        self._inbound.stop()
        self._fail_ready(UpstreamError(errors.CONNECTION_TERMINATED, reason))
        if self._transport is not None and not self._transport.is_closing():
            self._transport.abort()
        streams = list(self.streams.values())
        for stream in streams:
            self.forget(stream)
        for stream in streams:
            stream.got_error(error)
        self._on_change(self)

    def __repr__(self) -> str:
        return f"<conn {self.id} {self.state.value} streams={len(self.streams)}>"
