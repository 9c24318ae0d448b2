"""Dialling the upstream: TCP, TLS with ALPN ``h2``, the peer's first SETTINGS.

Every way this can fail becomes an :class:`~h2ping.errors.UpstreamError` whose
detail says in words what went wrong, and what to check: a person reads it in
a log line or in ``Proxy-Status``, and OpenSSL's own reason codes
(``WRONG_VERSION_NUMBER``) say little to most.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import errors
from ..config import Config, Upstream
from ..egress import ProxyURL
from ..errors import UpstreamError
from ..sockets import caused_by_shortage, nofile_limits, set_tcp_keepalive
from ..stats import Stats
from .lifetime import ConnState
from .observer import reported
from .pingbackoff import PingBackoff
from .tlslayer import NoApplicationProtocol, SessionCache, TLSLayer
from .tunnel import Hop, PlainTunnel, TunnelClosed, describe_proxy_error, open_tunnel, target_of
from .upstream import UpstreamConnection
from .windows import WindowBudget

# OpenSSL's X509_V_ERR_* codes, as in SSLCertVerificationError.verify_code.
_UNKNOWN_CA = {2, 19, 20, 21}  # unable to get (local) issuer, self-signed in chain, no leaf sig
_SELF_SIGNED = 18
_NOT_YET_VALID, _EXPIRED, _REVOKED = 9, 10, 23
_NAME_MISMATCH = {62, 64}  # hostname, IP address

#: Reasons that mean the peer's bytes were no TLS at all.
_NOT_TLS = frozenset(
    {"WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE"}
)
#: Alerts with which the peer turned the handshake down, and what they mean.
_REFUSED: dict[str, str] = {
    "SSLV3_ALERT_HANDSHAKE_FAILURE": "refused the TLS handshake: no version or cipher in common",
    "TLSV1_ALERT_PROTOCOL_VERSION": "refused the TLS handshake: no TLS version in common",
    "UNSUPPORTED_PROTOCOL": "refused the TLS handshake: no TLS version in common",
    "TLSV1_ALERT_NO_APPLICATION_PROTOCOL": "does not offer HTTP/2 over TLS (ALPN h2)",
    "TLSV1_UNRECOGNIZED_NAME": "does not know the host name h2ping asked for (SNI)",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "wants a client certificate, which h2ping does not send",
}


def describe_tls_error(exc: ssl.SSLError, host: str, target: str) -> UpstreamError:
    """The TLS handshake with ``target`` (``host:port``) failed: say why, in words."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return UpstreamError(errors.TLS_CERTIFICATE_ERROR, _certificate_problem(exc, host, target))
    reason = getattr(exc, "reason", None) or type(exc).__name__  # None when made in Python
    if reason in _NOT_TLS:
        detail = f"{target} did not answer TLS: is it plain HTTP? ({reason})"
    elif reason in _REFUSED:
        detail = f"{target} {_REFUSED[reason]} ({reason})"
    elif isinstance(exc, ssl.SSLEOFError) or reason == "UNEXPECTED_EOF_WHILE_READING":
        detail = f"{target} closed the connection during the TLS handshake ({reason})"
    else:
        detail = f"TLS handshake with {target} failed ({reason})"
    return UpstreamError(errors.TLS_PROTOCOL_ERROR, detail)


def _certificate_problem(exc: ssl.SSLCertVerificationError, host: str, target: str) -> str:
    code, said = exc.verify_code, exc.verify_message or str(exc)
    subject = f"the certificate of {target}"
    if code in _NAME_MISMATCH:
        return f"{subject} is not for {host} (hostname mismatch): check -upstream"
    if code in _UNKNOWN_CA:
        return f"{subject} is signed by an unknown CA: pass that CA with -ca-file ({said})"
    if code == _SELF_SIGNED:
        return f"{subject} is self-signed: pass it with -ca-file to trust it ({said})"
    if code == _EXPIRED:
        return f"{subject} has expired"
    if code == _NOT_YET_VALID:
        return f"{subject} is not valid yet: check this machine's clock"
    if code == _REVOKED:
        return f"{subject} has been revoked"
    return f"{subject} was not accepted ({said})"


class CAFileError(ssl.SSLError):
    """The CA file holds no certificate that can be loaded."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{problem} in {path}")
        self.message = f"{problem} in {path}"
        self.reason = f"{problem} in the file"  # follows "ca-file PATH:" in the log line

    def __str__(self) -> str:
        return self.message


def load_ca_file(context: ssl.SSLContext, path: str) -> None:
    """Trust the CA certificates in ``path`` (PEM), or raise :class:`CAFileError`."""
    try:
        context.load_verify_locations(cafile=path)
    except ssl.SSLError as exc:
        if getattr(exc, "reason", None) == "NO_CERTIFICATE_OR_CRL_FOUND":
            raise CAFileError(path, "no PEM certificate") from None
        raise CAFileError(path, "a damaged PEM certificate") from None


def make_ssl_context(config: Config) -> ssl.SSLContext:
    """The upstream TLS settings: ``-ca-file`` trusted (a :class:`CAFileError` if it
    cannot be), ``-insecure-skip-verify`` honoured, ALPN ``h2`` alone."""
    context = ssl.create_default_context()
    if config.ca_file:
        load_ca_file(context, config.ca_file)
    if config.insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])  # HTTP/2 only: there is no PING in HTTP/1.1
    return context


@dataclass
class DialSteps:
    """How far a dial got, and when (``time.perf_counter()``), for a report of it
    (``h2ping check``)."""

    started: float = 0.0
    tcp: float | None = None  # the TCP connection made
    tls: float | None = None  # the TLS handshake done (the protocol then has the transport)
    settings: float | None = None  # the peer's first SETTINGS received
    ssl_object: ssl.SSLObject | None = None  # the TLS connection, once its handshake is done
    hop: Hop | None = None  # the way through the forward proxy, if there is one


async def connect(
    config: Config,
    ssl_context: ssl.SSLContext | None,
    conn_id: int,
    on_change: Callable[[UpstreamConnection, ConnState], None],
    stats: Stats,
    on_age: Callable[[UpstreamConnection], None] | None = None,
    ping_backoff: PingBackoff | None = None,
    tls_sessions: SessionCache | None = None,
    on_preface: Callable[[UpstreamConnection], None] | None = None,
    window_budget: WindowBudget | None = None,
) -> UpstreamConnection:
    """Open a connection and wait for the peer's SETTINGS (so we know its stream limit);
    with ``tls_sessions``, resume the latest TLS session and remember this one;
    its streams' windows grow out of ``window_budget``.
    ``on_preface`` hears of the connection as soon as our preface is out, when it
    takes its first stream (:data:`~.streams.PROVISIONAL_STREAMS`) a round trip
    before the SETTINGS come."""
    protocol = UpstreamConnection(
        config,
        conn_id,
        on_change,
        on_age,
        ping_backoff,
        window_budget,
        observer=reported(stats, conn_id),  # its life counted and logged
    )
    try:
        await dial(protocol, config, ssl_context, stats, tls_sessions, on_preface)
    except BaseException as exc:
        # Ended here whatever ended it (nothing if it ended already), so that it
        # undoes its reference cycles as every connection that ends does. A dial
        # cancelled (the proxy stopping) is cut, not told GOAWAY: the loop may have
        # closed its transport under it already (uvloop's create_connection does).
        if isinstance(exc, UpstreamError):
            protocol.abandon(exc)
        else:
            cancelled = UpstreamError(errors.CONNECTION_TERMINATED, "setup cancelled")
            protocol.cut(cancelled.detail, cancelled)
        raise
    return protocol


async def dial(
    protocol: UpstreamConnection,
    config: Config,
    ssl_context: ssl.SSLContext | None,
    stats: Stats,
    tls_sessions: SessionCache | None = None,
    on_preface: Callable[[UpstreamConnection], None] | None = None,
    steps: DialSteps | None = None,
) -> None:
    """Dial ``protocol``'s connection (:func:`connect`'s work once the connection
    is made), telling ``steps`` how far it got; raises an
    :class:`~h2ping.errors.UpstreamError` that says why it failed."""
    upstream = config.upstream
    timeout = config.connect_timeout
    steps = DialSteps() if steps is None else steps
    steps.started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            await _open(protocol, config, ssl_context, tls_sessions, stats, on_preface, steps)
    except OSError as exc:  # TimeoutError and ssl.SSLError among them
        hop = steps.hop
        if hop is not None and hop.status is None:  # the proxy was not reached, or said nothing
            error = describe_proxy_error(exc, hop, target_of(upstream.host, upstream.port), timeout)
        else:
            error = describe_connect_error(exc, upstream, timeout, config.upstream_proxy)
        if isinstance(exc, TimeoutError):
            protocol.abandon(error)
        if error.error == errors.CONNECTION_LIMIT_REACHED:
            stats.descriptors_short()
        raise error from None


#: What a server without HTTP/2 is asked it speaks instead (see _spoken_instead).
_OTHER_PROTOCOLS = ["http/1.1", "http/1.0"]
_ASK_SECONDS = 2.0  # for that handshake; the dial already took one with this server


async def _spoken_instead(upstream: Upstream) -> str | None:
    """What a server that chose no protocol for h2 alone speaks instead, if it says.

    h2ping offers h2 alone, as the Go binary does: a server that prefers http/1.1
    when offered both would otherwise choose it. A server without HTTP/2 then
    chooses nothing, which tells a person little; one more handshake, made only
    after this dial failed and only for the protocol's name (no certificate check,
    nothing sent), asks it what it speaks, so the error names it.
    """
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(_OTHER_PROTOCOLS)
    try:
        async with asyncio.timeout(_ASK_SECONDS):
            _, writer = await asyncio.open_connection(
                upstream.host, upstream.port, ssl=context, server_hostname=upstream.host
            )
    except OSError:  # TimeoutError too: the dial's error then names no protocol
        return None
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        return ssl_object.selected_alpn_protocol() if ssl_object is not None else None
    finally:
        writer.transport.abort()


def describe_connect_error(
    exc: OSError, upstream: Upstream, timeout: float, proxy: ProxyURL | None = None
) -> UpstreamError:
    """Opening a connection to ``upstream`` (TCP, TLS, the HTTP/2 setup within
    ``timeout``) failed with ``exc``, ``proxy``'s tunnel standing if there is one:
    say why, in words."""
    target = f"{upstream.host}:{upstream.port}"
    if isinstance(exc, TunnelClosed) and proxy is not None:
        return UpstreamError(
            errors.CONNECTION_TERMINATED, f"{exc} with {target}", next_hop=proxy.address
        )
    if isinstance(exc, TimeoutError):
        through = f" (through proxy {proxy.address})" if proxy is not None else ""
        return UpstreamError(
            errors.CONNECTION_TIMEOUT,
            f"{target}{through} did not complete HTTP/2 setup in {timeout:g}s",
        )
    if isinstance(exc, ssl.SSLError):
        error = describe_tls_error(exc, upstream.host, target)
        if proxy is not None and error.error == errors.TLS_CERTIFICATE_ERROR:
            error.detail += (
                f" (through proxy {proxy.address}: a proxy that inspects TLS shows a "
                "certificate of its own, whose CA -ca-file must hold)"
            )
        return error
    if not isinstance(exc, ConnectionError) and caused_by_shortage(exc):
        soft, _ = nofile_limits()
        limit = f"limit {soft}" if soft >= 0 else "no limit set"
        return UpstreamError(
            errors.CONNECTION_LIMIT_REACHED,
            f"no file descriptor free to connect to {target} ({limit}, all in use by "
            "client and upstream connections): raise the limit (ulimit -n) or lower the "
            "concurrency",
        )
    if isinstance(exc, socket.gaierror):
        return UpstreamError(errors.DNS_ERROR, f"{upstream.host}: {exc.strerror}")
    if isinstance(exc, ConnectionRefusedError):
        return UpstreamError(errors.CONNECTION_REFUSED, f"{target} refused the connection")
    return UpstreamError(errors.DESTINATION_UNAVAILABLE, f"{target}: {exc.strerror or exc}")


async def _open(
    protocol: UpstreamConnection,
    config: Config,
    ssl_context: ssl.SSLContext | None,
    tls_sessions: SessionCache | None,
    stats: Stats,
    on_preface: Callable[[UpstreamConnection], None] | None,
    steps: DialSteps,
) -> None:
    """TCP, then TLS (h2ping's own layer, see :mod:`h2ping.http2.tlslayer`) with ALPN
    ``h2``, then the peer's SETTINGS; the socket is closed again if any step fails."""
    upstream = config.upstream
    proxy = config.upstream_proxy
    tcp: asyncio.Transport | None = None
    try:
        if ssl_context is not None and upstream.tls:
            session = tls_sessions.session() if tls_sessions is not None else None
            tunnel = proxy.address if proxy is not None else None
            # No connection_made, so no preface, PING or request, unless ALPN says h2.
            layer = TLSLayer(protocol, ssl_context, upstream.host, session, tunnel, alpn="h2")
            tcp = await reach(layer, upstream.host, upstream.port, proxy, steps)
            protocol.observer.dialled()
            try:
                await layer.handshake
            except NoApplicationProtocol as exc:
                steps.tls, steps.ssl_object = time.perf_counter(), layer.ssl_object
                # Asked directly, never past a forward proxy (nor around it).
                asked = await _spoken_instead(upstream) if proxy is None else None
                spoken = exc.selected or asked
                raise UpstreamError(
                    errors.TLS_PROTOCOL_ERROR,
                    f"{upstream.host}:{upstream.port} did not negotiate HTTP/2 with ALPN"
                    f" (got {spoken or 'none'}): h2ping needs h2",
                ) from None
            steps.tls = time.perf_counter()
            steps.ssl_object = layer.ssl_object
            protocol.observer.tls_done(layer.ssl_object)  # a resumed session is counted there
            if tls_sessions is not None:
                tls_sessions.remember(layer.ssl_object)
        else:
            inside = protocol if proxy is None else PlainTunnel(protocol, proxy.address)
            tcp = await reach(inside, upstream.host, upstream.port, proxy, steps)
            protocol.observer.dialled()
        set_tcp_keepalive(tcp.get_extra_info("socket"))
        if on_preface is not None:
            on_preface(protocol)
        await protocol.wait_ready()
        steps.settings = time.perf_counter()
    except BaseException:
        if tcp is not None:
            tcp.abort()
        raise


async def reach(
    inside: asyncio.BaseProtocol, host: str, port: int, proxy: ProxyURL | None, steps: DialSteps
) -> asyncio.Transport:
    """A TCP connection to ``host:port`` for ``inside``, directly or through a tunnel
    of ``proxy``'s; ``steps`` hears of the way (``tcp``: the upstream reached)."""
    if proxy is None:
        tcp, _ = await asyncio.get_running_loop().create_connection(lambda: inside, host, port)
    else:
        steps.hop = Hop(proxy)
        tcp = await open_tunnel(inside, host, port, proxy, steps.hop)
    steps.tcp = time.perf_counter()
    return tcp
