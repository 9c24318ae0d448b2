"""A connection's two clocks: retirement at its age limit, and closing when idle.

Retirement comes at 90-100 % of ``-max-conn-age``, jittered so that connections
opened together do not all retire together. Idle closing comes after
``-idle-conn-timeout`` without a stream, as Go's transport does. The idle check
is one lazy timer: a stream ending only records the time, so a busy connection
costs no timer operation per request.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from ..timers import LazyTimer


class Lifetime:
    """Calls ``on_age`` at the age limit (if any) and ``on_idle(seconds)`` once
    the connection has been idle (``busy()`` false) for ``idle_timeout``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        max_conn_age: float,
        idle_timeout: float,
        on_age: Callable[[], None] | None,
        on_idle: Callable[[float], None],
        busy: Callable[[], bool],
    ) -> None:
        self._loop = loop
        self.created_at = loop.time()
        self.age_limit = random.uniform(0.9, 1.0) * max_conn_age
        self._on_age = on_age
        self._age_timer: asyncio.TimerHandle | None = None
        self._idle_timeout = idle_timeout  # 0: never
        self._idle_since = self.created_at
        self._idle_timer = LazyTimer(loop, self._check_idle)
        self._on_idle = on_idle
        self._busy = busy
        self._running = False

    def start(self) -> None:
        """The connection is open: both clocks run."""
        self._running = True
        if self.age_limit > 0 and self._on_age is not None:
            self._age_timer = self._loop.call_at(self.created_at + self.age_limit, self._on_age)
        if self._idle_timeout > 0:
            self._idle_since = self._loop.time()
            self._idle_timer.set(self._idle_since + self._idle_timeout)

    def went_idle(self) -> None:
        """The last stream ended: idle from now."""
        self._idle_since = self._loop.time()

    def stop(self) -> None:
        """The connection stopped taking streams, or ended: no more calls."""
        self._running = False
        if self._age_timer is not None:
            self._age_timer.cancel()
            self._age_timer = None
        self._idle_timer.cancel()

    def close(self) -> None:
        """As :meth:`stop`, for good: let go of the callbacks, which lead back to
        the connection (a cycle only the cyclic collector would undo)."""
        self.stop()
        self._idle_timer.close()
        self._on_age = None
        self._on_idle = _no_idle
        self._busy = _never_busy

    def _check_idle(self) -> None:
        if not self._running:
            return
        now = self._loop.time()
        if self._busy():
            due = now + self._idle_timeout
        else:
            due = self._idle_since + self._idle_timeout
            if due <= now:
                self._running = False
                self._on_idle(now - self._idle_since)
                return
        self._idle_timer.set(due)


def _no_idle(seconds: float) -> None:
    pass


def _never_busy() -> bool:
    return False
