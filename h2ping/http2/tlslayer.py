"""TLS for an upstream connection, done by h2ping over the event loop's TCP transport.

The event loops' own SSL transports lose bytes they hold when the TCP connection
ends. uvloop's, on a bare FIN, shuts down without decrypting what it still holds:
everything that came in while its protocol had paused reading, and the rest of a
read that did not fit the protocol's buffer. asyncio's decrypts once more and
drops what did not fit. A server that sends its last responses and closes at once
(as every server does after a GOAWAY) thus cut the tail off the last of them.

Here an ``ssl.SSLObject`` works over a pair of memory BIOs, and the rules are:

- While the protocol reads, every byte TLS can decrypt is handed over before
  control goes back to the loop (several ``buffer_updated`` calls when one
  buffer does not hold it).
- When the protocol pauses reading, what TCP reads meanwhile waits in the
  incoming BIO until it holds more than one read's worth; then the TCP
  transport pauses too, so the rest waits in the kernel, which delivers it, in
  order, before a FIN. At most two reads' worth wait in the incoming BIO. (The
  TCP transport's pause and resume are two changes to the loop's epoll set:
  a download's connection, which pauses after each turn of the inbound
  schedule and resumes in the next, mostly resumed before anything more was
  read.)
- When the connection ends (FIN, close_notify, reset), whatever TLS still holds
  is handed over first, paused or not, then ``connection_lost``.
- A reset ends the connection with bytes still unread in the kernel when a
  write meets it first (the loop's transport closes on the write's error,
  whether reading was paused or not): a server that sends its last responses
  and closes, and then gets our WINDOW_UPDATE, answers it with a reset. So on a
  connection lost to an error, the layer reads what the kernel still holds
  from the socket itself (still open then, and checked to be the same socket)
  before handing everything over.

What this assumes of the loop's TCP transport (asyncio's and uvloop's; tested on
both): a buffered protocol's ``buffer_updated`` calls come in stream order;
``eof_received`` comes after the last byte and never while reading is paused;
``pause_reading()`` called inside ``buffer_updated`` holds back the next read;
``connection_lost`` comes before the transport closes its socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import ssl
import sys
from typing import Any

from .tunnel import tunnel_lost

#: One TCP read at most: four full TLS records and their overhead.
TCP_READ_SIZE = 4 * (16 * 1024 + 256)


class _State(enum.Enum):
    HANDSHAKE = "handshake"
    OPEN = "open"  # the protocol has had connection_made
    CLOSING = "closing"  # the protocol closed or aborted its side
    CLOSED = "closed"


# Module names, not the enum's members: tested on every read and write, and a
# member's load runs the enum metaclass's __getattr__ hook (110 ns on 3.11, 15 here).
_HANDSHAKE, _OPEN, _CLOSING, _CLOSED = _State.HANDSHAKE, _State.OPEN, _State.CLOSING, _State.CLOSED


#: Whether reading ``SSLObject.session`` leaks a copy of the session in C (a few
#: KiB each time: CPython issue 116810, in every 3.11 and in 3.12 and 3.13
#: before the fix; these bounds are on the safe side).
SESSION_READ_LEAKS = sys.version_info < (3, 12, 8) or (3, 13) <= sys.version_info < (3, 13, 1)


class SessionCache:
    """The TLS session of the latest connection to one server, for the next one to
    resume: one round trip less (TLS 1.2), and no certificate chain sent again.
    Read at the next dial, not at the handshake: with TLS 1.3 the server's ticket
    arrives after it, with the first bytes read.

    Where reading a session leaks (:data:`SESSION_READ_LEAKS`), one is read only
    after a full handshake and offered again while the server resumes it: read
    anew for each connection, a server that ends its connections every 50
    requests made the process grow 6.5 KiB a connection, for good."""

    __slots__ = ("_kept", "_latest", "_reads_leak")

    def __init__(self, reads_leak: bool = SESSION_READ_LEAKS) -> None:
        self._latest: ssl.SSLObject | None = None
        self._kept: ssl.SSLSession | None = None  # offered while it resumes (reads_leak)
        self._reads_leak = reads_leak

    def remember(self, ssl_object: ssl.SSLObject) -> None:
        self._latest = ssl_object

    def session(self) -> ssl.SSLSession | None:
        """The session to offer, if the server gave one that can be resumed."""
        latest = self._latest
        if latest is None:
            return None
        if self._reads_leak and self._kept is not None and latest.session_reused:
            return self._kept  # resumed: the server takes it still
        session = latest.session
        if session is None or not session.has_ticket:
            return None
        self._kept = session
        return session


class NoApplicationProtocol(Exception):
    """The handshake agreed on no protocol, or on another than the one required:
    ``selected`` is the server's choice (None: it chose none)."""

    def __init__(self, selected: str | None) -> None:
        super().__init__(f"ALPN selected {selected or 'nothing'}")
        self.selected = selected


class TLSLayer(asyncio.BufferedProtocol):
    """The TCP transport's protocol: TLS client side, with ``app`` on top.

    ``handshake`` resolves once TLS is up (and ``app`` has had ``connection_made``),
    or fails with the ``ssl.SSLError`` or ``OSError`` that stopped it, or with
    :class:`NoApplicationProtocol` when ALPN did not select ``alpn``: ``app`` then
    never hears of the connection, and sends nothing on it."""

    def __init__(
        self,
        app: asyncio.BufferedProtocol,
        context: ssl.SSLContext,
        server_hostname: str,
        session: ssl.SSLSession | None = None,
        tunnel: str | None = None,
        alpn: str | None = None,
    ) -> None:
        """``session``: an earlier connection's to the same server, to resume;
        ``tunnel``: the forward proxy (``host:port``) the connection goes through,
        named when it ends without the server's close_notify; ``alpn``: the
        protocol the handshake must select (None: any, or none)."""
        self._alpn = alpn
        self._app = app
        self._tunnel = tunnel
        self._close_notified = False  # the peer said goodbye in TLS
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.ssl_object = context.wrap_bio(
            self._incoming,
            self._outgoing,
            server_side=False,
            server_hostname=server_hostname,
            session=session,
        )
        self._loop = asyncio.get_running_loop()
        self.handshake: asyncio.Future[None] = self._loop.create_future()
        self._state = _HANDSHAKE
        self._tcp: asyncio.Transport | None = None
        self._socket: tuple[int, int] | None = None  # the TCP socket: descriptor, inode
        self._read_buffer = memoryview(bytearray(TCP_READ_SIZE))
        self._app_paused = False
        self._tcp_paused = False
        self._resume_scheduled = False
        self._app_connected = False  # the protocol has had connection_made
        self._error: Exception | None = None  # a TLS failure after the handshake

    # --------------------------------------------------------- TCP transport's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._tcp = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport
        self._socket = _identity(transport)
        self._step_handshake()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._incoming.write(self._read_buffer[:nbytes])
        if self._state is _HANDSHAKE:
            self._step_handshake()
        elif self._state is _OPEN:
            if not self._app_paused:
                self._deliver()
            else:
                self._pause_tcp_when_full()

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost hands over what is left

    def connection_lost(self, exc: Exception | None) -> None:
        state, self._state = self._state, _CLOSED
        if state is _OPEN and isinstance(exc, OSError):
            self._read_what_the_kernel_holds()
        if self._tunnel is not None and not self._close_notified and self._error is None:
            # No goodbye in TLS: the tunnel ended (a proxy's idle timer), not the server.
            exc = tunnel_lost(self._tunnel, exc, during_handshake=not self._app_connected)
        if not self._app_connected:
            self._app = _GONE
            self._fail_handshake(exc or ssl.SSLEOFError("the peer closed during the handshake"))
            return
        if state is _OPEN:
            self._deliver(to_the_end=True)
        self._app_connected = False
        app, self._app = self._app, _GONE
        app.connection_lost(exc or self._error)

    def pause_writing(self) -> None:
        if self._app_connected:
            self._app.pause_writing()

    def resume_writing(self) -> None:
        if self._app_connected:
            self._app.resume_writing()

    def _read_what_the_kernel_holds(self) -> None:
        """After a reset the kernel still gives the bytes that came before it, in
        order, then the error: read them into TLS's incoming buffer (at most the
        socket's receive buffer). Only from the socket the connection was made
        on: a descriptor closed and reused meanwhile is another file."""
        if self._socket is None:
            return
        fd, inode = self._socket
        try:
            if os.fstat(fd).st_ino != inode:
                return
            while data := os.read(fd, TCP_READ_SIZE):
                self._incoming.write(data)
        except OSError:  # nothing more now (non-blocking), or the reset itself: the end
            return

    # --------------------------------------------------------------- TLS itself

    def _step_handshake(self) -> None:
        try:
            self.ssl_object.do_handshake()
        except ssl.SSLWantReadError:
            self._send_outgoing()
            return
        except (ssl.SSLError, ssl.CertificateError) as exc:
            self._send_outgoing()  # the alert, if any
            self._state = _CLOSING
            self._fail_handshake(exc)
            if self._tcp is not None:
                self._tcp.close()
            return
        self._send_outgoing()
        selected = self.ssl_object.selected_alpn_protocol()
        if self._alpn is not None and selected != self._alpn:
            self._state = _CLOSING
            self._fail_handshake(NoApplicationProtocol(selected))
            if self._tcp is not None:
                self._tcp.close()
            return
        self._state = _OPEN
        self.handshake.set_result(None)
        self._app_connected = True
        # Only the protocol holds its transport, which holds this layer: the layer
        # holding it too would make a cycle.
        self._app.connection_made(TLSTransport(self))
        if self._state is _OPEN and not self._app_paused:
            self._deliver()  # application data that came with the handshake's end

    def _fail_handshake(self, exc: BaseException) -> None:
        if not self.handshake.done():
            self.handshake.set_exception(exc)
            self.handshake.exception()  # the dialler may have stopped waiting

    def _deliver(self, to_the_end: bool = False) -> None:
        """Hand the protocol every byte TLS can decrypt now, unless it pauses
        (``to_the_end``: the connection is over, it gets everything)."""
        app, tls, incoming = self._app, self.ssl_object, self._incoming
        more = True
        peer_closed = False
        while more and (to_the_end or not self._app_paused):
            if self._state is _CLOSING:
                return  # the protocol closed its side: it wants no more
            # One read gives one TLS record at most: fill the buffer with as many
            # as it holds, so the protocol handles them in one call.
            buffer = memoryview(app.get_buffer(-1))
            size = len(buffer)
            filled = 0
            try:
                while filled < size and (incoming.pending or tls.pending()):
                    # With a buffer, read() returns a count (typeshed says bytes).
                    count: int = tls.read(size - filled, buffer[filled:] if filled else buffer)  # type: ignore[assignment]
                    if not count:  # close_notify: the peer will send nothing more
                        more = False
                        peer_closed = self._close_notified = True
                        break
                    filled += count
                else:
                    more = filled == size
            except ssl.SSLWantReadError:
                more = False  # the rest of a record is still on its way
            except ssl.SSLError as exc:
                self._fatal(exc)
                return
            if filled:
                app.buffer_updated(filled)
        if to_the_end:
            return
        self._send_outgoing()  # what reading produced: a KeyUpdate's answer
        if peer_closed and self._tcp is not None:
            self._tcp.close()  # connection_lost follows, with nothing left to hand over
        elif self._app_paused:
            self._pause_tcp_when_full()

    def _send_outgoing(self) -> None:
        if self._outgoing.pending and self._tcp is not None and not self._tcp.is_closing():
            self._tcp.write(self._outgoing.read())

    def _fatal(self, exc: Exception) -> None:
        """TLS failed after the handshake (a bad record, say): end the connection."""
        self._error = exc
        if self._tcp is not None:
            self._tcp.abort()

    def _pause_tcp_when_full(self) -> None:
        """The protocol pauses: once more than a read's worth waits here, the rest
        waits in the kernel."""
        if not self._tcp_paused and self._incoming.pending > TCP_READ_SIZE:
            self._pause_tcp()

    def _pause_tcp(self) -> None:
        self._tcp_paused = True
        if self._tcp is not None and not self._tcp.is_closing():
            self._tcp.pause_reading()

    # ------------------------------------------------------- the protocol's side

    def _app_write(self, data: bytes | bytearray | memoryview) -> None:
        if self._state is not _OPEN or not data:
            return
        try:
            view = memoryview(data)
            while view:
                view = view[self.ssl_object.write(view) :]
        except ssl.SSLError as exc:
            self._fatal(exc)
            return
        self._send_outgoing()

    def _app_close(self) -> None:
        if self._state is not _OPEN:
            return
        self._state = _CLOSING
        # SSLWantReadError: unwrap() queued our close_notify and waits for the
        # peer's, which we do not need.
        with contextlib.suppress(ssl.SSLError):
            self.ssl_object.unwrap()
        self._send_outgoing()
        if self._tcp is not None:
            self._tcp.close()

    def _app_abort(self) -> None:
        if self._state is not _OPEN:
            return
        self._state = _CLOSING
        if self._tcp is not None:
            self._tcp.abort()

    def _app_pause_reading(self) -> None:
        if self._app_paused:
            return
        self._app_paused = True  # TCP pauses once enough waits (buffer_updated)

    def _app_resume_reading(self) -> None:
        if not self._app_paused:
            return
        self._app_paused = False
        if not self._resume_scheduled and self._tcp is not None:
            # Not from inside the protocol's own call: what TLS holds comes next turn.
            self._resume_scheduled = True
            self._loop.call_soon(self._resume)

    def _resume(self) -> None:
        self._resume_scheduled = False
        if self._state is not _OPEN or self._app_paused:
            return
        self._deliver()
        if not self._app_paused and self._tcp_paused:
            self._tcp_paused = False
            if self._tcp is not None and not self._tcp.is_closing():
                self._tcp.resume_reading()

    def _extra_info(self, name: str, default: Any) -> Any:
        if name == "ssl_object":
            return self.ssl_object
        if name == "sslcontext":
            return self.ssl_object.context
        if name == "peercert":
            return self.ssl_object.getpeercert()
        if name == "cipher":
            return self.ssl_object.cipher()
        if name == "compression":
            return self.ssl_object.compression()
        return default if self._tcp is None else self._tcp.get_extra_info(name, default)

    def _app_is_closing(self) -> bool:
        return self._state is not _OPEN or self._tcp is None or self._tcp.is_closing()


def _identity(transport: asyncio.BaseTransport) -> tuple[int, int] | None:
    """The transport's socket as (descriptor, inode), or None where it has none."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return None
    try:
        fd = sock.fileno()
        return fd, os.fstat(fd).st_ino
    except (OSError, ValueError):
        return None


#: A layer's protocol once its connection is lost: the layer lets go of the real
#: one, which holds the layer through its transport (a cycle only the cyclic
#: collector would undo).
_GONE = asyncio.BufferedProtocol()


class TLSTransport(asyncio.Transport):
    """What the protocol on top of a :class:`TLSLayer` writes to and pauses."""

    def __init__(self, layer: TLSLayer) -> None:
        super().__init__()
        self._layer = layer

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._layer._app_write(data)

    def writelines(self, list_of_data: Any) -> None:
        self._layer._app_write(b"".join(list_of_data))

    def close(self) -> None:
        self._layer._app_close()

    def abort(self) -> None:
        self._layer._app_abort()

    def is_closing(self) -> bool:
        return self._layer._app_is_closing()

    def pause_reading(self) -> None:
        self._layer._app_pause_reading()

    def resume_reading(self) -> None:
        self._layer._app_resume_reading()

    def is_reading(self) -> bool:
        return not self._layer._app_paused

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        tcp = self._layer._tcp
        return 0 if tcp is None else tcp.get_write_buffer_size()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        tcp = self._layer._tcp
        if tcp is not None:
            tcp.set_write_buffer_limits(high, low)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._layer._extra_info(name, default)
