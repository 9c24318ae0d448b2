"""The command dials the upstream as it starts, after its ready line and file: the
first request finds a connection open, and an upstream that cannot be reached is
told at start, in one line with what to try."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import aiohttp
import pytest

from h2ping.testing import ScriptedUpstream

from ..conftest import free_port, wait_until
from ..launcher import launch

pytestmark = pytest.mark.one_loop  # the loop under test is the command's


def command(port: int, upstream: str, ready: Path) -> list[str]:
    return [
        sys.executable, "-m", "h2ping", "-listen", f"127.0.0.1:{port}",
        "-upstream", upstream, "-ready-file", str(ready),
    ]  # fmt: skip


async def test_an_upstream_that_cannot_be_reached_is_told_at_start(tmp_path: Path) -> None:
    upstream = f"https://127.0.0.1:{free_port()}"  # nothing listens there
    ready = tmp_path / "ready"
    proxy = await launch(
        command(free_port(), upstream, ready), log=tmp_path / "log", ready_file=ready
    )
    try:
        await wait_until(lambda: "cannot be reached at start" in proxy.log_text())
    finally:
        assert await proxy.terminate() == 0
    lines = proxy.log_text().splitlines()
    (warning,) = [line for line in lines if " WARNING " in line]
    assert warning.split(": ", 1)[1] == (
        f"upstream {upstream} cannot be reached at start: nothing accepts connections there "
        f"(connection_refused: {upstream.removeprefix('https://')} refused the connection); "
        f"requests get 502 until it can be; to see why: h2ping check -upstream {upstream}"
    )
    # After the line launchers wait for, never before it.
    listening = next(i for i, line in enumerate(lines) if "listening on" in line)
    assert lines.index(warning) > listening


async def test_the_first_request_finds_the_connection_open(tmp_path: Path) -> None:
    port, ready = free_port(), tmp_path / "ready"
    async with ScriptedUpstream() as upstream:
        proxy = await launch(
            command(port, upstream.url, ready), log=tmp_path / "log", ready_file=ready
        )
        try:
            await upstream.wait_for(lambda: len(upstream.connections) == 1)
            assert not upstream.requests  # opened before any request
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/x") as resp:
                    assert resp.status == 200
            assert len(upstream.connections) == 1  # the request took it
        finally:
            assert await proxy.terminate() == 0
    assert "connections_opened=1" in proxy.log_text()
    assert " WARNING " not in proxy.log_text()


async def test_an_upstream_that_allows_no_streams_is_told_at_start_without_a_dial_loop(
    tmp_path: Path,
) -> None:
    port, ready = free_port(), tmp_path / "ready"
    async with ScriptedUpstream(max_concurrent_streams=0) as upstream:
        proxy = await launch(
            command(port, upstream.url, ready), log=tmp_path / "log", ready_file=ready
        )
        try:
            await wait_until(lambda: "allows no streams at start" in proxy.log_text())
            await asyncio.sleep(1.0)  # a dial loop would open thousands meanwhile
            assert len(upstream.connections) <= 2, len(upstream.connections)
        finally:
            assert await proxy.terminate() == 0
    lines = proxy.log_text().splitlines()
    (line,) = [line for line in lines if "allows no streams at start" in line]
    assert line.split(": ", 1)[1] == (
        f"upstream {upstream.url} allows no streams at start "
        "(SETTINGS_MAX_CONCURRENT_STREAMS 0); requests get 502 until it allows some"
    )
    # And the pool's own line, once: later connections that allow none say nothing more.
    assert sum("allows no streams (SETTINGS" in line for line in lines) == 1
