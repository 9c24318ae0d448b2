"""The memory bound on request bodies kept for replay (``--max-buffered-bytes``).

Each exchange keeps its body (up to ``--retry-body-limit``) until the upstream has
answered, so a refused stream can be sent again. Kept bodies share one budget: a
body that would exceed it streams through without a replay guarantee instead of
growing memory, unlike a soft garbage-collector target.
"""

from __future__ import annotations

from .stats import Stats


class RetryBudget:
    def __init__(self, limit: int, stats: Stats) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._stats = stats

    def reserve(self, nbytes: int) -> bool:
        if self.used + nbytes > self.limit:
            return False
        self.used += nbytes
        self.peak = max(self.peak, self.used)
        self._stats.retry_buffer_bytes = self.used
        return True

    def release(self, nbytes: int) -> None:
        self.used -= nbytes
        self._stats.retry_buffer_bytes = self.used
