"""HTTP/1.1 messages (RFC 9112): what a request head must satisfy, and how a
response is framed for the client.

The parsing itself is llhttp's (through httptools), which already rejects bad
tokens, control characters, obs-fold, bare CR, conflicting or malformed
Content-Length and a Content-Length with Transfer-Encoding. :func:`check_head`
adds the rules llhttp leaves to the application: the versions and transfer
codings we support, ``CONNECT``, ``Host``, and the size limits.
"""

from __future__ import annotations

from typing import Protocol

from ..fields import Header

#: Limits on a request head. Beyond them: 414 for the target, 431 for the fields.
MAX_TARGET_BYTES = 16 * 1024
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADER_COUNT = 256
#: Informational (1xx) responses taken ahead of one final response, as Go's
#: transport takes; more is a flood, and fails the request.
MAX_INFORMATIONAL = 5

_SUPPORTED_VERSIONS = ("1.0", "1.1")

#: What a Host value may contain: uri-host and port (RFC 3986 reg-name, IP literals,
#: pct-encoding), the same bytes Go's net/http accepts.
_HOST_BYTES = frozenset(
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!$%&'()*+,-.:;=[]_~"
)


#: Reason phrases of the usual statuses, so that most processes never load
#: ``http.HTTPStatus`` (an enum of 60-odd members, ~0.1 MB); it answers for the rest.
#: Only phrases every supported Python spells alike (3.13 renamed 413, 414, 416, 422).
_REASONS = {
    200: b"OK", 201: b"Created", 202: b"Accepted", 204: b"No Content",
    206: b"Partial Content", 301: b"Moved Permanently", 302: b"Found",
    304: b"Not Modified", 307: b"Temporary Redirect", 308: b"Permanent Redirect",
    400: b"Bad Request", 401: b"Unauthorized", 403: b"Forbidden", 404: b"Not Found",
    405: b"Method Not Allowed", 408: b"Request Timeout", 409: b"Conflict",
    429: b"Too Many Requests", 431: b"Request Header Fields Too Large",
    500: b"Internal Server Error", 501: b"Not Implemented", 502: b"Bad Gateway",
    503: b"Service Unavailable", 504: b"Gateway Timeout",
    505: b"HTTP Version Not Supported",
}  # fmt: skip


def reason_phrase(status: int) -> bytes:
    """The status line's reason phrase; empty for a status without a name."""
    reason = _REASONS.get(status)
    if reason is None:
        import http

        try:
            reason = http.HTTPStatus(status).phrase.encode()
        except ValueError:
            reason = b""
    return reason


def loggable_target(target: bytes) -> bytes:
    """A request target as logs show it: without its query (it may hold secrets)
    or fragment, nor the userinfo of an absolute-form target (``user:password@``)."""
    for mark in (b"?", b"#"):
        target = target.split(mark, 1)[0]
    scheme_end = target.find(b"://")
    if scheme_end > 0:
        start = scheme_end + 3
        end = target.find(b"/", start)
        at = target.rfind(b"@", start, len(target) if end < 0 else end)
        if at >= 0:
            target = target[:start] + target[at + 1 :]
    return target


class RequestRejected(Exception):
    """The request cannot be forwarded; ``status`` and ``reason`` go to the client."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason


#: Where a response began in its connection's output; only the output reads it.
OutputMark = tuple[int, int]

#: A body chunk smaller than this is framed into one buffer with its chunk size
#: line and CRLF (a streamed event); a larger one goes as three, uncopied.
JOIN_CHUNK_BELOW = 2048


class ResponseOutput(Protocol):
    """Where a response's bytes queue until the connection writes them: the owner
    of that queue, so the one to say whether a response can still be taken back."""

    def send(self, *parts: bytes) -> None: ...
    def mark(self) -> OutputMark: ...
    def take_back(self, mark: OutputMark) -> bool: ...


class ReadSwitch(Protocol):
    """Whether the client's socket is read (its connection's reader owns it): a
    request body the upstream cannot take yet pauses it."""

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


class ResponseSink(Protocol):
    """The connection a :class:`ResponseWriter` answers on: its output, its
    reading's switch, whether the client's socket is full, and the end of the
    response's turn."""

    write_paused: bool

    @property
    def output(self) -> ResponseOutput: ...
    @property
    def reader(self) -> ReadSwitch: ...
    def response_done(self, writer: ResponseWriter, keep_alive: bool) -> None: ...
    def abort(self) -> None: ...


def check_head(method: bytes, target: bytes, version: str, headers: list[Header]) -> None:
    """Raise :class:`RequestRejected` for a head llhttp accepted but we must not forward."""
    if version not in _SUPPORTED_VERSIONS:
        raise RequestRejected(505, f"HTTP version {version} not supported: use HTTP/1.1")
    if method == b"CONNECT":
        raise RequestRejected(405, "CONNECT is not supported: h2ping forwards to one upstream")
    if target == b"*" and method != b"OPTIONS":
        # asterisk-form is OPTIONS' alone (RFC 9112 section 3.2.4); HTTP/2 calls
        # any other ``:path *`` malformed (RFC 9113 section 8.3.1).
        raise RequestRejected(400, "request target * is only valid with OPTIONS")
    if len(headers) > MAX_HEADER_COUNT:
        raise RequestRejected(431, f"more than {MAX_HEADER_COUNT} header fields")
    hosts: list[bytes] = []
    codings: list[bytes] = []
    for name, value in headers:  # one pass over the fields for both
        if name == b"host":
            hosts.append(value)
        elif name == b"transfer-encoding":
            codings += [coding.strip().lower() for coding in value.split(b",")]
    check_host(hosts, version)
    if codings and version == "1.0":
        # HTTP/1.0 has no Transfer-Encoding: whoever sent it cannot be trusted to
        # frame the body (RFC 9112 section 6.1), and the connection must close.
        raise RequestRejected(400, "Transfer-Encoding in an HTTP/1.0 request")
    if codings and codings != [b"chunked"]:
        # The body would reach the upstream still encoded, and Transfer-Encoding
        # (hop-by-hop) would not tell it so (RFC 9112 section 6.1).
        raise RequestRejected(501, "transfer coding not implemented: only chunked is supported")


def check_host(hosts: list[bytes], version: str) -> None:
    """RFC 9112 section 3.2: exactly one Host in HTTP/1.1 (at most one in 1.0), and
    a valid one. Two could name different origins to us and to the upstream."""
    if len(hosts) > 1:
        raise RequestRejected(400, "more than one Host header field")
    if not hosts:
        if version == "1.1":
            raise RequestRejected(400, "missing Host header field (required in HTTP/1.1)")
        return
    if not _HOST_BYTES.issuperset(hosts[0].strip(b" \t")):  # llhttp keeps trailing OWS
        raise RequestRejected(400, "malformed Host header field")


class Request:
    """One parsed HTTP/1.1 request head, plus what its framing implies."""

    __slots__ = (
        "body_complete",
        "chunked",
        "content_length",
        "expect_continue",
        "has_body",
        "headers",
        "http_version",
        "method",
        "target",
        "upgrade",
        "wants_keep_alive",
    )

    def __init__(
        self,
        method: bytes,
        target: bytes,
        headers: list[Header],
        http_version: str,
        wants_keep_alive: bool,
        upgrade: bool = False,
    ) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.http_version = http_version
        #: What the client asked for: HTTP/1.1 unless ``Connection: close``, HTTP/1.0
        #: only with ``Connection: keep-alive`` (llhttp's reading). Only asked of;
        #: :func:`keeps_alive` decides.
        self.wants_keep_alive = wants_keep_alive
        self.expect_continue = False
        self.upgrade = upgrade  # llhttp treats the rest of the stream as another protocol
        self.content_length: int | None = None
        self.chunked = False
        self.body_complete = False
        for name, value in headers:  # names are lowercase (the reader's doing)
            if name == b"content-length":
                self.content_length = int(value)  # llhttp has checked the digits
            elif name == b"transfer-encoding":
                self.chunked = True
            elif name == b"expect" and value.strip().lower() == b"100-continue":
                self.expect_continue = True
        self.has_body = self.chunked or bool(self.content_length)

    def body_read(self) -> None:
        """The whole body has come (or there was none to read): the connection may
        go on to the next request once the response is out."""
        self.body_complete = True

    def describe(self) -> str:
        """``METHOD /path`` for log lines (see :func:`loggable_target`)."""
        path = loggable_target(self.target)[:200]
        return f"{self.method.decode('latin-1')} {path.decode('latin-1')}"


def keeps_alive(request: Request, close_delimited: bool, error: bool) -> bool:
    """Whether the client connection stays open after the response to ``request``
    (RFC 9112 section 9.3): the one place that decides, when the response head is
    written, since the head must say ``Connection: close`` if not. Open only if

    - the client asked for it (:attr:`Request.wants_keep_alive`);
    - the request's body has been read whole: its rest would be read as the next request;
    - the response's end is not marked by closing (``close_delimited``: a body
      without Content-Length to an HTTP/1.0 client);
    - it is not the proxy's own error (``error``): simplest for the client to
      recover from, and what follows a rejected request cannot be trusted.

    A stopping proxy closes idle connections itself; its responses do not say so.
    """
    return request.wants_keep_alive and request.body_complete and not close_delimited and not error


class ResponseWriter:
    """Writes one response to the client, choosing its HTTP/1.1 framing."""

    __slots__ = (
        "_chunked",
        "_conn",
        "_keep_alive",
        "_mark",
        "_no_body",
        "_output",
        "_request",
        "body_bytes",
        "finished",
        "head",
        "informational",
        "started",
    )

    def __init__(self, conn: ResponseSink, request: Request) -> None:
        self._conn = conn
        self._output = conn.output
        self._request = request
        self._chunked = False
        self._no_body = False
        self._keep_alive = False  # decided with the head; a response ended without one is broken
        self._mark: OutputMark = (0, 0)
        self.started = False
        self.finished = False
        self.body_bytes = 0  # of the response body, as handed to the connection
        self.informational = 0  # interim responses the upstream sent ahead of the final one
        self.head: tuple[int, list[Header]] | None = None  # status and fields, as sent

    @property
    def keep_alive(self) -> bool:
        """Whether the connection stays open after this response (see :func:`keeps_alive`)."""
        return self._keep_alive

    @property
    def paused(self) -> bool:
        """True while the client's socket buffer is full: stop handing it data."""
        return self._conn.write_paused

    def send_continue(self) -> None:
        if not self.started and self._request.http_version == "1.1":
            self._output.send(b"HTTP/1.1 100 Continue\r\n\r\n")

    def interim(self, status: int, headers: list[Header]) -> bool:
        """An informational (1xx) response of the upstream's, ahead of the final one:
        passed on to an HTTP/1.1 client (RFC 9110 section 15.2), never to an HTTP/1.0
        one (it has none). Not 100, which the proxy sends itself when the request
        asks (:meth:`send_continue`), nor 101 (HTTP/2 has no Upgrade). False past
        MAX_INFORMATIONAL of them: the request then fails."""
        self.informational += 1
        if self.informational > MAX_INFORMATIONAL:
            return False
        if self.started or status in (100, 101) or self._request.http_version != "1.1":
            return True
        parts = [b"HTTP/1.1 %d %s\r\n" % (status, reason_phrase(status))]
        for name, value in headers:
            if name != b"content-length":  # none on a 1xx (RFC 9110 section 8.6)
                parts += (name, b": ", value, b"\r\n")
        parts.append(b"\r\n")
        self._output.send(b"".join(parts))
        return True

    def start(self, status: int, headers: list[Header], *, has_body: bool = True) -> None:
        """Status line and fields. Without ``Content-Length`` the body is chunked
        (HTTP/1.1) or delimited by closing the connection (HTTP/1.0)."""
        self._start(status, headers, has_body, False)

    def _start(self, status: int, headers: list[Header], has_body: bool, error: bool) -> None:
        request = self._request
        self.started = True
        self._mark = self._output.mark()
        self._no_body = request.method == b"HEAD" or status in (204, 304) or 100 <= status < 200
        if status == 204:
            # Never framing on a 204 (RFC 9110 section 8.6); a 304 may keep the
            # Content-Length of the response it stands for, but has no body either.
            headers = [field for field in headers if field[0] != b"content-length"]
        has_length = False
        for name, _ in headers:  # (a loop: any() over a generator costs a frame per field)
            if name == b"content-length":
                has_length = True
                break
        close_delimited = False
        if not self._no_body and not has_length:
            if request.http_version == "1.1" and has_body:
                self._chunked = True
                headers = [*headers, (b"transfer-encoding", b"chunked")]
            elif has_body:
                close_delimited = True
            else:
                headers = [*headers, (b"content-length", b"0")]
        self._keep_alive = keeps_alive(request, close_delimited, error)
        if not self._keep_alive:
            headers = [*headers, (b"connection", b"close")]
        elif request.http_version == "1.0":
            headers = [*headers, (b"connection", b"keep-alive")]
        self.head = (status, headers)
        parts = [b"HTTP/1.1 %d %s\r\n" % (status, reason_phrase(status))]
        for name, value in headers:
            parts += (name, b": ", value, b"\r\n")
        parts.append(b"\r\n")
        self._output.send(b"".join(parts))

    def write(self, data: bytes) -> None:
        if self._no_body or not data or self.finished:
            return
        size = len(data)
        self.body_bytes += size
        if self._chunked:
            if size < JOIN_CHUNK_BELOW:  # one buffer costs the transport less than three
                self._output.send(b"%x\r\n%b\r\n" % (size, data))
            else:  # a copy would cost more
                self._output.send(b"%x\r\n" % size, data, b"\r\n")
        else:
            self._output.send(data)

    def end(self) -> None:
        if self.finished:
            return
        self.finished = True
        if self._chunked:
            self._output.send(b"0\r\n\r\n")
        self._conn.response_done(self, self._keep_alive)

    def retract(self) -> bool:
        """Take back a response none of which has reached the socket yet, so an
        error response can take its place. False once any of it went out."""
        if not self.started or self.finished or not self._output.take_back(self._mark):
            return False
        self.started = False
        self.body_bytes = 0
        self._chunked = self._no_body = False
        return True

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
        self._start(status, headers, True, True)  # an error: the connection ends after it
        self.write(body)
        self.end()

    def pause_reading(self) -> None:
        self._conn.reader.pause_reading()  # (the reader's: it owns the switch)

    def resume_reading(self) -> None:
        self._conn.reader.resume_reading()
