"""LazyTimer on a fake clock: moving the deadline costs no timer until it must."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from h2ping.timers import LazyTimer


class Handle:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Loop:
    def __init__(self) -> None:
        self.now = 0.0
        self.handles: list[Handle] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None], *args: Any) -> Handle:
        handle = Handle(when, callback)
        self.handles.append(handle)
        return handle

    def advance_to(self, now: float) -> None:
        self.now = now
        while due := [h for h in self.handles if h.when <= now and not h.cancelled]:
            for handle in due:
                self.handles.remove(handle)
                handle.callback()

    @property
    def armed(self) -> list[float]:
        return [h.when for h in self.handles if not h.cancelled]


def timer() -> tuple[Loop, LazyTimer, list[float]]:
    loop = Loop()
    fired: list[float] = []
    return loop, LazyTimer(loop, lambda: fired.append(loop.now)), fired


def test_a_later_deadline_reuses_the_armed_timer_and_fires_once_at_it() -> None:
    loop, lazy, fired = timer()
    lazy.set(1.0)
    lazy.set(5.0)
    assert loop.armed == [1.0]  # no timer operation for the move
    loop.advance_to(1.0)
    assert (loop.armed, fired) == ([5.0], [])  # fired early: re-armed for the deadline
    loop.advance_to(5.0)
    assert (loop.armed, fired) == ([], [5.0])


def test_an_earlier_deadline_re_arms_at_once() -> None:
    loop, lazy, fired = timer()
    lazy.set(5.0)
    lazy.set(2.0)
    assert loop.armed == [2.0]
    loop.advance_to(2.0)
    assert fired == [2.0]


def test_clear_leaves_the_timer_idle_and_cancel_removes_it() -> None:
    loop, lazy, fired = timer()
    lazy.set(1.0)
    lazy.clear()
    loop.advance_to(1.0)
    assert (loop.armed, fired) == ([], [])
    lazy.set(2.0)
    lazy.cancel()
    assert loop.armed == []
    loop.advance_to(3.0)
    assert fired == []
