"""What the peer says to an upstream connection as a whole, and what is done about it.

The engine (:class:`~.engine.H2Engine`) calls a :class:`PeerEventHandler`, in frame
order, for what concerns no single stream: the peer's SETTINGS, its GOAWAY, PING
ACKs (the liveness check's, or the receive window's, which then grows every open
stream's window: :mod:`h2ping.http2.windows`), WINDOW_UPDATEs, DATA on a stream
already let go, and a bug of ours while serving a stream.

Everything goes one way, from the engine's call to the part it concerns: the
stream table (the peer's stream limit, the streams a GOAWAY left unprocessed,
the windows' raises), the connection's writing (a window opened), its PINGs'
clock, and, for what moves the connection's state (the first SETTINGS opens it,
a GOAWAY drains it), the connection's two entries for that
(:class:`PeerEventsHost`). Nothing here ends the connection: a GOAWAY drains it,
and it closes when its table says the last stream is gone.
"""

from __future__ import annotations

import functools
import logging
from typing import Protocol

from h2.errors import ErrorCodes

from .. import errors
from ..errors import UpstreamError
from .engine import Goaway
from .liveness import Liveness
from .observer import ConnectionObserver
from .outbound import OutboundPump
from .pingbackoff import PingBackoff, punishes_pings
from .streams import StreamTable
from .windows import ReceiveWindow

log = logging.getLogger("h2ping.upstream")


class PeerEventsHost(Protocol):
    """What the handler asks of its connection: its parts (made after the handler,
    which the engine is made with), and the two moves of its state that the peer
    makes. Named here, so that this module needs none of the connection's."""

    @property
    def id(self) -> int: ...
    @property
    def ping_interval(self) -> float: ...
    @property
    def table(self) -> StreamTable: ...
    @property
    def outbound(self) -> OutboundPump: ...
    @property
    def window(self) -> ReceiveWindow: ...
    @property
    def observer(self) -> ConnectionObserver: ...
    def settings_received(self) -> None:
        """The peer's SETTINGS: the first opens the connection."""

    def retire(self, reason: str) -> None:
        """It takes no new streams; it closes once the last one ends."""


class PeerEventHandler:
    """The engine's :class:`~.engine.PeerEvents` for one connection; it owns what
    the peer's GOAWAYs said."""

    def __init__(
        self,
        conn: PeerEventsHost,
        liveness: Liveness,
        ping_backoff: PingBackoff | None,
    ) -> None:
        """``ping_backoff``, shared by the connections to one upstream, hears of a
        GOAWAY that punishes PINGs."""
        self._conn = conn
        self._liveness = liveness
        self._ping_backoff = ping_backoff
        self.goaway_last_stream_id: int | None = None  # the least a GOAWAY said
        self.goaway_error = ""  # the error code of a GOAWAY that had one

    def let_go(self) -> None:
        """The connection ended and its engine calls this no more: let go of what
        leads back to the connection (a cycle only the cyclic collector would undo)."""
        del self._conn, self._liveness
        self._ping_backoff = None

    def on_window_update(self, stream_id: int) -> None:
        conn = self._conn
        if not stream_id:
            conn.outbound.window_opened(None)
        elif (stream := conn.table.stream(stream_id)) is not None:
            conn.outbound.window_opened(stream)

    def on_settings(self, max_concurrent_streams: int, initial_window_changed: bool) -> None:
        self._conn.table.peer_allows(max_concurrent_streams)
        if initial_window_changed:
            self.on_window_update(0)
        self._conn.settings_received()

    def on_ping_ack(self, payload: bytes) -> None:
        conn = self._conn
        window = conn.window
        grown = window.acked(payload)
        if grown is None:  # not the window's: the keepalive's, or another
            conn.observer.ping_acked(payload, self._liveness.on_ack(payload), for_window=False)
            return
        conn.observer.ping_acked(payload, window.rtt, for_window=True)
        if grown:
            conn.table.widen(grown)
            conn.observer.window_widened(window.size, window.rtt or 0.0)

    def on_internal_error(self, stream_id: int) -> None:
        conn = self._conn
        log.exception("conn=%d stream=%d: internal error", conn.id, stream_id)
        stream = conn.table.stream(stream_id)
        if stream is not None:
            conn.table.reset(stream, ErrorCodes.INTERNAL_ERROR)
            stream.got_error(UpstreamError(errors.PROXY_INTERNAL_ERROR, "internal error"))

    def on_goaway(self, goaway: Goaway) -> None:
        """The connection drains: h2 never hears of a GOAWAY (it would fail the
        streams the server has promised to finish)."""
        conn = self._conn
        # First: it may word the failures that follow (and it counts and logs it).
        conn.observer.goaway_received(goaway, conn.table.count())
        last = goaway.last_stream_id
        before = self.goaway_last_stream_id
        if before is not None:
            last = min(last, before)
        self.goaway_last_stream_id = last
        if goaway.error_code != ErrorCodes.NO_ERROR:
            self.goaway_error = goaway.code_name
        backoff = self._ping_backoff
        if backoff is not None and punishes_pings(goaway.error_code, goaway.debug_data):
            self._ping_backoff = None  # once per connection
            backoff.punished(conn.id, conn.ping_interval)
        # Draining first, so that no slot freed below is handed out again.
        conn.retire(f"GOAWAY {goaway.code_name}")
        conn.table.refuse_above(last, functools.partial(_unprocessed, goaway, last))


def _unprocessed(goaway: Goaway, last: int, first: bool) -> UpstreamError:
    """Why a stream above a GOAWAY's ``last`` stream id fails: it was never
    processed, so it is safe to replay. With an error code, the ``first`` of them
    may be what the server choked on (a head it would not take, say): it is a
    suspect, given one more try only."""
    suspect = first and goaway.error_code != ErrorCodes.NO_ERROR
    why = f"GOAWAY last_stream_id={last} before the stream was processed"
    if suspect:
        why = f"GOAWAY {goaway.code_name} right after the stream was sent, unprocessed"
    return UpstreamError(errors.CONNECTION_TERMINATED, why, retryable=True, suspect=suspect)
