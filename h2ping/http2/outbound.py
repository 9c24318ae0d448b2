"""What an upstream connection writes, and when: request bodies taking turns,
window credit given back, and one write per loop turn (the first request of a
turn that is whole in its HEADERS goes at once).

Everything goes through the engine's outbound buffer; :meth:`OutboundPump.flush` hands it
to the transport in one write. Request bodies become DATA frames only as far as
the peer's windows allow, at most PUMP_BATCH between two writes over all of a
connection's streams, and not while the transport has paused writing.
"""

from __future__ import annotations

import asyncio

from .engine import H2Engine
from .streams import UpstreamStream

#: At most this much request body becomes DATA frames between two writes to the
#: socket, over all of a connection's streams (they take turns): so one write
#: stays this size, and so does TLS's buffer for it, which keeps the size of the
#: largest write it ever took; and the transport's pause_writing() acts before
#: more is framed. Else ten uploads with 1 MiB windows left 6 MB of it behind.
#: Small enough that the buffers of one write (the frames, the bytes handed to
#: TLS, the encrypted bytes) stay below malloc's mmap threshold and are reused:
#: at 512 KiB each write took fresh pages, 840 page faults per uploaded MB
#: against 240 (the replay buffer's) at 64 KiB, and 30-40 % more CPU per MB.
PUMP_BATCH = 64 * 1024


class OutboundPump:
    """The sending half of one connection. Its stream table owns its streams; this
    owns which of them wait to send, and the write schedule."""

    def __init__(self, loop: asyncio.AbstractEventLoop, engine: H2Engine) -> None:
        self._loop = loop
        self._engine = engine
        self._transport: asyncio.Transport | None = None
        # Streams whose body waits to be sent, in the order they take turns.
        self._blocked: dict[UpstreamStream, None] = {}
        # Windows the peer opened while the engine handled a batch, in order (a
        # stream, or None: the connection's); pumped once the batch is over.
        self.opened: dict[UpstreamStream | None, None] = {}
        self._unflushed = 0  # DATA bytes framed since the last write (PUMP_BATCH)
        self._write_paused = False
        #: How much request body may become DATA frames before the next write,
        #: over all the streams: PUMP_BATCH less what was framed since the last
        #: write; nothing while the transport has paused writing. A stream frames
        #: its body within it (read, not asked: it is a value kept here).
        self.budget = PUMP_BATCH
        self._pumps_scheduled = False
        self._flush_scheduled = False

    def attach(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    # ------------------------------------------------------------ request bodies
    #
    # A stream whose body grew frames it at once, within budget, and says what
    # came of it (framed); the turns here (the next loop turn, a window opened,
    # the socket drained) frame a waiting stream's body the same way (_pump).
    # Either way one side drives and the other is told values.

    def framed(
        self, stream: UpstreamStream, nbytes: int, spent: bool, queued: bool, ready: bool = False
    ) -> None:
        """``stream`` framed ``nbytes`` of its body; ``spent``: the budget stopped
        it; ``queued``: body still waits (it takes its turn here); ``ready``: its
        queue fell below SEND_LOW_WATER as its sink added to it, which the sink
        hears from the loop (it is amid its own call)."""
        if ready:
            self._loop.call_soon(_tell_ready, stream)
        self._unflushed += nbytes
        self.budget -= nbytes
        if queued:
            if spent and not self._write_paused:  # to the back: the others go first
                self._blocked.pop(stream, None)
                self.schedule_flush()
                self._schedule_pumps()
            self._blocked[stream] = None
        else:
            self._blocked.pop(stream, None)
        self.schedule_flush()

    def _pump(self, stream: UpstreamStream) -> None:
        """A waiting stream's turn: its queued body into DATA frames as far as
        windows allow."""
        framed, spent, ready, queued = stream.frame_body(self.budget)
        self.framed(stream, framed, spent, queued)
        if ready:
            stream.got_send_ready()

    def window_opened(self, stream: UpstreamStream | None) -> None:
        """The peer raised a window: ``stream``'s, or the connection's (None).
        Told amid the engine's batch, which the bodies' frames must not reenter:
        the connection has them pumped once the batch is over (:meth:`pump_opened`),
        before its write."""
        if stream is None or stream in self._blocked:
            self.opened[stream] = None

    def pump_opened(self) -> None:
        """Carry on with the streams whose windows opened, in the order they did."""
        opened, self.opened = self.opened, {}
        for stream in opened:
            if stream is None:
                self._pump_blocked()
            elif stream in self._blocked:
                self._pump(stream)

    def forget(self, stream: UpstreamStream) -> None:
        self._blocked.pop(stream, None)
        if self.opened:
            self.opened.pop(stream, None)

    def _schedule_pumps(self) -> None:
        if not self._pumps_scheduled:
            self._pumps_scheduled = True
            self._loop.call_soon(self._pump_blocked)

    def _pump_blocked(self) -> None:
        """Carry on with every stream whose body waits (next loop turn, or when
        the upstream socket drains)."""
        self._pumps_scheduled = False
        for stream in list(self._blocked):
            if self._write_paused:
                break
            if self._unflushed >= PUMP_BATCH:  # the rest keep their place at the front
                self.schedule_flush()
                self._schedule_pumps()
                break
            if not stream.closed:
                self._pump(stream)

    def pause_writing(self) -> None:
        # The socket buffer is full: stop turning request bodies into frames.
        self._write_paused = True
        self.budget = 0

    def resume_writing(self) -> None:
        self._write_paused = False
        self.budget = PUMP_BATCH - self._unflushed
        self._pump_blocked()

    # ------------------------------------------------------------- window credit

    def give_credit(self, stream_id: int, nbytes: int) -> None:
        """Return ``nbytes`` of received DATA to the peer's windows; h2 batches
        the WINDOW_UPDATE frames."""
        if self._engine.give_credit(stream_id, nbytes):
            self.schedule_flush()

    # ------------------------------------------------------------------ writing

    def schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def flush_first(self) -> None:
        """Write what is queued at once if nothing was queued before it this loop
        turn (a request whole in its HEADERS: the rest of the turn's work is then
        not between it and the server); what is queued after it in the turn goes
        in the turn's one write, as :meth:`schedule_flush` would."""
        if self._flush_scheduled or self._transport is None:
            self.schedule_flush()
            return
        self.flush()
        self.schedule_flush()

    def flush(self) -> None:
        """Hand everything the engine has queued to the transport, in one write."""
        self._flush_scheduled = False
        if self._unflushed:  # bodies were framed since the last write: a new batch
            self._unflushed = 0
            if not self._write_paused:
                self.budget = PUMP_BATCH
        data = self._engine.data_to_send()
        if data and self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)


def _tell_ready(stream: UpstreamStream) -> None:
    """A stream's queue fell below SEND_LOW_WATER while its sink sent on it: the
    sink may send again, unless the stream ended meanwhile or its queue went
    past the high mark again (then it hears so when the queue falls again)."""
    if not stream.closed and not stream.backlogged:
        stream.got_send_ready()
