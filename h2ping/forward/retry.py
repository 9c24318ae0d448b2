"""Request bodies kept for replay, and the memory bound on them all.

A stream the upstream refused without processing it (REFUSED_STREAM, or above a
GOAWAY's last_stream_id) can be sent again on another connection, but only if the
request body is still at hand. So each exchange keeps its body in a
:class:`KeptBody` until the upstream has answered. Two limits apply:

- ``--retry-body-limit`` per request. A body that declares a larger
  Content-Length is never kept (decided from the head, as Go's ``httputil``
  reverse proxy does); a chunked body is kept until it crosses the limit, and is
  then released at once.
- ``--max-buffered-bytes`` for all kept bodies together (:class:`RetryBudget`). A
  body that would exceed it streams through without a replay guarantee instead of
  growing memory: a hard bound, unlike a soft garbage-collector target.
"""

from __future__ import annotations

from ..stats import Stats

#: Why a body is not kept (the ``not retried: ...`` part of a 502's details).
TOO_LARGE = "request body larger than retry-body-limit"
BUDGET_REACHED = "kept request bodies reached max-buffered-bytes"


class RetryBudget:
    """The bytes kept by every :class:`KeptBody` of one proxy, against one cap."""

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


class KeptBody:
    """One request's body, kept while a replay may still need it.

    Once given up (too large, the budget is spent, or the response has begun), it
    is never kept again: a replay must send the whole body or nothing.
    """

    __slots__ = ("_budget", "_limit", "chunks", "nbytes", "reason")

    def __init__(self, budget: RetryBudget, limit: int, content_length: int | None) -> None:
        self._budget = budget
        self._limit = limit
        self.chunks: list[bytes] = []
        self.nbytes = 0
        #: Why the body is not kept; empty while it is.
        self.reason = ""
        if content_length is not None and content_length > limit:
            self.reason = TOO_LARGE

    @property
    def kept(self) -> bool:
        """True while a replay could resend the body (so far, all of it is here)."""
        return not self.reason

    def add(self, data: bytes) -> None:
        """Keep ``data`` too, or give the body up if it no longer fits; then
        :attr:`reason` says why (:data:`TOO_LARGE` or :data:`BUDGET_REACHED`)."""
        if self.reason:
            return
        if self.nbytes + len(data) > self._limit:
            self.give_up(TOO_LARGE)
        elif not self._budget.reserve(len(data)):
            self.give_up(BUDGET_REACHED)
        else:
            self.chunks.append(data)
            self.nbytes += len(data)

    def give_up(self, reason: str) -> None:
        """Free what is kept and keep nothing more; the first reason given stays."""
        self.release()
        self.reason = self.reason or reason

    def release(self) -> None:
        """Free what is kept: the exchange is over, nothing will replay it."""
        if self.nbytes:
            self._budget.release(self.nbytes)
        self.chunks.clear()
        self.nbytes = 0
