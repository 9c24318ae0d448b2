"""End to end: aiohttp client -> h2ping -> hypercorn over TLS + HTTP/2."""

from __future__ import annotations

import asyncio
import hashlib
import os
from typing import Any

import aiohttp
import pytest

from ..conftest import TLSFiles, read_body, run_hypercorn, running_proxy

SIZES = [0, 1, 1024 * 1024, 16 * 1024 * 1024]


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("size", SIZES, ids=["0B", "1B", "1MiB", "16MiB"])
async def test_post_body_round_trip(
    hypercorn_echo: str, tls: TLSFiles, session: aiohttp.ClientSession, size: int
) -> None:
    payload = os.urandom(size)
    async with running_proxy(hypercorn_echo, tls) as proxy:
        async with session.post(proxy.url + "/echo", data=payload) as resp:
            body = await resp.read()
            assert resp.status == 200
            assert resp.headers["x-http-version"] == "2"
            assert resp.headers["content-length"] == str(size)
    assert digest(body) == digest(payload)


@pytest.mark.parametrize("size", SIZES, ids=["0B", "1B", "1MiB", "16MiB"])
async def test_get_download(tls: TLSFiles, session: aiohttp.ClientSession, size: int) -> None:
    payload = os.urandom(size)

    async def app(scope: dict, receive: Any, send: Any) -> None:
        await read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(0, size, 300_000):
            await send(
                {"type": "http.response.body", "body": payload[i : i + 300_000], "more_body": True}
            )
        await send({"type": "http.response.body", "body": b""})

    async with run_hypercorn(app, tls) as url, running_proxy(url, tls) as proxy:
        async with session.get(proxy.url + "/big") as resp:
            body = await resp.read()
            assert resp.status == 200
            # No Content-Length upstream: the proxy must frame it chunked.
            assert resp.headers.get("transfer-encoding") == "chunked"
    assert digest(body) == digest(payload)


async def test_chunked_upload(
    hypercorn_echo: str, tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    parts = [os.urandom(n) for n in (1, 70_000, 5, 300_000)]

    async def gen():  # an async generator makes aiohttp send Transfer-Encoding: chunked
        for part in parts:
            yield part
            await asyncio.sleep(0.01)

    async with running_proxy(hypercorn_echo, tls) as proxy:
        async with session.post(proxy.url + "/up", data=gen()) as resp:
            body = await resp.read()
            assert resp.status == 200
            assert "x-seen-transfer-encoding" not in resp.headers
    assert body == b"".join(parts)


async def test_streamed_response_arrives_chunk_by_chunk(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    first_seen = asyncio.Event()

    async def app(scope: dict, receive: Any, send: Any) -> None:
        await read_body(receive)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
        # The second event is produced only after the client has seen the first.
        await asyncio.wait_for(first_seen.wait(), 5)
        await send({"type": "http.response.body", "body": b"data: two\n\n"})

    async with run_hypercorn(app, tls) as url, running_proxy(url, tls) as proxy:
        async with session.get(proxy.url + "/events") as resp:
            first = await resp.content.readuntil(b"\n\n")
            assert first == b"data: one\n\n"
            first_seen.set()
            assert await resp.content.read() == b"data: two\n\n"


async def test_head_and_204(
    hypercorn_echo: str, tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    async with running_proxy(hypercorn_echo, tls) as proxy:
        async with session.head(proxy.url + "/thing") as resp:
            assert resp.status == 200
            assert resp.headers["content-length"] == "1234"
            assert await resp.read() == b""
        async with session.get(proxy.url + "/no-content") as resp:
            assert resp.status == 204
            assert "transfer-encoding" not in resp.headers
            assert await resp.read() == b""
        # The connection is still in sync after bodiless responses.
        async with session.post(proxy.url + "/after", data=b"ok") as resp:
            assert await resp.read() == b"ok"


async def test_authority_rewritten_and_credentials_untouched(
    hypercorn_echo: str, tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    token = "Bearer nvapi-" + "x" * 40 + "==/+ä".encode().decode("latin-1")
    async with (
        running_proxy(hypercorn_echo, tls) as proxy,
        session.get(
            proxy.url + "/v1/models?limit=5",
            headers={"Authorization": token, "X-Custom": "  spaced value", "Cookie": "a=1; b=2"},
        ) as resp,
    ):
        assert resp.status == 200
        upstream_port = hypercorn_echo.rsplit(":", 1)[1]
        assert resp.headers["x-seen-host"] == f"127.0.0.1:{upstream_port}"
        assert resp.headers["x-seen-authorization"] == token
        assert resp.headers["x-seen-cookie"] == "a=1; b=2"
        assert resp.headers["x-seen-x-custom"] == "spaced value"
        assert resp.headers["x-path"] == "/v1/models?limit=5"


async def test_hop_by_hop_headers_not_forwarded(
    hypercorn_echo: str, tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    async with running_proxy(hypercorn_echo, tls) as proxy:
        async with session.get(
            proxy.url + "/h",
            headers={
                "Connection": "keep-alive, X-Hop",
                "X-Hop": "secret-to-this-hop",
                "Keep-Alive": "timeout=5",
                "Proxy-Connection": "keep-alive",
                "TE": "trailers, deflate",
                "X-End-To-End": "yes",
            },
        ) as resp:
            seen = {
                k.lower()[len("x-seen-") :] for k in resp.headers if k.lower().startswith("x-seen-")
            }
            assert resp.status == 200
    assert "x-end-to-end" in seen
    assert seen.isdisjoint(
        {"connection", "x-hop", "keep-alive", "proxy-connection", "transfer-encoding"}
    )
    assert resp.headers["x-seen-te"] == "trailers"


async def test_200_concurrent_requests_with_10_streams_per_connection(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    active: dict[tuple, int] = {}  # per upstream connection (the client address)
    peak: dict[tuple, int] = {}

    async def app(scope: dict, receive: Any, send: Any) -> None:
        conn = tuple(scope["client"])
        await read_body(receive)
        active[conn] = active.get(conn, 0) + 1
        peak[conn] = max(peak.get(conn, 0), active[conn])
        await asyncio.sleep(0.2)
        active[conn] -= 1
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
        )
        await send({"type": "http.response.body", "body": b"ok"})

    connector = aiohttp.TCPConnector(limit=0)
    async with (
        run_hypercorn(app, tls, h2_max_concurrent_streams=10) as url,
        running_proxy(url, tls) as proxy,
        aiohttp.ClientSession(connector=connector) as many,
    ):
        responses = await asyncio.gather(*(many.get(f"{proxy.url}/r/{i}") for i in range(200)))
        statuses = [r.status for r in responses]
        bodies = [await r.read() for r in responses]
    assert statuses == [200] * 200
    assert bodies == [b"ok"] * 200
    # The limit was reached and never exceeded on any connection.
    assert max(peak.values()) == 10
    assert len(peak) >= 2


async def test_keep_alive_reuses_client_connection(hypercorn_echo: str, tls: TLSFiles) -> None:
    connector = aiohttp.TCPConnector(limit=1)
    async with (
        running_proxy(hypercorn_echo, tls) as proxy,
        aiohttp.ClientSession(connector=connector) as s,
    ):
        for i in range(20):
            async with s.post(proxy.url + "/k", data=str(i).encode()) as resp:
                assert await resp.read() == str(i).encode()
        assert len(proxy.clients) == 1
        assert proxy.stats.connections_opened == 1
