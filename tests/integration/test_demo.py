"""``python -m h2ping.demo``: says what it does when asked, runs when not."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO_ROOT, free_port


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "h2ping.demo", *args], capture_output=True, text=True, timeout=60
    )


def test_help_describes_the_demo_instead_of_running_it() -> None:
    for flag in ("--help", "-h"):
        done = run_demo(flag)
        assert done.returncode == 0
        assert done.stdout.startswith("Usage: python -m h2ping.demo [--serve [--port N]]\n")
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
WALK_THROUGH = "python -m h2ping.demo --serve &"
#: What each background line prints once it serves.
SERVING = {"h2ping.demo --serve": "demo upstream:", "python -m h2ping -upstream": "listening on"}


def walk_through() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    block = text.split(WALK_THROUGH, 1)[1].split("```", 1)[0]
    return [WALK_THROUGH, *(line for line in block.splitlines() if line.strip())]


@pytest.mark.one_loop  # the loops under test are the commands'
async def test_the_readme_walk_through_runs_as_written(tmp_path: Path) -> None:
    """Each line as the README has it, in the venv's PATH, only the ports moved to
    free ones: the servers start in the background, every other line exits 0."""
    ports = {port: str(free_port()) for port in ("8443", "1250", "9901")}
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        # -listen is left at its default in the README: 127.0.0.1:1250, moved too
        "H2PING_LISTEN": f"127.0.0.1:{ports['1250']}",
    }
    background: list[asyncio.subprocess.Process] = []
    outputs: list[str] = []
    try:
        for line in walk_through():
            command = line.removesuffix("&").strip()
            for port, free in ports.items():
                command = command.replace(f"127.0.0.1:{port}", f"127.0.0.1:{free}")
            if "--serve" in command:
                command += f" --port {ports['8443']}"
            if line.endswith("&"):
                proc = await asyncio.create_subprocess_exec(
                    *shlex.split(command), cwd=tmp_path, env=env,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                )  # fmt: skip
                background.append(proc)
                mark = next(text for key, text in SERVING.items() if key in command)
                await asyncio.wait_for(_line_with(proc, mark), 20)
                continue
            done = await asyncio.create_subprocess_shell(
                command, cwd=tmp_path, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            out, _ = await asyncio.wait_for(done.communicate(), 30)
            assert done.returncode == 0, (command, out.decode())
            outputs.append(out.decode())
    finally:
        for proc in background:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 20)
    models, slow, metrics, check = outputs
    assert models.startswith("upstream saw GET /v1/models on HTTP/2 stream"), models
    assert slow.startswith("upstream saw GET /slow?s=3"), slow
    assert 'h2ping_requests_total{outcome="ok"} 2' in metrics, metrics
    assert check.splitlines()[-1].startswith("verdict      usable"), check
    assert [proc.returncode for proc in background] == [0, 0]


async def _line_with(proc: asyncio.subprocess.Process, text: str) -> None:
    assert proc.stdout is not None
    seen = b""
    while True:
        line = await proc.stdout.readline()
        assert line, f"ended before {text!r}: {seen.decode()}"
        seen += line
        if text.encode() in line:
            return
