"""Faults no stock server stages, from the scripted h2 upstream (h2ping.testing)."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator

import aiohttp
import pytest
from h2.errors import ErrorCodes

from h2ping.testing import ScriptedRequest

from ..conftest import TLSFiles, running_proxy, scripted


async def test_request_pseudo_headers(tls: TLSFiles, session: aiohttp.ClientSession) -> None:
    async with (
        scripted(tls, lambda r: r.respond(200, body=b"x")) as up,
        running_proxy(up.url, tls) as proxy,
    ):
        async with session.post(
            proxy.url + "/v1/chat?stream=1", data=b"{}", headers={"Host": "localhost:1"}
        ) as resp:
            assert resp.status == 200
    (request,) = up.requests
    assert (request.method, request.scheme, request.path) == ("POST", "https", "/v1/chat?stream=1")
    assert request.authority == f"127.0.0.1:{up.port}"
    assert request.header("host") is None
    assert all(name == name.lower() for name, _ in request.headers)


@pytest.mark.parametrize("code", [ErrorCodes.INTERNAL_ERROR, ErrorCodes.CANCEL])
async def test_reset_before_headers_is_502_and_not_replayed(
    tls: TLSFiles, session: aiohttp.ClientSession, code: ErrorCodes
) -> None:
    async def handler(request: ScriptedRequest) -> None:
        await request.body()
        request.reset(code)

    async with scripted(tls, handler) as up, running_proxy(up.url, tls) as proxy:
        async with session.post(proxy.url + "/x", data=b"may have been processed") as resp:
            assert resp.status == 502
            assert "error=http_protocol_error" in resp.headers["proxy-status"]
            assert code.name in resp.headers["proxy-status"]
    assert len(up.requests) == 1


@pytest.mark.parametrize("with_length", [True, False], ids=["content-length", "chunked"])
async def test_failure_after_headers_truncates(
    tls: TLSFiles, session: aiohttp.ClientSession, with_length: bool
) -> None:
    client_has_head = asyncio.Event()

    async def handler(request: ScriptedRequest) -> None:
        await request.body()
        headers = [("content-length", "100000")] if with_length else []
        await request.send_headers(200, headers)
        await request.send_data(b"a" * 50_000)
        await asyncio.wait_for(client_has_head.wait(), 5)
        request.reset(ErrorCodes.INTERNAL_ERROR)

    async with scripted(tls, handler) as up, running_proxy(up.url, tls) as proxy:
        async with session.get(proxy.url + "/x") as resp:
            client_has_head.set()
            assert resp.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await resp.read()
        assert proxy.stats.aborted == 1


@pytest.mark.parametrize("when", ["before-headers", "mid-body"])
async def test_client_disconnect_cancels_upstream_stream(tls: TLSFiles, when: str) -> None:
    got_request = asyncio.Event()

    async def handler(request: ScriptedRequest) -> None:
        await request.body()
        got_request.set()
        if when == "mid-body":
            await request.send_headers(200)
            await request.send_data(b"first")
        await asyncio.sleep(30)

    async with scripted(tls, handler) as up, running_proxy(up.url, tls) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.wait_for(got_request.wait(), 5)
        if when == "mid-body":
            await asyncio.wait_for(reader.readuntil(b"first"), 5)
        writer.close()
        (request,) = up.requests
        await asyncio.wait_for(request.reset_by_client.wait(), 5)
        assert request.client_reset_code == ErrorCodes.CANCEL
        await up.wait_for(lambda: up.open_streams == 0)
        await up.wait_for(lambda: not proxy.exchanges and not proxy.clients)
        # The connection itself stays usable.
        assert proxy.pool is not None and len(proxy.pool.connections) == 1


async def test_slow_client_holds_back_only_its_own_stream(tls: TLSFiles) -> None:
    """Response DATA is acknowledged as the client drains: a client that stops
    reading stops its stream, while another stream on the connection goes on."""
    size = 64 * 1024 * 1024
    payload = os.urandom(1024 * 1024) * 64
    sent = 0

    async def handler(request: ScriptedRequest) -> None:
        nonlocal sent
        await request.body()
        if request.path == "/small":
            await request.respond(200, body=b"small")
            return
        await request.send_headers(200, [("content-length", str(size))])
        for i in range(0, size, 256 * 1024):
            await request.send_data(payload[i : i + 256 * 1024])
            sent += 256 * 1024
        await request.end()

    async with scripted(tls, handler) as up, running_proxy(up.url, tls) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.sleep(1.0)  # silence: the client reads nothing, and the upstream stalls
        stalled_at = sent
        async with aiohttp.ClientSession() as other:
            async with other.get(proxy.url + "/small") as resp:
                assert await resp.read() == b"small"
        assert len(up.connections) == 1
        await asyncio.sleep(0.3)  # silence: the upstream sends nothing more meanwhile
        assert sent == stalled_at, "upstream kept sending to a client that does not read"
        assert stalled_at < 24 * 1024 * 1024
        head = await reader.readuntil(b"\r\n\r\n")
        body = await asyncio.wait_for(reader.readexactly(size), 30)
        writer.close()
    assert b"content-length: %d" % size in head
    assert hashlib.sha256(body).digest() == hashlib.sha256(payload).digest()


async def test_upload_waits_on_upstream_window(tls: TLSFiles) -> None:
    """A request body goes no faster than the upstream reads it: the proxy does not
    swallow a large upload into memory while the upstream is not reading."""
    reading = asyncio.Event()

    async def handler(request: ScriptedRequest) -> None:
        await reading.wait()
        body = await request.body()
        await request.respond(200, body=hashlib.sha256(body).hexdigest().encode())

    produced = 0
    chunk = os.urandom(256 * 1024)

    async def upload() -> AsyncIterator[bytes]:
        nonlocal produced
        for _ in range(256):  # 64 MiB
            produced += len(chunk)
            yield chunk

    async with (
        scripted(tls, handler) as up,
        running_proxy(up.url, tls, retry_body_limit=0) as proxy,
        aiohttp.ClientSession() as session,
    ):
        call = asyncio.create_task(session.post(proxy.url + "/up", data=upload()))
        await up.wait_for(lambda: len(up.requests) == 1)
        await asyncio.sleep(1.0)  # silence: the upstream reads nothing, and the upload stalls
        stalled_at = produced
        await asyncio.sleep(0.3)  # silence: the client sends nothing more meanwhile
        assert produced == stalled_at, "the client could keep sending into the proxy"
        assert stalled_at < 24 * 1024 * 1024
        reading.set()
        resp = await asyncio.wait_for(call, 60)
        assert resp.status == 200
        assert await resp.read() == hashlib.sha256(chunk * 256).hexdigest().encode()
