"""Which upstream connection carries the next stream.

The pool only chooses: it asks its connections, oldest first, for a stream slot
(each connection counts its own, never more than the peer's
``SETTINGS_MAX_CONCURRENT_STREAMS``, and offers none while it is blocked), and
opens another connection when none has room, one at a time, as its
:class:`~.growth.PoolGrowth` allows. Requests that find no slot wait in arrival order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import traceback
from collections import deque
from collections.abc import Awaitable, Callable

from ..config import Config
from ..errors import PROXY_INTERNAL_ERROR, UpstreamError
from ..http2.dial import connect
from ..http2.pingbackoff import PingBackoff
from ..http2.streams import StreamSlot
from ..http2.tlslayer import SessionCache
from ..http2.upstream import ConnState, UpstreamConnection
from ..http2.windows import WindowBudget
from ..logs import plural
from ..stats import Stats
from .growth import PoolGrowth

log = logging.getLogger("h2ping.pool")

#: Tested on every request's end (an enum member's load costs seven times a module name's).
_CLOSED = ConnState.CLOSED


def _clear_frames(exc: BaseException) -> None:
    """Clear the frames of a dial's failure and of what it happened in: kept by
    the tracebacks, they hold the connection, which holds the failure (a cycle
    only the cyclic collector would undo)."""
    cause: BaseException | None = exc
    while cause is not None:
        traceback.clear_frames(cause.__traceback__)
        cause = cause.__context__


class Pool:
    def __init__(
        self,
        config: Config,
        ssl_context: ssl.SSLContext | None,
        stats: Stats,
        *,
        dial: Callable[..., Awaitable[UpstreamConnection]] = connect,
    ) -> None:
        """``dial`` opens a connection, with :func:`~h2ping.http2.dial.connect`'s arguments."""
        self._config = config
        self._dial = dial
        self._stats = stats
        self._ssl_context = ssl_context
        self._conns: list[UpstreamConnection] = []
        self._waiters: deque[asyncio.Future[StreamSlot]] = deque()
        self._patient: set[asyncio.Future[StreamSlot]] = set()  # no slot before SETTINGS
        self._connecting: asyncio.Task[None] | None = None
        self._retiring: list[UpstreamConnection] = []  # past max-conn-age, still taking streams
        self._next_id = 1
        self._closed = False
        self._answered_before = 0  # by connections no longer in the pool
        # What connections said, to act on from the loop (latest state of each).
        self._news: dict[UpstreamConnection, ConnState] = {}
        self._news_due = False
        self._ping_backoff = PingBackoff(config.ping_interval, stats)  # new connections' PINGs
        self._tls_sessions = SessionCache()  # the next connection resumes the latest
        self.window_budget = WindowBudget(config.receive_window_budget)  # its streams' windows
        target = f"{config.upstream.host}:{config.upstream.port}"
        clock = asyncio.get_running_loop().time
        self._growth = PoolGrowth(target, config.max_upstream_conns, clock)

    @property
    def connections(self) -> list[UpstreamConnection]:
        return list(self._conns)

    def stream_limit(self) -> int | None:
        """The fewest streams an open connection takes at once (its peer's
        limit, or our cap), None before any connection has said."""
        limits = [conn.table.max_streams for conn in self._conns if conn.table.max_streams > 0]
        cap = self._config.max_streams_per_conn
        least = min(limits, default=None)
        return least if not cap or least is None else min(least, cap)

    @property
    def refusal(self) -> UpstreamError | None:
        """Why requests fail while the upstream's new connections allow no streams."""
        return self._growth.refusal

    @property
    def answered(self) -> int:
        """Streams the upstream has sent response headers for, ever: it grows while
        the upstream takes work, even while it refuses some streams."""
        return self._answered_before + sum(conn.answered for conn in self._conns)

    async def acquire(self, *, early: bool = True) -> StreamSlot:
        """A stream slot for the caller, waiting for one if need be.

        The caller must either ``open`` it or ``release`` it. ``early``: the slot
        may be on a connection still waiting for the server's SETTINGS (a request
        then goes right behind the preface); False waits for an open connection.
        """
        if self._closed:
            raise UpstreamError(PROXY_INTERNAL_ERROR, "proxy is shutting down")
        slot = self.try_acquire()
        if slot is not None:
            return slot
        waiter: asyncio.Future[StreamSlot] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if not early:
            self._patient.add(waiter)
        self._ensure_connecting()
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                waiter.result().release()  # woken, then cancelled before it ran
            else:
                self._discard(waiter)
            raise
        finally:
            self._patient.discard(waiter)
            del waiter  # else a cycle: its failure's traceback holds this frame

    def try_acquire(self) -> StreamSlot | None:
        """A stream slot, if one is free right now and nobody is waiting ahead
        of the caller; else None (then ``acquire``)."""
        if self._closed or self._waiters:
            return None
        return self._reserve()

    def close(self) -> None:
        """Close every connection (GOAWAY) and fail whoever still waits."""
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        for conn in list(self._conns):
            conn.close("proxy shutting down")
        self._fail_waiters(UpstreamError(PROXY_INTERNAL_ERROR, "proxy is shutting down"))

    # ----------------------------------------------------------------- internals

    def _reserve(self) -> StreamSlot | None:
        # Oldest first: concentrates streams, so spare connections can go idle.
        for conn in self._conns:
            slot = conn.table.try_reserve()
            if slot is not None:
                return slot
        return None

    def _on_conn_change(self, conn: UpstreamConnection, state: ConnState) -> None:
        """A connection opened, freed a slot, stopped taking streams or closed:
        it is in ``state`` now (told, not read back from it). The pool acts on it
        from the loop, never within the connection's own call, which may be amid
        the peer's frames: a freed slot goes to the request waiting first from
        there, and an ended connection is counted out there. Meanwhile nobody
        takes the slot ahead of those waiting (``try_acquire``)."""
        if state is not _CLOSED and not self._waiters and self._growth.refusal is None:
            return  # nobody to hand it to, nothing to count out: a new request finds it
        self._news[conn] = state
        if not self._news_due:
            self._news_due = True
            asyncio.get_running_loop().call_soon(self._take_news)

    def _take_news(self) -> None:
        """Act on what the connections said since the loop's last turn."""
        self._news_due = False
        news, self._news = self._news, {}
        for conn, state in news.items():
            if state is ConnState.CLOSED:
                if conn in self._conns:
                    self._conns.remove(conn)
                    self._answered_before += conn.answered
            elif self._growth.refusal is not None and conn.table.max_streams > 0:
                self._growth.allows_some()  # its server raised its limit
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            if self._waiters[0].done():  # cancelled while waiting
                self._waiters.popleft()
                continue
            slot = self._reserve()
            if slot is None:
                break
            self._waiters.popleft().set_result(slot)
        if self._waiters:
            self._ensure_connecting()

    def _ensure_connecting(self) -> None:
        if self._connecting is not None or self._closed:
            return
        growth = self._growth
        if growth.at_limit(len(self._conns)):
            self._retire_old()  # no successor can open: let them drain to make room
            return
        self._connecting = asyncio.get_running_loop().create_task(self._open(growth.wait()))

    async def _open(self, wait: float) -> None:
        if wait > 0:
            await asyncio.sleep(wait)  # the back-off after a connection that allowed none
        conn_id = self._next_id
        self._next_id += 1
        try:
            conn = await self._dial(
                self._config,
                self._ssl_context,
                conn_id,
                self._on_conn_change,
                self._stats,
                self._on_conn_age,
                ping_backoff=self._ping_backoff,
                tls_sessions=self._tls_sessions,
                on_preface=self._on_preface,
                window_budget=self.window_budget,
            )
        except Exception as exc:
            _clear_frames(exc)
            if not isinstance(exc, UpstreamError):  # a bug of ours: fail, never hang
                log.exception(
                    "conn=%d connect to %s: internal error", conn_id, self._config.upstream
                )
                exc = UpstreamError(PROXY_INTERNAL_ERROR, "internal error while connecting")
            exc.conn_id = conn_id
            # Each request waiting for it logs the failure, naming itself and this
            # conn: one line per failure. Nobody waiting (a successor): say it here.
            level = logging.DEBUG if self._waiters else logging.WARNING
            log.log(level, "conn=%d connect to %s failed: %s", conn_id, self._config.upstream, exc)
            self._connecting = None
            self._retire_old()
            self._fail_waiters(exc)
            return
        self._connecting = None
        self._stats.connection_opened()
        log.debug(
            "conn=%d open to %s, max streams %d", conn_id, conn.upstream, conn.table.max_streams
        )
        if self._closed:
            conn.close("proxy shutting down")
            return
        self._conns.append(conn)
        if conn.state is ConnState.OPEN and conn.table.max_streams == 0:
            refusal = self._growth.allows_none(conn_id)
            self._close_unused_but(conn)
            if not any(c.table.busy for c in self._conns):
                self._fail_waiters(refusal)  # nothing in flight will make room
        elif conn.table.max_streams > 0:
            self._growth.allows_some()
        self._retire_old()
        self._wake()

    def _close_unused_but(self, newest: UpstreamConnection) -> None:
        """Close the older connections that allow no streams and carry none: the
        newest says as much of the server's mood, and each holds a descriptor."""
        for conn in list(self._conns):
            unused = (
                conn.state is ConnState.OPEN and conn.table.max_streams == 0 and not conn.table.busy
            )
            if unused and conn is not newest:
                conn.retire("upstream allows no streams")

    def _on_preface(self, conn: UpstreamConnection) -> None:
        """A connection being dialled has sent its preface: the request first in
        line goes on it now, a round trip before its SETTINGS (and the pool's
        choosing) come. The rest wait for those. Not while the upstream's new
        connections allow no streams: then the SETTINGS decide first."""
        if self._growth.refusal is not None:
            return
        first = next((w for w in self._waiters if not w.done() and w not in self._patient), None)
        if first is not None and (slot := conn.table.try_reserve()) is not None:
            self._waiters.remove(first)
            first.set_result(slot)

    def _on_conn_age(self, conn: UpstreamConnection) -> None:
        """Retire a connection at its age limit. If it was used, the successor opens
        first, busy or idle, so that no request waits for a handshake it would not
        have needed (a request a moment after an idle one closed would); the old
        one stops taking streams once that is up. One never used (a successor no
        request came to) closes at once, and nothing replaces it: an idle proxy
        ends with no connection."""
        if conn.state is not ConnState.OPEN:
            return
        if not conn.table.busy and not self._waiters and not conn.answered:
            self._stats.connection_retired()
            log.info(
                "conn=%d reached its age limit (%.1fs) unused: closing", conn.id, conn.age_limit
            )
            conn.retire("max-conn-age")
            return
        log.info(
            "conn=%d reached its age limit (%.1fs): opening a successor",
            conn.id,
            conn.age_limit,
        )
        self._retiring.append(conn)
        self._ensure_connecting()

    def _retire_old(self) -> None:
        retiring, self._retiring = self._retiring, []
        for conn in retiring:
            if conn.state is not ConnState.OPEN:
                continue  # ended meanwhile
            self._stats.connection_retired()
            log.info("conn=%d retired: finishing %s", conn.id, plural(conn.table.count(), "stream"))
            conn.retire("max-conn-age")

    def _fail_waiters(self, error: UpstreamError) -> None:
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error)

    def _discard(self, waiter: asyncio.Future[StreamSlot]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)
