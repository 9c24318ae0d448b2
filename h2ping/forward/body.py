"""Request bodies: each held by one owner, and the memory bound on those kept for replay.

A stream the upstream refused without processing it (REFUSED_STREAM, or above a
GOAWAY's last_stream_id) can be sent again on another connection, but only if the
request body is still at hand. So each exchange's :class:`RequestBody` keeps the
body until the upstream has answered, as far as two limits allow:

- ``--retry-body-limit`` per request. A body that declares a larger
  Content-Length is never kept (decided from the head, as Go's ``httputil``
  reverse proxy does); a chunked body is kept until it crosses the limit, and is
  then released at once.
- ``--max-buffered-bytes`` for all kept bodies together (:class:`RetryBudget`). A
  body that would exceed it streams through without a replay guarantee instead of
  growing memory: a hard bound, unlike a soft garbage-collector target.

Kept or not, what arrives while no stream can take it is held by the same owner
until one does.
"""

from __future__ import annotations

from typing import Protocol

from ..stats import Stats

#: Why a body is not kept (the ``not retried: ...`` part of a 502's details).
TOO_LARGE = "request body larger than retry-body-limit"
BUDGET_REACHED = "kept request bodies reached max-buffered-bytes"


class RetryBudget:
    """The bytes kept by every :class:`RequestBody` of one proxy, against one cap."""

    def __init__(self, limit: int, stats: Stats) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._stats = stats

    def reserve(self, nbytes: int) -> bool:
        """Charge ``nbytes``; False (and one more unkept body) if they do not fit."""
        if self.used + nbytes > self.limit:
            self._stats.body_unkept()
            return False
        self.used += nbytes
        self.peak = max(self.peak, self.used)
        return True

    def release(self, nbytes: int) -> None:
        self.used -= nbytes


class BodySink(Protocol):
    """Where a body goes: an upstream stream."""

    def send(self, data: bytes) -> None: ...
    def end(self) -> None: ...


class RequestBody:
    """One request's body bytes, wherever they are needed: held while no stream can
    take them, and kept whole while a replay may still need them.

    :attr:`chunks` is what the next stream opened for the request is sent first:
    while kept, the whole body so far (a replay resends all of it); once not, only
    what arrived since a stream last took it. Once given up (too large, the budget
    is spent, or the response has begun), the body is never kept again: a replay
    must send the whole body or nothing.
    """

    __slots__ = ("_budget", "_limit", "chunks", "nbytes", "reason", "received", "waiting")

    def __init__(self, budget: RetryBudget, limit: int, content_length: int | None) -> None:
        self._budget = budget
        self._limit = limit
        self.chunks: list[bytes] = []
        self.nbytes = 0  # kept, and charged to the budget
        self.received = 0  # all the body that arrived, kept or not
        #: Arrived since a stream last took the body: the reading back-pressure
        #: while none can (the whole body a replay resends is not counted again).
        self.waiting = 0
        #: Why the body is not kept; empty while it is.
        self.reason = ""
        if content_length is not None and content_length > limit:
            self.reason = TOO_LARGE

    @property
    def kept(self) -> bool:
        """True while a replay could resend the body (so far, all of it is here)."""
        return not self.reason

    def add(self, data: bytes, held: bool = False) -> str:
        """Take the next chunk: sent on at once by the caller, or ``held`` until a
        stream takes it (:meth:`send_on`). It is kept for a replay unless it no
        longer fits; returns why keeping stopped (:data:`TOO_LARGE` or
        :data:`BUDGET_REACHED`) if this chunk stopped it, else ``""``."""
        size = len(data)
        self.received += size
        if held:
            self.waiting += size
        if self.reason:
            if held:
                self.chunks.append(data)
            return ""
        if self.nbytes + size > self._limit:
            reason = TOO_LARGE
        elif self._budget.reserve(size):
            self.chunks.append(data)
            self.nbytes += size
            return ""
        else:
            reason = BUDGET_REACHED
        self.give_up(reason, held)
        if held:
            self.chunks.append(data)
        return reason

    def send_on(self, stream: BodySink, complete: bool) -> None:
        """Begin a new stream's body with :attr:`chunks` (and end it, if the body is
        ``complete``): from now on only a replay needs them."""
        for chunk in self.chunks:
            stream.send(chunk)
        self.waiting = 0
        if self.reason:
            self.chunks.clear()
        if complete:
            stream.end()

    def give_up(self, reason: str, held: bool = False) -> None:
        """Keep nothing more for a replay; the first reason given stays. What was
        kept is freed, unless ``held``: no stream has it yet, so it stays (uncharged)
        until one takes it."""
        if self.nbytes:
            self._budget.release(self.nbytes)
            self.nbytes = 0
        if not held:
            self.chunks.clear()
        self.reason = self.reason or reason

    def release(self) -> None:
        """Free everything: the exchange is over, no stream will take it."""
        if self.nbytes:
            self._budget.release(self.nbytes)
        self.chunks.clear()
        self.nbytes = 0
