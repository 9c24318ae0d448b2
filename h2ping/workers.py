"""``--workers N``: N processes share the listening port (``SO_REUSEPORT``).

Python runs one core's worth of work per process; the kernel spreads incoming
client connections over the workers, each with its own event loop and upstream
pool. The parent only forks, forwards SIGINT/SIGTERM and reaps: if a worker fails
(the port is taken, say) it stops the others and exits with that worker's code.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
from collections.abc import Callable

from .config import Config

log = logging.getLogger("h2ping")


def run_workers(config: Config, run_one: Callable[[Config], int]) -> int:
    """Fork ``config.workers`` processes, each calling ``run_one`` with its config."""
    children: list[int] = []
    for index in range(1, config.workers + 1):
        worker_config = config.replace(
            name=f"{config.instance_name}/{index}",
            # One metrics endpoint: a scrape hitting a random worker would mislead.
            admin_listen=config.admin_listen if index == 1 else None,
        )
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                _detach_from_parent_group()
                code = run_one(worker_config)
            finally:
                logging.shutdown()
                os._exit(code)
        children.append(pid)

    def forward(signum: int, _frame: object) -> None:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    worst = 0
    running = set(children)
    while running:
        pid, status = os.wait()
        running.discard(pid)
        code = os.waitstatus_to_exitcode(status)
        if code != 0 and worst == 0:
            worst = code if code > 0 else 1
            log.error("a worker exited with %d: stopping the others", code)
            for other in running:
                os.kill(other, signal.SIGTERM)
    return worst


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
