"""What happens in an upstream connection's life, told to whoever watches it.

An :class:`~.upstream.UpstreamConnection` is given a :class:`ConnectionObserver`
when it is made (the default, :data:`UNOBSERVED`, hears nothing) and tells it each
moment as it comes: dialled, TLS done, the peer's SETTINGS, a PING sent and its
ACK, a GOAWAY, a stream reset either way, the socket lost, the end and why. The
observer only hears: the connection handles each moment as it always does, so a
report built on it (``h2ping check``) does not depend on the order the
connection's methods run in, and nothing needs to subclass the connection.

Where the order matters to an observer, it is promised here: a GOAWAY and the
loss of the socket are told before the connection acts on them (streams fail,
the connection drains or ends), so that an observer hears the cause before its
effects; the end is told once, after the streams it ends have failed. A hook may
end the connection (``close``): its own handling then finds it ended. An
observer that holds its connection makes a reference cycle: fine for one
connection (the check's), not for a pool's many.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Protocol

from .engine import Goaway


class ConnectionObserver(Protocol):
    """The moments of one connection's life; every call is made on the loop."""

    def dialled(self) -> None:
        """The TCP connection is made (through the forward proxy's tunnel, if any)."""

    def tls_done(self, ssl_object: ssl.SSLObject) -> None:
        """The TLS handshake is done and ALPN chose ``h2``."""

    def settings_heard(self, settings: Mapping[int, int]) -> None:
        """A SETTINGS frame of the peer's: every setting sent so far, as sent."""

    def ping_sent(self, payload: bytes) -> None: ...

    def ping_acked(self, payload: bytes) -> None: ...

    def goaway_received(self, goaway: Goaway) -> None:
        """The peer sent a GOAWAY; told before the connection drains or fails a stream for it."""

    def stream_reset(self, stream_id: int, error_code: int, by_peer: bool) -> None:
        """A stream ended with RST_STREAM: sent by the peer, or by the connection's
        stream table (a request given up, a stream a GOAWAY left unprocessed, a
        response complete before its request). A stream that the engine reset for
        a malformed response is told to its request alone."""

    def socket_lost(self, exc: Exception | None, by_peer: bool) -> None:
        """The transport is gone (``exc``: why, None for a clean close): ended by
        the peer or the network (``by_peer``), or after the connection ended it.
        Told before what arrived is handled and the streams fail."""

    def closed(self, reason: str) -> None:
        """The connection ended, and the streams it had open with it; told once."""


class Unobserved:
    """The observer of a connection nobody watches."""

    def dialled(self) -> None:
        pass

    def tls_done(self, ssl_object: ssl.SSLObject) -> None:
        pass

    def settings_heard(self, settings: Mapping[int, int]) -> None:
        pass

    def ping_sent(self, payload: bytes) -> None:
        pass

    def ping_acked(self, payload: bytes) -> None:
        pass

    def goaway_received(self, goaway: Goaway) -> None:
        pass

    def stream_reset(self, stream_id: int, error_code: int, by_peer: bool) -> None:
        pass

    def socket_lost(self, exc: Exception | None, by_peer: bool) -> None:
        pass

    def closed(self, reason: str) -> None:
        pass


#: The one observer of every connection nobody watches (it keeps nothing).
UNOBSERVED: ConnectionObserver = Unobserved()
