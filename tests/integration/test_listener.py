"""The HTTP/1.1 side, driven over raw sockets for what a polite client never sends."""

from __future__ import annotations

import asyncio

from h2ping.http1.listener import ClientConnection, ListenerLimits, RequestHandler
from h2ping.http1.messages import Request, ResponseWriter
from h2ping.stats import Stats

from ..conftest import TLSFiles, running_proxy, send_raw


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, dict[bytes, bytes], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status_line, *lines = head[:-4].split(b"\r\n")
    fields = {}
    for line in lines:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    body = b""
    if b"content-length" in fields:
        body = await reader.readexactly(int(fields[b"content-length"]))
    return status_line, fields, body


async def test_malformed_request_gets_400_and_close(hypercorn_echo: str, tls: TLSFiles) -> None:
    async with running_proxy(hypercorn_echo, tls) as proxy:
        raw = await send_raw(proxy.port, b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"connection: close" in raw.lower()
    assert b"malformed" in raw


async def test_oversized_head_gets_431(hypercorn_echo: str, tls: TLSFiles) -> None:
    big = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"a" * 1000) for i in range(70))
    async with running_proxy(hypercorn_echo, tls) as proxy:
        raw = await send_raw(proxy.port, b"GET / HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n")
    assert raw.startswith(b"HTTP/1.1 431 ")


async def test_head_just_under_limit_is_forwarded(hypercorn_echo: str, tls: TLSFiles) -> None:
    big = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"a" * 1000) for i in range(50))
    async with running_proxy(hypercorn_echo, tls) as proxy:
        raw = await send_raw(
            proxy.port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + big + b"\r\n"
        )
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n")


async def test_pipelined_requests_answered_in_order(hypercorn_echo: str, tls: TLSFiles) -> None:
    requests = b"".join(
        b"POST /p%d HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n%02d" % (i, i) for i in range(5)
    )
    async with running_proxy(hypercorn_echo, tls) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(requests)
        bodies = [(await read_response(reader))[2] for _ in range(5)]
        writer.close()
    assert bodies == [b"%02d" % i for i in range(5)]


async def test_expect_100_continue(hypercorn_echo: str, tls: TLSFiles) -> None:
    async with running_proxy(hypercorn_echo, tls) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(
            b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
        )
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"hello")
        status, fields, body = await read_response(reader)
        writer.close()
    assert status == b"HTTP/1.1 200 OK"
    assert body == b"hello"
    assert b"x-seen-expect" not in fields


async def test_http10_client_gets_close_delimited_body(tls: TLSFiles) -> None:
    from ..conftest import read_body, run_hypercorn

    async def app(scope, receive, send):  # no content-length: would be chunked for 1.1
        await read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"abc", "more_body": True})
        await send({"type": "http.response.body", "body": b"def"})

    async with run_hypercorn(app, tls) as url, running_proxy(url, tls) as proxy:
        raw = await send_raw(proxy.port, b"GET / HTTP/1.0\r\n\r\n")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head.lower()
    assert body == b"abcdef"


async def test_absolute_form_target_goes_to_configured_upstream(
    hypercorn_echo: str, tls: TLSFiles
) -> None:
    async with running_proxy(hypercorn_echo, tls) as proxy:
        raw = await send_raw(
            proxy.port,
            b"GET http://evil.example/steal?x=1 HTTP/1.1\r\n"
            b"Host: evil.example\r\nConnection: close\r\n\r\n",
        )
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"x-path: /steal?x=1" in raw
    upstream_port = hypercorn_echo.rsplit(":", 1)[1].encode()
    assert b"x-seen-host: 127.0.0.1:" + upstream_port + b"\r\n" in raw


async def test_client_close_after_request_cancels_it(tls: TLSFiles) -> None:
    from h2.errors import ErrorCodes

    from h2ping.testing import ScriptedRequest, ScriptedUpstream

    async def handler(request: ScriptedRequest) -> None:
        await request.body()
        await asyncio.sleep(30)

    async with (
        ScriptedUpstream(handler, ssl_context=tls.server_context()) as up,
        running_proxy(up.url, tls) as proxy,
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"POST /h HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        await up.wait_for(lambda: len(up.requests) == 1)
        writer.write_eof()  # the client is gone: nobody will read an answer
        (request,) = up.requests
        await asyncio.wait_for(request.reset_by_client.wait(), 5)
        assert request.client_reset_code == ErrorCodes.CANCEL
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()


async def test_client_that_reads_nothing_pauses_its_connection() -> None:
    """Output to a client that stops reading pauses its connection once the socket's
    buffer is full, and resumes as the client drains it: on every loop and Python,
    including CPython 3.12.0-3.12.8 and 3.13.0-3.13.1, whose asyncio transport
    never pauses the protocol from writelines() (CPython gh-127655)."""

    def no_requests(request: Request, writer: ResponseWriter) -> RequestHandler:
        raise AssertionError("the test sends no request")

    clients: set[ClientConnection] = set()
    limits = ListenerLimits(header_timeout=30, idle_timeout=30)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: ClientConnection(no_requests, clients, Stats(), limits), "127.0.0.1", 0
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    try:
        while not clients:
            await asyncio.sleep(0.01)
        (conn,) = clients
        chunk = b"x" * 65536
        sent = 0
        while not conn.write_paused and sent < 64 * 1024 * 1024:
            conn.output.send(b"%x\r\n" % len(chunk), chunk, b"\r\n")  # as a chunked response does
            sent += len(chunk) + 9
            await asyncio.sleep(0)  # the batch goes to the socket
        assert conn.write_paused, f"{sent} bytes handed to a client that reads nothing"
        assert sent < 24 * 1024 * 1024
        received = await asyncio.wait_for(reader.readexactly(sent), 30)
        assert not conn.write_paused
        assert received.count(chunk) == sent // (len(chunk) + 9)
    finally:
        writer.close()
        server.close()
        await server.wait_closed()
