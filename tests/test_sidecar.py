"""h2ping as a drop-in for the Go binary: started the way the calling framework starts
``h2-ping-sidecar`` (installed console script, Go flags, port polling, log file, SIGINT)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from h2ping import Proxy, cli

from .conftest import TLSFiles, echo_app, free_port, run_hypercorn

#: Where pip put the console scripts of the environment running the tests.
SCRIPTS = Path(sys.executable).parent
SIDECAR = SCRIPTS / "h2-ping-sidecar"


def go_flags(listen_port: int, upstream: str) -> list[str]:
    """The command line the framework builds for the Go binary, flag for flag."""
    return [
        "-listen", f"127.0.0.1:{listen_port}",
        "-upstream", upstream,
        "-ping-interval", "60s",
        "-ping-timeout", "15s",
        "-shutdown-grace", "60s",
        "-retry-body-limit", "16777216",
        "-max-conn-age", "50m",
        "-insecure-skip-verify",
    ]  # fmt: skip


async def wait_until_bound(proc: asyncio.subprocess.Process, port: int, log: Path) -> None:
    """The framework's readiness check: poll the port, fail with the log tail if the
    process dies first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15
    while True:
        if proc.returncode is not None:
            raise AssertionError(f"exited {proc.returncode}:\n{log.read_text()[-2000:]}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if loop.time() > deadline:
                raise AssertionError(f"port {port} never bound:\n{log.read_text()}") from None
            await asyncio.sleep(0.05)
        else:
            writer.close()
            return


def test_console_script_is_installed() -> None:
    assert SIDECAR.is_file() and os.access(SIDECAR, os.X_OK), SIDECAR


async def test_framework_launch_forward_and_ctrl_c(tls: TLSFiles, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "h2ping-genrm.log"
    env = {**os.environ, "GOMEMLIMIT": "4GiB", "GOMAXPROCS": "2"}
    async with run_hypercorn(echo_app, tls) as upstream:
        with log.open("wb") as log_file:
            proc = await asyncio.create_subprocess_exec(
                str(SIDECAR),
                *go_flags(port, upstream),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
            )
        try:
            await wait_until_bound(proc, port, log)
            async with aiohttp.ClientSession() as session:
                async with session.post(
                    f"http://127.0.0.1:{port}/v1/chat?x=1",
                    data=b"judge this",
                    headers={"Authorization": "Bearer secret"},
                ) as resp:
                    assert resp.status == 200
                    assert await resp.read() == b"judge this"
                    assert resp.headers["x-seen-authorization"] == "Bearer secret"
                    assert resp.headers["x-http-version"] == "2"
            proc.send_signal(signal.SIGINT)
            assert await asyncio.wait_for(proc.wait(), 15) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    lines = log.read_text().splitlines()
    text = "\n".join(lines)
    assert f"listening on 127.0.0.1:{port} -> {upstream}" in text
    assert "ignoring GOMEMLIMIT and GOMAXPROCS" in text
    assert "insecure-skip-verify is on" in text
    assert "SIGINT: draining" in text
    assert "stopped: requests=1 completed=1 failed=0" in lines[-1], lines[-1]


async def test_port_is_bound_before_the_listening_line() -> None:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        str(SIDECAR),
        "-listen", f"127.0.0.1:{port}",
        "-upstream", "https://127.0.0.1:9",
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(15):
            while b"listening on" not in (line := await proc.stderr.readline()):
                assert line, "exited before the listening line"
        # One try, no polling: a launcher that waits for the line may connect at once.
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 15) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def run_to_exit(*args: str) -> tuple[int, list[str]]:
    proc = await asyncio.create_subprocess_exec(
        str(SIDECAR), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 15)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, (stdout + stderr).decode().strip().splitlines()


async def test_help_names_the_script() -> None:
    code, lines = await run_to_exit("-help")
    assert code == 0
    assert lines[0] == "Usage: h2-ping-sidecar -upstream URL [flags]"


async def test_unreadable_ca_bundle_exits_1_and_says_so(tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"
    pem.write_text("not a certificate\n")
    code, lines = await run_to_exit(
        "-listen", "127.0.0.1:0", "-upstream", "https://127.0.0.1:9", "-ca-file", str(pem)
    )
    assert code == 1
    assert f"ERROR h2ping 127.0.0.1: ca-file {pem}: " in lines[-1], lines


async def test_admin_port_in_use_exits_1_naming_the_admin_address() -> None:
    taken = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = taken.sockets[0].getsockname()[1]
    try:
        code, lines = await run_to_exit(
            "-listen", "127.0.0.1:0", "-upstream", "https://127.0.0.1:9",
            "-admin-listen", f"127.0.0.1:{port}",
        )  # fmt: skip
    finally:
        taken.close()
    assert code == 1
    assert lines[-1].endswith(f"admin-listen 127.0.0.1:{port}: address already in use"), lines


@pytest.fixture
def h2ping_logger() -> Iterator[None]:
    """cli.main() configures the ``h2ping`` logger; put it back for the other tests."""
    logger = logging.getLogger("h2ping")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.level, logger.propagate = saved


def test_unexpected_error_ends_with_one_clear_line(
    h2ping_logger: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def broken_start(self: Proxy) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(Proxy, "start", broken_start)
    code = cli.main(["-upstream", "https://127.0.0.1:9", "-listen", "127.0.0.1:0"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert lines[-1].endswith("exiting after an unexpected error: RuntimeError: boom"), lines
    assert "Traceback (most recent call last):" in lines  # the details are in the log too
