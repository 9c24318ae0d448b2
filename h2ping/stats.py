"""Counters of what the proxy did: one object per proxy, the single source of truth
for ``Proxy.stats``, the shutdown summary line and the metrics endpoint.

With ``--workers N`` each worker owns its own; worker 1's metrics endpoint adds up
copies of them (``+`` and the JSON form here), never the objects themselves.
"""

from __future__ import annotations

import bisect
import collections
import copy
import dataclasses
from typing import Any

#: PING round-trip buckets, seconds (upper bounds; +Inf is implied).
RTT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Request and time-to-headers buckets, seconds: model calls last from milliseconds
#: to past an hour, and the middlebox's 340 s idle cut falls in between.
LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0,
)  # fmt: skip
#: How a request ends: each one in exactly one of these (``requests_total{outcome}``).
OUTCOMES = ("ok", "failed", "aborted", "cancelled", "rejected", "cut_at_shutdown")
#: The counter each outcome adds to (the same name, but for "ok").
_OUTCOME_COUNTERS = {outcome: outcome for outcome in OUTCOMES} | {"ok": "completed"}


class Histogram:
    """Cumulative-style buckets, as Prometheus exposes them."""

    def __init__(self, bounds: tuple[float, ...] = RTT_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it), ending with (inf, count)."""
        out, running = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out

    def __add__(self, other: Histogram) -> Histogram:
        """Bucket by bucket: the observations of both."""
        if other.bounds != self.bounds:
            raise ValueError(f"histogram buckets differ: {self.bounds} and {other.bounds}")
        out = Histogram(self.bounds)
        out.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        out.total = self.total + other.total
        out.count = self.count + other.count
        return out

    def to_json(self) -> dict[str, Any]:
        return {"bounds": list(self.bounds), "counts": list(self.counts), "total": self.total}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Histogram:
        """The inverse of :meth:`to_json`; ValueError, TypeError or KeyError if malformed."""
        out = cls(tuple(float(bound) for bound in data["bounds"]))
        counts = [int(n) for n in data["counts"]]
        if len(counts) != len(out.counts) or min(counts) < 0:
            raise ValueError("histogram counts do not match its buckets")
        out.counts = counts
        out.count = sum(counts)
        out.total = float(data["total"])
        return out


@dataclasses.dataclass
class Stats:
    #: Every request received ends in exactly one of the six outcomes after it,
    #: counted by whoever ends it: the listener for a head it refuses, the exchange
    #: for everything else (the listener tells it why: cancel or reject).
    requests: int = 0
    completed: int = 0  # the upstream's response reached the client whole
    failed: int = 0  # answered with a 502
    aborted: int = 0  # client connection cut after response headers
    cancelled: int = 0  # the client went away first
    rejected: int = 0  # malformed HTTP/1.1, or a head over the upstream's limit: answered here
    cut_at_shutdown: int = 0  # still unfinished when the shutdown grace ran out
    replays: int = 0  # refused streams sent again
    replays_refused_for_size: int = 0  # refused, but the body had not been kept: 502
    unkept_bodies: int = 0  # bodies streamed without a replay guarantee (memory bound)
    #: Request body bytes kept for replay: a gauge read from the retry budget when a
    #: copy is taken (:meth:`snapshot`); the live counters leave it at 0.
    retry_buffer_bytes: int = 0
    connections_opened: int = 0
    goaways: int = 0  # GOAWAY frames received
    retired: int = 0  # connections retired by max-conn-age
    pings_sent: int = 0
    ping_acks: int = 0
    ping_timeouts: int = 0  # connections declared dead: nothing arrived after a PING
    too_many_pings: int = 0  # GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings") received
    access_log_dropped: int = 0  # access-log lines lost: the writer fell behind, or failed
    descriptor_shortages: int = 0  # times no file descriptor was free (process.descriptors)
    accept_pauses: int = 0  # times accepting stopped at the client capacity (http1.acceptor)
    tls_resumptions: int = 0  # upstream TLS handshakes that resumed an earlier session
    window_pings: int = 0  # PINGs sent to measure the link (http2.windows)
    window_raises: int = 0  # times a connection's stream windows grew to fit its link
    last_ping_rtt: float | None = None  # seconds, of the most recent acknowledged PING
    #: Responses sent to clients by status class ("2xx", "5xx", ...).
    responses: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    ping_rtt: Histogram = dataclasses.field(default_factory=Histogram)
    #: Head received to last byte sent, by outcome (those the exchange ends: a head
    #: the listener refuses never becomes a request with a duration).
    request_duration: dict[str, Histogram] = dataclasses.field(
        default_factory=lambda: {outcome: Histogram(LATENCY_BUCKETS) for outcome in OUTCOMES}
    )
    #: Request sent upstream to its response headers: the upstream's time to first byte.
    upstream_headers: Histogram = dataclasses.field(
        default_factory=lambda: Histogram(LATENCY_BUCKETS)
    )

    # What happened, one method each: the counters change only here.

    def request_received(self) -> None:
        self.requests += 1

    def head_rejected(self, status: int) -> None:
        """A request head the listener answered itself: received, rejected, answered."""
        self.requests += 1
        self.rejected += 1
        self.count_response(status)

    def count_response(self, status: int) -> None:
        """Response headers went to a client (or are queued for it)."""
        self.responses[f"{status // 100}xx"] += 1

    def response_retracted(self, status: int) -> None:
        """Headers counted by :meth:`count_response` never reached the client: an
        error response stands in and is counted on its own."""
        self.responses[f"{status // 100}xx"] -= 1

    def request_replayed(self) -> None:
        self.replays += 1

    def replay_refused_for_size(self) -> None:
        self.replays_refused_for_size += 1

    def body_unkept(self) -> None:
        self.unkept_bodies += 1

    def connection_opened(self) -> None:
        self.connections_opened += 1

    def connection_retired(self) -> None:
        self.retired += 1

    def goaway_received(self) -> None:
        self.goaways += 1

    def ping_sent(self) -> None:
        self.pings_sent += 1

    def ping_acked(self, rtt: float | None) -> None:
        """An ACK arrived; ``rtt`` when it answered the PING in flight."""
        self.ping_acks += 1
        if rtt is not None:
            self.last_ping_rtt = rtt
            self.ping_rtt.observe(rtt)

    def ping_timed_out(self) -> None:
        self.ping_timeouts += 1

    def pings_punished(self) -> None:
        """GOAWAY(ENHANCE_YOUR_CALM, too_many_pings) received."""
        self.too_many_pings += 1

    def request_ended(self, outcome: str, duration: float) -> None:
        """A request the exchange carried ended: counted by its outcome (one of
        OUTCOMES), and its duration observed."""
        counter = _OUTCOME_COUNTERS[outcome]
        setattr(self, counter, getattr(self, counter) + 1)
        self.request_duration[outcome].observe(duration)

    def response_headers_after(self, seconds: float) -> None:
        self.upstream_headers.observe(seconds)

    def access_log_lines_dropped(self, lines: int) -> None:
        self.access_log_dropped += lines

    def descriptors_short(self) -> None:
        self.descriptor_shortages += 1

    def accept_paused(self) -> None:
        self.accept_pauses += 1

    def tls_resumed(self) -> None:
        self.tls_resumptions += 1

    def window_pinged(self, count: int = 1) -> None:
        self.window_pings += count

    def window_raised(self) -> None:
        self.window_raises += 1

    def snapshot(self, *, retry_buffer_bytes: int) -> Stats:
        """A copy as of now, with the gauge read from its owner: later traffic
        does not change it."""
        out = copy.deepcopy(self)
        out.retry_buffer_bytes = retry_buffer_bytes
        return out

    def summary(self) -> str:
        """One line of ``name=value`` pairs for the shutdown log."""
        parts = [
            f"{field.name}={getattr(self, field.name)}"
            for field in dataclasses.fields(self)
            if isinstance(getattr(self, field.name), int)
        ]
        if self.last_ping_rtt is not None:
            parts.append(f"last_ping_rtt={self.last_ping_rtt * 1000:.1f}ms")
        return " ".join(parts)

    def __add__(self, other: Stats) -> Stats:
        """Field by field: what two proxies did together. ``last_ping_rtt`` belongs
        to one connection, so a sum has none."""
        out = Stats(
            responses=self.responses + other.responses,
            ping_rtt=self.ping_rtt + other.ping_rtt,
            request_duration={
                outcome: self.request_duration[outcome] + other.request_duration[outcome]
                for outcome in OUTCOMES
            },
            upstream_headers=self.upstream_headers + other.upstream_headers,
        )
        for name in _COUNTS:
            setattr(out, name, getattr(self, name) + getattr(other, name))
        return out

    def to_json(self) -> dict[str, Any]:
        """Everything :meth:`__add__` adds, as JSON-ready values."""
        data: dict[str, Any] = {name: getattr(self, name) for name in _COUNTS}
        data["responses"] = dict(self.responses)
        data["ping_rtt"] = self.ping_rtt.to_json()
        data["request_duration"] = {
            outcome: histogram.to_json() for outcome, histogram in self.request_duration.items()
        }
        data["upstream_headers"] = self.upstream_headers.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Stats:
        """The inverse of :meth:`to_json`; ValueError, TypeError or KeyError if malformed."""
        responses = {str(key): int(n) for key, n in data["responses"].items()}
        out = cls(
            responses=collections.Counter(responses),
            ping_rtt=Histogram.from_json(data["ping_rtt"]),
            request_duration={
                outcome: Histogram.from_json(data["request_duration"][outcome])
                for outcome in OUTCOMES
            },
            upstream_headers=Histogram.from_json(data["upstream_headers"]),
        )
        for name in _COUNTS:
            setattr(out, name, int(data[name]))
        return out


#: The integer fields: counters, and the retry_buffer_bytes gauge, which adds up too.
_COUNTS = tuple(field.name for field in dataclasses.fields(Stats) if field.type in ("int", int))
