"""A running proxy: the listening socket, the pool, and an orderly shutdown.

Usable from a program or a test suite::

    async with Proxy(upstream="https://api.example.com", listen="127.0.0.1:0") as proxy:
        ...  # send HTTP/1.1 to proxy.url
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import ssl
from typing import TYPE_CHECKING, Any

from .. import errors
from ..config import Config, HostPort, parse_listen, parse_upstream
from ..egress import read_proxy_setting
from ..errors import AccessLogError, BindError, UpstreamError
from ..forward.body import RetryBudget
from ..forward.exchange import Exchange, ExchangeContext
from ..forward.growth import NoStreamsAllowed
from ..forward.headerlog import HeaderLog
from ..forward.pool import Pool
from ..forward.replay import ReplayPolicy
from ..http1.acceptor import Acceptor, ClientSet
from ..http1.listener import ClientConnection, ListenerLimits
from ..http1.output import OutputFlusher
from ..http2.dial import make_ssl_context
from ..http2.engine import fast_paths_taken
from ..http2.upstream import ConnState
from ..logs import plural
from ..stats import Stats
from .descriptors import ClientCapacity, DescriptorWatch, open_descriptors
from .lag import LagMonitor

if TYPE_CHECKING:
    from .accesslog import AccessLog
    from .admin import AdminServer
    from .siblings import Links

log = logging.getLogger("h2ping")


#: Pending client connections the kernel may queue for us: as many as it allows
#: (it caps the number at net.core.somaxconn). Clients wait there while the
#: process is at capacity, and a burst waits there to be accepted.
LISTEN_BACKLOG = 65535


#: A dial at start that failed, in plain words, by its Proxy-Status error type.
_START_FAILURES = {
    errors.DNS_ERROR: "its name was not found",
    errors.CONNECTION_REFUSED: "nothing accepts connections there",
    errors.CONNECTION_TIMEOUT: "it did not answer in time",
    errors.DESTINATION_UNAVAILABLE: "it cannot be reached",
    errors.CONNECTION_TERMINATED: "it closed the connection",
    errors.TLS_CERTIFICATE_ERROR: "its TLS certificate was not accepted",
    errors.TLS_PROTOCOL_ERROR: "TLS with HTTP/2 could not be agreed",
    errors.HTTP_PROTOCOL_ERROR: "it does not speak HTTP/2 as h2ping needs",
    errors.CONNECTION_LIMIT_REACHED: "no file descriptor was free",
}


#: The same, when the forward proxy failed (after "the proxy HOST:PORT").
_PROXY_FAILURES = {
    errors.DNS_ERROR: "was not found (its name)",
    errors.CONNECTION_REFUSED: "accepts no connections",
    errors.CONNECTION_TIMEOUT: "did not answer in time",
    errors.DESTINATION_UNAVAILABLE: "could not reach it",
    errors.CONNECTION_TERMINATED: "closed the tunnel",
    errors.HTTP_REQUEST_DENIED: "refused the tunnel",
    errors.PROXY_CONFIGURATION_ERROR: "wants other credentials",
    errors.HTTP_PROTOCOL_ERROR: "does not speak HTTP/1.1 as a proxy",
    errors.CONNECTION_LIMIT_REACHED: "could not be reached: no file descriptor was free",
}


def bind_listener(listen: HostPort) -> socket.socket:
    """One listening TCP socket, as Go's ``net.Listen`` makes it: a host name binds
    one of its addresses (IPv4 first), no ``SO_REUSEPORT``, so a second process can
    never share the port. Raises :class:`BindError`."""
    try:
        infos = socket.getaddrinfo(
            listen.host, listen.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, kind, proto, _, address = min(infos, key=lambda i: i[0] != socket.AF_INET)
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise BindError(listen, exc) from None
    try:
        # Only skips TIME_WAIT on restart: with a listener on the port, bind still fails.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise BindError(listen, exc) from None
    return sock


class Proxy:
    def __init__(
        self,
        config: Config | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        **settings: Any,
    ) -> None:
        """Build from a :class:`Config`, or from its fields as keywords; ``listen``,
        ``admin_listen`` and ``upstream`` may be given as strings, and ``proxy``
        (also beside a ``config``) as ``-proxy`` takes it."""
        if isinstance(settings.get("proxy"), str):  # "none", "env" or a URL
            settings["proxy"] = read_proxy_setting(settings["proxy"])
        if config is None:
            if isinstance(settings.get("upstream"), str):
                settings["upstream"] = parse_upstream(settings["upstream"])
            for key in ("listen", "admin_listen"):
                if isinstance(settings.get(key), str):
                    settings[key] = parse_listen(settings[key])
            config = Config(**settings)
        elif settings:
            config = config.replace(**settings)
        config.upstream_proxy  # noqa: B018 -- a ConfigError now, not at the first dial
        self.config = config
        self.stats = Stats()
        self.retry_budget = RetryBudget(config.max_buffered_bytes, self.stats)
        self.exchanges: set[Exchange] = set()
        self.clients = ClientSet()
        self.descriptors = DescriptorWatch(self.stats)
        self._ssl_context = ssl_context
        self._acceptor: Acceptor | None = None
        self.capacity: ClientCapacity | None = None  # once started
        self._draining = False  # stop() has begun
        self.pool: Pool | None = None
        self._exchange_context: ExchangeContext | None = None  # once started
        self.admin: AdminServer | None = None  # with config.admin_listen, once started
        self.lag: LagMonitor | None = None  # with config.loop_lag_interval, once started
        self.access_log: AccessLog | None = None  # with config.access_log, once started
        self._answering: asyncio.BaseTransport | None = None  # worker 1's questions to us
        self._warming: asyncio.Task[None] | None = None  # the dial at start (warm_up)
        self.port = 0
        self._address: tuple[Any, ...] = ()

    @property
    def url(self) -> str:
        host = self.config.listen.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    def summary(self) -> str:
        """The counters, and the loop lag when measured: the shutdown line."""
        lag = self.lag.summary() if self.lag is not None else ""
        stats = self.stats.snapshot(retry_buffer_bytes=self.retry_budget.used)
        return f"{stats.summary()} {lag}".rstrip()

    @property
    def in_flight(self) -> int:
        """Requests being forwarded right now."""
        return len(self.exchanges)

    def connection_states(self) -> dict[str, int]:
        """Upstream connections by state: ``open``, ``draining`` (GOAWAY or retired)."""
        states: dict[str, int] = {}
        for conn in self.pool.connections if self.pool is not None else ():
            states[conn.state.value] = states.get(conn.state.value, 0) + 1
        return states

    @property
    def listen_address(self) -> str:
        """The bound address, IPv6 in brackets: ``127.0.0.1:1250``, ``[::1]:1250``."""
        host = self._address[0] if self._address else self.config.listen.host
        return str(HostPort(host, self.port))

    async def start(self, sock: socket.socket | None = None, links: Links | None = None) -> None:
        """Bind the listening socket, or serve on ``sock``, one already listening (the
        workers of one process share it, and ``links`` joins them for the admin
        endpoint). Raises :class:`BindError`, and ``OSError`` for what else cannot
        start (the admin address, the CA file)."""
        config = self.config
        fast_paths_taken()  # probed now, so a failed probe is told before any request
        context = self._ssl_context
        if context is None and config.upstream.tls:
            context = make_ssl_context(config)
        self.pool = Pool(config, context, self.stats)
        if config.access_log is not None:  # opened once the listener stands
            from .accesslog import AccessLog  # here: only -access-log needs it

            self.access_log = AccessLog(
                config.access_log, config.log_format, config.instance_name, self.stats
            )
        self._exchange_context = ExchangeContext(
            pool=self.pool,
            upstream=config.upstream,
            replay=ReplayPolicy(self.retry_budget, config.retry_body_limit, self.pool, self.stats),
            stats=self.stats,
            live=self.exchanges,
            access_log=self.access_log,
            header_log=HeaderLog() if config.log_headers else None,
        )
        if sock is None:
            sock = bind_listener(config.listen)
        self.capacity = ClientCapacity.of_this_process(self.pool.stream_limit)
        self._acceptor = self._make_acceptor(sock, self.capacity)
        self._address = sock.getsockname()
        self.port = self._address[1]
        # Each step that starts something says how to undo it: a later step that
        # fails leaves nothing running (no listening socket, timer, thread, link).
        async with contextlib.AsyncExitStack() as undo:
            undo.callback(self._acceptor.close)
            if self.access_log is not None:  # before any request can be accepted
                try:
                    self.access_log.open()
                except OSError as exc:
                    raise AccessLogError(self.access_log.path, exc) from None
                undo.push_async_callback(self.access_log.close)
            self._acceptor.start()
            if config.loop_lag_interval > 0:
                self.lag = LagMonitor(config.loop_lag_interval)
                self.lag.start()
                undo.callback(self.lag.stop)
            await self._start_links_and_admin(links, undo)
            undo.pop_all()  # started: stop() ends it all from here

    def _make_acceptor(self, sock: socket.socket, capacity: ClientCapacity) -> Acceptor:
        config, loop = self.config, asyncio.get_running_loop()
        limits = ListenerLimits(config.header_timeout, config.client_idle_timeout)
        flusher = OutputFlusher(loop)
        assert self._exchange_context is not None  # made first, in start
        # The listener makes its requests' exchanges itself: nothing of the
        # process is on a request's way.
        new_exchange = functools.partial(Exchange, self._exchange_context)
        return Acceptor(
            sock,
            lambda: ClientConnection(new_exchange, self.clients, self.stats, limits, flusher),
            self.clients,
            capacity,
            self.descriptors.shortage,
            self._at_capacity,
        )

    async def _start_links_and_admin(
        self, links: Links | None, undo: contextlib.AsyncExitStack
    ) -> None:
        """Worker 1's questions to this worker, and the admin endpoint, as configured."""
        # Imported here, not above: only -workers and -admin-listen need them, and a
        # plain proxy's memory stays without them (they never import this module).
        if links is not None and links.answer_on is not None:
            from .siblings import answer_siblings

            self._answering = await answer_siblings(self, links.answer_on)
            undo.callback(self._answering.close)
        if self.config.admin_listen is not None:
            from .admin import AdminServer
            from .siblings import Siblings

            siblings = Siblings(links) if links is not None and links.ask else None
            admin = AdminServer(self, self.config.admin_listen, siblings)
            await admin.start()  # raises AdminListenError, an OSError
            self.admin = admin

    def warm_up(self) -> None:
        """Open an upstream connection now, in the background: the first request
        finds it open, and an upstream that cannot be reached is told at start, in
        one WARNING with what to try, not by the first request's 502."""
        if self._warming is None and self.pool is not None:
            self._warming = asyncio.get_running_loop().create_task(self._dial_at_start())

    async def _dial_at_start(self) -> None:
        assert self.pool is not None  # warm_up checked
        try:
            slot = await self.pool.acquire(early=False)
        except NoStreamsAllowed:
            log.warning(
                "upstream %s allows no streams at start (SETTINGS_MAX_CONCURRENT_STREAMS 0); "
                "requests get 502 until it allows some",
                self.config.upstream.display,
            )
            return
        except UpstreamError as exc:
            upstream = self.config.upstream.display
            via = self.config.upstream_proxy
            if exc.next_hop is not None:  # the proxy's failure: it is named, not the upstream
                why = f"the proxy {exc.next_hop} {_PROXY_FAILURES.get(exc.error, 'failed')}"
            else:
                why = _START_FAILURES.get(exc.error, "it cannot be used")
            log.warning(
                "upstream %s cannot be reached at start: %s (%s); requests get 502 until "
                "it can be; to see why: h2ping check -upstream %s%s",
                upstream,
                why,
                exc,
                upstream,
                f" -proxy {self.config.proxy}" if via is not None else "",
            )
            return
        finally:
            self._warming = None
        slot.release()  # the connection stays for the first request (idle-conn-timeout)

    def reopen_logs(self) -> None:
        """Open the access log's file again before its next line (SIGHUP, after rotation)."""
        if self.access_log is not None:
            self.access_log.reopen()

    async def readiness(self, timeout: float) -> str | None:
        """None if requests can be forwarded now, else why not: for ``/readyz``.

        Ready means listening, and an upstream connection is open or one opens
        within ``timeout``. One opened here carries no stream, so it stays for
        the next request only until ``idle_conn_timeout``.
        """
        reason = self.not_serving()
        if reason is not None:
            return reason
        assert self.pool is not None  # made before the server starts
        # Open and taking streams (one that allows none is no sign of readiness).
        if any(c.state is ConnState.OPEN and c.table.max_streams for c in self.pool.connections):
            return None
        if (refusal := self.pool.refusal) is not None:
            return f"upstream: {refusal}"  # known: no dial to say it again
        try:
            async with asyncio.timeout(timeout):
                slot = await self.pool.acquire(early=False)
        except TimeoutError:
            return f"no upstream connection within {timeout:g}s"
        except UpstreamError as exc:
            return f"upstream: {exc}"
        slot.release()
        return None

    def not_serving(self) -> str | None:
        """Why no request would be accepted now (``draining``, ``not listening``), or None."""
        if self._draining:
            return "draining"
        if self._acceptor is None or not self._acceptor.serving:
            return "not listening"
        return None

    def descriptor_counts(self) -> dict[str, int]:
        """For ``/metrics``: client connections, the capacity, descriptors open and
        their limit, clients in the listen queue (each -1 where unknown)."""
        capacity, acceptor = self.capacity, self._acceptor
        opened = open_descriptors()
        queued = acceptor.accept_queue() if acceptor is not None else None
        return {
            "clients": len(self.clients),
            "capacity": capacity() if capacity is not None and capacity.limit >= 0 else -1,
            "open": opened if opened is not None else -1,
            "limit": capacity.limit if capacity is not None else -1,
            "queued": queued if queued is not None else -1,
        }

    def _at_capacity(self) -> None:
        assert self._acceptor is not None and self.capacity is not None  # its caller, made
        self.descriptors.full(len(self.clients), self.capacity, self._acceptor.accept_queue())

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting, let in-flight requests finish for up to ``grace`` seconds,
        then cut whatever is left and close the upstream connections."""
        if grace is None:
            grace = self.config.shutdown_grace
        self._draining = True
        if self.lag is not None:
            self.lag.stop()
        if self._warming is not None:
            self._warming.cancel()
        if self._acceptor is not None:
            self._acceptor.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while True:
            for client in list(self.clients):
                client.close_if_idle()
            if not self.clients or loop.time() >= deadline:
                break
            await asyncio.sleep(0.05)
        busy = sum(not client.idle for client in self.clients)  # the rest are closing
        if busy:
            log.warning(
                "shutdown grace of %gs expired: cutting %s on %s",
                grace,
                plural(len(self.exchanges), "request"),
                plural(busy, "client connection"),
            )
        for exchange in list(self.exchanges):
            exchange.cut()  # before their clients go, which would count them cancelled
        for client in list(self.clients):
            client.abort()
        if self.pool is not None:
            self.pool.close()
        if self.admin is not None:
            await self.admin.stop()
        if self._answering is not None:
            self._answering.close()  # last: worker 1 reports our final counts until now
        if self.access_log is not None:
            await self.access_log.close()  # every request has ended and been logged by now
        # Let cancelled tasks and closing transports run their last steps.
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    async def __aenter__(self) -> Proxy:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
