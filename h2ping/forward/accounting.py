"""What one request leaves behind: its counters, its latencies, its access-log entry.

The exchange tells its :class:`Accounting` when the request left for the
upstream, when the response head came, and how the request ended; the
accounting turns that into :class:`~h2ping.stats.Stats` counts and histograms
and into one :data:`LogEntry` for the access log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from ..http1.messages import Request, ResponseWriter
from ..stats import Stats

#: One finished request, as the access log takes it: (wall time, method, target,
#: status sent (0: none), request body bytes, response body bytes, duration, time
#: to response headers (None: none came), connection, stream, replays, outcome).
LogEntry = tuple[float, bytes, bytes, int, int, int, float, float | None, int, int, int, str]


class RequestLog(Protocol):
    """Where each finished request leaves its line (``-access-log``)."""

    def write(self, entry: LogEntry) -> None: ...


class Accounting:
    """Counts one request in the proxy's stats and writes its access-log entry."""

    __slots__ = (
        "_access_log",
        "_clock",
        "_headers_after",
        "_received_at",
        "_request",
        "_sent_at",
        "_stats",
        "_status",
        "_wall",
        "_writer",
    )

    def __init__(
        self,
        stats: Stats,
        access_log: RequestLog | None,
        request: Request,
        writer: ResponseWriter,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._stats = stats
        self._access_log = access_log
        self._request = request
        self._writer = writer
        self._clock = clock  # durations: monotonic seconds
        self._wall = wall  # the log entry's time of day
        self._received_at = clock()  # the head is complete now
        self._sent_at = 0.0  # the latest attempt left for the upstream
        self._headers_after: float | None = None  # its response headers came this much later
        self._status = 0  # of the upstream's response, once it arrived

    def sent(self) -> None:
        """An attempt left for the upstream: time to headers counts from now."""
        self._sent_at = self._clock()

    def response_head(self, status: int) -> None:
        """The upstream's response headers came and go to the client."""
        self._status = status
        self._headers_after = after = self._clock() - self._sent_at
        self._stats.response_headers_after(after)
        self._stats.count_response(status)

    def response_retracted(self) -> None:
        """The upstream's headers never reached the client: an error response
        stands in and is counted on its own."""
        self._stats.response_retracted(self._status)

    def error_response(self, status: int) -> None:
        """The proxy answers the client itself with ``status``."""
        self._stats.count_response(status)

    def ended(
        self,
        outcome: str,
        status: int,
        *,
        bytes_in: int,
        conn_id: int,
        stream_id: int,
        replays: int,
    ) -> None:
        """The request ended with ``outcome`` (one of :data:`~h2ping.stats.OUTCOMES`):
        its duration, and its access-log line. ``status`` is what the client got
        when the upstream's status is not it; ``bytes_in`` is the request body
        received, ``conn_id`` and ``stream_id`` where its last attempt went."""
        duration = self._clock() - self._received_at
        self._stats.request_ended(outcome, duration)
        access_log = self._access_log
        if access_log is not None:
            request, writer = self._request, self._writer
            if not status and writer.started:
                status = self._status
            access_log.write(
                (self._wall(), request.method, request.target, status, bytes_in,
                 writer.body_bytes, duration, self._headers_after, conn_id, stream_id,
                 replays, outcome)
            )  # fmt: skip
