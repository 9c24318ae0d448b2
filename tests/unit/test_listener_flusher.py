"""OutputFlusher: every client connection's output of a loop iteration, one write
each, from one callback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from h2ping.http1.listener import ClientConnection, ListenerLimits, OutputFlusher
from h2ping.stats import Stats

from ..fakes import FakeTransport


def connection(flusher: OutputFlusher, transport: FakeTransport) -> ClientConnection:
    def no_requests(*args: object) -> Any:
        raise AssertionError("no requests here")

    conn = ClientConnection(no_requests, set(), Stats(), ListenerLimits(30, 30), flusher)
    conn.connection_made(transport)
    return conn


async def test_one_callback_writes_every_connection_once(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    flusher = OutputFlusher(loop)
    transports = [FakeTransport(strict=False) for _ in range(50)]
    conns = [connection(flusher, t) for t in transports]
    scheduled = []
    real_call_soon = loop.call_soon

    def counting_call_soon(callback: Any, *args: Any, **kwargs: Any) -> asyncio.Handle:
        if getattr(callback, "__self__", None) is flusher:
            scheduled.append(callback)
        return real_call_soon(callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_soon", counting_call_soon)
    for i, conn in enumerate(conns):
        conn.output.send(b"a%d " % i, b"b")
        conn.output.send(b"c")
    assert all(not t.writes for t in transports)  # nothing before the loop turns
    assert len(scheduled) == 1
    await asyncio.sleep(0)
    assert [t.writes for t in transports] == [[b"a%d bc" % i] for i in range(50)]
    conns[3].output.send(b"next")  # a later iteration gets a callback of its own
    assert len(scheduled) == 2
    await asyncio.sleep(0)
    assert transports[3].writes == [b"a3 bc", b"next"]


async def test_a_failing_connection_is_cut_and_the_others_still_written() -> None:
    flusher = OutputFlusher(asyncio.get_running_loop())
    good, bad, other = (
        FakeTransport(strict=False),
        FakeTransport(strict=False, fail=True),
        FakeTransport(strict=False),
    )
    for transport in (good, bad, other):
        connection(flusher, transport).output.send(b"x")
    await asyncio.sleep(0)
    assert good.writes == other.writes == [b"x"]
    assert bad.aborted and not bad.writes


async def test_a_whole_response_goes_at_once_unless_another_connection_has_output_this_turn() -> (
    None
):
    flusher = OutputFlusher(asyncio.get_running_loop())
    writers: list[Any] = []

    class Handler:
        def __init__(self, request: Any, writer: Any) -> None:
            writers.append(writer)

        def start(self) -> None:
            pass

    def answer(writer: Any) -> None:
        writer.start(200, [(b"content-length", b"2")])
        writer.write(b"ok")
        writer.end()

    transports = [FakeTransport(strict=False) for _ in range(3)]
    for transport in transports:
        conn = ClientConnection(Handler, set(), Stats(), ListenerLimits(30, 30), flusher)
        conn.connection_made(transport)
        request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        conn.get_buffer(len(request))[: len(request)] = request
        conn.buffer_updated(len(request))
    first, second, third = writers
    answer(first)
    assert len(transports[0].writes) == 1  # alone in this turn: at once
    answer(second)
    answer(third)
    # Others had output this turn: theirs go out together at its end, so that
    # their clients' next requests come back together too.
    assert not transports[1].writes and not transports[2].writes
    await asyncio.sleep(0)
    assert [len(t.writes) for t in transports] == [1, 1, 1]
