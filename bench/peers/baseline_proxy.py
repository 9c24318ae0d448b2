"""The "obvious Python proxy": an aiohttp server forwarding each request with one
``httpx.AsyncClient(http2=True)``, streaming both bodies.

It is the yardstick h2ping is compared with, so it is written the way most people
would write it, without tuning beyond removing the limits that would make it
refuse load (connection-pool size, timeouts, access log).

    cd bench && python -m peers.baseline_proxy --listen 127.0.0.1:8080 \
        --upstream https://127.0.0.1:8443 --ca-file ca.pem
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import ssl
from collections.abc import AsyncIterator

import httpx
from aiohttp import web

# RFC 9110 section 7.6.1, plus the ones HTTP/2 forbids.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-authenticate",
        "proxy-authorization",
        "host",
    }
)
CLIENT = web.AppKey("client", httpx.AsyncClient)
UPSTREAM = web.AppKey("upstream", str)


async def _body(request: web.Request) -> AsyncIterator[bytes]:
    async for chunk in request.content.iter_chunked(65536):
        yield chunk


async def forward(request: web.Request) -> web.StreamResponse:
    client = request.app[CLIENT]
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
    upstream_request = client.build_request(
        request.method,
        request.app[UPSTREAM] + request.path_qs,
        headers=headers,
        content=_body(request) if request.body_exists else None,
    )
    try:
        upstream = await client.send(upstream_request, stream=True)
    except httpx.HTTPError as exc:
        return web.Response(status=502, text=f"upstream error: {exc!r}\n")
    try:
        response = web.StreamResponse(
            status=upstream.status_code,
            headers=[(k, v) for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP],
        )
        await response.prepare(request)
        async for chunk in upstream.aiter_raw():
            await response.write(chunk)
        await response.write_eof()
        return response
    finally:
        await upstream.aclose()


async def serve(host: str, port: int, upstream: str, ca_file: str | None) -> None:
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True
    client = httpx.AsyncClient(
        http2=True,
        verify=verify,
        timeout=None,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
    )
    app = web.Application()
    app[CLIENT] = client
    app[UPSTREAM] = upstream.rstrip("/")
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, backlog=4096).start()
    print(f"baseline proxy listening on {host}:{port} -> {upstream}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:8080")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--ca-file")
    args = parser.parse_args()
    host, _, port = args.listen.rpartition(":")
    coro = serve(host, int(port), args.upstream, args.ca_file)
    # Same event loop as h2ping uses, so the comparison is about the code, not the loop.
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
        return
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(coro)


if __name__ == "__main__":
    main()
