"""At the edge of the file descriptors: clients beyond what the process can hold
wait in the listen queue and are all answered; the operator hears it once, in
words, and the proxy keeps its CPU meanwhile; on uvloop and on asyncio's loop.

The proxy runs as a process of its own under a hard ``RLIMIT_NOFILE`` of 200 (it
raises the soft limit to the hard one at start), in front of a scripted h2c
upstream that holds each response a while; twice as many clients as descriptors
each send one request on a connection of its own, all at once."""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import time
from pathlib import Path

import pytest

from h2ping.process.descriptors import DescriptorWatch, is_shortage
from h2ping.stats import Stats
from h2ping.testing import ScriptedUpstream

from ..conftest import free_port, held_a_second, one_request_alone
from ..launcher import launch

LIMIT = 200
CLIENTS = 2 * LIMIT
HOLD = 1.0  # seconds each response is held upstream (held_a_second)
#: Without uvloop, ``python -m h2ping`` runs on asyncio's own loop.
ON_ASYNCIO = "import sys; sys.modules['uvloop'] = None; from h2ping.process.cli import main; main()"


def low_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.one_loop  # the proxy's own loop is the parameter
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_twice_as_many_clients_as_descriptors_are_all_answered(
    tmp_path: Path, loop: str
) -> None:
    async with ScriptedUpstream(held_a_second) as upstream:
        port = free_port()
        program = ["-m", "h2ping"] if loop == "uvloop" else ["-c", ON_ASYNCIO]
        command = [sys.executable, *program, "--listen", f"127.0.0.1:{port}"]
        command += ["--upstream", upstream.url, "--ready-file", str(tmp_path / "ready")]
        command += ["--admin-listen", f"127.0.0.1:{free_port()}"]
        proxy = await launch(
            command, log=tmp_path / "log", ready_file=tmp_path / "ready", preexec_fn=low_limit
        )
        try:
            url = f"http://127.0.0.1:{port}/x"
            started = time.monotonic()
            before = cpu_seconds(proxy.pid)
            answers = await asyncio.gather(*(one_request_alone(url) for _ in range(CLIENTS)))
            took = time.monotonic() - started
            spent = cpu_seconds(proxy.pid) - before
        finally:
            await proxy.terminate()
    text = proxy.log_text()
    assert answers == [(200, "ok")] * CLIENTS, sorted(set(answers))
    # The capacity is under half the clients: some waited for others to finish.
    assert took >= 2 * HOLD, took
    (capacity,) = [line for line in text.splitlines() if ": capacity: " in line]
    assert f"descriptor limit {LIMIT}:" in capacity
    full = [line for line in text.splitlines() if "at capacity" in line]
    assert len(full) == 1, text
    assert f"descriptor limit {LIMIT} leaves room for" in full[0] and "WARNING" in full[0]
    assert "out of file descriptors" not in text and "502" not in text, text
    assert "Traceback" not in text and "ERROR" not in text, text
    # Waiting clients cost nothing: no accept retried in a loop.
    assert spent < 0.5 * took, f"{spent:.2f}s of CPU in {took:.2f}s"
    (stopped,) = [line for line in text.splitlines() if "stopped:" in line]
    assert "accept_pauses=0" not in stopped and "descriptor_shortages=0" in stopped


# ------------------------------------------------------------------ the watch alone


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_one_warning_a_minute_with_the_count_meanwhile(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, stats = Clock(), Stats()
    watch = DescriptorWatch(stats, clock, count=lambda: 38, limits=lambda: (40, 80))
    caplog.set_level("DEBUG", logger="h2ping")
    for _ in range(5):
        watch.shortage("accept")
        clock.now += 10
    clock.now = 61
    watch.shortage("accept")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2
    assert "38 open, limit 40 soft / 80 hard" in warnings[0]
    assert "5 shortages in the last 61s" in warnings[1]
    assert stats.descriptor_shortages == 6


def test_what_counts_as_a_shortage() -> None:
    assert is_shortage(OSError(24, "Too many open files"))
    assert is_shortage(OSError(23, "Too many open files in system"))
    assert not is_shortage(OSError(111, "Connection refused"))
    assert not is_shortage(None)


#: A proxy whose process has no descriptor left when a request needs an upstream
#: connection: the client was accepted, then every descriptor was taken.
NO_DESCRIPTOR_FOR_THE_DIAL = """
import asyncio, os, sys
from h2ping import Proxy

async def main() -> None:
    async with Proxy(upstream=sys.argv[1], listen="127.0.0.1:0") as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        while not proxy.clients:
            await asyncio.sleep(0.01)
        hog = []
        try:
            while True:
                hog.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        writer.write(b"GET /x HTTP/1.1\\r\\nHost: a\\r\\n\\r\\n")
        head = await reader.readuntil(b"\\r\\n\\r\\n")
        body = await reader.read(1000)
        for fd in hog:
            os.close(fd)
        print(head.decode() + body.decode(), proxy.stats.descriptor_shortages)
        writer.close()

asyncio.run(main())
"""


@pytest.mark.one_loop
async def test_a_dial_without_a_descriptor_is_a_502_that_says_so() -> None:
    """Named as such, not as a DNS error: glibc's resolver, unable to open
    /etc/hosts, says "Name or service not known" for ``localhost``."""
    async with ScriptedUpstream() as upstream:
        done = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            NO_DESCRIPTOR_FOR_THE_DIAL,
            f"http://localhost:{upstream.port}",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(done.communicate(), 30)
    text = out.decode()
    assert done.returncode == 0, err.decode()
    assert text.startswith("HTTP/1.1 502"), text
    assert "proxy-status: h2ping; error=connection_limit_reached" in text.lower(), text
    assert "no file descriptor free to connect to localhost" in text
    assert "dns" not in text.lower()
    assert text.rstrip().endswith(" 1"), text  # counted as a shortage
    log = err.decode()
    assert "connection_limit_reached" in log and "dns_error" not in log, log
