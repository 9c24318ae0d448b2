"""The HTTP/1.1 side: one :class:`ClientConnection` per accepted socket.

An ``asyncio.BufferedProtocol`` fed to httptools (llhttp, strict RFC 9112 parsing). Each
parsed request becomes a :class:`~h2ping.http1.messages.Request` handed to a handler (the
exchange), which answers through the request's :class:`~h2ping.http1.messages.ResponseWriter`.
Nothing here knows about HTTP/2.

Requests on one connection are answered in order (RFC 9112 section 9.3.2): a
pipelined request waits, with reading paused, until the one before it is done.
One timer per connection bounds both how long a request head may take to arrive
(``header_timeout``, then 408) and how long a kept-alive connection may sit idle.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from typing import Protocol, cast

import httptools

from ..fields import Header
from ..sockets import batch_writer, set_nodelay, set_tcp_keepalive
from ..stats import Stats
from ..timers import LazyTimer
from .messages import (
    MAX_HEAD_BYTES,
    MAX_TARGET_BYTES,
    Request,
    RequestRejected,
    ResponseWriter,
    check_head,
)

log = logging.getLogger("h2ping.listener")

_H2_PREFACE = b"PRI * HTTP/2.0\r\n"

#: The most one read takes from a client's socket (uvloop's own reads take 256 KiB).
#: An upload whose stream cannot send is paused with at most one read beyond
#: SEND_HIGH_WATER held here; the rest waits in the kernel's socket buffer.
READ_SIZE = 128 * 1024


class RequestHandler(Protocol):
    """What the listener needs from whoever forwards a request.

    The handler counts the request's outcome, except for a head the listener
    refuses (no handler exists then): ``cancel`` means the client went away,
    ``reject`` that the listener answers the request itself (its body was bad).
    """

    def start(self) -> None: ...
    def feed_body(self, data: bytes) -> None: ...
    def end_body(self) -> None: ...
    def client_drained(self) -> None: ...
    def cancel(self) -> None: ...
    def reject(self, status: int) -> None: ...


HandlerFactory = Callable[[Request, ResponseWriter], RequestHandler]


class Registry(Protocol):
    """Where a connection enters when made and leaves when lost (a set will do)."""

    def add(self, client: ClientConnection, /) -> None: ...
    def discard(self, client: ClientConnection, /) -> None: ...


class ReadState(enum.Enum):
    """What the next bytes read from a client are, one state at a time."""

    BETWEEN = "between requests"  # the next byte begins a request head
    HEAD = "head"  # a request head is arriving (header_timeout runs)
    BODY = "body"  # the body of the request being read (or none: its end is due)
    #: An Upgrade request with a body: llhttp calls the bytes after the head
    #: "upgraded", so the body waits for a fresh parser, primed with a synthetic
    #: head whose callbacks are ignored (UPGRADED_BODY).
    UPGRADING = "upgrading"
    UPGRADED_BODY = "upgraded body"
    REJECTED = "rejected"  # a malformed request awaits its answer; nothing more is read
    CLOSED = "closed"  # closing or closed: nothing more is read or written

    # Members are singletons: hash them by identity. Enum's own hash runs Python
    # code, and the move table below is looked up several times per request.
    __hash__ = object.__hash__


_S = ReadState
_CLOSED = ReadState.CLOSED  # a module name: tested several times per request

#: Every move between read states, in one view: ``ClientConnection._enter`` makes
#: these and refuses the rest. Refused are the moves the parser asks for after
#: reading has ended (a response closed the connection while the parser went on
#: through the same bytes). Any state but CLOSED may close: the client may go,
#: and the proxy may stop, at any time.
_MOVES: dict[ReadState, frozenset[ReadState]] = {
    # HEAD at a request's first byte; REJECTED for bytes after a request that
    # asked to close (llhttp reads no further)
    _S.BETWEEN: frozenset({_S.HEAD, _S.REJECTED, _S.CLOSED}),
    # BODY once the head is whole; REJECTED for a bad head, too large or too slow
    _S.HEAD: frozenset({_S.BODY, _S.REJECTED, _S.CLOSED}),
    # BETWEEN at the body's end (no body: at once); UPGRADING at the end of an
    # Upgrade's head that has a body; REJECTED for a bad body
    _S.BODY: frozenset({_S.BETWEEN, _S.UPGRADING, _S.REJECTED, _S.CLOSED}),
    # UPGRADED_BODY in the same read, as a fresh parser takes the body
    _S.UPGRADING: frozenset({_S.UPGRADED_BODY, _S.CLOSED}),
    # BETWEEN at the body's end; REJECTED for a bad body
    _S.UPGRADED_BODY: frozenset({_S.BETWEEN, _S.REJECTED, _S.CLOSED}),
    # once the earlier responses are out: the answer, then CLOSED
    _S.REJECTED: frozenset({_S.CLOSED}),
    _S.CLOSED: frozenset(),
}


def _nothing() -> None:
    pass


def _discard(parts: list[bytes]) -> None:
    pass


class OutputFlusher:
    """Writes the output queued on client connections, each in one write, from a
    single callback per loop iteration: many streams' events in one iteration cost
    one scheduled callback, not one per connection."""

    __slots__ = ("_dirty", "_loop", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._dirty: list[ClientConnection] = []
        self._scheduled = False

    def add(self, conn: ClientConnection) -> None:
        self._dirty.append(conn)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush_all)

    def _flush_all(self) -> None:
        self._scheduled = False
        dirty, self._dirty = self._dirty, []
        for conn in dirty:
            try:
                conn._flush()
            except Exception:  # one connection's bug must not hold back the others' output
                log.exception("writing to a client connection failed")
                conn.abort()  # (what failed was taken off its queue)


class ListenerLimits:
    """What the client connections of one listener share: time limits (seconds),
    and the one buffer of READ_SIZE that their reads land in. One suffices: each
    read is parsed before the next, and what the parser hands on is a copy."""

    __slots__ = ("header_timeout", "idle_timeout", "read_buffer")

    def __init__(self, header_timeout: float, idle_timeout: float) -> None:
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.read_buffer = memoryview(bytearray(READ_SIZE))


class ClientConnection(asyncio.BufferedProtocol):
    """One accepted HTTP/1.1 connection."""

    def __init__(
        self,
        handler_factory: HandlerFactory,
        registry: Registry,
        stats: Stats,
        limits: ListenerLimits,
        flusher: OutputFlusher | None = None,
    ) -> None:
        self._factory = handler_factory
        self._registry = registry
        self._stats = stats
        self._limits = limits
        self._read_buffer = limits.read_buffer
        # Kept: asyncio.get_running_loop() makes a getpid() system call (its
        # fork check), which cost a tenth of the CPU of streamed responses.
        self._loop = asyncio.get_running_loop()
        self._flusher = flusher or OutputFlusher(self._loop)
        self._transport: asyncio.Transport | None = None
        self._write_batch: Callable[[list[bytes]], None]  # set with the transport
        # Made at a request's first bytes and let go between keep-alive requests
        # (see _feed): a parser is some 900 bytes, a connection waiting on its
        # response or idle needs none, and a new one costs a third of a microsecond.
        self._parser: httptools.HttpRequestParser | None = None
        self._parser_done = False  # the parser's last request ended, and kept the connection
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self.state = ReadState.BETWEEN
        self._reading_paused = False
        self.write_paused = False
        self.flushes = 0
        # One timer per connection for the head and idle deadlines, in turn.
        self._timer = LazyTimer(self._loop, self._on_timer)
        self._on_deadline: Callable[[], None] = self._on_header_timeout
        # Parse state of the request being read.
        self._url = b""
        self._headers: list[Header] = []
        self._head_bytes = 0  # bytes read while a head is unfinished (bounds partial heads)
        self._head_size = 0  # exact size of the parsed request line and fields
        #: The request whose body is being read: set at its head's end, cleared at its own.
        self._reading: tuple[RequestHandler, Request] | None = None
        self._rejection = (400, "bad request")  # what REJECTED answers once its turn comes
        self._raised: RequestRejected | None = None  # by a parser callback, as it left
        # Requests whose responses are pending, oldest (the one being answered) first.
        # Reading pauses once a request waits behind another, so this holds the
        # requests of one read at most (pipelined ones), usually one or two: a
        # list, as a deque costs 600 bytes more per connection.
        self._pending: list[tuple[RequestHandler, ResponseWriter]] = []

    @property
    def idle(self) -> bool:
        return not self._pending and self.state is not ReadState.HEAD

    def _enter(self, state: ReadState) -> bool:
        """Move to ``state`` if the table of moves (``_MOVES``) allows it from here;
        every change of state goes through here. False if refused."""
        if state in _MOVES[self.state]:
            self.state = state
            return True
        return False

    # ----------------------------------------------------------------- protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self._write_batch = batch_writer(self._transport)
        self._registry.add(self)
        sock = transport.get_extra_info("socket")
        set_tcp_keepalive(sock)
        set_nodelay(sock)
        self._arm_timer(self._limits.header_timeout, self._on_header_timeout)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._feed(self._read_buffer[:nbytes])

    def _feed(self, data: bytes | memoryview) -> None:
        state = self.state
        if state is ReadState.CLOSED or state is ReadState.REJECTED:
            return
        if state is ReadState.BETWEEN or state is ReadState.HEAD:
            self._head_bytes += len(data)
        parser = self._parser
        if parser is None:
            parser = self._parser = httptools.HttpRequestParser(self)
        self._parser_done = False
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            self._after_upgrade(data[exc.args[0] :])
            return
        except httptools.HttpParserCallbackError as exc:
            # httptools sets __context__ to what our callback raised; a rejection
            # is also kept by the callback, so it is told right without that.
            raised, self._raised = self._raised or exc.__context__, None
            if isinstance(raised, RequestRejected):
                self._reject(raised.status, raised.reason)
            else:
                log.error("internal error while reading a request", exc_info=raised or exc)
                self._reject(500, "internal error while reading the request")
            return
        except httptools.HttpParserError as exc:
            start = bytes(data[:16])
            if start.startswith(_H2_PREFACE[:3]) and _H2_PREFACE.startswith(start):
                self._reject(400, "HTTP/2 connection preface on an HTTP/1.1 port")
            else:
                self._reject(400, f"malformed HTTP/1.1 request: {exc}")
            return
        if self.state is ReadState.HEAD and self._head_bytes > MAX_HEAD_BYTES:
            self._reject(431, f"request head larger than {MAX_HEAD_BYTES} bytes")
        elif self._parser_done and self.state is ReadState.BETWEEN:
            # At a keep-alive request's end a parser is as a new one is. (After
            # one that asked to close it is not: it refuses what follows.)
            self._parser = None

    def eof_received(self) -> bool:
        # A client that closes its side has gone away (aiohttp, and nearly every
        # client, never half-closes to wait for an answer); as nginx does, cancel
        # its requests rather than keep a long upstream call running for nobody.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._enter(ReadState.CLOSED)
        # What refers back to this connection goes: the timer's callback, the
        # parser's, the transport's. Then it is freed as its last user lets go,
        # not by the cyclic collector, whose full passes walk every live
        # connection's objects and stall the loop under thousands of clients.
        self._timer.close()
        self._on_deadline = _nothing
        self._parser = None
        self._transport = None
        self._write_batch = _discard
        self._registry.discard(self)
        self._out.clear()
        pending, self._pending = self._pending, []
        for handler, _ in pending:
            handler.cancel()
        if self._reading is not None:
            self._reading[0].cancel()
            self._reading = None

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._pending:
            self._pending[0][0].client_drained()

    # ----------------------------------------------------------------- parser callbacks

    def on_message_begin(self) -> None:
        if self.state is ReadState.UPGRADED_BODY:
            return
        self._enter(ReadState.HEAD)
        self._url = b""
        self._headers = []
        self._head_size = 0
        if not self._pending:
            # The idle wait is over; the head itself must now arrive in time.
            self._arm_timer(self._limits.header_timeout, self._on_header_timeout)

    def on_url(self, url: bytes) -> None:
        if self.state is ReadState.UPGRADED_BODY:
            return
        self._url += url
        self._head_size += len(url)
        if len(self._url) > MAX_TARGET_BYTES:
            raise self._raising(
                RequestRejected(414, f"request target longer than {MAX_TARGET_BYTES} bytes")
            )

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.state is ReadState.UPGRADED_BODY:
            return
        # Lowercased once here: HTTP/2 wants it, and every later rule compares it.
        self._headers.append((name.lower(), value))
        self._head_size += len(name) + len(value) + 4  # ": " and CRLF
        if self._head_size > MAX_HEAD_BYTES:
            raise self._raising(
                RequestRejected(431, f"request head larger than {MAX_HEAD_BYTES} bytes")
            )

    def _raising(self, rejection: RequestRejected) -> RequestRejected:
        self._raised = rejection
        return rejection

    def on_headers_complete(self) -> None:
        if self.state is ReadState.UPGRADED_BODY:
            return
        parser = self._parser
        assert parser is not None  # it is feeding us
        self._head_bytes = 0
        if not self._pending:
            self._cancel_timer()
        method = parser.get_method()
        version = parser.get_http_version()
        try:
            check_head(method, version, self._headers)
        except RequestRejected as rejection:
            self._raised = rejection
            raise
        self._stats.request_received()
        request = Request(method, self._url, self._headers, version, parser.should_keep_alive())
        request.upgrade = parser.should_upgrade()
        writer = ResponseWriter(self, request)
        handler = self._factory(request, writer)
        self._enter(ReadState.BODY)
        self._reading = (handler, request)
        self._pending.append((handler, writer))
        if len(self._pending) == 1:
            handler.start()
        else:
            # Pipelined: answer in order; read no further until it is our turn.
            self.pause_reading()

    def on_body(self, body: bytes) -> None:
        if self._reading is not None:
            self._reading[0].feed_body(body)

    def on_message_complete(self) -> None:
        if self._reading is None:
            return
        handler, request = self._reading
        if request.upgrade and request.has_body and self.state is not ReadState.UPGRADED_BODY:
            # llhttp stops here and calls the rest "upgraded"; the body is ours.
            self._enter(ReadState.UPGRADING)
            return
        self._enter(ReadState.BETWEEN)
        self._reading = None
        request.body_complete = True
        self._parser_done = request.wants_keep_alive
        handler.end_body()

    def _after_upgrade(self, rest: bytes | memoryview) -> None:
        """``Upgrade`` is hop-by-hop and is not acted on: keep reading HTTP/1.1."""
        self._parser = httptools.HttpRequestParser(self)
        if self.state is ReadState.UPGRADING and self._reading is not None:
            request = self._reading[1]
            framing = (
                b"Transfer-Encoding: chunked"
                if request.chunked
                else b"Content-Length: %d" % (request.content_length or 0)
            )
            self._enter(ReadState.UPGRADED_BODY)
            self._parser.feed_data(b"POST / HTTP/1.1\r\n" + framing + b"\r\n\r\n")
        if rest:
            self._feed(rest)

    # ----------------------------------------------------------------- timers

    def _arm_timer(self, delay: float, callback: Callable[[], None]) -> None:
        if self.state is _CLOSED:
            return
        self._on_deadline = callback
        self._timer.set(self._loop.time() + delay)

    def _cancel_timer(self) -> None:
        self._timer.clear()

    def _stop_timer(self) -> None:
        self._timer.cancel()

    def _on_timer(self) -> None:
        if self.state is not _CLOSED:
            self._on_deadline()

    def _on_header_timeout(self) -> None:
        if self.state is ReadState.HEAD:
            self._reject(408, "request head not received in time")
        elif not self._pending:
            self.close()  # connected but never sent a byte

    def _on_idle_timeout(self) -> None:
        if self.idle:
            log.debug(
                "closing a kept-alive client connection idle for %gs", self._limits.idle_timeout
            )
            self.close()

    # ----------------------------------------------------------------- output

    def send(self, *parts: bytes) -> None:
        """Queue bytes; they go out in one write at the end of this loop turn."""
        if self.state is _CLOSED:
            return
        self._out.extend(parts)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._flusher.add(self)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and self._transport is not None and not self._transport.is_closing():
            out, self._out = self._out, []
            self.flushes += 1
            self._write_batch(out)

    def queued(self) -> int:
        return len(self._out)

    def unqueue(self, mark: int) -> None:
        """Drop output queued since ``mark`` (a response being retracted)."""
        del self._out[mark:]

    def response_done(self, writer: ResponseWriter) -> None:
        if not self._pending or self._pending[0][1] is not writer:
            return
        self._pending.pop(0)
        if not writer.keep_alive:
            self.close()
            return
        if self._pending:
            self._pending[0][0].start()
        elif self.state is ReadState.REJECTED:
            self._send_rejection()
            return
        elif self.state is ReadState.HEAD:
            # A head that began while earlier requests were being answered: its
            # time to arrive whole starts now.
            self._arm_timer(self._limits.header_timeout, self._on_header_timeout)
        else:
            self._arm_timer(self._limits.idle_timeout, self._on_idle_timeout)
        if len(self._pending) <= 1:
            self.resume_reading()

    def pause_reading(self) -> None:
        if not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._reading_paused and self._transport is not None and self.state is not _CLOSED:
            self._reading_paused = False
            self._transport.resume_reading()

    def close(self) -> None:
        """Close after the queued output is written."""
        if self._transport is None or not self._enter(ReadState.CLOSED):
            return
        self._stop_timer()
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        """Cut the connection after handing the socket what is queued: the client
        sees the response end early, not its start vanish."""
        self._flush()
        self._enter(ReadState.CLOSED)
        self._stop_timer()
        self._out.clear()
        if self._transport is not None:
            self._transport.abort()

    def close_if_idle(self) -> bool:
        if self.idle:
            self.close()
            return True
        return False

    # ----------------------------------------------------------------- rejection

    def _drop_unfinished_request(self, status: int) -> None:
        """Give up the request whose body was still arriving (answered ``status``)."""
        if self._reading is None:
            return
        handler, _ = self._reading
        self._reading = None
        handler.reject(status)
        for i, (pending_handler, writer) in enumerate(self._pending):
            if pending_handler is handler:
                del self._pending[i]
                if writer.started:
                    self.abort()  # its response is already on the wire: truncate
                elif i == 0 and self._pending:
                    self._pending[0][0].start()
                break

    def _reject(self, status: int, text: str) -> None:
        """A request we will not forward: answer it once earlier responses are out,
        then close (what follows it on the connection cannot be trusted)."""
        if not self._enter(ReadState.REJECTED):
            # A response closed the connection while the parser went on through
            # the same bytes: there is nobody to answer, nor a 400 to count.
            return
        # Set first: a response that ends while the handlers are told sends it.
        self._rejection = (status, text)
        log.info("client request rejected: %d %s", status, text)
        if self._reading is None:  # a head: it ends here; a body's handler counts it
            self._stats.head_rejected(status)
        else:
            self._stats.count_response(status)
        self._cancel_timer()
        self.pause_reading()
        self._drop_unfinished_request(status)
        if not self._pending and self.state is ReadState.REJECTED:
            self._send_rejection()

    def _send_rejection(self) -> None:
        status, text = self._rejection
        request = Request(b"GET", b"", [], "1.1", False)
        request.body_complete = True
        ResponseWriter(self, request).send_error(status, text)
        self.close()
