"""``--workers N``: N processes serving one listening socket.

Python runs one core's worth of work per process. The parent binds the socket
(so a second instance on the port fails to bind, as it must) and forks the
workers, which inherit it; the kernel hands each accepted client connection to
one of them, and each has its own event loop and upstream pool. Each worker
reports over its own pipe once it serves; when all have, the parent calls
``on_ready`` (the ready file). The parent only forwards SIGINT/SIGTERM (and SIGHUP,
with an access-log file) and reaps:
if a worker fails it stops the others and exits with that worker's code.

With ``-admin-listen``, worker 1 serves it for all, and asks the others for their
numbers over one socketpair each (:mod:`h2ping.process.siblings`), made here before any
fork so that worker 1 can hold every pair's other end.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import socket
from collections.abc import Callable, Iterable

from ..config import Config
from .siblings import Links

log = logging.getLogger("h2ping")

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_STARTED = b"s"

RunOne = Callable[[Config, socket.socket, Callable[[], None], Links | None], int]
#: Worker index -> (worker 1's end, that worker's end), for each worker after the first.
_Pairs = dict[int, tuple[socket.socket, socket.socket]]


def run_workers(
    config: Config, sock: socket.socket, run_one: RunOne, on_ready: Callable[[], bool]
) -> int:
    """Fork ``config.workers`` processes, each calling ``run_one(config, sock, started,
    links)`` with its own config; ``started`` is for the worker to call once it
    serves. ``on_ready`` runs in the parent once every worker has; False stops them all."""
    pairs = _socketpairs(config)
    relayed = _relayed_signals(config)
    # Blocked until the workers and our handler are in place: a signal in between
    # would otherwise reach a worker with the parent's handler, or kill the parent.
    # Each worker unblocks them once its own handlers are installed.
    signal.pthread_sigmask(signal.SIG_BLOCK, relayed)
    try:
        pipes = _fork_all(config, sock, run_one, pairs)
        # The workers hold the socket now. Ours would keep the port accepting
        # connections that nobody serves once they have stopped.
        sock.close()
        supervisor = _Supervisor(pipes, config.workers, on_ready)
        for signum in relayed:
            signal.signal(signum, supervisor.forward)
    finally:
        # Only the two workers of a pair may hold it: a copy anywhere else would
        # hide from worker 1 that the other one has exited.
        for pair in pairs.values():
            for end in pair:
                end.close()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, relayed)
    return supervisor.run()


def _socketpairs(config: Config) -> _Pairs:
    """With an admin endpoint, one socketpair per worker after the first."""
    if config.admin_listen is None:
        return {}
    return {index: socket.socketpair() for index in range(2, config.workers + 1)}


def _relayed_signals(config: Config) -> tuple[signal.Signals, ...]:
    """The signals the parent forwards to every worker: SIGHUP too with an access-log file."""
    if config.access_log not in (None, "-"):  # SIGHUP: log rotation
        return (*_STOP_SIGNALS, signal.SIGHUP)
    return _STOP_SIGNALS


def _fork_all(
    config: Config, sock: socket.socket, run_one: RunOne, pairs: _Pairs
) -> dict[int, int]:
    """Fork every worker; returns the read end of each one's pipe -> its pid."""
    pipes: dict[int, int] = {}  # EOF on a read end means that worker ended
    for index in range(1, config.workers + 1):
        read_end, pid = _fork(config, index, sock, run_one, pairs, earlier=list(pipes))
        pipes[read_end] = pid
    return pipes


def _fork(
    config: Config,
    index: int,
    sock: socket.socket,
    run_one: RunOne,
    pairs: _Pairs,
    earlier: list[int],  # the read ends of the workers before it: not its to hold
) -> tuple[int, int]:
    """Fork worker ``index`` and return its pipe's read end and its pid (in the parent)."""
    worker_config = config.replace(
        name=f"{config.instance_name}/{index}",
        # One metrics endpoint: a scrape hitting a random worker would mislead.
        admin_listen=config.admin_listen if index == 1 else None,
    )
    links = _links(config, pairs, index)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker; it keeps write_end open until it exits
        ends = [end for pair in pairs.values() for end in pair]
        not_ours = [end for end in ends if not _holds(links, end)]
        _worker(worker_config, sock, links, run_one, write_end, [read_end, *earlier], not_ours)
    os.close(write_end)
    return read_end, pid


class _Supervisor:
    """The parent's watch over its workers, from their pipes, until the last has ended."""

    def __init__(self, pipes: dict[int, int], workers: int, on_ready: Callable[[], bool]) -> None:
        self._pipes = pipes  # read end -> worker pid
        self._open = set(pipes)
        self._workers = workers
        self._on_ready = on_ready
        self._started = 0
        self._stopping = False  # a stop signal was forwarded
        self._worst = 0  # the exit code

    def forward(self, signum: int, _frame: object) -> None:
        """The parent's handler of a relayed signal: every worker gets it."""
        self._stopping = self._stopping or signum != signal.SIGHUP
        _signal_all(self._pipes.values(), signum)

    def run(self) -> int:
        """Follow the workers until every one has ended; returns the exit code."""
        while self._open:
            readable, _, _ = select.select(list(self._open), [], [])
            for fd in readable:
                if os.read(fd, 16):
                    self._one_started()
                else:
                    self._one_ended(fd)
        return self._worst

    def _one_started(self) -> None:
        """Once the last worker serves, call ``on_ready``; if it fails, stop them all."""
        self._started += 1
        if self._started != self._workers or self._stopping or self._worst != 0:
            return
        if not self._on_ready():
            self._worst = 1
            _signal_all(self._pipes.values(), signal.SIGTERM)

    def _one_ended(self, fd: int) -> None:
        """Reap the worker whose pipe closed; the first to fail stops the others."""
        self._open.discard(fd)
        os.close(fd)
        _, status = os.waitpid(self._pipes[fd], 0)
        code = os.waitstatus_to_exitcode(status)
        if code != 0 and self._worst == 0:
            self._worst = code if code > 0 else 1
            log.error("a worker exited with %d: stopping the others", code)
            _signal_all((self._pipes[other] for other in self._open), signal.SIGTERM)


def _links(config: Config, pairs: _Pairs, index: int) -> Links | None:
    """Worker ``index``'s ends of the socketpairs, or None without an admin endpoint."""
    if not pairs:
        return None
    links = Links(instance=config.instance_name, workers=config.workers)
    if index == 1:
        links.ask = {other: pair[0] for other, pair in pairs.items()}
    else:
        links.answer_on = pairs[index][1]
    return links


def _holds(links: Links | None, end: socket.socket) -> bool:
    """Whether ``end`` is one of the worker's own link ends."""
    return links is not None and (end is links.answer_on or end in links.ask.values())


def _worker(
    config: Config,
    sock: socket.socket,
    links: Links | None,
    run_one: RunOne,
    write_end: int,
    inherited: list[int],
    not_ours: list[socket.socket],
) -> None:
    """The forked worker's whole life; never returns."""
    code = 1
    try:
        for fd in inherited:  # the parent's read ends: not ours to hold
            os.close(fd)
        for end in not_ours:  # the other workers' ends of the socketpairs
            end.close()
        _detach_from_parent_group()

        def started() -> None:
            os.write(write_end, _STARTED)

        code = run_one(config, sock, started, links)
    finally:
        logging.shutdown()
        os._exit(code)


def _signal_all(pids: Iterable[int], signum: int) -> None:
    """Send ``signum`` to each worker still there."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _detach_from_parent_group() -> None:
    """Own process group: a terminal's Ctrl-C (sent to the whole foreground group)
    reaches only the parent, which forwards it once. A worker that got it twice
    would take the second for "exit now" and skip the drain. Die with the parent
    (Linux), so a killed parent leaves no worker behind."""
    os.setpgid(0, 0)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the parent's forwarding still covers the normal paths
    if os.getppid() == 1:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


_PR_SET_PDEATHSIG = 1
