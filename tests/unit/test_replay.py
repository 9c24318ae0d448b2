"""Replay on its own: which failures are sent again, the jittered back-off and the
limits on kept bodies, with a fake clock and a fake upstream progress, without a
connection or an exchange."""

from __future__ import annotations

import pytest

from h2ping.errors import UpstreamError
from h2ping.forward.body import BUDGET_REACHED, TOO_LARGE, RequestBody, RetryBudget
from h2ping.forward.replay import (
    MAX_REPLAYS,
    MAX_REPLAYS_WITH_PROGRESS,
    REPLAY_BACKOFF,
    REPLAY_MAX_PAUSE,
    Replay,
    ReplayPolicy,
)
from h2ping.stats import Stats

from ..fakeloop import FakeLoop


def refused() -> UpstreamError:
    return UpstreamError("connection_refused", "REFUSED_STREAM", retryable=True)


class Upstream:
    """The pool as the replay sees it: how many answers the upstream gave."""

    answered = 0


class Setup:
    def __init__(
        self,
        *,
        body_limit: int = 1024,
        budget_limit: int = 1 << 20,
        content_length: int | None = 3,
        jitter: float = 0.5,
    ) -> None:
        self.stats = Stats()
        self.clock = FakeLoop()
        self.upstream = Upstream()
        self.budget = RetryBudget(budget_limit, self.stats)
        self.policy = ReplayPolicy(
            budget=self.budget,
            body_limit=body_limit,
            progress=self.upstream,
            stats=self.stats,
            call_later=self.clock.call_later,
            jitter=lambda: jitter,
        )
        self.replay = Replay(self.policy, content_length)
        self.resent = 0

    def resend(self) -> None:
        self.resent += 1

    def refused_again(self, *, progress: bool = False) -> bool:
        """The latest attempt was refused: True if it is sent again (its pause run)."""
        if progress:
            self.upstream.answered += 1
        if not self.replay.allows(refused(), response_started=False):
            return False
        self.replay.schedule(self.resend)
        if self.clock.pending:
            self.clock.run_due()
        return True


def test_the_first_replay_is_sent_at_once() -> None:
    setup = Setup()
    assert setup.replay.allows(refused(), response_started=False)
    setup.replay.schedule(setup.resend)
    assert (setup.resent, setup.clock.delays) == (1, [])
    assert (setup.replay.replays, setup.stats.replays) == (1, 1)


def test_later_replays_wait_a_jittered_pause_that_doubles_under_the_cap() -> None:
    setup = Setup(jitter=0.5)
    assert setup.refused_again()
    setup.replay.schedule(setup.resend)  # the second replay waits...
    assert (setup.resent, setup.clock.delays) == (1, [pytest.approx(REPLAY_BACKOFF * 1.5)])
    setup.clock.run_due()  # ...until its pause is over
    assert setup.resent == 2
    while setup.replay.replays < MAX_REPLAYS:
        assert setup.refused_again()
    expected = [min(REPLAY_BACKOFF * 2**n, REPLAY_MAX_PAUSE / 2) * 1.5 for n in range(5)]
    assert setup.clock.delays == pytest.approx(expected)
    assert expected[1:4] == pytest.approx([2 * pause for pause in expected[:3]])
    assert expected[-1] == pytest.approx(REPLAY_MAX_PAUSE / 2 * 1.5)  # the cap is reached


@pytest.mark.parametrize("jitter", [0.0, 0.999999])
def test_the_jitter_spreads_each_pause_over_one_to_two_times_and_stays_under_the_max(
    jitter: float,
) -> None:
    setup = Setup(jitter=jitter)
    while setup.refused_again(progress=True):
        assert setup.replay.replays <= MAX_REPLAYS_WITH_PROGRESS
    assert len(setup.clock.delays) == MAX_REPLAYS_WITH_PROGRESS - 1
    base = [
        min(REPLAY_BACKOFF * 2**n, REPLAY_MAX_PAUSE / 2) for n in range(len(setup.clock.delays))
    ]
    assert setup.clock.delays == pytest.approx([pause * (1 + jitter) for pause in base])
    assert max(setup.clock.delays) < REPLAY_MAX_PAUSE


def test_without_progress_elsewhere_it_stops_at_max_replays() -> None:
    setup = Setup()
    for _ in range(MAX_REPLAYS):
        assert setup.refused_again()
    assert not setup.refused_again()
    assert (setup.resent, setup.stats.replays) == (MAX_REPLAYS, MAX_REPLAYS)
    assert setup.replay.refusal(refused()).detail == (
        f"REFUSED_STREAM; gave up after {MAX_REPLAYS} replays"
    )


def test_past_max_replays_it_goes_on_only_while_other_streams_progress() -> None:
    setup = Setup()
    for _ in range(MAX_REPLAYS):
        assert setup.refused_again()
    assert setup.refused_again(progress=True)  # the upstream answered others meanwhile
    assert setup.refused_again(progress=True)
    assert not setup.refused_again()  # nothing answered since the last refusal
    assert setup.replay.replays == MAX_REPLAYS + 2


def test_progress_or_not_it_stops_at_max_replays_with_progress() -> None:
    setup = Setup()
    for _ in range(MAX_REPLAYS_WITH_PROGRESS):
        assert setup.refused_again(progress=True)
    assert not setup.refused_again(progress=True)
    assert setup.stats.replays == MAX_REPLAYS_WITH_PROGRESS
    assert setup.replay.refusal(refused()).detail == (
        f"REFUSED_STREAM; gave up after {MAX_REPLAYS_WITH_PROGRESS} replays"
    )


def test_a_spent_budget_refuses_the_replay() -> None:
    setup = Setup(budget_limit=10)
    other = RequestBody(setup.budget, 1024, None)
    other.add(b"x" * 8)  # another request's body holds most of the budget
    setup.replay.body.add(b"abc")
    assert not setup.replay.allows(refused(), response_started=False)
    error = setup.replay.refusal(refused())
    assert error.detail == f"REFUSED_STREAM; not retried: {BUDGET_REACHED}"
    assert (setup.stats.unkept_bodies, setup.stats.replays_refused_for_size) == (1, 1)
    assert (setup.stats.replays, setup.resent) == (0, 0)


def test_an_error_the_upstream_may_have_acted_on_is_not_replayed() -> None:
    setup = Setup()
    reset = UpstreamError("connection_terminated", "connection reset")
    assert not setup.replay.allows(reset, response_started=False)
    assert setup.replay.refusal(reset) is reset  # told as it is
    assert setup.stats.replays_refused_for_size == 0


def test_a_body_no_longer_kept_whole_is_not_replayed() -> None:
    setup = Setup(body_limit=4, content_length=None)
    setup.replay.body.add(b"abc")
    assert setup.replay.allows(refused(), response_started=False)
    setup.replay.body.add(b"de")  # over the limit: what was kept is let go
    assert not setup.replay.allows(refused(), response_started=False)
    assert setup.replay.refusal(refused()).detail == f"REFUSED_STREAM; not retried: {TOO_LARGE}"
    assert setup.stats.replays_refused_for_size == 1


def test_a_declared_length_over_the_limit_is_never_replayed() -> None:
    setup = Setup(body_limit=4, content_length=5)
    assert not setup.replay.allows(refused(), response_started=False)


def test_once_the_response_began_nothing_is_replayed() -> None:
    setup = Setup()
    assert not setup.replay.allows(refused(), response_started=True)
    setup.replay.response_began()
    assert (setup.replay.body.kept, setup.budget.used) == (False, 0)
    assert not setup.replay.allows(refused(), response_started=False)
    assert setup.replay.refusal(refused()).detail == (
        "REFUSED_STREAM; not retried: the response had begun"
    )


def test_a_cancelled_pause_never_resends() -> None:
    setup = Setup()
    assert setup.refused_again()
    setup.replay.schedule(setup.resend)
    setup.replay.cancel()
    setup.replay.cancel()  # twice: nothing more to do
    assert (setup.clock.pending, setup.resent) == (0, 1)


def suspect() -> UpstreamError:
    why = "GOAWAY ENHANCE_YOUR_CALM right after the stream was sent, unprocessed"
    return UpstreamError("connection_terminated", why, retryable=True, suspect=True)


@pytest.mark.parametrize("progress", [False, True])
def test_a_refusal_that_may_be_the_requests_own_doing_gets_one_more_try(progress: bool) -> None:
    """Each such refusal costs a connection (and the requests on it): once more,
    then the client is told why, however well the upstream answers others."""
    setup = Setup()
    if progress:
        setup.upstream.answered += 1
    assert setup.replay.allows(suspect(), response_started=False)
    setup.replay.schedule(setup.resend)
    if progress:
        setup.upstream.answered += 1
    assert not setup.replay.allows(suspect(), response_started=False)
    assert setup.resent == 1
    told = setup.replay.refusal(suspect())
    assert told.detail.endswith("; not retried again: refused so 2 times")
    assert not told.retryable


def test_a_suspect_refusal_leaves_ordinary_refusals_their_replays() -> None:
    setup = Setup()
    assert setup.replay.allows(suspect(), response_started=False)
    setup.replay.schedule(setup.resend)
    for _ in range(MAX_REPLAYS - 1):
        assert setup.refused_again()
    assert not setup.refused_again()
