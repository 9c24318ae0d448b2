"""The way through a forward proxy (h2ping/http2/tunnel.py), driven with a fake
transport: the CONNECT request, the proxy's answer read byte by byte, the
transport handed to the protocol inside with every byte after the answer, and
each refusal in words naming the proxy."""

from __future__ import annotations

import asyncio
import base64
import re

import pytest

from h2ping import errors
from h2ping.egress import ProxyURL
from h2ping.errors import UpstreamError
from h2ping.http2.tunnel import (
    MAX_ANSWER_HEAD,
    Hop,
    MalformedAnswer,
    PlainTunnel,
    TunnelClosed,
    TunnelOpener,
    connect_request,
    parse_answer,
    proxy_of,
    refusal,
)

from ..fakes import FakeTransport

PROXY = ProxyURL("proxy.corp", 3128)
TARGET = "api.example.com:443"


class SwitchingTransport(FakeTransport):
    """A fake transport that also records the protocol it is handed to."""

    def __init__(self) -> None:
        super().__init__()
        self.protocol: asyncio.BaseProtocol | None = None

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.protocol is not None
        return self.protocol


class Inside(asyncio.BufferedProtocol):
    """The protocol inside the tunnel: a small buffer, so that leftovers take
    several calls; records what it is told."""

    def __init__(self, buffer_size: int = 3) -> None:
        self.buffer = bytearray(buffer_size)
        self.received = bytearray()
        self.transport: asyncio.BaseTransport | None = None
        self.lost: list[Exception | None] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> bytearray:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.received += self.buffer[:nbytes]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.append(exc)


def feed(opener: TunnelOpener, data: bytes) -> None:
    """The transport's reads, as many as the opener's buffer needs."""
    view = memoryview(data)
    while view:
        buffer = memoryview(opener.get_buffer(len(view)))
        count = min(len(buffer), len(view))
        buffer[:count] = view[:count]
        opener.buffer_updated(count)
        view = view[count:]


def opened(proxy: ProxyURL = PROXY) -> tuple[TunnelOpener, SwitchingTransport, Inside, Hop]:
    inside, transport, hop = Inside(), SwitchingTransport(), Hop(proxy)
    opener = TunnelOpener(
        connect_request("api.example.com", 443, proxy), inside, proxy, TARGET, hop
    )
    opener.connection_made(transport)
    return opener, transport, inside, hop


# ------------------------------------------------------------------ the request


def test_the_connect_request_names_the_target_and_carries_the_credentials() -> None:
    plain = connect_request("api.example.com", 443, PROXY)
    assert plain.startswith(
        b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n"
    )
    assert plain.endswith(b"\r\n\r\n") and b"Proxy-Authorization" not in plain
    v6 = connect_request("::1", 8443, PROXY)
    assert v6.startswith(b"CONNECT [::1]:8443 HTTP/1.1\r\nHost: [::1]:8443\r\n")
    secret = ProxyURL("proxy.corp", 3128, "alice", "pa:ss")
    line = b"Proxy-Authorization: Basic " + base64.b64encode(b"alice:pa:ss") + b"\r\n"
    assert line in connect_request("api.example.com", 443, secret)


# -------------------------------------------------------------- the answer head


def test_parse_answer_reads_a_head_and_leaves_what_follows() -> None:
    data = b"HTTP/1.1 200 Connection established\r\nVia: 1.1 squid\r\n\r\n\x00\x00\x12"
    answer, used = parse_answer(data) or pytest.fail("incomplete")
    assert (answer.status, answer.reason, answer.values("via")) == (
        200,
        "Connection established",
        ["1.1 squid"],
    )
    assert data[used:] == b"\x00\x00\x12"
    bare, used = parse_answer(b"HTTP/1.0 200\nX: y\n\nrest") or pytest.fail("incomplete")
    assert (bare.status, bare.reason, bare.said, used) == (200, "", "200", 19)
    assert parse_answer(b"HTTP/1.1 200 OK\r\nVia: 1.1") is None
    assert parse_answer(b"HTT") is None


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"SSH-2.0-OpenSSH_9.2\r\n", "did not answer CONNECT in HTTP/1.x"),
        (b"\x16\x03\x01\x00\x50", "answered CONNECT with TLS"),
        (b"\x05\x00\x00\x01\x00\x00", "in binary (a SOCKS proxy?)"),
        (b"HTTP/2 200\r\n\r\n", "did not answer CONNECT in HTTP/1.x"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
    ],
)
def test_parse_answer_refuses_what_is_no_http_1(data: bytes, words: str) -> None:
    with pytest.raises(MalformedAnswer, match=re.escape(words)):
        parse_answer(data)


# ------------------------------------------------------------------ the opener


async def test_the_transport_goes_inside_with_every_byte_after_the_answer() -> None:
    """The answer comes in pieces, the upstream's first bytes right behind it in the
    same read: the protocol inside gets the transport, then exactly those bytes,
    before the loop could read again."""
    opener, transport, inside, hop = opened()
    assert bytes(transport.written) == connect_request("api.example.com", 443, PROXY)
    feed(opener, b"HTTP/1.1 200 Conn")
    assert not opener.opened.done() and transport.protocol is None
    feed(opener, b"ection established\r\n\r\n\x16\x03\x03upstream bytes")
    assert opener.opened.done() and opener.opened.exception() is None
    assert transport.protocol is inside and inside.transport is transport
    assert bytes(inside.received) == b"\x16\x03\x03upstream bytes"
    assert (hop.status, hop.said, hop.leftover) == (200, "200 Connection established", 17)
    assert transport.reading and not transport.is_closing()


async def test_interim_answers_are_skipped() -> None:
    opener, transport, inside, _ = opened()
    feed(opener, b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n")
    assert opener.opened.done() and transport.protocol is inside
    assert inside.received == b""


def failure(opener: TunnelOpener) -> UpstreamError:
    assert opener.opened.done()
    error = opener.opened.exception()
    assert isinstance(error, UpstreamError)
    assert error.next_hop == "proxy.corp:3128"
    return error


async def test_a_refusal_names_the_proxy_and_its_answer_and_stops_reading() -> None:
    opener, transport, inside, _ = opened()
    feed(opener, b"HTTP/1.1 403 Forbidden\r\nContent-Length: 3\r\n\r\nno!")
    error = failure(opener)
    assert (error.error, error.received_status) == (errors.HTTP_REQUEST_DENIED, 403)
    assert error.detail == (
        "proxy proxy.corp:3128 answered CONNECT api.example.com:443 with 403 Forbidden: "
        "the proxy refused the tunnel"
    )
    assert transport.protocol is None and inside.received == b""
    assert not transport.reading  # its body is not wanted: the dial closes the socket


@pytest.mark.parametrize(
    ("challenges", "credentials", "words"),
    [
        (
            [b'Basic realm="corp"'],
            False,
            "(it asks for Basic): give them in -proxy as http://user:",
        ),
        ([b'Basic realm="corp"'], True, "(it asks for Basic): it did not take the credentials"),
        ([b"Negotiate", b"NTLM"], False, "(it asks for Negotiate, NTLM); h2ping sends Basic"),
        ([b'Negotiate, Basic realm="a, b"'], True, "(it asks for Negotiate, Basic): it did not"),
        ([], False, "(it names no scheme): give them"),
    ],
)
async def test_a_407_says_which_scheme_the_proxy_asks_for(
    challenges: list[bytes], credentials: bool, words: str
) -> None:
    proxy = ProxyURL("proxy.corp", 3128, "u", "secret") if credentials else PROXY
    opener, _, _, _ = opened(proxy)
    head = b"HTTP/1.1 407 Proxy Authentication Required\r\n"
    head += b"".join(b"Proxy-Authenticate: " + c + b"\r\n" for c in challenges)
    feed(opener, head + b"\r\n")
    error = failure(opener)
    assert (error.error, error.received_status) == (errors.PROXY_CONFIGURATION_ERROR, 407)
    assert words in error.detail
    assert "secret" not in error.detail


@pytest.mark.parametrize(
    ("status", "kind"),
    [(502, errors.DESTINATION_UNAVAILABLE), (503, errors.DESTINATION_UNAVAILABLE),
     (504, errors.CONNECTION_TIMEOUT), (405, errors.HTTP_REQUEST_DENIED),
     (302, errors.HTTP_REQUEST_DENIED)],
)  # fmt: skip
def test_other_answers_are_worded_by_status(status: int, kind: str) -> None:
    answer, _ = parse_answer(b"HTTP/1.1 %d Whatever\r\n\r\n" % status) or pytest.fail("")
    error = refusal(answer, PROXY, TARGET)
    assert (error.error, error.received_status, error.next_hop) == (kind, status, PROXY.address)
    assert error.detail.startswith(f"proxy proxy.corp:3128 answered CONNECT {TARGET} with {status}")


async def test_garbage_and_an_endless_head_are_protocol_errors() -> None:
    opener, _, _, _ = opened()
    feed(opener, b"SSH-2.0-OpenSSH\r\n\r\n")
    assert failure(opener).error == errors.HTTP_PROTOCOL_ERROR
    opener, _, _, _ = opened()
    feed(opener, b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * MAX_ANSWER_HEAD)
    error = failure(opener)
    assert error.error == errors.HTTP_PROTOCOL_ERROR
    assert f"a head over {MAX_ANSWER_HEAD} bytes" in error.detail


async def test_a_proxy_that_closes_before_answering() -> None:
    opener, _, _, _ = opened()
    opener.connection_lost(None)
    error = failure(opener)
    assert error.error == errors.CONNECTION_TERMINATED
    assert error.detail == (
        "proxy proxy.corp:3128 closed the connection without answering to CONNECT "
        "api.example.com:443"
    )
    opener, _, _, _ = opened()
    feed(opener, b"HTTP/1.1 200 ")
    opener.connection_lost(ConnectionResetError(104, "Connection reset by peer"))
    assert "in the middle of its answer" in failure(opener).detail


def test_an_h2c_tunnel_names_the_proxy_when_it_ends() -> None:
    inside = Inside()
    tunnel = PlainTunnel(inside, "proxy.corp:3128")
    tunnel.connection_made(FakeTransport())
    buffer = tunnel.get_buffer(-1)
    buffer[:2] = b"ok"
    tunnel.buffer_updated(2)
    assert inside.received == b"ok"
    tunnel.connection_lost(None)
    (lost,) = inside.lost
    assert isinstance(lost, TunnelClosed)
    assert str(lost) == "the tunnel through proxy proxy.corp:3128 closed"
    assert proxy_of(lost) == "proxy.corp:3128"  # Proxy-Status's next-hop
    assert proxy_of(ConnectionResetError()) is None and proxy_of(None) is None
