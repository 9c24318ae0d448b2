"""LazyTimer on a fake clock: moving the deadline costs no timer until it must."""

from __future__ import annotations

from h2ping.timers import LazyTimer

from ..fakeloop import FakeLoop


def timer() -> tuple[FakeLoop, LazyTimer, list[float]]:
    loop = FakeLoop()
    fired: list[float] = []
    return loop, LazyTimer(loop, lambda: fired.append(loop.now)), fired


def test_a_later_deadline_reuses_the_armed_timer_and_fires_once_at_it() -> None:
    loop, lazy, fired = timer()
    lazy.set(101.0)
    lazy.set(105.0)
    assert loop.armed == [101.0]  # no timer operation for the move
    loop.advance(1.0)
    assert (loop.armed, fired) == ([105.0], [])  # fired early: re-armed for the deadline
    loop.advance(4.0)
    assert (loop.armed, fired) == ([], [105.0])


def test_an_earlier_deadline_re_arms_at_once() -> None:
    loop, lazy, fired = timer()
    lazy.set(105.0)
    lazy.set(102.0)
    assert loop.armed == [102.0]
    loop.advance(2.0)
    assert fired == [102.0]


def test_clear_leaves_the_timer_idle_and_cancel_removes_it() -> None:
    loop, lazy, fired = timer()
    lazy.set(101.0)
    lazy.clear()
    loop.advance(1.0)
    assert (loop.armed, fired) == ([], [])
    lazy.set(102.0)
    lazy.cancel()
    assert loop.armed == []
    loop.advance(3.0)
    assert fired == []
