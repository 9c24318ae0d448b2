"""The admin endpoint: ``/healthz``, ``/readyz`` and ``/metrics`` over plain HTTP/1.1.

Off unless ``--admin-listen`` is given. The server is deliberately tiny (httptools,
one request per connection, then ``Connection: close``) so probes and scrapers need
no extra dependency and cannot disturb forwarding: ``/healthz`` and ``/metrics`` are
answered at once from counters, and ``/readyz`` waits at most ``READY_TIMEOUT``
for an upstream connection, in its own task.

With ``--workers N`` worker 1 serves it for all (:mod:`h2ping.process.siblings`):
``/metrics`` adds up every worker's numbers, waiting at most ``METRICS_TIMEOUT``
for the others, and ``/readyz`` is ready only when every worker serves.
``/metrics`` is written by :mod:`h2ping.process.metrics`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol, cast

import httptools

from ..config import HostPort
from ..errors import AdminListenError
from ..http1.messages import reason_phrase
from .metrics import Metrics, Observed, Snapshot, Workers, render
from .siblings import Siblings

log = logging.getLogger("h2ping.admin")

#: How long /readyz may wait for an upstream connection; below a probe's usual 1 s+.
READY_TIMEOUT = 0.9
#: How long /metrics waits for the other workers; a healthy one answers in a millisecond.
METRICS_TIMEOUT = 1.0
#: A connection that has not sent a whole request by then is closed.
REQUEST_TIMEOUT = 10.0
#: Requests to the admin endpoint have no business being bigger than this.
MAX_REQUEST_BYTES = 16 * 1024

TEXT = "text/plain; charset=utf-8"
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


class Served(Observed, Protocol):
    """What the admin endpoint reads of its proxy."""

    async def readiness(self, timeout: float) -> str | None: ...


class AdminServer:
    """Serves the admin endpoint of one :class:`~h2ping.process.proxy.Proxy`, and with
    ``siblings`` of the other workers too."""

    def __init__(self, proxy: Served, listen: HostPort, siblings: Siblings | None = None) -> None:
        self._proxy = proxy
        self._listen = listen
        self._siblings = siblings
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
        if self._siblings is not None:
            await self._siblings.start()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.abort()
        if self._siblings is not None:
            self._siblings.close()
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
            reason = await self._readiness()
            if reason is None:
                return 200, TEXT, "ready\n"
            return 503, TEXT, f"not ready: {reason}\n"
        return 200, PROMETHEUS_TEXT, await self._metrics()

    async def _readiness(self) -> str | None:
        """Ours, and with workers every other worker's: serving, not draining. The
        upstream check is ours alone: the workers share the host and its network."""
        if self._siblings is None:
            return await self._proxy.readiness(READY_TIMEOUT)
        ours, theirs = await asyncio.gather(
            self._proxy.readiness(READY_TIMEOUT), self._siblings.not_ready(READY_TIMEOUT)
        )
        return ours if ours is not None else theirs

    async def _metrics(self) -> str:
        siblings = self._siblings
        if siblings is None:
            return self.metrics.render()
        theirs = await siblings.snapshots(METRICS_TIMEOUT)
        # Ours last, once theirs are in: the freshest it can be.
        total = sum(theirs, Snapshot.of(self._proxy))
        workers = Workers(siblings.workers, reporting=1 + len(theirs))
        return render(total, self._proxy.config, siblings.instance, workers)


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
            f"HTTP/1.1 {status} {reason_phrase(status).decode()}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\n"
            "Cache-Control: no-store\r\n"
            "Connection: close\r\n"
        )
        if status == 405:
            head += "Allow: GET, HEAD\r\n"
        transport.write(head.encode() + b"\r\n" + (b"" if head_only else payload))
        transport.close()
