"""``/metrics``: the Prometheus text exposition format (version 0.0.4), written from
a :class:`Snapshot` of a proxy's counters and gauges.

:data:`METRICS` lists the families in the order written, one :class:`MetricSpec`
each (name, type, help, labels, how to read the samples); :func:`render` writes them.

A snapshot is a copy, taken at one moment, of what one proxy owns; snapshots add
up, so that with ``--workers N`` worker 1 reports the sum of every worker's. The
fast paths are the exception: each is a yes or no, and a sum reports the
smallest (0 if any worker runs without the path).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, Protocol, TypeVar

from .._version import __version__
from ..config import Config
from ..forward.body import RetryBudget
from ..http2.engine import fast_path_states
from ..stats import Histogram, Stats
from .lag import LagMonitor

_T = TypeVar("_T")


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
    def descriptor_counts(self) -> dict[str, int]: ...


#: Descriptor gauges that a sum over workers takes the largest of: the workers share
#: one listening socket, so each sees the same queue.
_SHARED = frozenset({"queued"})


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
    #: Client connections, their capacity, descriptors open and the limit, clients
    #: in the listen queue (see ``Proxy.descriptor_counts``; -1 where unknown).
    descriptors: dict[str, int] = dataclasses.field(default_factory=dict)

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
            fast_paths=fast_path_states(),
            descriptors=proxy.descriptor_counts(),
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
            descriptors={
                name: _add_descriptors(
                    name, self.descriptors.get(name, -1), other.descriptors.get(name, -1)
                )
                for name in self.descriptors.keys() | other.descriptors.keys()
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
            "descriptors": self.descriptors,
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
            descriptors={str(name): int(n) for name, n in data.get("descriptors", {}).items()},
        )


def _add_descriptors(name: str, ours: int, theirs: int) -> int:
    """Two workers' descriptor gauge: the sum, the largest for the shared listen
    queue, unknown (-1) if either does not know."""
    if ours < 0 or theirs < 0:
        return -1
    return max(ours, theirs) if name in _SHARED else ours + theirs


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
    """A label value as the text format quotes it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    """A sample value as the text format writes it (``+Inf`` for infinity)."""
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(value)


@dataclasses.dataclass(frozen=True)
class Scrape:
    """What one rendering reads: the numbers, the settings, and whose they are."""

    snapshot: Snapshot
    config: Config
    instance: str
    workers: Workers | None  # when the snapshot is a sum over workers

    @property
    def stats(self) -> Stats:
        """The counters, which most families read."""
        return self.snapshot.stats


MetricType = Literal["counter", "gauge", "histogram"]

#: One family's samples: each a tuple of label values (in the order of the spec's
#: ``labels``) and its number, or its histogram.
Samples = Iterable[tuple[tuple[str, ...], float | Histogram]]


@dataclasses.dataclass(frozen=True)
class MetricSpec:
    """One family of ``/metrics``: its name, type, help, labels and how to read it."""

    name: str  # as exposed, ``_total`` included
    type: MetricType
    #: The text, or a function of the settings for a text that quotes one.
    help: str | Callable[[Config], str]
    read: Callable[[Scrape], Samples]
    labels: tuple[str, ...] = ()
    #: The flag without which the family is left out (see ``_PRESENT``); None: always there.
    only_with: str | None = None

    def help_for(self, config: Config) -> str:
        """The HELP text as written for ``config``."""
        return self.help if isinstance(self.help, str) else self.help(config)


def _one(read: Callable[[Scrape], float | Histogram]) -> Callable[[Scrape], Samples]:
    """A family of one sample, without labels."""
    return lambda scrape: [((), read(scrape))]


def _by(read: Callable[[Scrape], Mapping[str, float | Histogram]]) -> Callable[[Scrape], Samples]:
    """A family of one label: a sample per key of the mapping, in its order."""
    return lambda scrape: [((key,), value) for key, value in read(scrape).items()]


def _counter(name: str, text: str, field: str, only_with: str | None = None) -> MetricSpec:
    """``h2ping_<name>_total``: the :class:`Stats` counter ``field``."""
    return MetricSpec(
        f"h2ping_{name}_total",
        "counter",
        text,
        _one(lambda scrape: getattr(scrape.stats, field)),
        only_with=only_with,
    )


def _outcomes(stats: Stats) -> dict[str, int]:
    """Ended requests by outcome, in the order of ``requests_total``."""
    return {
        "ok": stats.completed,
        "failed": stats.failed,
        "aborted": stats.aborted,
        "cancelled": stats.cancelled,
        "rejected": stats.rejected,
        "cut_at_shutdown": stats.cut_at_shutdown,
    }


def _status_classes(scrape: Scrape) -> dict[str, int]:
    """Every class from 1xx to 5xx, 0 where none was sent, sorted."""
    classes = dict.fromkeys(("1xx", "2xx", "3xx", "4xx", "5xx"), 0)
    classes.update(scrape.stats.responses)
    return dict(sorted(classes.items()))


def _connection_states(scrape: Scrape) -> dict[str, int]:
    """open and draining even when 0, then any other state; sorted."""
    states = {"open": 0, "draining": 0}
    states.update(scrape.snapshot.connections)
    return dict(sorted(states.items()))


def _info(scrape: Scrape) -> Samples:
    """One sample, 1, whose labels say which proxy this is."""
    return [((__version__, str(scrape.config.upstream), scrape.instance), 1)]


def _upstream_proxy(scrape: Scrape) -> Samples:
    """1 with the forward proxy's address when connections go through one; 0 with
    an empty address when they go directly. Never its credentials."""
    proxy = scrape.config.upstream_proxy
    return [((proxy.address,), 1)] if proxy is not None else [(("",), 0)]


def _given(value: _T | None) -> _T:
    """A value the family's ``only_with`` guarantees is there."""
    assert value is not None
    return value


#: Whether a family with that ``only_with`` is written.
_PRESENT: dict[str, Callable[[Scrape], bool]] = {
    "-workers": lambda scrape: scrape.workers is not None,
    "-loop-lag-interval": lambda scrape: scrape.snapshot.lag is not None,
    "-access-log": lambda scrape: scrape.config.access_log is not None,
}

#: Every family of ``/metrics``, in the order written.
METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "h2ping_info",
        "gauge",
        "Always 1; the labels describe this proxy.",
        _info,
        labels=("version", "upstream", "instance"),
    ),
    MetricSpec(
        "h2ping_upstream_proxy",
        "gauge",
        "1 when upstream connections go through this forward proxy (CONNECT), "
        '0 with proxy="" when they go directly.',
        _upstream_proxy,
        labels=("proxy",),
    ),
    MetricSpec(
        "h2ping_workers",
        "gauge",
        "Worker processes (-workers).",
        _one(lambda scrape: _given(scrape.workers).configured),
        only_with="-workers",
    ),
    MetricSpec(
        "h2ping_workers_reporting",
        "gauge",
        "Workers whose numbers are in this scrape; the others did not answer in time.",
        _one(lambda scrape: _given(scrape.workers).reporting),
        only_with="-workers",
    ),
    MetricSpec(
        "h2ping_requests_total",
        "counter",
        "Requests that ended, by outcome: ok; failed (answered 502); aborted (cut after "
        "the response began); cancelled (the client left); rejected (malformed HTTP/1.1, or a "
        "head over the upstream's header list limit: answered 4xx/5xx by h2ping); "
        "cut_at_shutdown (unfinished when the shutdown grace ran out).",
        _by(lambda scrape: _outcomes(scrape.stats)),
        labels=("outcome",),
    ),
    MetricSpec(
        "h2ping_request_duration_seconds",
        "histogram",
        "From a request's head received to the last byte sent to the client, by outcome.",
        _by(lambda scrape: {k: scrape.stats.request_duration[k] for k in _outcomes(scrape.stats)}),
        labels=("outcome",),
    ),
    MetricSpec(
        "h2ping_upstream_headers_seconds",
        "histogram",
        "From a request sent upstream to its response headers (the upstream's time to first byte).",
        _one(lambda scrape: scrape.stats.upstream_headers),
    ),
    MetricSpec(
        "h2ping_requests_in_flight",
        "gauge",
        "Requests received and not yet finished.",
        _one(lambda scrape: scrape.snapshot.in_flight),
    ),
    MetricSpec(
        "h2ping_responses_total",
        "counter",
        "Responses sent to clients, by status class.",
        _by(_status_classes),
        labels=("status_class",),
    ),
    MetricSpec(
        "h2ping_upstream_connections",
        "gauge",
        "Upstream HTTP/2 connections by state (draining: after GOAWAY or retirement).",
        _by(_connection_states),
        labels=("state",),
    ),
    _counter("upstream_connections_opened", "Upstream connections opened.", "connections_opened"),
    _counter(
        "tls_resumptions",
        "Upstream TLS handshakes that resumed the session of an earlier connection.",
        "tls_resumptions",
    ),
    _counter("pings_sent", "HTTP/2 PINGs sent to the upstream.", "pings_sent"),
    _counter(
        "window_pings",
        "PINGs sent to measure the link's round trip and bandwidth (receive windows).",
        "window_pings",
    ),
    _counter(
        "receive_window_raises",
        "Times an upstream connection's stream receive windows grew to fit its link.",
        "window_raises",
    ),
    _counter("ping_acks", "PING ACKs received from the upstream.", "ping_acks"),
    MetricSpec(
        "h2ping_ping_rtt_seconds",
        "histogram",
        "Round-trip time of acknowledged PINGs.",
        _one(lambda scrape: scrape.stats.ping_rtt),
    ),
    MetricSpec(
        "h2ping_event_loop_lag_seconds",
        "histogram",
        lambda config: f"How late a {config.loop_lag_interval:g}s tick of the event loop ran.",
        _one(lambda scrape: _given(scrape.snapshot.lag)),
        only_with="-loop-lag-interval",
    ),
    _counter(
        "ping_timeouts",
        "Upstream connections declared dead: silent after a PING.",
        "ping_timeouts",
    ),
    _counter("goaways", "GOAWAY frames received from the upstream.", "goaways"),
    _counter(
        "too_many_pings",
        "GOAWAY(ENHANCE_YOUR_CALM, too_many_pings) received: the upstream's PING policy; "
        "each doubles the PING interval of new connections, up to 300s.",
        "too_many_pings",
    ),
    _counter("replays", "Refused requests sent again on another connection.", "replays"),
    _counter(
        "replays_refused_for_size",
        "Refused requests not replayed because their body had not been kept.",
        "replays_refused_for_size",
    ),
    _counter(
        "unkept_bodies",
        "Bodies streamed without a replay guarantee (max-buffered-bytes reached).",
        "unkept_bodies",
    ),
    _counter("retired_connections", "Connections retired by max-conn-age.", "retired"),
    MetricSpec(
        "h2ping_retry_buffer_bytes",
        "gauge",
        "Request body bytes kept for a possible replay right now.",
        _one(lambda scrape: scrape.stats.retry_buffer_bytes),
    ),
    MetricSpec(
        "h2ping_retry_buffer_limit_bytes",
        "gauge",
        "max-buffered-bytes: the cap on retry_buffer_bytes.",
        _one(lambda scrape: scrape.snapshot.retry_buffer_limit),
    ),
    MetricSpec(
        "h2ping_fast_path",
        "gauge",
        "1 where a fast path is taken; 0 where its probe found the installed h2 or "
        "hpack changed, and plain h2/hpack does the work (slower). Over workers: the least.",
        _by(lambda scrape: dict(sorted(scrape.snapshot.fast_paths.items()))),
        labels=("path",),
    ),
    _counter(
        "access_log_dropped",
        "Access-log lines lost: the writer fell behind (a slow disk) or could not write.",
        "access_log_dropped",
        only_with="-access-log",
    ),
    _counter(
        "descriptor_shortages",
        "Times no file descriptor was free: an accept, an upstream dial, or a "
        "once-a-second check that found all in use.",
        "descriptor_shortages",
    ),
    MetricSpec(
        "h2ping_client_connections",
        "gauge",
        "HTTP/1.1 client connections held now (each request in flight holds one).",
        _one(lambda scrape: _descriptor_gauge(scrape, "clients")),
    ),
    MetricSpec(
        "h2ping_client_capacity",
        "gauge",
        "The most client connections taken at once: the descriptor limit less what "
        "upstream connections and files need. Beyond it, clients wait in the listen queue.",
        _one(lambda scrape: _descriptor_gauge(scrape, "capacity")),
    ),
    _counter(
        "accept_pauses",
        "Times accepting stopped at client_capacity until a client left.",
        "accept_pauses",
    ),
    MetricSpec(
        "h2ping_listen_queue",
        "gauge",
        "Clients waiting in the kernel's listen queue to be accepted (shared by workers).",
        _one(lambda scrape: _descriptor_gauge(scrape, "queued")),
    ),
    MetricSpec(
        "h2ping_descriptors_open",
        "gauge",
        "File descriptors open (summed over workers).",
        _one(lambda scrape: _descriptor_gauge(scrape, "open")),
    ),
    MetricSpec(
        "h2ping_descriptors_limit",
        "gauge",
        "The open-file limit in force (RLIMIT_NOFILE; summed over workers).",
        _one(lambda scrape: _descriptor_gauge(scrape, "limit")),
    ),
)


def _descriptor_gauge(scrape: Scrape, name: str) -> float:
    """One of the snapshot's descriptor numbers; NaN where unknown (no limit, no /proc)."""
    value = scrape.snapshot.descriptors.get(name, -1)
    return math.nan if value < 0 else value


def family_names() -> tuple[str, ...]:
    """The name of every family :data:`METRICS` can write, in order."""
    return tuple(spec.name for spec in METRICS)


def render(
    snapshot: Snapshot, config: Config, instance: str, workers: Workers | None = None
) -> str:
    """The exposition text of ``snapshot``; ``workers`` when it is a sum over them."""
    scrape = Scrape(snapshot, config, instance, workers)
    lines: list[str] = []
    for spec in METRICS:
        if spec.only_with is None or _PRESENT[spec.only_with](scrape):
            _write(spec, scrape, lines)
    return "\n".join(lines) + "\n"


def _write(spec: MetricSpec, scrape: Scrape, lines: list[str]) -> None:
    """Append one family to ``lines``: HELP, TYPE, then its samples."""
    name = spec.name
    lines.append(f"# HELP {name} {spec.help_for(scrape.config)}")
    lines.append(f"# TYPE {name} {spec.type}")
    for values, value in spec.read(scrape):
        labels = [f'{k}="{_escape(v)}"' for k, v in zip(spec.labels, values, strict=True)]
        if not isinstance(value, Histogram):
            lines.append(f"{name}{_braced(labels)} {_number(value)}")
            continue
        prefix = "".join(label + "," for label in labels)  # the bucket's labels before le
        lines += [
            f'{name}_bucket{{{prefix}le="{_number(bound)}"}} {n}' for bound, n in value.cumulative()
        ]
        braced = _braced(labels)
        lines.append(f"{name}_sum{braced} {_number(value.total)}")
        lines.append(f"{name}_count{braced} {value.count}")


def _braced(labels: list[str]) -> str:
    """``{a="1",b="2"}``, or nothing without labels."""
    return "{" + ",".join(labels) + "}" if labels else ""
