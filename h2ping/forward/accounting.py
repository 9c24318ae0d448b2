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

from ..fields import Header
from ..http1.messages import Request, ResponseWriter
from ..stats import Stats
from .headerlog import HeaderLog

#: One finished request, as the access log takes it: (wall time, method, target,
#: status sent (0: none), request body bytes, response body bytes, duration, time
#: to response headers (None: none came), connection, stream, replays, outcome).
LogEntry = tuple[float, bytes, bytes, int, int, int, float, float | None, int, int, int, str]


class RequestLog(Protocol):
    """Where each finished request leaves its line (``-access-log``)."""

    def write(self, entry: LogEntry) -> None: ...


class Accounting:
    """Counts one request in the proxy's stats and writes its access-log entry, and
    with ``-log-headers`` its header lines."""

    __slots__ = (
        "_access_log",
        "_clock",
        "_header_log",
        "_headers_after",
        "_received_at",
        "_request",
        "_sent_at",
        "_stats",
        "_status",
        "_wall",
        "_where",
        "_writer",
    )

    def __init__(
        self,
        stats: Stats,
        access_log: RequestLog | None,
        request: Request,
        writer: ResponseWriter,
        header_log: HeaderLog | None = None,
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
        self._header_log = header_log
        self._where = ""  # with -log-headers: the request and its latest attempt's stream

    def sent(self, fields: list[Header], conn_id: int, stream_id: int) -> None:
        """An attempt left for the upstream, with ``fields`` on stream ``stream_id``
        of connection ``conn_id``: time to headers counts from now."""
        if self._header_log is not None:
            first = not self._where
            self._where = f"{self._request.describe()} conn={conn_id} stream={stream_id}"
            if first:
                self._header_log.client_request(self._where, self._request)
            self._header_log.upstream_request(self._where, fields)
        self._sent_at = self._clock()

    def response_head(self, status: int, headers: list[Header]) -> None:
        """The upstream's response headers (``headers``, as received) came and go to
        the client."""
        if self._header_log is not None:
            self._header_log.upstream_response(self._where, headers)
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
        if self._header_log is not None:
            self._log_client_response(conn_id, stream_id)
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

    def _log_client_response(self, conn_id: int, stream_id: int) -> None:
        """The response the client got, as sent (the proxy's own error response
        too); the request first, if it never left for the upstream."""
        header_log, request = self._header_log, self._request
        assert header_log is not None
        if not self._where:
            self._where = request.describe() + (f" conn={conn_id}" if conn_id else "")
            header_log.client_request(self._where, request)
        head = self._writer.head
        if head is not None:
            header_log.client_response(self._where, *head)
