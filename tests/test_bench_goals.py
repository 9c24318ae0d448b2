"""bench/goals.py: each goal read from a run's results, compared and judged."""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "bench"))

import goals


def peers(**figures: dict[str, float]) -> dict[str, dict[str, dict[str, float]]]:
    return {"peers": figures}


def test_each_goal_is_judged_from_the_figures_of_one_run() -> None:
    scenarios = {
        "small_50": peers(h2ping={"req_per_s": 11_000}, go={"req_per_s": 10_000}),
        "latency_1": peers(
            h2ping={"mean_us": 400, "cpu_us_per_req": 200},
            go={"mean_us": 250, "cpu_us_per_req": 160},
        ),
        "sse_1000": peers(
            h2ping={"cpu_per_10k_events": 0.12, "delay_p50_ms": 5.5, "delay_p99_ms": 12.0},
            go={"cpu_per_10k_events": 0.13, "delay_p50_ms": 3.0, "delay_p99_ms": 11.0},
        ),
        "transfer_16m": peers(
            h2ping={"download_mb_per_s": 450, "upload_mb_per_s": 300},
            go={"download_mb_per_s": 480},
        ),
        "small_during_download": peers(h2ping={"idle_median_ms": 2.0, "loaded_median_ms": 3.9}),
        "workers": peers(
            **{"h2ping-w1": {"req_per_s": 10_000}, "h2ping-w2": {"req_per_s": 19_000}}
        ),
    }
    rows = {row.goal.row: row for row in goals.evaluate(scenarios)}
    judged = {name: (row.met, row.why) for name, row in rows.items()}
    assert judged == {
        "small GETs, 50 connections: req/s": (True, ""),
        "mean latency, one connection": (False, ""),  # 1.6x
        "proxy CPU per request, one connection": (True, ""),  # 1.25x
        "proxy CPU per streamed event, 500 streams": (None, "not run"),
        "proxy CPU per streamed event, 1,000 streams": (True, ""),
        "1,000 streams: event delay p50": (False, ""),  # Go + 2.5 ms
        "1,000 streams: event delay p99": (True, ""),  # Go + 1 ms
        "16 MiB download": (True, ""),
        "16 MiB upload": (None, "a figure is missing"),  # Go's is
        "small GETs during a download: median latency": (True, ""),  # 1.95x its idle
        "memory per in-flight request": (None, "not run"),
        "-workers 2 against one worker: req/s": (True, ""),  # 1.9x
    }
    assert rows["mean latency, one connection"].ratio == 1.6
    table = goals.render(list(rows.values()))
    assert "NOT met" in table and "not run" in table and "<= Go + 2 ms" in table
    assert [entry["met"] for entry in goals.to_json(list(rows.values()))] == [
        row.met for row in rows.values()
    ]
