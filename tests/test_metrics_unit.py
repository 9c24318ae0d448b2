"""Snapshots of a proxy's numbers: what adds up and how, as worker 1 of --workers
adds up the others' for /metrics."""

from __future__ import annotations

import json

import pytest

from h2ping.process.lag import LAG_BUCKETS
from h2ping.process.metrics import Snapshot
from h2ping.stats import Histogram, Stats


def test_snapshots_add_counters_gauges_and_buckets() -> None:
    a = Stats(completed=3, failed=1, connections_opened=1, retry_buffer_bytes=10, ping_acks=2)
    for status in (200, 200, 200, 502):
        a.count_response(status)
    for rtt in (0.002, 0.3):
        a.ping_rtt.observe(rtt)
    b = Stats(completed=4, connections_opened=2, retry_buffer_bytes=5, ping_acks=1)
    b.last_ping_rtt = 0.002
    for status in (204, 204, 204, 204):
        b.count_response(status)
    b.ping_rtt.observe(0.002)
    lag_a, lag_b = Histogram(LAG_BUCKETS), Histogram(LAG_BUCKETS)
    lag_a.observe(0.0008)
    lag_b.observe(0.2)
    ours = Snapshot(a, in_flight=2, connections={"open": 1}, retry_buffer_limit=100, lag=lag_a)
    theirs = Snapshot(
        b, in_flight=1, connections={"open": 1, "draining": 1}, retry_buffer_limit=100, lag=lag_b
    )
    # Worker 1 adds up what it received: the JSON form.
    total = ours + Snapshot.from_json(json.loads(json.dumps(theirs.to_json())))
    stats = total.stats
    assert (stats.completed, stats.failed, stats.connections_opened) == (7, 1, 3)
    assert (stats.ping_acks, stats.retry_buffer_bytes) == (3, 15)
    assert stats.responses == {"2xx": 7, "5xx": 1}
    assert stats.last_ping_rtt is None  # one connection's, not a sum's
    assert total.in_flight == 3
    assert total.connections == {"open": 2, "draining": 1}
    assert total.retry_buffer_limit == 200
    rtt = dict(stats.ping_rtt.cumulative())
    assert (rtt[0.001], rtt[0.005], rtt[0.25], rtt[0.5], rtt[float("inf")]) == (0, 2, 2, 3, 3)
    assert stats.ping_rtt.count == 3 and stats.ping_rtt.total == pytest.approx(0.304)
    assert total.lag is not None
    lag = dict(total.lag.cumulative())
    assert (lag[0.0005], lag[0.001], lag[0.1], lag[0.25]) == (0, 1, 1, 2)
    assert total.lag.count == 2
    # Adding made new objects: the snapshots added are as they were.
    assert (a.completed, a.ping_rtt.count, a.responses["2xx"], lag_a.count) == (3, 2, 3, 1)


def test_what_does_not_add_up_is_refused() -> None:
    with pytest.raises(ValueError, match="buckets differ"):
        Histogram() + Histogram(LAG_BUCKETS)
    data = Snapshot(Stats(), 0, {}, 0, None).to_json()
    del data["stats"]["completed"]
    with pytest.raises(KeyError):
        Snapshot.from_json(data)
    data = Snapshot(Stats(), 0, {}, 0, None).to_json()
    data["stats"]["ping_rtt"]["counts"].pop()
    with pytest.raises(ValueError, match="buckets"):
        Snapshot.from_json(data)
