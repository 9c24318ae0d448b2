"""The goals h2ping is held to, as data, and one loop that judges a run against them.

Each goal reads one figure of h2ping's from a scenario's results and compares it with
a base figure: Go's in the same run (most rows), or another of h2ping's own (its idle
latency, its one-worker rate). A ratio goal compares h2ping / base with the threshold,
a difference goal h2ping - base. Standard library only: the unit tests import it
without starting anything.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from report.tables import table

COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">=": operator.ge,
}


@dataclass(frozen=True)
class Goal:
    row: str
    scenario: str
    metric: str  # key in the scenario's figures of each peer
    op: str  # one of COMPARE
    threshold: float
    fmt: str = "{:,.1f}"  # for the figures
    peer: str = "h2ping"  # whose figure is judged
    base: str = "go"  # whose figure it is compared with
    base_metric: str | None = None  # the base's key, when not ``metric``
    difference: bool = False  # compare peer - base (else peer / base)
    unit: str = ""  # of a difference goal's threshold
    # (peer, key, why): unless that figure is true the row compares nothing: n/a, why.
    requires: tuple[str, str, str] | None = None

    def goal_text(self) -> str:
        base = "Go" if self.base == "go" and self.base_metric is None else self.base_label()
        if self.difference:
            if not self.threshold:
                return f"{self.op} {base}"
            return f"{self.op} {base} + {self.threshold:g} {self.unit}".rstrip()
        return f"{self.op} {self.threshold:.1f}x {base}"

    def base_label(self) -> str:
        return f"{self.base} {self.base_metric or self.metric}"


MS = "{:.2f}"
# A streaming row where Go missed the full rate says more about the load generator.
GO_FULL_RATE = (
    "go",
    "full_rate",
    "Go missed the full rate: the load generator (or Go) was the limit",
)
GOALS: list[Goal] = [
    Goal("small GETs, 50 conns, req/s", "small_50", "req_per_s", ">=", 1.1, "{:,.0f}"),
    Goal("mean latency, 1 conn, us", "latency_1", "mean_us", "<=", 1.3, "{:,.0f}"),
    Goal("proxy CPU us/req, 1 conn", "latency_1", "cpu_us_per_req", "<=", 1.3, "{:,.0f}"),
    *(
        Goal(
            f"CPU s/10k events, {streams} streams",
            scenario,
            "cpu_per_10k_events",
            "<=",
            1.0,
            "{:.3f}",
            requires=GO_FULL_RATE,
        )
        for streams, scenario in (("500", "sse_500"), ("1,000", "sse_1000"))
    ),
    *(
        Goal(
            f"event delay {q} ms, 1,000 streams",
            "sse_1000",
            f"delay_{q}_ms",
            "<=",
            slack,
            MS,
            difference=True,
            unit="ms",
            requires=GO_FULL_RATE,
        )
        # The median no later than Go's; the tail within 2 ms of Go's.
        for q, slack in (("p50", 0.0), ("p99", 2.0))
    ),
    Goal("16 MiB download MB/s", "transfer_16m", "download_mb_per_s", ">=", 0.9, "{:,.0f}"),
    Goal("16 MiB upload MB/s", "transfer_16m", "upload_mb_per_s", ">=", 1.0, "{:,.0f}"),
    Goal(
        "small GET median ms during 200 MiB download",
        "small_during_download",
        "loaded_p50_ms",
        "<=",
        2.0,
        MS,
        base="h2ping",
        base_metric="idle_p50_ms",
    ),
    Goal("memory KiB per in-flight request", "inflight", "rss_per_request_kib", "<", 0.1),
    Goal(
        "--workers 2 req/s", "workers", "req_per_s", ">=", 1.8, "{:,.0f}", "h2ping-w2", "h2ping-w1"
    ),
]


def evaluate(scenarios: dict[str, Any], goals: list[Goal] = GOALS) -> list[dict[str, Any]]:
    """One row per goal: the figures, the ratio (or difference) and ``met``, ``not met``
    or ``n/a`` with the reason in ``why``."""
    return [_judge(goal, scenarios.get(goal.scenario)) for goal in goals]


def _judge(goal: Goal, result: dict[str, Any] | None) -> dict[str, Any]:
    row: dict[str, Any] = {"row": goal.row, "scenario": goal.scenario, "goal": goal.goal_text()}
    if result is None:
        return {**row, "status": "n/a", "why": f"{goal.scenario} not run"}
    peers, errors = result.get("peers", {}), result.get("errors", {})
    mine = _figure(peers, goal.peer, goal.metric)
    base = _figure(peers, goal.base, goal.base_metric or goal.metric)
    row.update(h2ping=mine, go=_figure(peers, "go", goal.metric), base=base)
    if mine is None or base is None:
        name, metric = (
            (goal.peer, goal.metric)
            if mine is None
            else (goal.base, goal.base_metric or goal.metric)
        )
        if name in errors:
            error = errors[name].splitlines()[0]
            why = f"{name}: {error}" if error.startswith("skipped") else f"{name} failed: {error}"
        elif name not in peers:
            why = f"{name} not run in {goal.scenario}"
        else:
            why = f"no {metric} for {name}"
        return {**row, "status": "n/a", "why": why}
    row["ratio"] = mine / base if base else None
    if goal.difference:
        row["difference"] = mine - base
    compared = row.get("difference", row["ratio"])
    if result.get("params", {}).get("stall_s"):
        why = f"the proxies were stopped {result['params']['stall_s']:g} s (--sse-stall)"
        return {**row, "status": "n/a", "why": why}
    if goal.requires is not None:
        name, key, why = goal.requires
        if not peers.get(name, {}).get(key):
            return {**row, "status": "n/a", "why": why}  # the figures shown all the same
    if compared is None:
        return {**row, "status": "n/a", "why": f"{goal.base}'s {goal.metric} is 0"}
    row["status"] = "met" if COMPARE[goal.op](compared, goal.threshold) else "not met"
    return row


def _figure(peers: dict[str, Any], name: str, metric: str) -> float | None:
    value = peers.get(name, {}).get(metric)
    return float(value) if isinstance(value, int | float) else None


def render(rows: list[dict[str, Any]], goals: list[Goal] = GOALS) -> str:
    """The goals table: h2ping's figure, Go's, the ratio (and the difference, for a
    difference goal), the goal, and whether it is met."""
    specs = {goal.row: goal for goal in goals}
    cells = []
    for row in rows:
        goal = specs[row["row"]]
        ratio = "-" if row.get("ratio") is None else f"{row['ratio']:.2f}x"
        if "difference" in row:
            ratio += f" ({row['difference']:+.2f} {goal.unit})"
        goal_text = row["goal"]
        if goal.base != "go" and row.get("base") is not None:
            goal_text += f" ({goal.fmt.format(row['base'])})"
        status = row["status"] + (f": {row['why']}" if "why" in row else "")
        cells.append(
            [
                row["row"],
                _fmt(goal.fmt, row.get("h2ping")),
                _fmt(goal.fmt, row.get("go")),
                ratio,
                goal_text,
                status,
            ]
        )
    headers = ["goal row", "h2ping", "go", "ratio", "goal", "met"]
    met = sum(row["status"] == "met" for row in rows)
    judged = sum(row["status"] != "n/a" for row in rows)
    title = f"goals: {met} of {judged} judged met ({len(rows) - judged} n/a)"
    return title + "\n" + table(headers, cells, left=frozenset({4, 5}))  # goal, met


def _fmt(fmt: str, value: float | None) -> str:
    return "-" if value is None else fmt.format(value)
