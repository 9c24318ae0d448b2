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

What is counted and logged of a connection's life is counted and logged here,
by observers the connection's maker gives it (:func:`reported`, composed with
:class:`Observers`): :class:`ConnectionMetrics` (GOAWAYs, resumed TLS sessions)
and :class:`ConnectionLog` (a GOAWAY that says something new). The connection
itself only tells. What is measured inside a part (a PING's round trip, a
receive window's growth, how long a dead peer was silent) is counted where it
is measured.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from typing import Protocol

from h2.errors import ErrorCodes

from ..stats import Stats
from .engine import Goaway

log = logging.getLogger("h2ping.upstream")


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

    def goaway_received(self, goaway: Goaway, open_streams: int) -> None:
        """The peer sent a GOAWAY while ``open_streams`` streams were open; told
        before the connection drains or fails a stream for it."""

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

    def goaway_received(self, goaway: Goaway, open_streams: int) -> None:
        pass

    def stream_reset(self, stream_id: int, error_code: int, by_peer: bool) -> None:
        pass

    def socket_lost(self, exc: Exception | None, by_peer: bool) -> None:
        pass

    def closed(self, reason: str) -> None:
        pass


#: The one observer of every connection nobody watches (it keeps nothing).
UNOBSERVED: ConnectionObserver = Unobserved()


class Observers:
    """Several observers of one connection, each told every moment, in the order given."""

    __slots__ = ("_observers",)

    def __init__(self, *observers: ConnectionObserver) -> None:
        self._observers = observers

    def dialled(self) -> None:
        for observer in self._observers:
            observer.dialled()

    def tls_done(self, ssl_object: ssl.SSLObject) -> None:
        for observer in self._observers:
            observer.tls_done(ssl_object)

    def settings_heard(self, settings: Mapping[int, int]) -> None:
        for observer in self._observers:
            observer.settings_heard(settings)

    def ping_sent(self, payload: bytes) -> None:
        for observer in self._observers:
            observer.ping_sent(payload)

    def ping_acked(self, payload: bytes) -> None:
        for observer in self._observers:
            observer.ping_acked(payload)

    def goaway_received(self, goaway: Goaway, open_streams: int) -> None:
        for observer in self._observers:
            observer.goaway_received(goaway, open_streams)

    def stream_reset(self, stream_id: int, error_code: int, by_peer: bool) -> None:
        for observer in self._observers:
            observer.stream_reset(stream_id, error_code, by_peer)

    def socket_lost(self, exc: Exception | None, by_peer: bool) -> None:
        for observer in self._observers:
            observer.socket_lost(exc, by_peer)

    def closed(self, reason: str) -> None:
        for observer in self._observers:
            observer.closed(reason)


class ConnectionMetrics(Unobserved):
    """Counts what a connection's life adds to the proxy's counters (``stats``):
    the GOAWAYs it received, and whether its TLS handshake resumed a session."""

    __slots__ = ("_stats",)

    def __init__(self, stats: Stats) -> None:
        self._stats = stats

    def tls_done(self, ssl_object: ssl.SSLObject) -> None:
        if ssl_object.session_reused:
            self._stats.tls_resumed()

    def goaway_received(self, goaway: Goaway, open_streams: int) -> None:
        self._stats.goaway_received()


class ConnectionLog(Unobserved):
    """Logs what a connection's life says that an operator reads: a GOAWAY, when
    it says something new (a repeated one, which the engine's flood budget ends a
    connection for sending many of, is no news). One per connection: it
    remembers what it has said."""

    __slots__ = ("_error", "_id", "_least")

    def __init__(self, conn_id: int) -> None:
        self._id = conn_id
        self._least: int | None = None  # the least last stream id a GOAWAY said
        self._error = ""  # the error code of the latest GOAWAY that had one

    def goaway_received(self, goaway: Goaway, open_streams: int) -> None:
        before = self._least
        last = goaway.last_stream_id if before is None else min(goaway.last_stream_id, before)
        self._least = last
        if before is None or last < before or goaway.code_name != (self._error or "NO_ERROR"):
            log.info(
                "conn=%d GOAWAY received: %s open_streams=%d",
                self._id,
                goaway.describe(last),
                open_streams,
            )
        if goaway.error_code != ErrorCodes.NO_ERROR:
            self._error = goaway.code_name


def reported(stats: Stats, conn_id: int, *others: ConnectionObserver) -> ConnectionObserver:
    """The observer of a connection the proxy counts and logs: its metrics and its
    log, then ``others`` (the check's probe, say)."""
    return Observers(ConnectionMetrics(stats), ConnectionLog(conn_id), *others)
