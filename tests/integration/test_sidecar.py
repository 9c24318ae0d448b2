"""h2ping in place of the Go binary, held to that binary's contract.

Each test starts the installed ``h2-ping-sidecar`` script exactly as NeMo Gym's
launcher starts the Go binary (``tests/launcher.py``: own session, /dev/null stdin,
one appended log file, Gym's flags, readiness from the ready file only). Where it
is cheap the same test runs against the real Go binary too (``[go]``, built from its
source by the ``go_sidecar`` fixture), so it shows h2ping behaves as Go does, not
only as we think it should.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from h2ping import Proxy, __version__
from h2ping.process import cli

from ..conftest import (
    TLSFiles,
    assert_not_accepting,
    echo_app,
    free_port,
    read_body,
    run_hypercorn,
    send_raw,
)
from ..launcher import H2PING_SIDECAR, StartFailed, gym_flags, launch

# The loop here only runs the test's clients; the process under test picks its own.
ONE_LOOP = pytest.mark.asyncio(loop_factories=["uvloop"])


@dataclass(frozen=True)
class Sidecar:
    name: str  # "h2ping" or "go"
    binary: Path


@pytest.fixture(params=["h2ping", "go"])
def sidecar(request: pytest.FixtureRequest) -> Sidecar:
    if request.param == "go":
        return Sidecar("go", request.getfixturevalue("go_sidecar"))
    return Sidecar("h2ping", H2PING_SIDECAR)


def launcher_env(tls: TLSFiles) -> dict[str, str]:
    """The launcher's environment plus its Go knobs; the test CA trusted the way
    both implementations read it (the Go binary has no -ca-file)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("H2PING_")}
    return {**env, "GOMEMLIMIT": "4GiB", "GOMAXPROCS": "2", "SSL_CERT_FILE": tls.ca_file}


class GymUpstream:
    """What a model server does for Gym: list models, answer JSON, stream, think."""

    def __init__(self) -> None:
        self.slow_arrived = asyncio.Event()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        path = scope["path"]
        if path == "/v1/stream":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
            for i in range(3):
                await send({"type": "http.response.body", "body": b"data: %d\n\n" % i,
                            "more_body": True})  # fmt: skip
                await asyncio.sleep(0.2)
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
            return
        if path == "/v1/slow":
            self.slow_arrived.set()
            await asyncio.sleep(2.0)
        answer = {"path": path, "method": scope["method"], "http": scope["http_version"]}
        if body:
            answer["echo"] = json.loads(body)
        payload = json.dumps(answer).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(payload)).encode())]})  # fmt: skip
        await send({"type": "http.response.body", "body": payload})


@ONE_LOOP
async def test_started_as_gym_starts_it_serves_and_stops_cleanly(
    sidecar: Sidecar, tls: TLSFiles, tmp_path: Path
) -> None:
    app = GymUpstream()
    port = free_port()
    ready, log = tmp_path / "genrm.ready", tmp_path / "genrm.log"
    ready.write_text("4242\n")  # left over from an earlier run: the launcher deletes it
    async with run_hypercorn(app, tls) as upstream:
        launched = await launch(
            [sidecar.binary, *gym_flags(port=port, upstream=upstream, ready_file=ready)],
            log=log, ready_file=ready, address=f"127.0.0.1:{port}", env=launcher_env(tls),
        )  # fmt: skip
        try:
            assert ready.read_text() == f"{launched.pid}\n"
            base = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{base}/v1/models") as resp:
                    assert resp.status == 200
                    assert (await resp.json())["http"] == "2"
                question = {"messages": [{"role": "user", "content": "judge this"}]}
                async with session.post(f"{base}/v1/chat", json=question) as resp:
                    assert resp.status == 200
                    assert (await resp.json())["echo"] == question
                async with session.get(f"{base}/v1/stream") as resp:
                    events = [chunk async for chunk in resp.content]
                    assert b"".join(events) == b"data: 0\n\ndata: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
                slow = asyncio.create_task(session.post(f"{base}/v1/slow", json={"n": 1}))
                await asyncio.wait_for(app.slow_arrived.wait(), 10)
                launched.proc.send_signal(signal.SIGTERM)  # the launcher's stop
                resp = await asyncio.wait_for(slow, 15)
                assert resp.status == 200
                assert (await resp.json())["echo"] == {"n": 1}
                resp.release()
            assert await launched.wait(15) == 0
            assert not ready.exists()  # removed by the process itself, not by the launcher
        finally:
            launched.kill()
    await assert_not_accepting(port, "the sidecar after its stop")
    text = log.read_text()
    assert f"listening on 127.0.0.1:{port} -> {upstream}" in text
    if sidecar.name == "h2ping":
        assert "ignoring GOMEMLIMIT and GOMAXPROCS" in text
        assert "SIGTERM: draining 1 in-flight request (up to 60s)" in text
        last = text.splitlines()[-1]
        assert "stopped: requests=4 completed=4 failed=0" in last, last


@ONE_LOOP
async def test_busy_port_fails_the_start_with_cannot_bind(sidecar: Sidecar, tmp_path: Path) -> None:
    ready = tmp_path / "genrm.ready"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        flags = gym_flags(port=port, upstream="https://127.0.0.1:9", ready_file=ready)
        with pytest.raises(StartFailed) as failed:
            await launch([sidecar.binary, *flags], log=tmp_path / "genrm.log",
                         ready_file=ready, address=f"127.0.0.1:{port}")  # fmt: skip
    assert failed.value.code == 1
    assert f"cannot bind 127.0.0.1:{port}: " in failed.value.tail
    assert failed.value.hint == f" (is 127.0.0.1:{port} already in use?)"
    assert not ready.exists()


@ONE_LOOP
async def test_an_unwritable_ready_file_exits_1_and_leaves_no_listener(
    sidecar: Sidecar, tmp_path: Path
) -> None:
    port = free_port()
    ready = tmp_path / "no-such-dir" / "genrm.ready"
    flags = gym_flags(port=port, upstream="https://127.0.0.1:9", ready_file=ready)
    with pytest.raises(StartFailed) as failed:
        await launch([sidecar.binary, *flags], log=tmp_path / "genrm.log", ready_file=ready)
    assert failed.value.code == 1
    assert f"cannot write -ready-file {ready}: " in failed.value.tail, failed.value.tail
    await assert_not_accepting(port, "the failed sidecar")


@ONE_LOOP
async def test_two_instances_side_by_side(sidecar: Sidecar, tls: TLSFiles, tmp_path: Path) -> None:
    def named(name: bytes) -> Any:
        async def app(scope: dict, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return
            await read_body(receive)
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", str(len(name)).encode())]})  # fmt: skip
            await send({"type": "http.response.body", "body": name})

        return app

    async with (
        run_hypercorn(named(b"policy"), tls) as policy_url,
        run_hypercorn(named(b"judge"), tls) as judge_url,
    ):
        instances = {}
        for name, url, insecure in (("policy", policy_url, False), ("judge", judge_url, True)):
            port = free_port()
            ready = tmp_path / f"{name}.ready"
            flags = gym_flags(
                port=port, upstream=url, ready_file=ready, insecure_skip_verify=insecure
            )
            env = launcher_env(tls)
            if insecure:  # configured to skip verification: the CA is not needed
                del env["SSL_CERT_FILE"]
            instances[name] = (port, await launch(
                [sidecar.binary, *flags], log=tmp_path / f"{name}.log", ready_file=ready,
                env=env,
            ))  # fmt: skip
        try:
            async with aiohttp.ClientSession() as session:
                for _ in range(3):
                    for name, (port, _) in instances.items():
                        async with session.post(f"http://127.0.0.1:{port}/x", data=b"q") as resp:
                            assert (resp.status, await resp.read()) == (200, name.encode())
            for port, launched in instances.values():
                assert launched.ready_file.read_text() == f"{launched.pid}\n"
                assert f"127.0.0.1:{port}" in launched.log_text()
                assert await launched.terminate() == 0
                assert not launched.ready_file.exists()
        finally:
            for _, launched in instances.values():
                launched.kill()
    policy_log = (tmp_path / "policy.log").read_text()
    judge_log = (tmp_path / "judge.log").read_text()
    assert policy_url in policy_log and judge_url not in policy_log
    assert judge_url in judge_log and policy_url not in judge_log


@ONE_LOOP
async def test_upstream_base_path_and_query_as_go_joins_them(
    sidecar: Sidecar, tls: TLSFiles, tmp_path: Path
) -> None:
    port = free_port()
    ready = tmp_path / "genrm.ready"
    async with run_hypercorn(echo_app, tls) as origin:
        upstream = f"{origin}/v1?key=k"
        launched = await launch(
            [sidecar.binary, *gym_flags(port=port, upstream=upstream, ready_file=ready)],
            log=tmp_path / "genrm.log", ready_file=ready, env=launcher_env(tls),
        )  # fmt: skip
        try:
            async with aiohttp.ClientSession() as session:
                for target, expected in (
                    ("/chat?x=1", "/v1/chat?key=k&x=1"),
                    ("/chat", "/v1/chat?key=k"),
                    ("/", "/v1/?key=k"),
                ):
                    async with session.get(f"http://127.0.0.1:{port}{target}") as resp:
                        assert resp.status == 200
                        assert resp.headers["x-path"] == expected, target
            raw = await send_raw(
                port,
                b"GET http://elsewhere.example/chat?x=2 HTTP/1.1\r\n"
                b"Host: elsewhere.example\r\nConnection: close\r\n\r\n",
            )
            assert raw.startswith(b"HTTP/1.1 200 "), raw[:200]
            assert b"\r\nx-path: /v1/chat?key=k&x=2\r\n" in raw.lower(), raw
            assert await launched.terminate() == 0
        finally:
            launched.kill()
    if sidecar.name == "h2ping":
        assert f"listening on 127.0.0.1:{port} -> {origin}/v1?key=..." in launched.log_text()


# --- exit codes, case by case against the real binary -------------------------------

RUNS = "runs"  # started, wrote the ready file, and exited 0 on SIGTERM
_BASE = ["-listen", "127.0.0.1:0", "-upstream", "https://127.0.0.1:9"]
_NO_UPSTREAM = ["-listen", "127.0.0.1:0"]

# (flags after the base, base, h2ping's outcome, the Go binary's outcome)
EXIT_CODES = [
    pytest.param(["-h"], _BASE, 0, 0, id="-h"),
    pytest.param(["-help=x"], _BASE, 0, 0, id="-help=x"),
    pytest.param(["--help"], _NO_UPSTREAM, 0, 0, id="--help-without-upstream"),
    pytest.param(["-upstream", "x", "-h"], _NO_UPSTREAM, 0, 0, id="-h-wins-over-a-bad-url"),
    pytest.param(["-h", "-foo"], _BASE, 0, 0, id="-h-before-unknown"),
    pytest.param(["-foo", "-h"], _BASE, 2, 2, id="unknown-before-h"),
    pytest.param(["-ping-interval", "abc", "-h"], _BASE, 2, 2, id="unparsable-before-h"),
    pytest.param(["-foo"], _BASE, 2, 2, id="unknown-flag"),
    pytest.param(["--ping_interval", "30s"], _BASE, 2, 2, id="underscore"),
    pytest.param(["-listen"], _BASE, 2, 2, id="missing-value"),
    pytest.param(["---x"], _BASE, 2, 2, id="bad-syntax"),
    pytest.param(["-ping-interval", "soon"], _BASE, 2, 2, id="bad-duration"),
    pytest.param(["-insecure-skip-verify=yes"], _BASE, 2, 2, id="bad-bool"),
    pytest.param(["-retry-body-limit", "1.5"], _BASE, 2, 2, id="bad-integer"),
    pytest.param([], _NO_UPSTREAM, 1, 1, id="no-upstream"),
    pytest.param(["-upstream", "ftp://h"], _BASE, 1, 1, id="not-https"),
    pytest.param(["-upstream", "x"], _BASE, 1, 1, id="no-scheme"),
    pytest.param(["-upstream", "https://h:x"], _BASE, 1, 1, id="bad-port"),
    pytest.param(["-ping-interval", "340s"], _BASE, 1, 1, id="ping-interval-at-340s"),
    pytest.param(["-listen", "nope"], _BASE, 1, 1, id="bad-listen"),
    pytest.param(["-ready-file", "/nonexistent/r"], _BASE, 1, 1, id="unwritable-ready-file"),
    pytest.param(["-ping-interval", "339s"], _BASE, RUNS, RUNS, id="ping-interval-339s"),
    pytest.param(["-ping-timeout", "0"], _BASE, RUNS, RUNS, id="ping-timeout-0"),
    pytest.param(["-shutdown-grace", "-1s"], _BASE, RUNS, RUNS, id="negative-grace"),
    pytest.param(["-max-conn-age", "2h"], _BASE, RUNS, RUNS, id="max-conn-age-2h"),
    pytest.param(["-max-conn-age", "-1s"], _BASE, RUNS, RUNS, id="negative-max-conn-age"),
    pytest.param(["-retry-body-limit", "-1"], _BASE, RUNS, RUNS, id="negative-body-limit"),
    pytest.param(["-retry-body-limit", "0x10"], _BASE, RUNS, RUNS, id="hex-body-limit"),
    pytest.param(["-insecure-skip-verify", "false"], _BASE, RUNS, RUNS, id="bool-then-word"),
    pytest.param(["stray", "-foo"], _BASE, RUNS, RUNS, id="positional-ends-flags"),
    pytest.param(["-upstream", "https://u:p@127.0.0.1:9/v1"], _BASE, RUNS, RUNS, id="creds"),
    # Deliberate differences, each documented in docs/go-binary.md:
    # h2ping's additions to the Go flag set;
    pytest.param(["-version"], _BASE, 0, 2, id="version"),
    pytest.param(["-workers", "2"], _BASE, RUNS, 2, id="workers"),
    pytest.param(["-ping-interval", "30"], _BASE, RUNS, 2, id="bare-seconds"),
    pytest.param(["-upstream", "http://127.0.0.1:9"], _BASE, RUNS, 1, id="h2c"),
    # values Go takes but cannot use: a PING flood, URLs no request can reach.
    pytest.param(["-ping-interval", "-1s"], _BASE, 1, RUNS, id="negative-ping-interval"),
    pytest.param(["-upstream", "https://"], _BASE, 1, RUNS, id="no-host"),
    pytest.param(["-upstream", "https://h:99999"], _BASE, 1, RUNS, id="port-out-of-range"),
]


@ONE_LOOP
@pytest.mark.parametrize(("flags", "base", "h2ping", "go"), EXIT_CODES)
async def test_exit_codes_as_the_go_binary(
    sidecar: Sidecar, tmp_path: Path, flags: list[str], base: list[str], h2ping: Any, go: Any
) -> None:
    ready = tmp_path / "r.ready"
    log = tmp_path / "r.log"
    # -ready-file first: a case's own -ready-file wins, and a case's stray argument
    # (which ends the flags) comes after everything the harness needs.
    command = [sidecar.binary, "-ready-file", ready, *base, *flags]
    try:
        launched = await launch(command, log=log, ready_file=ready, startup_timeout=15)
    except StartFailed as failed:
        outcome: Any = failed.code
    else:
        code = await launched.terminate()
        outcome = RUNS if code == 0 else f"exit {code} on SIGTERM"
    lines = log.read_text().splitlines()
    assert outcome == (h2ping if sidecar.name == "h2ping" else go), lines
    if sidecar.name == "h2ping" and outcome in (1, 2):
        assert len(lines) == 1, lines  # one clear line, nothing else


# --- h2ping only ----------------------------------------------------------------------


def test_console_script_is_installed() -> None:
    assert H2PING_SIDECAR.is_file() and os.access(H2PING_SIDECAR, os.X_OK), H2PING_SIDECAR


async def run_to_exit(*args: str, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    proc = await asyncio.create_subprocess_exec(
        str(H2PING_SIDECAR), *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 15)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, (stdout + stderr).decode().strip().splitlines()


@ONE_LOOP
async def test_help_names_the_script_and_the_defaults_that_differ() -> None:
    code, lines = await run_to_exit("-help")
    assert code == 0
    assert lines[0] == "Usage: h2-ping-sidecar -upstream URL [flags]"
    text = "\n".join(lines)
    assert "-listen 127.0.0.1:1250 (Go: 127.0.0.1:8080)" in text
    assert "-shutdown-grace 60s (Go: 15m)" in text


@ONE_LOOP
async def test_version() -> None:
    for flag in ("-version", "--version"):
        assert await run_to_exit(flag) == (0, [f"h2ping {__version__}"])


@ONE_LOOP
async def test_unreadable_ca_bundle_exits_1_and_says_so(tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"
    pem.write_text("not a certificate\n")
    code, lines = await run_to_exit(
        "-listen", "127.0.0.1:0", "-upstream", "https://127.0.0.1:9", "-ca-file", str(pem)
    )
    assert code == 1
    assert f"ERROR h2ping 127.0.0.1: ca-file {pem}: " in lines[-1], lines


@ONE_LOOP
async def test_admin_port_in_use_exits_1_without_saying_cannot_bind() -> None:
    # "cannot bind" would make the launcher blame -listen.
    taken = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = taken.sockets[0].getsockname()[1]
    listen = free_port()
    try:
        code, lines = await run_to_exit(
            "-listen", f"127.0.0.1:{listen}", "-upstream", "https://127.0.0.1:9",
            "-admin-listen", f"127.0.0.1:{port}",
        )  # fmt: skip
    finally:
        taken.close()
    assert code == 1
    assert lines[-1].endswith(
        f"cannot serve -admin-listen on 127.0.0.1:{port}: address already in use"
    ), lines
    assert not any("cannot bind" in line for line in lines)
    await assert_not_accepting(listen, "the proxy whose admin port was taken")


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
    async def broken_start(self: Proxy, sock: object = None, links: object = None) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(Proxy, "start", broken_start)
    code = cli.main(["-upstream", "https://127.0.0.1:9", "-listen", "127.0.0.1:0"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert lines[-1].endswith("exiting after an unexpected error: RuntimeError: boom"), lines
    assert "Traceback (most recent call last):" in lines  # the details are in the log too
