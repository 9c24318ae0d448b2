"""Strict HTTP/1.1 input (RFC 9112): every abuse gets a 4xx/5xx of its own (never
a 502 for the client's own mistake), the connection closes, and nothing invalid
reaches the upstream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from h2ping import Proxy
from h2ping.testing import ScriptedRequest, ScriptedUpstream

from ..conftest import running_proxy, send_raw, wait_until


async def echo(request: ScriptedRequest) -> None:
    body = await request.body()
    names = ",".join(name for name, _ in request.headers)
    await request.respond(200, [("x-names", names), ("x-path", request.path)], body)


@asynccontextmanager
async def proxy_and_upstream(**settings: object) -> AsyncIterator[tuple[Proxy, ScriptedUpstream]]:
    async with ScriptedUpstream(echo) as up, running_proxy(up.url, **settings) as proxy:
        yield proxy, up


BAD_REQUESTS = {
    # framing
    "content-length with transfer-encoding": (
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    "differing content-lengths": (
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        400,
    ),
    "negative content-length": (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
    "non-numeric content-length": (
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1e3\r\n\r\n",
        400,
    ),
    "invalid chunk size": (
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        400,
    ),
    "invalid chunk extension": (
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;\x01\r\nabc\r\n0\r\n\r\n",
        400,
    ),
    "coding before chunked": (
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        501,
    ),
    "coding without chunked": (
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc",
        501,
    ),
    # syntax
    "bare CR in a value": (b"GET / HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n", 400),
    "NUL in a value": (b"GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n", 400),
    "control character in a value": (b"GET / HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n", 400),
    "whitespace before the colon": (b"GET / HTTP/1.1\r\nHost: x\r\nX : a\r\n\r\n", 400),
    "name that is not a token": (b"GET / HTTP/1.1\r\nHost: x\r\nX/Y: a\r\n\r\n", 400),
    "pseudo-header name": (b"GET / HTTP/1.1\r\nHost: x\r\n:authority: evil\r\n\r\n", 400),
    "obs-fold": (b"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", 400),
    # methods, versions, protocols
    "CONNECT": (b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 405),
    "HTTP/2 preface": (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400),
    "HTTP/2.0 request line": (b"GET / HTTP/2.0\r\n\r\n", 505),
    "HTTP/0.9 request line": (b"GET /\r\n\r\n", 505),
    # asterisk-form is for OPTIONS only (RFC 9112 3.2.4, RFC 9113 8.3.1)
    "GET *": (b"GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "POST *": (b"POST * HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 400),
    # HTTP/1.0 has no Transfer-Encoding (RFC 9112 6.1): faulty framing
    "HTTP/1.0 with Transfer-Encoding": (
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        400,
    ),
    # Host (RFC 9112 section 3.2)
    "HTTP/1.1 without Host": (b"GET / HTTP/1.1\r\n\r\n", 400),
    "two Host fields": (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    "two Host fields in HTTP/1.0": (b"GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n", 400),
    "Host that is no host": (b"GET / HTTP/1.1\r\nHost: a/b@c\r\n\r\n", 400),
    # sizes
    "request target too long": (b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    "too many header fields": (
        b"GET / HTTP/1.1\r\nHost: x\r\n"
        + b"".join(b"X-%d: v\r\n" % i for i in range(299))
        + b"\r\n",
        431,
    ),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
async def test_bad_request_is_refused_and_never_forwarded(case: str) -> None:
    data, status = BAD_REQUESTS[case]
    async with proxy_and_upstream() as (proxy, up):
        raw = await send_raw(proxy.port, data)
        await asyncio.sleep(0.05)  # silence: nothing may reach the upstream meanwhile either
        assert up.requests == [], "an invalid request reached the upstream"
        assert proxy.stats.rejected == 1
    assert raw.startswith(b"HTTP/1.1 %d " % status), raw[:80]
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower()
    assert body.endswith(b"\n") and body.count(b"\n") == 1  # one plain line saying why
    assert b"502" not in raw.split(b"\r\n")[0]


@pytest.mark.parametrize(
    ("head", "reason"),
    [
        (b"GET / HTTP/1.1\r\n", b"missing Host header field"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n", b"more than one Host header field"),
        (b"GET / HTTP/1.1\r\nHost: a b\r\n", b"malformed Host header field"),
    ],
)
async def test_host_rule_says_what_is_wrong(head: bytes, reason: bytes) -> None:
    async with proxy_and_upstream() as (proxy, _):
        raw = await send_raw(proxy.port, head + b"\r\n")
    assert raw.startswith(b"HTTP/1.1 400 ")
    assert reason in raw.partition(b"\r\n\r\n")[2]


async def test_one_host_or_none_in_http_1_0_is_forwarded() -> None:
    async with proxy_and_upstream() as (proxy, up):
        old = await send_raw(proxy.port, b"GET /old HTTP/1.0\r\n\r\n")
        ipv6 = await send_raw(
            proxy.port, b"GET /v6 HTTP/1.1\r\nHost: [::1]:80 \r\nConnection: close\r\n\r\n"
        )
        assert [r.path for r in up.requests] == ["/old", "/v6"]
    assert old.startswith(b"HTTP/1.1 200 ")
    assert ipv6.startswith(b"HTTP/1.1 200 ")


async def test_preface_gets_a_clear_reason() -> None:
    async with proxy_and_upstream() as (proxy, _):
        raw = await send_raw(proxy.port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    assert b"HTTP/2 connection preface" in raw


async def test_body_beyond_its_length_is_the_next_request() -> None:
    async with proxy_and_upstream() as (proxy, up):
        raw = await send_raw(
            proxy.port,
            b"POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
            b"GET /second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        bodies = [(r.path, r.body_bytes_received) for r in up.requests]
    assert raw.count(b"HTTP/1.1 200 OK") == 2
    assert bodies == [("/first", 3), ("/second", 0)]


async def test_body_beyond_its_length_that_is_garbage_is_a_400() -> None:
    async with proxy_and_upstream() as (proxy, up):
        raw = await send_raw(
            proxy.port,
            b"POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcdef\r\n\r\n",
        )
        assert [r.body_bytes_received for r in up.requests] == [3]
    assert raw.startswith(b"HTTP/1.1 200 OK")
    assert b"HTTP/1.1 400 " in raw


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_upgrade_is_dropped_and_request_forwarded_with_its_body(chunked: bool) -> None:
    body = b"hello upgrade"
    framing = (
        b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        if chunked
        else b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    request = (
        b"POST /up HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
        b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n" + framing
    )
    follow = b"GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    async with proxy_and_upstream() as (proxy, up):
        raw = await send_raw(proxy.port, request + follow)
        seen = [(r.path, r.header("upgrade"), r.header("http2-settings")) for r in up.requests]
    assert raw.count(b"HTTP/1.1 200 OK") == 2
    assert body in raw
    assert b"101" not in raw.split(b"\r\n")[0]
    assert seen == [("/up", None, None), ("/next", None, None)]


async def test_header_timeout_gives_408_and_close() -> None:
    async with proxy_and_upstream(header_timeout=0.5) as (proxy, up):
        loop = asyncio.get_running_loop()
        started = loop.time()
        raw = await send_raw(proxy.port, b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        elapsed = loop.time() - started
        assert up.requests == []
    assert raw.startswith(b"HTTP/1.1 408 ")
    assert 0.4 <= elapsed <= 2.0


async def test_idle_kept_alive_connection_is_closed() -> None:
    async with proxy_and_upstream(client_idle_timeout=0.5) as (proxy, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200 OK")
        loop = asyncio.get_running_loop()
        started = loop.time()
        rest = await asyncio.wait_for(reader.read(), 5)  # the body, then EOF at the timeout
        elapsed = loop.time() - started
        writer.close()
        assert not proxy.clients
    assert rest == b""
    assert 0.4 <= elapsed <= 2.0


async def test_slow_clients_do_not_delay_others() -> None:
    async with proxy_and_upstream(header_timeout=10) as (proxy, up):
        dribblers = [await asyncio.open_connection("127.0.0.1", proxy.port) for _ in range(300)]

        async def dribble(writer: asyncio.StreamWriter) -> None:
            writer.write(b"GET /slow HTTP/1.1\r\n")
            for i in range(20):
                writer.write(b"X-%d: v\r\n" % i)
                await asyncio.sleep(0.1)

        tasks = [asyncio.create_task(dribble(w)) for _, w in dribblers]
        await wait_until(lambda: len(proxy.clients) == len(dribblers))  # all accepted
        loop = asyncio.get_running_loop()
        started = loop.time()
        raw = await send_raw(
            proxy.port, b"GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        elapsed = loop.time() - started
        for task in tasks:
            task.cancel()
        for _, writer in dribblers:
            writer.close()
        assert [r.path for r in up.requests] == ["/fast"]
    assert raw.startswith(b"HTTP/1.1 200 OK")
    assert elapsed < 0.5


def test_reason_phrases_are_the_standard_ones() -> None:
    """The status line's phrases kept here are http.HTTPStatus's, which answers
    for every other status; a status without a name has an empty phrase."""
    import http

    from h2ping.http1.messages import _REASONS, reason_phrase

    for status, phrase in _REASONS.items():
        assert phrase == http.HTTPStatus(status).phrase.encode(), status
    assert reason_phrase(418) == http.HTTPStatus(418).phrase.encode()
    assert reason_phrase(599) == b""


@pytest.mark.parametrize(
    ("head", "reason"),
    [
        (b"GET * HTTP/1.1\r\nHost: a\r\n", b"request target * is only valid with OPTIONS"),
        (
            b"PUT / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n",
            b"Transfer-Encoding in an HTTP/1.0 request",
        ),
    ],
)
async def test_framing_and_target_rules_say_what_is_wrong(head: bytes, reason: bytes) -> None:
    async with proxy_and_upstream() as (proxy, up):
        raw = await send_raw(proxy.port, head + b"\r\n")
        assert up.requests == []
    assert raw.startswith(b"HTTP/1.1 400 ")
    assert b"connection: close" in raw.partition(b"\r\n\r\n")[0]
    assert reason in raw.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize(
    ("target", "base", "path"),
    [
        (b"*", "", "*"),
        (b"*", "/v1?key=k", "*"),  # a base path cannot narrow the server as a whole
        (b"http://x", "/v1", "*"),  # absolute-form without a path (RFC 9112 3.2.4)
        (b"http://x/a", "/v1", "/v1/a"),
    ],
)
async def test_options_asterisk_reaches_the_upstream_as_path_asterisk(
    target: bytes, base: str, path: str
) -> None:
    async with ScriptedUpstream(echo) as up, running_proxy(up.url + base) as proxy:
        raw = await send_raw(
            proxy.port, b"OPTIONS %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % target
        )
        assert [request.path for request in up.requests] == [path]
        assert [request.method for request in up.requests] == ["OPTIONS"]
    assert raw.startswith(b"HTTP/1.1 200 ")
