"""One HTTP/2 connection to the upstream: the h2 state machine, stream slots, its life.

The connection is an ``asyncio.Protocol`` that reads all the time (push): every byte
goes through ``data_received`` to h2 and its events go straight to the stream they
belong to. Nothing here knows about HTTP/1.1; a stream (:mod:`h2ping.http2.streams`)
reports to a :class:`StreamSink`, which the exchange implements. When inbound
frames are handled is :mod:`h2ping.http2.inbound`'s business, what is written and when
:mod:`h2ping.http2.outbound`'s. Dialling (TCP, TLS, ALPN) is :mod:`h2ping.http2.dial`.

GOAWAY frames are split off the byte stream and handled here instead of by h2,
because h2 closes its whole state machine on any received GOAWAY, which would fail
the streams the server has promised to finish (RFC 9113 section 6.8 lets them
complete).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable
from typing import cast

import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes

from .. import errors
from ..config import Config
from ..errors import UpstreamError
from ..fields import Header
from ..logs import plural
from ..stats import Stats
from . import fastpaths
from .frames import (
    FRAME,
    FRAME_HEADER,
    GOAWAY,
    HEADERS_TYPE,
    RUN,
    FloodError,
    FrameSizeError,
    FrameSplitter,
    data_frame,
    parse_goaway,
)
from .h2conn import DATA, H2_CONFIG, RESPONSE_HEADERS, H2Connection, StreamFault
from .h2errors import describe_h2_error
from .inbound import INBOUND_BATCH, READ_SIZE, InboundTurns
from .lifetime import Lifetime
from .liveness import Liveness
from .outbound import OutboundPump
from .pingbackoff import PingBackoff, punishes_pings
from .streams import SlotLost, StreamSink, StreamSlot, StreamState, UpstreamStream

log = logging.getLogger("h2ping.upstream")

#: Receive windows: h2's 65,535-byte defaults throttle a multi-MB response on a long
#: RTT. A stream may hold this much unread response data (a slow client's share).
STREAM_WINDOW = 4 * 1024 * 1024
CONNECTION_WINDOW = 64 * 1024 * 1024
#: Stop opening streams on a connection close to the 31-bit stream id limit.
LAST_USABLE_STREAM_ID = 2**31 - 1 - 2


def our_settings(header_list_limit: int) -> h2.settings.Settings:
    """Our settings, all in the preface's one SETTINGS frame, never h2's defaults
    first: a server must not see a smaller header list limit than we enforce."""
    return h2.settings.Settings(
        client=True,
        initial_values={
            h2.settings.SettingCodes.ENABLE_PUSH: 0,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: header_list_limit,
        },
    )


def _debug_text(debug_data: bytes) -> str:
    """A GOAWAY's debug data for the log line: printable ASCII, at most 80 characters."""
    if not debug_data:
        return ""
    text = "".join(chr(b) if 32 <= b < 127 else "?" for b in debug_data[:80])
    return f' debug="{text}"'


class ConnState(enum.Enum):
    CONNECTING = "connecting"
    OPEN = "open"  # takes new streams
    DRAINING = "draining"  # GOAWAY received or retired: finishes what it has
    CLOSED = "closed"


class UpstreamConnection(asyncio.BufferedProtocol):
    """An HTTP/2 client connection driven by inbound bytes, never by waiting readers.

    A buffered protocol: the TCP transport, or the TLS layer over it
    (:mod:`h2ping.http2.tlslayer`), reads into one buffer of ours. Its size bounds a
    read, not what arrives: both keep the rest for the next call, never dropping
    it when the peer closes. As a plain protocol, every TLS read allocated a fresh
    256 KiB bytes object and shrank it to what arrived (mmap, mremap and munmap)."""

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
        self._transport: asyncio.Transport | None = None
        self._stats = stats
        fast = fastpaths.enabled()
        self._frames = FrameSplitter(
            plain_data=DATA in fast, plain_headers=RESPONSE_HEADERS in fast
        )
        self._read_buffer = memoryview(bytearray(READ_SIZE))
        self._inbound = InboundTurns(
            self._loop, self._take_batch, lambda: self._frames.ready, self._is_closed
        )
        self._ping_backoff = ping_backoff
        self.ping_interval = config.ping_interval
        if ping_backoff is not None:
            self.ping_interval = ping_backoff.interval
        self._liveness = Liveness(
            self.ping_interval, config.ping_timeout, self._send_ping, self._declare_dead, stats
        )
        self.lifetime = Lifetime(
            self._loop,
            config.max_conn_age,
            config.idle_conn_timeout,
            None if on_age is None else lambda: on_age(self),
            self._on_idle,
            lambda: self.busy,
        )
        self.answered = 0  # streams the peer sent response headers for: it is taking work
        self._h2 = H2Connection(H2_CONFIG, config.max_response_header_bytes, fast)
        self.outbound = OutboundPump(self._loop, self._h2)

    # ----------------------------------------------------------------- capacity
    #
    # The connection alone counts its stream slots: a slot is taken by
    # try_reserve() and comes back exactly once, through StreamSlot.open() or
    # StreamSlot.release(), both ending in unreserve(), which closes a draining
    # connection whose last slot that was.

    @property
    def free_slots(self) -> int:
        if self.state is not ConnState.OPEN:
            return 0
        return min(self.max_streams, self._stream_cap) - len(self.streams) - self.reserved

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
        if self.state is not ConnState.OPEN:
            raise SlotLost(
                errors.CONNECTION_TERMINATED,
                f"connection {self.id} stopped taking streams ({self.close_reason})",
                retryable=True,
            )
        stream_id = self._h2.get_next_available_stream_id()
        self._h2.send_request(stream_id, headers, end_stream)
        stream = UpstreamStream(self, self._h2, stream_id, sink)
        if end_stream:
            stream.state = StreamState.SENT
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

    def close(self, reason: str) -> None:
        """Send GOAWAY(NO_ERROR) and close; streams still open fail."""
        if self.state is ConnState.CLOSED:
            return
        self.close_reason = self.close_reason or reason
        if self._transport is not None and not self._transport.is_closing():
            try:
                self._h2.close_connection()
                self.outbound.flush()
            except h2.exceptions.ProtocolError:
                pass
            self._transport.close()
        self._end(
            reason, UpstreamError(errors.CONNECTION_TERMINATED, f"connection closed: {reason}")
        )

    # ----------------------------------------------------------------- protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self._inbound.attach(self._transport)
        self.outbound.attach(self._transport)
        self._h2.local_settings = our_settings(self._h2.header_list_limit)
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(CONNECTION_WINDOW - 65535)
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
        self._frames.feed(data)
        self._inbound.arrived()

    def connection_lost(self, exc: Exception | None) -> None:
        # What arrived before the end is handled first: a response complete
        # before the close is a response.
        self._inbound.stop()
        while self.state is not ConnState.CLOSED and self._frames.ready:
            self._take_batch()
        if self.state is ConnState.CLOSED:
            return
        reason = f"connection lost: {exc}" if exc else "connection closed by upstream"
        if self._goaway_error:
            reason += f" after GOAWAY {self._goaway_error}"
        self._fail_ready(
            UpstreamError(errors.CONNECTION_TERMINATED, f"{reason} before HTTP/2 SETTINGS")
        )
        self._end(reason, UpstreamError(errors.CONNECTION_TERMINATED, reason))

    def _is_closed(self) -> bool:
        return self.state is ConnState.CLOSED

    def _take_batch(self, budget: int = INBOUND_BATCH) -> int:
        """Handle about ``budget`` bytes of frames; return how many."""
        backlog = self._frames.backlog
        try:
            pieces = self._frames.take(budget)
            for kind, piece in pieces:
                if kind == RUN:
                    self._receive(piece)
                elif kind == GOAWAY:
                    self._on_goaway(piece)
                elif kind == FRAME:
                    if not self._receive_whole_frame(piece):
                        self._receive(piece)
                elif not self._receive_plain_data(kind, piece):
                    self._receive(data_frame(kind, piece))
                if self.state is ConnState.CLOSED:
                    return 0
        except FloodError as exc:
            self._protocol_error(str(exc), ErrorCodes.ENHANCE_YOUR_CALM)
            return 0
        except FrameSizeError as exc:
            self._protocol_error(
                f"{exc}, above SETTINGS_MAX_FRAME_SIZE", ErrorCodes.FRAME_SIZE_ERROR
            )
            return 0
        except Exception as exc:  # anything h2 raises on the peer's bytes ends this connection
            self._protocol_error(describe_h2_error(exc))
            return 0
        self.outbound.flush()
        return backlog - self._frames.backlog

    # ----------------------------------------------------------------- inbound

    def _receive(self, frames: bytes) -> None:
        self._dispatch_all(self._h2.receive_data(frames))

    def _dispatch_all(self, events: list[h2.events.Event]) -> None:
        for event in events:
            try:
                self._dispatch(event)
            except Exception:  # a bug serving one stream must not end the others
                self._internal_error(getattr(event, "stream_id", 0))

    def _receive_whole_frame(self, frame: bytes) -> bool:
        """A response's plain HEADERS, or its last DATA frame, taken without h2's
        frame parsing where h2 agrees; False: h2 must take it."""
        stream_id = int.from_bytes(frame[5:9], "big") & 0x7FFFFFFF
        payload = frame[FRAME_HEADER:]
        if frame[3] == HEADERS_TYPE:
            events = self._h2.take_response_headers(stream_id, payload, bool(frame[4] & 0x1))
            if events is None:
                return False
            self._dispatch_all(events)
            return True
        stream = self.streams.get(stream_id)
        size = len(payload)
        if stream is None or not self._h2.take_last_data(stream_id, size):
            return False
        try:
            stream.got_data(payload, size)
            stream.got_end()
        except Exception:
            self._internal_error(stream_id)
        return True

    def _receive_plain_data(self, stream_id: int, payload: bytes) -> bool:
        """A response's DATA frame (no flags), delivered without h2's events when
        h2 agrees (see H2Connection.take_plain_data); False: h2 must take it."""
        stream = self.streams.get(stream_id)
        size = len(payload)
        if stream is None or not self._h2.take_plain_data(stream_id, size):
            return False
        stream.received(size)
        try:
            stream.sink.on_data(payload, size)
        except Exception:
            self._internal_error(stream_id)
        return True

    def _internal_error(self, stream_id: int) -> None:
        log.exception("conn=%d stream=%d: internal error", self.id, stream_id)
        stream = self.streams.get(stream_id)
        if stream is not None:
            self.reset(stream, ErrorCodes.INTERNAL_ERROR)
            stream.sink.on_error(UpstreamError(errors.PROXY_INTERNAL_ERROR, "internal error"))

    def _dispatch(self, event: h2.events.Event) -> None:
        # No h2 event class derives from another: isinstance picks exactly one.
        if isinstance(event, h2.events.DataReceived):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.got_data(event.data, event.flow_controlled_length)
            else:  # an abandoned stream's data still counts against the connection window
                self.outbound.give_credit(event.stream_id, event.flow_controlled_length)
        elif isinstance(event, h2.events.WindowUpdated):
            self._on_window_update(event.stream_id)
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self._on_settings(event)
        elif isinstance(event, h2.events.PingAckReceived):
            self._liveness.on_ack(event.ping_data)
        elif (stream := self.streams.get(getattr(event, "stream_id", 0))) is None:
            return
        elif isinstance(event, h2.events.ResponseReceived):
            self.answered += 1
            stream.got_response(event.headers, event.stream_ended is not None)
        elif isinstance(event, h2.events.StreamEnded):
            stream.got_end()
        elif isinstance(event, h2.events.StreamReset):
            stream.got_reset(event.error_code)
        elif isinstance(event, StreamFault):
            stream.got_fault(event.error, event.detail)

    def _on_settings(self, event: h2.events.RemoteSettingsChanged) -> None:
        self.max_streams = min(self._h2.remote_settings.max_concurrent_streams, 2**31)
        if h2.settings.SettingCodes.INITIAL_WINDOW_SIZE in event.changed_settings:
            self._on_window_update(0)
        if not self._ready.done():
            self.state = ConnState.OPEN
            self._ready.set_result(None)
            self._liveness.start()
            self.lifetime.start()
        self._on_change(self)

    def _on_goaway(self, payload: bytes) -> None:
        last_stream_id, code, debug_data = parse_goaway(payload)
        if self.goaway_last_stream_id is not None:
            last_stream_id = min(last_stream_id, self.goaway_last_stream_id)
        self.goaway_last_stream_id = last_stream_id
        self._stats.goaway_received()
        try:
            code_name = ErrorCodes(code).name
        except ValueError:
            code_name = str(code)
        log.info(
            "conn=%d GOAWAY received: last_stream_id=%d error=%s%s open_streams=%d",
            self.id,
            last_stream_id,
            code_name,
            _debug_text(debug_data),
            len(self.streams),
        )
        if code != ErrorCodes.NO_ERROR:
            self._goaway_error = code_name
        backoff = self._ping_backoff
        if backoff is not None and punishes_pings(code, debug_data):
            self._ping_backoff = None  # once per connection
            backoff.punished(self.id, self.ping_interval)
        self._drain(f"GOAWAY {code_name}")
        # Streams above last_stream_id were never processed: safe to replay.
        for stream in [s for sid, s in self.streams.items() if sid > last_stream_id]:
            self.reset(stream, ErrorCodes.CANCEL)
            stream.sink.on_error(
                UpstreamError(
                    errors.CONNECTION_TERMINATED,
                    f"GOAWAY last_stream_id={last_stream_id} before the stream was processed",
                    retryable=True,
                )
            )
        self._close_if_drained()

    # ----------------------------------------------------------------- outbound

    def pause_writing(self) -> None:
        self.outbound.pause_writing()

    def resume_writing(self) -> None:
        self.outbound.resume_writing()

    def _on_window_update(self, stream_id: int) -> None:
        if not stream_id:
            self.outbound.window_opened(None)
            return
        stream = self.streams.get(stream_id)
        if stream is not None:
            self.outbound.window_opened(stream)

    def reset(self, stream: UpstreamStream, error_code: int) -> None:
        """End ``stream`` with RST_STREAM ``error_code``; its slot is free."""
        with contextlib.suppress(h2.exceptions.ProtocolError):  # already closed in h2
            self._h2.reset_stream(stream.stream_id, error_code)
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
        self._h2.ping(payload)
        self.outbound.flush()

    def _declare_dead(self, silent_for: float, since_ping: float) -> None:
        log.warning(
            "conn=%d dead: nothing received for %.1fs, %.1fs after a PING (ping-timeout %gs); "
            "failing %s",
            self.id,
            silent_for,
            since_ping,
            self._liveness.timeout,
            plural(len(self.streams), "stream"),
        )
        error = UpstreamError(
            errors.CONNECTION_TERMINATED,
            f"upstream connection {self.id} dead: no frame for {silent_for:.1f}s after a PING",
        )
        self._end("ping timeout", error)

    # ----------------------------------------------------------------- ending

    def _drain(self, reason: str) -> None:
        if self.state is ConnState.OPEN:
            self.state = ConnState.DRAINING
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
        # h2 queues a GOAWAY of its own for the errors it detects; one is enough.
        if self._h2.state_machine.state is not h2.connection.ConnectionState.CLOSED:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self._h2.close_connection(error_code=code)
        self.outbound.flush()
        if self._transport is not None:
            self._transport.close()
        self._end(f"protocol error: {detail}", UpstreamError(errors.HTTP_PROTOCOL_ERROR, detail))

    def _fail_ready(self, error: UpstreamError) -> None:
        if not self._ready.done():
            self._ready.set_exception(error)
            self._ready.exception()  # connect() may have stopped waiting (timeout)

    def _end(self, reason: str, error: UpstreamError) -> None:
        """The connection is over. CLOSED comes first, so that no slot of it is
        handed out while its streams fail (their sinks may replay at once); the
        pool hears of it once, at the end."""
        if self.state is ConnState.CLOSED:
            return
        self.state = ConnState.CLOSED
        self.close_reason = self.close_reason or reason
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
            stream.sink.on_error(error)
        self._on_change(self)

    def __repr__(self) -> str:
        return f"<conn {self.id} {self.state.value} streams={len(self.streams)}>"
