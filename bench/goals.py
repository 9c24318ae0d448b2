"""h2ping's goals against the Go sidecar, read from one run's results.

Each goal is data: the scenario and figure it reads, how h2ping's figure must
compare with Go's (or with one of its own), and the threshold. :func:`evaluate`
turns a run's ``scenarios`` (as ``run.py`` writes them to its JSON) into one row
per goal: both figures, the ratio, the goal and whether it is met, or why it
cannot be said (a scenario not run, a peer missing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Scenarios = dict[str, Any]


@dataclass(frozen=True)
class Goal:
    row: str
    scenario: str
    figure: str
    #: "at least" (h2ping / other >= threshold) or "at most" (<=), or "plus at most"
    #: (h2ping - other <= threshold, in the figure's unit).
    rule: str
    threshold: float
    #: Whose figure h2ping's is held to: Go's, by default.
    other: Callable[[Scenarios], float | None] | None = None
    unit: str = ""
    against: str = "Go"


def peer_figure(scenarios: Scenarios, scenario: str, peer: str, figure: str) -> float | None:
    value = scenarios.get(scenario, {}).get("peers", {}).get(peer, {}).get(figure)
    return float(value) if isinstance(value, int | float) else None


def _own(scenario: str, figure: str, factor: float = 1.0) -> Callable[[Scenarios], float | None]:
    """h2ping's own ``figure`` in ``scenario`` (times ``factor``), as the reference."""

    def read(scenarios: Scenarios) -> float | None:
        value = peer_figure(scenarios, scenario, "h2ping", figure)
        return None if value is None else value * factor

    return read


GOALS: tuple[Goal, ...] = (
    Goal("small GETs, 50 connections: req/s", "small_50", "req_per_s", "at least", 1.0),
    Goal("mean latency, one connection", "latency_1", "mean_us", "at most", 1.3, unit="us"),
    Goal("proxy CPU per request, one connection", "latency_1", "cpu_us_per_req", "at most", 1.3,
         unit="us"),
    Goal("proxy CPU per streamed event, 500 streams", "sse_500", "cpu_per_10k_events", "at most",
         1.0, unit="s/10k"),
    Goal("proxy CPU per streamed event, 1,000 streams", "sse_1000", "cpu_per_10k_events",
         "at most", 1.0, unit="s/10k"),
    Goal("1,000 streams: event delay p50", "sse_1000", "delay_p50_ms", "plus at most", 2.0,
         unit="ms"),
    Goal("1,000 streams: event delay p99", "sse_1000", "delay_p99_ms", "plus at most", 2.0,
         unit="ms"),
    Goal("16 MiB download", "transfer_16m", "download_mb_per_s", "at least", 0.9, unit="MB/s"),
    Goal("16 MiB upload", "transfer_16m", "upload_mb_per_s", "at least", 0.9, unit="MB/s"),
    Goal("small GETs during a download: median latency", "small_during_download",
         "loaded_median_ms", "at most", 2.0, _own("small_during_download", "idle_median_ms"),
         unit="ms", against="h2ping idle"),
    Goal("memory per in-flight request", "inflight", "rss_per_request_kib", "at most", 0.1,
         unit="KiB"),
    Goal("-workers 2 against one worker: req/s", "workers", "req_per_s", "at least", 1.8,
         lambda s: peer_figure(s, "workers", "h2ping-w1", "req_per_s"), against="1 worker"),
)  # fmt: skip

#: In ``workers``, h2ping's figure is that of its two workers.
_PEER = {"workers": "h2ping-w2"}


@dataclass(frozen=True)
class Row:
    goal: Goal
    mine: float | None
    theirs: float | None
    ratio: float | None  # h2ping's over the other's, or the difference for "plus at most"
    met: bool | None  # None: cannot be said
    why: str = ""


def evaluate(scenarios: Scenarios) -> list[Row]:
    rows = []
    for goal in GOALS:
        mine = peer_figure(
            scenarios, goal.scenario, _PEER.get(goal.scenario, "h2ping"), goal.figure
        )
        if goal.other is not None:
            theirs = goal.other(scenarios)
        else:
            theirs = peer_figure(scenarios, goal.scenario, "go", goal.figure)
        if goal.scenario not in scenarios:
            rows.append(Row(goal, None, None, None, None, "not run"))
            continue
        if mine is None or theirs is None or (theirs == 0 and goal.rule != "plus at most"):
            rows.append(Row(goal, mine, theirs, None, None, "a figure is missing"))
            continue
        if goal.rule == "plus at most":
            ratio = mine - theirs
            met = ratio <= goal.threshold
        else:
            ratio = mine / theirs
            met = ratio >= goal.threshold if goal.rule == "at least" else ratio <= goal.threshold
        rows.append(Row(goal, mine, theirs, ratio, met))
    return rows


def describe(goal: Goal) -> str:
    """``<= 1.3x Go``, ``<= Go + 2 ms``, ``<= 2x h2ping idle``."""
    against = goal.against
    if goal.rule == "plus at most":
        return f"<= {against} + {goal.threshold:g} {goal.unit}"
    sign = ">=" if goal.rule == "at least" else "<="
    return f"{sign} {goal.threshold:g}x {against}"


def render(rows: list[Row]) -> str:
    """The goals as a plain table."""
    lines = [f"  {'goal':48} {'h2ping':>10} {'other':>10} {'ratio':>8}  {'target':24} result"]
    for row in rows:
        mine = "-" if row.mine is None else f"{row.mine:,.3g}"
        theirs = "-" if row.theirs is None else f"{row.theirs:,.3g}"
        if row.ratio is None:
            ratio = "-"
        elif row.goal.rule == "plus at most":
            ratio = f"{row.ratio:+.1f}"
        else:
            ratio = f"{row.ratio:.2f}x"
        result = row.why if row.met is None else ("met" if row.met else "NOT met")
        lines.append(
            f"  {row.goal.row:48} {mine:>10} {theirs:>10} {ratio:>8}  {describe(row.goal):24} "
            f"{result}"
        )
    return "\n".join(lines)


def to_json(rows: list[Row]) -> list[dict[str, Any]]:
    return [
        {
            "goal": row.goal.row,
            "target": describe(row.goal),
            "h2ping": row.mine,
            "other": row.theirs,
            "ratio": row.ratio,
            "met": row.met,
            "why": row.why,
        }
        for row in rows
    ]
