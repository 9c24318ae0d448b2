"""DelayLink: every byte crosses it half a round trip late each way, in order, at
most at its rate; a half-close and a close arrive after the bytes before them."""

from __future__ import annotations

import asyncio
import time

from h2ping.testing import DelayLink


async def echo_server() -> asyncio.Server:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    return await asyncio.start_server(echo, "127.0.0.1", 0)


async def test_a_round_trip_costs_the_rtt_and_order_holds() -> None:
    async with await echo_server() as server:
        port = server.sockets[0].getsockname()[1]
        async with DelayLink("127.0.0.1", port, rtt=0.1) as link:
            reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
            started = time.monotonic()
            writer.write(b"ping")
            assert await reader.readexactly(4) == b"ping"
            took = time.monotonic() - started
            assert 0.095 <= took < 0.3, took
            # Many small writes: all back, in order, in about one round trip.
            started = time.monotonic()
            for i in range(200):
                writer.write(b"%04d" % i)
            got = await reader.readexactly(800)
            assert got == b"".join(b"%04d" % i for i in range(200))
            assert time.monotonic() - started < 0.3
            writer.write_eof()  # the echo server sees it a half trip later, and closes
            assert await reader.read() == b""
            writer.close()


async def test_the_rate_cap_holds() -> None:
    async with await echo_server() as server:
        port = server.sockets[0].getsockname()[1]
        async with DelayLink("127.0.0.1", port, rtt=0.01, rate=1_000_000) as link:
            reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
            started = time.monotonic()
            writer.write(b"x" * 200_000)  # 0.2 s each way at 1 MB/s, overlapping
            await reader.readexactly(200_000)
            took = time.monotonic() - started
            assert 0.2 <= took < 1.0, took
            writer.close()


async def test_a_target_that_refuses_closes_the_client() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()  # nothing listens there now
    async with DelayLink("127.0.0.1", port, rtt=0.02) as link:
        reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
        assert await asyncio.wait_for(reader.read(), 2) == b""
        writer.close()
