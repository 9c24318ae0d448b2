"""A small HTTP/1.1 backend (aiohttp) in the test's own process, for the servers
that cannot answer on their own. The routes every origin serves:

- ``GET /hello``: ``hello``;
- ``POST /echo`` and ``POST /slow?ms=N`` (after N ms): the body, byte for byte;
- ``POST /sha256``: the hex SHA-256 of the body;
- ``GET /big``: 16 MiB (``big_body()``);
- ``GET /stream``: ``STREAM_CHUNKS`` small chunks, ``STREAM_GAP_MS`` apart.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
from collections.abc import AsyncIterator

from aiohttp import web

from . import STREAM_CHUNKS, STREAM_GAP_MS, big_body, stream_chunk


@contextlib.asynccontextmanager
async def run_backend() -> AsyncIterator[tuple[int, collections.Counter[str]]]:
    """Yields (port, x-id counts)."""
    seen: collections.Counter[str] = collections.Counter()
    big = big_body()

    def count(request: web.Request) -> None:
        if "x-id" in request.headers:
            seen[request.headers["x-id"]] += 1

    async def hello(request: web.Request) -> web.Response:
        return web.Response(body=b"hello\n")

    async def echo(request: web.Request) -> web.Response:
        count(request)
        if "ms" in request.query:
            await asyncio.sleep(int(request.query["ms"]) / 1000)
        return web.Response(body=await request.read(), content_type="application/octet-stream")

    async def sha256(request: web.Request) -> web.Response:
        digest = hashlib.sha256()
        async for chunk in request.content.iter_any():
            digest.update(chunk)
        return web.Response(text=digest.hexdigest())

    async def get_big(request: web.Request) -> web.Response:
        return web.Response(body=big, content_type="application/octet-stream")

    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for i in range(STREAM_CHUNKS):
            if i:
                await asyncio.sleep(STREAM_GAP_MS / 1000)
            await resp.write(stream_chunk(i))
        await resp.write_eof()
        return resp

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/hello", hello)
    app.router.add_post("/echo", echo)
    app.router.add_post("/slow", echo)
    app.router.add_post("/sha256", sha256)
    app.router.add_get("/big", get_big)
    app.router.add_get("/stream", stream)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield port, seen
    finally:
        await runner.cleanup()
