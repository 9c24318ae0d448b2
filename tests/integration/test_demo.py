"""``python -m h2ping.demo``: says what it does when asked, runs when not."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from h2ping import Proxy

from ..conftest import REPO_ROOT, free_port


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "h2ping.demo", *args], capture_output=True, text=True, timeout=60
    )


def test_help_describes_the_demo_instead_of_running_it() -> None:
    for flag in ("--help", "-h"):
        done = run_demo(flag)
        assert done.returncode == 0
        assert done.stdout.startswith(
            "Usage: python -m h2ping.demo [--serve [--port N] [--ready-file PATH]]\n"
        )
        assert "embedded HTTP/2 upstream" in done.stdout
        assert "listening on" not in done.stdout + done.stderr  # nothing was started


def test_an_unknown_argument_exits_2() -> None:
    done = run_demo("--fast")
    assert done.returncode == 2
    assert done.stderr.startswith("python -m h2ping.demo: unexpected argument '--fast'")


def test_the_demo_runs() -> None:
    done = run_demo()
    assert done.returncode == 0, done.stderr
    assert "POST /slow -> HTTP/1.1 200 OK" in done.stdout, done.stdout


def test_the_serve_usage_is_said() -> None:
    done = run_demo("--help")
    assert "--serve [--port N]" in done.stdout and "h2ping-demo-ca.pem" in done.stdout
    done = run_demo("--serve", "--port", "http")
    assert done.returncode == 2
    assert "--port wants a number from 1 to 65535, not 'http'" in done.stderr


#: The README's walk-through against the demo server, found by its first line.
WALK_THROUGH = "python -m h2ping.demo --serve --port 8443"


def walk_through() -> str:
    text = (REPO_ROOT / "README.md").read_text()
    rest = text[text.index(WALK_THROUGH) :]
    return rest[: rest.index("```")]


def moved(text: str, ports: dict[str, str]) -> str:
    for port, free in ports.items():
        text = text.replace(f"127.0.0.1:{port}", f"127.0.0.1:{free}")
        text = text.replace(f"--port {port}", f"--port {free}")
    return text


@pytest.mark.one_loop  # the loops under test are the commands'
async def test_the_readme_walk_through_runs_as_pasted(tmp_path: Path) -> None:
    """The block as one ``bash -c``, as a shell runs what is pasted into it, in the
    venv's PATH, only the ports moved to free ones: each command waits for what it
    needs, the slow request shows PINGs, and the block ends with both servers."""
    ports = {port: str(free_port()) for port in ("8443", "1250", "9901")}
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        # -listen is left at its default in the README: 127.0.0.1:1250, moved too
        "H2PING_LISTEN": f"127.0.0.1:{ports['1250']}",
        "PYTHONUNBUFFERED": "1",
    }
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", moved(walk_through(), ports), cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    output = out.decode()
    assert proc.returncode == 0, output
    assert "curl: (" not in output and "ERROR" not in output, output
    run = re.search(r"^demo upstream: \S+ \(HTTP/2 over TLS\), run (\w+)$", output, re.M)
    assert run, output
    answers = re.findall(r"^upstream saw (GET \S+) .*\(demo run (\w+)\)$", output, re.M)
    assert answers == [("GET /v1/models", run[1]), ("GET /slow?s=3", run[1])], output
    pings = re.search(r"^h2ping_pings_sent_total (\d+)$", output, re.M)
    assert pings and int(pings[1]) >= 1, output  # the 3 s of silence held PINGs
    assert 'h2ping_requests_total{outcome="ok"} 2' in output, output
    assert re.search(r"^verdict +usable", output, re.M), output
    # Started before the curls, stopped after them, both cleanly.
    lines = output.splitlines()
    listening = next(i for i, ln in enumerate(lines) if "listening on" in ln)
    draining = next(i for i, ln in enumerate(lines) if "SIGTERM: draining" in ln)
    assert listening < lines.index(next(ln for ln in lines if ln.startswith("upstream saw")))
    assert draining > next(i for i, ln in enumerate(lines) if ln.startswith("verdict"))
    assert "stopped: requests=2" in output and f"demo upstream run {run[1]} stopped" in output
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # ready files and CA copy gone


def test_a_taken_port_names_port_and_writes_nothing(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "h2ping.demo", "--serve", "--port", str(port),
             "--ready-file", "demo.ready"],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )  # fmt: skip
    assert (done.returncode, done.stdout) == (1, ""), done
    assert done.stderr == (
        f"python -m h2ping.demo: cannot serve on port {port}: address already in use "
        "(another process has it, perhaps another demo server: choose another port with "
        "--port N)\n"
    )
    assert list(tmp_path.iterdir()) == []  # no CA copy, no ready file


@pytest.mark.one_loop  # the loop under test is the demo server's
async def test_each_run_answers_with_its_own_id(tmp_path: Path) -> None:
    """What a run prints is what it answers, and two runs differ: a client that
    reached another demo server left on the port can tell."""
    seen = []
    for _ in range(2):
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "h2ping.demo", "--serve", "--port", str(port),
            "--ready-file", "demo.ready", cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            first = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
            run = re.fullmatch(r"demo upstream: \S+ \(HTTP/2 over TLS\), run (\w+)\n", first)
            assert run, first
            assert (tmp_path / "demo.ready").read_text() == f"{proc.pid}\n"
            ca_file = str(tmp_path / "h2ping-demo-ca.pem")
            async with (
                Proxy(upstream=f"https://127.0.0.1:{port}", ca_file=ca_file) as proxy,
                aiohttp.ClientSession() as client,
                client.get(f"{proxy.url}/v1/models") as resp,
            ):
                assert resp.headers["x-h2ping-demo-run"] == run[1]
                assert (await resp.text()).endswith(f"(demo run {run[1]})\n")
            seen.append(run[1])
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)
        assert proc.returncode == 0
        assert list(tmp_path.iterdir()) == []  # both files removed at the exit
    assert seen[0] != seen[1]
