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
    """The inbound schedule of one connection.

    ``take_batch(budget)`` handles about ``budget`` bytes of the backlog and
    returns how many; ``backlog_ready()`` says whether whole frames wait;
    ``over()`` whether the connection has ended (then nothing more is taken);
    ``open_streams()`` how many streams the connection carries (turn_share)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        take_batch: Callable[[int], int],
        backlog_ready: Callable[[], bool],
        over: Callable[[], bool],
        open_streams: Callable[[], int],
    ) -> None:
        self._loop = loop
        self._take_batch = take_batch
        self._backlog_ready = backlog_ready
        self._over = over
        self._open_streams = open_streams
        self._transport: asyncio.Transport | None = None
        self._next: asyncio.Handle | None = None  # the next batch, next iteration
        self._reset: asyncio.Handle | None = None  # ends this iteration's share
        self._taken = 0  # inbound bytes handled in this loop iteration
        self._read_paused = False  # while frames wait for their turn
        self._held = False  # by hold(): the peer does not take what we write
        self._reading = True  # what the transport was last told

    def attach(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def arrived(self) -> None:
        """Bytes were added to the backlog."""
        if self._next is None:  # else the next turn takes these bytes too
            self._take_turn()

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
        """As :meth:`stop`, for good: let go of the connection's callbacks (a cycle
        only the cyclic collector would undo) and of its transport."""
        self.stop()
        self._take_batch = _take_nothing
        self._backlog_ready = _no
        self._over = _yes
        self._open_streams = _no_streams
        self._transport = None

    def _take_turn(self) -> None:
        """Handle what arrived, up to this iteration's share; leave the rest for
        the next, not reading meanwhile."""
        share = turn_share(self._open_streams())
        taken = self._take_batch(share - self._taken)
        if self._over():
            return
        self._taken += taken
        if self._backlog_ready() or self._taken >= share:
            # Paused even with nothing left: else the loop would hand over the
            # next read in this same iteration (uvloop reads up to 32 times).
            if self._reset is not None:
                self._reset.cancel()
                self._reset = None
            self._next = self._loop.call_soon(self._next_turn)
            self._read_paused = True
            self._apply()
            return
        if self._read_paused:
            self._read_paused = False
            self._apply()
        if self._taken and self._reset is None:
            self._reset = self._loop.call_soon(self._end_iteration)

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

    def _next_turn(self) -> None:
        self._next = None
        self._taken = 0
        self._take_turn()

    def _end_iteration(self) -> None:
        """Reads in the next loop iteration get a share of their own."""
        self._reset = None
        self._taken = 0


def _take_nothing(budget: int) -> int:
    return 0


def _yes() -> bool:
    return True


def _no() -> bool:
    return False


def _no_streams() -> int:
    return 0
