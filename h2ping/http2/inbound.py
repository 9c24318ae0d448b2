"""When an upstream connection handles what it read: in turns, so that one
connection moving at full speed leaves the event loop to the others.

Each loop iteration, a connection handles about one turn's share of its inbound
frames (over all the reads the loop hands over in that iteration): INBOUND_BATCH,
or STREAM_SHARE for each of its open streams when that is more, up to TURN_MAX.
If more is waiting, it stops reading the transport and takes the next share in
the next iteration; so the backlog stays about one share. Unread bytes wait in the
kernel, or in h2ping's TLS layer, which hands them over in order before any close
(see :mod:`h2ping.http2.tlslayer`).

Why the share grows with the streams: each client gets what a turn brought it in
one write, at the iteration's end. With a thousand streams of small events, a
64 KiB turn holds less than one event per stream, so a backlog (after a pause of
the process, say) is written out as one write per event, which costs as much as
the events arriving meanwhile: the backlog never shrank. A share of a few frames
per stream writes several events at once and catches up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

#: At most about this much of what the upstream sent is handled per loop turn
#: (its DATA delivered to clients included), so that one response moving at
#: full speed leaves the event loop to the others.
INBOUND_BATCH = 64 * 1024
#: A turn's share per open stream, when those add up to more than INBOUND_BATCH:
#: about ten small events each.
STREAM_SHARE = 1024
#: The largest turn, however many streams are open.
TURN_MAX = 1024 * 1024
#: The most one read takes from the socket: INBOUND_BATCH, and a TLS record more.
#: A larger share takes several reads in the iteration.
READ_SIZE = INBOUND_BATCH + 16 * 1024


def turn_share(open_streams: int) -> int:
    """How much inbound a connection with ``open_streams`` handles per iteration."""
    return min(TURN_MAX, max(INBOUND_BATCH, open_streams * STREAM_SHARE))


class InboundTurns:
    """The inbound schedule of one connection: it says how much the connection
    handles now and when it handles more; the connection handles it.

    The connection asks :meth:`budget` when bytes arrived, handles about that
    much of its backlog and says what came of it (:meth:`took`: how much, and
    whether whole frames still wait). When more waits, the schedule stops the
    transport's reading and has the loop call ``turn(True)`` (the connection's)
    next iteration, which does the same again, saying it is the turn that was
    scheduled (``budget(..., scheduled=True)``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, turn: Callable[[bool], None]) -> None:
        self._loop = loop
        self._turn = turn
        self._transport: asyncio.Transport | None = None
        self._next: asyncio.Handle | None = None  # the next turn, next iteration
        self._reset: asyncio.Handle | None = None  # ends this iteration's share
        self._share = 0  # this iteration's share, as the last budget() said
        self._taken = 0  # inbound bytes handled in this loop iteration
        self._read_paused = False  # while frames wait for their turn
        self._held = False  # by hold(): the peer does not take what we write
        self._reading = True  # what the transport was last told

    def attach(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def budget(self, open_streams: int, scheduled: bool = False) -> int | None:
        """How much of what arrived the connection, carrying ``open_streams``
        streams, handles now: the rest of this iteration's share (then it tells
        :meth:`took`); None when a turn is already scheduled (it takes these
        bytes too). ``scheduled``: this is that turn, a new iteration's share."""
        if scheduled:
            self._next = None
            self._taken = 0
        elif self._next is not None:
            return None
        self._share = share = turn_share(open_streams)
        return share - self._taken

    def took(self, taken: int, backlog: bool) -> None:
        """The connection handled ``taken`` bytes (of :meth:`budget`'s);
        ``backlog``: whole frames still wait. Leave the rest for the next
        iteration, not reading meanwhile."""
        self._taken += taken
        if backlog or self._taken >= self._share:
            # Paused even with nothing left: else the loop would hand over the
            # next read in this same iteration (uvloop reads up to 32 times).
            if self._reset is not None:
                self._reset.cancel()
                self._reset = None
            self._next = self._loop.call_soon(self._turn, True)
            self._read_paused = True
            self._apply()
            return
        if self._read_paused:
            self._read_paused = False
            self._apply()
        if self._taken and self._reset is None:
            self._reset = self._loop.call_soon(self._end_iteration)

    def hold(self, held: bool) -> None:
        """Read nothing more while ``held`` (the peer does not read what the
        connection writes, :mod:`h2ping.http2.writeblock`), whatever the backlog says;
        what was read already is still handled, one share a turn."""
        self._held = held
        self._apply()

    def stop(self) -> None:
        """No more turns (the connection ended, or takes the rest at once)."""
        for handle in (self._next, self._reset):
            if handle is not None:
                handle.cancel()
        self._next = self._reset = None

    def let_go(self) -> None:
        """As :meth:`stop`, for good: let go of the connection's callback (a cycle
        only the cyclic collector would undo) and of its transport."""
        self.stop()
        self._turn = _no_turn
        self._transport = None

    def _apply(self) -> None:
        """Tell the transport to read or not, as the backlog and the hold say."""
        reading = not (self._read_paused or self._held)
        transport = self._transport
        if reading is self._reading or transport is None or transport.is_closing():
            return
        self._reading = reading
        if reading:
            transport.resume_reading()
        else:
            transport.pause_reading()

    def _end_iteration(self) -> None:
        """Reads in the next loop iteration get a share of their own."""
        self._reset = None
        self._taken = 0


def _no_turn(scheduled: bool) -> None:
    pass
