"""Event-loop lag: how late a periodic tick runs. A proxy whose loop lags answers
PINGs, accepts and bytes late; this is the number that shows it."""

from __future__ import annotations

import asyncio

from ..stats import Histogram

#: Lag buckets, seconds: fine below 10 ms, where a healthy proxy lives.
LAG_BUCKETS = (
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip


class LagMonitor:
    """Ticks every ``interval`` seconds and records how late each tick ran."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.histogram = Histogram(LAG_BUCKETS)
        self.max = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._due = loop.time() + self.interval
        self._timer = loop.call_at(self._due, self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        lag = max(0.0, now - self._due)
        self.histogram.observe(lag)
        self.max = max(self.max, lag)
        self._due = now + self.interval
        self._timer = loop.call_at(self._due, self._tick)

    def quantile(self, q: float) -> float:
        """Upper bound of the bucket holding the q-quantile (coarse, never under)."""
        target = q * self.histogram.count
        for bound, seen in self.histogram.cumulative():
            if seen >= target:
                return min(bound, self.max)
        return self.max

    def summary(self) -> str:
        if not self.histogram.count:
            return ""
        return (
            f"loop_lag_p99={self.quantile(0.99) * 1000:.1f}ms loop_lag_max={self.max * 1000:.1f}ms"
        )
