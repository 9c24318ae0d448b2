"""``--workers N``: N processes share the listening port (``SO_REUSEPORT``).

Python runs one core's worth of work per process; the kernel spreads incoming
client connections over the workers, each with its own event loop and upstream
pool. The parent only forks, forwards SIGINT/SIGTERM and reaps: if a worker fails
(the port is taken, say) it stops the others and exits with that worker's code.
"""

from __future__ import annotations

import contextlib
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
