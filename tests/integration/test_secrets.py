"""No log line, error body, Proxy-Status or counter ever holds a credential or a
body: a recognisable token goes through every failure path and all output is
searched for it."""

from __future__ import annotations

import asyncio
import logging

import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import DataFrame

from h2ping.testing import BlackholeRelay, RawPeer, RawUpstream, ScriptedRequest, ScriptedUpstream

from ..conftest import TLSFiles, free_port, running_proxy

TOKEN = "S3CR3T-T0KEN-9f2c"
COOKIE = "C00KIE-V4LUE-77aa"
BODY = "B0DY-C0NTENT-31d7"


def request_bytes(method: bytes = b"POST", path: bytes = b"/v1/chat", extra: bytes = b"") -> bytes:
    body = BODY.encode() * 10
    return (
        method + b" " + path + b"?key=" + TOKEN.encode() + b" HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
        b"Proxy-Authorization: Basic " + TOKEN.encode() + b"\r\n"
        b"Cookie: session="
        + COOKIE.encode()
        + b"\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


async def exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    try:
        return await asyncio.wait_for(reader.read(), timeout)
    except TimeoutError:
        return b""
    finally:
        writer.close()


async def leaking_response_header(peer: RawPeer) -> None:
    """A response header h2 rejects, whose value (a cookie) h2 would quote."""
    await peer.handshake()
    stream_id, _ = await peer.read_request()
    bad = [(":status", "200"), ("set-cookie", f" {COOKIE} "), ("Upper", TOKEN)]
    peer.send(peer.headers_frame(stream_id, bad, end_stream=True))
    await peer.drain()


async def truncated_after_headers(peer: RawPeer) -> None:
    await peer.handshake()
    stream_id, _ = await peer.read_request()
    peer.send(peer.headers_frame(stream_id, [(":status", "200"), ("content-length", "100")]))
    peer.send(DataFrame(stream_id, b"partial response").serialize())
    await peer.drain()


async def test_no_secret_in_any_output(tls: TLSFiles, caplog: pytest.LogCaptureFixture) -> None:
    # h2ping's own loggers at their most verbose. (The hpack library logs header
    # values at DEBUG on its own logger; the command never attaches a handler to it.)
    caplog.set_level(logging.DEBUG, logger="h2ping")
    seen: list[bytes] = []

    # 1. upstream down
    async with running_proxy(f"https://127.0.0.1:{free_port()}") as proxy:
        seen.append(await exchange(proxy.port, request_bytes()))
        seen.append(proxy.stats.summary().encode())

    # 2. malformed request, oversized head, CONNECT, header timeout
    async with ScriptedUpstream() as up, running_proxy(up.url, header_timeout=0.3) as proxy:
        seen.append(
            await exchange(
                proxy.port, request_bytes(extra=b"Bad Header: " + TOKEN.encode() + b"\r\n")
            )
        )
        seen.append(
            await exchange(proxy.port, request_bytes(extra=b"X-Pad: " + b"a" * 70000 + b"\r\n"))
        )
        seen.append(await exchange(proxy.port, request_bytes(method=b"CONNECT", path=b"h:1")))
        seen.append(await exchange(proxy.port, request_bytes()[:60]))

    # 3. refused with a body over the retry limit, reset before headers
    async def refuse(request: ScriptedRequest) -> None:
        request.reset(ErrorCodes.REFUSED_STREAM)

    async def reset(request: ScriptedRequest) -> None:
        await request.body()
        request.reset(ErrorCodes.INTERNAL_ERROR)

    for handler, limit in ((refuse, 10), (reset, 1 << 20)):
        async with (
            ScriptedUpstream(handler) as up,
            running_proxy(up.url, retry_body_limit=limit) as proxy,
        ):
            seen.append(await exchange(proxy.port, request_bytes()))

    # 4. protocol error whose h2 message would quote a header value; cut after headers
    for script in (leaking_response_header, truncated_after_headers):
        async with RawUpstream(script) as up, running_proxy(up.url) as proxy:
            seen.append(await exchange(proxy.port, request_bytes()))

    # 5. a vanished peer declared dead
    async def silent(request: ScriptedRequest) -> None:
        await request.body()
        await asyncio.sleep(30)

    async with (
        ScriptedUpstream(silent) as up,
        BlackholeRelay("127.0.0.1", up.port) as relay,
        running_proxy(
            f"http://127.0.0.1:{relay.port}", ping_interval=0.2, ping_timeout=0.5
        ) as proxy,
    ):
        task = asyncio.create_task(exchange(proxy.port, request_bytes()))
        await up.wait_for(lambda: len(up.requests) == 1)
        relay.blackhole()
        seen.append(await task)

    ours = [r for r in caplog.records if r.name.startswith("h2ping")]
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in ours)
    output = b"\n".join(seen).decode("latin-1") + "\n" + logged
    for label, secret in (("token", TOKEN), ("cookie", COOKIE), ("body", BODY)):
        assert secret not in output, f"the {label} leaked"
    # The paths were really taken (each left its trace).
    for needle in ("502", "400", "431", "405", "408", "dead", "malformed response header block"):
        assert needle in output, needle
