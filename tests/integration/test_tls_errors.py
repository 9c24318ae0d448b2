"""TLS failures in words a person can act on, not OpenSSL's reason codes."""

from __future__ import annotations

import asyncio
import datetime
import pathlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest
import trustme

from h2ping import Proxy
from h2ping.http2.dial import CAFileError, describe_tls_error
from h2ping.testing import ScriptedUpstream

from ..conftest import TLSFiles, running_proxy


@asynccontextmanager
async def serving(cert: trustme.LeafCert) -> AsyncIterator[str]:
    """A ScriptedUpstream over TLS presenting ``cert``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    async with ScriptedUpstream(ssl_context=context) as upstream:
        yield upstream.url


async def failure(session: aiohttp.ClientSession, url: str, **settings: object) -> tuple[str, str]:
    """Proxy-Status and body of a request through a proxy for ``url``."""
    async with running_proxy(url, **settings) as proxy, session.get(proxy.url + "/") as resp:
        assert resp.status == 502
        return resp.headers["proxy-status"], await resp.text()


async def failure_from(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    session: aiohttp.ClientSession,
) -> tuple[int, str, str]:
    """The port of a TCP server running ``handler``, and what a request through a
    proxy for it as an https upstream gets (Proxy-Status and body)."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        status, body = await failure(session, f"https://127.0.0.1:{port}")
    finally:
        server.close()
    return port, status, body


async def test_https_against_a_plain_http_port(session: aiohttp.ClientSession) -> None:
    async def http1(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)  # the ClientHello
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    port, status, body = await failure_from(http1, session)
    assert "error=tls_protocol_error" in status
    assert f"127.0.0.1:{port} did not answer TLS: is it plain HTTP? (WRONG_VERSION_NUMBER)" in body


async def test_a_close_during_the_handshake(session: aiohttp.ClientSession) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)  # the ClientHello
        writer.close()

    port, status, body = await failure_from(hang_up, session)
    assert "error=tls_protocol_error" in status
    assert f"127.0.0.1:{port} closed the connection during the TLS handshake" in body


async def test_a_certificate_from_an_unknown_ca(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    async with serving(tls.ca.issue_cert("127.0.0.1")) as url:
        status, body = await failure(session, url)  # no -ca-file: the test CA is unknown
    assert "error=tls_certificate_error" in status
    assert "is signed by an unknown CA: pass that CA with -ca-file" in body


async def test_a_certificate_for_another_host(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    async with serving(tls.ca.issue_cert("other.example")) as url:
        status, body = await failure(session, url, ca_file=tls.ca_file)
    assert "error=tls_certificate_error" in status
    assert "is not for 127.0.0.1 (hostname mismatch): check -upstream" in body


async def test_an_expired_certificate(tls: TLSFiles, session: aiohttp.ClientSession) -> None:
    now = datetime.datetime.now(datetime.UTC)
    cert = tls.ca.issue_cert(
        "127.0.0.1",
        not_before=now - datetime.timedelta(days=30),
        not_after=now - datetime.timedelta(days=1),
    )
    async with serving(cert) as url:
        status, body = await failure(session, url, ca_file=tls.ca_file)
    assert "error=tls_certificate_error" in status
    assert "the certificate of 127.0.0.1:" in body and "has expired" in body


def cert_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    exc = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] {message}")
    exc.verify_code, exc.verify_message = code, message
    return exc


@pytest.mark.parametrize(
    ("code", "message", "words"),
    [
        (18, "self-signed certificate", "is self-signed: pass it with -ca-file"),
        (19, "self-signed certificate in certificate chain", "signed by an unknown CA"),
        (9, "certificate is not yet valid", "not valid yet: check this machine's clock"),
        (23, "certificate revoked", "has been revoked"),
        (50, "application verification failure", "not accepted (application verification"),
    ],
)
def test_every_certificate_problem_is_named(code: int, message: str, words: str) -> None:
    error = describe_tls_error(cert_error(code, message), "api.example.com", "api.example.com:443")
    assert error.error == "tls_certificate_error"
    assert error.detail.startswith("the certificate of api.example.com:443 ")
    assert words in error.detail


def test_a_handshake_the_upstream_refused_is_named() -> None:
    exc = ssl.SSLError(1, "[SSL: TLSV1_ALERT_PROTOCOL_VERSION] tlsv1 alert protocol version")
    exc.reason = "TLSV1_ALERT_PROTOCOL_VERSION"
    error = describe_tls_error(exc, "h", "h:443")
    assert error.detail == (
        "h:443 refused the TLS handshake: no TLS version in common (TLSV1_ALERT_PROTOCOL_VERSION)"
    )


DAMAGED_PEM = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("", "no PEM certificate"),
        ("just some text\n", "no PEM certificate"),
        (DAMAGED_PEM, "a damaged PEM certificate"),
    ],
    ids=["empty", "text", "damaged"],
)
async def test_a_ca_file_without_a_usable_certificate(
    tmp_path: pathlib.Path, content: str, problem: str
) -> None:
    pem = tmp_path / "ca.pem"
    pem.write_text(content)
    proxy = Proxy(upstream="https://127.0.0.1:9", listen="127.0.0.1:0", ca_file=str(pem))
    with pytest.raises(CAFileError) as caught:
        await proxy.start()
    assert str(caught.value) == f"{problem} in {pem}"
    assert caught.value.reason == f"{problem} in the file"  # the command names the file
    assert isinstance(caught.value, ssl.SSLError)  # what the command reports as a ca-file error


@pytest.mark.parametrize("scheme", ["https", "http"])
async def test_a_server_without_http2_gets_no_preface_counted(
    scheme: str, tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    """Over TLS, a handshake without ALPN h2 ends the connection before h2ping
    says anything on it; in h2c, the preface and its PING went out but no HTTP/2
    came back. Either way no connection opened, and the counters say none did:
    no PING that measured a link, no PING at all."""
    received: list[bytes] = []

    async def http1(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(65536))
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        writer.close()

    context = None
    if scheme == "https":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls.cert_file, tls.key_file)
        context.set_alpn_protocols(["http/1.1"])
    server = await asyncio.start_server(http1, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    async with server, running_proxy(f"{scheme}://127.0.0.1:{port}", ca_file=tls.ca_file) as p:
        for _ in range(2):
            async with session.get(p.url + "/") as resp:
                assert resp.status == 502
        summary = p.summary()
    assert "connections_opened=0" in summary, summary
    assert "window_pings=0" in summary and "pings_sent=0" in summary, summary
    assert "tls_resumptions=0" in summary, summary  # no session of such a server is kept
    if scheme == "https":  # nothing written after the handshake, not even the preface
        assert set(received) <= {b""}, received
