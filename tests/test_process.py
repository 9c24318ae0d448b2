"""The process as launchers see it: startup line, exit codes, signals."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from .conftest import (
    TLSFiles,
    assert_not_accepting,
    free_port,
    read_body,
    run_hypercorn,
    wait_for_port,
)


@asynccontextmanager
async def h2ping_process(*args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "h2ping",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def proxy_flags(port: int, upstream: str, tls: TLSFiles) -> list[str]:
    return ["-listen", f"127.0.0.1:{port}", "-upstream", upstream, "-ca-file", tls.ca_file]


async def read_line_with(proc: asyncio.subprocess.Process, needle: str, timeout: float = 10) -> str:
    assert proc.stderr is not None
    async with asyncio.timeout(timeout):
        while True:
            line = (await proc.stderr.readline()).decode()
            if not line:
                raise AssertionError(f"process ended before printing {needle!r}")
            if needle in line:
                return line


async def test_bad_flag_exits_2_with_one_line() -> None:
    async with h2ping_process("-upstream", "https://x", "-ping-interval", "soon") as proc:
        _, stderr = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 2
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert "-ping-interval" in lines[0] and "soon" in lines[0]


async def test_help_exits_0() -> None:
    async with h2ping_process("--help") as proc:
        stdout, _ = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 0
    assert b"-upstream" in stdout and b"-ping-interval" in stdout


async def test_port_in_use_exits_1_with_message() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with h2ping_process(
            "-listen", f"127.0.0.1:{port}", "-upstream", "https://127.0.0.1:1"
        ) as proc:
            _, stderr = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 1
    last = stderr.decode().strip().splitlines()[-1]
    assert last.endswith(f"listen 127.0.0.1:{port}: address already in use")


async def test_startup_line_and_non_loopback_warning() -> None:
    port = free_port()
    async with h2ping_process(
        "-listen", f"0.0.0.0:{port}", "-upstream", "https://upstream.example", "-name", "genrm"
    ) as proc:
        line = await read_line_with(proc, "listening on")
        warning = await read_line_with(proc, "not loopback")
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    assert f"h2ping genrm: listening on 0.0.0.0:{port} -> https://upstream.example" in line
    assert "WARNING" in warning


async def test_sigterm_drains_in_flight_request(tls: TLSFiles) -> None:
    arrived = asyncio.Event()

    async def slow_app(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await read_body(receive)
        arrived.set()
        await asyncio.sleep(1.0)
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]}
        )
        await send({"type": "http.response.body", "body": b"done"})

    port = free_port()
    async with (
        run_hypercorn(slow_app, tls) as url,
        h2ping_process(*proxy_flags(port, url, tls), "-shutdown-grace", "10s") as proc,
        aiohttp.ClientSession() as session,
    ):
        await read_line_with(proc, "listening on")
        await wait_for_port(port)
        request = asyncio.create_task(session.get(f"http://127.0.0.1:{port}/slow"))
        await asyncio.wait_for(arrived.wait(), 5)
        proc.send_signal(signal.SIGTERM)
        await read_line_with(proc, "draining 1 in-flight")
        resp = await asyncio.wait_for(request, 10)
        assert resp.status == 200
        assert await resp.read() == b"done"
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        # No longer accepting.
        await assert_not_accepting(port, "the proxy after shutdown")


async def test_grace_expiry_cuts_and_exits_0(tls: TLSFiles) -> None:
    async def never(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await read_body(receive)
        await asyncio.sleep(30)

    port = free_port()
    async with (
        run_hypercorn(never, tls) as url,
        h2ping_process(*proxy_flags(port, url, tls), "-shutdown-grace", "500ms") as proc,
        aiohttp.ClientSession() as session,
    ):
        await read_line_with(proc, "listening on")
        request = asyncio.create_task(session.get(f"http://127.0.0.1:{port}/never"))
        await asyncio.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        try:
            resp = await asyncio.wait_for(request, 5)
            await resp.read()
        except aiohttp.ClientError:
            pass  # cut: exactly what grace expiry means
        else:
            raise AssertionError(f"got a clean response {resp.status} after the grace expired")
