"""``python -m h2ping.demo``: says what it does when asked, runs when not."""

from __future__ import annotations

import subprocess
import sys


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "h2ping.demo", *args], capture_output=True, text=True, timeout=60
    )


def test_help_describes_the_demo_instead_of_running_it() -> None:
    for flag in ("--help", "-h"):
        done = run_demo(flag)
        assert done.returncode == 0
        assert done.stdout.startswith("Usage: python -m h2ping.demo\n")
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
