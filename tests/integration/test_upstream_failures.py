"""Failures before a response exists become a 502 with Proxy-Status (RFC 9209)."""

from __future__ import annotations

import pathlib

import aiohttp
import pytest

from ..conftest import TLSFiles, echo_app, free_port, run_hypercorn, running_proxy


def proxy_status_error(resp: aiohttp.ClientResponse) -> str:
    field = resp.headers["proxy-status"]
    assert field.startswith("h2ping; error="), field
    params = dict(p.strip().split("=", 1) for p in field.split(";")[1:])
    assert params["details"].startswith('"') and params["details"].endswith('"')
    return params["error"]


async def test_upstream_down(session: aiohttp.ClientSession) -> None:
    port = free_port()  # nothing listens here
    async with running_proxy(f"https://127.0.0.1:{port}") as proxy:
        async with session.post(proxy.url + "/v1/x", data=b"body") as resp:
            text = await resp.text()
            assert resp.status == 502
            assert proxy_status_error(resp) == "connection_refused"
            assert text.count("\n") == 1 and "refused" in text
        # The proxy keeps serving (and failing cleanly) afterwards.
        async with session.get(proxy.url + "/again") as resp:
            assert resp.status == 502


async def test_untrusted_certificate(hypercorn_echo: str, session: aiohttp.ClientSession) -> None:
    # No ca_file: the trustme CA is not trusted, so verification must fail.
    async with running_proxy(hypercorn_echo) as proxy, session.get(proxy.url + "/") as resp:
        assert resp.status == 502
        assert proxy_status_error(resp) == "tls_certificate_error"


async def test_insecure_skip_verify_accepts_untrusted(
    hypercorn_echo: str, session: aiohttp.ClientSession
) -> None:
    async with running_proxy(hypercorn_echo, insecure_skip_verify=True) as proxy:
        async with session.get(proxy.url + "/") as resp:
            assert resp.status == 200


async def test_wrong_hostname_is_rejected(
    tls: TLSFiles, tmp_path: pathlib.Path, session: aiohttp.ClientSession
) -> None:
    # Signed by the trusted CA, but for another name than the one we dial.
    cert = tls.ca.issue_cert("other.example")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "c.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "k.pem"))
    async with (
        run_hypercorn(
            echo_app, tls, certfile=str(tmp_path / "c.pem"), keyfile=str(tmp_path / "k.pem")
        ) as url,
        running_proxy(url, tls) as proxy,
        session.get(proxy.url + "/") as resp,
    ):
        assert resp.status == 502
        assert proxy_status_error(resp) == "tls_certificate_error"
        assert "mismatch" in await resp.text()


async def test_peer_without_h2_alpn(tls: TLSFiles, session: aiohttp.ClientSession) -> None:
    async with (
        run_hypercorn(echo_app, tls, alpn_protocols=["http/1.1"]) as url,
        running_proxy(url, tls) as proxy,
        session.get(proxy.url + "/") as resp,
    ):
        text = await resp.text()
        assert resp.status == 502
        assert proxy_status_error(resp) == "tls_protocol_error"
        assert "ALPN" in text


async def test_plain_tcp_peer_for_https_upstream(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    # An h2c server where TLS is expected: the handshake fails.
    async with (
        run_hypercorn(echo_app, None) as url,
        running_proxy(url.replace("http:", "https:"), tls) as proxy,
    ):
        async with session.get(proxy.url + "/") as resp:
            assert resp.status == 502
            assert proxy_status_error(resp) == "tls_protocol_error"


async def test_h2c_prior_knowledge(session: aiohttp.ClientSession) -> None:
    async with run_hypercorn(echo_app, None) as url, running_proxy(url) as proxy:
        async with session.post(proxy.url + "/plain", data=b"hello") as resp:
            assert resp.status == 200
            assert resp.headers["x-http-version"] == "2"
            assert await resp.read() == b"hello"


@pytest.mark.parametrize("timeout", [0.3])
async def test_connect_timeout(session: aiohttp.ClientSession, timeout: float) -> None:
    import asyncio

    # A listener that accepts TCP but never speaks TLS. It holds on to each
    # connection: from Python 3.13 on, asyncio closes a connection whose
    # StreamWriter is garbage-collected, and the proxy would see a reset.
    accepted: list[asyncio.StreamWriter] = []
    server = await asyncio.start_server(lambda r, w: accepted.append(w), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with running_proxy(f"https://127.0.0.1:{port}", connect_timeout=timeout) as proxy:
            async with session.get(proxy.url + "/") as resp:
                assert resp.status == 502
                assert proxy_status_error(resp) == "connection_timeout"
        assert accepted
    finally:
        for writer in accepted:
            writer.close()
        server.close()
