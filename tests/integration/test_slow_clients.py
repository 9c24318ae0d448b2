"""Slow clients on a long link: each holds its stream's whole window, and windows
grow with the link. What they can hold together is bounded for the process
(-receive-window-budget), not only per stream or per connection."""

from __future__ import annotations

import asyncio
import contextlib
import socket

from h2ping.testing import ScriptedRequest, ScriptedUpstream, StreamClosed

from ..conftest import running_proxy, wait_until

CLIENTS = 8
WINDOW_CAP = 4 * 1024 * 1024  # -max-receive-window: each stream's window at most
BUDGET = 1024 * 1024  # -receive-window-budget: all the windows' growth together
FLOOR = 128 * 1024  # each stream's window before any growth
CHUNK = b"x" * 16384


async def endless(request: ScriptedRequest) -> None:
    await request.send_headers(200)
    with contextlib.suppress(StreamClosed):
        while True:
            await request.send_data(CHUNK)


async def slow_client(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client that asks for the download and reads none of it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"GET /download HTTP/1.1\r\nHost: h2ping.test\r\n\r\n")
    return reader, writer


async def test_what_slow_clients_hold_is_bounded_for_the_process() -> None:
    async with (
        ScriptedUpstream(endless, auto_ping_ack=False) as up,
        running_proxy(up.url, max_receive_window=WINDOW_CAP, receive_window_budget=BUDGET) as proxy,
    ):
        clients = [await slow_client(proxy.port) for _ in range(CLIENTS)]
        try:
            await wait_until(lambda: len(up.requests) == CLIENTS)
            # The preface PING's ACK comes 250 ms late: a long link, for which the
            # windows grow to their cap.
            await asyncio.sleep(0.25)
            (conn,) = up.connections
            conn.hold_ping_acks = False
            assert proxy.pool is not None
            (upstream_conn,) = proxy.pool.connections
            await wait_until(lambda: upstream_conn.window.size == WINDOW_CAP)
            streams = list(upstream_conn.table.streams.values())
            assert len(streams) == CLIENTS

            def held() -> int:
                return sum(stream.unacked for stream in streams)

            # Every client is full and holds its stream's credit: nothing more comes.
            await wait_until(lambda: held() >= CLIENTS * FLOOR, timeout=10)
            await asyncio.sleep(0.5)
            before = held()
            await asyncio.sleep(0.5)
            assert held() == before, "still growing"
            assert before <= BUDGET + CLIENTS * FLOOR, before
            assert proxy.pool.window_budget.granted <= BUDGET
        finally:
            for _, writer in clients:
                writer.close()
