"""Back-pressure from the upstream: when it stops taking what a connection writes.

Everything a connection writes answers something or carries a request: a
RST_STREAM for a frame on a stream it reset, a PING ACK, WINDOW_UPDATEs, request
HEADERS and bodies. A peer that goes on sending while it reads nothing of that
would have h2ping buffer the answers without end (a stream of 1-byte DATA frames
on a reset stream, each answered by a 13-byte RST_STREAM, grew memory by a
megabyte a second and never stopped). So, as Go's transport does (its read loop
blocks on its writes):

- When the transport's write buffer passes its high-water mark
  (``pause_writing``), the connection stops reading (the unread bytes wait in the
  kernel, which in turn stops the peer's sending) and takes no new streams, and
  request bodies stop being framed (:mod:`h2ping.http2.outbound`).
- When it drains (``resume_writing``), it reads again and takes streams again.
- If it stays blocked for ``-write-timeout`` with the buffer not
  shrinking at all meanwhile (a slow link drains a little, a peer that does not
  read drains nothing), the connection is cut: one log line, and its streams
  fail with a 502 that says why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from .. import errors
from ..errors import UpstreamError
from .observer import UNOBSERVED, ConnectionObserver
from .streams import StreamTable


class Reading(Protocol):
    """The connection's inbound schedule (:class:`~.inbound.InboundTurns`)."""

    def hold(self, held: bool) -> None: ...


class Writing(Protocol):
    """The connection's outbound side (:class:`~.outbound.OutboundPump`)."""

    def pause_writing(self) -> None: ...
    def resume_writing(self) -> None: ...


class WriteBlock:
    """Whether one connection's writes are blocked, and its deadline; it tells the
    connection's stream table, which hands out no slot meanwhile."""

    __slots__ = (
        "_cut",
        "_handle",
        "_id",
        "_loop",
        "_observer",
        "_outbound",
        "_reading",
        "_since",
        "_table",
        "_transport",
        "_waiting",
        "blocked",
        "timeout",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        conn_id: int,
        cut: Callable[[str, UpstreamError], None],
        timeout: float,
        observer: ConnectionObserver = UNOBSERVED,
    ) -> None:
        """``cut(reason, error)`` ends the connection, failing its streams with
        ``error``; ``timeout``: how long the buffer may stay blocked without shrinking;
        ``observer``: the connection's, told of a stall before the cut."""
        self._id = conn_id
        self._observer = observer
        self._cut: Callable[[str, UpstreamError], None] | None = cut  # None once it ended
        self.timeout = timeout
        self.blocked = False
        self._loop = loop
        self._handle: asyncio.TimerHandle | None = None
        self._transport: asyncio.WriteTransport | None = None
        self._reading: Reading | None = None
        self._outbound: Writing | None = None
        self._table: StreamTable | None = None
        self._since = 0.0  # loop time the buffer last shrank (or the block began)
        self._waiting = 0  # bytes buffered at the last check

    def attach(
        self,
        transport: asyncio.WriteTransport,
        reading: Reading,
        writing: Writing,
        table: StreamTable,
    ) -> None:
        """The connection is made: its transport, its reading and writing, and
        its stream table, which hands out no slot while writes are blocked."""
        self._transport = transport
        self._reading = reading
        self._outbound = writing
        self._table = table

    def paused(self) -> None:
        """The transport's buffer passed its high-water mark."""
        if self._outbound is not None:
            self._outbound.pause_writing()
        if self.blocked or self._reading is None or self._table is None:
            return
        self.blocked = True
        self._table.writes_paused()
        self._reading.hold(True)
        self._since = self._loop.time()
        self._waiting = self._buffered()
        self._handle = self._loop.call_later(self.timeout, self._check)

    def resumed(self) -> None:
        """The buffer drained below its low-water mark."""
        if self.blocked:
            self.blocked = False
            self.stop()
            if self._reading is not None:
                self._reading.hold(False)
            if self._table is not None:
                self._table.writes_resumed()
        if self._outbound is not None:
            self._outbound.resume_writing()

    def stop(self) -> None:
        """No deadline any more (writes flow, or the connection ended)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def let_go(self) -> None:
        """The connection ended: no deadline, and nothing here refers back to it or
        to its parts any more (a cycle only the cyclic collector would undo)."""
        self.stop()
        self.blocked = False
        self._cut = self._reading = self._outbound = self._transport = self._table = None
        self._observer = UNOBSERVED

    def _buffered(self) -> int:
        transport = self._transport
        return 0 if transport is None else transport.get_write_buffer_size()

    def _check(self) -> None:
        self._handle = None
        waiting = self._buffered()
        if waiting < self._waiting:  # it took some: a slow link, not a stalled peer
            self._waiting = waiting
            self._since = self._loop.time()
            self._handle = self._loop.call_later(self.timeout, self._check)
            return
        cut, table = self._cut, self._table
        if cut is None or table is None:
            return
        stalled_for = self._loop.time() - self._since
        self._observer.writes_stalled(waiting, stalled_for, self.timeout, table.count())
        why = (
            f"upstream connection {self._id} stopped reading what h2ping writes "
            f"({waiting} bytes unread for {stalled_for:.1f}s)"
        )
        cut("upstream not reading", UpstreamError(errors.CONNECTION_TERMINATED, why))
