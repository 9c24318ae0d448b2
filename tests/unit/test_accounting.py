"""Accounting on its own: what one request leaves in the counters, the latency
histograms and the access log, with a fake clock and no connection."""

from __future__ import annotations

from typing import Any

import pytest

from h2ping.forward.accounting import Accounting, LogEntry
from h2ping.http1.messages import Request
from h2ping.stats import OUTCOMES, Stats

WALL = 1_700_000_000.0


class Clock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Writer:
    """What the accounting reads of a ResponseWriter."""

    started = False
    body_bytes = 0


class Log:
    def __init__(self) -> None:
        self.entries: list[LogEntry] = []

    def write(self, entry: LogEntry) -> None:
        self.entries.append(entry)


class Setup:
    def __init__(self, *, access_log: bool = True) -> None:
        self.stats = Stats()
        self.clock = Clock()
        self.log = Log()
        self.writer = Writer()
        request = Request(b"POST", b"/r?q=1", [(b"host", b"x")], "1.1", True)
        writer: Any = self.writer
        self.account = Accounting(
            self.stats,
            self.log if access_log else None,
            request,
            writer,
            clock=self.clock,
            wall=lambda: WALL,
        )

    def later(self, seconds: float) -> None:
        self.clock.now += seconds

    def ended(self, outcome: str, status: int = 0) -> None:
        self.account.ended(outcome, status, bytes_in=3, conn_id=2, stream_id=5, replays=1)


def test_a_completed_request_counts_its_latencies_and_leaves_one_line() -> None:
    setup = Setup()
    setup.later(0.5)
    setup.account.sent([], 1, 1)
    setup.later(0.25)
    setup.account.response_head(200, [(b":status", b"200")])
    setup.writer.started, setup.writer.body_bytes = True, 7
    setup.later(1.0)
    setup.ended("ok")
    stats = setup.stats
    assert (stats.completed, stats.responses["2xx"]) == (1, 1)
    assert (stats.upstream_headers.count, stats.upstream_headers.total) == (1, 0.25)
    assert (stats.request_duration["ok"].count, stats.request_duration["ok"].total) == (1, 1.75)
    assert setup.log.entries == [(WALL, b"POST", b"/r?q=1", 200, 3, 7, 1.75, 0.25, 2, 5, 1, "ok")]


def test_time_to_headers_counts_from_the_latest_attempt() -> None:
    setup = Setup()
    setup.account.sent([], 1, 1)
    setup.later(2.0)  # refused, then sent again
    setup.account.sent([], 1, 1)
    setup.later(0.5)
    setup.account.response_head(204, [(b":status", b"204")])
    setup.writer.started = True
    setup.ended("ok")
    assert setup.stats.upstream_headers.total == 0.5
    assert setup.log.entries[0][6:8] == (2.5, 0.5)


def test_a_502_counts_as_failed_with_the_status_the_client_got() -> None:
    setup = Setup()
    setup.account.sent([], 1, 1)
    setup.account.error_response(502)
    setup.ended("failed", 502)
    assert (setup.stats.failed, setup.stats.responses["5xx"]) == (1, 1)
    assert setup.stats.upstream_headers.count == 0
    status, headers_after = setup.log.entries[0][3], setup.log.entries[0][7]
    assert (status, headers_after) == (502, None)


def test_a_retracted_response_head_is_uncounted_and_the_502_counted_instead() -> None:
    setup = Setup()
    setup.account.sent([], 1, 1)
    setup.account.response_head(200, [(b":status", b"200")])
    setup.account.response_retracted()  # the writer is no longer started
    setup.account.error_response(502)
    setup.ended("failed", 502)
    assert (setup.stats.responses["2xx"], setup.stats.responses["5xx"]) == (0, 1)
    assert setup.log.entries[0][3] == 502


def test_an_aborted_response_logs_the_upstreams_status() -> None:
    setup = Setup()
    setup.account.sent([], 1, 1)
    setup.account.response_head(200, [(b":status", b"200")])
    setup.writer.started = True
    setup.ended("aborted")
    assert (setup.stats.aborted, setup.stats.responses["2xx"]) == (1, 1)
    assert setup.log.entries[0][3] == 200


def test_an_ending_before_any_response_logs_the_status_given_or_none() -> None:
    cancelled, rejected = Setup(), Setup()
    cancelled.ended("cancelled")
    rejected.ended("rejected", 400)  # the listener answered it
    assert (cancelled.log.entries[0][3], cancelled.log.entries[0][11]) == (0, "cancelled")
    assert (rejected.log.entries[0][3], rejected.log.entries[0][11]) == (400, "rejected")
    assert (cancelled.stats.cancelled, rejected.stats.rejected) == (1, 1)


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_each_outcome_counts_once_and_only_its_own(outcome: str) -> None:
    setup = Setup()
    setup.later(0.125)
    setup.ended(outcome)
    counts = {name: getattr(setup.stats, name) for name in OUTCOMES if name != "ok"}
    counts["ok"] = setup.stats.completed
    assert counts == {name: int(name == outcome) for name in OUTCOMES}
    durations = {name: h.total for name, h in setup.stats.request_duration.items() if h.count}
    assert durations == {outcome: 0.125}


def test_without_an_access_log_only_the_counters_change() -> None:
    setup = Setup(access_log=False)
    setup.ended("ok")
    assert (setup.stats.completed, setup.log.entries) == (1, [])


def test_a_status_given_wins_over_the_upstreams() -> None:
    setup = Setup()
    setup.account.sent([], 1, 1)
    setup.account.response_head(200, [(b":status", b"200")])
    setup.writer.started = True  # then the request body turned out malformed
    setup.ended("rejected", 400)
    assert setup.log.entries[0][3] == 400
