"""The HTTP/1.1 side: parse requests from local clients, write their responses.

One :class:`ClientConnection` per accepted socket, an ``asyncio.Protocol`` fed to
httptools (llhttp, strict RFC 9112 parsing). Each parsed request becomes a
:class:`Request` and is handed to a handler (the exchange); the handler answers
through the request's :class:`ResponseWriter`. Nothing here knows about HTTP/2.

Requests on one connection are answered in order (RFC 9112 section 9.3.2): a
pipelined request waits, with reading paused, until the one before it is done.
"""

from __future__ import annotations

import asyncio
import http
import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol, cast

import httptools

from .headers import Header
from .sockets import set_nodelay, set_tcp_keepalive
from .stats import Stats

log = logging.getLogger("h2ping.listener")

#: Largest request head (request line and header fields) we accept; beyond it 431.
MAX_HEAD_BYTES = 64 * 1024
#: Pause reading the client once this much of its body waits to be sent upstream.
RECV_HIGH_WATER = 256 * 1024


class RequestHandler(Protocol):
    """What the listener needs from whoever forwards a request."""

    def start(self) -> None: ...
    def feed_body(self, data: bytes) -> None: ...
    def end_body(self) -> None: ...
    def client_drained(self) -> None: ...
    def cancel(self) -> None: ...


class Request:
    """One parsed HTTP/1.1 request head, plus what its framing implies."""

    __slots__ = (
        "body_complete",
        "expect_continue",
        "has_body",
        "headers",
        "http_version",
        "keep_alive",
        "method",
        "target",
    )

    def __init__(
        self,
        method: bytes,
        target: bytes,
        headers: list[Header],
        http_version: str,
        keep_alive: bool,
    ) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.http_version = http_version
        self.keep_alive = keep_alive
        self.expect_continue = False
        self.has_body = False
        self.body_complete = False
        for name, value in headers:
            lname = name.lower()
            if lname == b"content-length":
                self.has_body = value.strip() != b"0"
            elif lname == b"transfer-encoding":
                self.has_body = True
            elif lname == b"expect" and value.strip().lower() == b"100-continue":
                self.expect_continue = True

    def describe(self) -> str:
        """``METHOD /path`` for log lines (the query may hold secrets: left out)."""
        path = self.target.split(b"?", 1)[0][:200]
        return f"{self.method.decode('latin-1')} {path.decode('latin-1')}"


HandlerFactory = Callable[[Request, "ResponseWriter"], RequestHandler]


class ResponseWriter:
    """Writes one response to the client, choosing its HTTP/1.1 framing."""

    __slots__ = ("_chunked", "_conn", "_no_body", "_request", "finished", "started")

    def __init__(self, conn: ClientConnection, request: Request) -> None:
        self._conn = conn
        self._request = request
        self._chunked = False
        self._no_body = False
        self.started = False
        self.finished = False

    @property
    def paused(self) -> bool:
        """True while the client's socket buffer is full: stop handing it data."""
        return self._conn.write_paused

    def send_continue(self) -> None:
        if not self.started and self._request.http_version == "1.1":
            self._conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")

    def start(self, status: int, headers: list[Header], *, has_body: bool = True) -> None:
        """Status line and fields. Without ``Content-Length`` the body is chunked
        (HTTP/1.1) or delimited by closing the connection (HTTP/1.0)."""
        request = self._request
        self.started = True
        self._no_body = request.method == b"HEAD" or status in (204, 304) or 100 <= status < 200
        has_length = any(name == b"content-length" for name, _ in headers)
        if not self._no_body and not has_length:
            if request.http_version == "1.1" and has_body:
                self._chunked = True
                headers = [*headers, (b"transfer-encoding", b"chunked")]
            elif has_body:
                request.keep_alive = False
            else:
                headers = [*headers, (b"content-length", b"0")]
        if not request.body_complete:
            # The rest of the request body would be read as the next request.
            request.keep_alive = False
        if not request.keep_alive:
            headers = [*headers, (b"connection", b"close")]
        elif request.http_version == "1.0":
            headers = [*headers, (b"connection", b"keep-alive")]
        try:
            reason = http.HTTPStatus(status).phrase.encode()
        except ValueError:
            reason = b""
        parts = [b"HTTP/1.1 %d %s\r\n" % (status, reason)]
        for name, value in headers:
            parts += (name, b": ", value, b"\r\n")
        parts.append(b"\r\n")
        self._conn.send(b"".join(parts))

    def write(self, data: bytes) -> None:
        if self._no_body or not data or self.finished:
            return
        if self._chunked:
            self._conn.send(b"%x\r\n" % len(data), data, b"\r\n")
        else:
            self._conn.send(data)

    def end(self) -> None:
        if self.finished:
            return
        self.finished = True
        if self._chunked:
            self._conn.send(b"0\r\n\r\n")
        self._conn.response_done(self)

    def abort(self) -> None:
        """Cut the connection so the client sees a truncated response, never a
        clean end of a partial body."""
        if not self.finished:
            self.finished = True
            self._conn.abort()

    def send_error(self, status: int, text: str, proxy_status: str | None = None) -> None:
        """A complete error response with a one-line plain-text body."""
        if self.started:
            self.abort()
            return
        body = text.encode("utf-8", "replace") + b"\n"
        headers: list[Header] = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", b"%d" % len(body)),
        ]
        if proxy_status is not None:
            headers.append((b"proxy-status", proxy_status.encode("ascii", "replace")))
        if status >= 500 or status in (400, 408, 413, 414, 431):
            self._request.keep_alive = False
        self.start(status, headers)
        self.write(body)
        self.end()

    def pause_reading(self) -> None:
        self._conn.pause_reading()

    def resume_reading(self) -> None:
        self._conn.resume_reading()


class _HeadTooLarge(Exception):
    pass


class ClientConnection(asyncio.Protocol):
    """One accepted HTTP/1.1 connection."""

    def __init__(
        self, handler_factory: HandlerFactory, registry: set[ClientConnection], stats: Stats
    ) -> None:
        self._factory = handler_factory
        self._registry = registry
        self._stats = stats
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._closing = False
        self._reading_paused = False
        self.write_paused = False
        # Parse state of the request being read.
        self._url = b""
        self._headers: list[Header] = []
        self._head_bytes = 0  # bytes read while a head is unfinished (bounds partial heads)
        self._head_size = 0  # exact size of the parsed request line and fields
        self._in_head = False
        self._reading: tuple[RequestHandler, Request] | None = None
        self._rejection: tuple[int, str] | None = None  # parse error awaiting its turn
        # Requests whose responses are pending, oldest (the one being answered) first.
        self._pending: deque[tuple[RequestHandler, ResponseWriter]] = deque()

    @property
    def idle(self) -> bool:
        return not self._pending and not self._in_head

    # ----------------------------------------------------------------- protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self._registry.add(self)
        sock = transport.get_extra_info("socket")
        set_tcp_keepalive(sock)
        set_nodelay(sock)

    def data_received(self, data: bytes) -> None:
        if self._closing or self._rejection is not None:
            return
        if self._reading is None or self._in_head:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            # Upgrade is hop-by-hop and was not forwarded: carry on with a fresh
            # parser on whatever followed the request.
            self._parser = httptools.HttpRequestParser(self)
            rest = data[exc.args[0] :]
            if rest:
                self.data_received(rest)
            return
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _HeadTooLarge):
                self._reject(431, "request header fields too large")
            else:
                log.exception("internal error while reading a request")
                self._reject(500, "internal error while reading the request")
            return
        except httptools.HttpParserError as exc:
            self._reject(400, f"malformed HTTP/1.1 request: {exc}")
            return
        if self._in_head and self._head_bytes > MAX_HEAD_BYTES:
            self._reject(431, "request header fields too large")

    def eof_received(self) -> bool:
        # A client that closes its side has gone away (aiohttp, and nearly every
        # client, never half-closes to wait for an answer); as nginx does, cancel
        # its requests rather than keep a long upstream call running for nobody.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._registry.discard(self)
        self._out.clear()
        pending, self._pending = self._pending, deque()
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
        self._in_head = True
        self._url = b""
        self._headers = []
        self._head_size = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_size += len(url)
        if self._head_size > MAX_HEAD_BYTES:
            raise _HeadTooLarge

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))
        self._head_size += len(name) + len(value) + 4  # ": " and CRLF
        if self._head_size > MAX_HEAD_BYTES:
            raise _HeadTooLarge

    def on_headers_complete(self) -> None:
        parser = self._parser
        self._in_head = False
        self._head_bytes = 0
        request = Request(
            parser.get_method(),
            self._url,
            self._headers,
            parser.get_http_version(),
            parser.should_keep_alive(),
        )
        writer = ResponseWriter(self, request)
        handler = self._factory(request, writer)
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
        if self._reading is not None:
            handler, request = self._reading
            self._reading = None
            request.body_complete = True
            handler.end_body()

    # ----------------------------------------------------------------- output

    def send(self, *parts: bytes) -> None:
        """Queue bytes; they go out in one write at the end of this loop turn."""
        if self._closing:
            return
        self._out.extend(parts)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and self._transport is not None and not self._transport.is_closing():
            out, self._out = self._out, []
            self._transport.writelines(out)

    def response_done(self, writer: ResponseWriter) -> None:
        if not self._pending or self._pending[0][1] is not writer:
            return
        self._pending.popleft()
        if not writer._request.keep_alive:
            self.close()
        elif self._pending:
            self._pending[0][0].start()
        elif self._rejection is not None:
            self._send_rejection()
        if len(self._pending) <= 1 and self._rejection is None:
            self.resume_reading()

    def pause_reading(self) -> None:
        if not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._reading_paused and self._transport is not None and not self._closing:
            self._reading_paused = False
            self._transport.resume_reading()

    def close(self) -> None:
        """Close after the queued output is written."""
        if self._transport is None or self._closing:
            return
        self._closing = True
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._closing = True
        self._out.clear()
        if self._transport is not None:
            self._transport.abort()

    def close_if_idle(self) -> bool:
        if self.idle:
            self.close()
            return True
        return False

    def _drop_unfinished_request(self) -> None:
        """Give up the request whose body was still arriving."""
        if self._reading is None:
            return
        handler, _ = self._reading
        self._reading = None
        handler.cancel()
        for i, (pending_handler, writer) in enumerate(self._pending):
            if pending_handler is handler:
                del self._pending[i]
                if writer.started:
                    self.abort()  # its response is already on the wire: truncate
                elif i == 0 and self._pending:
                    self._pending[0][0].start()
                break

    def _reject(self, status: int, text: str) -> None:
        """A request we cannot parse: answer it once earlier responses are out, close."""
        log.info("client request rejected: %d %s", status, text)
        self._stats.rejected += 1
        self._stats.count_response(status)
        self._in_head = False
        self.pause_reading()
        self._drop_unfinished_request()
        self._rejection = (status, text)
        if not self._pending:
            self._send_rejection()

    def _send_rejection(self) -> None:
        status, text = self._rejection or (400, "bad request")
        request = Request(b"GET", b"", [], "1.1", False)
        request.body_complete = True
        ResponseWriter(self, request).send_error(status, text)
        self.close()
