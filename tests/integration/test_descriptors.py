"""Out of file descriptors: the command says so once, in words, keeps its CPU,
and serves again once descriptors are free, on uvloop and on asyncio's loop.

The proxy runs as a process of its own under a hard ``RLIMIT_NOFILE`` of 40 (it
raises the soft limit to the hard one at start), in front of a scripted h2c
upstream; 60 clients connect and hold their connections for the saturated
seconds, then close."""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from h2ping.process.descriptors import DescriptorWatch, is_shortage
from h2ping.stats import Stats
from h2ping.testing import ScriptedUpstream

from ..conftest import free_port, wait_until
from ..launcher import launch

LIMIT = 40
CLIENTS = 60
SATURATED_SECONDS = 3.0
#: Without uvloop, ``python -m h2ping`` runs on asyncio's own loop.
ON_ASYNCIO = "import sys; sys.modules['uvloop'] = None; from h2ping.process.cli import main; main()"


def low_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.one_loop  # the proxy's own loop is the parameter
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_running_out_of_descriptors_is_said_once_and_passes(
    tmp_path: Path, loop: str
) -> None:
    async with ScriptedUpstream() as upstream:
        port = free_port()
        program = ["-m", "h2ping"] if loop == "uvloop" else ["-c", ON_ASYNCIO]
        command = [sys.executable, *program, "--listen", f"127.0.0.1:{port}"]
        command += ["--upstream", upstream.url, "--ready-file", str(tmp_path / "ready")]
        command += ["--admin-listen", f"127.0.0.1:{free_port()}"]
        proxy = await launch(
            command, log=tmp_path / "log", ready_file=tmp_path / "ready", preexec_fn=low_limit
        )
        try:
            url = f"http://127.0.0.1:{port}/x"
            async with aiohttp.ClientSession() as session:
                async with session.get(url) as resp:
                    assert resp.status == 200
                idle = open_descriptors(proxy.pid)
                held = [socket.create_connection(("127.0.0.1", port)) for _ in range(CLIENTS)]
                await wait_until(lambda: "out of file descriptors" in proxy.log_text())
                before = cpu_seconds(proxy.pid)
                await asyncio.sleep(SATURATED_SECONDS)  # silence: the clients hold on
                spent = cpu_seconds(proxy.pid) - before
                for sock in held:
                    sock.close()
                # The clients' connections end in the proxy.
                await wait_until(lambda: open_descriptors(proxy.pid) <= idle)
                async with session.get(url) as resp:
                    assert resp.status == 200, "not served again once descriptors were free"
        finally:
            await proxy.terminate()
    text = proxy.log_text()
    warnings = [line for line in text.splitlines() if "out of file descriptors" in line]
    assert len(warnings) == 1, text
    assert f"limit {LIMIT} soft / {LIMIT} hard" in warnings[0]
    assert "raise the limit (ulimit -n" in warnings[0]
    assert "Traceback" not in text and "ERROR" not in text, text
    assert spent < 0.25 * SATURATED_SECONDS, f"{spent:.2f}s of CPU in {SATURATED_SECONDS}s"
    (stopped,) = [line for line in text.splitlines() if "stopped:" in line]
    assert "descriptor_shortages=0" not in stopped


# ------------------------------------------------------------------ the watch alone


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_one_warning_a_minute_with_the_count_meanwhile(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, stats = Clock(), Stats()
    watch = DescriptorWatch(stats, clock, count=lambda: 38, limits=lambda: (40, 80))
    caplog.set_level("DEBUG", logger="h2ping")
    for _ in range(5):
        watch.shortage("accept")
        clock.now += 10
    clock.now = 61
    watch.shortage("accept")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2
    assert "38 open, limit 40 soft / 80 hard" in warnings[0]
    assert "5 shortages in the last 61s" in warnings[1]
    assert stats.descriptor_shortages == 6


def test_what_counts_as_a_shortage() -> None:
    assert is_shortage(OSError(24, "Too many open files"))
    assert is_shortage(OSError(23, "Too many open files in system"))
    assert not is_shortage(OSError(111, "Connection refused"))
    assert not is_shortage(None)
