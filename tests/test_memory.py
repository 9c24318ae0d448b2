"""Memory of a real ``python -m h2ping``: what it loads to serve."""

from __future__ import annotations

import asyncio
import signal
import sys

import aiohttp
import pytest

from h2ping.testing import ScriptedRequest

from .conftest import TLSFiles, free_port, scripted, wait_for_port

# The loop here only runs the test's clients and upstream; the process picks its own.
pytestmark = pytest.mark.asyncio(loop_factories=["uvloop"])

#: Modules for flags, paths and formats a plain proxy does not use: -admin-listen,
#: -workers, -log-format json, and the http enum of status names.
RARE_PATH_MODULES = {"h2ping.admin", "h2ping.workers", "ctypes", "json", "datetime", "http"}


async def answer(request: ScriptedRequest) -> None:
    await request.body()
    await request.respond(200, body=b"ok")


async def test_serving_loads_no_module_of_a_rare_path(tls: TLSFiles) -> None:
    """Each module costs resident memory for the process's whole life: the serving
    path (start, one request, stop) must not load those only other paths need."""
    port = free_port()
    async with scripted(tls, answer) as up:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-X", "importtime", "-m", "h2ping",
            "-listen", f"127.0.0.1:{port}", "-upstream", up.url, "-ca-file", tls.ca_file,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            stderr = asyncio.create_task(proc.communicate())
            await wait_for_port(port, timeout=10)
            async with aiohttp.ClientSession() as session:
                async with session.post(f"http://127.0.0.1:{port}/x", data=b"body") as resp:
                    assert resp.status == 200 and await resp.read() == b"ok"
            proc.send_signal(signal.SIGINT)
            _, err = await asyncio.wait_for(stderr, 10)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 0
    imported = {
        line.rpartition("|")[2].strip()
        for line in err.decode().splitlines()
        if line.startswith("import time:")
    }
    assert "h2ping.proxy" in imported  # the output is what it should be
    assert not imported & RARE_PATH_MODULES, sorted(imported & RARE_PATH_MODULES)
