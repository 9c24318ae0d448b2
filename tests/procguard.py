"""No process a test starts outlives the test run, however the run ends.

A fixture's ``finally`` stops its server when the run ends normally or on
Ctrl-C; SIGTERM (``timeout``, a CI limit) and SIGKILL skip it. So:

- each long-lived server runs in a process group of its own, and a watchdog
  forked from the test run at its start (:class:`Reaper`) kills every group it
  was told of once the run's end of a pipe closes: whenever the test process
  ends, by any signal. Multi-process servers (nginx, Apache, HAProxy) die whole;
- every child also gets the parent-death signal (``PR_SET_PDEATHSIG``), for the
  single processes started in the test run's own group (h2ping under test);
- SIGTERM ends the run as Ctrl-C does (:func:`install`), so fixtures still stop
  what they started, as they do on a normal end.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import warnings

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it ends."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def in_own_group() -> None:
    """In the child before exec: its own session (so its whole tree can be
    killed at once), and the parent-death signal."""
    os.setsid()
    die_with_parent()


class Reaper:
    """A watchdog process: told of process groups, it kills them all when the
    test run ends, whichever way; told a group ended, it forgets it (so a
    number the system gives out again later is left alone)."""

    def __init__(self) -> None:
        read, self._write = os.pipe()
        with warnings.catch_warnings():
            # Python 3.12+ warns of fork() in a process with threads (pytest-xdist's
            # workers have them); the watchdog makes plain system calls only.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the watchdog: plain system calls only, then exit
            os.close(self._write)
            os.setsid()  # out of the run's group: a signal to it must not reach us
            _watch(read)
            os._exit(0)
        os.close(read)
        self.pid = pid
        self.owner = os.getpid()

    def watch(self, pgid: int) -> None:
        os.write(self._write, b"+%d\n" % pgid)

    def forget(self, pgid: int) -> None:
        os.write(self._write, b"-%d\n" % pgid)


def _watch(read: int) -> None:
    groups: set[int] = set()
    pending = b""
    while chunk := os.read(read, 4096):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.startswith(b"+"):
                groups.add(int(line[1:]))
            elif line.startswith(b"-"):
                groups.discard(int(line[1:]))
    for pgid in groups:  # the run ended: whatever it started goes too
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)


_reaper: Reaper | None = None


def reaper() -> Reaper:
    """This test process's watchdog (a forked child has its own)."""
    global _reaper
    if _reaper is None or _reaper.owner != os.getpid():
        _reaper = Reaper()
    return _reaper


def install() -> None:
    """SIGTERM stops the run as SIGINT does: fixtures then tear down."""

    def interrupt(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one ends it at once
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
