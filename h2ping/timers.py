"""One loop timer behind a deadline that moves often (request heads, idle
connections, PING intervals): moving it costs an assignment, not a timer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class LazyTimer:
    """Calls ``callback`` once the loop's clock reaches the deadline last set.

    Moving the deadline later, or clearing it, costs no timer operation: the
    armed timer fires at the old time, finds the deadline moved, and re-arms
    for it (or does nothing). Only an earlier deadline re-arms at once.
    """

    __slots__ = ("_armed_at", "_callback", "_deadline", "_handle", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self._loop = loop
        self._callback = callback
        self._deadline: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at = 0.0

    def set(self, when: float) -> None:
        """Call back at loop time ``when`` (replacing any deadline set before)."""
        self._deadline = when
        if self._handle is not None:
            if self._armed_at <= when:
                return  # it fires first, and re-arms
            self._handle.cancel()
        self._arm(when)

    def clear(self) -> None:
        """No call back, until the next :meth:`set`; the armed timer stays, idle."""
        self._deadline = None

    def cancel(self) -> None:
        """No call back, and no timer left on the loop."""
        self._deadline = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def close(self) -> None:
        """As :meth:`cancel`, for good: the callback is let go (it often refers back
        to the timer's owner, a cycle only the cyclic collector would undo)."""
        self.cancel()
        self._callback = _nothing

    def _arm(self, when: float) -> None:
        self._armed_at = when
        self._handle = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle = None
        when = self._deadline
        if when is None:
            return
        if self._loop.time() < when:
            self._arm(when)
            return
        self._deadline = None
        self._callback()


def _nothing() -> None:
    pass
