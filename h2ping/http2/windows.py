"""How much response data the server may send ahead on each stream of one connection.

A stream's receive window is a promise to buffer: a client that reads slowly
holds its stream's credit, and the server may still send that much. Too small a
window caps a stream at window / round trip on a long link; too large a one, on
a short fast link, only puts megabytes of one response ahead of every other
response on the connection. So the window follows the link, measured with PINGs
as gRPC's bandwidth-delay-product estimator does:

- The preface announces :data:`FLOOR_WINDOW` and carries a PING. Its ACK gives
  the link's round trip, and the window becomes what :data:`ASSUMED_RATE` moves
  in it: a stream is not held back before the link has shown what it carries.
  That round trip also holds what the server does first on a new connection
  (its TLS session tickets and its own SETTINGS go out before the ACK), which
  on a short link is most of it: 1.3 ms measured on loopback where the PINGs
  after it saw 0.3 ms, a window of 208 KB where 128 KiB is already more than
  the link holds, all of it ahead of any other response. So the preface's
  round trip sizes the window only from :data:`SIZING_RTT` on; below, the
  window starts at the floor and grows as the samples below show the link needs.
- While responses flow (a quarter of a window read since the last PING), one
  PING at a time, at most one per :data:`PING_SPACING`, counts the bytes that
  arrive before its ACK. When they fill two thirds of the window, the window may
  be what holds the link back: it becomes twice what the link holds, the
  sample's bandwidth times the least round trip seen (h2 returns credit once
  half a window is read, hence twice). The least round trip, not the sample's:
  a full window on a short link only queues, which lengthens the round trip and
  not the bandwidth, and must not grow the window (gRPC's rule, growing on any
  new highest bandwidth, grows it to the cap on loopback).
- Never past ``cap`` (``-max-receive-window``), and never smaller: the streams'
  windows only grow, each by a WINDOW_UPDATE of its own (those open at the
  raise, a new one right after its HEADERS), never by a new
  SETTINGS_INITIAL_WINDOW_SIZE, which takes effect at each end at a different time.
- A stream's window past the announced one comes out of a :class:`WindowBudget`
  that all the connections of a process share (``-receive-window-budget``): a
  window is a promise to buffer, and a thousand slow clients each holding a
  stream's full window would hold gigabytes. Once the budget is spent, streams
  keep what they have and new ones get the announced window only; a stream's
  share comes back when it ends.

With PINGs off (``-ping-interval 0``) nothing is measured: every stream gets
:data:`UNMEASURED_WINDOW` (capped).
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: The preface's stream window, before the round trip is known.
FLOOR_WINDOW = 128 * 1024
#: The window for a link that was never measured.
UNMEASURED_WINDOW = 4 * 1024 * 1024
#: Bytes per second a stream is assumed to move until the link shows more: the
#: first window is the round trip times this (4.8 MB at 30 ms, 12.8 MB at 80 ms).
ASSUMED_RATE = 160_000_000
#: The least preface round trip that sizes the window (see the module): a
#: shorter link starts at the floor, and its samples grow it a few round trips on.
SIZING_RTT = 0.005
#: At most one measuring PING this often, so a short link is not flooded with
#: PINGs for as long as data flows (on a long one, one per round trip).
PING_SPACING = 0.01
#: The connection's window: room for four streams at the default cap, and never
#: less than one stream's.
CONNECTION_WINDOW = 64 * 1024 * 1024
#: Flow-control windows are 31-bit (RFC 9113 section 6.9.1).
LARGEST_WINDOW = 2**31 - 1

# As gRPC's: a sample of at least BETA of the window grows it to GAMMA times
# what the link holds.
_BETA, _GAMMA = 0.66, 2
#: Our PINGs' payloads start so; the liveness PINGs' never do.
_MARK = b"\xb0"


def connection_window(cap: int) -> int:
    """The connection's receive window for streams of at most ``cap`` each."""
    return max(CONNECTION_WINDOW, cap)


class WindowBudget:
    """The receive window granted past the announced one, over every stream of the
    connections that share it (a pool's): what slow clients can have buffered
    for them in all, beyond the announced window each. The streams' tables take
    from it as windows grow and give back what a stream had when it ends."""

    __slots__ = ("granted", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.granted = 0

    def take(self, wanted: int) -> int:
        """Up to ``wanted`` bytes of window, as much as is left."""
        granted = max(0, min(wanted, self.limit - self.granted))
        self.granted += granted
        return granted

    def give(self, nbytes: int) -> None:
        """A stream that had ``nbytes`` of it ended."""
        self.granted -= nbytes


def unbounded() -> WindowBudget:
    """For a connection that shares no budget (``h2ping check``'s): its windows
    grow as the link says, up to their cap."""
    return WindowBudget(2**63 - 1)


class ReceiveWindow:
    """One connection's per-stream receive window, and the PINGs that size it.

    The connection tells it of every read (:meth:`received`) and every PING ACK
    (:meth:`acked`), and sends the PINGs it asks for; it alone decides the size."""

    __slots__ = (
        "_clock",
        "_count",
        "_next_ping",
        "_payload",
        "_rtt",
        "_sample",
        "_sent_at",
        "_since",
        "announced",
        "budget",
        "cap",
        "measuring",
        "size",
    )

    def __init__(
        self,
        cap: int,
        measuring: bool,
        clock: Callable[[], float] = time.perf_counter,
        budget: WindowBudget | None = None,
    ) -> None:
        """``measuring``: PINGs may be sent (off with ``-ping-interval 0``). ``clock``
        times the round trips (the loop's own clock ticks in whole milliseconds
        on uvloop). ``budget``: where each stream's window past ``announced``
        comes from, shared with other connections (none: no bound but ``cap``)."""
        self._clock = clock
        self.budget = budget if budget is not None else unbounded()
        self.cap = cap
        self.measuring = measuring
        #: SETTINGS_INITIAL_WINDOW_SIZE in the preface: a new stream's window at first.
        self.announced = min(cap, FLOOR_WINDOW if measuring else UNMEASURED_WINDOW)
        #: Each stream's window now; a new stream gets the rest past ``announced``.
        self.size = self.announced
        self._payload: bytes | None = None  # of the PING in flight
        self._count = 0
        self._sent_at = 0.0
        self._sample = 0  # bytes read since that PING went out
        self._since = 0  # bytes read since the last ACK: is there enough flow to measure?
        self._rtt = 0.0  # the least round trip seen, seconds; 0 until one is
        self._next_ping = 0.0

    @property
    def extra(self) -> int:
        """What a new stream gets past the announced window, by WINDOW_UPDATE."""
        return self.size - self.announced

    @property
    def rtt(self) -> float | None:
        """The link's round trip in seconds (the least seen), once measured."""
        return self._rtt or None

    def first_ping(self) -> bytes | None:
        """The PING to send with the preface: its ACK gives the round trip."""
        return self._ping(self._clock()) if self.measuring else None

    def received(self, nbytes: int) -> bytes | None:
        """``nbytes`` were read, a share of a response or not: a PING's payload
        when one should go out now (the caller sends it at once), else None."""
        if self._payload is not None:
            self._sample += nbytes
            return None
        self._since += nbytes
        # Less than a quarter window between two PINGs cannot fill two thirds of
        # it: a trickle of small responses sends no PINGs.
        if (
            not self.measuring
            or self._since < self.size >> 2
            or self.size >= self.cap
            or (now := self._clock()) < self._next_ping
        ):
            return None
        return self._ping(now)

    def acked(self, payload: bytes) -> int | None:
        """A PING ACK with ``payload`` arrived. None if it answers no PING of
        ours; else by how much each stream's window grows (0: not at all)."""
        if payload != self._payload:
            return None
        now = self._clock()
        self._payload = None
        self._next_ping = now + PING_SPACING
        rtt = max(now - self._sent_at, 1e-6)
        if not self._rtt:  # the preface's PING: no data flowed yet
            self._rtt = rtt
            return self._grow(int(rtt * ASSUMED_RATE)) if rtt >= SIZING_RTT else 0
        self._rtt = min(self._rtt, rtt)
        if self._sample < _BETA * self.size:
            return 0  # the window is not what holds the link back
        return self._grow(int(_GAMMA * self._sample * self._rtt / rtt))

    def _grow(self, wanted: int) -> int:
        new = min(self.cap, wanted)
        if new <= self.size:
            return 0
        grown, self.size = new - self.size, new
        return grown

    def _ping(self, now: float) -> bytes:
        self._count += 1
        self._payload = _MARK + self._count.to_bytes(7, "big")
        self._sent_at = now
        self._sample = self._since = 0
        return self._payload
