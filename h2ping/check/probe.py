"""What ``h2ping check`` measures: one HTTP/2 connection to the upstream
(:mod:`h2ping.check.prober`), opened as h2ping opens its own (TCP, TLS with
ALPN or h2c, the server's first SETTINGS, all within ``-connect-timeout``), then
timed PINGs and, optionally, one GET; and what each step tells about the endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from dataclasses import dataclass, field

from h2.settings import SettingCodes

from .._version import __version__
from ..config import CheckSettings, Config
from ..errors import UpstreamError
from ..forward.headers import request_headers
from ..http2.dial import DialSteps, reach
from ..http2.tlslayer import TLSLayer
from .prober import GoAway, ProbeFailed, Prober, printable

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
#: How long the check waits for a TLS handshake when an h2c connection was hung up
#: on without a word (is it a TLS port?).
TLS_HINT_TIMEOUT = 2.0
#: A certificate that ends sooner than this is worth a note.
EXPIRY_WARNING_DAYS = 30


@dataclass
class TLSFacts:
    version: str
    cipher: str
    alpn: str | None
    not_after: float | None  # the certificate's notAfter (epoch seconds); None: not verified
    #: A second connection resumed the first one's session (None: not tried).
    resumes: bool | None = None


@dataclass
class Response:
    path: str  # the :path sent, the values of the upstream's own query hidden
    status: int
    first_byte: float  # seconds from the request's HEADERS to the response's
    server: str | None


@dataclass
class HopFacts:
    """The way through the forward proxy: where it is, and how it answered CONNECT."""

    proxy: str  # host:port
    tcp_time: float | None = None  # to the proxy's TCP connection
    status: int | None = None  # its answer to CONNECT
    said: str = ""  # that answer's status and reason
    connect_time: float | None = None  # from the TCP connection to the answer


@dataclass
class Findings:
    """What the check learnt, step by step; ``problem`` is why h2ping cannot use it."""

    address: str  # host:port
    tls_used: bool
    hop: HopFacts | None = None  # through a forward proxy
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


# ---------------------------------------------------------------------- the steps


async def probe(
    config: Config, check: CheckSettings, ssl_context: ssl.SSLContext | None
) -> Findings:
    """Connect, read the SETTINGS, PING, then GET ``check.path`` if given; stops at the
    first step that fails, with the reason in ``problem``."""
    upstream = config.upstream
    findings = Findings(f"{upstream.host}:{upstream.port}", upstream.tls)
    prober = Prober(config, findings.address)
    try:
        tls = await _connect(prober, config, ssl_context, findings)
        await _ping(prober, check.pings, config.ping_timeout, findings)
        if check.path is not None:
            await _request(prober, config, check, findings)
        _note_goaway_after(prober, findings)
        if tls is not None and ssl_context is not None and findings.tls is not None:
            # After the PINGs: a TLS 1.3 ticket comes after the handshake.
            findings.tls.resumes = await _resumes(config, ssl_context, tls.session)
    except ProbeFailed as exc:
        findings.problem = str(exc)
    finally:
        findings.goaway = prober.goaway
        await _close(prober)
    return findings


async def _connect(
    prober: Prober, config: Config, ssl_context: ssl.SSLContext | None, findings: Findings
) -> ssl.SSLObject | None:
    """TCP, TLS, the server's SETTINGS, within -connect-timeout, as h2ping dials.
    Returns the TLS connection's state (None for h2c)."""
    upstream = config.upstream
    try:
        await prober.connect(ssl_context)
    except ProbeFailed as exc:
        _note_steps(prober.steps, ssl_context, findings)
        hung_up = not upstream.tls and prober.heard_nothing and prober.lost_by_peer
        if hung_up and await _speaks_tls(config):
            raise ProbeFailed(f"{exc}: it speaks TLS, use an https:// upstream") from None
        raise
    _note_steps(prober.steps, ssl_context, findings)
    findings.settings = prober.settings
    findings.http2 = True
    _judge_settings(findings)
    return prober.steps.ssl_object


def _note_steps(steps: DialSteps, ssl_context: ssl.SSLContext | None, findings: Findings) -> None:
    """The times of the dial's steps, the forward proxy's hop, and what the TLS
    handshake agreed (also when the dial failed after it: no HTTP/2, which the
    dial's error says)."""
    hop = steps.hop
    if hop is not None:
        findings.hop = facts = HopFacts(hop.proxy.address, status=hop.status, said=hop.said)
        if hop.tcp is not None:
            facts.tcp_time = hop.tcp - hop.started
            if hop.answered is not None:
                facts.connect_time = hop.answered - hop.tcp
    if steps.tcp is None:
        return
    if hop is None:  # through a proxy, the TCP connection to the upstream is the proxy's
        findings.tcp_time = steps.tcp - steps.started
    if steps.tls is not None:
        findings.tls_time = steps.tls - steps.tcp
    if steps.settings is not None:
        findings.settings_time = steps.settings - (steps.tls or steps.tcp)
    if steps.ssl_object is None or ssl_context is None:
        return
    findings.tls = _tls_facts(steps.ssl_object, ssl_context)


class _Unused(asyncio.BufferedProtocol):
    """The application side of a connection made only for its TLS handshake."""

    def get_buffer(self, sizehint: int) -> bytearray:
        return bytearray(max(sizehint, 1))

    def buffer_updated(self, nbytes: int) -> None:
        pass


async def _resumes(config: Config, context: ssl.SSLContext, session: ssl.SSLSession | None) -> bool:
    """Whether a new connection resumes ``session`` (the first connection's, ticket
    and all): h2ping's next connections then take one round trip less."""
    if session is None or not session.has_ticket:
        return False
    layer = await _handshake(config, context, config.connect_timeout, session)
    return layer is not None and layer.ssl_object.session_reused


async def _handshake(
    config: Config, context: ssl.SSLContext, timeout: float, session: ssl.SSLSession | None = None
) -> TLSLayer | None:
    """One TLS handshake with the upstream, the way h2ping connects (through the
    forward proxy if there is one), then the connection closed; None if it failed."""
    upstream = config.upstream
    layer = TLSLayer(_Unused(), context, upstream.host, session)
    transport: asyncio.Transport | None = None
    try:
        async with asyncio.timeout(timeout):
            transport = await reach(
                layer, upstream.host, upstream.port, config.upstream_proxy, DialSteps()
            )
            await layer.handshake
    except (OSError, TimeoutError, UpstreamError):
        return None
    finally:
        if transport is not None:
            transport.abort()
    return layer


async def _speaks_tls(config: Config) -> bool:
    """Whether the upstream's port completes a TLS handshake (certificate unchecked:
    only the protocol is asked): a server that hung up on h2c without a word may."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return await _handshake(config, context, TLS_HINT_TIMEOUT) is not None


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


async def _ping(prober: Prober, count: int, timeout: float, findings: Findings) -> None:
    for _ in range(count):
        findings.pings_sent += 1
        try:
            findings.ping_rtts.append(await prober.ping(timeout))
        except ProbeFailed:
            # PINGs back to back are what such a policy punishes; h2ping's, a minute
            # apart and backing off on this GOAWAY, are another matter.
            if not findings.ping_rtts or prober.goaway is None or not prober.goaway.punishes_pings:
                raise
            findings.notes.append(
                f"the upstream sent {prober.goaway} after {len(findings.ping_rtts)} PINGs in a "
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
    prober: Prober, config: Config, check: CheckSettings, findings: Findings
) -> None:
    """GET the path the way the proxy would forward a client's GET for it."""
    assert check.path is not None
    if prober.goaway is not None and prober.goaway.punishes_pings:
        findings.notes.append("the GET was not sent: the upstream had ended the connection")
        return
    client_headers = [(b"user-agent", f"h2ping-check/{__version__}".encode()), (b"accept", b"*/*")]
    headers = request_headers(b"GET", check.path.encode(), client_headers, config.upstream)
    path = next(value for name, value in headers if name == b":path").decode()
    if config.upstream.query:  # it leads the query sent; its values may be keys
        path = path.replace(f"?{config.upstream.query}", f"?{config.upstream.query_names}", 1)
    try:
        head, first_byte = await prober.get(headers, check.request_timeout)
    except ProbeFailed as exc:
        raise ProbeFailed(f"GET {path}: {exc}") from None
    fields = dict(head)
    server = fields.get(b"server")
    findings.response = Response(
        path,
        int(fields.get(b":status", b"0")),
        first_byte,
        printable(server) if server is not None else None,
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


def _note_goaway_after(prober: Prober, findings: Findings) -> None:
    if prober.goaway is not None and not prober.goaway.punishes_pings:  # noted already
        findings.notes.append(
            f"the upstream ended the connection with {prober.goaway} during the check: "
            "h2ping finishes what runs on such a connection and opens a new one"
        )


async def _close(prober: Prober) -> None:
    """Close, and give the loop the turn in which the socket is really closed."""
    prober.finish()
    if prober.connected:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await asyncio.shield(prober.lost)
    else:  # TLS never got going: the socket closes in the loop's next turn
        await asyncio.sleep(0)
