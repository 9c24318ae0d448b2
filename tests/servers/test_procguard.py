"""No server outlives the test run, however the run ends: a pytest run that holds
real servers is stopped mid-way by SIGTERM, SIGINT or SIGKILL, and then no
process of theirs is left."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

#: A run that starts nginx twice (the plain origin, and the one behind
#: tests/servers: a process group with its workers and a backend), Apache
#: (a tree of its own), and a proxy through the launcher, then waits.
HOLDING = """
import asyncio, os, pathlib, sys
from tests.launcher import launch
from tests.nginx_answering import run_answering_nginx
from tests.servers.apache import run_apache
from tests.servers.nginx import run_nginx
import tests.conftest as conftest

async def test_hold(tls, tmp_path):
    (tmp_path / "a").mkdir(); (tmp_path / "b").mkdir(); (tmp_path / "c").mkdir()
    async with run_answering_nginx(tls, tmp_path / "a") as url:
        async with run_nginx(tls, tmp_path / "b"), run_apache(tls, tmp_path / "c"):
            port = conftest.free_port()
            proxy = await launch(
                [sys.executable, "-m", "h2ping", "--listen", f"127.0.0.1:{port}", "--upstream", url,
                 "--ca-file", tls.ca_file, "--ready-file", str(tmp_path / "ready")],
                log=tmp_path / "proxy.log", ready_file=tmp_path / "ready",
            )
            pathlib.Path(os.environ["HOLDING"]).write_text(str(proxy.pid))
            await asyncio.sleep(60)
"""


def processes() -> dict[int, tuple[int, str]]:
    """Every live process: its parent and command line."""
    found = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fields[0] != "Z":
            found[int(entry.name)] = (int(fields[1]), cmdline.strip())
    return found


def descendants(pid: int) -> dict[int, str]:
    """``pid``'s descendants, with their command lines."""
    table = processes()
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, cmdline) in table.items():
            if ppid == parent and child not in found:
                found[child] = cmdline
                todo.append(child)
    return found


@pytest.mark.servers
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=str)
def test_a_run_stopped_mid_way_leaves_no_server(
    tmp_path: pathlib.Path, stop: signal.Signals
) -> None:
    test_file = tmp_path / "test_holding.py"
    test_file.write_text(HOLDING)
    holding = tmp_path / "holding"
    env = {**os.environ, "HOLDING": str(holding), "CI": os.environ.get("CI", "")}
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
         "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path), str(test_file)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,  # the signal reaches the run alone, not this test
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not holding.exists():
            assert run.poll() is None, run.communicate()[0].decode()[-3000:]
            assert time.monotonic() < deadline, "the servers did not start"
            time.sleep(0.1)
        started = descendants(run.pid)
        names = " ".join(started.values())
        assert all(name in names for name in ("nginx", "apache2", "h2ping")), started
        run.send_signal(stop)
        run.wait(timeout=30)
        deadline = time.monotonic() + 10
        while (left := started.keys() & processes().keys()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, {pid: started[pid] for pid in left}
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
