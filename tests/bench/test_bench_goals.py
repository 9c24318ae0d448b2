"""The benchmark's goals table (bench/report/goals.py), judged on a fake run's results."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# bench/ is not a package: its modules import each other from bench/, as its scripts do.
sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))

from report import goals


def scenario(errors: dict[str, str] | None = None, **peers: dict) -> dict:
    """One scenario's results as run.py keeps them: figures per peer, errors per peer."""
    return {
        "peers": {name.replace("_", "-"): figures for name, figures in peers.items()},
        "errors": errors or {},
    }


def fake_results() -> dict:
    sse_go = {"delay_p50_ms": 1.0, "delay_p99_ms": 5.0, "cpu_per_10k_events": 0.1}
    return {
        "small_50": scenario(go={"req_per_s": 10_000}, h2ping={"req_per_s": 11_500}),
        "latency_1": scenario(
            go={"mean_us": 200.0, "cpu_us_per_req": 100.0},
            h2ping={"mean_us": 300.0, "cpu_us_per_req": 130.0},
        ),
        "sse_1000": scenario(
            go={**sse_go, "full_rate": True},
            h2ping={"delay_p50_ms": 0.5, "delay_p99_ms": 7.5, "cpu_per_10k_events": None},
        ),
        "transfer_16m": scenario(
            {"go": "bad transfer: {...}\nmore"},
            h2ping={"download_mb_per_s": 500, "upload_mb_per_s": 400},
        ),
        "small_during_download": scenario(
            go={"idle_p50_ms": 0.3, "loaded_p50_ms": 0.9},
            h2ping={"idle_p50_ms": 0.5, "loaded_p50_ms": 0.9},
        ),
        "inflight": scenario(go={"rss_per_request_kib": 40.0}, h2ping={"rss_per_request_kib": 4.0}),
        "workers": scenario(
            go={"req_per_s": 16_000},
            h2ping_w1={"req_per_s": 15_000},
            h2ping_w2={"req_per_s": 27_000},
        ),
    }


@pytest.fixture
def rows() -> dict[str, dict]:
    return {row["row"]: row for row in goals.evaluate(fake_results())}


def test_every_goal_has_one_row(rows: dict[str, dict]) -> None:
    assert list(rows) == [goal.row for goal in goals.GOALS]


def test_ratio_goals(rows: dict[str, dict]) -> None:
    small = rows["small GETs, 50 conns, req/s"]
    assert (small["h2ping"], small["go"], small["status"]) == (11_500, 10_000, "met")
    assert small["ratio"] == pytest.approx(1.15)
    results = fake_results()
    results["small_50"]["peers"]["h2ping"]["req_per_s"] = 10_500  # 1.05x: short of 1.1x
    (row,) = goals.evaluate(results, goals.GOALS[:1])
    assert row["status"] == "not met"
    assert rows["mean latency, 1 conn, us"]["status"] == "not met"  # 1.5x, goal <= 1.3x
    assert rows["proxy CPU us/req, 1 conn"]["status"] == "met"  # exactly 1.3x: <= holds


def test_strict_threshold(rows: dict[str, dict]) -> None:
    # Exactly 0.1x Go's memory per request does not meet "< 0.1x".
    memory = rows["memory KiB per in-flight request"]
    assert (memory["ratio"], memory["status"]) == (0.1, "not met")


def test_difference_goals(rows: dict[str, dict]) -> None:
    p50, p99 = rows["event delay p50 ms, 1,000 streams"], rows["event delay p99 ms, 1,000 streams"]
    assert (p50["difference"], p50["status"]) == (-0.5, "met")
    assert p50["goal"] == "<= Go"  # the median no later than Go's
    assert (p99["difference"], p99["status"]) == (2.5, "not met")
    assert p99["ratio"] == 1.5
    assert p99["goal"] == "<= Go + 2 ms"


def test_streaming_rows_need_gos_full_rate() -> None:
    results = fake_results()
    results["sse_1000"]["peers"]["go"]["full_rate"] = False
    rows = {row["row"]: row for row in goals.evaluate(results)}
    p99 = rows["event delay p99 ms, 1,000 streams"]
    # The figures, the ratio and the difference are kept; only the verdict is withheld.
    assert (p99["status"], p99["h2ping"], p99["go"]) == ("n/a", 7.5, 5.0)
    assert (p99["ratio"], p99["difference"]) == (1.5, 2.5)
    assert p99["why"].startswith("Go missed the full rate")


def test_goals_against_h2pings_own_figures(rows: dict[str, dict]) -> None:
    during = rows["small GET median ms during 200 MiB download"]
    # 0.9 ms loaded against h2ping's own 0.5 ms idle (not Go's 0.3): 1.8x, met.
    assert (during["ratio"], during["go"], during["status"]) == (1.8, 0.9, "met")
    workers = rows["--workers 2 req/s"]
    assert (workers["ratio"], workers["go"], workers["status"]) == (1.8, 16_000, "met")


def test_not_applicable_says_why(rows: dict[str, dict]) -> None:
    assert rows["CPU s/10k events, 500 streams"] == {
        "row": "CPU s/10k events, 500 streams",
        "scenario": "sse_500",
        "goal": "<= 1.0x Go",
        "status": "n/a",
        "why": "sse_500 not run",
    }
    assert rows["CPU s/10k events, 1,000 streams"]["why"] == "no cpu_per_10k_events for h2ping"
    assert rows["16 MiB download MB/s"]["why"] == "go failed: bad transfer: {...}"
    results = fake_results()
    results["inflight"] = scenario({"h2ping": "skipped: 10000 in flight needs ..."})
    (row,) = [g for g in goals.evaluate(results) if g["scenario"] == "inflight"]
    assert row["why"] == "h2ping: skipped: 10000 in flight needs ..."
    results = fake_results()
    del results["small_50"]["peers"]["go"]
    (row,) = goals.evaluate(results, goals.GOALS[:1])
    assert (row["status"], row["why"]) == ("n/a", "go not run in small_50")


def test_render_one_line_per_goal(rows: dict[str, dict]) -> None:
    text = goals.render(list(rows.values()))
    lines = text.splitlines()
    assert lines[0] == "goals: 5 of 8 judged met (4 n/a)"
    assert len(lines) == 2 + len(goals.GOALS)  # title, header, one per goal
    assert "not met" in text and "n/a: sse_500 not run" in text
