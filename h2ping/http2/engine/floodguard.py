"""What a peer's frames cost h2ping, and the budget they are charged to (RFC 9113 10.5).

A peer can send frames that ask nothing of h2ping's users and still cost h2ping
work: PINGs and SETTINGS (each answered), PRIORITY and frame types h2ping does
not use (read and dropped), GOAWAYs (each a log line and a walk of the
streams), WINDOW_UPDATEs and RST_STREAMs beyond what h2ping's own sending
explains, informational (1xx) heads, and frames on streams h2ping has let go.
Counting frames is not enough: a 16 KiB SETTINGS frame costs h2 as much as
hundreds of small ones. So each frame is charged what it costs, in units of
one small control frame (about 5 us of h2's handling, an answer included:
h2ping measured a PING at 6.5 us, a WINDOW_UPDATE at 4 us, a SETTINGS entry at
0.2 to 2 us, Huffman-coded header bytes at about 0.17 us each), against a
budget that refills with time and with the work h2ping itself asked for. A
peer that overspends it is flooding: the connection ends with GOAWAY
ENHANCE_YOUR_CALM, and one log line says which kind of frame did it.

What a response is made of (its HEADERS, its DATA, its trailers) is never
charged: that is the work h2ping's clients asked for, bounded by the streams
they open and flow control.

The numbers, and why ordinary traffic stays far below them:

- :data:`BURST` units at once and :data:`PER_SECOND` after: real servers send a
  few control frames per connection (nginx, Go, h2o, Apache, HAProxy: one
  SETTINGS of 3 to 7 entries, its ACK, an occasional PING), gRPC servers a
  keepalive PING every few seconds at most. A thousand small frames at once and
  a hundred a second is far beyond any of them.
- :data:`PER_STREAM` units for each stream h2ping opens: its response may bring
  a RST_STREAM (a server refusing streams under load does that to every one),
  PRIORITY, a WINDOW_UPDATE or two for its request body's start, and an early
  hint or a ``100 Continue`` (charged by size, see :data:`HPACK_BYTES_PER_UNIT`).
- :data:`PER_DATA_SENT` units for each DATA frame h2ping sends: a server gives
  window credit back in WINDOW_UPDATEs, on the stream and the connection, as
  its application reads; Go's server does so for every 4 KiB read, eight
  WINDOW_UPDATEs for one 16 KiB frame. Envoy allows ten per DATA frame sent.
- :data:`GOAWAY_COST`: a server sends one GOAWAY per connection, two for a
  graceful shutdown (a warning with the highest id, then the last); RFC 9113 6.8
  allows more "if circumstances change". Ten at once, then one a second.
- A DATA frame on a stream h2ping let go (a client went away, a response was
  malformed) is data the server sent before it saw h2ping's RST_STREAM: up to
  the stream's window, in the server's usual frame sizes. Such frames of
  :data:`SMALL_DATA` bytes or more cost nothing (per byte, what a download
  costs). Smaller ones (a streamed event each) are free up to
  :data:`IN_FLIGHT_FRAMES` per stream h2ping reset, for the
  :data:`IN_FLIGHT_STREAMS` streams it reset last: a thousand clients that go
  away at once from a thousand event streams leave that many streams' events in
  flight, and charging them would end the connection and every neighbour's
  response with it. Beyond that they cost up to a unit each, so a stream of
  1-byte frames is charged as the flood it is.
- Informational (1xx) heads are charged by size (:mod:`.peerrules`); how many
  one request takes (5, as in Go's transport) is its exchange's rule.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Units a peer may spend at once, and how many come back each second.
BURST = 1000.0
PER_SECOND = 100.0
#: Units earned for each stream h2ping opens, and each DATA frame it sends.
PER_STREAM = 8.0
PER_DATA_SENT = 10.0
#: A SETTINGS entry: up to 2 us in h2's handling (a new identifier), and each is
#: kept and acknowledged.
SETTINGS_ENTRY = 0.25
#: A GOAWAY: a log line and a walk of the connection's streams.
GOAWAY_COST = 100.0
#: Payload bytes of a frame read only to be dropped (an unknown type, GOAWAY
#: debug data) per unit.
BYTES_PER_UNIT = 4096
#: Header block bytes per unit: HPACK decoding (Huffman, in Python) costs about
#: a unit per 30 bytes in the worst case, fewer where fields repeat.
HPACK_BYTES_PER_UNIT = 64
#: DATA frames this large or larger on streams h2ping let go cost nothing.
SMALL_DATA = 1024
#: Frames free on each stream h2ping reset (what the server had in flight
#: before it saw the RST_STREAM), and how many such streams are remembered.
IN_FLIGHT_FRAMES = 64
IN_FLIGHT_STREAMS = 4096

# Kinds of flood, as the log line names them.
PING = "PING frames"
SETTINGS = "SETTINGS frames"
PRIORITY = "PRIORITY frames"
RST_STREAM = "RST_STREAM frames"
WINDOW_UPDATE = "WINDOW_UPDATE frames"
GOAWAY = "GOAWAY frames"
EMPTY_DATA = "empty DATA frames"
UNKNOWN = "frames of extension or unknown types"
CLOSED_STREAMS = "frames on closed streams"
INFORMATIONAL = "informational (1xx) heads"


class FloodError(Exception):
    """The peer spent more than its budget: ``kind`` names what it spent it on."""

    def __init__(self, kind: str) -> None:
        super().__init__(
            f"flood of {kind}: over the budget of {BURST:.0f} control frames "
            f"at once and {PER_SECOND:.0f} a second"
        )
        self.kind = kind


class IdleStreamError(Exception):
    """A frame that RFC 9113 5.1 forbids on a stream never opened (RST_STREAM,
    WINDOW_UPDATE): a connection error of type PROTOCOL_ERROR."""


class FloodGuard:
    """One connection's budget (see the module), charged by its frame splitter
    for each frame and by :class:`~.peerrules.PeerRules` for informational heads.

    ``hears`` finds who still hears a stream (the connection's stream table's
    lookup, :meth:`served_by`; None for a stream let go): given, the guard is a
    client's, charges frames on other streams and RST_STREAMs and
    WINDOW_UPDATEs beyond what the client earned by sending (:meth:`opened`,
    :meth:`sent_data`), and refuses them on streams never opened. Without it (the
    scripted test server), only the frames no request explains are charged."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        hears: Callable[[int], object] | None = None,
    ) -> None:
        self.hears = hears
        #: The highest stream id opened: a higher one (or an even one) is idle.
        self.highest_opened = 0
        self._clock = clock
        self._credit = BURST
        self._credit_at = clock()
        # Streams h2ping reset -> frames still free on each (see the module).
        self._in_flight: dict[int, int] = {}

    def served_by(self, hears: Callable[[int], object]) -> None:
        """The client's stream table's lookup, from now on."""
        self.hears = hears

    def opened(self, stream_id: int) -> None:
        """h2ping opened ``stream_id``: what its response may bring is paid for."""
        self.highest_opened = stream_id
        self._credit = min(BURST, self._credit + PER_STREAM)

    def reset(self, stream_id: int) -> None:
        """h2ping reset ``stream_id``: what the server had in flight on it is paid for."""
        in_flight = self._in_flight
        in_flight[stream_id] = IN_FLIGHT_FRAMES
        if len(in_flight) > IN_FLIGHT_STREAMS:
            del in_flight[next(iter(in_flight))]  # the oldest: long since heard

    def in_flight(self, stream_id: int) -> bool:
        """Whether one more frame on ``stream_id``, let go, is free: the stream was
        reset by h2ping and has not used up what may have been in flight."""
        left = self._in_flight.get(stream_id, 0)
        if left > 1:
            self._in_flight[stream_id] = left - 1
        elif left:
            del self._in_flight[stream_id]
        return left > 0

    def sent_ping(self) -> None:
        """h2ping sent a PING: its ACK is paid for."""
        self._credit = min(BURST, self._credit + 1)

    def sent_data(self) -> None:
        """h2ping sent a DATA frame: the WINDOW_UPDATEs it brings are paid for."""
        self._credit = min(BURST, self._credit + PER_DATA_SENT)

    def idle(self, stream_id: int) -> bool:
        """Whether ``stream_id`` (not 0) was never opened by this client (push is off,
        so every even id is idle too)."""
        return not stream_id & 1 or stream_id > self.highest_opened

    def charge(self, costs: dict[str, float]) -> None:
        """Charge what the frames of one batch cost, by kind; raises
        :class:`FloodError` naming the costliest kind when the budget is spent."""
        now = self._clock()
        credit = min(BURST, self._credit + (now - self._credit_at) * PER_SECOND)
        self._credit_at = now
        credit -= sum(costs.values())
        self._credit = credit
        if credit < 0:
            raise FloodError(max(costs, key=costs.__getitem__))
