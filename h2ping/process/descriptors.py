"""File descriptors: how many clients fit, and running out, said plainly.

Each client connection holds a descriptor, and so does each upstream connection,
the admin endpoint's and every file h2ping opens. Under a low ``ulimit -n`` (a
container's or a batch scheduler's) they can all be in use. Then nothing breaks
for good, but new clients cannot be taken: asyncio's loop pauses accepting for a
while and tells its exception handler; uvloop's (libuv) accepts and at once
closes the connections it has no descriptor for, telling nobody. Either way the
operator must hear it, once, in words: the limit, how many are open, what to do.

:class:`ClientCapacity` is how many client connections the process takes at once:
its limit, less what else needs a descriptor. The acceptor stops at it, so that
an upstream dial never finds them all taken by clients.

:class:`DescriptorWatch` hears of every shortage (a failed accept, a housekeeping
step that could not open a file) and looks once a second itself, which is the
only way to notice under uvloop. It logs one WARNING, then at most one a minute
with the count of shortages meanwhile, and counts each in the proxy's
:class:`~h2ping.stats.Stats` (``descriptor_shortages_total`` in ``/metrics``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable

from ..sockets import is_shortage, nofile_limits
from ..stats import Stats

__all__ = ["ClientCapacity", "DescriptorWatch", "is_shortage", "nofile_limits", "open_descriptors"]

log = logging.getLogger("h2ping")

CHECK_INTERVAL = 1.0  # seconds
#: After a warning, the next comes at the earliest this much later.
WARN_INTERVAL = 60.0
#: A look that finds this few descriptors free counts as a shortage: accept and
#: TLS need a few at once.
SPARE = 2
#: Kept free beyond what is counted: the dial in progress and its name lookup,
#: admin requests, an access log reopened, the checks of this module. A
#: sixteenth of the limit, within these bounds.
SPARE_FOR_OTHERS = (4, 64)
#: Streams a connection is assumed to carry before one has told its limit: RFC
#: 9113 (section 6.5.2) recommends no fewer than 100.
ASSUMED_STREAMS = 100
#: Unlimited descriptors: a capacity no loop reaches.
_UNLIMITED = 1 << 30


def open_descriptors() -> int | None:
    """How many descriptors this process has open; None when reading that needs
    the descriptor there is not; -1 where the system does not tell (no /proc)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one listdir used
    except OSError as exc:
        return None if is_shortage(exc) else -1


class ClientCapacity:
    """How many client connections the process may hold at once (call it).

    Each client holds one descriptor; each upstream connection carries up to
    ``stream_limit()`` of their requests (the smallest such limit among open
    connections) and holds one, and up to twice as many upstream connections
    may be open while old ones retire. So of the limit, less the ``baseline``
    open once serving and a spare, clients get S/(S+2).
    """

    def __init__(self, limit: int, baseline: int, stream_limit: Callable[[], int | None]) -> None:
        self.limit = limit  # -1: unlimited
        self.baseline = baseline
        self._stream_limit = stream_limit

    def __call__(self) -> int:
        if self.limit < 0:
            return _UNLIMITED
        streams = self._stream_limit() or ASSUMED_STREAMS
        free = self.limit - self.baseline - self.spare
        return max(1, free * streams // (streams + 2))

    @property
    def spare(self) -> int:
        least, most = SPARE_FOR_OTHERS
        return min(most, max(least, self.limit // 16))

    @classmethod
    def of_this_process(cls, stream_limit: Callable[[], int | None]) -> ClientCapacity:
        """From the soft limit in force and the descriptors open now."""
        soft, _ = nofile_limits()
        opened = open_descriptors()
        return cls(soft, opened if opened is not None and opened > 0 else 0, stream_limit)

    def describe(self) -> str:
        """``19,536 client connections (descriptor limit 20000, ...)``: for the start line."""
        if self.limit < 0:
            return "client connections without a descriptor limit"
        return (
            f"{self():,} client connections (descriptor limit {self.limit}: "
            f"{self.baseline} open at start, {self.spare} spare, the rest shared "
            f"with upstream connections at {self._stream_limit() or ASSUMED_STREAMS} "
            "streams each)"
        )


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
        self._full_warned_at: float | None = None
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

    def full(self, clients: int, capacity: ClientCapacity, queued: int | None) -> None:
        """The acceptor stopped at ``capacity``: say so, at most once a minute."""
        self._stats.accept_paused()
        now = self._clock()
        if self._full_warned_at is not None and now - self._full_warned_at < WARN_INTERVAL:
            return
        self._full_warned_at = now
        waiting = f"; {queued} waiting in the listen queue" if queued is not None else ""
        log.warning(
            "at capacity: %d client connections, the most that descriptor limit %s "
            "leaves room for (upstream connections and files need the rest); new "
            "clients wait in the listen queue and are taken as others finish%s; to "
            "hold more at once, raise the limit (ulimit -n, the container's nofile) "
            "or add -workers",
            clients,
            _limit_text(capacity.limit),
            waiting,
        )

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
