"""When a request the upstream refused is sent again, and how soon.

A stream the upstream refused without processing it (REFUSED_STREAM, or above a
GOAWAY's last_stream_id) ends in a retryable :class:`~h2ping.errors.UpstreamError`.
Such a request is replayed on another connection if its body is still kept whole
(:class:`~h2ping.forward.body.RequestBody`) and no response to it has begun.
Nothing else is replayed: the upstream may have acted on it. A refusal that may
be for the request itself (``UpstreamError.suspect``: the first stream a GOAWAY
with an error code left unprocessed) is tried once more, not again: each such
refusal costs a connection, and every other request on it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable
from typing import Protocol

from ..errors import UpstreamError
from ..stats import Stats
from .body import RequestBody, RetryBudget

#: A request refused unprocessed is replayed up to MAX_REPLAYS times, as Go's
#: transport does: the first at once, later ones after a jittered pause that
#: doubles from REPLAY_BACKOFF and stays under REPLAY_MAX_PAUSE, so a storm of
#: refusals is spread out, not amplified, and costs little latency. Past
#: MAX_REPLAYS it goes on only while the upstream answers other streams (it is
#: shedding load, not refusing everything), up to MAX_REPLAYS_WITH_PROGRESS: an
#: upstream that refuses every stream still fails a request within a second.
MAX_REPLAYS = 6
MAX_REPLAYS_WITH_PROGRESS = 30
#: Tries after a refusal that may be the request's own doing (see the docstring).
MAX_SUSPECT_REPLAYS = 1
REPLAY_BACKOFF = 0.01
REPLAY_MAX_PAUSE = 0.25


class Progress(Protocol):
    """Whether the upstream is answering at all (the pool)."""

    @property
    def answered(self) -> int:
        """Responses the upstream has begun so far, on every connection."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayPolicy:
    """What the replays of one proxy share: the limits on kept bodies, the
    upstream's progress, the counters, and the clock and random source of the
    pauses (the running loop's call_later and random.random, unless a test
    brings its own)."""

    budget: RetryBudget  # --max-buffered-bytes, for all kept bodies together
    body_limit: int  # --retry-body-limit, per request
    progress: Progress
    stats: Stats
    call_later: Callable[[float, Callable[[], None]], asyncio.TimerHandle] | None = None
    jitter: Callable[[], float] = random.random


class Replay:
    """Decides whether and when one request is sent again. It makes the request's
    :class:`RequestBody` with the policy's limits, which decide what is kept for a replay."""

    __slots__ = (
        "_answered_mark",
        "_pause",
        "_policy",
        "_resend",
        "body",
        "replays",
        "suspected",
    )

    def __init__(self, policy: ReplayPolicy, content_length: int | None) -> None:
        self._policy = policy
        #: Fed by the exchange directly: a body chunk costs no call here.
        self.body = RequestBody(policy.budget, policy.body_limit, content_length)
        self.replays = 0  # times sent again so far
        self.suspected = 0  # refusals so far that may be for the request itself
        self._answered_mark = 0  # the upstream's answers when the last attempt failed
        self._pause: asyncio.TimerHandle | None = None
        self._resend: Callable[[], None] | None = None  # while a pause runs

    def allows(self, error: UpstreamError, response_started: bool) -> bool:
        """Whether the attempt that failed with ``error`` may be sent again (a
        suspect refusal is counted here: the answer is acted on)."""
        if not (error.retryable and self.body.kept and not response_started):
            return False
        if error.suspect:
            self.suspected += 1
            if self.suspected > MAX_SUSPECT_REPLAYS:
                return False
        if self.replays < MAX_REPLAYS:
            return True
        return (
            self.replays < MAX_REPLAYS_WITH_PROGRESS
            and self._policy.progress.answered > self._answered_mark
        )

    def response_began(self) -> None:
        """Headers mean the upstream took the request: no replay from here on."""
        self.body.give_up("the response had begun")

    def schedule(self, resend: Callable[[], None]) -> None:
        """Count one more replay and call ``resend``: at once the first time, later
        after a pause (refused again: give the upstream a moment)."""
        policy = self._policy
        self.replays += 1
        self._answered_mark = policy.progress.answered
        policy.stats.request_replayed()
        if self.replays == 1:
            resend()
            return
        pause = min(REPLAY_BACKOFF * 2 ** (self.replays - 2), REPLAY_MAX_PAUSE / 2)
        call_later = policy.call_later or asyncio.get_running_loop().call_later
        self._resend = resend
        self._pause = call_later(pause * (1 + policy.jitter()), self._pause_over)

    def _pause_over(self) -> None:
        resend = self._resend
        self._pause = self._resend = None  # nothing to cancel, no cycle kept
        if resend is not None:
            resend()

    def cancel(self) -> None:
        """The request ended: the pending replay, if any, never happens."""
        if self._pause is not None:
            self._pause.cancel()
            self._pause = self._resend = None

    def refusal(self, error: UpstreamError) -> UpstreamError:
        """``error`` as the client is told it: with why a refused request was not
        replayed (again)."""
        if not error.retryable:
            return error
        if error.suspect and self.suspected > MAX_SUSPECT_REPLAYS:
            detail = f"{error.detail}; not retried again: refused so {self.suspected} times"
            return UpstreamError(error.error, detail)
        if not self.body.kept:
            self._policy.stats.replay_refused_for_size()
            return UpstreamError(error.error, f"{error.detail}; not retried: {self.body.reason}")
        return UpstreamError(error.error, f"{error.detail}; gave up after {self.replays} replays")
