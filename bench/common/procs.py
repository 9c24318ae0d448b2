"""Child processes of the benchmark: start pinned, wait for a port, measure RSS, stop;
the command that runs a bench module in a process of its own.

Every process is started in its own session so that stopping it also stops the
children it forked (nghttpx runs a worker process, for instance).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: bench/, the root its modules import from (``from load.origin import Origin``): the
#: entry scripts live there, so it is their sys.path[0].
BENCH_DIR = Path(__file__).resolve().parents[1]

# bench_module's child: bench/ as sys.path[0], as for the entry scripts, then the
# module run as __main__ (as ``python -m`` does) with the arguments that follow.
_RUN_MODULE = (
    "import runpy, sys; sys.path[0] = sys.argv.pop(1); "
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)"
)


class BenchError(RuntimeError):
    """A set-up step failed; the message says which and why."""


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Procs:
    """Registry of everything started; ``close`` stops whatever is still running."""

    log_dir: Path
    running: list[Proc] = field(default_factory=list)
    started: int = 0

    def start(
        self,
        name: str,
        argv: list[str],
        *,
        cpu: int | str | None = None,
        env: dict[str, str] | None = None,
    ) -> Proc:
        """Start ``argv`` in its own session, output to a numbered log; ``cpu`` is a
        taskset CPU list (``1``, ``"0-2"``), None for unpinned."""
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu), *argv]  # taskset execs: same pid
        self.started += 1  # numbered logs: one per process, in start order
        log_path = self.log_dir / f"{self.started:03d}-{name}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        proc = Proc(name, popen, log_path)
        self.running.append(proc)
        return proc

    def stop(
        self, proc: Proc, sig: int = signal.SIGTERM, timeout: float = 10.0, *, group: bool = True
    ) -> int | None:
        """Signal the process group (or, with ``group=False``, only the leader, for a
        parent that forwards signals itself) and wait; SIGKILL the group if it does not go
        in time."""
        if proc.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if group:
                    os.killpg(proc.pid, sig)
                else:
                    os.kill(proc.pid, sig)
            try:
                proc.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.popen.wait()
        else:
            # The leader is gone but a forked child may still hold the group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if proc in self.running:
            self.running.remove(proc)
        return proc.popen.returncode

    def close(self) -> None:
        for proc in reversed(list(self.running)):
            self.stop(proc, timeout=5.0)


def bench_module(module: str) -> list[str]:
    """The command that runs bench module ``module`` (``load.sse_origin``) in a Python
    of its own, whatever the current directory; its arguments go after it."""
    return [sys.executable, "-c", _RUN_MODULE, str(BENCH_DIR), module]


def find_tool(name: str) -> str | None:
    """Like ``which``, but also looks in sbin: nginx and nghttpx live there."""
    return shutil.which(name) or shutil.which(name, path="/usr/local/sbin:/usr/sbin:/sbin")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, proc: Proc, timeout: float = 20.0) -> None:
    """Return once 127.0.0.1:port accepts connections; fail early if proc died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise BenchError(
                f"{proc.name} exited with {proc.popen.returncode} before listening:\n"
                + proc.log_tail()
            )
        with socket.socket() as sock:
            sock.settimeout(0.5)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise BenchError(
        f"{proc.name} did not listen on port {port} in {timeout}s:\n" + proc.log_tail()
    )


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (its direct children), from /proc."""
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces; ppid is the 2nd field after ')'.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            kids.append(int(entry))
    return kids


def tree_rss_kib(pid: int) -> int:
    """VmRSS of pid plus all its descendants, in KiB (0 for a vanished process)."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            todo.extend(children(current))
    return total


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of pid and its live descendants, from /proc/PID/stat
    (utime, stime: fields 14 and 15); 0 for a vanished process."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # after ')': state is field 3
            todo.extend(children(current))
    return total / tick


def tree_cpu_clock(pid: int) -> float:
    """The same total as ``tree_cpu_seconds``, to the nanosecond: each process's CPU
    clock (user + system of all its threads, exited ones too) instead of /proc/PID/stat's
    10 ms ticks, which can be 20 ms off, 8% of what Go spends in a quick latency_1."""
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError):  # vanished
            total += time.clock_gettime(_process_cpu_clock(current))
            todo.extend(children(current))
    return total


def tcp_connections_to(pid: int, port: int) -> int:
    """Established TCP connections (IPv4) that pid and its descendants hold to ``port``:
    a proxy's upstream connections, whatever the proxy logs about them."""
    sockets, todo = set(), [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError):  # vanished
            for fd in os.listdir(f"/proc/{current}/fd"):
                with contextlib.suppress(OSError):  # closed meanwhile
                    link = os.readlink(f"/proc/{current}/fd/{fd}")
                    if link.startswith("socket:["):
                        sockets.add(link[8:-1])
            todo.extend(children(current))
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        # sl local_address rem_address st ... inode (the 10th field); 01 = ESTABLISHED
        fields = line.split()
        remote_port = int(fields[2].rsplit(":", 1)[1], 16)
        count += fields[3] == "01" and remote_port == port and fields[9] in sockets
    return count


def _process_cpu_clock(pid: int) -> int:
    # clock_getcpuclockid(pid), which Python does not wrap, as Linux encodes it:
    # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED).
    return (~pid << 3) | 2


def raise_nofile(target: int = 200_000) -> int:
    """Raise RLIMIT_NOFILE (hard too, we are usually root) so children inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for limit in (max(target, hard), hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
            return limit
        except (ValueError, OSError):
            continue
    return soft


def run_on_uvloop(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop when it is installed (as h2ping does), else asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def serve_until_killed(server: Callable[[], AbstractAsyncContextManager[Any]]) -> None:
    """Run ``server()`` (a relay, say) in this process until it is killed."""

    async def serve() -> None:
        async with server():
            await asyncio.Event().wait()

    run_on_uvloop(serve())


def write_results(doc: dict[str, Any], out: Path) -> None:
    """Write one run's results as JSON and say where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"wrote {out}")
