"""The middlebox relays in h2ping.testing, on their own: a test tool must leave
nothing behind and stop quietly, whatever state its flows are in."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import uvloop

from h2ping.testing import BlackholeRelay

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "uvloop": uvloop.new_event_loop,
    "asyncio": asyncio.new_event_loop,
}


class Echo(asyncio.Protocol):
    """An origin with no task of its own, so that only the relay's tasks are at
    stake when the loop shuts down."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


def relay_tasks() -> list[asyncio.Task[Any]]:
    return [
        t
        for t in asyncio.all_tasks()
        if getattr(t.get_coro(), "__qualname__", "").startswith("Relay.")
    ]


@pytest.mark.parametrize("loop_factory", LOOPS.values(), ids=LOOPS.keys())
def test_blackhole_relay_stops_quietly_with_a_silenced_flow(
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    """A test that ends with a silenced flow still open: its loop shuts down right
    after ``stop()``. It runs on a loop of its own so that what the loop reports
    while shutting down reaches the test."""
    errors: list[dict[str, Any]] = []
    left: list[asyncio.Task[Any]] = []

    async def scenario() -> None:
        server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
        relay = BlackholeRelay("127.0.0.1", server.sockets[0].getsockname()[1])
        await relay.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
        try:
            writer.write(b"hello")
            assert await asyncio.wait_for(reader.readexactly(5), 5) == b"hello"
            assert relay.blackhole() == 1
            writer.write(b"held")  # read by the relay, never forwarded
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.read(1), 0.2)
        finally:
            writer.close()
            server.close()
            async with asyncio.timeout(5):  # adds no task: stop() is the last await
                await relay.stop()
            left.extend(relay_tasks())

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.get_loop().set_exception_handler(lambda loop, context: errors.append(context))
        runner.run(scenario())
    assert not errors, [context.get("exception") or context["message"] for context in errors]
    assert not left, f"stop() returned before the relay's tasks ended: {left}"
