"""An upstream connection's life: its one state, changed through one table of
moves, and the two clocks that run while it is open: retirement at its age limit,
and closing when idle.

Everything that changes the state is here (as h11 keeps its ``_state.py``): the
connection opens at the peer's first SETTINGS (:meth:`Lifetime.open`), stops
taking streams at a GOAWAY or a retirement (:meth:`Lifetime.drain`) and ends
(:meth:`Lifetime.end`); each is one move of ``_MOVES`` and nothing else sets the
state. Its stream table reads it to know how many streams it may take; the
connection reads it to know what it is.

Retirement comes at 90-100 % of ``-max-conn-age``, jittered so that connections
opened together do not all retire together. Idle closing comes after
``-idle-conn-timeout`` without a stream, as Go's transport does. The idle check
is one lazy timer: a stream ending only records the time, so a busy connection
costs no timer operation per request.
"""

from __future__ import annotations

import asyncio
import enum
import random
from collections.abc import Callable

from ..errors import UpstreamError
from ..timers import LazyTimer


class ConnState(enum.Enum):
    """An upstream connection's life, one state at a time."""

    CONNECTING = "connecting"  # dialled; the peer's first SETTINGS not yet here
    # (once the preface is out it takes one stream, for the dial's first waiter
    # only: the pool lists it from OPEN on)
    OPEN = "open"  # takes new streams
    DRAINING = "draining"  # GOAWAY received or retired: finishes what it has
    CLOSED = "closed"  # over: every stream ended, the transport closed

    # Singletons: hashed by identity (Enum's own hash runs Python code).
    __hash__ = object.__hash__


_C = ConnState
# A module name for the test made on every read (ended): an enum member's load runs
# the enum metaclass's __getattr__ hook (110 ns on 3.11, 15 here).
_CLOSED = ConnState.CLOSED

#: Every move of a connection's life: ``Lifetime._enter`` makes these and no
#: other. Any state but CLOSED may end (a dead peer, a protocol error, the proxy's
#: shutdown); only an open connection drains.
_MOVES: dict[ConnState, frozenset[ConnState]] = {
    # OPEN at the peer's first SETTINGS
    _C.CONNECTING: frozenset({_C.OPEN, _C.CLOSED}),
    # DRAINING at a GOAWAY, a retirement for age, the last stream id used
    _C.OPEN: frozenset({_C.DRAINING, _C.CLOSED}),
    # CLOSED once the last stream and reservation are gone
    _C.DRAINING: frozenset({_C.CLOSED}),
    _C.CLOSED: frozenset(),
}


class Lifetime:
    """A connection's state (:class:`ConnState`), why it stopped taking streams or
    ended (``reason``), and whether it opened (``ready``, which its dial awaits).
    While it is open, calls ``on_age`` at the age limit (if any) and
    ``on_idle(seconds)`` once the connection has been idle (``busy()`` false) for
    ``idle_timeout``."""

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
        self.state = ConnState.CONNECTING
        self.reason = ""  # why it stopped taking streams, or ended
        self.setup_failure: UpstreamError | None = None  # why it ended before opening
        self.ready: asyncio.Future[None] = loop.create_future()

    # ------------------------------------------------------------ the moves

    def open(self) -> bool:
        """The peer's first SETTINGS: it takes streams, its clocks run, its dial
        is answered. False if it was open already, or is past it."""
        if not self._enter(ConnState.OPEN):
            return False
        self.ready.set_result(None)
        self.start()
        return True

    def drain(self, reason: str) -> bool:
        """It takes no new streams (a GOAWAY, a retirement): neither clock matters
        now. False unless it was open."""
        if not self._enter(ConnState.DRAINING):
            return False
        self.reason = reason
        self.stop()
        return True

    def end(self, reason: str) -> bool:
        """It is over (the first why given stays). False if it was already."""
        if not self._enter(ConnState.CLOSED):
            return False
        self.reason = self.reason or reason
        self.stop()
        return True

    def fail_setup(self, error: UpstreamError) -> None:
        """It ended before opening: its dial, and a stream sent behind the
        preface, fail with ``error``."""
        if not self.ready.done():
            self.setup_failure = error
            self.ready.set_exception(error)
            self.ready.exception()  # the dial may have stopped waiting (a timeout)

    def _enter(self, state: ConnState) -> bool:
        """Move to ``state`` if the table of moves (``_MOVES``) allows it from here;
        every change of state goes through here. False if refused."""
        if state in _MOVES[self.state]:
            self.state = state
            return True
        return False

    # ------------------------------------------------------------ the clocks

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
