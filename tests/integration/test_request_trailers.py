"""A chunked request's trailer fields never become header fields upstream (RFC 9112
section 7.1.2: a trailer is no header), alone or pipelined behind another request
in one write, and count toward the head's limits. Real TLS, the scripted h2
upstream, raw client bytes."""

from __future__ import annotations

import asyncio

from h2ping.testing import ScriptedRequest

from ..conftest import TLSFiles, running_proxy, scripted, send_raw

TRAILERS = (
    b"X-Injected: yes\r\n"
    b"Authorization: Bearer stolen\r\n"
    b"TE: trailers\r\n"
    b"X-Forwarded-For: 10.6.6.6\r\n"
)
TRAILER_NAMES = {"x-injected", "authorization", "x-forwarded-for", "te"}


def chunked_post(path: bytes, trailers: bytes, fields: bytes = b"", close: bool = True) -> bytes:
    return (
        b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n%s%s\r\n"
        b"5\r\nhello\r\n0\r\n%s\r\n"
        % (path, fields, b"Connection: close\r\n" if close else b"", trailers)
    )


async def echo(request: ScriptedRequest) -> None:
    body = await request.body()
    await request.respond(200, [("content-length", str(len(body)))], body)


def responses(raw: bytes) -> list[tuple[int, bytes]]:
    """Status and body of each content-length-framed response in ``raw``."""
    out = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")[1:]
            if line.lower().startswith(b"content-length:")
        )
        out.append((status, rest[:length]))
        raw = rest[length:]
    return out


def upstream_names(request: ScriptedRequest) -> set[str]:
    return {name for name, _ in request.headers}


async def test_a_lone_requests_trailers_are_not_sent_as_header_fields(tls: TLSFiles) -> None:
    async with (
        scripted(tls, echo) as up,
        running_proxy(up.url, tls) as proxy,
    ):
        raw = await send_raw(proxy.port, chunked_post(b"/alone", TRAILERS))
        (request,) = up.requests
    assert responses(raw) == [(200, b"hello")]
    assert not upstream_names(request) & TRAILER_NAMES, request.headers


async def test_a_pipelined_requests_trailers_are_not_sent_as_header_fields(tls: TLSFiles) -> None:
    """The second request's head is mapped at its turn, after its body and
    trailers were parsed from the same read."""
    first = b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n"
    async with (
        scripted(tls, echo) as up,
        running_proxy(up.url, tls) as proxy,
    ):
        raw = await send_raw(proxy.port, first + chunked_post(b"/second", TRAILERS))
        requests = {request.path: request for request in up.requests}
    assert responses(raw) == [(200, b""), (200, b"hello")]
    assert not upstream_names(requests["/second"]) & TRAILER_NAMES, requests["/second"].headers
    assert requests["/second"].header("authorization") is None


FIELDS = b"".join(b"X-Field-%d: v\r\n" % i for i in range(200))
MANY_TRAILERS = b"".join(b"X-Trailer-%d: v\r\n" % i for i in range(200)) + TRAILERS


async def test_trailers_count_toward_the_field_limit_of_a_pipelined_request(
    tls: TLSFiles,
) -> None:
    """200 fields and 200 trailer fields: over the 256 a head may carry, so the
    second request is answered 431 and never reaches the upstream; the first,
    ahead of it, is answered in full."""
    first = b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n"
    second = chunked_post(b"/second", MANY_TRAILERS, FIELDS)
    async with (
        scripted(tls, echo) as up,
        running_proxy(up.url, tls) as proxy,
    ):
        raw = await send_raw(proxy.port, first + second)
        await asyncio.sleep(0.05)
        assert [request.path for request in up.requests] == ["/first"]
        assert all(len(request.headers) < 200 for request in up.requests)
    (ok, refused) = responses(raw)
    assert ok == (200, b"")
    assert refused[0] == 431
    assert refused[1] == b"more than 256 header and trailer fields\n"


async def test_trailers_count_toward_the_field_limit_of_a_lone_request(tls: TLSFiles) -> None:
    async with (
        scripted(tls, echo) as up,
        running_proxy(up.url, tls) as proxy,
    ):
        raw = await send_raw(proxy.port, chunked_post(b"/alone", MANY_TRAILERS, FIELDS))
        await asyncio.sleep(0.05)
        for request in up.requests:  # sent before its trailers came: never the trailers
            assert not upstream_names(request) & TRAILER_NAMES
            assert len(request.headers) <= 201
    assert responses(raw) == [(431, b"more than 256 header and trailer fields\n")]
