"""An event loop's clock and timers, moved by the test: no real sleeps. The one
fake clock of the tests: the timers' loop (``time``, ``call_at``) and the
replay's pauses (``call_later``) alike."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any


class FakeTimer:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """What timers ask of a loop (``time``, ``call_at``, ``call_later``; and a
    connection's life its ``create_future``), on a clock
    the test moves: ``advance`` by some seconds, or ``run_due`` the next timer."""

    def __init__(self) -> None:
        self.now = 100.0
        self.delays: list[float] = []  # what call_later was asked to wait, in order
        self._timers: list[tuple[float, int, FakeTimer, Callable[[], None]]] = []
        self._seq = itertools.count()

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[..., None], *args: Any) -> FakeTimer:
        timer = FakeTimer()
        heapq.heappush(self._timers, (when, next(self._seq), timer, lambda: callback(*args)))
        return timer

    def create_future(self) -> asyncio.Future[Any]:
        """A future of the real loop the test runs on: only the clock is fake."""
        return asyncio.get_running_loop().create_future()

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> FakeTimer:
        self.delays.append(delay)
        return self.call_at(self.now + delay, callback, *args)

    def run_due(self) -> bool:
        """Move the clock to the soonest timer not cancelled and run it; False if
        there is none."""
        while self._timers:
            when, _, timer, run = heapq.heappop(self._timers)
            if not timer.cancelled:
                self.now = max(self.now, when)
                run()
                return True
        return False

    def advance(self, seconds: float) -> None:
        """Move the clock, firing every timer due on the way, in order."""
        end = self.now + seconds
        while self._timers and self._timers[0][0] <= end:
            when, _, timer, run = heapq.heappop(self._timers)
            self.now = max(self.now, when)
            if not timer.cancelled:
                run()
        self.now = end

    @property
    def pending(self) -> int:
        return sum(not t.cancelled for _, _, t, _ in self._timers)

    @property
    def armed(self) -> list[float]:
        """When the timers not cancelled are due, soonest first."""
        return sorted(when for when, _, t, _ in self._timers if not t.cancelled)
