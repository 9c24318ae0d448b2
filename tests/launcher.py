"""Start a sidecar the way NeMo Gym's launcher starts ``h2-ping-sidecar``.

Its own session, stdin from /dev/null, stdout and stderr appended to one log file,
the launcher's environment; readiness is only the ready file (a stale one is
deleted first, then polled for every 0.1 s); a process that exits first fails the
start with its exit code and the last 20 log lines, with the "already in use?"
hint when they say ``cannot bind``. Stopping is SIGTERM, then SIGKILL after the
grace plus 5 s. The same helper runs h2ping's script and the real Go binary.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import procguard

#: h2ping's console script in the environment running the tests.
H2PING_SIDECAR = Path(sys.executable).parent / "h2-ping-sidecar"

POLL_SECONDS = 0.1  # the launcher's poll interval
TAIL_LINES = 20  # what the launcher shows of the log when a start fails


def gym_flags(
    *,
    port: int,
    upstream: str,
    ready_file: Path,
    shutdown_grace: str = "60s",
    insecure_skip_verify: bool = False,
) -> list[str]:
    """Every flag the launcher passes, in its order, with Gym's default values."""
    flags = [
        "-listen", f"127.0.0.1:{port}",
        "-upstream", upstream,
        "-ping-interval", "60s",
        "-ping-timeout", "15s",
        "-shutdown-grace", shutdown_grace,
        "-retry-body-limit", "16777216",
        "-max-conn-age", "50m",
        "-ready-file", str(ready_file),
    ]  # fmt: skip
    return [*flags, "-insecure-skip-verify"] if insecure_skip_verify else flags


class StartFailed(AssertionError):
    """The process exited before it wrote its ready file (or never wrote it)."""

    def __init__(self, code: int | None, tail: str, address: str) -> None:
        hint = f" (is {address} already in use?)" if "cannot bind" in tail else ""
        super().__init__(f"exited with code {code} before it was ready{hint}. Log:\n{tail}")
        self.code = code
        self.tail = tail
        self.hint = hint


@dataclass
class Launched:
    proc: subprocess.Popen[bytes]
    log: Path
    ready_file: Path
    grace: float
    lines_seen: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    async def wait(self, timeout: float) -> int:
        """Wait for the exit without blocking the event loop (clients run on it)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (code := self.proc.poll()) is None:
            if loop.time() > deadline:
                raise TimeoutError(f"still running after {timeout}s:\n{self.log_text()}")
            await asyncio.sleep(0.02)
        procguard.reaper().forget(self.pid)
        return code

    async def terminate(self) -> int:
        """The launcher's stop: SIGTERM, wait grace + 5 s, then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return await self.wait(self.grace + 5)
        except TimeoutError:
            self.proc.kill()
            return await self.wait(5)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        procguard.reaper().forget(self.pid)


def _setup(preexec_fn: Callable[[], None] | None) -> Callable[[], None]:
    """The child's own process group, which dies with the test run, then ``preexec_fn``."""

    def setup() -> None:
        procguard.in_own_group()
        if preexec_fn is not None:
            preexec_fn()

    return setup


async def launch(
    command: Sequence[str | os.PathLike[str]],
    *,
    log: Path,
    ready_file: Path,
    address: str = "",
    grace: float = 60.0,
    env: dict[str, str] | None = None,
    startup_timeout: float = 30.0,
    preexec_fn: Callable[[], None] | None = None,
) -> Launched:
    """Start ``command`` and wait until ``ready_file`` exists; raises :class:`StartFailed`.
    ``preexec_fn`` runs in the child before it execs (to lower a limit, say)."""
    ready_file.unlink(missing_ok=True)  # a stale file would read as ready at once
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [os.fspath(part) for part in command],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_setup(preexec_fn),
        )
    procguard.reaper().watch(proc.pid)
    launched = Launched(proc, log, ready_file, grace)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + startup_timeout
    while not ready_file.exists():
        code = proc.poll()
        if code is not None or loop.time() > deadline:
            launched.kill()
            tail = "\n".join(launched.log_text().splitlines()[-TAIL_LINES:])
            raise StartFailed(code, tail, address)
        await asyncio.sleep(POLL_SECONDS)
    return launched


@asynccontextmanager
async def h2ping_subprocess(
    *args: str,
    stdout: int | None = None,
    env: dict[str, str] | None = None,
    start_new_session: bool = False,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m h2ping ARGS`` as a child of the test (not the launcher's way), its
    stderr piped; killed on the way out if it is still running."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "h2ping", *args,
        stdout=stdout, stderr=asyncio.subprocess.PIPE,
        env=env, start_new_session=start_new_session,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@asynccontextmanager
async def running(
    command: Sequence[str | os.PathLike[str]], **how: object
) -> AsyncIterator[Launched]:
    """:func:`launch` (same arguments), and the process killed on the way out if it is
    still running, whatever the test did."""
    launched = await launch(command, **how)  # type: ignore[arg-type]
    try:
        yield launched
    finally:
        launched.kill()


async def stop_with_two_signals(launched: Launched) -> int:
    """SIGTERM while a request is still open, so the process drains (its grace is long);
    then a second SIGTERM, which must end it at once. Returns the exit code."""
    launched.proc.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.3)
    assert launched.proc.poll() is None, "exited on the first signal with a request open"
    launched.proc.send_signal(signal.SIGTERM)
    return await launched.wait(10)
