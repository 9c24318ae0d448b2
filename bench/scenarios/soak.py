"""Soak: minutes of mixed traffic through h2ping while faults are injected.

    python bench/soak.py                 # 10 minutes
    python bench/soak.py --minutes 1     # a quick check
    python bench/soak.py --minutes 30 --clients 500 --tls --seed 7

Everything runs in one process, on one event loop (uvloop unless ``--loop asyncio``)::

    aiohttp --HTTP/1.1--> h2ping --h2c/TLS--> IdleCutRelay --> BlackholeRelay --> ScriptedUpstream
    --clients workers     ping 1 s,           resets a flow    can silence one    counts every
    (one request each     timeout 2 s,        after 3 s        flow: a vanished   x-request-id
    at a time)            max-conn-age 20 s   without bytes    peer

Traffic. Each worker loops: small echo POSTs, 256 KiB-1 MiB uploads (checked by
SHA-256), 1-4 MiB downloads, streamed (chunked) responses, long-silent requests
(4-8 s without a byte on the wire, past the relay's 3 s idle cut, so only PINGs
keep them alive), and client aborts (mid-response and mid-upload).

Faults, from the first seconds to the end:

- idle cuts: the relay resets any flow 3 s without application bytes (PINGs
  every 1 s of silence must keep every flow h2ping holds alive);
- GOAWAY churn: every 2-6 s a random server connection sends GOAWAY with a
  ``last_stream_id`` no lower than any stream it has processed (a third of them
  two-step: 2^31-1 first, the real id 0.5 s later);
- refused streams: 1 % of requests get REFUSED_STREAM on arrival;
- abrupt closes: every 15-35 s a random server connection is dropped (TCP reset);
- a vanished peer: every 30-60 s one flow is silenced in the BlackholeRelay, both
  sockets left open; it is reset 5 s later, after h2ping has declared it dead;
- max-conn-age rotation: h2ping retires each connection after 18-20 s.

What it prints: requests sent, succeeded, aborted by the client (deliberate),
replayed, failed (grouped by cause: the ``Proxy-Status`` of a 502, or h2ping's
own log line for a response cut after its headers), hung, processed twice and
corrupted, the faults injected, and open fds, sockets, asyncio tasks and RSS at
the start and the end.

"Processed" means the upstream handler reached the point of responding; a stream
refused with REFUSED_STREAM, or above the GOAWAY ``last_stream_id`` of its
connection when the handler got there, was not processed. Some failures are the
expected price of a fault (a request in flight on a connection that is reset or
vanishes gets a 502, or a truncated response once its headers went out); the
invariants are what must always hold. Exit status 1 if any fails:

- hung == 0 (no request without an answer or a cut within 60 s);
- processed twice == 0, corrupted == 0 (every 200 carries exactly its body);
- no live flow was cut by the idle relay (a flow is live while h2ping still
  holds its connection; cuts of flows it had left are counted apart);
- no exception from h2ping reached the event loop's exception handler, and no
  ERROR was logged (crashes of the scripted upstream, a test tool, are listed
  apart: they fail the requests on the connection they drop, but are not h2ping's);
- once traffic stops: no exchange, client connection, stream or kept body is
  left in h2ping and no stream in the upstream; after the pooled connections are
  retired, open fds, sockets and asyncio tasks equal the start's;
- RSS at the end within 64 MiB (or 25 %) of RSS after the warm-up minute.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime
import gc
import hashlib
import logging
import os
import platform
import random
import re
import ssl
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from h2.errors import ErrorCodes

from common.measure import cpu_model, percentiles, rss_mib
from h2ping import Proxy
from h2ping.testing import (
    BlackholeRelay,
    IdleCutRelay,
    ScriptedConnection,
    ScriptedRequest,
    ScriptedUpstream,
    StreamClosed,
)

PING_INTERVAL = 1.0
PING_TIMEOUT = 2.0
IDLE_CUT = 3.0
MAX_CONN_AGE = 20.0
MAX_STREAMS = 100
REFUSE_RATE = 0.01
#: A request with neither an answer nor a cut after this long is hung.
HANG_AFTER = 60.0
#: The longest silence a "silent" request keeps on the wire, well past IDLE_CUT.
SILENT_DELAY = (4.0, 8.0)
RSS_TOLERANCE_MIB = 64.0
BLOB = random.Random(0).randbytes(4 * 1024 * 1024)  # download and upload payloads

#: Request kinds and how often each is chosen.
KINDS = {
    "small": 40,
    "upload": 8,
    "download": 8,
    "stream": 12,
    "silent": 12,
    "abort": 10,
    "abort_upload": 4,
}


# ----------------------------------------------------------------- the upstream


class SoakServer:
    """The upstream's handler: serves each kind and records what it processed.

    Arrivals and processings are counted per request id in byte arrays (one byte
    per request), so the bookkeeping of a long run does not grow RSS noticeably.
    """

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.arrivals = bytearray()
        self.processed = bytearray()
        self.refused = 0
        self.not_processed_after_goaway = 0
        #: Per server connection: the highest stream id processed there. A GOAWAY
        #: must never name a lower last_stream_id (that would be a lie).
        self.max_processed: dict[ScriptedConnection, int] = {}

    def prune(self, upstream: ScriptedUpstream) -> None:
        """Drop what the upstream recorded of finished connections and requests: it
        keeps every request it saw, which over minutes would look like a leak."""
        upstream.requests.clear()
        upstream.connections[:] = [c for c in upstream.connections if not c.closed]
        for conn in upstream.connections:
            conn.requests.clear()
        self.max_processed = {c: n for c, n in self.max_processed.items() if not c.closed}

    @staticmethod
    def _count(table: bytearray, rid: int) -> None:
        if rid >= len(table):
            table.extend(bytes(rid + 1024 - len(table)))
        table[rid] = min(255, table[rid] + 1)

    async def handle(self, request: ScriptedRequest) -> None:
        rid = int(request.header("x-request-id") or 0)
        self._count(self.arrivals, rid)
        if self.rng.random() < REFUSE_RATE:
            self.refused += 1
            request.reset(ErrorCodes.REFUSED_STREAM)
            return
        kind = request.path.split("/")[1]
        try:
            body = await request.body()
            if kind == "silent":
                await asyncio.sleep(float(request.header("x-delay") or 0))
            if not self._begin_processing(request, rid):
                return
            await self._respond(request, kind, body)
        except StreamClosed:
            pass  # the client went away, or its connection did

    def _begin_processing(self, request: ScriptedRequest, rid: int) -> bool:
        """Decide, in one step with no await, whether this request is processed."""
        conn = request.connection
        if request.closed:
            return False
        if conn.goaway_sent is not None and request.stream_id > conn.goaway_sent:
            # A GOAWAY went out before we started work: the stream was never
            # processed, as the GOAWAY promised.
            self.not_processed_after_goaway += 1
            request.reset(ErrorCodes.REFUSED_STREAM)
            return False
        self._count(self.processed, rid)
        self.max_processed[conn] = max(self.max_processed.get(conn, 0), request.stream_id)
        return True

    async def _respond(self, request: ScriptedRequest, kind: str, body: bytes) -> None:
        if kind == "small":
            await request.respond(200, [("content-length", str(len(body)))], body)
        elif kind in ("upload", "abort_upload"):
            await request.respond(200, body=hashlib.sha256(body).hexdigest().encode())
        elif kind == "download":
            offset = int(request.header("x-offset") or 0)
            size = int(request.header("x-size") or 0)
            payload = BLOB[offset : offset + size]
            await request.respond(200, [("content-length", str(size))], payload)
        elif kind in ("stream", "abort"):
            rid = request.header("x-request-id") or ""
            gap = float(request.header("x-gap") or 0)
            await request.send_headers(200)  # no content-length: chunked to the client
            for i in range(int(request.header("x-chunks") or 0)):
                await request.send_data(f"{rid}:{i}\n".encode())
                await asyncio.sleep(gap)
            await request.end()
        elif kind == "silent":
            await request.respond(200, body=b"silent:" + body)
        else:
            await request.respond(404, body=b"no such kind")


# ----------------------------------------------------------------- faults


@dataclass
class FaultCounts:
    goaways: int = 0
    two_step_goaways: int = 0
    abrupt_closes: int = 0
    blackholed: int = 0


class Faults:
    """Periodic fault injection on the upstream and the relay in front of it."""

    def __init__(
        self,
        upstream: ScriptedUpstream,
        server: SoakServer,
        blackhole: BlackholeRelay,
        rng: random.Random,
    ) -> None:
        self.upstream = upstream
        self.server = server
        self.blackhole = blackhole
        self.rng = rng
        self.counts = FaultCounts()
        self._silenced: dict[Any, asyncio.TimerHandle] = {}

    def _open_conns(self) -> list[ScriptedConnection]:
        return [c for c in self.upstream.connections if not c.closed]

    async def run(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(3.0)  # let the pool warm up first
        schedule = {
            self._goaway: (2.0, 6.0),
            self._abrupt_close: (15.0, 35.0),
            self._vanish: (30.0, 60.0),
        }
        due = {fault: loop.time() + self.rng.uniform(*gap) for fault, gap in schedule.items()}
        try:
            while loop.time() < until:
                fault, when = min(due.items(), key=lambda item: item[1])
                await asyncio.sleep(max(0.0, min(when, until) - loop.time()))
                if loop.time() >= until:
                    break
                fault()
                due[fault] = loop.time() + self.rng.uniform(*schedule[fault])
        finally:
            self.heal()

    def _goaway(self) -> None:
        candidates = [c for c in self._open_conns() if c.goaway_sent is None]
        if not candidates:
            return
        conn = self.rng.choice(candidates)
        self.counts.goaways += 1
        if self.rng.random() < 1 / 3:
            self.counts.two_step_goaways += 1
            conn.goaway(last_stream_id=2**31 - 1)
            asyncio.get_running_loop().call_later(0.5, self._final_goaway, conn)
        else:
            self._final_goaway(conn)

    def _final_goaway(self, conn: ScriptedConnection) -> None:
        if conn.closed:
            return
        # Anywhere between the last stream processed and the last stream seen:
        # streams above it were never started, so h2ping may replay them.
        low = self.server.max_processed.get(conn, 0)
        high = max(low, conn._h2.highest_inbound_stream_id)
        last = self.rng.randint(low, high)
        if last % 2 == 0 and last > low:
            last -= 1  # client stream ids are odd
        conn.goaway(last_stream_id=last)

    def _abrupt_close(self) -> None:
        conns = self._open_conns()
        if conns:
            self.counts.abrupt_closes += 1
            self.rng.choice(conns).close()

    def _vanish(self) -> None:
        # One flow only (BlackholeRelay.blackhole() would silence all of them).
        flows = [f for f in self.blackhole._flows if f not in self._silenced]
        if not flows:
            return
        flow = self.rng.choice(flows)
        flow.forwarding.clear()
        self.counts.blackholed += 1
        # A vanished peer's state is dropped eventually; by then h2ping must have
        # declared the connection dead (ping-interval + ping-timeout).
        self._silenced[flow] = asyncio.get_running_loop().call_later(
            PING_INTERVAL + PING_TIMEOUT + 2.0, self._drop, flow
        )

    def _drop(self, flow: Any) -> None:
        self._silenced.pop(flow, None)
        try:
            flow.reset()
        except ValueError:
            # uvloop: reset() cannot set SO_LINGER on a side that is already
            # closed (fd -1) and stops there; finish its work by hand.
            for writer in (flow.client, flow.upstream):
                writer.transport.abort()
            for task in flow.tasks:
                task.cancel()

    def heal(self) -> None:
        """Reset every flow still silenced, so the relay frees its sockets and tasks."""
        for flow, timer in list(self._silenced.items()):
            timer.cancel()
            self._drop(flow)


class WatchedIdleCutRelay(IdleCutRelay):
    """Tells real cuts from cleanups. A cut is live when h2ping still held an open
    connection on the flow: its PINGs should have made that impossible. A flow
    whose h2ping side had gone, but whose other side lingered, is a cleanup."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.proxy: Proxy | None = None
        self.live_cuts: list[str] = []

    async def _watch_idle(self, flow: Any, idle_cut: float) -> None:
        await super()._watch_idle(flow, idle_cut)
        # The flow was reset just now, within this loop turn: h2ping has not
        # noticed yet, so its connection on this flow is still in the pool.
        if self.proxy is None or self.proxy.pool is None:
            return
        try:
            proxy_end = flow.client.get_extra_info("peername")
            for conn in self.proxy.pool.connections:
                transport = conn._transport
                if transport is not None and transport.get_extra_info("sockname") == proxy_end:
                    self.live_cuts.append(
                        f"conn={conn.id} {conn.state.value} streams={len(conn.streams)}"
                    )
        except Exception as exc:  # a check that breaks must not pass for a clean run
            self.live_cuts.append(f"could not tell whether the cut flow was live: {exc!r}")


# ----------------------------------------------------------------- the client


@dataclass
class Tally:
    sent: int = 0
    succeeded: int = 0
    aborted: int = 0  # deliberately, by the client
    hung: int = 0
    corrupted: int = 0
    by_kind: collections.Counter[str] = field(default_factory=collections.Counter)
    failures: collections.Counter[str] = field(default_factory=collections.Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    hung_ids: list[str] = field(default_factory=list)

    def fail(self, cause: str, rid: int, kind: str) -> None:
        self.failures[cause] += 1
        self.examples.setdefault(cause, []).append(f"{kind}/{rid}")

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


class ProxyLog(logging.Handler):
    """Counts log records; keeps h2ping's per-request failure causes and every ERROR."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self.cause_by_rid: dict[int, str] = {}
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[(record.name, record.levelname)] += 1
        # h2ping's line for a failed request: "<METHOD /kind/id ...>: 502 <cause>" or
        # "...: response aborted after headers: <cause>" (parsed loosely: the
        # prefix around the path may change).
        if record.name == "h2ping.exchange" and record.levelno >= logging.WARNING:
            message = record.getMessage()
            rid = re.search(r" /[a-z_]+/(\d+)\b", message)
            cause = re.search(r"(?:response aborted after headers: |: 502 )(.*)", message)
            if rid and cause:
                self.cause_by_rid[int(rid[1])] = cause[1]
        if record.levelno >= logging.ERROR:
            self.errors.append(f"{record.name}: {record.getMessage()}")
            if record.exc_info:
                self.errors[-1] += "\n" + logging.Formatter().formatException(record.exc_info)


def normalise(text: str) -> str:
    """A failure cause without its numbers, so equal causes group together."""
    return re.sub(r"\d+(\.\d+)?", "N", text)[:160]


class LoopErrors:
    """The event loop's exception handler. Errors of the scripted upstream (a test
    tool, not h2ping) are kept apart: they show as failures of the requests on the
    connection they drop, but they are no fault of the proxy."""

    def __init__(self) -> None:
        self.proxy: list[str] = []
        self.upstream_tool: list[str] = []

    def __call__(self, _: asyncio.AbstractEventLoop, ctx: dict[str, Any]) -> None:
        detail = [str(ctx.get("message"))]
        detail += [f"{k}={ctx[k]!r}" for k in ("exception", "protocol", "task") if k in ctx]
        tool = isinstance(ctx.get("protocol"), ScriptedConnection)
        (self.upstream_tool if tool else self.proxy).append(" ".join(detail))


class Truncated(Exception):
    def __init__(self, exc: BaseException) -> None:
        super().__init__(type(exc).__name__)
        self.exc = exc


class Client:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        rng: random.Random,
        proxy_log: ProxyLog,
    ) -> None:
        self.session = session
        self.url = url
        self.rng = rng
        self.log = proxy_log
        self.tally = Tally()
        self._next_id = 1
        self._kinds = list(KINDS)
        self._weights = list(KINDS.values())

    async def worker(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            rid = self._next_id
            self._next_id += 1
            kind = self.rng.choices(self._kinds, self._weights)[0]
            await self.one(rid, kind)
            await asyncio.sleep(self.rng.uniform(0.0, 0.3))

    async def one(self, rid: int, kind: str) -> None:
        tally = self.tally
        tally.sent += 1
        tally.by_kind[kind] += 1
        method, headers, data, expected, abort_after = self._build(rid, kind)
        call = asyncio.ensure_future(self._exchange(method, f"/{kind}/{rid}", headers, data))
        try:
            async with asyncio.timeout(HANG_AFTER):
                if abort_after is not None:
                    done, _ = await asyncio.wait({call}, timeout=abort_after)
                    if not done:
                        call.cancel()
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await call
                        tally.aborted += 1
                        return
                status, proxy_status, body = await call
        except TimeoutError:
            call.cancel()
            tally.hung += 1
            tally.hung_ids.append(f"{kind}/{rid}")
            return
        except Truncated as exc:
            logged = self.log.cause_by_rid.get(rid)
            cause = normalise(logged) if logged else f"no h2ping log line ({exc})"
            tally.fail(f"cut after headers: {cause}", rid, kind)
            return
        except (aiohttp.ClientError, OSError) as exc:
            tally.fail(f"no response: {type(exc).__name__}: {normalise(str(exc))}", rid, kind)
            return
        if status == 502:
            match = re.search(r'error=([\w-]+); details="(.*)"', proxy_status)
            cause = f"{match[1]}: {match[2]}" if match else proxy_status or "no Proxy-Status"
            tally.fail(f"502 {normalise(cause)}", rid, kind)
        elif status != 200:
            tally.fail(f"status {status}", rid, kind)
        elif body != expected:
            tally.corrupted += 1
            tally.fail("corrupted body", rid, kind)
        else:
            tally.succeeded += 1

    async def _exchange(
        self, method: str, path: str, headers: dict[str, str], data: Any
    ) -> tuple[int, str, bytes]:
        async with self.session.request(method, self.url + path, headers=headers, data=data) as r:
            try:
                body = await r.read()
            except (aiohttp.ClientError, OSError) as exc:
                raise Truncated(exc) from None
            return r.status, r.headers.get("proxy-status", ""), body

    def _build(self, rid: int, kind: str) -> tuple[str, dict[str, str], Any, bytes, float | None]:
        """method, headers, body, the expected response body, abort-after (seconds)."""
        rng = self.rng
        headers = {"x-request-id": str(rid)}
        if kind == "small":
            body = rng.randbytes(rng.randint(0, 4000))
            return "POST", headers, body, body, None
        if kind == "upload":
            offset, size = rng.randint(0, 1024), rng.randint(256 * 1024, 1024 * 1024)
            body = BLOB[offset : offset + size]
            return "POST", headers, body, hashlib.sha256(body).hexdigest().encode(), None
        if kind == "download":
            offset, size = rng.randint(0, 1024), rng.randint(1024 * 1024, 4 * 1024 * 1024 - 1024)
            headers |= {"x-offset": str(offset), "x-size": str(size)}
            return "GET", headers, None, BLOB[offset : offset + size], None
        if kind in ("stream", "abort"):
            chunks, gap = (rng.randint(5, 30), 0.02) if kind == "stream" else (30, 0.1)
            headers |= {"x-chunks": str(chunks), "x-gap": str(gap)}
            expected = b"".join(f"{rid}:{i}\n".encode() for i in range(chunks))
            abort_after = rng.uniform(0.05, 2.5) if kind == "abort" else None
            return "GET", headers, None, expected, abort_after
        if kind == "silent":
            headers["x-delay"] = f"{rng.uniform(*SILENT_DELAY):.2f}"
            body = b"%d" % rid
            return "POST", headers, body, b"silent:" + body, None
        # abort_upload: a chunked upload the client gives up on halfway.
        return "POST", headers, _slow_upload(), b"", rng.uniform(0.1, 1.5)


async def _slow_upload() -> AsyncIterator[bytes]:
    for i in range(40):
        yield BLOB[i * 65536 : (i + 1) * 65536]
        await asyncio.sleep(0.05)


# ----------------------------------------------------------------- resources


@dataclass
class Snapshot:
    fds: int
    sockets: int
    tasks: int
    rss_mib: float

    @staticmethod
    def take() -> Snapshot:
        gc.collect()
        fds = sockets = 0
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/self/fd/{name}")
                fds += 1
                sockets += target.startswith("socket:")
        return Snapshot(fds, sockets, len(asyncio.all_tasks()), rss_mib())


async def watch_loop_lag(lags: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        await asyncio.sleep(0.1)
        lags.append(loop.time() - start - 0.1)


# ----------------------------------------------------------------- the run


def machine() -> str:
    cpus = f"{os.cpu_count()} CPUs ({cpu_model()})"
    return f"{platform.node()}, {cpus}, Python {platform.python_version()}"


def tls_contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    client.set_alpn_protocols(["h2"])
    return server, client


async def soak(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    loop_errors = LoopErrors()
    loop.set_exception_handler(loop_errors)
    rng = random.Random(args.seed)
    proxy_log = ProxyLog()
    logging.getLogger().addHandler(proxy_log)
    logging.getLogger().setLevel(logging.INFO)
    server = SoakServer(random.Random(args.seed + 1))
    server_ctx, client_ctx = tls_contexts() if args.tls else (None, None)

    upstream = ScriptedUpstream(
        server.handle,
        ssl_context=server_ctx,
        max_concurrent_streams=MAX_STREAMS,
        initial_window_size=1024 * 1024,
    )
    await upstream.start()
    blackhole = BlackholeRelay("127.0.0.1", upstream.port)
    await blackhole.start()
    idle_cut = WatchedIdleCutRelay("127.0.0.1", blackhole.port, idle_cut=IDLE_CUT)
    await idle_cut.start()
    scheme = "https" if args.tls else "http"
    proxy = Proxy(
        ssl_context=client_ctx,
        upstream=f"{scheme}://127.0.0.1:{idle_cut.port}",
        listen="127.0.0.1:0",
        ping_interval=PING_INTERVAL,
        ping_timeout=PING_TIMEOUT,
        max_conn_age=MAX_CONN_AGE,
        connect_timeout=5.0,
    )
    await proxy.start()
    assert proxy.pool is not None
    idle_cut.proxy = proxy
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
    )
    client = Client(session, proxy.url, rng, proxy_log)
    # Proxy, relays and upstream are running, with no connection among them yet:
    # the end must look the same once the pooled connections are retired.
    start = Snapshot.take()
    faults = Faults(upstream, server, blackhole, random.Random(args.seed + 2))
    started = loop.time()
    until = started + args.minutes * 60
    lags: list[float] = []
    lag_task = asyncio.create_task(watch_loop_lag(lags))
    mode = "TLS" if args.tls else "h2c"
    print(
        f"h2ping soak: {args.minutes:g} min, {args.clients} clients, {mode}, "
        f"{args.loop}, seed {args.seed}\n"
        f"  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M:%S} UTC on {machine()}\n"
        f"  aiohttp -> h2ping (ping {PING_INTERVAL:g}s, timeout {PING_TIMEOUT:g}s, "
        f"max-conn-age {MAX_CONN_AGE:g}s) -> IdleCutRelay ({IDLE_CUT:g}s) -> BlackholeRelay "
        f"-> ScriptedUpstream ({MAX_STREAMS} streams per connection)",
        flush=True,
    )

    rss_warm: float | None = None
    rss_peak = start.rss_mib

    async def progress() -> None:
        nonlocal rss_warm, rss_peak
        every = min(60.0, args.minutes * 60 / 4)
        while True:
            await asyncio.sleep(every)
            rss = rss_mib()
            rss_peak = max(rss_peak, rss)
            elapsed = loop.time() - started
            if rss_warm is None and elapsed >= min(60.0, args.minutes * 60 / 4):
                rss_warm = rss  # after warm-up: what later growth is measured from
            t = client.tally
            print(
                f"  [{elapsed:5.0f}s] sent {t.sent} ok {t.succeeded} aborted {t.aborted} "
                f"failed {t.failed} hung {t.hung} | replays {proxy.stats.replays} "
                f"in flight {proxy.in_flight} conns {proxy.connection_states()} "
                f"| RSS {rss:.0f} MiB, loop lag max {max(lags, default=0) * 1000:.0f} ms",
                flush=True,
            )

    async def housekeeping() -> None:
        while True:
            await asyncio.sleep(5.0)
            server.prune(upstream)

    progress_task = asyncio.create_task(progress())
    housekeeping_task = asyncio.create_task(housekeeping())
    wall = time.monotonic()
    await asyncio.gather(faults.run(until), *(client.worker(until) for _ in range(args.clients)))
    duration = time.monotonic() - wall
    for task in (progress_task, housekeeping_task, lag_task):
        task.cancel()
    for result in await asyncio.gather(
        progress_task, housekeeping_task, lag_task, return_exceptions=True
    ):
        if not isinstance(result, asyncio.CancelledError):
            raise RuntimeError("a soak background task failed") from result
    rss_peak = max(rss_peak, rss_mib())

    # Quiescence: traffic has stopped; nothing of any request may be left.
    await session.close()
    quiet_deadline = loop.time() + 10
    while loop.time() < quiet_deadline and (
        proxy.exchanges or proxy.clients or upstream.open_streams
    ):
        await asyncio.sleep(0.05)
    leftovers = {
        "proxy exchanges": len(proxy.exchanges),
        "proxy client connections": len(proxy.clients),
        "pool streams": sum(len(c.streams) + c.reserved for c in proxy.pool.connections),
        "retry-buffer bytes": proxy.retry_budget.used,
        "retry budget used": proxy.retry_budget.used,
        "upstream open streams": upstream.open_streams,
    }
    pooled = len(proxy.pool.connections)
    # Retire the pooled connections (GOAWAY NO_ERROR, as max-conn-age does); then
    # fds, sockets and tasks must be those of the start: proxy, relays and
    # upstream are still running, with no connection among them.
    faults.heal()
    end = Snapshot.take()
    settle_deadline = loop.time() + 15
    while loop.time() < settle_deadline:
        for conn in proxy.pool.connections:
            conn.retire("soak finished")
        await asyncio.sleep(0.2)
        end = Snapshot.take()
        if (end.fds, end.sockets, end.tasks) == (start.fds, start.sockets, start.tasks):
            break
    print_report(
        args, client.tally, server, faults.counts, proxy, idle_cut, proxy_log, loop_errors,
        start, end, rss_warm, rss_peak, lags, leftovers, pooled, duration,
    )  # fmt: skip
    await proxy.stop(grace=0)
    await idle_cut.stop()
    await blackhole.stop()
    await upstream.stop()
    logging.getLogger().removeHandler(proxy_log)
    failed = check_invariants(
        client.tally, server, proxy_log, loop_errors, start, end, rss_warm, leftovers,
        len(idle_cut.live_cuts),
    )  # fmt: skip
    if failed:
        print("INVARIANTS FAILED: " + "; ".join(failed))
        return 1
    print("invariants: all hold")
    return 0


def twice(server: SoakServer) -> list[int]:
    return [rid for rid, n in enumerate(server.processed) if n > 1]


def rss_limit(warm: float) -> float:
    return warm + max(RSS_TOLERANCE_MIB, 0.25 * warm)


def check_invariants(
    tally: Tally,
    server: SoakServer,
    proxy_log: ProxyLog,
    loop_errors: LoopErrors,
    start: Snapshot,
    end: Snapshot,
    rss_warm: float | None,
    leftovers: dict[str, int],
    live_cuts: int,
) -> list[str]:
    failed = []
    if live_cuts:
        failed.append(f"{live_cuts} live flows cut by the idle relay despite PINGs")
    if tally.hung:
        failed.append(f"{tally.hung} hung")
    if twice(server):
        failed.append(f"{len(twice(server))} processed twice")
    if tally.corrupted:
        failed.append(f"{tally.corrupted} corrupted")
    if loop_errors.proxy:
        failed.append(f"{len(loop_errors.proxy)} exceptions reached the loop")
    if proxy_log.errors:
        failed.append(f"{len(proxy_log.errors)} ERROR log lines")
    failed += [f"{name}: {n}" for name, n in leftovers.items() if n]
    for name in ("fds", "sockets", "tasks"):
        if getattr(end, name) != getattr(start, name):
            failed.append(f"{name} {getattr(start, name)} -> {getattr(end, name)}")
    if rss_warm is not None and end.rss_mib > rss_limit(rss_warm):
        failed.append(f"RSS grew {rss_warm:.0f} -> {end.rss_mib:.0f} MiB")
    return failed


def print_report(
    args: argparse.Namespace,
    tally: Tally,
    server: SoakServer,
    faults: FaultCounts,
    proxy: Proxy,
    idle_cut: WatchedIdleCutRelay,
    proxy_log: ProxyLog,
    loop_errors: LoopErrors,
    start: Snapshot,
    end: Snapshot,
    rss_warm: float | None,
    rss_peak: float,
    lags: list[float],
    leftovers: dict[str, int],
    pooled: int,
    duration: float,
) -> None:
    stats = proxy.stats
    seen_again = sum(1 for n in server.arrivals if n > 1)
    rate = tally.sent / duration
    print(f"\nrequests sent        {tally.sent:8d}  ({rate:.0f}/s over {duration:.0f}s)")
    print("  by kind            " + ", ".join(f"{k} {n}" for k, n in sorted(tally.by_kind.items())))
    print(f"  succeeded          {tally.succeeded:8d}")
    print(f"  aborted by client  {tally.aborted:8d}  (deliberate)")
    print(
        f"  replayed           {stats.replays:8d}  (h2ping replays; the upstream saw {seen_again} "
        f"request ids more than once, each processed at most once)"
    )
    print(f"  failed             {tally.failed:8d}")
    for cause, n in tally.failures.most_common():
        shown = tally.examples[cause] if args.list_failures else tally.examples[cause][:3]
        print(f"    {n:6d}  {cause}\n            e.g. {', '.join(shown)}")
    print(f"  hung               {tally.hung:8d}  (must be 0) {' '.join(tally.hung_ids[:10])}")
    dup = twice(server)
    print(f"  processed twice    {len(dup):8d}  (must be 0) {' '.join(map(str, dup[:10]))}")
    print(f"  corrupted          {tally.corrupted:8d}  (must be 0)")
    print(
        f"faults: GOAWAY {faults.goaways} ({faults.two_step_goaways} two-step; "
        f"{server.not_processed_after_goaway} streams left unprocessed above one), "
        f"REFUSED_STREAM {server.refused}, abrupt closes {faults.abrupt_closes}, "
        f"vanished flows {faults.blackholed}, max-conn-age retirements {stats.retired}, "
        f"idle cuts of live flows {len(idle_cut.live_cuts)} "
        f"(and {idle_cut.flows_cut - len(idle_cut.live_cuts)} of flows h2ping had left)"
    )
    for cut in idle_cut.live_cuts[:10]:
        print(f"  live flow cut: {cut}")
    print(f"h2ping: {proxy.summary()}")
    print(f"  responses by class: {dict(sorted(stats.responses.items()))}")
    levels = collections.Counter()
    for (name, level), n in proxy_log.counts.items():
        levels[f"{name} {level}"] += n
    print("log records: " + ", ".join(f"{k} {n}" for k, n in sorted(levels.items())))
    for line in proxy_log.errors[:20]:
        print(f"  ERROR {line}")
    for message in loop_errors.proxy[:20]:
        print(f"  loop exception handler: {message}")
    if loop_errors.upstream_tool:
        print(
            f"  the scripted upstream (test tool) crashed {len(loop_errors.upstream_tool)} times, "
            "dropping its connection:"
        )
    for message in loop_errors.upstream_tool[:5]:
        print(f"    {message}")
    (p99,) = percentiles(lags, 99) if lags else (0.0,)
    print(f"event loop lag: p99 {p99 * 1000:.0f} ms, max {max(lags, default=0) * 1000:.0f} ms")
    print(f"after traffic stopped ({pooled} pooled upstream connections still open):")
    for name, n in leftovers.items():
        print(f"  {name:26s} {n}")
    print("resources (proxy, relays and upstream running, no connections):")
    print(f"  {'':14s} {'start':>8s} {'end':>8s}")
    for name in ("fds", "sockets", "tasks"):
        print(f"  {name:14s} {getattr(start, name):8d} {getattr(end, name):8d}")
    warm = f"{rss_warm:.0f}" if rss_warm is not None else "-"
    limit = f"{rss_limit(rss_warm):.0f}" if rss_warm is not None else "-"
    print(
        f"  RSS MiB: start {start.rss_mib:.0f}, after warm-up {warm}, peak {rss_peak:.0f}, "
        f"end {end.rss_mib:.0f} (limit {limit})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=300, help="concurrent client workers")
    parser.add_argument("--tls", action="store_true", help="TLS upstream (trustme) instead of h2c")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--list-failures", action="store_true", help="every failed request id")
    args = parser.parse_args()
    if args.loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(soak(args))


if __name__ == "__main__":
    sys.exit(main())
