"""Snapshots of a proxy's numbers: what adds up and how, as worker 1 of --workers
adds up the others' for /metrics."""

from __future__ import annotations

import json

import pytest

from h2ping._version import __version__
from h2ping.config import Config, parse_upstream
from h2ping.egress import ProxySetting
from h2ping.process.lag import LAG_BUCKETS
from h2ping.process.metrics import METRICS, Snapshot, Workers, family_names, render
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


def test_workers_descriptor_numbers_add_but_the_shared_queue_does_not() -> None:
    def of(clients: int, queued: int, opened: int = 50) -> Snapshot:
        counts = {"clients": clients, "capacity": 900, "open": opened, "limit": 1000}
        return Snapshot(Stats(), 0, {}, 0, None, descriptors={**counts, "queued": queued})

    total = of(400, 7) + Snapshot.from_json(json.loads(json.dumps(of(380, 9).to_json())))
    assert total.descriptors == {
        "clients": 780, "capacity": 1800, "open": 100, "limit": 2000, "queued": 9,
    }  # fmt: skip
    assert (of(1, 1) + of(1, 1, opened=-1)).descriptors["open"] == -1  # one did not know


def _varied() -> tuple[Snapshot, Config]:
    """Every counter its own value, histograms with observations in several buckets
    (and past the last bound), label values that need escaping."""
    stats = Stats(
        requests=5,
        completed=10,
        failed=17,
        aborted=26,
        cancelled=37,
        rejected=50,
        cut_at_shutdown=65,
        replays=82,
        replays_refused_for_size=101,
        unkept_bodies=122,
        retry_buffer_bytes=145,
        connections_opened=170,
        goaways=197,
        retired=226,
        pings_sent=257,
        ping_acks=290,
        ping_timeouts=325,
        too_many_pings=362,
        access_log_dropped=401,
        descriptor_shortages=442,
        accept_pauses=485,
        tls_resumptions=530,
        window_pings=577,
        window_raises=626,
    )
    for status in (200, 204, 502, 101, 404, 200):
        stats.count_response(status)
    for seconds in (0.003, 0.3, 12.0, 9000.0):
        stats.request_duration["ok"].observe(seconds)
    stats.request_duration["failed"].observe(0.5)
    stats.request_duration["cut_at_shutdown"].observe(61.25)
    stats.upstream_headers.observe(0.02)
    for rtt in (0.0004, 0.002, 0.002, 0.3, 11.0):
        stats.ping_rtt.observe(rtt)
    lag = Histogram(LAG_BUCKETS)
    for seconds in (0.0001, 0.004, 2.0):
        lag.observe(seconds)
    snapshot = Snapshot(
        stats,
        in_flight=5,
        connections={"open": 3, "draining": 1, "idle": 2},
        retry_buffer_limit=1 << 30,
        lag=lag,
        fast_paths={"hpack": 1, "frames": 0},
        descriptors={"clients": 530, "capacity": 577, "open": 626, "limit": 677, "queued": 730},
    )
    config = Config(
        upstream=parse_upstream("https://upstream.test:8443"),
        name='edge "a"\\b\nc',
        proxy=ProxySetting.read("http://user:s3cret@proxy.test:3128"),
        access_log="/var/log/h2ping.log",
        loop_lag_interval=0.25,
    )
    return snapshot, config


def test_render_writes_every_family_as_it_always_has() -> None:
    """The whole text, byte for byte: what scrapers and dashboards have been reading."""
    snapshot, config = _varied()
    text = render(snapshot, config, config.instance_name, Workers(configured=4, reporting=3))
    assert text == RENDERED.replace("VERSION", __version__)
    assert "s3cret" not in text and "user" not in text  # the proxy's address only


def test_render_leaves_out_what_is_not_there() -> None:
    """No workers, no lag measured, no access log, no fast path known: those families
    go (fast_path keeps its HELP and TYPE), every other one is there with zeros."""
    config = Config(upstream=parse_upstream("http://u.test"))
    text = render(Snapshot(Stats(), 0, {}, 0, None), config, config.instance_name)
    lines = text.splitlines()
    assert [line for line in lines if line.startswith("# TYPE")] == [
        "# TYPE h2ping_info gauge",
        "# TYPE h2ping_upstream_proxy gauge",
        "# TYPE h2ping_requests_total counter",
        "# TYPE h2ping_request_duration_seconds histogram",
        "# TYPE h2ping_upstream_headers_seconds histogram",
        "# TYPE h2ping_requests_in_flight gauge",
        "# TYPE h2ping_responses_total counter",
        "# TYPE h2ping_upstream_connections gauge",
        "# TYPE h2ping_upstream_connections_opened_total counter",
        "# TYPE h2ping_tls_resumptions_total counter",
        "# TYPE h2ping_pings_sent_total counter",
        "# TYPE h2ping_window_pings_total counter",
        "# TYPE h2ping_receive_window_raises_total counter",
        "# TYPE h2ping_ping_acks_total counter",
        "# TYPE h2ping_ping_rtt_seconds histogram",
        "# TYPE h2ping_ping_timeouts_total counter",
        "# TYPE h2ping_goaways_total counter",
        "# TYPE h2ping_too_many_pings_total counter",
        "# TYPE h2ping_replays_total counter",
        "# TYPE h2ping_replays_refused_for_size_total counter",
        "# TYPE h2ping_unkept_bodies_total counter",
        "# TYPE h2ping_retired_connections_total counter",
        "# TYPE h2ping_retry_buffer_bytes gauge",
        "# TYPE h2ping_retry_buffer_limit_bytes gauge",
        "# TYPE h2ping_fast_path gauge",
        "# TYPE h2ping_descriptor_shortages_total counter",
        "# TYPE h2ping_client_connections gauge",
        "# TYPE h2ping_client_capacity gauge",
        "# TYPE h2ping_accept_pauses_total counter",
        "# TYPE h2ping_listen_queue gauge",
        "# TYPE h2ping_descriptors_open gauge",
        "# TYPE h2ping_descriptors_limit gauge",
    ]
    assert (
        lines[2]
        == f'h2ping_info{{version="{__version__}",upstream="http://u.test",instance="u.test"}} 1'
    )
    fast_path = lines.index("# TYPE h2ping_fast_path gauge")
    assert lines[fast_path + 1].startswith("# HELP h2ping_descriptor_shortages_total ")
    samples = [line for line in lines[3:] if not line.startswith("#")]
    unknown = [line for line in samples if line.startswith(("h2ping_client_c", "h2ping_desc"))]
    unknown = [line for line in unknown if "shortages" not in line]
    unknown.append(next(line for line in samples if line.startswith("h2ping_listen_queue")))
    assert all(line.endswith(" NaN") for line in unknown), unknown  # no descriptors told
    known = [line for line in samples if line not in unknown]
    assert all(line.endswith((" 0", " 0.0")) for line in known), known
    assert 'h2ping_upstream_connections{state="draining"} 0' in lines
    assert 'h2ping_responses_total{status_class="3xx"} 0' in lines


def test_the_spec_list_is_what_render_writes() -> None:
    """METRICS (read by documentation checks) names every family, with its type and
    help, in the order written; those with ``only_with`` are the ones a bare proxy
    leaves out."""
    snapshot, config = _varied()
    lines = render(snapshot, config, config.instance_name, Workers(4, 3)).splitlines()
    written = [line.split(" ", 3)[2:] for line in lines if line.startswith("# HELP ")]
    assert written == [[spec.name, spec.help_for(config)] for spec in METRICS]
    types = [line.split(" ")[2:] for line in lines if line.startswith("# TYPE ")]
    assert types == [[spec.name, spec.type] for spec in METRICS]
    assert family_names() == tuple(spec.name for spec in METRICS)
    assert len(set(family_names())) == len(METRICS)
    bare = Config(upstream=parse_upstream("http://u.test"))
    text = render(Snapshot(Stats(), 0, {}, 0, None), bare, "u")
    kept = {line.split(" ")[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    assert {spec.name for spec in METRICS if spec.only_with is None} == kept
    assert {spec.only_with for spec in METRICS} == {
        None,
        "-workers",
        "-loop-lag-interval",
        "-access-log",
    }


# Rendered from _varied() with Workers(4, 3); VERSION stands for the version.
RENDERED = r"""# HELP h2ping_info Always 1; the labels describe this proxy.
# TYPE h2ping_info gauge
h2ping_info{version="VERSION",upstream="https://upstream.test:8443",instance="edge \"a\"\\b\nc"} 1
# HELP h2ping_upstream_proxy 1 when upstream connections go through this forward proxy (CONNECT), 0 with proxy="" when they go directly.
# TYPE h2ping_upstream_proxy gauge
h2ping_upstream_proxy{proxy="proxy.test:3128"} 1
# HELP h2ping_workers Worker processes (-workers).
# TYPE h2ping_workers gauge
h2ping_workers 4
# HELP h2ping_workers_reporting Workers whose numbers are in this scrape; the others did not answer in time.
# TYPE h2ping_workers_reporting gauge
h2ping_workers_reporting 3
# HELP h2ping_requests_total Requests that ended, by outcome: ok; failed (answered 502); aborted (cut after the response began); cancelled (the client left); rejected (malformed HTTP/1.1, or a head over the upstream's header list limit: answered 4xx/5xx by h2ping); cut_at_shutdown (unfinished when the shutdown grace ran out).
# TYPE h2ping_requests_total counter
h2ping_requests_total{outcome="ok"} 10
h2ping_requests_total{outcome="failed"} 17
h2ping_requests_total{outcome="aborted"} 26
h2ping_requests_total{outcome="cancelled"} 37
h2ping_requests_total{outcome="rejected"} 50
h2ping_requests_total{outcome="cut_at_shutdown"} 65
# HELP h2ping_request_duration_seconds From a request's head received to the last byte sent to the client, by outcome.
# TYPE h2ping_request_duration_seconds histogram
h2ping_request_duration_seconds_bucket{outcome="ok",le="0.005"} 1
h2ping_request_duration_seconds_bucket{outcome="ok",le="0.01"} 1
h2ping_request_duration_seconds_bucket{outcome="ok",le="0.025"} 1
h2ping_request_duration_seconds_bucket{outcome="ok",le="0.05"} 1
h2ping_request_duration_seconds_bucket{outcome="ok",le="0.1"} 1
h2ping_request_duration_seconds_bucket{outcome="ok",le="0.25"} 1
h2ping_request_duration_seconds_bucket{outcome="ok",le="0.5"} 2
h2ping_request_duration_seconds_bucket{outcome="ok",le="1.0"} 2
h2ping_request_duration_seconds_bucket{outcome="ok",le="2.5"} 2
h2ping_request_duration_seconds_bucket{outcome="ok",le="5.0"} 2
h2ping_request_duration_seconds_bucket{outcome="ok",le="10.0"} 2
h2ping_request_duration_seconds_bucket{outcome="ok",le="30.0"} 3
h2ping_request_duration_seconds_bucket{outcome="ok",le="60.0"} 3
h2ping_request_duration_seconds_bucket{outcome="ok",le="120.0"} 3
h2ping_request_duration_seconds_bucket{outcome="ok",le="300.0"} 3
h2ping_request_duration_seconds_bucket{outcome="ok",le="600.0"} 3
h2ping_request_duration_seconds_bucket{outcome="ok",le="1200.0"} 3
h2ping_request_duration_seconds_bucket{outcome="ok",le="1800.0"} 3
h2ping_request_duration_seconds_bucket{outcome="ok",le="3600.0"} 3
h2ping_request_duration_seconds_bucket{outcome="ok",le="7200.0"} 3
h2ping_request_duration_seconds_bucket{outcome="ok",le="+Inf"} 4
h2ping_request_duration_seconds_sum{outcome="ok"} 9012.303
h2ping_request_duration_seconds_count{outcome="ok"} 4
h2ping_request_duration_seconds_bucket{outcome="failed",le="0.005"} 0
h2ping_request_duration_seconds_bucket{outcome="failed",le="0.01"} 0
h2ping_request_duration_seconds_bucket{outcome="failed",le="0.025"} 0
h2ping_request_duration_seconds_bucket{outcome="failed",le="0.05"} 0
h2ping_request_duration_seconds_bucket{outcome="failed",le="0.1"} 0
h2ping_request_duration_seconds_bucket{outcome="failed",le="0.25"} 0
h2ping_request_duration_seconds_bucket{outcome="failed",le="0.5"} 1
h2ping_request_duration_seconds_bucket{outcome="failed",le="1.0"} 1
h2ping_request_duration_seconds_bucket{outcome="failed",le="2.5"} 1
h2ping_request_duration_seconds_bucket{outcome="failed",le="5.0"} 1
h2ping_request_duration_seconds_bucket{outcome="failed",le="10.0"} 1
h2ping_request_duration_seconds_bucket{outcome="failed",le="30.0"} 1
h2ping_request_duration_seconds_bucket{outcome="failed",le="60.0"} 1
h2ping_request_duration_seconds_bucket{outcome="failed",le="120.0"} 1
h2ping_request_duration_seconds_bucket{outcome="failed",le="300.0"} 1
h2ping_request_duration_seconds_bucket{outcome="failed",le="600.0"} 1
h2ping_request_duration_seconds_bucket{outcome="failed",le="1200.0"} 1
h2ping_request_duration_seconds_bucket{outcome="failed",le="1800.0"} 1
h2ping_request_duration_seconds_bucket{outcome="failed",le="3600.0"} 1
h2ping_request_duration_seconds_bucket{outcome="failed",le="7200.0"} 1
h2ping_request_duration_seconds_bucket{outcome="failed",le="+Inf"} 1
h2ping_request_duration_seconds_sum{outcome="failed"} 0.5
h2ping_request_duration_seconds_count{outcome="failed"} 1
h2ping_request_duration_seconds_bucket{outcome="aborted",le="0.005"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="0.01"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="0.025"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="0.05"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="0.1"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="0.25"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="0.5"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="1.0"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="2.5"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="5.0"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="10.0"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="30.0"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="60.0"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="120.0"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="300.0"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="600.0"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="1200.0"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="1800.0"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="3600.0"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="7200.0"} 0
h2ping_request_duration_seconds_bucket{outcome="aborted",le="+Inf"} 0
h2ping_request_duration_seconds_sum{outcome="aborted"} 0.0
h2ping_request_duration_seconds_count{outcome="aborted"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="0.005"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="0.01"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="0.025"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="0.05"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="0.1"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="0.25"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="0.5"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="1.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="2.5"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="5.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="10.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="30.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="60.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="120.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="300.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="600.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="1200.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="1800.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="3600.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="7200.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cancelled",le="+Inf"} 0
h2ping_request_duration_seconds_sum{outcome="cancelled"} 0.0
h2ping_request_duration_seconds_count{outcome="cancelled"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="0.005"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="0.01"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="0.025"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="0.05"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="0.1"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="0.25"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="0.5"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="1.0"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="2.5"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="5.0"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="10.0"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="30.0"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="60.0"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="120.0"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="300.0"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="600.0"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="1200.0"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="1800.0"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="3600.0"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="7200.0"} 0
h2ping_request_duration_seconds_bucket{outcome="rejected",le="+Inf"} 0
h2ping_request_duration_seconds_sum{outcome="rejected"} 0.0
h2ping_request_duration_seconds_count{outcome="rejected"} 0
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="0.005"} 0
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="0.01"} 0
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="0.025"} 0
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="0.05"} 0
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="0.1"} 0
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="0.25"} 0
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="0.5"} 0
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="1.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="2.5"} 0
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="5.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="10.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="30.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="60.0"} 0
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="120.0"} 1
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="300.0"} 1
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="600.0"} 1
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="1200.0"} 1
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="1800.0"} 1
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="3600.0"} 1
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="7200.0"} 1
h2ping_request_duration_seconds_bucket{outcome="cut_at_shutdown",le="+Inf"} 1
h2ping_request_duration_seconds_sum{outcome="cut_at_shutdown"} 61.25
h2ping_request_duration_seconds_count{outcome="cut_at_shutdown"} 1
# HELP h2ping_upstream_headers_seconds From a request sent upstream to its response headers (the upstream's time to first byte).
# TYPE h2ping_upstream_headers_seconds histogram
h2ping_upstream_headers_seconds_bucket{le="0.005"} 0
h2ping_upstream_headers_seconds_bucket{le="0.01"} 0
h2ping_upstream_headers_seconds_bucket{le="0.025"} 1
h2ping_upstream_headers_seconds_bucket{le="0.05"} 1
h2ping_upstream_headers_seconds_bucket{le="0.1"} 1
h2ping_upstream_headers_seconds_bucket{le="0.25"} 1
h2ping_upstream_headers_seconds_bucket{le="0.5"} 1
h2ping_upstream_headers_seconds_bucket{le="1.0"} 1
h2ping_upstream_headers_seconds_bucket{le="2.5"} 1
h2ping_upstream_headers_seconds_bucket{le="5.0"} 1
h2ping_upstream_headers_seconds_bucket{le="10.0"} 1
h2ping_upstream_headers_seconds_bucket{le="30.0"} 1
h2ping_upstream_headers_seconds_bucket{le="60.0"} 1
h2ping_upstream_headers_seconds_bucket{le="120.0"} 1
h2ping_upstream_headers_seconds_bucket{le="300.0"} 1
h2ping_upstream_headers_seconds_bucket{le="600.0"} 1
h2ping_upstream_headers_seconds_bucket{le="1200.0"} 1
h2ping_upstream_headers_seconds_bucket{le="1800.0"} 1
h2ping_upstream_headers_seconds_bucket{le="3600.0"} 1
h2ping_upstream_headers_seconds_bucket{le="7200.0"} 1
h2ping_upstream_headers_seconds_bucket{le="+Inf"} 1
h2ping_upstream_headers_seconds_sum 0.02
h2ping_upstream_headers_seconds_count 1
# HELP h2ping_requests_in_flight Requests received and not yet finished.
# TYPE h2ping_requests_in_flight gauge
h2ping_requests_in_flight 5
# HELP h2ping_responses_total Responses sent to clients, by status class.
# TYPE h2ping_responses_total counter
h2ping_responses_total{status_class="1xx"} 1
h2ping_responses_total{status_class="2xx"} 3
h2ping_responses_total{status_class="3xx"} 0
h2ping_responses_total{status_class="4xx"} 1
h2ping_responses_total{status_class="5xx"} 1
# HELP h2ping_upstream_connections Upstream HTTP/2 connections by state (draining: after GOAWAY or retirement).
# TYPE h2ping_upstream_connections gauge
h2ping_upstream_connections{state="draining"} 1
h2ping_upstream_connections{state="idle"} 2
h2ping_upstream_connections{state="open"} 3
# HELP h2ping_upstream_connections_opened_total Upstream connections opened.
# TYPE h2ping_upstream_connections_opened_total counter
h2ping_upstream_connections_opened_total 170
# HELP h2ping_tls_resumptions_total Upstream TLS handshakes that resumed the session of an earlier connection.
# TYPE h2ping_tls_resumptions_total counter
h2ping_tls_resumptions_total 530
# HELP h2ping_pings_sent_total HTTP/2 PINGs sent to the upstream.
# TYPE h2ping_pings_sent_total counter
h2ping_pings_sent_total 257
# HELP h2ping_window_pings_total PINGs sent to measure the link's round trip and bandwidth (receive windows).
# TYPE h2ping_window_pings_total counter
h2ping_window_pings_total 577
# HELP h2ping_receive_window_raises_total Times an upstream connection's stream receive windows grew to fit its link.
# TYPE h2ping_receive_window_raises_total counter
h2ping_receive_window_raises_total 626
# HELP h2ping_ping_acks_total PING ACKs received from the upstream.
# TYPE h2ping_ping_acks_total counter
h2ping_ping_acks_total 290
# HELP h2ping_ping_rtt_seconds Round-trip time of acknowledged PINGs.
# TYPE h2ping_ping_rtt_seconds histogram
h2ping_ping_rtt_seconds_bucket{le="0.001"} 1
h2ping_ping_rtt_seconds_bucket{le="0.005"} 3
h2ping_ping_rtt_seconds_bucket{le="0.01"} 3
h2ping_ping_rtt_seconds_bucket{le="0.025"} 3
h2ping_ping_rtt_seconds_bucket{le="0.05"} 3
h2ping_ping_rtt_seconds_bucket{le="0.1"} 3
h2ping_ping_rtt_seconds_bucket{le="0.25"} 3
h2ping_ping_rtt_seconds_bucket{le="0.5"} 4
h2ping_ping_rtt_seconds_bucket{le="1.0"} 4
h2ping_ping_rtt_seconds_bucket{le="2.5"} 4
h2ping_ping_rtt_seconds_bucket{le="5.0"} 4
h2ping_ping_rtt_seconds_bucket{le="10.0"} 4
h2ping_ping_rtt_seconds_bucket{le="+Inf"} 5
h2ping_ping_rtt_seconds_sum 11.3044
h2ping_ping_rtt_seconds_count 5
# HELP h2ping_event_loop_lag_seconds How late a 0.25s tick of the event loop ran.
# TYPE h2ping_event_loop_lag_seconds histogram
h2ping_event_loop_lag_seconds_bucket{le="0.0005"} 1
h2ping_event_loop_lag_seconds_bucket{le="0.001"} 1
h2ping_event_loop_lag_seconds_bucket{le="0.002"} 1
h2ping_event_loop_lag_seconds_bucket{le="0.003"} 1
h2ping_event_loop_lag_seconds_bucket{le="0.005"} 2
h2ping_event_loop_lag_seconds_bucket{le="0.0075"} 2
h2ping_event_loop_lag_seconds_bucket{le="0.01"} 2
h2ping_event_loop_lag_seconds_bucket{le="0.015"} 2
h2ping_event_loop_lag_seconds_bucket{le="0.02"} 2
h2ping_event_loop_lag_seconds_bucket{le="0.03"} 2
h2ping_event_loop_lag_seconds_bucket{le="0.05"} 2
h2ping_event_loop_lag_seconds_bucket{le="0.1"} 2
h2ping_event_loop_lag_seconds_bucket{le="0.25"} 2
h2ping_event_loop_lag_seconds_bucket{le="0.5"} 2
h2ping_event_loop_lag_seconds_bucket{le="1.0"} 2
h2ping_event_loop_lag_seconds_bucket{le="+Inf"} 3
h2ping_event_loop_lag_seconds_sum 2.0041
h2ping_event_loop_lag_seconds_count 3
# HELP h2ping_ping_timeouts_total Upstream connections declared dead: silent after a PING.
# TYPE h2ping_ping_timeouts_total counter
h2ping_ping_timeouts_total 325
# HELP h2ping_goaways_total GOAWAY frames received from the upstream.
# TYPE h2ping_goaways_total counter
h2ping_goaways_total 197
# HELP h2ping_too_many_pings_total GOAWAY(ENHANCE_YOUR_CALM, too_many_pings) received: the upstream's PING policy; each doubles the PING interval of new connections, up to 300s.
# TYPE h2ping_too_many_pings_total counter
h2ping_too_many_pings_total 362
# HELP h2ping_replays_total Refused requests sent again on another connection.
# TYPE h2ping_replays_total counter
h2ping_replays_total 82
# HELP h2ping_replays_refused_for_size_total Refused requests not replayed because their body had not been kept.
# TYPE h2ping_replays_refused_for_size_total counter
h2ping_replays_refused_for_size_total 101
# HELP h2ping_unkept_bodies_total Bodies streamed without a replay guarantee (max-buffered-bytes reached).
# TYPE h2ping_unkept_bodies_total counter
h2ping_unkept_bodies_total 122
# HELP h2ping_retired_connections_total Connections retired by max-conn-age.
# TYPE h2ping_retired_connections_total counter
h2ping_retired_connections_total 226
# HELP h2ping_retry_buffer_bytes Request body bytes kept for a possible replay right now.
# TYPE h2ping_retry_buffer_bytes gauge
h2ping_retry_buffer_bytes 145
# HELP h2ping_retry_buffer_limit_bytes max-buffered-bytes: the cap on retry_buffer_bytes.
# TYPE h2ping_retry_buffer_limit_bytes gauge
h2ping_retry_buffer_limit_bytes 1073741824
# HELP h2ping_fast_path 1 where a fast path is taken; 0 where its probe found the installed h2 or hpack changed, and plain h2/hpack does the work (slower). Over workers: the least.
# TYPE h2ping_fast_path gauge
h2ping_fast_path{path="frames"} 0
h2ping_fast_path{path="hpack"} 1
# HELP h2ping_access_log_dropped_total Access-log lines lost: the writer fell behind (a slow disk) or could not write.
# TYPE h2ping_access_log_dropped_total counter
h2ping_access_log_dropped_total 401
# HELP h2ping_descriptor_shortages_total Times no file descriptor was free: an accept, an upstream dial, or a once-a-second check that found all in use.
# TYPE h2ping_descriptor_shortages_total counter
h2ping_descriptor_shortages_total 442
# HELP h2ping_client_connections HTTP/1.1 client connections held now (each request in flight holds one).
# TYPE h2ping_client_connections gauge
h2ping_client_connections 530
# HELP h2ping_client_capacity The most client connections taken at once: the descriptor limit less what upstream connections and files need. Beyond it, clients wait in the listen queue.
# TYPE h2ping_client_capacity gauge
h2ping_client_capacity 577
# HELP h2ping_accept_pauses_total Times accepting stopped at client_capacity until a client left.
# TYPE h2ping_accept_pauses_total counter
h2ping_accept_pauses_total 485
# HELP h2ping_listen_queue Clients waiting in the kernel's listen queue to be accepted (shared by workers).
# TYPE h2ping_listen_queue gauge
h2ping_listen_queue 730
# HELP h2ping_descriptors_open File descriptors open (summed over workers).
# TYPE h2ping_descriptors_open gauge
h2ping_descriptors_open 626
# HELP h2ping_descriptors_limit The open-file limit in force (RLIMIT_NOFILE; summed over workers).
# TYPE h2ping_descriptors_limit gauge
h2ping_descriptors_limit 677
"""  # noqa: E501
