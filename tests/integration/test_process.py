"""The process as launchers see it: startup line, ready file, exit codes, signals."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ..conftest import (
    TLSFiles,
    assert_not_accepting,
    free_port,
    read_body,
    run_hypercorn,
    wait_for_port,
)
from ..launcher import (
    H2PING_SIDECAR,
    Launched,
    h2ping_subprocess,
    running,
    stop_with_two_signals,
)

# The loop here only runs the test's clients; the process under test picks its own.
pytestmark = pytest.mark.asyncio(loop_factories=["uvloop"])


def h2ping_process(
    *args: str, env: dict[str, str] | None = None
) -> AbstractAsyncContextManager[asyncio.subprocess.Process]:
    return h2ping_subprocess(*args, stdout=asyncio.subprocess.PIPE, env=env)


def proxy_flags(port: int, upstream: str, tls: TLSFiles) -> list[str]:
    return ["-listen", f"127.0.0.1:{port}", "-upstream", upstream, "-ca-file", tls.ca_file]


@asynccontextmanager
async def proxy_before(
    app: Any, tls: TLSFiles, *flags: str
) -> AsyncIterator[tuple[int, asyncio.subprocess.Process, aiohttp.ClientSession]]:
    """h2ping, with ``flags``, before a hypercorn running ``app``, once it has said that
    it listens; with a client session. Yields the port, the process and the session."""
    port = free_port()
    async with (
        run_hypercorn(app, tls) as url,
        h2ping_process(*proxy_flags(port, url, tls), *flags) as proc,
        aiohttp.ClientSession() as session,
    ):
        await read_line_with(proc, "listening on")
        yield port, proc, session


async def read_line_with(proc: asyncio.subprocess.Process, needle: str, timeout: float = 10) -> str:
    assert proc.stderr is not None
    async with asyncio.timeout(timeout):
        while True:
            line = (await proc.stderr.readline()).decode()
            if not line:
                raise AssertionError(f"process ended before printing {needle!r}")
            if needle in line:
                return line


async def lines_until(proc: asyncio.subprocess.Process, needle: str) -> list[str]:
    """Every stderr line up to and including the first with ``needle``."""
    assert proc.stderr is not None
    lines: list[str] = []
    async with asyncio.timeout(10):
        while not lines or needle not in lines[-1]:
            line = (await proc.stderr.readline()).decode()
            if not line:
                raise AssertionError(f"process ended before printing {needle!r}: {lines}")
            lines.append(line.rstrip("\n"))
    return lines


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
    [line] = stderr.decode().strip().splitlines()
    # The Go binary's words, which launchers key on, then what to change.
    assert line.endswith(
        f"ERROR h2ping 127.0.0.1: cannot bind 127.0.0.1:{port}: address already in use "
        "(another process has this port: choose another with -listen)"
    )


async def test_non_loopback_warning_comes_before_the_listening_line() -> None:
    port = free_port()
    async with h2ping_process(
        "-listen", f"0.0.0.0:{port}", "-upstream", "https://upstream.example", "-name", "genrm"
    ) as proc:
        warning = await read_line_with(proc, "h2ping genrm:")
        line = await read_line_with(proc, "h2ping genrm:")
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    assert f"WARNING h2ping genrm: listen address 0.0.0.0:{port} is not loopback" in warning
    assert f"INFO h2ping genrm: listening on 0.0.0.0:{port} -> https://upstream.example" in line


async def test_a_non_loopback_admin_address_is_warned_of_too() -> None:
    port, admin = free_port(), free_port()
    async with h2ping_process(
        "-listen", f"127.0.0.1:{port}", "-admin-listen", f"0.0.0.0:{admin}",
        "-upstream", "https://upstream.example", "-name", "genrm",
    ) as proc:  # fmt: skip
        warning = await read_line_with(proc, "h2ping genrm:")
        line = await read_line_with(proc, "h2ping genrm:")
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    assert (
        f"WARNING h2ping genrm: admin address 0.0.0.0:{admin} is not loopback and h2ping "
        "has no authentication" in warning
    )
    assert "listening on 127.0.0.1" in line


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_start_and_stop_lines_at_every_log_level(log_format: str) -> None:
    """With -log-level error a log must still show the proxy ran and how it ended."""
    port = free_port()
    async with h2ping_process(
        "-listen", f"127.0.0.1:{port}", "-upstream", "https://upstream.example",
        "-log-level", "error", "-log-format", log_format,
    ) as proc:  # fmt: skip
        await read_line_with(proc, "listening on")
        proc.send_signal(signal.SIGTERM)
        _, rest = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 0
    lines = rest.decode().splitlines()
    if log_format == "json":
        events = [json.loads(line)["event"] for line in lines]
    else:
        events = [line.split(": ", 1)[1] for line in lines]
    assert events[0] == "SIGTERM: draining 0 in-flight requests (up to 60s)", lines
    assert events[1].startswith("stopped: requests=0 completed=0"), lines
    assert len(events) == 2, lines


async def test_ipv6_listen_address_in_brackets() -> None:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    async with h2ping_process("-listen", "[::1]:0", "-upstream", "https://[::1]:9") as proc:
        line = await read_line_with(proc, "listening on")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    port = int(line.split("listening on [::1]:", 1)[1].split(" ", 1)[0])
    assert line.rstrip().endswith(f"listening on [::1]:{port} -> https://[::1]:9"), line


async def test_notes_and_unknown_variables_are_warned_at_startup() -> None:
    env = {**os.environ, "H2PING_PING_INTERVL": "30s"}
    args = ["-listen", "127.0.0.1:0", "-upstream", "https://upstream.example", "-ping-timeout", "0"]
    async with h2ping_process(*args, env=env) as proc:
        before = await lines_until(proc, "listening on")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    warnings = [line.split(": ", 1)[1] for line in before if " WARNING " in line]
    assert warnings == [
        "ignoring H2PING_PING_INTERVL: not a setting (did you mean H2PING_PING_INTERVAL?)",
        "-ping-timeout 0: taken as 15s, the default the Go binary's HTTP/2 transport uses for it",
    ]


async def test_missing_upstream_exits_1_with_one_line() -> None:
    async with h2ping_process(
        "-listen", "127.0.0.1:0", env={**os.environ, "H2PING_UPSTREAM": ""}
    ) as proc:
        _, stderr = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 1
    assert stderr.decode().splitlines() == ["python -m h2ping: -upstream is required"]


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

    async with proxy_before(slow_app, tls, "-shutdown-grace", "10s") as (port, proc, session):
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


def never_answering(arrived: asyncio.Event) -> Any:
    """An app that takes a request, sets ``arrived``, and never answers it."""

    async def app(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await read_body(receive)
            arrived.set()
            await asyncio.sleep(30)

    return app


async def test_grace_expiry_cuts_and_exits_0(tls: TLSFiles) -> None:
    arrived = asyncio.Event()
    async with proxy_before(never_answering(arrived), tls, "-shutdown-grace", "500ms") as (
        port,
        proc,
        session,
    ):
        request = asyncio.create_task(session.get(f"http://127.0.0.1:{port}/never"))
        await asyncio.wait_for(arrived.wait(), 5)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        try:
            resp = await asyncio.wait_for(request, 5)
            await resp.read()
        except aiohttp.ClientError:
            pass  # cut: exactly what grace expiry means
        else:
            raise AssertionError(f"got a clean response {resp.status} after the grace expired")


# --- the ready file -------------------------------------------------------------------


async def test_ready_file_appears_only_once_the_port_accepts(tmp_path: Path) -> None:
    port = free_port()
    ready = tmp_path / "p.ready"
    async with running(
        [H2PING_SIDECAR, "-listen", f"127.0.0.1:{port}", "-upstream", "https://127.0.0.1:9",
         "-ready-file", ready],
        log=tmp_path / "p.log", ready_file=ready,
    ) as launched:  # fmt: skip
        # One try, no polling: a launcher may connect the moment the file is there.
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        assert ready.read_text() == f"{launched.pid}\n"
        assert await launched.terminate() == 0
        assert not ready.exists()


@asynccontextmanager
async def sidecar_with_a_request_open(
    tls: TLSFiles, tmp_path: Path, *flags: str
) -> AsyncIterator[tuple[Launched, Path, asyncio.Task[aiohttp.ClientResponse]]]:
    """The sidecar, with a ready file, before an upstream that never answers, and one
    request open through it: yields the process, its ready file and the request."""
    port = free_port()
    ready = tmp_path / "p.ready"
    arrived = asyncio.Event()
    async with (
        run_hypercorn(never_answering(arrived), tls) as url,
        aiohttp.ClientSession() as session,
        running(
            [H2PING_SIDECAR, *proxy_flags(port, url, tls), *flags, "-ready-file", ready],
            log=tmp_path / "p.log", ready_file=ready,
        ) as launched,
    ):  # fmt: skip
        request = asyncio.create_task(session.get(f"http://127.0.0.1:{port}/never"))
        await asyncio.wait_for(arrived.wait(), 5)
        try:
            yield launched, ready, request
        finally:
            request.cancel()


async def test_ready_file_removed_when_the_grace_runs_out(tls: TLSFiles, tmp_path: Path) -> None:
    async with sidecar_with_a_request_open(tls, tmp_path, "-shutdown-grace", "500ms") as (
        launched,
        ready,
        request,
    ):
        launched.proc.send_signal(signal.SIGTERM)
        assert await launched.wait(10) == 0
        assert not ready.exists()
        with pytest.raises(aiohttp.ClientError):
            await asyncio.wait_for(request, 5)
    assert "shutdown grace of 0.5s expired" in launched.log_text()


async def test_ready_file_removed_on_a_second_signal(tls: TLSFiles, tmp_path: Path) -> None:
    async with sidecar_with_a_request_open(tls, tmp_path) as (launched, ready, _):
        assert await stop_with_two_signals(launched) == 1  # the default grace is 60 s
        assert not ready.exists()
    assert "second SIGTERM: exiting now" in launched.log_text()


async def test_a_ready_file_someone_else_wrote_is_left_alone(tmp_path: Path) -> None:
    ready = tmp_path / "p.ready"
    async with running(
        [H2PING_SIDECAR, "-listen", "127.0.0.1:0", "-upstream", "https://127.0.0.1:9",
         "-ready-file", ready],
        log=tmp_path / "p.log", ready_file=ready,
    ) as launched:  # fmt: skip
        ready.write_text("999999\n")  # a successor started with the same path
        assert await launched.terminate() == 0
        assert ready.read_text() == "999999\n"


# --- a signal while it starts, and the lines docs/observability.md lists ------------------


async def blocked_in_fifo_open(pid: int) -> None:
    """Until ``pid`` waits in the open of a FIFO for its reader (the kernel says so)."""
    wchan = Path(f"/proc/{pid}/wchan")
    async with asyncio.timeout(30):
        while wchan.read_text() not in ("wait_for_partner", "fifo_open"):
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("admin", [False, True], ids=["plain", "admin"])
async def test_sigterm_while_starting_exits_0_without_the_listening_line(
    tmp_path: Path, admin: bool
) -> None:
    """The access log is a FIFO, whose open waits for a reader: the signal comes
    then, in the middle of the start. Nothing was listening yet, so nothing drains:
    one line, as documented, no listening line, no ready file, exit 0."""
    fifo, ready = tmp_path / "access.fifo", tmp_path / "h2ping.ready"
    os.mkfifo(fifo)
    flags = ["-listen", "127.0.0.1:0", "-upstream", "http://127.0.0.1:9",
             "-access-log", str(fifo), "-ready-file", str(ready)]  # fmt: skip
    if admin:  # the start then waits for the admin listener too
        flags += ["-admin-listen", "127.0.0.1:0"]
    async with h2ping_process(*flags) as proc:
        await blocked_in_fifo_open(proc.pid)
        proc.send_signal(signal.SIGTERM)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the open goes on
        try:
            _, stderr = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            os.close(reader)
    messages = [line.split(": ", 1)[1] for line in stderr.decode().splitlines()]
    assert (proc.returncode, messages) == (0, ["interrupted during startup: exiting"])
    assert not ready.exists()
    assert documented("interrupted during startup: exiting")


def documented_lines() -> list[re.Pattern[str]]:
    """Each log line docs/observability.md lists under "Log lines", as a pattern:
    its capitalised words (ADDR, URL, N), ``<reason>`` and ``...`` stand for any
    text, a duration for any duration."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text()
    part = text.split("## Log lines", 1)[1].split("\n## ", 1)[0]
    patterns = []
    for row in (ln for ln in part.splitlines() if ln.startswith("| ")):
        for span in re.findall(r"`([^`]+)`", row.split("|")[2]):
            pattern = re.escape(span)
            pattern = re.sub(r"\\\.\\\.\\\.|<[^>]+>", ".+", pattern)
            pattern = re.sub(r"\b[A-Z][A-Z_]*\b", r"\\S+", pattern)
            pattern = re.sub(r"\d+(?:\\\.\d+)?s\b", r"[\\d.]+s", pattern)
            patterns.append(re.compile(pattern))
    return patterns


def documented(message: str) -> bool:
    return any(p.fullmatch(message) for p in documented_lines())


async def test_the_start_and_stop_lines_are_those_documented(tls: TLSFiles) -> None:
    """A start, a drain with a request in flight, a second signal: every line it
    prints is one docs/observability.md lists (the capacity line is docs/sizing.md's)."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accepts, never answers: the request stays in flight

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    upstream = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    port = free_port()
    async with (
        server,
        h2ping_process("-listen", f"127.0.0.1:{port}", "-upstream", upstream,
                       "-admin-listen", "127.0.0.1:0", "-connect-timeout", "60s") as proc,
        aiohttp.ClientSession() as session,
    ):  # fmt: skip
        before = await lines_until(proc, "admin endpoint on")
        request = asyncio.ensure_future(session.get(f"http://127.0.0.1:{port}/slow"))
        await asyncio.sleep(0.5)  # the request waits for the dial
        proc.send_signal(signal.SIGTERM)
        during = await lines_until(proc, "draining")
        proc.send_signal(signal.SIGTERM)
        _, rest = await asyncio.wait_for(proc.communicate(), 30)
        request.cancel()
        with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
            await request
    assert proc.returncode == 1
    messages = [ln.split(": ", 1)[1] for ln in [*before, *during, *rest.decode().splitlines()]]
    undocumented = [m for m in messages if not documented(m) and not m.startswith("capacity: ")]
    assert not undocumented, f"printed, not in docs/observability.md: {undocumented}"
    assert "SIGTERM: draining 1 in-flight request (up to 60s)" in messages, messages
    assert "second SIGTERM: exiting now" in messages, messages
