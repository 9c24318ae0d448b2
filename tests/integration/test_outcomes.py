"""Every request ends in exactly one outcome, whatever ends it."""

from __future__ import annotations

import asyncio
import logging

import pytest
from h2.errors import ErrorCodes

from h2ping import Proxy
from h2ping.testing import ScriptedRequest, ScriptedUpstream

from ..conftest import assert_nothing_left, send_raw

OUTCOMES = ("completed", "failed", "aborted", "cancelled", "rejected", "cut_at_shutdown")


async def handler(request: ScriptedRequest) -> None:
    await request.body()
    if request.path == "/ok":
        await request.respond(200, body=b"ok")
    elif request.path == "/reset":
        request.reset(ErrorCodes.INTERNAL_ERROR)
    elif request.path == "/abort":
        await request.send_headers(200)
        await request.send_data(b"part of it")
        await asyncio.sleep(0.2)  # the client has the head by now: no 502 can replace it
        request.reset(ErrorCodes.INTERNAL_ERROR)
    else:
        await asyncio.Event().wait()  # /hang and /hold: never answered


def get(path: str, close: bool = True) -> bytes:
    return b"GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (path, b"Connection: close\r\n" * close)


async def test_outcomes_add_up_to_requests_after_a_mixed_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="h2ping")
    async with ScriptedUpstream(handler) as up:
        proxy = Proxy(upstream=up.url, listen="127.0.0.1:0")
        await proxy.start()
        port = proxy.port
        stats = proxy.stats
        assert (await send_raw(port, get(b"/ok"))).startswith(b"HTTP/1.1 200 ")
        assert (await send_raw(port, get(b"/reset"))).startswith(b"HTTP/1.1 502 ")
        assert b"part of it" in await send_raw(port, get(b"/abort"))
        # Refused by the listener: a bad head, a missing Host, a bad chunked body
        # (its exchange had already started).
        assert (await send_raw(port, b"NOT HTTP\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
        assert (await send_raw(port, b"GET / HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
        bad_chunk = b"POST /ok HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
        assert (await send_raw(port, bad_chunk)).startswith(b"HTTP/1.1 400 ")
        # The client leaves while its request waits for the upstream.
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(get(b"/hang"))
        await up.wait_for(lambda: any(r.path == "/hang" for r in up.requests))
        writer.close()
        [hang] = [r for r in up.requests if r.path == "/hang"]
        await asyncio.wait_for(hang.reset_by_client.wait(), 5)
        # Still waiting at shutdown: one being forwarded, one pipelined behind it
        # (one write: the proxy has read both heads once the first arrives).
        _, holder = await asyncio.open_connection("127.0.0.1", port)
        holder.write(get(b"/hold", close=False) + get(b"/ok"))
        await up.wait_for(lambda: any(r.path == "/hold" for r in up.requests))
        await proxy.stop(grace=0.1)
        await assert_nothing_left(proxy)
        holder.close()
    counts = {name: getattr(stats, name) for name in OUTCOMES}
    assert counts == {
        "completed": 1,
        "failed": 1,
        "aborted": 1,
        "cancelled": 1,
        "rejected": 3,
        "cut_at_shutdown": 2,
    }
    assert sum(counts.values()) == stats.requests == 9
    assert "shutdown grace of 0.1s expired: cutting 2 requests on 1 client connection" in (
        caplog.text
    )
