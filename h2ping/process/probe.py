"""What ``h2ping check`` measures: one HTTP/2 connection to the upstream, opened as
h2ping opens its own (TCP, TLS with ALPN or h2c, the server's first SETTINGS, all
within ``-connect-timeout``), then timed PINGs and, optionally, one GET.

The connection is driven through h2's public API only (``H2Connection`` and its
events). GOAWAY frames are taken out before h2 sees them, as h2ping's own
connections do (:mod:`h2ping.http2.frames`): h2 closes its whole state machine on
any GOAWAY, and a GET the server promised to finish would fail with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import h2.events
import h2.exceptions
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.settings import SettingCodes

from .._version import __version__
from ..config import CheckSettings, Config
from ..fields import Header
from ..forward.headers import request_headers
from ..http2.dial import describe_connect_error
from ..http2.frames import GOAWAY, FloodError, FrameSizeError, FrameSplitter, parse_goaway
from ..http2.h2errors import describe_h2_error
from ..http2.pingbackoff import punishes_pings
from ..http2.tlslayer import TLSLayer
from ..http2.upstream import our_settings

#: The SETTINGS reported: the name used in JSON, and what a server that does not
#: send one has (RFC 9113 6.5.2).
SETTINGS: tuple[tuple[SettingCodes, str, str], ...] = (
    (SettingCodes.MAX_CONCURRENT_STREAMS, "max_concurrent_streams", "unlimited"),
    (SettingCodes.INITIAL_WINDOW_SIZE, "initial_window_size", "65535"),
    (SettingCodes.MAX_FRAME_SIZE, "max_frame_size", "16384"),
    (SettingCodes.MAX_HEADER_LIST_SIZE, "max_header_list_size", "unlimited"),
    (SettingCodes.HEADER_TABLE_SIZE, "header_table_size", "4096"),
)
#: Below this many concurrent streams a server makes h2ping open more connections.
FEW_STREAMS = 10
#: A certificate that ends sooner than this is worth a note.
EXPIRY_WARNING_DAYS = 30


class ProbeFailed(Exception):
    """h2ping cannot use the endpoint; the message says why, in one line."""


@dataclass
class TLSFacts:
    version: str
    cipher: str
    alpn: str | None
    not_after: float | None  # the certificate's notAfter (epoch seconds); None: not verified


@dataclass
class GoAway:
    last_stream_id: int
    error: str
    debug: str
    punishes_pings: bool  # ENHANCE_YOUR_CALM, too_many_pings: gRPC's PING policy

    def __str__(self) -> str:
        debug = f', debug "{self.debug}"' if self.debug else ""
        return f"GOAWAY {self.error} (last stream {self.last_stream_id}{debug})"


@dataclass
class Response:
    path: str  # the :path sent, the values of the upstream's own query hidden
    status: int
    first_byte: float  # seconds from the request's HEADERS to the response's
    server: str | None


@dataclass
class Findings:
    """What the check learnt, step by step; ``problem`` is why h2ping cannot use it."""

    address: str  # host:port
    tls_used: bool
    tcp_time: float | None = None
    tls_time: float | None = None
    settings_time: float | None = None
    tls: TLSFacts | None = None
    http2: bool = False
    settings: dict[int, int] | None = None  # what the server sent, by setting code
    pings_sent: int = 0
    ping_rtts: list[float] = field(default_factory=list)
    response: Response | None = None
    goaway: GoAway | None = None
    problem: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        return self.problem is None


def _code_name(code: int) -> str:
    try:
        return ErrorCodes(code).name
    except ValueError:
        return f"0x{code:x}"


def _printable(data: bytes, limit: int = 80) -> str:
    """Peer-chosen bytes for one line of output: printable ASCII only."""
    return "".join(chr(b) if 32 <= b < 127 else "?" for b in data[:limit])


def _not_http2(first: bytes) -> str | None:
    """What the first bytes of an answer say when they are no HTTP/2 frames. Only the
    first read is looked at: a peer's first answer comes in one segment."""
    if first.startswith(b"HTTP/"):
        return "answered in HTTP/1.x, not HTTP/2"
    if first[:1] in (b"\x15", b"\x16") and first[1:2] == b"\x03":  # a TLS alert or handshake
        return "answered with TLS: use an https:// upstream"
    return None


class ProbeConnection(asyncio.BufferedProtocol):
    """One HTTP/2 client connection that answers the probe's questions. It sends
    its preface only on :meth:`start`, once the probe knows HTTP/2 was agreed."""

    def __init__(self, address: str, header_list_limit: int) -> None:
        self._address = address  # host:port, for messages
        self._loop = asyncio.get_running_loop()
        self._h2 = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        self._header_list_limit = header_list_limit
        self._frames = FrameSplitter()
        self._buffer = bytearray(64 * 1024)
        self._transport: asyncio.Transport | None = None
        self._started = False
        self._early = bytearray()  # what arrived before start()
        self._first_read = True
        self.ended: str | None = None  # why the connection is over, once it is
        self.lost: asyncio.Future[None] = self._loop.create_future()
        self.settings: asyncio.Future[dict[int, int]] = self._loop.create_future()
        self.sent_settings: dict[int, int] = {}
        self.goaway: GoAway | None = None
        self._pings: dict[bytes, asyncio.Future[float]] = {}
        self._heads: dict[int, asyncio.Future[tuple[list[Header], float]]] = {}

    # ------------------------------------------------------------- the probe's side

    def start(self) -> None:
        """Send the preface and our SETTINGS (h2ping's own), then handle what came."""
        self._h2.local_settings = our_settings(self._header_list_limit)
        self._h2.initiate_connection()
        self._started = True
        self._flush()
        early, self._early = bytes(self._early), bytearray()
        if early:
            self._received(early)

    async def ping(self, timeout: float) -> float:
        """One PING; its round trip in seconds."""
        when = "right after the connection opened" if not self._pings else "between PINGs"
        self._check_open(f"{when}: h2ping would open no stream on it")
        opaque = len(self._pings).to_bytes(8, "big")
        acked = self._pings[opaque] = self._loop.create_future()
        self._h2.ping(opaque)
        sent = time.perf_counter()
        self._flush()
        try:
            async with asyncio.timeout(timeout):
                return await acked - sent
        except TimeoutError:
            raise ProbeFailed(
                f"no PING ACK within {timeout:g}s (-ping-timeout): "
                "h2ping would close its connections as dead"
            ) from None

    async def get(self, headers: list[Header], timeout: float) -> tuple[list[Header], float]:
        """Send a GET; its response head and the seconds until it came."""
        self._check_open("before the request")
        stream_id = self._h2.get_next_available_stream_id()
        head = self._heads[stream_id] = self._loop.create_future()
        self._h2.send_headers(stream_id, headers, end_stream=True)
        sent = time.perf_counter()
        self._flush()
        try:
            async with asyncio.timeout(timeout):
                response, received = await head
        except TimeoutError:
            raise ProbeFailed(f"no response head within {timeout:g}s (-request-timeout)") from None
        return response, received - sent

    @property
    def connected(self) -> bool:
        """Whether the connection got as far as this protocol (TCP, and TLS if any)."""
        return self._transport is not None

    def finish(self) -> None:
        """Close cleanly: GOAWAY(NO_ERROR) if HTTP/2 got going, then the transport."""
        if self._transport is None or self._transport.is_closing():
            return
        if self._started and self.ended is None:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self._h2.close_connection()
                self._flush()
        self._transport.close()

    def _check_open(self, when: str) -> None:
        if self.ended is not None:
            raise ProbeFailed(self.ended)
        if self.goaway is not None:
            raise ProbeFailed(f"the upstream sent {self.goaway} {when}")

    # --------------------------------------------------------------- protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self._buffer)

    def buffer_updated(self, nbytes: int) -> None:
        self._received(bytes(self._buffer[:nbytes]))

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None:
            reason = f"{self._address} closed the connection"
        else:
            reason = f"connection to {self._address} lost: {exc}"
        if self.goaway is not None:
            reason += f" after {self.goaway}"
        if not self.settings.done():
            reason += " before its HTTP/2 SETTINGS"
        self._end(reason)
        if not self.lost.done():
            self.lost.set_result(None)

    def _received(self, data: bytes) -> None:
        if self.ended is not None:
            return
        if not self._started:
            self._early += data
            return
        if self._first_read:
            self._first_read = False
            if (wrong := _not_http2(data)) is not None:
                self._abort(f"{self._address} {wrong}")
                return
        try:
            for kind, piece in self._frames.split(data):
                if kind == GOAWAY:
                    self._on_goaway(piece)
                else:
                    self._dispatch(self._h2.receive_data(piece))
        except (FloodError, FrameSizeError) as exc:
            self._abort(f"HTTP/2 protocol error from {self._address}: {exc}")
            return
        except Exception as exc:  # anything h2 raises on the peer's bytes
            error = describe_h2_error(exc)
            self._abort(f"HTTP/2 protocol error from {self._address}: {error}")
            return
        self._flush()

    def _dispatch(self, events: Sequence[h2.events.Event]) -> None:
        for event in events:
            if isinstance(event, h2.events.RemoteSettingsChanged):
                self.sent_settings.update(
                    {code: change.new_value for code, change in event.changed_settings.items()}
                )
                if not self.settings.done():
                    self.settings.set_result(dict(self.sent_settings))
            elif isinstance(event, h2.events.PingAckReceived):
                acked = self._pings.get(event.ping_data or b"")
                if acked is not None and not acked.done():
                    acked.set_result(time.perf_counter())
            elif isinstance(event, h2.events.ResponseReceived):
                head = self._heads.pop(event.stream_id or 0, None)
                if head is not None and not head.done():
                    head.set_result((list(event.headers or []), time.perf_counter()))
            elif isinstance(event, h2.events.DataReceived):  # the body is not read: let it flow
                self._h2.acknowledge_received_data(
                    event.flow_controlled_length or 0, event.stream_id or 0
                )
            elif isinstance(event, h2.events.StreamReset):
                head = self._heads.pop(event.stream_id or 0, None)
                code = _code_name(event.error_code or 0)
                _fail(head, f"the upstream reset the request stream ({code})")

    def _on_goaway(self, payload: bytes) -> None:
        last_stream_id, code, debug = parse_goaway(payload)
        self.goaway = GoAway(
            last_stream_id, _code_name(code), _printable(debug), punishes_pings(code, debug)
        )
        reason = f"the upstream sent {self.goaway}"
        for acked in self._pings.values():
            _fail(acked, f"{reason} instead of a PING ACK")
        for stream_id in [s for s in self._heads if s > last_stream_id]:
            _fail(self._heads.pop(stream_id), f"{reason}: the request was not processed")
        _fail(self.settings, f"{reason} before its HTTP/2 SETTINGS")

    def _abort(self, reason: str) -> None:
        self._end(reason)
        if self._transport is not None:
            self._transport.abort()

    def _end(self, reason: str) -> None:
        if self.ended is None:
            self.ended = reason
        waiters: list[asyncio.Future[Any]] = [
            self.settings,
            *self._pings.values(),
            *self._heads.values(),
        ]
        for waiter in waiters:
            _fail(waiter, self.ended)

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data and self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)


def _fail(waiter: asyncio.Future[Any] | None, reason: str) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_exception(ProbeFailed(reason))
        waiter.exception()  # no "never retrieved" warning when nobody waits any more


# ---------------------------------------------------------------------- the steps


async def probe(
    config: Config, check: CheckSettings, ssl_context: ssl.SSLContext | None
) -> Findings:
    """Connect, read the SETTINGS, PING, then GET ``check.path`` if given; stops at the
    first step that fails, with the reason in ``problem``."""
    upstream = config.upstream
    findings = Findings(f"{upstream.host}:{upstream.port}", upstream.tls)
    conn = ProbeConnection(findings.address, config.max_response_header_bytes)
    tcp: list[asyncio.Transport] = []  # the socket's transport, once connected
    try:
        await _connect(conn, config, ssl_context, findings, tcp)
        await _ping(conn, check.pings, config.ping_timeout, findings)
        if check.path is not None:
            await _request(conn, config, check, findings)
        _note_goaway_after(conn, findings)
    except ProbeFailed as exc:
        findings.problem = str(exc)
    finally:
        findings.goaway = conn.goaway
        await _close(conn, tcp)
    return findings


async def _connect(
    conn: ProbeConnection,
    config: Config,
    ssl_context: ssl.SSLContext | None,
    findings: Findings,
    tcp: list[asyncio.Transport],
) -> None:
    """TCP, TLS, the server's SETTINGS, within -connect-timeout, as h2ping dials."""
    loop = asyncio.get_running_loop()
    upstream = config.upstream
    started = time.perf_counter()
    try:
        async with asyncio.timeout(config.connect_timeout):
            if ssl_context is not None and upstream.tls:
                layer = TLSLayer(conn, ssl_context, upstream.host)
                transport, _ = await loop.create_connection(
                    lambda: layer, upstream.host, upstream.port
                )
                tcp.append(transport)
                findings.tcp_time = time.perf_counter() - started
                await layer.handshake
                findings.tls_time = time.perf_counter() - started - findings.tcp_time
                findings.tls = _tls_facts(layer.ssl_object, ssl_context)
                if findings.tls.alpn != "h2":
                    raise ProbeFailed(
                        f"{findings.address} did not negotiate HTTP/2 with ALPN"
                        f" (got {findings.tls.alpn or 'none'}): h2ping needs h2"
                    )
            else:
                transport, _ = await loop.create_connection(
                    lambda: conn, upstream.host, upstream.port
                )
                tcp.append(transport)
                findings.tcp_time = time.perf_counter() - started
            settings_from = time.perf_counter()
            conn.start()
            findings.settings = await conn.settings
            findings.settings_time = time.perf_counter() - settings_from
    except OSError as exc:  # TimeoutError and ssl.SSLError among them
        detail = describe_connect_error(exc, upstream, config.connect_timeout).detail
        raise ProbeFailed(detail) from None
    findings.http2 = True
    _judge_settings(findings)


def _tls_facts(tls: ssl.SSLObject, context: ssl.SSLContext) -> TLSFacts:
    cipher = tls.cipher()
    not_after = None
    if context.verify_mode != ssl.CERT_NONE:  # unverified, getpeercert() has nothing
        text = (tls.getpeercert() or {}).get("notAfter")
        if isinstance(text, str):
            not_after = float(ssl.cert_time_to_seconds(text))
    return TLSFacts(
        tls.version() or "?", cipher[0] if cipher else "?", tls.selected_alpn_protocol(), not_after
    )


def _judge_settings(findings: Findings) -> None:
    settings = findings.settings or {}
    streams = settings.get(SettingCodes.MAX_CONCURRENT_STREAMS)
    if streams == 0:
        raise ProbeFailed("the upstream allows no streams (SETTINGS_MAX_CONCURRENT_STREAMS 0)")
    if streams is not None and streams < FEW_STREAMS:
        findings.notes.append(
            f"the upstream allows {streams} concurrent streams per connection: "
            "h2ping opens more connections for more requests"
        )
    tls = findings.tls
    if tls is not None and tls.not_after is None:
        findings.notes.append("the certificate was not verified (-insecure-skip-verify)")
    elif tls is not None and tls.not_after is not None:
        days = (tls.not_after - time.time()) / 86400
        if days < EXPIRY_WARNING_DAYS:
            findings.notes.append(f"the certificate expires in {days:.0f} days")


async def _ping(conn: ProbeConnection, count: int, timeout: float, findings: Findings) -> None:
    for _ in range(count):
        findings.pings_sent += 1
        try:
            findings.ping_rtts.append(await conn.ping(timeout))
        except ProbeFailed:
            # PINGs back to back are what such a policy punishes; h2ping's, a minute
            # apart and backing off on this GOAWAY, are another matter.
            if not findings.ping_rtts or conn.goaway is None or not conn.goaway.punishes_pings:
                raise
            findings.notes.append(
                f"the upstream sent {conn.goaway} after {len(findings.ping_rtts)} PINGs in a "
                "row: it limits PINGs; h2ping doubles its PING interval on this GOAWAY "
                "(up to 300s)"
            )
            return
    if max(findings.ping_rtts) > timeout / 2:
        findings.notes.append(
            f"the slowest PING took over half of -ping-timeout ({timeout:g}s): "
            "a busier path may time out"
        )


async def _request(
    conn: ProbeConnection, config: Config, check: CheckSettings, findings: Findings
) -> None:
    """GET the path the way the proxy would forward a client's GET for it."""
    assert check.path is not None
    if conn.goaway is not None and conn.goaway.punishes_pings:
        findings.notes.append("the GET was not sent: the upstream had ended the connection")
        return
    client_headers = [(b"user-agent", f"h2ping-check/{__version__}".encode()), (b"accept", b"*/*")]
    headers = request_headers(b"GET", check.path.encode(), client_headers, config.upstream)
    path = next(value for name, value in headers if name == b":path").decode()
    if config.upstream.query:  # it leads the query sent; its values may be keys
        path = path.replace(f"?{config.upstream.query}", f"?{config.upstream.query_names}", 1)
    try:
        head, first_byte = await conn.get(headers, check.request_timeout)
    except ProbeFailed as exc:
        raise ProbeFailed(f"GET {path}: {exc}") from None
    fields = dict(head)
    server = fields.get(b"server")
    findings.response = Response(
        path,
        int(fields.get(b":status", b"0")),
        first_byte,
        _printable(server) if server is not None else None,
    )
    if findings.response.status >= 400:
        findings.notes.append(_status_note(findings.response))


def _status_note(response: Response) -> str:
    said = f"GET {response.path} answered {response.status}"
    if response.status in (401, 403):
        return f"{said}: h2ping sends no credentials, the client's Authorization passes through"
    if response.status == 404:
        return f"{said}: check -path, and the upstream's base path it is joined to"
    return f"{said}: the endpoint speaks HTTP/2, but this request failed"


def _note_goaway_after(conn: ProbeConnection, findings: Findings) -> None:
    if conn.goaway is not None and not conn.goaway.punishes_pings:  # noted already
        findings.notes.append(
            f"the upstream ended the connection with {conn.goaway} during the check: "
            "h2ping finishes what runs on such a connection and opens a new one"
        )


async def _close(conn: ProbeConnection, tcp: list[asyncio.Transport]) -> None:
    """Close, and give the loop the turn in which the socket is really closed."""
    conn.finish()
    for transport in tcp:
        if not transport.is_closing():  # a TLS handshake cut short by the timeout
            transport.abort()
    if conn.connected:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await asyncio.shield(conn.lost)
    else:  # TLS never got going: the socket closes in the loop's next turn
        await asyncio.sleep(0)
