"""``--workers N``: N processes serving one listening socket.

Python runs one core's worth of work per process. The parent binds the socket
(so a second instance on the port fails to bind, as it must) and forks the
workers, which inherit it; the kernel hands each accepted client connection to
one of them, and each has its own event loop and upstream pool. Each worker
reports over its own pipe once it serves; when all have, the parent calls
``on_ready`` (the ready file). The parent only forwards SIGINT/SIGTERM and reaps:
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


def run_workers(
    config: Config, sock: socket.socket, run_one: RunOne, on_ready: Callable[[], bool]
) -> int:
    """Fork ``config.workers`` processes, each calling ``run_one(config, sock, started,
    links)`` with its own config; ``started`` is for the worker to call once it
    serves. ``on_ready`` runs in the parent once every worker has; False stops them all."""
    pipes: dict[int, int] = {}  # read end -> worker pid; EOF on it means the worker ended
    # Worker index -> (worker 1's end, that worker's end).
    pairs: dict[int, tuple[socket.socket, socket.socket]] = {}
    if config.admin_listen is not None:
        pairs = {index: socket.socketpair() for index in range(2, config.workers + 1)}
    # Blocked until the workers and our handler are in place: a signal in between
    # would otherwise reach a worker with the parent's handler, or kill the parent.
    # Each worker unblocks them once its own handlers are installed.
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        for index in range(1, config.workers + 1):
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
                _worker(
                    worker_config, sock, links, run_one, write_end, [read_end, *pipes], not_ours
                )
            os.close(write_end)
            pipes[read_end] = pid
        # The workers hold the socket now. Ours would keep the port accepting
        # connections that nobody serves once they have stopped.
        sock.close()
        stopping = False

        def forward(signum: int, _frame: object) -> None:
            nonlocal stopping
            stopping = True
            _signal_all(pipes.values(), signum)

        for signum in _STOP_SIGNALS:
            signal.signal(signum, forward)
    finally:
        # Only the two workers of a pair may hold it: a copy anywhere else would
        # hide from worker 1 that the other one has exited.
        for pair in pairs.values():
            for end in pair:
                end.close()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)

    worst = 0
    started = 0
    open_pipes = set(pipes)
    while open_pipes:
        readable, _, _ = select.select(list(open_pipes), [], [])
        for fd in readable:
            if os.read(fd, 16):
                started += 1
                if started == config.workers and not stopping and worst == 0 and not on_ready():
                    worst = 1
                    _signal_all(pipes.values(), signal.SIGTERM)
                continue
            open_pipes.discard(fd)
            os.close(fd)
            _, status = os.waitpid(pipes[fd], 0)
            code = os.waitstatus_to_exitcode(status)
            if code != 0 and worst == 0:
                worst = code if code > 0 else 1
                log.error("a worker exited with %d: stopping the others", code)
                _signal_all((pipes[other] for other in open_pipes), signal.SIGTERM)
    return worst


def _links(
    config: Config, pairs: dict[int, tuple[socket.socket, socket.socket]], index: int
) -> Links | None:
    if not pairs:
        return None
    links = Links(instance=config.instance_name, workers=config.workers)
    if index == 1:
        links.ask = {other: pair[0] for other, pair in pairs.items()}
    else:
        links.answer_on = pairs[index][1]
    return links


def _holds(links: Links | None, end: socket.socket) -> bool:
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
