"""A scripted HTTP/2 server for tests.

:class:`ScriptedUpstream` is a real HTTP/2 server (asyncio + ``h2``), over TLS with ALPN
``h2`` or as h2c prior knowledge. Its handler and its connection objects stage what stock
servers won't: chosen GOAWAYs, RST_STREAM codes, requests never answered, held PING ACKs,
slow bodies. It also records what it saw: connections, requests, PINGs, client resets.

Every received byte is handled as it arrives (push design), so WINDOW_UPDATE, PING and
RST_STREAM are handled even while no handler reads. GOAWAY frames, sent or received, are
handled here rather than by ``h2``, as h2ping itself does (see
:mod:`h2ping.http2.engine.frames`): ``h2`` moves its whole connection to CLOSED on
any GOAWAY, while RFC 9113 section 6.8 lets the streams up to ``last_stream_id`` finish.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import h2.events
import h2.exceptions
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.settings import SettingCodes, Settings
from hyperframe.frame import GoAwayFrame

from ..http2.engine import GOAWAY, FloodError, FrameSizeError, FrameSplitter

logger = logging.getLogger(__name__)

Handler = Callable[["ScriptedRequest"], Awaitable[None]]

#: Added to the connection receive window so that only stream windows exert back-pressure.
CONNECTION_WINDOW_BOOST = 16 * 1024 * 1024
#: h2's own initial SETTINGS_MAX_HEADER_LIST_SIZE, sent explicitly.
DEFAULT_MAX_HEADER_LIST_SIZE = 2**16
_PING, _ACK = 0x6, 0x1  # frame type and flag
#: What an HTTP/2 client sends before its first frame (RFC 9113 section 3.4).
_CLIENT_PREFACE_SIZE = 24


class StreamClosed(Exception):
    """The stream was reset (by either side) or its connection is gone."""


def _goaway_frame(last_stream_id: int, error_code: int = 0, debug_data: bytes = b"") -> bytes:
    """A serialized GOAWAY frame, written past ``h2`` so its connection stays open."""
    frame = GoAwayFrame(
        0, last_stream_id=last_stream_id, error_code=error_code, additional_data=debug_data
    )
    return frame.serialize()


def _take_ping_acks(data: bytes) -> tuple[bytes, list[bytes]]:
    """Split h2 output (always whole frames) into PING ACK frames and everything else."""
    rest, acks, pos = bytearray(), [], 0
    while pos < len(data):
        end = pos + 9 + int.from_bytes(data[pos : pos + 3], "big")
        if data[pos + 3] == _PING and data[pos + 4] & _ACK:
            acks.append(data[pos:end])
        else:
            rest += data[pos:end]
        pos = end
    return bytes(rest), acks


async def echo_handler(request: ScriptedRequest) -> None:
    """Default handler: answer 200 with the request body and a summary of the request."""
    body = await request.body()
    headers = [
        ("content-type", "application/octet-stream"),
        ("content-length", str(len(body))),
        ("x-echo-method", request.method),
        ("x-echo-path", request.path),
        ("x-echo-authority", request.authority),
    ]
    await request.respond(200, headers, body)


class ScriptedRequest:
    """One request stream. The handler reads and answers it; tests inspect it."""

    def __init__(
        self, connection: ScriptedConnection, stream_id: int, headers: list[tuple[str, str]]
    ) -> None:
        self.connection = connection
        self.stream_id = stream_id
        pseudo = {name: value for name, value in headers if name.startswith(":")}
        self.method = pseudo.get(":method", "")
        self.path = pseudo.get(":path", "")
        self.authority = pseudo.get(":authority", "")
        self.scheme = pseudo.get(":scheme", "")
        self.headers = [(name, value) for name, value in headers if not name.startswith(":")]
        self.body_bytes_received = 0
        self.ended = False  # the client's END_STREAM arrived
        self.response_ended = False  # our END_STREAM went out
        self.reset_by_client = asyncio.Event()
        self.client_reset_code: int | None = None
        self.reset_code: int | None = None  # set when this side reset the stream
        self._chunks: collections.deque[tuple[bytes, int]] = collections.deque()
        self._unacked = 0  # flow-controlled bytes received but not handed back yet
        self._readable = asyncio.Event()
        self._finished = False

    @property
    def closed(self) -> bool:
        return (
            self.connection.closed
            or self.client_reset_code is not None
            or self.reset_code is not None
            or (self.ended and self.response_ended)
        )

    @property
    def stream_window(self) -> int:
        """The client's flow-control window for this stream alone (the
        connection's aside); 0 once the stream is closed. 0 while open: a client
        that does not read holds this stream back."""
        stream = self.connection._h2.streams.get(self.stream_id)
        if self.closed or stream is None:
            return 0
        return int(stream.outbound_flow_control_window)

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((value for key, value in self.headers if key == name), None)

    async def read(self) -> bytes:
        """Next chunk of the body, ``b""`` at its end. Reading reopens the client's window."""
        while not self._chunks:
            if self.ended:
                return b""
            self._check_open()
            self._readable.clear()
            await self._readable.wait()
        data, size = self._chunks.popleft()
        if not self._finished:
            self._unacked -= size
            self.connection._ack(self.stream_id, size)
            self.connection._flush()
        return data

    async def body(self) -> bytes:
        """The whole body: returns once the client's END_STREAM arrives."""
        parts = []
        while chunk := await self.read():
            parts.append(chunk)
        return b"".join(parts)

    async def respond(
        self, status: int = 200, headers: Sequence[tuple[str, str]] = (), body: bytes = b""
    ) -> None:
        await self.send_headers(status, headers, end_stream=not body)
        if body:
            await self.send_data(body, end_stream=True)

    async def send_headers(
        self, status: int, headers: Sequence[tuple[str, str]] = (), end_stream: bool = False
    ) -> None:
        self._check_open()
        block = [(":status", str(status)), *headers]
        self.connection._h2.send_headers(self.stream_id, block, end_stream=end_stream)
        self._sent(end_stream)

    async def send_data(self, data: bytes, end_stream: bool = False) -> None:
        """Send ``data`` as fast as the client's connection and stream windows allow."""
        h2_conn, view = self.connection._h2, memoryview(data)
        while view:
            window = await self.connection._send_window(self)
            size = min(window, len(view), h2_conn.max_outbound_frame_size)
            last = end_stream and size == len(view)
            h2_conn.send_data(self.stream_id, bytes(view[:size]), end_stream=last)
            view = view[size:]
            self.connection._flush()  # before the next wait, so the client sees this frame
        if end_stream and not data:
            self._check_open()
            h2_conn.end_stream(self.stream_id)
        self._sent(end_stream)

    async def end(self) -> None:
        await self.send_data(b"", end_stream=True)

    def reset(self, error_code: int) -> None:
        """Send RST_STREAM, e.g. ``ErrorCodes.REFUSED_STREAM``."""
        self.connection._h2.reset_stream(self.stream_id, error_code)
        self.reset_code = error_code
        self._finish_if_closed()
        self.connection._flush()

    def _sent(self, end_stream: bool) -> None:
        self.response_ended = self.response_ended or end_stream
        self._finish_if_closed()
        self.connection._flush()

    def _check_open(self) -> None:
        if self.closed:
            raise StreamClosed(f"stream {self.stream_id} on connection {self.connection.id}")

    def _on_data(self, data: bytes, size: int) -> None:
        self.body_bytes_received += len(data)
        if data:
            self._chunks.append((data, size))
            self._unacked += size
        else:  # padding only: nothing for a reader to consume
            self.connection._ack(self.stream_id, size)
        self._readable.set()

    def _finish_if_closed(self) -> None:
        if self.closed and not self._finished:
            self._finished = True
            self.connection._ack(self.stream_id, self._unacked)  # credit the connection window
            self._unacked = 0
            self._readable.set()
            self.connection._stream_finished(self)


class ScriptedConnection(asyncio.Protocol):
    """One accepted connection; tests use it to send GOAWAY, drop it or hold PING ACKs."""

    def __init__(self, server: ScriptedUpstream) -> None:
        self.server = server
        self.id = 0  # numbered from 1 once the connection (and TLS handshake) is up
        self.closed = False
        self.opened_at = 0.0  # loop time of the accept, and of the close (0 while open)
        self.closed_at = 0.0
        self.alpn_protocol: str | None = None
        self.tls_resumed = False
        self.streams_opened = 0
        self.streams_refused = 0
        self.pings_received = 0
        self.ping_times: list[float] = []  # loop time of each PING received (not ACKs)
        self.ping_acks_received: list[bytes] = []  # the payloads of our PINGs' ACKs
        self.settings_acked = 0  # ACKs of our SETTINGS frames, the first one too
        self.goaway_sent: int | None = None  # last_stream_id of our latest GOAWAY
        self.goaway_received: int | None = None  # error code of the client's GOAWAY
        self.requests: list[ScriptedRequest] = []
        self._hold_ping_acks = not server.auto_ping_ack
        self._held_acks: list[bytes] = []
        self._open: dict[int, ScriptedRequest] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._window_changed = asyncio.Event()
        self._transport: asyncio.Transport | None = None
        self._corked: bytearray | None = None  # writes held by corked()
        self._preface_left = _CLIENT_PREFACE_SIZE  # goes to h2 as it is: not a frame
        self._frames = FrameSplitter()
        # Header values arrive as bytes: HTTP allows obs-text, which is not UTF-8.
        self._h2 = H2Connection(H2Configuration(client_side=False, header_encoding=None))
        self._events: dict[type, Callable[[Any], None]] = {
            h2.events.RequestReceived: self._on_request,
            h2.events.DataReceived: self._on_data,
            h2.events.StreamEnded: self._on_stream_ended,
            h2.events.StreamReset: self._on_stream_reset,
            h2.events.WindowUpdated: lambda _: self._notify_window(),
            h2.events.RemoteSettingsChanged: lambda _: self._notify_window(),
            h2.events.PingReceived: self._on_ping,
            h2.events.PingAckReceived: self._on_ping_ack,
            h2.events.SettingsAcknowledged: self._on_settings_ack,
        }

    @property
    def hold_ping_acks(self) -> bool:
        return self._hold_ping_acks

    @hold_ping_acks.setter
    def hold_ping_acks(self, hold: bool) -> None:
        self._hold_ping_acks = hold
        if not hold:
            self.release_ping_acks()

    @property
    def held_ping_acks(self) -> int:
        return len(self._held_acks)

    def release_ping_acks(self) -> None:
        """Send the PING ACKs held so far. Later PINGs are held again while holding is on."""
        acks, self._held_acks = self._held_acks, []
        self._flush()
        self._write(b"".join(acks))

    def goaway(
        self, last_stream_id: int | None = None, error_code: int = 0, debug_data: bytes = b""
    ) -> None:
        """Send GOAWAY without closing; streams up to ``last_stream_id`` (default: the
        highest seen) are still served, later ones are refused with REFUSED_STREAM."""
        if last_stream_id is None:
            last_stream_id = self._h2.highest_inbound_stream_id
        self.goaway_sent = last_stream_id
        self._flush()  # what h2 has queued goes first
        self._write(_goaway_frame(last_stream_id, error_code, debug_data))

    def ping(self, payload: bytes = b"scripted") -> None:
        """Send a PING of 8 bytes; its ACK lands in ``ping_acks_received``."""
        self._h2.ping(payload)
        self._flush()

    def update_settings(self, settings: Mapping[int, int]) -> None:
        """Send a SETTINGS frame with ``settings`` (by ``SettingCodes``); the
        client's ACK counts in ``settings_acked``."""
        self._h2.update_settings(dict(settings))
        self._flush()

    def window_update(self, increment: int, stream_id: int = 0) -> None:
        """Send WINDOW_UPDATE: more room for the client's request bodies."""
        self._h2.increment_flow_control_window(increment, stream_id or None)
        self._flush()

    def stop_reading(self) -> None:
        """Read nothing more of what the client sends, until :meth:`resume_reading`:
        a server that stops taking the client's writes, whose buffers fill up."""
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None:
            self._transport.resume_reading()

    @contextlib.contextmanager
    def corked(self) -> Iterator[None]:
        """Hold every write of this connection until the block ends, then send
        them in one: frames that a server sends together (its last responses, a
        GOAWAY, a PING) reach the client in one read, as from nginx."""
        if self._corked is not None:
            raise RuntimeError("already corked")
        self._corked = bytearray()
        try:
            yield
        finally:
            self._flush()
            held, self._corked = bytes(self._corked), None
            self._write(held)

    def close(self) -> None:
        """Drop the connection abruptly (TCP reset, no GOAWAY), like a crashed server."""
        if self._transport is not None:
            self._transport.abort()
        self._shutdown()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self._transport = transport
        self.opened_at = asyncio.get_running_loop().time()
        ssl_object = transport.get_extra_info("ssl_object")
        self.alpn_protocol = ssl_object.selected_alpn_protocol() if ssl_object else None
        # The client resumed an earlier TLS session (False without TLS).
        self.tls_resumed = bool(ssl_object is not None and ssl_object.session_reused)
        self.server.connections.append(self)
        self.id = len(self.server.connections)
        settings = {
            SettingCodes.MAX_CONCURRENT_STREAMS: self.server.max_concurrent_streams,
            SettingCodes.INITIAL_WINDOW_SIZE: self.server.initial_window_size,
            SettingCodes.MAX_HEADER_LIST_SIZE: self.server.max_header_list_size,
        }
        self._h2.local_settings = Settings(client=False, initial_values=settings)
        self._h2.initiate_connection()
        # h2 answers a stream over the limit with a connection-level PROTOCOL_ERROR; real
        # servers refuse just that stream. So h2 gets a limit it never hits after the
        # advertised SETTINGS went out, and _on_request enforces the advertised one.
        settings[SettingCodes.MAX_CONCURRENT_STREAMS] = 2**31 - 1
        self._h2.local_settings = Settings(client=False, initial_values=settings)
        # Taken as current values, these are never acknowledged as changes: the
        # header list limit is applied here, to the first request on.
        self._h2.decoder.max_header_list_size = self.server.max_header_list_size
        self._h2.increment_flow_control_window(CONNECTION_WINDOW_BOOST)
        self._flush()

    def data_received(self, data: bytes) -> None:
        if self._preface_left:
            preface, data = data[: self._preface_left], data[self._preface_left :]
            self._preface_left -= len(preface)
            if not self._receive(preface):
                return
        try:
            pieces = self._frames.split(data)
        except FloodError as exc:
            self._protocol_error(exc, ErrorCodes.ENHANCE_YOUR_CALM)
            return
        except FrameSizeError as exc:
            self._protocol_error(exc, ErrorCodes.FRAME_SIZE_ERROR)
            return
        for kind, piece in pieces:
            if not (self._on_goaway(piece) if kind == GOAWAY else self._receive(piece)):
                return
        self._flush()

    def _receive(self, frames: bytes) -> bool:
        """Hand whole frames to h2 and dispatch its events; False if that ended us."""
        try:
            events = self._h2.receive_data(frames)
        except h2.exceptions.ProtocolError as exc:
            # h2 has queued a GOAWAY; the events of earlier frames in this chunk are lost.
            logger.warning("connection %d: protocol error from client: %s", self.id, exc)
            self._flush()
            if self._transport is not None:
                self._transport.close()
            return False
        for event in events:
            handle = self._events.get(type(event))
            if handle is not None:
                handle(event)
        return True

    def _protocol_error(self, exc: Exception, error_code: int) -> None:
        logger.warning("connection %d: protocol error from client: %s", self.id, exc)
        self.goaway(error_code=error_code)
        if self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._shutdown()

    def _on_request(self, event: h2.events.RequestReceived) -> None:
        stream_id = event.stream_id
        over_limit = len(self._open) >= self.server.max_concurrent_streams
        if over_limit or (self.goaway_sent is not None and stream_id > self.goaway_sent):
            self.streams_refused += 1  # the client may retry it elsewhere
            # The client may have reset it in the same read: h2 closed it already.
            with contextlib.suppress(h2.exceptions.StreamClosedError):
                self._h2.reset_stream(stream_id, ErrorCodes.REFUSED_STREAM)
            return
        headers = [
            (name.decode("latin-1"), value.decode("latin-1")) for name, value in event.headers
        ]
        request = ScriptedRequest(self, stream_id, headers)
        self.streams_opened += 1
        self.requests.append(request)
        self.server.requests.append(request)
        self._open[stream_id] = request
        task = asyncio.get_running_loop().create_task(self._run(request))
        self._tasks[stream_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(stream_id, None))

    def _on_data(self, event: h2.events.DataReceived) -> None:
        request = self._open.get(event.stream_id)
        if request is None:  # defensive: h2 reports DATA only for streams still open
            self._ack(event.stream_id, event.flow_controlled_length)
        else:
            request._on_data(event.data or b"", event.flow_controlled_length)

    def _on_stream_ended(self, event: h2.events.StreamEnded) -> None:
        if request := self._open.get(event.stream_id):
            request.ended = True
            request._readable.set()
            request._finish_if_closed()

    def _on_stream_reset(self, event: h2.events.StreamReset) -> None:
        request = self._open.get(event.stream_id)
        if request is None:
            return
        if event.remote_reset:
            request.client_reset_code = event.error_code
            request.reset_by_client.set()
        else:  # h2 reset the stream itself for a stream-level protocol error
            request.reset_code = event.error_code
        if task := self._tasks.get(event.stream_id):
            task.cancel()
        request._finish_if_closed()

    def _on_ping(self, event: h2.events.PingReceived) -> None:
        self.pings_received += 1
        self.ping_times.append(asyncio.get_running_loop().time())

    def _on_ping_ack(self, event: h2.events.PingAckReceived) -> None:
        self.ping_acks_received.append(event.ping_data)

    def _on_settings_ack(self, event: h2.events.SettingsAcknowledged) -> None:
        self.settings_acked += 1

    def _on_goaway(self, payload: bytes) -> bool:
        """Note the client's GOAWAY; False if it was malformed (and ended us)."""
        if len(payload) < 8:
            self._protocol_error(
                ValueError("GOAWAY shorter than 8 bytes"), ErrorCodes.FRAME_SIZE_ERROR
            )
            return False
        # last_stream_id (4 bytes), then the error code: the streams we serve are
        # the client's own, so only the code is of interest.
        self.goaway_received = int.from_bytes(payload[4:8], "big")
        return True

    async def _run(self, request: ScriptedRequest) -> None:
        try:
            await self.server.handler(request)
        except Exception:
            logger.exception(
                "connection %d: handler failed on stream %d", self.id, request.stream_id
            )
            if not request.closed:
                request.reset(ErrorCodes.INTERNAL_ERROR)

    async def _send_window(self, request: ScriptedRequest) -> int:
        """Wait until the client's windows let ``request`` send at least one byte."""
        while True:
            request._check_open()
            window = self._h2.local_flow_control_window(request.stream_id)
            if window > 0:
                return window
            await self._window_changed.wait()

    def _notify_window(self) -> None:
        # A fresh Event per change wakes every sender without a lost-wakeup race.
        self._window_changed.set()
        self._window_changed = asyncio.Event()

    def _ack(self, stream_id: int, size: int) -> None:
        if size and not self.closed:
            self._h2.acknowledge_received_data(size, stream_id)

    def _stream_finished(self, request: ScriptedRequest) -> None:
        self._open.pop(request.stream_id, None)
        self._notify_window()  # wakes senders so they notice the stream is gone

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data and self._hold_ping_acks:
            data, acks = _take_ping_acks(data)
            self._held_acks += acks
        self._write(data)

    def _write(self, data: bytes) -> None:
        if self._corked is not None:
            self._corked += data
        elif data and self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def _shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.closed_at = asyncio.get_running_loop().time()
        for task in self._tasks.values():
            task.cancel()
        for request in list(self._open.values()):
            request._finish_if_closed()
        self._notify_window()


class ScriptedUpstream:
    """An HTTP/2 server whose behaviour each test scripts through ``handler``.

    With ``ssl_context`` it speaks TLS and sets ALPN to ``alpn_protocols`` on that context
    (pass ``None`` to keep the context's own; Python cannot read ALPN back from a context).
    Without it, it speaks h2c with prior knowledge.
    """

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_concurrent_streams: int = 100,
        initial_window_size: int = 65535,
        auto_ping_ack: bool = True,
        alpn_protocols: Sequence[str] | None = ("h2",),
        max_header_list_size: int = DEFAULT_MAX_HEADER_LIST_SIZE,
    ) -> None:
        self.handler: Handler = handler or echo_handler
        #: Advertised and enforced as h2 enforces it: a request head over it ends
        #: the connection with GOAWAY ENHANCE_YOUR_CALM, as many servers do.
        self.max_header_list_size = max_header_list_size
        self.ssl_context = ssl_context
        self.host = host
        self.port = port
        self.max_concurrent_streams = max_concurrent_streams
        self.initial_window_size = initial_window_size
        self.auto_ping_ack = auto_ping_ack
        if ssl_context is not None and alpn_protocols is not None:
            ssl_context.set_alpn_protocols(list(alpn_protocols))
        self.connections: list[ScriptedConnection] = []
        self.requests: list[ScriptedRequest] = []
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"

    @property
    def open_streams(self) -> int:
        return sum(len(conn._open) for conn in self.connections)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: ScriptedConnection(self), self.host, self.port, ssl=self.ssl_context
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Close the listener and every connection; return once no handler task is left."""
        if self._server is None:
            return
        self._server.close()
        tasks = [task for conn in self.connections for task in conn._tasks.values()]
        for conn in self.connections:
            conn.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Poll ``predicate`` until it holds; raise TimeoutError after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            if loop.time() >= deadline:
                raise TimeoutError(f"condition not met within {timeout} s")
            await asyncio.sleep(0.005)

    async def __aenter__(self) -> ScriptedUpstream:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
