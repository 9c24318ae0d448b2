"""Running out of file descriptors, said plainly.

Each client connection holds a descriptor, and so does each upstream connection,
the admin endpoint's and every file h2ping opens. Under a low ``ulimit -n`` (a
container's or a batch scheduler's) they can all be in use. Then nothing breaks
for good, but new clients cannot be taken: asyncio's loop pauses accepting for a
while and tells its exception handler; uvloop's (libuv) accepts and at once
closes the connections it has no descriptor for, telling nobody. Either way the
operator must hear it, once, in words: the limit, how many are open, what to do.

:class:`DescriptorWatch` hears of every shortage (a failed accept, a housekeeping
step that could not open a file) and looks once a second itself, which is the
only way to notice under uvloop. It logs one WARNING, then at most one a minute
with the count of shortages meanwhile, and counts each in the proxy's
:class:`~h2ping.stats.Stats` (``descriptor_shortages_total`` in ``/metrics``).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections.abc import Callable

from ..stats import Stats

log = logging.getLogger("h2ping")

CHECK_INTERVAL = 1.0  # seconds
#: After a warning, the next comes at the earliest this much later.
WARN_INTERVAL = 60.0
#: A look that finds this few descriptors free counts as a shortage: accept and
#: TLS need a few at once.
SPARE = 2
_SHORT = (errno.EMFILE, errno.ENFILE)


def is_shortage(exc: BaseException | None) -> bool:
    """Whether ``exc`` says that no file descriptor could be had."""
    return isinstance(exc, OSError) and exc.errno in _SHORT


def nofile_limits() -> tuple[int, int]:
    """The soft and hard ``RLIMIT_NOFILE`` (-1 where the platform has none)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on this platform
        return -1, -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinity = resource.RLIM_INFINITY
    return (-1 if soft == infinity else soft), (-1 if hard == infinity else hard)


def open_descriptors() -> int | None:
    """How many descriptors this process has open; None when reading that needs
    the descriptor there is not; -1 where the system does not tell (no /proc)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one listdir used
    except OSError as exc:
        return None if is_shortage(exc) else -1


class DescriptorWatch:
    """One process's watch on its descriptors (see the module)."""

    def __init__(
        self,
        stats: Stats,
        clock: Callable[[], float] = time.monotonic,
        count: Callable[[], int | None] = open_descriptors,
        limits: Callable[[], tuple[int, int]] = nofile_limits,
    ) -> None:
        self._stats = stats
        self._clock = clock
        self._count = count
        self._limits = limits
        self._warned_at: float | None = None
        self._unreported = 0  # shortages since the last warning
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(CHECK_INTERVAL, self._check)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def shortage(self, where: str) -> None:
        """No descriptor could be had for ``where`` (``accept``, ``heap check``)."""
        self._stats.descriptors_short()
        self._unreported += 1
        now = self._clock()
        if self._warned_at is not None and now - self._warned_at < WARN_INTERVAL:
            log.debug("no file descriptor free for %s", where)
            return
        soft, hard = self._limits()
        count = self._count()
        opened = f"{count} open" if count is not None and count >= 0 else "all in use"
        meanwhile = (
            f"; {self._unreported} shortages in the last {now - self._warned_at:.0f}s"
            if self._warned_at is not None
            else ""
        )
        log.warning(
            "out of file descriptors (%s, limit %s soft / %s hard) at %s: new clients "
            "are turned away until some close%s; raise the limit (ulimit -n, the "
            "container's nofile) or lower the concurrency",
            opened,
            _limit_text(soft),
            _limit_text(hard),
            where,
            meanwhile,
        )
        self._warned_at = now
        self._unreported = 0

    def _check(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(CHECK_INTERVAL, self._check)
        soft, _ = self._limits()
        if soft < 0:
            return
        count = self._count()
        if count is None or count >= soft - SPARE:  # (-1: the system does not tell)
            self.shortage("the once-a-second check")


def _limit_text(limit: int) -> str:
    return "unlimited" if limit < 0 else str(limit)
