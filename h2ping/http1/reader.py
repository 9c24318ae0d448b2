"""Reading the requests of one client connection.

httptools (llhttp) parses; its callbacks land on a :class:`RequestReader`, which
builds each :class:`~h2ping.http1.messages.Request` and hands back, from each
:meth:`~RequestReader.feed`, what the bytes held, in order, as values (as h11
returns events): a head begun, a request, body bytes, a body's end, or a
refusal. It calls nobody: its connection (:mod:`.listener`) acts on what it got
back, and decides when a request is answered and whether the connection goes
on. Where the reading stands is one :class:`ReadState`, and every move between
the states is in one table (``_MOVES``). The reader also owns the one switch of
the socket's reading (paused or not), which the connection and the responses'
writers both turn.
"""

from __future__ import annotations

import asyncio
import enum
import logging

import httptools

from ..fields import Header
from .messages import (
    MAX_HEAD_BYTES,
    MAX_HEADER_COUNT,
    MAX_TARGET_BYTES,
    Request,
    RequestRejected,
    check_head,
)

log = logging.getLogger("h2ping.listener")

_H2_PREFACE = b"PRI * HTTP/2.0\r\n"


class HeadBegun:
    """A request head began in this read and is still arriving (its deadline may
    start). Not told of a head that arrived whole: its request is told."""

    __slots__ = ()


class BodyEnd:
    """The body of the request being read has ended (told only of a request that
    has a body: one without has none to end)."""

    __slots__ = ()


HEAD_BEGUN = HeadBegun()
BODY_END = BodyEnd()

#: What one :meth:`RequestReader.feed` hands back, in the order the bytes held it:
#: a :class:`Request` whose head is whole and valid (its body follows); body
#: bytes (of the last request); :data:`BODY_END`; and last, either
#: :data:`HEAD_BEGUN` (the read ends inside a head that began in it) or, if what
#: was read cannot be forwarded, a :class:`RequestRejected` (answer its status,
#: then close). Plain values: a read's events cost no call back up. A plain
#: keep-alive GET read whole is one event, its request.
ReadEvent = HeadBegun | Request | bytes | BodyEnd | RequestRejected


class ReadState(enum.Enum):
    """What the next bytes read from a client are, one state at a time."""

    BETWEEN = "between requests"  # the next byte begins a request head
    HEAD = "head"  # a request head is arriving (header_timeout runs, once it is its turn)
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

#: Its members as module names: loading an enum's member runs its metaclass's
#: __getattr__ hook (about 110 ns on Python 3.11, a module name 15), and
#: these are tested several times per request or per frame.
_BETWEEN = ReadState.BETWEEN
_HEAD = ReadState.HEAD
_BODY = ReadState.BODY
_UPGRADING = ReadState.UPGRADING
_UPGRADED_BODY = ReadState.UPGRADED_BODY
_REJECTED = ReadState.REJECTED
_CLOSED = ReadState.CLOSED

#: Every move between read states, in one view: ``RequestReader.enter`` makes
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


#: Where callbacks append between feeds: nowhere, as the parser runs only in
#: :meth:`RequestReader.feed` (a feed's own list is let go of as it returns).
_NO_FEED: list[ReadEvent] = []


class RequestReader:
    """Parses one connection's requests and keeps its :class:`ReadState`, and
    whether its socket is read.

    The connection moves it to REJECTED and CLOSED (through :meth:`enter`, as the
    reader makes its own moves), reads :attr:`state` and :attr:`paused`, and pauses
    and resumes its reading, as the responses' writers do; nothing else is shared.
    """

    __slots__ = (
        "_began",
        "_events",
        "_head_bytes",
        "_head_size",
        "_headers",
        "_parser",
        "_parser_done",
        "_raised",
        "_reading",
        "_synthetic",
        "_trailers",
        "_transport",
        "_url",
        "paused",
        "state",
    )

    def __init__(self) -> None:
        # Made at a request's first bytes and let go between keep-alive requests
        # (see feed): a parser is some 900 bytes, a connection waiting on its
        # response or idle needs none, and a new one costs a third of a microsecond.
        self._parser: httptools.HttpRequestParser | None = None
        self._parser_done = False  # the parser's last request ended, and kept the connection
        self.state = _BETWEEN
        self._events = _NO_FEED  # what the feed under way hands back
        self._began = False  # a head began during the feed under way
        self._transport: asyncio.Transport | None = None  # its reading paused and resumed here
        self.paused = False  # its socket's reading (read, not written, by others)
        # Parse state of the request being read.
        self._url = b""
        self._headers: list[Header] = []
        self._head_bytes = 0  # bytes read while a head is unfinished (bounds partial heads)
        self._head_size = 0  # exact size of the parsed request line and fields (and trailers)
        self._trailers = 0  # trailer fields of the request being read (counted, never kept)
        self._synthetic = False  # the fields read are an upgraded body's synthetic head's
        #: The request whose body is being read: set at its head's end, cleared at its own.
        self._reading: Request | None = None
        self._raised: RequestRejected | None = None  # by a parser callback, as it left

    def enter(self, state: ReadState) -> bool:
        """Move to ``state`` if the table of moves (``_MOVES``) allows it from here;
        every change of state goes through here. False if refused."""
        if state in _MOVES[self.state]:
            self.state = state
            return True
        return False

    def feed(self, data: bytes | memoryview) -> list[ReadEvent]:
        """Parse bytes read from the client: what they held (see :data:`ReadEvent`);
        nothing once reading has ended."""
        events: list[ReadEvent] = []
        self._events = events
        self._began = False
        while True:
            state = self.state
            if state is _CLOSED or state is _REJECTED:
                break
            if state is _BETWEEN or state is _HEAD:
                self._head_bytes += len(data)
            parser = self._parser
            if parser is None:
                parser = self._parser = httptools.HttpRequestParser(self)
            self._parser_done = False
            try:
                parser.feed_data(data)
            except httptools.HttpParserUpgrade as exc:
                data = data[exc.args[0] :]
                self._after_upgrade()
                if data:
                    continue  # the rest is HTTP/1.1 still
                break
            except httptools.HttpParserCallbackError as exc:
                # httptools sets __context__ to what our callback raised; a rejection
                # is also kept by the callback, so it is told right without that.
                raised, self._raised = self._raised or exc.__context__, None
                if isinstance(raised, RequestRejected):
                    events.append(raised)
                else:
                    log.error("internal error while reading a request", exc_info=raised or exc)
                    events.append(RequestRejected(500, "internal error while reading the request"))
            except httptools.HttpParserError as exc:
                start = bytes(data[:16])
                if start.startswith(_H2_PREFACE[:3]) and _H2_PREFACE.startswith(start):
                    events.append(
                        RequestRejected(400, "HTTP/2 connection preface on an HTTP/1.1 port")
                    )
                else:
                    events.append(RequestRejected(400, f"malformed HTTP/1.1 request: {exc}"))
            else:
                if self.state is _HEAD:
                    if self._head_bytes > MAX_HEAD_BYTES:
                        events.append(
                            RequestRejected(431, f"request head larger than {MAX_HEAD_BYTES} bytes")
                        )
                    elif self._began:
                        # Told last, once: a head that arrived whole needs no deadline
                        # (what its request is told overrides it).
                        events.append(HEAD_BEGUN)
                elif self._parser_done and self.state is _BETWEEN:
                    # At a keep-alive request's end a parser is as a new one is. (After
                    # one that asked to close it is not: it refuses what follows.)
                    self._parser = None
            break
        self._events = _NO_FEED  # the body bytes are the connection's to let go of
        return events

    def close(self) -> None:
        """The connection is gone: read nothing more, and let go of the parser
        (which refers back here) and of the transport."""
        self.enter(_CLOSED)
        self._parser = None
        self._transport = None

    # ----------------------------------------------------------------- the socket's reading

    def attach(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def pause_reading(self) -> None:
        if not self.paused and self._transport is not None:
            self.paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self.paused and self._transport is not None and self.state is not _CLOSED:
            self.paused = False
            self._transport.resume_reading()

    # ----------------------------------------------------------------- parser callbacks

    def on_message_begin(self) -> None:
        if self.state is _UPGRADED_BODY:
            return
        self.enter(_HEAD)
        self._url = b""
        self._headers = []
        self._head_size = 0
        self._trailers = 0
        self._began = True

    def on_url(self, url: bytes) -> None:
        if self.state is _UPGRADED_BODY:
            return
        self._url += url
        self._head_size += len(url)
        if len(self._url) > MAX_TARGET_BYTES:
            raise self._raising(
                RequestRejected(414, f"request target longer than {MAX_TARGET_BYTES} bytes")
            )

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.state is _HEAD:
            # Lowercased once here: HTTP/2 wants it, and every later rule compares it.
            self._headers.append((name.lower(), value))
        elif self._synthetic:
            return
        else:
            # A trailer field (after a chunked body): dropped, never a header field
            # of the request (whose fields may not be mapped yet: a pipelined
            # request's are mapped at its turn), but held to the head's limits.
            self._trailers += 1
            if len(self._headers) + self._trailers > MAX_HEADER_COUNT:
                raise self._raising(
                    RequestRejected(431, f"more than {MAX_HEADER_COUNT} header and trailer fields")
                )
        self._head_size += len(name) + len(value) + 4  # ": " and CRLF
        if self._head_size > MAX_HEAD_BYTES:
            raise self._raising(
                RequestRejected(431, f"request head larger than {MAX_HEAD_BYTES} bytes")
            )

    def _raising(self, rejection: RequestRejected) -> RequestRejected:
        self._raised = rejection
        return rejection

    def on_headers_complete(self) -> None:
        if self.state is _UPGRADED_BODY:
            self._synthetic = False  # what follows is the body, and its trailers
            return
        parser = self._parser
        assert parser is not None  # it is feeding us
        self._head_bytes = 0
        method = parser.get_method()
        version = parser.get_http_version()
        try:
            check_head(method, self._url, version, self._headers)
        except RequestRejected as rejection:
            self._raised = rejection
            raise
        request = Request(
            method,
            self._url,
            self._headers,
            version,
            parser.should_keep_alive(),
            upgrade=parser.should_upgrade(),
        )
        self.enter(_BODY)
        self._reading = request
        self._events.append(request)

    def on_body(self, body: bytes) -> None:
        if self._reading is not None:
            self._events.append(body)

    def on_message_complete(self) -> None:
        request = self._reading
        if request is None:
            return
        if request.upgrade and request.has_body and self.state is not _UPGRADED_BODY:
            # llhttp stops here and calls the rest "upgraded"; the body is ours.
            self.enter(_UPGRADING)
            return
        self.enter(_BETWEEN)
        self._reading = None
        request.body_read()
        self._parser_done = request.wants_keep_alive
        if request.has_body:
            self._events.append(BODY_END)

    # ----------------------------------------------------------------- Upgrade

    def _after_upgrade(self) -> None:
        """``Upgrade`` is hop-by-hop and is not acted on: keep reading HTTP/1.1
        (:meth:`feed` goes on with the rest).

        A body after an Upgrade head goes to a fresh parser, which must first be
        told the body's framing: a synthetic head says it, and its callbacks are
        ignored (UPGRADED_BODY) so that the body reaches the request being read."""
        self._parser = httptools.HttpRequestParser(self)
        request = self._reading
        if self.state is _UPGRADING and request is not None:
            framing = (
                b"Transfer-Encoding: chunked"
                if request.chunked
                else b"Content-Length: %d" % (request.content_length or 0)
            )
            self.enter(_UPGRADED_BODY)
            self._synthetic = True
            self._parser.feed_data(b"POST / HTTP/1.1\r\n" + framing + b"\r\n\r\n")
