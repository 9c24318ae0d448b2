"""When the pool may open another upstream connection.

The pool dials one connection at a time, when a request finds no free stream
slot. Two things could turn that into a storm of connections, and this module
is what stops each:

- A server that allows no streams (``SETTINGS_MAX_CONCURRENT_STREAMS`` 0, which
  one may send while it sheds load): every new connection is as full as the
  last. Such a connection counts as full, not as a reason to try another at
  once: the next dial waits a back-off (:data:`FIRST_BACKOFF`, doubling up to
  :data:`LAST_BACKOFF`), and the requests that find no slot meanwhile wait for
  it. When a new connection allows none and no stream in flight could make
  room, the requests waiting fail with :class:`NoStreamsAllowed` (a ``502``
  that says so). A connection that takes streams again (its server raised its
  limit, or a new one allows some) ends the back-off.
- Whatever the server says, the pool holds at most ``-max-upstream-conns``
  connections, those being dialled included; at that bound requests wait for a
  stream slot, and one WARNING a minute at most says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .. import errors
from ..errors import UpstreamError

log = logging.getLogger("h2ping.pool")

#: The back-off after the first connection that allowed no streams, in seconds.
FIRST_BACKOFF = 0.5
#: The longest back-off between two such connections.
LAST_BACKOFF = 10.0
#: At most one "connection limit reached" line this often, in seconds.
LIMIT_LOG_INTERVAL = 60.0

_LIMIT = (
    "upstream connection limit reached: %d connections (max-upstream-conns %d); "
    "requests wait for a stream slot on them"
)
_NONE_ALLOWED = (
    "conn=%d: upstream %s allows no streams (SETTINGS_MAX_CONCURRENT_STREAMS 0): "
    "requests get 502 while nothing is in flight; next connection in %.1fs at the earliest"
)
_ALLOWED_AGAIN = "upstream %s allows streams again"


class NoStreamsAllowed(UpstreamError):
    """The upstream's newest connection allowed no streams, and no stream in flight
    can make room: the request is not sent."""

    def __init__(self, target: str) -> None:
        super().__init__(
            errors.DESTINATION_UNAVAILABLE,
            f"upstream allows no streams ({target} sent SETTINGS_MAX_CONCURRENT_STREAMS 0)",
        )


class PoolGrowth:
    """The pool's rules for opening connections: the back-off after a connection that
    allowed no streams, and the bound on how many it holds. It owns both."""

    __slots__ = ("_clock", "_delay", "_limit", "_limit_logged", "_not_before", "_target", "refusal")

    def __init__(self, target: str, limit: int, clock: Callable[[], float]) -> None:
        """``target``: the upstream, for log lines; ``limit``: -max-upstream-conns;
        ``clock``: the loop's time."""
        self._target = target
        self._limit = limit
        self._clock = clock
        self._delay = 0.0  # the next back-off; 0 while connections take streams
        self._not_before = 0.0  # no dial before this loop time
        self._limit_logged = -LIMIT_LOG_INTERVAL
        #: Why requests that nothing in flight can serve fail; None while the
        #: upstream's new connections take streams.
        self.refusal: NoStreamsAllowed | None = None

    def wait(self) -> float:
        """How long the next dial waits first (seconds; 0: at once)."""
        return max(0.0, self._not_before - self._clock())

    def at_limit(self, held: int) -> bool:
        """Whether ``held`` connections (dialled ones included) is the bound; says so
        in the log, at most once a minute."""
        if held < self._limit:
            return False
        now = self._clock()
        if now - self._limit_logged >= LIMIT_LOG_INTERVAL:
            self._limit_logged = now
            log.warning(_LIMIT, held, self._limit)
        return True

    def allows_none(self, conn_id: int) -> NoStreamsAllowed:
        """A new connection allowed no streams: back off before the next. Returns
        what to tell the requests that nothing in flight can serve."""
        self._delay = min(LAST_BACKOFF, max(FIRST_BACKOFF, self._delay * 2))
        self._not_before = self._clock() + self._delay
        level = logging.WARNING if self.refusal is None else logging.DEBUG
        log.log(level, _NONE_ALLOWED, conn_id, self._target, self._delay)
        self.refusal = NoStreamsAllowed(self._target)
        return self.refusal

    def allows_some(self) -> None:
        """A connection takes streams (a new one, or one whose server raised its limit)."""
        if self.refusal is not None:
            log.info(_ALLOWED_AGAIN, self._target)
        self.refusal = None
        self._delay = self._not_before = 0.0
