"""The HTTP/1.1 side: one :class:`ClientConnection` per accepted socket.

An ``asyncio.BufferedProtocol`` whose reads go to a
:class:`~h2ping.http1.reader.RequestReader` (httptools: llhttp, strict RFC 9112
parsing), which hands back what each read held; the connection acts on it. Each
parsed request becomes a :class:`~h2ping.http1.messages.Request` handed to a
handler (the exchange, made by the factory the connection was given), which
answers through the request's :class:`~h2ping.http1.messages.ResponseWriter`; the
writers queue on the connection's :class:`~h2ping.http1.output.ClientOutput`.
Nothing here knows about HTTP/2.

Requests on one connection are answered in order (RFC 9112 section 9.3.2): a
pipelined request waits, with reading paused, until the one before it is done.
One timer per connection (its :class:`Deadline`) bounds both how long a request
head may take to arrive (``header_timeout``, then 408) and how long a kept-alive
connection may sit idle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol, cast

from ..sockets import set_nodelay, set_tcp_keepalive
from ..stats import Stats
from ..timers import LazyTimer
from .messages import Request, RequestRejected, ResponseWriter
from .output import ClientOutput, OutputFlusher
from .reader import BODY_END, HEAD_BEGUN, ReadState, RequestReader

log = logging.getLogger("h2ping.listener")

#: The most one read takes from a client's socket (uvloop's own reads take 256 KiB).
#: An upload whose stream cannot send is paused with at most one read beyond
#: SEND_HIGH_WATER held in memory; the rest waits in the kernel's socket buffer.
READ_SIZE = 128 * 1024


class RequestHandler(Protocol):
    """What the listener needs from whoever forwards a request.

    The handler counts the request's outcome, except for a head the listener
    refuses (no handler exists then): ``cancel`` means the client went away,
    ``reject`` that the listener answers the request itself (its body was bad).
    """

    def start(self) -> None: ...
    def feed_body(self, data: bytes) -> None: ...
    def end_body(self) -> None: ...  # (of a request that has a body: none comes otherwise)
    def client_drained(self) -> None: ...
    def cancel(self) -> None: ...
    def reject(self, status: int) -> None: ...


#: Makes a request's handler (the exchange: a factory of the forwarding side's).
HandlerFactory = Callable[[Request, ResponseWriter], RequestHandler]

# Module names, not the enum's members: tested several times per request, and a
# member's load runs the enum metaclass's __getattr__ hook (110 ns on 3.11, 15 here).
_CLOSED, _HEAD, _REJECTED = ReadState.CLOSED, ReadState.HEAD, ReadState.REJECTED


class Registry(Protocol):
    """Where a connection enters when made and leaves when lost (a set will do)."""

    def add(self, client: ClientConnection, /) -> None: ...
    def discard(self, client: ClientConnection, /) -> None: ...


def _nothing() -> None:
    pass


class _NoBody:
    """Stands for the handler while no body is being read: nothing reaches it."""

    def start(self) -> None:
        pass

    def feed_body(self, data: bytes) -> None:
        pass

    def end_body(self) -> None:
        pass

    def client_drained(self) -> None:
        pass

    def cancel(self) -> None:
        pass

    def reject(self, status: int) -> None:
        pass


_NO_BODY: RequestHandler = _NoBody()


class ListenerLimits:
    """What the client connections of one listener share: time limits (seconds),
    and the one buffer of READ_SIZE that their reads land in. One suffices: each
    read is parsed before the next, and what the parser hands on is a copy."""

    __slots__ = ("header_timeout", "idle_timeout", "read_buffer")

    def __init__(self, header_timeout: float, idle_timeout: float) -> None:
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.read_buffer = memoryview(bytearray(READ_SIZE))


class Deadline:
    """A client connection's one timer, for two deadlines in turn: a request head
    must arrive whole within ``header_timeout``, and a kept-alive connection may
    sit idle for ``idle_timeout``. Which one was set last decides what its expiry
    calls. Stopped, it stays stopped: a closing connection waits for nothing."""

    __slots__ = (
        "_limits",
        "_loop",
        "_on_expiry",
        "_on_idle",
        "_on_late_head",
        "_stopped",
        "_timer",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        limits: ListenerLimits,
        on_late_head: Callable[[], None],
        on_idle: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._limits = limits
        self._on_late_head = on_late_head
        self._on_idle = on_idle
        self._on_expiry = on_late_head
        self._stopped = False
        self._timer = LazyTimer(loop, self._expired)

    def await_head(self) -> None:
        if not self._stopped:
            self._on_expiry = self._on_late_head
            self._timer.set(self._loop.time() + self._limits.header_timeout)

    def await_next_request(self) -> None:
        if not self._stopped:
            self._on_expiry = self._on_idle
            self._timer.set(self._loop.time() + self._limits.idle_timeout)

    def clear(self) -> None:
        """Neither deadline runs (a request is being answered)."""
        self._timer.clear()

    def stop(self) -> None:
        """No deadline any more: the connection is closing."""
        self._stopped = True
        self._timer.cancel()

    def close(self) -> None:
        """As :meth:`stop`, and let go of the callbacks, which refer back to the
        connection (a cycle only the cyclic collector would undo)."""
        self.stop()
        self._timer.close()
        self._on_expiry = self._on_late_head = self._on_idle = _nothing

    def _expired(self) -> None:
        if not self._stopped:
            self._on_expiry()


class ClientConnection(asyncio.BufferedProtocol):
    """One accepted HTTP/1.1 connection: the turns of its requests' responses, and
    its end. Its :attr:`reader` parses (and hands back what each read held) and
    switches the socket's reading, its deadline times it, and its :attr:`output`
    takes what the responses write."""

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
        # Fetched once: asyncio.get_running_loop() makes a getpid() system call
        # (its fork check), which cost a tenth of the CPU of streamed responses.
        loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self.reader = RequestReader()
        self._deadline = Deadline(loop, limits, self._head_too_slow, self._idle_too_long)
        self.output = ClientOutput(flusher or OutputFlusher(loop), self.abort)
        self.write_paused = False
        self._rejection = (400, "bad request")  # what REJECTED answers once its turn comes
        # Requests whose responses are pending, oldest (the one being answered) first.
        # Reading pauses once a request waits behind another, but the read in hand
        # is parsed to its end: this holds the one being answered and every request
        # of one read (pipelined ones: as many as READ_SIZE holds), usually one. A
        # list, as a deque costs 600 bytes more per connection.
        self._pending: list[tuple[RequestHandler, ResponseWriter]] = []
        #: The handler of the request whose body is being read (_NO_BODY between bodies).
        self._unfinished: RequestHandler = _NO_BODY

    @property
    def state(self) -> ReadState:
        """Where the reading stands (the reader's)."""
        return self.reader.state

    @property
    def idle(self) -> bool:
        return not self._pending and self.reader.state is not _HEAD

    # ----------------------------------------------------------------- protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self.output.attach(self._transport)
        self.reader.attach(self._transport)
        self._registry.add(self)
        sock = transport.get_extra_info("socket")
        set_tcp_keepalive(sock)
        set_nodelay(sock)
        self._deadline.await_head()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        # What the read held, in order (see reader.ReadEvent): most often one
        # request, or a body's bytes.
        reader = self.reader
        for event in reader.feed(self._read_buffer[:nbytes]):
            if reader.state is _CLOSED:
                # An answer to what came before closed the connection (the proxy's
                # own error): nothing after it is made, nothing of it goes upstream.
                break
            if isinstance(event, bytes):
                self._unfinished.feed_body(event)
            elif isinstance(event, Request):
                self._request_read(event)
            elif event is BODY_END:
                handler, self._unfinished = self._unfinished, _NO_BODY
                handler.end_body()
            elif event is HEAD_BEGUN:
                if not self._pending:
                    # The idle wait is over; the head itself must now arrive in time.
                    self._deadline.await_head()
            else:
                assert isinstance(event, RequestRejected)  # a read's last event
                self._refuse(event.status, event.reason)

    def eof_received(self) -> bool:
        # A client that closes its side has gone away (aiohttp, and nearly every
        # client, never half-closes to wait for an answer); as nginx does, cancel
        # its requests rather than keep a long upstream call running for nobody.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        # What refers back to this connection goes: the deadline's callbacks, the
        # output's, the transport's (and the reader's hold on it).
        # Then it is freed as its last user lets go, not by the cyclic collector,
        # whose full passes walk every live connection's objects and stall the
        # loop under thousands of clients.
        self.reader.close()
        self._deadline.close()
        self.output.detach()
        self._transport = None
        self._registry.discard(self)
        pending, self._pending = self._pending, []
        for handler, _ in pending:
            handler.cancel()
        unfinished, self._unfinished = self._unfinished, _NO_BODY
        unfinished.cancel()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._pending:
            self._pending[0][0].client_drained()

    # ----------------------------------------------------------------- what was read

    def _request_read(self, request: Request) -> None:
        if not self._pending:
            self._deadline.clear()
        self._stats.request_received()
        writer = ResponseWriter(self, request)
        handler = self._factory(request, writer)
        self._pending.append((handler, writer))
        if len(self._pending) == 1:
            handler.start()
        else:
            # Pipelined: answer in order; read no further until it is our turn.
            self.reader.pause_reading()
        if request.has_body:
            self._unfinished = handler  # its body's bytes go to it, then its end

    def _refuse(self, status: int, reason: str) -> None:
        """A request we will not forward: answer it once earlier responses are out,
        then close (what follows it on the connection cannot be trusted)."""
        if not self.reader.enter(_REJECTED):
            return  # reading has ended already: nobody to answer, nor a 400 to count
        # Set first: a response that ends while the handlers are told sends it.
        self._rejection = (status, reason)
        log.info("client request rejected: %d %s", status, reason)
        unfinished, self._unfinished = self._unfinished, _NO_BODY
        if unfinished is _NO_BODY:  # a head: it ends here; a body's handler counts it
            self._stats.head_rejected(status)
        else:
            self._stats.count_response(status)
        self._deadline.clear()
        self.reader.pause_reading()
        if unfinished is not _NO_BODY:
            self._drop(unfinished, status)
        if not self._pending and self.reader.state is _REJECTED:
            self._send_rejection()

    def _drop(self, handler: RequestHandler, status: int) -> None:
        """Give up the request whose body was still arriving (answered ``status``)."""
        handler.reject(status)
        for i, (pending_handler, writer) in enumerate(self._pending):
            if pending_handler is handler:
                del self._pending[i]
                if writer.started:
                    self.abort()  # its response is already on the wire: truncate
                elif i == 0 and self._pending:
                    self._pending[0][0].start()
                break

    def _send_rejection(self) -> None:
        status, text = self._rejection
        request = Request(b"GET", b"", [], "1.1", False)
        request.body_read()  # none comes: the connection closes after the rejection
        ResponseWriter(self, request).send_error(status, text)
        self.close()

    # ----------------------------------------------------------------- deadlines

    def _head_too_slow(self) -> None:
        if self.reader.state is _HEAD:
            self._refuse(408, "request head not received in time")
        elif not self._pending:
            self.close()  # connected but never sent a byte

    def _idle_too_long(self) -> None:
        if self.idle:
            log.debug(
                "closing a kept-alive client connection idle for %gs", self._limits.idle_timeout
            )
            self.close()

    # ----------------------------------------------------------------- responses' turns

    def response_done(self, writer: ResponseWriter, keep_alive: bool) -> None:
        """``writer``'s response is written whole; ``keep_alive``: the connection
        goes on after it (the writer decided so with the head)."""
        if not self._pending or self._pending[0][1] is not writer:
            return
        self._pending.pop(0)
        if not keep_alive:
            self.close()
            return
        if not self._pending:
            # The client waits for nothing more of this turn: what ends the
            # stream and the exchange comes after the write, not before it.
            self.output.write_now()
        state = self.reader.state
        if self._pending:
            self._pending[0][0].start()
        elif state is _REJECTED:
            self._send_rejection()
            return
        elif state is _HEAD:
            # A head that began while earlier requests were being answered: its
            # time to arrive whole starts now.
            self._deadline.await_head()
        else:
            self._deadline.await_next_request()
        if len(self._pending) <= 1 and self.reader.paused:  # (mostly not: no call then)
            self.reader.resume_reading()

    # ----------------------------------------------------------------- the end

    def close(self) -> None:
        """Close after the queued output is written."""
        if self._transport is None or not self.reader.enter(_CLOSED):
            return
        self._deadline.stop()
        self.output.close()
        self._transport.close()

    def abort(self) -> None:
        """Cut the connection after handing the socket what is queued: the client
        sees the response end early, not its start vanish."""
        self.output.flush()
        self.reader.enter(_CLOSED)
        self._deadline.stop()
        self.output.discard()
        if self._transport is not None:
            self._transport.abort()

    def close_if_idle(self) -> bool:
        if self.idle:
            self.close()
            return True
        return False
