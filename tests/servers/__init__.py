"""Independently written HTTP/2 servers as origins for h2ping, each started by the
test itself on a free loopback port with its own configuration.

Every origin answers the same routes (see ``backend.py``) and counts the requests
it received by their ``x-id`` header, so that a test can tell that nothing was
processed twice. Servers that cannot answer on their own (Apache, h2o, HAProxy,
nginx) front the in-process HTTP/1.1 backend.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import pytest

from .. import procguard
from ..conftest import wait_for_port

BIG_SIZE = 16 * 1024 * 1024
STREAM_CHUNKS = 10
STREAM_GAP_MS = 60


def big_body() -> bytes:
    """What ``GET /big`` returns: 16 MiB of ``i % 251`` (cheap to make in Node too)."""
    return (bytes(range(251)) * (BIG_SIZE // 251 + 1))[:BIG_SIZE]


def stream_chunk(i: int) -> bytes:
    return b"chunk %02d\n" % i


@dataclass
class Origin:
    name: str
    url: str
    # A graceful reload: new connections go to a new generation, the old one
    # finishes the streams it accepted.
    reload: Callable[[], Awaitable[None]]
    # x-id -> how many times the origin received that request.
    seen: Callable[[], collections.Counter[str]]


def find_binary(name: str, package: str, *candidates: str) -> str:
    """The server's binary; skip without it, except in CI (.ci/run installs it)."""
    for candidate in (name, *candidates):
        path = shutil.which(candidate) or (candidate if os.access(candidate, os.X_OK) else None)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail(f"{name} is not installed; .ci/run installs it (apt-get install {package})")
    pytest.skip(f"{name} not installed ({package})")


def ids_from_file(path: pathlib.Path) -> Callable[[], collections.Counter[str]]:
    """For servers in other processes: they append one x-id per line to ``path``."""

    def seen() -> collections.Counter[str]:
        try:
            text = path.read_text()
        except FileNotFoundError:
            return collections.Counter()
        return collections.Counter(line for line in text.splitlines() if line)

    return seen


@contextlib.asynccontextmanager
async def running_process(
    argv: Sequence[str],
    port: int,
    workdir: pathlib.Path,
    env: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """Start a server in its own process group and wait for its port; on the way
    out, stop it, then kill whatever is left of the group (old generations).
    The group dies with the test run however the run ends (:mod:`tests.procguard`)."""
    log = open(workdir / "server.log", "wb")  # noqa: SIM115 -- closed below
    proc = subprocess.Popen(
        list(argv),
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=workdir,
        env={**os.environ, **(env or {})},
        preexec_fn=procguard.in_own_group,
    )
    procguard.reaper().watch(proc.pid)
    try:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError):
                await wait_for_port(port, 0.2)
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                log_text = (workdir / "server.log").read_text()
                raise AssertionError(f"{argv[0]} did not start: {log_text}")
        yield proc
    finally:
        # The master alone: it stops its workers in its own way.
        proc.terminate()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(loop.run_in_executor(None, proc.wait), 10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group
        await loop.run_in_executor(None, proc.wait)
        procguard.reaper().forget(proc.pid)
        log.close()
