"""Responses without a body and interim responses, as RFC 9110 and 9112 frame them
for the client: no Content-Length on a 204 or 1xx, none added to a 304, no body
on either (the next response on the connection stays in step); 1xx passed on to
HTTP/1.1 clients only, at most MAX_INFORMATIONAL of them. Real TLS, the scripted
h2 upstream, raw client bytes."""

from __future__ import annotations

import asyncio

import aiohttp

from h2ping.http1.messages import MAX_INFORMATIONAL
from h2ping.testing import ScriptedRequest

from ..conftest import TLSFiles, running_proxy, scripted, send_raw

HINT = ("link", "</style.css>; rel=preload; as=style")


async def answer(request: ScriptedRequest) -> None:
    await request.body()
    path = request.path
    if path == "/204":
        await request.respond(204, [("content-length", "0"), ("x-kind", "no-content")])
    elif path == "/304":
        await request.respond(304, [("content-length", "1234"), ("etag", '"v1"')])
    elif path.startswith("/hints/"):
        for _ in range(int(path.rsplit("/", 1)[1])):
            await request.send_headers(103, [HINT])
        await request.send_headers(100)
        await request.respond(200, [("content-length", "5")], b"final")
    elif path == "/slow":
        await asyncio.sleep(0.3)
        await request.respond(200, [("content-length", "4")], b"slow")
    else:
        await request.respond(200, [("content-length", "4")], b"next")


def split_responses(raw: bytes) -> list[tuple[bytes, bytes]]:
    """(head, body) of each response in ``raw``, framed by Content-Length (none:
    no body, as for 1xx, 204 and 304)."""
    out = []
    while raw:
        head, _, raw = raw.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        lines = [line.lower() for line in head.split(b"\r\n")[1:]]
        assert not any(line.startswith(b"transfer-encoding") for line in lines), head
        length = next((int(line[15:]) for line in lines if line.startswith(b"content-length:")), 0)
        if status in (204, 304) or status < 200:
            length = 0
        out.append((head, raw[:length]))
        raw = raw[length:]
    return out


def get(path: bytes, version: bytes = b"1.1", close: bool = False) -> bytes:
    connection = b"Connection: close\r\n" if close else b""
    if version == b"1.0" and not close:
        connection = b"Connection: keep-alive\r\n"
    return b"GET %s HTTP/%s\r\nHost: x\r\n%s\r\n" % (path, version, connection)


async def test_204_and_304_carry_no_body_framing_and_the_next_response_follows(
    tls: TLSFiles,
) -> None:
    async with (
        scripted(tls, answer) as up,
        running_proxy(up.url, tls) as proxy,
    ):
        raw = await send_raw(proxy.port, get(b"/204") + get(b"/304") + get(b"/next", close=True))
    (no_content, no_content_body), (not_modified, not_modified_body), (_, after) = split_responses(
        raw
    )
    assert no_content.startswith(b"HTTP/1.1 204 ")
    assert b"content-length" not in no_content.lower()  # RFC 9110 section 8.6
    assert b"x-kind: no-content" in no_content
    assert no_content_body == b""
    assert not_modified.startswith(b"HTTP/1.1 304 ")
    assert b"content-length: 1234" in not_modified.lower()  # what the 200 would have
    assert not_modified_body == b""
    assert after == b"next"


async def test_informational_responses_reach_an_http11_client(tls: TLSFiles) -> None:
    async with (
        scripted(tls, answer) as up,
        running_proxy(up.url, tls) as proxy,
    ):
        raw = await send_raw(proxy.port, get(b"/hints/2", close=True))
    heads = split_responses(raw)
    assert [head.split(b"\r\n")[0] for head, _ in heads] == [
        b"HTTP/1.1 103 Early Hints",
        b"HTTP/1.1 103 Early Hints",
        b"HTTP/1.1 200 OK",
    ]  # the upstream's 100 is not passed on: the proxy answers Expect itself
    assert b"link: </style.css>; rel=preload; as=style" in heads[0][0]
    assert heads[-1][1] == b"final"


async def test_an_http10_client_gets_no_informational_response(tls: TLSFiles) -> None:
    async with (
        scripted(tls, answer) as up,
        running_proxy(up.url, tls) as proxy,
    ):
        raw = await send_raw(proxy.port, get(b"/hints/2", b"1.0", close=True))
    ((head, body),) = split_responses(raw)
    assert head.startswith(b"HTTP/1.1 200 ") and body == b"final"


async def test_a_flood_of_informational_responses_fails_that_request_only(
    tls: TLSFiles,
) -> None:
    async with (
        scripted(tls, answer) as up,
        running_proxy(up.url, tls) as proxy,
        aiohttp.ClientSession() as session,
    ):

        async def slow() -> tuple[int, bytes]:
            async with session.get(proxy.url + "/slow") as resp:
                return resp.status, await resp.read()

        neighbour = asyncio.create_task(slow())
        await up.wait_for(lambda: len(up.requests) == 1)
        raw = await send_raw(proxy.port, get(b"/hints/%d" % (MAX_INFORMATIONAL + 1), close=True))
        assert await neighbour == (200, b"slow")
        assert len(up.connections) == 1
    *hints, (head, body) = split_responses(raw)
    assert len(hints) == MAX_INFORMATIONAL
    assert head.startswith(b"HTTP/1.1 502 ")
    assert b"proxy-status: h2ping; error=http_protocol_error" in head
    assert b"more than %d informational responses" % MAX_INFORMATIONAL in body
