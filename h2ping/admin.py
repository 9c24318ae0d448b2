"""The admin endpoint: ``/healthz``, ``/readyz`` and ``/metrics`` over plain HTTP/1.1.

Off unless ``--admin-listen`` is given. The server is deliberately tiny (httptools,
one request per connection, then ``Connection: close``) so probes and scrapers need
no extra dependency and cannot disturb forwarding: ``/healthz`` and ``/metrics`` are
answered at once from counters, and ``/readyz`` waits at most ``READY_TIMEOUT``
for an upstream connection, in its own task.

``/metrics`` is the Prometheus text exposition format (version 0.0.4), written by
hand from :class:`~h2ping.stats.Stats` and the proxy's gauges.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

import httptools

from ._version import __version__
from .config import HostPort
from .proxy import AdminListenError

if TYPE_CHECKING:
    from .proxy import Proxy

log = logging.getLogger("h2ping.admin")

#: How long /readyz may wait for an upstream connection; below a probe's usual 1 s+.
READY_TIMEOUT = 0.9
#: A connection that has not sent a whole request by then is closed.
REQUEST_TIMEOUT = 10.0
#: Requests to the admin endpoint have no business being bigger than this.
MAX_REQUEST_BYTES = 16 * 1024

TEXT = "text/plain; charset=utf-8"
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}  # fmt: skip


class AdminServer:
    """Serves the admin endpoint of one :class:`~h2ping.proxy.Proxy`."""

    def __init__(self, proxy: Proxy, listen: HostPort) -> None:
        self._proxy = proxy
        self._listen = listen
        self.metrics = Metrics(proxy)
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[_AdminConnection] = set()

    @property
    def address(self) -> str:
        return str(HostPort(self._listen.host, self.port))

    async def start(self) -> None:
        """Bind; raises :class:`AdminListenError` if the address cannot be used."""
        loop = asyncio.get_running_loop()
        try:
            server = await loop.create_server(
                lambda: _AdminConnection(self),
                self._listen.host,
                self._listen.port,
                reuse_address=True,
            )
        except OSError as exc:
            raise AdminListenError(self._listen, exc) from exc
        self._server = server
        self.port = server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.abort()
        await asyncio.sleep(0)  # let the aborted connections cancel their tasks

    async def answer(self, method: str, path: str) -> tuple[int, str, str]:
        """(status, content type, body) for one request."""
        if path not in ("/healthz", "/readyz", "/metrics"):
            return 404, TEXT, "not found: try /healthz, /readyz or /metrics\n"
        if method not in ("GET", "HEAD"):
            return 405, TEXT, "method not allowed: use GET\n"
        if path == "/healthz":
            return 200, TEXT, "ok\n"
        if path == "/readyz":
            reason = await self._proxy.readiness(READY_TIMEOUT)
            if reason is None:
                return 200, TEXT, "ready\n"
            return 503, TEXT, f"not ready: {reason}\n"
        return 200, PROMETHEUS_TEXT, self.metrics.render()


class _AdminConnection(asyncio.Protocol):
    """One client connection: one request, one response, then close."""

    def __init__(self, server: AdminServer) -> None:
        self._server = server
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._received = 0
        self._complete = False
        self._transport: asyncio.Transport | None = None
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._server._connections.add(self)
        self._timer = asyncio.get_running_loop().call_later(REQUEST_TIMEOUT, self.abort)

    def data_received(self, data: bytes) -> None:
        if self._complete:
            return  # one request per connection; anything after it is ignored
        self._received += len(data)
        if self._received > MAX_REQUEST_BYTES:
            self._reply(431, TEXT, "request too large\n")
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if not self._complete:
                self._reply(400, TEXT, "upgrade not supported\n")
        except httptools.HttpParserError:
            self._reply(400, TEXT, "bad request\n")

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    # httptools callbacks
    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_message_complete(self) -> None:
        if self._complete:
            return  # a pipelined second request: not served
        self._complete = True
        method = self._parser.get_method().decode("ascii", "replace")
        path = self._url.split(b"?", 1)[0].decode("latin-1")
        self._task = asyncio.get_running_loop().create_task(self._respond(method, path))

    async def _respond(self, method: str, path: str) -> None:
        try:
            status, content_type, body = await self._server.answer(method, path)
        except Exception:
            log.exception("admin endpoint: internal error answering %s %s", method, path)
            status, content_type, body = 500, TEXT, "internal error\n"
        self._reply(status, content_type, body, head_only=method == "HEAD")

    def _reply(self, status: int, content_type: str, body: str, head_only: bool = False) -> None:
        self._complete = True
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        payload = body.encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\n"
            "Cache-Control: no-store\r\n"
            "Connection: close\r\n"
        )
        if status == 405:
            head += "Allow: GET, HEAD\r\n"
        transport.write(head.encode() + b"\r\n" + (b"" if head_only else payload))
        transport.close()


# --------------------------------------------------------------------- metrics


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


class Metrics:
    """Renders one proxy's counters and gauges as Prometheus text."""

    def __init__(self, proxy: Proxy) -> None:
        self._proxy = proxy

    def render(self) -> str:
        proxy = self._proxy
        stats = proxy.stats
        config = proxy.config
        lines: list[str] = []

        def family(name: str, kind: str, text: str, samples: Iterable[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, value in samples:
                lines.append(f"{name}{labels} {_number(value)}")

        def counter(name: str, text: str, value: int) -> None:
            family(f"h2ping_{name}_total", "counter", text, [("", value)])

        info = {"version": __version__, "upstream": str(config.upstream)}
        info["instance"] = config.instance_name
        family(
            "h2ping_info",
            "gauge",
            "Always 1; the labels describe this proxy.",
            [("{" + ",".join(f'{k}="{_escape(v)}"' for k, v in info.items()) + "}", 1)],
        )
        in_flight = proxy.in_flight
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
        family(
            "h2ping_requests_in_flight",
            "gauge",
            "Requests received and not yet finished.",
            [("", in_flight)],
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
        states.update(proxy.connection_states())
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
        rtt = stats.ping_rtt
        family(
            "h2ping_ping_rtt_seconds",
            "histogram",
            "Round-trip time of acknowledged PINGs.",
            [
                *((f'_bucket{{le="{_number(bound)}"}}', n) for bound, n in rtt.cumulative()),
                ("_sum", rtt.total),
                ("_count", rtt.count),
            ],
        )
        if proxy.lag is not None:
            lag = proxy.lag.histogram
            family(
                "h2ping_event_loop_lag_seconds",
                "histogram",
                f"How late a {proxy.lag.interval:g}s tick of the event loop ran.",
                [
                    *((f'_bucket{{le="{_number(bound)}"}}', n) for bound, n in lag.cumulative()),
                    ("_sum", lag.total),
                    ("_count", lag.count),
                ],
            )
        counter("ping_timeouts", "Upstream connections declared dead: silent after a PING.",
                stats.ping_timeouts)  # fmt: skip
        counter("goaways", "GOAWAY frames received from the upstream.", stats.goaways)
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
            [("", config.max_buffered_bytes)],
        )
        return "\n".join(lines) + "\n"
