"""``/metrics``: the Prometheus text exposition format (version 0.0.4), written by
hand from a :class:`Snapshot` of a proxy's counters and gauges.

A snapshot is a copy, taken at one moment, of what one proxy owns; snapshots add
up, so that with ``--workers N`` worker 1 reports the sum of every worker's. The
fast paths are the exception: each is a yes or no, and a sum reports the
smallest (0 if any worker runs without the path).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Iterable
from typing import Any, Protocol

from .._version import __version__
from ..config import Config
from ..forward.retry import RetryBudget
from ..http2.engine import fastpaths
from ..stats import Histogram, Stats
from .lag import LagMonitor


class Observed(Protocol):
    """What a snapshot reads of a proxy: its settings, counters and gauges."""

    @property
    def config(self) -> Config: ...
    @property
    def stats(self) -> Stats: ...
    @property
    def lag(self) -> LagMonitor | None: ...
    @property
    def retry_budget(self) -> RetryBudget: ...
    @property
    def in_flight(self) -> int: ...
    def connection_states(self) -> dict[str, int]: ...


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A proxy's numbers as of one moment, or the sum of several proxies'."""

    stats: Stats
    in_flight: int
    connections: dict[str, int]  # upstream connections by state
    retry_buffer_limit: int  # max-buffered-bytes: each proxy has its own budget
    lag: Histogram | None  # event-loop lag, when measured
    # 1 taken, 0 off (its probe failed); the least over workers.
    fast_paths: dict[str, int] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, proxy: Observed) -> Snapshot:
        """A copy: the proxy's later traffic does not change it."""
        lag = proxy.lag.histogram if proxy.lag is not None else None
        return cls(
            stats=proxy.stats.snapshot(retry_buffer_bytes=proxy.retry_budget.used),
            in_flight=proxy.in_flight,
            connections=proxy.connection_states(),
            retry_buffer_limit=proxy.config.max_buffered_bytes,
            lag=copy.deepcopy(lag),
            fast_paths=fastpaths.states(),
        )

    def __add__(self, other: Snapshot) -> Snapshot:
        """Counters and gauges add, histograms add bucket by bucket."""
        if self.lag is None or other.lag is None:
            lag = other.lag if self.lag is None else self.lag
        else:
            lag = self.lag + other.lag
        states = self.connections.keys() | other.connections.keys()
        return Snapshot(
            stats=self.stats + other.stats,
            in_flight=self.in_flight + other.in_flight,
            connections={
                state: self.connections.get(state, 0) + other.connections.get(state, 0)
                for state in states
            },
            retry_buffer_limit=self.retry_buffer_limit + other.retry_buffer_limit,
            lag=lag,
            fast_paths={
                path: min(
                    self.fast_paths.get(path, 1), other.fast_paths.get(path, 1)
                )  # a path one snapshot does not know of is the other's to report
                for path in self.fast_paths.keys() | other.fast_paths.keys()
            },
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "stats": self.stats.to_json(),
            "in_flight": self.in_flight,
            "connections": self.connections,
            "retry_buffer_limit": self.retry_buffer_limit,
            "lag": None if self.lag is None else self.lag.to_json(),
            "fast_paths": self.fast_paths,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Snapshot:
        """The inverse of :meth:`to_json`; ValueError, TypeError or KeyError if malformed."""
        return cls(
            stats=Stats.from_json(data["stats"]),
            in_flight=int(data["in_flight"]),
            connections={str(state): int(n) for state, n in data["connections"].items()},
            retry_buffer_limit=int(data["retry_buffer_limit"]),
            lag=None if data["lag"] is None else Histogram.from_json(data["lag"]),
            fast_paths={str(path): int(on) for path, on in data["fast_paths"].items()},
        )


@dataclasses.dataclass(frozen=True)
class Workers:
    """With ``--workers N``: how many there are, and how many a sum holds."""

    configured: int
    reporting: int


class Metrics:
    """Renders one proxy's counters and gauges as Prometheus text."""

    def __init__(self, proxy: Observed) -> None:
        self._proxy = proxy

    def render(self) -> str:
        config = self._proxy.config
        return render(Snapshot.of(self._proxy), config, config.instance_name)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def render(
    snapshot: Snapshot, config: Config, instance: str, workers: Workers | None = None
) -> str:
    """The exposition text of ``snapshot``; ``workers`` when it is a sum over them."""
    stats = snapshot.stats
    lines: list[str] = []

    def family(name: str, kind: str, text: str, samples: Iterable[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            lines.append(f"{name}{labels} {_number(value)}")

    def counter(name: str, text: str, value: int) -> None:
        family(f"h2ping_{name}_total", "counter", text, [("", value)])

    def histogram(name: str, text: str, series: dict[str, Histogram]) -> None:
        """One family; ``series`` maps a label set (``outcome="ok"``, or "") to its data."""
        samples: list[tuple[str, float]] = []
        for labels, data in series.items():
            prefix = labels + "," if labels else ""
            samples += [
                (f'_bucket{{{prefix}le="{_number(bound)}"}}', n) for bound, n in data.cumulative()
            ]
            braced = f"{{{labels}}}" if labels else ""
            samples += [(f"_sum{braced}", data.total), (f"_count{braced}", data.count)]
        family(f"h2ping_{name}", "histogram", text, samples)

    info = {"version": __version__, "upstream": str(config.upstream), "instance": instance}
    family(
        "h2ping_info",
        "gauge",
        "Always 1; the labels describe this proxy.",
        [("{" + ",".join(f'{k}="{_escape(v)}"' for k, v in info.items()) + "}", 1)],
    )
    if workers is not None:
        family("h2ping_workers", "gauge", "Worker processes (-workers).",
               [("", workers.configured)])  # fmt: skip
        family(
            "h2ping_workers_reporting",
            "gauge",
            "Workers whose numbers are in this scrape; the others did not answer in time.",
            [("", workers.reporting)],
        )
    outcomes = {
        "ok": stats.completed,
        "failed": stats.failed,
        "aborted": stats.aborted,
        "cancelled": stats.cancelled,
        "rejected": stats.rejected,
        "cut_at_shutdown": stats.cut_at_shutdown,
    }
    family(
        "h2ping_requests_total",
        "counter",
        "Requests that ended, by outcome: ok; failed (answered 502); aborted (cut after "
        "the response began); cancelled (the client left); rejected (malformed HTTP/1.1); "
        "cut_at_shutdown (unfinished when the shutdown grace ran out).",
        [(f'{{outcome="{k}"}}', v) for k, v in outcomes.items()],
    )
    histogram(
        "request_duration_seconds",
        "From a request's head received to the last byte sent to the client, by outcome.",
        {f'outcome="{k}"': stats.request_duration[k] for k in outcomes},
    )
    histogram(
        "upstream_headers_seconds",
        "From a request sent upstream to its response headers (the upstream's time to first byte).",
        {"": stats.upstream_headers},
    )
    family(
        "h2ping_requests_in_flight",
        "gauge",
        "Requests received and not yet finished.",
        [("", snapshot.in_flight)],
    )
    classes = dict.fromkeys(("1xx", "2xx", "3xx", "4xx", "5xx"), 0)
    classes.update(stats.responses)
    family(
        "h2ping_responses_total",
        "counter",
        "Responses sent to clients, by status class.",
        [(f'{{status_class="{_escape(k)}"}}', v) for k, v in sorted(classes.items())],
    )
    states = {"open": 0, "draining": 0}
    states.update(snapshot.connections)
    family(
        "h2ping_upstream_connections",
        "gauge",
        "Upstream HTTP/2 connections by state (draining: after GOAWAY or retirement).",
        [(f'{{state="{_escape(k)}"}}', v) for k, v in sorted(states.items())],
    )
    counter("upstream_connections_opened", "Upstream connections opened.",
            stats.connections_opened)  # fmt: skip
    counter("pings_sent", "HTTP/2 PINGs sent to the upstream.", stats.pings_sent)
    counter("ping_acks", "PING ACKs received from the upstream.", stats.ping_acks)
    histogram("ping_rtt_seconds", "Round-trip time of acknowledged PINGs.", {"": stats.ping_rtt})
    if snapshot.lag is not None:
        histogram(
            "event_loop_lag_seconds",
            f"How late a {config.loop_lag_interval:g}s tick of the event loop ran.",
            {"": snapshot.lag},
        )
    counter("ping_timeouts", "Upstream connections declared dead: silent after a PING.",
            stats.ping_timeouts)  # fmt: skip
    counter("goaways", "GOAWAY frames received from the upstream.", stats.goaways)
    counter("too_many_pings", "GOAWAY(ENHANCE_YOUR_CALM, too_many_pings) received: the "
            "upstream's PING policy; each doubles the PING interval of new connections, "
            "up to 300s.", stats.too_many_pings)  # fmt: skip
    counter("replays", "Refused requests sent again on another connection.", stats.replays)
    counter("replays_refused_for_size",
            "Refused requests not replayed because their body had not been kept.",
            stats.replays_refused_for_size)  # fmt: skip
    counter("unkept_bodies", "Bodies streamed without a replay guarantee "
            "(max-buffered-bytes reached).", stats.unkept_bodies)  # fmt: skip
    counter("retired_connections", "Connections retired by max-conn-age.", stats.retired)
    family(
        "h2ping_retry_buffer_bytes",
        "gauge",
        "Request body bytes kept for a possible replay right now.",
        [("", stats.retry_buffer_bytes)],
    )
    family(
        "h2ping_retry_buffer_limit_bytes",
        "gauge",
        "max-buffered-bytes: the cap on retry_buffer_bytes.",
        [("", snapshot.retry_buffer_limit)],
    )
    family(
        "h2ping_fast_path",
        "gauge",
        "1 where a fast path is taken; 0 where its probe found the installed h2 or "
        "hpack changed, and plain h2/hpack does the work (slower). Over workers: the least.",
        [(f'{{path="{_escape(k)}"}}', v) for k, v in sorted(snapshot.fast_paths.items())],
    )
    if config.access_log is not None:
        counter("access_log_dropped", "Access-log lines lost: the writer fell behind "
                "(a slow disk) or could not write.", stats.access_log_dropped)  # fmt: skip
    counter("descriptor_shortages", "Times no file descriptor was free: a client turned "
            "away, or a once-a-second check that found all in use.",
            stats.descriptor_shortages)  # fmt: skip
    return "\n".join(lines) + "\n"
