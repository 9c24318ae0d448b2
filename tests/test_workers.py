"""--workers N: processes sharing one port, each with its own upstream pool."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys

import aiohttp

from h2ping.testing import ScriptedUpstream

from .conftest import free_port, wait_for_port


async def start_workers(
    port: int, upstream: str, workers: int, *, start_new_session: bool = False
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "h2ping", "-listen", f"127.0.0.1:{port}",
        "-upstream", upstream, "-workers", str(workers),
        stderr=asyncio.subprocess.PIPE, start_new_session=start_new_session,
    )  # fmt: skip


async def test_two_workers_share_the_port_and_drain_on_sigterm() -> None:
    async with ScriptedUpstream() as up:
        port = free_port()
        proc = await start_workers(port, up.url, 2)
        try:
            assert proc.stderr is not None
            lines = [
                (await asyncio.wait_for(proc.stderr.readline(), 10)).decode() for _ in range(2)
            ]
            assert all("listening on" in line for line in lines), lines
            assert "/1: listening on" in "".join(lines) and "/2: listening on" in "".join(lines)
            await wait_for_port(port)
            # Separate client connections: the kernel spreads them over the workers.
            for _ in range(40):
                async with aiohttp.ClientSession() as session:
                    async with session.post(f"http://127.0.0.1:{port}/w", data=b"x") as resp:
                        assert resp.status == 200
                        assert await resp.read() == b"x"
                if len(up.connections) >= 2:
                    break
            # Each worker has its own pool, so two workers mean two upstream connections.
            assert len(up.connections) == 2
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 10) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_workers_exit_1_when_the_port_is_taken() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = await start_workers(port, "https://127.0.0.1:1", 3)
        _, stderr = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 1
    assert b"address already in use" in stderr


def test_workers_need_a_fixed_port() -> None:
    import pytest

    from h2ping.config import Config, ConfigError, parse_listen, parse_upstream

    with pytest.raises(ConfigError, match="fixed listen port"):
        Config(upstream=parse_upstream("https://h"), listen=parse_listen("127.0.0.1:0"), workers=2)


async def test_ctrl_c_to_the_process_group_drains_once() -> None:
    """A terminal's Ctrl-C goes to the whole foreground process group: every
    worker must still drain and exit 0, not take it as a second signal."""
    async with ScriptedUpstream() as up:
        port = free_port()
        proc = await start_workers(port, up.url, 2, start_new_session=True)
        try:
            assert proc.stderr is not None
            for _ in range(2):
                line = await asyncio.wait_for(proc.stderr.readline(), 10)
                assert b"listening on" in line
            os.killpg(proc.pid, signal.SIGINT)  # what the terminal does
            _, rest = await asyncio.wait_for(proc.communicate(), 10)
            assert proc.returncode == 0, rest.decode()
            assert rest.count(b"stopped: requests=") == 2, rest.decode()
            assert b"exiting now" not in rest
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_workers_die_with_their_parent() -> None:
    async with ScriptedUpstream() as up:
        port = free_port()
        proc = await start_workers(port, up.url, 2)
        assert proc.stderr is not None
        for _ in range(2):
            await asyncio.wait_for(proc.stderr.readline(), 10)
        proc.kill()  # SIGKILL: the parent cannot forward anything
        await proc.wait()
        for _ in range(50):
            await asyncio.sleep(0.1)
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return  # no worker left listening
            writer.close()
        raise AssertionError("workers kept running after their parent was killed")
