"""What client connections write: the bytes queued on one connection during a loop
turn go to its socket in one write (a response written whole goes at once), and a
response none of which went yet can be taken back (so that an error response
takes its place).

:class:`ClientOutput` is the one owner of a connection's queue: response writers
(:mod:`.messages`) queue through it, and ask it whether a response can still be
taken back. One :class:`OutputFlusher` per listener writes the queues.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..sockets import batch_writer
from .messages import OutputMark

log = logging.getLogger("h2ping.listener")


def _nothing() -> None:
    pass


def _discard(parts: list[bytes]) -> None:
    pass


def _discard_one(data: bytes) -> None:
    pass


class OutputFlusher:
    """Writes the output queued on client connections, each in one write, from a
    single callback per loop iteration: many streams' events in one iteration cost
    one scheduled callback, not one per connection."""

    __slots__ = ("_dirty", "_loop", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._dirty: list[ClientOutput] = []
        self._scheduled = False

    def add(self, output: ClientOutput) -> None:
        self._dirty.append(output)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush_all)

    def first(self, output: ClientOutput) -> bool:
        """Whether ``output`` is the only connection with output queued in this
        turn (some may have been written since)."""
        dirty = self._dirty
        return len(dirty) == 1 and dirty[0] is output

    def _flush_all(self) -> None:
        self._scheduled = False
        dirty, self._dirty = self._dirty, []
        for output in dirty:
            try:
                output.flush()
            except Exception:  # one connection's bug must not hold back the others' output
                log.exception("writing to a client connection failed")
                output.fail()  # (what failed was taken off its queue)


class ClientOutput:
    """One client connection's queued output, and the count of its writes.

    A mark (:meth:`mark`) is where a response began; :meth:`take_back` drops what
    was queued since, as long as no write has happened since: then none of the
    response has reached the socket.
    """

    __slots__ = (
        "_closed",
        "_flusher",
        "_flushes",
        "_on_failure",
        "_out",
        "_scheduled",
        "_transport",
        "_write",
        "_write_batch",
    )

    def __init__(self, flusher: OutputFlusher, on_failure: Callable[[], None]) -> None:
        """``on_failure`` is called when a write raised: it cuts the connection."""
        self._flusher = flusher
        self._on_failure = on_failure
        self._transport: asyncio.Transport | None = None
        self._write: Callable[[bytes], None] = _discard_one  # set with the transport
        self._write_batch: Callable[[list[bytes]], None] = _discard  # set with the transport
        self._out: list[bytes] = []
        self._scheduled = False  # with the flusher
        self._flushes = 0  # writes made to the socket
        self._closed = False  # nothing more is queued

    def attach(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._write = transport.write
        self._write_batch = batch_writer(transport)

    def send(self, *parts: bytes) -> None:
        """Queue bytes; they go out in one write at the end of this loop turn."""
        if self._closed:
            return
        self._out.extend(parts)
        if not self._scheduled:
            self._scheduled = True
            self._flusher.add(self)

    def flush(self) -> None:
        """Write what is queued now (the flusher's turn, or the connection's end)."""
        self._scheduled = False
        transport = self._transport
        if self._out and transport is not None and not transport.is_closing():
            out, self._out = self._out, []
            self._flushes += 1
            if len(out) == 1:  # a streamed event, mostly: no list for the transport to walk
                self._write(out[0])
            else:
                self._write_batch(out)

    def write_now(self) -> None:
        """Write what is queued at once, not at the end of this loop turn, if no
        other connection has output queued in this turn (a response written
        whole, with no other behind it). Where several have, they go out
        together at the turn's end: written one by one amid the turn, their
        clients' next requests came back one by one too, each turn then taking
        fewer of them (a fifth more CPU per request at 50 connections)."""
        if not self._flusher.first(self):
            return
        try:
            self.flush()
        except Exception:  # as the flusher does: this connection's, not the caller's
            log.exception("writing to a client connection failed")
            self.fail()

    def mark(self) -> OutputMark:
        """Where what is queued next begins."""
        return (self._flushes, len(self._out))

    def take_back(self, mark: OutputMark) -> bool:
        """Drop what was queued since ``mark``, unless a write happened since (some
        of it may be on the wire): then drop nothing, and say False."""
        flushes, queued = mark
        if self._flushes != flushes:
            return False
        del self._out[queued:]
        return True

    def close(self) -> None:
        """Write what is queued, and take nothing more."""
        self.flush()
        self._closed = True

    def discard(self) -> None:
        """Take nothing more, and drop what could not be written (cut connection)."""
        self._closed = True
        self._out.clear()

    def fail(self) -> None:
        self._on_failure()

    def detach(self) -> None:
        """The transport is gone: take nothing more, and let go of the transport and
        of the connection's callback (a cycle only the cyclic collector would undo)."""
        self.discard()
        self._transport = None
        self._write = _discard_one
        self._write_batch = _discard
        self._on_failure = _nothing
