"""A connection to the upstream through an HTTP forward proxy: ``CONNECT`` (RFC 9110
section 9.3.6), then the proxy relays bytes both ways and TLS (or h2c) runs inside.

The exchange with the proxy happens on the TCP connection before anything else:
:class:`TunnelOpener` is the TCP transport's first protocol. It sends ``CONNECT
host:port``, reads the proxy's answer head, and on a 2xx hands the transport, in
the same call, to the protocol that runs inside (the TLS layer, or the HTTP/2
connection for h2c) with whatever bytes came after the head: nothing the
upstream sent is lost, whenever it arrives. Any other answer, one that is no
HTTP/1.x, or the proxy's close before answering, fails the dial with an
:class:`~h2ping.errors.UpstreamError` that names the proxy and what it said:
the upstream was never reached, and is not blamed.

Once the tunnel stands, its end looks like the upstream's; what tells them apart
is TLS: an upstream that closes says so with close_notify, which a proxy cannot
forge. A tunnel that ends without it (a proxy's idle timer) is named as such
(:func:`tunnel_lost`).
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from dataclasses import dataclass

from .. import errors
from .._version import __version__
from ..egress import ProxyURL
from ..errors import UpstreamError
from ..sockets import caused_by_shortage

#: The most bytes of the proxy's answer head read: more is no proxy h2ping can use.
MAX_ANSWER_HEAD = 64 * 1024
_READ_SIZE = 16 * 1024

_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: ([^\r\n]*))?")
_FIELD = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(.*?)[ \t]*")
#: An authentication scheme at the start of a challenge (RFC 9110 section 11.6.1).
_SCHEME = re.compile(r"(?:^|,)\s*([!#$%&'*+.^_`|~0-9A-Za-z-]+)(?=\s+[^\s=,]|\s*(?:,|$))")


def target_of(host: str, port: int) -> str:
    """``host:port`` as CONNECT names it (IPv6 in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def connect_request(host: str, port: int, proxy: ProxyURL) -> bytes:
    """The CONNECT request head (RFC 9110 section 9.3.6), credentials and all."""
    target = target_of(host, port).encode("idna" if not host.isascii() else "ascii")
    lines = [b"CONNECT " + target + b" HTTP/1.1", b"Host: " + target]
    if (authorization := proxy.authorization) is not None:
        lines.append(b"Proxy-Authorization: " + authorization)
    lines.append(f"User-Agent: h2ping/{__version__}".encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"


@dataclass(frozen=True)
class ProxyAnswer:
    """The proxy's answer head to CONNECT."""

    status: int
    reason: str
    fields: tuple[tuple[str, str], ...] = ()  # (lowercased name, value), in order

    def values(self, name: str) -> list[str]:
        return [value for field_name, value in self.fields if field_name == name]

    @property
    def said(self) -> str:
        """``407 Proxy Authentication Required``, printable ASCII only."""
        reason = "".join(c if " " <= c <= "~" else "?" for c in self.reason[:80])
        return f"{self.status} {reason}".rstrip()

    @property
    def auth_schemes(self) -> list[str]:
        """The schemes a 407 asks for (``Proxy-Authenticate``), in order."""
        schemes: list[str] = []
        for value in self.values("proxy-authenticate"):
            schemes += (m.group(1) for m in _SCHEME.finditer(value))
        return list(dict.fromkeys(schemes))


class MalformedAnswer(ValueError):
    """The proxy's answer is no HTTP/1.x response head."""


def parse_answer(data: bytes | bytearray) -> tuple[ProxyAnswer, int] | None:
    """The answer head at the start of ``data`` and the bytes it takes (what follows
    is the tunnel's), or None while it is incomplete. Lines may end in a bare LF
    (RFC 9112 section 2.2). Raises :class:`MalformedAnswer`."""
    end = _head_end(data)
    if end is None:
        if len(data) >= 5 and not bytes(data[:5]) == b"HTTP/":
            raise MalformedAnswer(_not_http(data))
        return None
    lines = bytes(data[:end]).replace(b"\r\n", b"\n").split(b"\n")
    status_line = _STATUS_LINE.fullmatch(lines[0])
    if status_line is None:
        raise MalformedAnswer(_not_http(data))
    fields = []
    for line in lines[1:]:
        if not line:
            break
        found = _FIELD.fullmatch(line)
        if found is None:
            raise MalformedAnswer("answered CONNECT with a malformed header line")
        name, value = found.groups()
        fields.append((name.decode("ascii").lower(), value.decode("latin-1")))
    reason = (status_line.group(2) or b"").decode("latin-1")
    return ProxyAnswer(int(status_line.group(1)), reason, tuple(fields)), end


def _head_end(data: bytes | bytearray) -> int | None:
    """Where the head ends (after its empty line), or None."""
    ends = [i + n for i, n in ((data.find(b"\r\n\r\n"), 4), (data.find(b"\n\n"), 2)) if i >= 0]
    return min(ends) if ends else None


def _not_http(data: bytes | bytearray) -> str:
    first = bytes(data[:1])
    if first in (b"\x15", b"\x16"):
        return "answered CONNECT with TLS: is it an https:// proxy, or not a proxy at all?"
    if first in (b"\x00", b"\x05"):
        return "answered CONNECT in binary (a SOCKS proxy?): h2ping needs an HTTP proxy"
    return "did not answer CONNECT in HTTP/1.x: is it an HTTP proxy?"


@dataclass
class Hop:
    """The way through the proxy, as far as it went: for ``h2ping check``'s report
    (``time.perf_counter()`` values)."""

    proxy: ProxyURL
    started: float = 0.0
    tcp: float | None = None  # the TCP connection to the proxy made
    answered: float | None = None  # its answer head read
    status: int | None = None
    said: str = ""  # its status and reason
    leftover: int = 0  # bytes that came after a 2xx head (the upstream's already)


def refusal(answer: ProxyAnswer, proxy: ProxyURL, target: str) -> UpstreamError:
    """The proxy answered CONNECT with ``answer``, not a 2xx: say so, and what to do."""
    said = f"proxy {proxy.address} answered CONNECT {target} with {answer.said}"
    status = answer.status
    if status == 407:
        schemes = answer.auth_schemes
        wants = f"it asks for {', '.join(schemes)}" if schemes else "it names no scheme"
        if schemes and not any(s.lower() == "basic" for s in schemes):
            hint = "; h2ping sends Basic credentials only"
        elif proxy.has_credentials:
            hint = ": it did not take the credentials in -proxy"
        else:
            hint = ": give them in -proxy as http://user:password@host:port"
        kind, detail = errors.PROXY_CONFIGURATION_ERROR, f"{said} ({wants}){hint}"
    elif status >= 500:
        kind = errors.CONNECTION_TIMEOUT if status == 504 else errors.DESTINATION_UNAVAILABLE
        detail = f"{said}: the proxy could not open a connection to it"
    elif 400 <= status < 500:
        kind, detail = errors.HTTP_REQUEST_DENIED, f"{said}: the proxy refused the tunnel"
    else:  # 1xx after the interim ones, 3xx
        kind, detail = errors.HTTP_REQUEST_DENIED, f"{said}: no tunnel"
    return UpstreamError(kind, detail, next_hop=proxy.address, received_status=status)


class TunnelOpener(asyncio.BufferedProtocol):
    """The TCP transport's first protocol on the way through a proxy: CONNECT,
    the answer, then the transport goes to ``inside`` (see the module's text).
    ``opened`` resolves once it has, or fails with an :class:`UpstreamError`."""

    def __init__(
        self, request: bytes, inside: asyncio.BaseProtocol, proxy: ProxyURL, target: str, hop: Hop
    ) -> None:
        self._request = request
        self._inside = inside
        self._proxy = proxy
        self._target = target
        self._hop = hop
        self._head = bytearray()
        self._buffer = bytearray(_READ_SIZE)
        self._transport: asyncio.Transport | None = None
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport
        self._hop.tcp = time.perf_counter()
        transport.write(self._request)  # type: ignore[attr-defined]

    def get_buffer(self, sizehint: int) -> bytearray:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self.opened.done():
            return  # failed: the dial closes the connection
        self._head += memoryview(self._buffer)[:nbytes]
        try:
            while (parsed := parse_answer(self._head)) is not None:
                answer, used = parsed
                if not 100 <= answer.status < 200:
                    self._answered(answer, used)
                    return
                del self._head[:used]  # an interim answer: the real one follows
        except MalformedAnswer as exc:
            self._fail_as(errors.HTTP_PROTOCOL_ERROR, str(exc))
            return
        if len(self._head) > MAX_ANSWER_HEAD:
            self._fail_as(
                errors.HTTP_PROTOCOL_ERROR,
                f"answered CONNECT with a head over {MAX_ANSWER_HEAD} bytes",
            )

    def _answered(self, answer: ProxyAnswer, used: int) -> None:
        hop = self._hop
        hop.answered = time.perf_counter()
        hop.status, hop.said = answer.status, answer.said
        if not 200 <= answer.status < 300:
            self._fail(refusal(answer, self._proxy, self._target))
            return
        # Whatever came after the head is the upstream's: the protocol inside gets
        # the transport and those bytes now, before the loop reads again. A 2xx
        # answer to CONNECT has no body (RFC 9110 section 9.3.6).
        leftover = bytes(self._head[used:])
        self._head.clear()
        hop.leftover = len(leftover)
        assert self._transport is not None  # answered after connection_made
        hand_over(self._transport, self._inside, leftover)
        self.opened.set_result(None)

    def _fail_as(self, kind: str, what: str) -> None:
        """Fail with an error of ``kind``: ``what`` the proxy did, after its name."""
        address = self._proxy.address
        self._fail(UpstreamError(kind, f"proxy {address} {what}", next_hop=address))

    def _fail(self, error: UpstreamError) -> None:
        if not self.opened.done():
            self.opened.set_exception(error)
            self.opened.exception()  # the dial may have stopped waiting (timeout)
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()  # its answer's body is not wanted

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.opened.done():
            return
        how = "in the middle of its answer" if self._head else "without answering"
        why = f" ({exc})" if exc is not None else ""
        self._fail_as(
            errors.CONNECTION_TERMINATED,
            f"closed the connection {how} to CONNECT {self._target}{why}",
        )


def hand_over(transport: asyncio.Transport, inside: asyncio.BaseProtocol, leftover: bytes) -> None:
    """Make ``inside`` the transport's protocol, with ``leftover`` as its first bytes."""
    transport.set_protocol(inside)
    inside.connection_made(transport)
    if not leftover:
        return
    if isinstance(inside, asyncio.BufferedProtocol):
        view = memoryview(leftover)
        while view:
            buffer = memoryview(inside.get_buffer(len(view)))
            count = min(len(buffer), len(view))
            buffer[:count] = view[:count]
            inside.buffer_updated(count)
            view = view[count:]
    else:
        assert isinstance(inside, asyncio.Protocol)
        inside.data_received(leftover)


async def open_tunnel(
    inside: asyncio.BaseProtocol, host: str, port: int, proxy: ProxyURL, hop: Hop
) -> asyncio.Transport:
    """A TCP connection to ``proxy``, a tunnel through it to ``host:port``, and the
    transport handed to ``inside``; raises ``OSError`` (the proxy not reached) or
    :class:`UpstreamError` (the proxy's answer). The socket is closed on failure."""
    loop = asyncio.get_running_loop()
    target = target_of(host, port)
    hop.started = time.perf_counter()
    opener = TunnelOpener(connect_request(host, port, proxy), inside, proxy, target, hop)
    tcp, _ = await loop.create_connection(lambda: opener, proxy.host, proxy.port)
    try:
        await opener.opened
    except BaseException:
        tcp.abort()
        raise
    return tcp


def describe_proxy_error(exc: OSError, hop: Hop, target: str, timeout: float) -> UpstreamError:
    """Reaching the proxy, or its answer, failed with ``exc`` (a timeout among them):
    say so, naming the proxy, never the upstream."""
    proxy = hop.proxy
    where = f"proxy {proxy.address}"
    if isinstance(exc, TimeoutError):
        if hop.tcp is None:
            kind, detail = (
                errors.CONNECTION_TIMEOUT,
                f"{where} did not accept a connection in {timeout:g}s",
            )
        else:
            kind, detail = (
                errors.CONNECTION_TIMEOUT,
                f"{where} did not answer CONNECT {target} in {timeout:g}s",
            )
    elif isinstance(exc, ConnectionRefusedError):
        kind, detail = (
            errors.CONNECTION_REFUSED,
            f"{where} refused the connection: is the proxy running? (-proxy)",
        )
    elif not isinstance(exc, ConnectionError) and caused_by_shortage(exc):
        kind, detail = (
            errors.CONNECTION_LIMIT_REACHED,
            f"no file descriptor free to connect to {where}",
        )
    elif isinstance(exc, socket.gaierror):
        kind, detail = errors.DNS_ERROR, f"{where}: {proxy.host}: {exc.strerror}"
    else:
        kind, detail = errors.DESTINATION_UNAVAILABLE, f"{where}: {exc.strerror or exc}"
    return UpstreamError(kind, detail, next_hop=proxy.address)


class TunnelClosed(ConnectionError):
    """The tunnel through ``proxy`` (``host:port``) ended without the upstream's TLS
    close_notify (for h2c: at all)."""

    def __init__(self, proxy: str, message: str) -> None:
        super().__init__(message)
        self.proxy = proxy


def proxy_of(exc: BaseException | None) -> str | None:
    """The proxy whose tunnel ``exc`` says ended, for ``Proxy-Status``'s next-hop."""
    return exc.proxy if isinstance(exc, TunnelClosed) else None


def tunnel_lost(proxy: str, exc: Exception | None, during_handshake: bool = False) -> TunnelClosed:
    """What the protocol inside is told when the tunnel through ``proxy`` ends
    without the upstream's goodbye in TLS (close_notify)."""
    through = f"the tunnel through proxy {proxy}"
    if during_handshake:
        how = f"broke ({exc})" if exc is not None else "closed"
        return TunnelClosed(proxy, f"{through} {how} during the TLS handshake")
    if exc is not None:
        return TunnelClosed(proxy, f"{through} broke ({exc})")
    return TunnelClosed(proxy, f"{through} closed (no TLS close_notify from the upstream)")


class PlainTunnel(asyncio.BufferedProtocol):
    """Between the TCP transport and an h2c connection through a proxy: hands every
    call on as it is, except the end, which it names (:func:`tunnel_lost`)."""

    def __init__(self, inside: asyncio.BufferedProtocol, proxy: str) -> None:
        self._inside = inside
        self._proxy = proxy
        self.get_buffer = inside.get_buffer  # type: ignore[method-assign,assignment]  # no hop per read
        self.buffer_updated = inside.buffer_updated  # type: ignore[method-assign]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inside.connection_made(transport)

    def get_buffer(self, sizehint: int) -> memoryview:  # replaced in __init__
        return memoryview(self._inside.get_buffer(sizehint))

    def buffer_updated(self, nbytes: int) -> None:  # replaced in __init__
        self._inside.buffer_updated(nbytes)

    def eof_received(self) -> bool | None:
        return self._inside.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        how = f"broke ({exc})" if exc is not None else "closed"
        message = f"the tunnel through proxy {self._proxy} {how}"
        self._inside.connection_lost(TunnelClosed(self._proxy, message))

    def pause_writing(self) -> None:
        self._inside.pause_writing()

    def resume_writing(self) -> None:
        self._inside.resume_writing()
