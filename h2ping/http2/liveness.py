"""PING keepalive and death detection for one HTTP/2 connection.

A PING goes out once nothing has been read for ``interval``: its bytes keep a
middlebox that cuts idle flows from cutting this one. The connection is dead when
*nothing at all* arrives within ``timeout`` of a PING. Any inbound byte counts,
not only the ACK: an ACK queued behind megabytes of DATA on a slow path must not
kill a healthy connection (the Go transport waits for the ACK alone, and does).

One timer per connection, checked lazily: reads only record a timestamp. What it
measures (a round trip, a silence) it hands back; its connection's observer counts
and logs it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..timers import LazyTimer

#: Before declaring death, look once more after this long: if the event loop
#: itself was blocked, bytes may be waiting in the socket, not yet read.
DEATH_CONFIRM_DELAY = 0.05


class Liveness:
    def __init__(
        self,
        interval: float,
        timeout: float,
        send_ping: Callable[[bytes], None],
        on_dead: Callable[[float, float], None],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """``send_ping(payload)`` writes a PING; ``on_dead(silent_for, since_ping)``
        is called once, when the peer is declared dead. ``loop`` gives the clock and
        the timers (default: the running loop)."""
        self._loop = loop or asyncio.get_running_loop()
        self._interval = interval
        self.timeout = timeout
        self._send_ping = send_ping
        self._on_dead = on_dead
        self.last_read = self._loop.time()
        self._sent_at: float | None = None  # loop time, for the timers
        self._sent_precise = 0.0  # perf_counter: uvloop's clock has 1 ms resolution
        self._payload = b""
        self._count = 0
        self._confirming = False
        self._timer = LazyTimer(self._loop, self._check)

    def start(self) -> None:
        self._schedule(self.last_read + self._interval)

    def stop(self) -> None:
        self._timer.cancel()

    def close(self) -> None:
        """As :meth:`stop`, for good: let go of the callbacks, which lead back to
        the connection (a cycle only the cyclic collector would undo)."""
        self._timer.close()
        self._send_ping = _no_ping
        self._on_dead = _no_death

    def saw_bytes(self) -> None:
        self.last_read = self._loop.time()

    def on_ack(self, payload: bytes) -> float | None:
        """A PING ACK arrived: the round trip in seconds when it answers the PING
        in flight, else None."""
        if payload == self._payload and self._sent_at is not None:
            return time.perf_counter() - self._sent_precise
        return None

    def _schedule(self, when: float) -> None:
        if self._interval > 0:
            self._timer.set(when)

    def _check(self) -> None:
        now = self._loop.time()
        sent_at = self._sent_at
        if sent_at is not None:
            if self.last_read >= sent_at:
                self._sent_at = None  # something arrived after the PING: alive
            elif now - sent_at < self.timeout:
                self._schedule(sent_at + self.timeout)
                return
            elif not self._confirming:
                self._confirming = True
                self._schedule(now + DEATH_CONFIRM_DELAY)
                return
            else:
                self._on_dead(now - self.last_read, now - sent_at)
                return
        self._confirming = False
        idle_until = self.last_read + self._interval
        if now < idle_until:
            self._schedule(idle_until)
            return
        self._count += 1
        self._payload = self._count.to_bytes(8, "big")
        self._sent_at = now
        self._sent_precise = time.perf_counter()
        self._send_ping(self._payload)
        # Look again after an interval: an ACK by then restarts the idle clock.
        self._schedule(now + min(self._interval, self.timeout))


def _no_ping(payload: bytes) -> None:
    pass


def _no_death(silent_for: float, since_ping: float) -> None:
    pass
