"""What happens in an upstream connection's life, told to whoever watches it.

An :class:`~.upstream.UpstreamConnection` is given a :class:`ConnectionObserver`
when it is made (the default, :data:`UNOBSERVED`, hears nothing) and tells it each
moment as it comes: dialled, TLS done, the peer's SETTINGS, a PING sent and its
ACK, the receive window widened, a GOAWAY, a stream reset either way, and the end
and why: the peer found dead, the connection idle, the peer not reading what is
written, the socket lost, the end itself. The
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
:class:`Observers`): :class:`ConnectionMetrics` (PINGs and their round trips,
the window's PINGs and growth, dead peers, GOAWAYs, resumed TLS sessions) and
:class:`ConnectionLog` (a GOAWAY that says something new, the window's growth,
and why a connection ends on its own: a dead peer, idle, a peer not reading).
The connection and its parts only tell, with what they measured (a round trip,
how long a peer was silent).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from typing import Protocol

from h2.errors import ErrorCodes

from ..logs import plural
from ..stats import Stats
from .engine import Goaway

log = logging.getLogger("h2ping.upstream")

_DEAD = (
    "conn=%d dead: nothing received for %.1fs, %.1fs after a PING (ping-timeout %gs); failing %s"
)
_STALLED = (
    "conn=%d upstream is not reading what h2ping writes: %d bytes waiting, none taken "
    "for %.1fs (write-timeout %gs); closing, failing %s"
)


class ConnectionObserver(Protocol):
    """The moments of one connection's life; every call is made on the loop."""

    def dialled(self) -> None:
        """The TCP connection is made (through the forward proxy's tunnel, if any)."""

    def tls_done(self, ssl_object: ssl.SSLObject) -> None:
        """The TLS handshake is done and ALPN chose ``h2``."""

    def settings_heard(self, settings: Mapping[int, int]) -> None:
        """A SETTINGS frame of the peer's: every setting sent so far, as sent."""

    def ping_sent(self, payload: bytes, for_window: bool) -> None:
        """A PING went out: one that times the round trip for the receive window
        (``for_window``), or another (the keepalive's, the check's)."""

    def ping_acked(self, payload: bytes, round_trip: float | None, for_window: bool) -> None:
        """A PING ACK arrived: ``round_trip`` in seconds when it answered the PING
        in flight of its kind (None: an ACK of no PING the connection waits for)."""

    def window_widened(self, size: int, round_trip: float) -> None:
        """The streams' receive window grew to ``size`` bytes, measured over a
        round trip of ``round_trip`` seconds."""

    def goaway_received(self, goaway: Goaway, open_streams: int) -> None:
        """The peer sent a GOAWAY while ``open_streams`` streams were open; told
        before the connection drains or fails a stream for it."""

    def peer_dead(
        self, silent_for: float, since_ping: float, timeout: float, open_streams: int
    ) -> None:
        """Nothing arrived for ``silent_for`` seconds, ``since_ping`` after a PING
        (more than ``timeout``): the connection is cut next, failing ``open_streams``."""

    def went_idle(self, seconds: float) -> None:
        """No stream for ``seconds``: the connection closes next."""

    def writes_stalled(
        self, waiting: int, stalled_for: float, timeout: float, open_streams: int
    ) -> None:
        """The peer took none of the ``waiting`` bytes written for ``stalled_for``
        seconds (more than ``timeout``): the connection is cut next, failing ``open_streams``."""

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

    def ping_sent(self, payload: bytes, for_window: bool) -> None:
        pass

    def ping_acked(self, payload: bytes, round_trip: float | None, for_window: bool) -> None:
        pass

    def window_widened(self, size: int, round_trip: float) -> None:
        pass

    def goaway_received(self, goaway: Goaway, open_streams: int) -> None:
        pass

    def peer_dead(
        self, silent_for: float, since_ping: float, timeout: float, open_streams: int
    ) -> None:
        pass

    def went_idle(self, seconds: float) -> None:
        pass

    def writes_stalled(
        self, waiting: int, stalled_for: float, timeout: float, open_streams: int
    ) -> None:
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

    def ping_sent(self, payload: bytes, for_window: bool) -> None:
        for observer in self._observers:
            observer.ping_sent(payload, for_window)

    def ping_acked(self, payload: bytes, round_trip: float | None, for_window: bool) -> None:
        for observer in self._observers:
            observer.ping_acked(payload, round_trip, for_window)

    def window_widened(self, size: int, round_trip: float) -> None:
        for observer in self._observers:
            observer.window_widened(size, round_trip)

    def goaway_received(self, goaway: Goaway, open_streams: int) -> None:
        for observer in self._observers:
            observer.goaway_received(goaway, open_streams)

    def peer_dead(
        self, silent_for: float, since_ping: float, timeout: float, open_streams: int
    ) -> None:
        for observer in self._observers:
            observer.peer_dead(silent_for, since_ping, timeout, open_streams)

    def went_idle(self, seconds: float) -> None:
        for observer in self._observers:
            observer.went_idle(seconds)

    def writes_stalled(
        self, waiting: int, stalled_for: float, timeout: float, open_streams: int
    ) -> None:
        for observer in self._observers:
            observer.writes_stalled(waiting, stalled_for, timeout, open_streams)

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
    its PINGs, their ACKs and round trips, its window's PINGs and growth, a dead
    peer, the GOAWAYs it received, and whether its TLS handshake resumed a session.
    A PING sent before the peer's first SETTINGS (the window's, behind the
    preface) is counted once they come: a connection that never opened, to a
    server that does not speak HTTP/2, sent nobody a PING worth counting."""

    __slots__ = ("_opened", "_stats", "_unopened_window_pings")

    def __init__(self, stats: Stats) -> None:
        self._stats = stats
        self._opened = False
        self._unopened_window_pings = 0

    def tls_done(self, ssl_object: ssl.SSLObject) -> None:
        if ssl_object.session_reused:
            self._stats.tls_resumed()

    def settings_heard(self, settings: Mapping[int, int]) -> None:
        if not self._opened:
            self._opened = True
            self._stats.window_pinged(self._unopened_window_pings)
            self._unopened_window_pings = 0

    def ping_sent(self, payload: bytes, for_window: bool) -> None:
        if not for_window:
            self._stats.ping_sent()
        elif self._opened:
            self._stats.window_pinged()
        else:
            self._unopened_window_pings += 1

    def ping_acked(self, payload: bytes, round_trip: float | None, for_window: bool) -> None:
        if not for_window:
            self._stats.ping_acked(round_trip)

    def window_widened(self, size: int, round_trip: float) -> None:
        self._stats.window_raised()

    def peer_dead(
        self, silent_for: float, since_ping: float, timeout: float, open_streams: int
    ) -> None:
        self._stats.ping_timed_out()

    def goaway_received(self, goaway: Goaway, open_streams: int) -> None:
        self._stats.goaway_received()


class ConnectionLog(Unobserved):
    """Logs what a connection's life says that an operator reads: a GOAWAY, when
    it says something new (a repeated one, which the engine's flood budget ends a
    connection for sending many of, is no news); why it ends on its own (a dead
    peer, idle, a peer that reads nothing); at debug, its window's growth. One per
    connection: it remembers what it has said."""

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

    def window_widened(self, size: int, round_trip: float) -> None:
        log.debug(
            "conn=%d stream windows now %d bytes (round trip %.2f ms)",
            self._id,
            size,
            round_trip * 1000,
        )

    def peer_dead(
        self, silent_for: float, since_ping: float, timeout: float, open_streams: int
    ) -> None:
        failing = plural(open_streams, "stream")
        log.warning(_DEAD, self._id, silent_for, since_ping, timeout, failing)

    def went_idle(self, seconds: float) -> None:
        log.info("conn=%d idle for %.1fs: closing", self._id, seconds)

    def writes_stalled(
        self, waiting: int, stalled_for: float, timeout: float, open_streams: int
    ) -> None:
        failing = plural(open_streams, "stream")
        log.warning(_STALLED, self._id, waiting, stalled_for, timeout, failing)


def reported(stats: Stats, conn_id: int, *others: ConnectionObserver) -> ConnectionObserver:
    """The observer of a connection the proxy counts and logs: its metrics and its
    log, then ``others`` (the check's probe, say)."""
    return Observers(ConnectionMetrics(stats), ConnectionLog(conn_id), *others)
