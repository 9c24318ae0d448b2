"""The upstream's SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 section 6.5.2): a head over
it is answered 431 here and never sent, since a server that receives one ends the
whole connection (the scripted upstream does as h2 does: GOAWAY
ENHANCE_YOUR_CALM); and a request the upstream refuses that way does not open
connection after connection. Real TLS, a real aiohttp client, the scripted h2
upstream advertising a small limit."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest
from h2.errors import ErrorCodes

from h2ping.testing import ScriptedRequest

from ..conftest import TLSFiles, read_body, run_hypercorn, running_proxy, scripted

LIMIT = 8192
SLOW_BODY = b"s" * 300_000


def head_of(size: int) -> dict[str, str]:
    """Header fields adding about ``size`` bytes to a header list, as HTTP/2 counts."""
    return {f"x-big-{i}": "v" * 968 for i in range(size // 1000 + 1)}  # 1,000 bytes each


async def handler(request: ScriptedRequest) -> None:
    body = await request.body()
    if request.path == "/slow":
        await asyncio.sleep(0.3)  # still being answered when the big head comes
        body = SLOW_BODY
    await request.respond(200, [("content-length", str(len(body)))], body)


async def get(session: aiohttp.ClientSession, url: str, **kw: object) -> tuple[int, str, bytes]:
    async with session.get(url, **kw) as resp:  # type: ignore[arg-type]
        return resp.status, resp.headers.get("proxy-status", ""), await resp.read()


async def test_a_head_over_the_limit_is_431_while_a_neighbour_completes(
    tls: TLSFiles, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="h2ping")
    async with (
        scripted(tls, handler, max_header_list_size=LIMIT) as up,
        running_proxy(up.url, tls) as proxy,
        aiohttp.ClientSession() as session,
    ):
        slow = asyncio.create_task(get(session, proxy.url + "/slow"))
        await up.wait_for(lambda: len(up.requests) == 1)
        status, proxy_status, body = await get(session, proxy.url + "/big", headers=head_of(9000))
        assert slow.done() is False  # the neighbour was in flight all along
        assert await slow == (200, "", SLOW_BODY)
        assert [request.path for request in up.requests] == ["/slow"]
        assert len(up.connections) == 1 and not up.connections[0].closed
        # A head within the limit still goes, on the same connection.
        assert (await get(session, proxy.url + "/small", headers=head_of(4000)))[0] == 200
        assert len(up.connections) == 1
        assert proxy.stats.replays == 0
    assert status == 431
    assert "error=http_request_error" in proxy_status
    assert f"limit of {LIMIT}" in proxy_status
    assert body.endswith(b"\n") and body.count(b"\n") == 1
    assert b"SETTINGS_MAX_HEADER_LIST_SIZE" in body
    lines = [r.getMessage() for r in caplog.records if "/big" in r.getMessage()]
    assert len(lines) == 1 and ": 431 " in lines[0], lines


async def test_a_first_head_over_what_any_server_takes_waits_for_the_settings(
    tls: TLSFiles,
) -> None:
    """Before the peer's SETTINGS its limit reads unlimited; a head larger than
    the provisional size does not go behind the preface, but waits to be checked
    (here: refused, and nothing sent)."""
    async with (
        scripted(tls, handler, max_header_list_size=LIMIT * 2) as up,
        running_proxy(up.url, tls) as proxy,
        aiohttp.ClientSession() as session,
    ):
        status, proxy_status, _ = await get(session, proxy.url + "/big", headers=head_of(20_000))
        assert up.requests == []
        assert [conn.closed for conn in up.connections] == [False]
        # One under the limit, but over the provisional size, goes once known.
        first = await get(session, proxy.url + "/mid", headers=head_of(LIMIT * 2 - 2000))
        assert first[0] == 200
        assert [request.path for request in up.requests] == ["/mid"]
    assert status == 431
    assert f"limit of {LIMIT * 2}" in proxy_status


async def test_a_request_the_upstream_chokes_on_is_tried_once_more_only(
    tls: TLSFiles, caplog: pytest.LogCaptureFixture
) -> None:
    """The upstream ends the connection (GOAWAY ENHANCE_YOUR_CALM, the stream
    unprocessed) for one request, whatever its size: one more try on a new
    connection, then a 502 that says why; not a connection per replay."""
    caplog.set_level(logging.INFO, logger="h2ping")

    async def choke(request: ScriptedRequest) -> None:
        if request.path == "/poison":
            request.connection.goaway(max(request.stream_id - 2, 0), ErrorCodes.ENHANCE_YOUR_CALM)
            request.connection.close()
            return
        await handler(request)

    async with (
        scripted(tls, choke) as up,
        running_proxy(up.url, tls) as proxy,
        aiohttp.ClientSession() as session,
    ):
        status, proxy_status, body = await get(session, proxy.url + "/poison")
        assert len(up.connections) == 2
        assert proxy.stats.replays == 1
        assert (await get(session, proxy.url + "/after"))[0] == 200
    assert status == 502
    assert "ENHANCE_YOUR_CALM" in proxy_status
    assert b"not retried again" in body
    messages = [r.getMessage() for r in caplog.records if "/poison" in r.getMessage()]
    assert any("replaying (GOAWAY ENHANCE_YOUR_CALM" in m for m in messages), messages
    assert sum("502" in m for m in messages) == 1, messages


async def test_an_upstream_431_is_passed_on_and_opens_nothing(tls: TLSFiles) -> None:
    async def refuse(request: ScriptedRequest) -> None:
        await request.respond(431, [("content-length", "4")], b"big\n")
        request.connection.goaway(request.stream_id, ErrorCodes.ENHANCE_YOUR_CALM)

    async with (
        scripted(tls, refuse) as up,
        running_proxy(up.url, tls) as proxy,
        aiohttp.ClientSession() as session,
    ):
        assert await get(session, proxy.url + "/x") == (431, "", b"big\n")
        assert len(up.requests) == 1 and len(up.connections) == 1
        assert proxy.stats.replays == 0


async def test_a_first_head_sent_behind_the_preface_and_choked_on_is_then_431(
    tls: TLSFiles,
) -> None:
    """A head within the provisional size goes right behind the preface, before
    the server has said its (smaller) limit; the server ends that connection.
    The one more try waits for a connection whose limit is known, and is
    answered 431 there, unsent: two connections in all, not seven."""
    async with (
        scripted(tls, handler, max_header_list_size=4096) as up,
        running_proxy(up.url, tls) as proxy,
        aiohttp.ClientSession() as session,
    ):
        status, proxy_status, _ = await get(session, proxy.url + "/big", headers=head_of(6000))
        assert up.requests == []
        assert len(up.connections) == 2
        assert proxy.stats.replays == 1
        assert (await get(session, proxy.url + "/small"))[0] == 200
    assert status == 431
    assert "limit of 4096" in proxy_status


async def slow_app(scope: dict, receive: Any, send: Any) -> None:
    """A real server's app: ``/slow`` answers after a while, the rest at once."""
    if scope["type"] != "http":
        return
    await read_body(receive)
    body = SLOW_BODY if scope["path"] == "/slow" else b"ok"
    if scope["path"] == "/slow":
        await asyncio.sleep(0.3)
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def test_against_hypercorn_the_issues_head_is_431_and_the_neighbour_completes(
    tls: TLSFiles,
) -> None:
    """hypercorn (h2) advertises SETTINGS_MAX_HEADER_LIST_SIZE 65,536 and ends the
    connection for a head over it. 250 fields, about 60 KB as HTTP/1.1 sends them
    (under h2ping's own 64 KiB and 256 fields), are over 65,536 as HTTP/2 counts."""
    fields = {f"x-f-{i:03d}": "v" * 230 for i in range(250)}
    assert sum(len(k) + len(v) + 4 for k, v in fields.items()) < 64 * 1024
    async with (
        run_hypercorn(slow_app, tls) as url,
        running_proxy(url, tls) as proxy,
        aiohttp.ClientSession() as session,
    ):
        slow = asyncio.create_task(get(session, proxy.url + "/slow"))
        await asyncio.sleep(0.1)  # /slow is on the connection, being answered
        status, proxy_status, _ = await get(session, proxy.url + "/big", headers=fields)
        assert not slow.done()
        assert await slow == (200, "", SLOW_BODY)
        assert proxy.pool is not None and len(proxy.pool.connections) == 1
        assert proxy.stats.replays == 0
    assert status == 431
    assert "limit of 65536" in proxy_status
