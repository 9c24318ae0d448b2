"""Charts of the goals table: one run's, and how its ratios moved across recorded runs.

    python bench/charts.py latest  [--results bench/RESULTS.md] [--out FILE.svg] [--png]
    python bench/charts.py history [--results bench/RESULTS.md] [--out FILE.svg] [--png] [--all]
    python bench/charts.py json bench/results/latest.json [--out FILE.svg] [--png]

``latest`` draws the newest run recorded in RESULTS.md, ``history`` every recorded
run's ratios side by side, ``json`` a run from the JSON run.py writes (run.py draws
its own chart beside that file). The drawing needs matplotlib (the ``bench`` extra:
``pip install -e '.[bench]'``); the rest of this module, the rows a chart shows,
does not.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from report import goals, recorded

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

REPO = Path(__file__).resolve().parents[2]
LATEST_SVG = REPO / "docs" / "img" / "bench-latest.svg"
HISTORY_SVG = REPO / "docs" / "img" / "bench-history.svg"
INSTALL_HINT = "pip install -e '.[bench]'"

# Peers without a proxy (as in peers/lineup.py): the floor every proxy adds to, not a peer
# to compare a proxy with, so the charts leave them out.
DIRECT = ("direct", "direct-h1")
# Colour-blind-safe (Okabe-Ito), by the goal: met, missed, not judged (n/a, hatched).
COLOURS = {"met": "#009E73", "not met": "#D55E00", "n/a": "#999999"}
LEGEND = {"met": "goal met", "not met": "goal missed"}
# One marker per other peer, Go's own for the rows judged against h2ping's own figure.
MARKERS = {"go": "s", "nghttpx": "D", "baseline": "^"}
OTHER_MARKER = "o"
#: A goal mark this close beyond a bar's end (a factor, on the log axis) takes the
#: bar's label past it.
GOAL_NEAR = 1.6


@dataclass
class Peer:
    """Another peer's figure in a row, and the same ratio taken with it."""

    name: str
    figure: float | None
    ratio: float | None  # h2ping / this peer, or this peer's own ratio (see ChartRow)
    base: float | None = None  # this peer's own base figure, for its own ratio
    marked: bool = True  # drawn as a marker beside the bar (else only named in the text)


@dataclass
class ChartRow:
    """One goal row as the charts show it."""

    name: str
    status: str  # met, not met, n/a
    why: str | None
    goal_text: str
    ratio: float | None  # h2ping's figure over the base figure (Go's, or its own)
    difference: float | None  # for a difference goal
    h2ping: float | None
    base: float | None
    base_label: str  # whose figure the base is: "Go", "h2ping idle_p50_ms", ...
    # The goal as a ratio, where the bar is drawn: the threshold of a ratio goal; for a
    # difference goal (h2ping - Go <= t), (Go + t) / Go, the same test on the ratio.
    goal_ratio: float | None
    fmt: str = "{:,.2f}"
    unit: str = ""
    # Against Go: h2ping / each other proxy. Against another figure of the same
    # h2ping (``own``, e.g. loaded over idle latency): each other peer's same ratio, its
    # figure over its own base figure. Against another h2ping (``--workers 1``): h2ping
    # / each other proxy, Go's included, in the text only.
    others: list[Peer] = field(default_factory=list)
    own: bool = False
    not_run: bool = False  # its scenario was not part of the run
    higher_better: bool = True  # the goal asks for more (req/s), not less (latency)

    @property
    def start(self) -> float | None:
        """Where the row's bar starts: Go, at 1x; on a row against h2ping's own
        figure, Go's same ratio (None when Go has none: the bar starts at 1x)."""
        if not self.own:
            return 1.0
        go = next((p for p in self.others if p.name == "go" and p.base is not None), None)
        return go.ratio if go is not None else None

    @property
    def colour(self) -> str:
        """The goal's verdict, which the bar's colour says (see COLOURS)."""
        return self.status if self.status in COLOURS else "n/a"


def chart_rows(rows: list[dict[str, Any]], scenarios: dict[str, Any]) -> list[ChartRow]:
    """The goal rows (goals.evaluate's, or as recorded) with the other peers' figures
    from the scenarios' results."""
    specs = {goal.row: goal for goal in goals.GOALS}
    return [_chart_row(row, specs.get(row["row"]), scenarios) for row in rows]


def _chart_row(row: dict[str, Any], goal: goals.Goal | None, scenarios: dict[str, Any]) -> ChartRow:
    ratio, base = row.get("ratio"), row.get("base")
    own = goal is not None and goal.base != "go"
    chart = ChartRow(
        name=row["row"],
        status=row["status"],
        why=row.get("why"),
        goal_text=row["goal"],
        ratio=ratio,
        difference=row.get("difference"),
        h2ping=row.get("h2ping"),
        base=base,
        base_label=("Go" if goal is None or not own else goal.base_label()),
        goal_ratio=None,
        own=own,
        not_run=row.get("why") == f"{row.get('scenario')} not run",
    )
    if goal is None:
        return chart
    chart.fmt, chart.unit = goal.fmt, goal.unit
    chart.higher_better = goal.op in (">", ">=")
    if not goal.difference:
        chart.goal_ratio = goal.threshold
    elif base:
        chart.goal_ratio = (base + goal.threshold) / base
    result = scenarios.get(goal.scenario, {})
    peers = result.get("peers", {})
    # The ratios the run printed (from unrounded figures), where it printed them.
    printed = result.get("ratios", {}).get(goal.metric, {})
    mine = _number(peers.get(goal.peer, {}).get(goal.metric))
    for name, figures in peers.items():
        if name in DIRECT or name.startswith("h2ping") or (name == "go" and not own):
            continue
        figure = _number(figures.get(goal.metric))
        if own and goal.peer == goal.base:  # the same ratio of this peer's own figures
            other_base = _number(figures.get(goal.base_metric or goal.metric))
            if figure is None or other_base is None:
                continue  # e.g. no peer runs --workers
            own_ratio = figure / other_base if other_base else None
            chart.others.append(Peer(name, figure, own_ratio, other_base))
        else:
            share = _number(printed.get(name))
            if share is None and mine is not None and figure:
                share = mine / figure
            chart.others.append(Peer(name, figure, share, marked=not own))
    return chart


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _fmt(fmt: str, value: float | None) -> str:
    return "-" if value is None else fmt.format(value)


def describe(row: ChartRow) -> tuple[str, str]:
    """The two lines beside a row's bar: h2ping's figure against the base's, the
    ratio, the goal and the verdict; then why it is n/a, and the other peers'."""
    ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
    if row.difference is not None:
        ratio += f" ({row.difference:+.2f} {row.unit})".replace(" )", ")")
    first = f"goal {row.goal_text}: {row.status}"
    if row.h2ping is not None or row.base is not None:
        mine, base = _fmt(row.fmt, row.h2ping), _fmt(row.fmt, row.base)
        first = f"h2ping {mine} vs {row.base_label} {base}: {ratio};  {first}"
    second = [row.why] if row.why else []
    for peer in row.others:
        if row.own and peer.base is not None:
            if peer.ratio is not None:
                metric = row.base_label.partition(" ")[2]
                second.append(
                    f"{peer.name} {_fmt(row.fmt, peer.figure)} vs {peer.name} {metric} "
                    f"{_fmt(row.fmt, peer.base)}: {peer.ratio:.2f}x"
                )
        else:
            share = "" if peer.ratio is None else f": {peer.ratio:.2f}x"
            second.append(f"vs {peer.name} {_fmt(row.fmt, peer.figure)}{share}")
    return first, ";  ".join(second)


@dataclass
class RunInfo:
    """What a chart's title says about the run."""

    date: str
    commit: str | None = None
    machine: str | None = None
    kind: str | None = None  # full or quick


def info_from_doc(doc: dict[str, Any]) -> RunInfo:
    """From the JSON run.py writes."""
    machine = f"{doc.get('nproc', '?')} x {doc.get('cpu_model', '?')}"
    return RunInfo(
        doc.get("date", "?").replace("T", " ").replace("+00:00", " UTC"),
        doc.get("commit"),
        machine,
        "quick run" if doc.get("quick") else "full run",
    )


def info_from_recorded(run: recorded.RecordedRun) -> RunInfo:
    # The machine's first words (the versions follow the semicolon), without Markdown.
    machine = run.machine.split(";")[0].replace("`", "") if run.machine else None
    return RunInfo(run.date, run.commit, machine)


# --- drawing (matplotlib from here on) --------------------------------------------


def have_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _figure(width: float, height: float) -> Figure:
    import matplotlib

    # Text stays text (searchable, and small); ids and metadata stay the same from one
    # drawing to the next, so a redrawn chart of the same data is the same file.
    matplotlib.rcParams.update(
        {"svg.fonttype": "none", "svg.hashsalt": "h2ping-bench", "font.size": 9}
    )
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _save(fig: Figure, out: Path, png: bool) -> list[Path]:
    out.parent.mkdir(parents=True, exist_ok=True)
    svg = out.with_suffix(".svg")
    fig.savefig(svg, format="svg", metadata={"Date": None})
    written = [svg]
    if png:
        fig.savefig(out.with_suffix(".png"), format="png", dpi=120)
        written.append(out.with_suffix(".png"))
    return written


def _log_ratio_axis(ax: Axes, values: Sequence[float | None], axis: str = "x") -> None:
    """A log scale over ``values`` and 1 (parity), labelled 0.5x, 1x, 2x, ..."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    shown = [v for v in values if v is not None and v > 0] + [1.0]
    low, high = min(shown) / 2.2, max(shown) * 2.2  # room for the labels
    low, high = max(low, 1e-3), min(high, 1e4)
    locator = LogLocator(base=10, subs=(1.0, 2.0, 5.0))
    formatter = FuncFormatter(lambda v, _: f"{v:g}x")
    if axis == "x":
        ax.set_xscale("log")
        ax.set_xlim(low, high)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(formatter)
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        ax.set_yscale("log")
        ax.set_ylim(low, high)
        ax.yaxis.set_major_locator(locator)
        ax.yaxis.set_major_formatter(formatter)
        ax.yaxis.set_minor_formatter(NullFormatter())


def draw_run(rows: list[ChartRow], info: RunInfo, out: Path, png: bool = False) -> list[Path]:
    """One run: per goal row a bar from Go (1x, or on a row against h2ping's own
    figure Go's same ratio) to h2ping's ratio, the one its text gives, log scale,
    coloured by the goal: met, missed, n/a (hatched); the goal a black mark, never
    through the bar's label; the other peers as markers above the bar; beside it,
    the figures and the verdict. Rows of scenarios the run left out are left out
    too. Returns the files written: none when no row was run."""
    drawn = run_figure(rows, info)
    return [] if drawn is None else _save(drawn.figure, out, png)


@dataclass
class Drawn:
    """A drawn run chart, for saving and for looking at: each bar label with its
    row's goal and y."""

    figure: Figure
    axes: Axes
    labels: list[tuple[Any, float | None, float]]


def run_figure(rows: list[ChartRow], info: RunInfo, clear_goals: bool = True) -> Drawn | None:
    """The figure :func:`draw_run` saves (None when no row was run)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.transforms import blended_transform_factory

    not_run = sum(row.not_run for row in rows)
    rows = [row for row in rows if not row.not_run]
    if not rows:
        return None
    n = len(rows)
    fig = _figure(16.0, 1.6 + 0.62 * n)
    bars_ax = fig.subplots()
    # The figures, right of the bars: x in the axes' width, y in rows.
    beside = blended_transform_factory(bars_ax.transAxes, bars_ax.transData)
    ys = list(range(n))
    values: list[float | None] = []
    labels: list[tuple[Any, float | None, float]] = []  # each bar's label, its goal, its row
    for y, row in zip(ys, rows, strict=True):
        ratio, goal, start = row.ratio, row.goal_ratio, row.start or 1.0
        colour = COLOURS[row.colour]
        values += [ratio, goal, start, *(p.ratio for p in row.others)]
        if ratio is not None and ratio > 0:
            low, high = sorted((start, ratio))
            hatched = row.colour == "n/a"
            bars_ax.barh(
                y,
                high - low,
                left=low,
                height=0.5,
                color=colour,
                hatch="//" if hatched else None,
                edgecolor="white" if hatched else colour,
                linewidth=0,
            )
            # The label past the bar's far end (the same ratio as the text beside it).
            side = "left" if ratio >= start else "right"
            label = bars_ax.annotate(
                f"{ratio:.2f}x" + (" n/a" if row.status == "n/a" else ""),
                (ratio, y),
                xytext=(5 if side == "left" else -5, 0),
                textcoords="offset points",
                ha=side,
                va="center",
                fontsize=8,
            )
            labels.append((label, goal, y))
        else:
            bars_ax.annotate(
                "n/a",
                (1.0, y),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
                color=COLOURS["n/a"],
            )
        if goal is not None:
            bars_ax.vlines(goal, y - 0.32, y + 0.32, color="black", linewidth=2.2)
        for peer in row.others:
            if peer.marked and peer.ratio is not None and peer.ratio > 0:
                bars_ax.plot(
                    peer.ratio,
                    y - 0.36,  # above the bar: never on the bar's label
                    marker=MARKERS.get(peer.name, OTHER_MARKER),
                    markersize=4.5,
                    markerfacecolor="white",
                    markeredgecolor="#333333",
                    linestyle="none",
                    zorder=5,
                )
        first, second = describe(row)
        bars_ax.text(
            1.02, y - 0.15 if second else y, first, transform=beside, va="center", fontsize=8
        )
        if second:
            bars_ax.text(
                1.02, y + 0.2, second, transform=beside, va="center", fontsize=7.5, color="#555555"
            )
    _log_ratio_axis(bars_ax, values)
    bars_ax.axvline(1.0, color="#555555", linewidth=0.8, linestyle=":")
    bars_ax.set_yticks(ys, [row.name + (" *" if row.own else "") for row in rows])
    bars_ax.set_ylim(n - 0.5, -0.6)  # first row on top
    bars_ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    bars_ax.set_axisbelow(True)
    bars_ax.set_xlabel(
        "h2ping's figure over Go's (log scale; Go is 1x, the dotted line): the ratio the "
        "text gives; which side is better, the goal says (>= or <=)\n* rows: h2ping's own "
        "figure over its own base, the bar starting at Go's same ratio (the square)"
    )

    peers_seen = sorted(
        {p.name for row in rows for p in row.others if p.marked and p.ratio is not None}
    )
    handles: list[Artist] = [Patch(color=COLOURS[s], label=LEGEND[s]) for s in LEGEND]
    handles.append(
        Patch(facecolor=COLOURS["n/a"], hatch="//", edgecolor="white", label="n/a: not judged")
    )
    handles.append(Line2D([], [], color="black", linewidth=2.2, label="goal"))
    handles += [
        Line2D(
            [],
            [],
            marker=MARKERS.get(name, OTHER_MARKER),
            markerfacecolor="white",
            markeredgecolor="#333333",
            linestyle="none",
            label=("Go's own ratio (* rows)" if name == "go" else f"against {name}"),
        )
        for name in peers_seen
    ]
    bars_ax.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncol=len(handles),
        frameon=False,
        fontsize=8,
    )
    met = sum(row.status == "met" for row in rows)
    judged = sum(row.status != "n/a" for row in rows)
    left_out = f"; {not_run} rows not run" if not_run else ""
    fig.suptitle(
        f"h2ping against the Go sidecar, per goal row: {met} of {judged} judged met "
        f"({n - judged} n/a{left_out})\n{_run_title(info)}",
        fontsize=11,
    )
    if clear_goals:
        _clear_of_goals(fig, bars_ax, labels)
    return Drawn(fig, bars_ax, labels)


def crossed_labels(drawn: Drawn) -> list[str]:
    """The bar labels a goal mark runs through (or touches), once laid out."""
    drawn.figure.draw_without_rendering()
    return [label.get_text() for label, goal, y in drawn.labels if _crosses(drawn, label, goal, y)]


def _crosses(drawn: Drawn, label: Any, goal: float | None, y: float) -> bool:
    if goal is None:
        return False
    box = label.get_window_extent()
    mark = drawn.axes.transData.transform((goal, y))[0]
    return bool(box.x0 - 3 <= mark <= box.x1 + 3)


def _clear_of_goals(fig: Figure, ax: Axes, labels: list[tuple[Any, float | None, float]]) -> None:
    """Move each bar label that its goal mark would cross to the far side of the
    mark (the same side of the bar and offset, from the mark). Measured once the
    layout is done, in the figure's own units."""
    drawn = Drawn(fig, ax, labels)
    fig.draw_without_rendering()
    for label, goal, y in labels:
        if goal is not None and _crosses(drawn, label, goal, y):
            label.xy = (goal, y)


def _run_title(info: RunInfo) -> str:
    parts = [info.date]
    if info.commit:
        parts.append(f"commit {info.commit}")
    if info.machine:
        parts.append(info.machine)
    if info.kind:
        parts.append(info.kind)
    return ", ".join(parts)


@dataclass
class HistoryRow:
    name: str
    goal_text: str
    points: list[ChartRow | None]  # one per run, None where the run lacks the row


def history_rows(runs: list[recorded.RecordedRun]) -> list[HistoryRow]:
    """Each goal row across the runs (oldest first): today's rows in their order,
    then any row only an older run has."""
    per_run = [
        {row.name: row for row in chart_rows(run.rows(), run.scenarios) if row.ratio is not None}
        for run in runs
    ]
    names = [goal.row for goal in goals.GOALS]
    names += [name for rows in per_run for name in rows if name not in names]
    names = list(dict.fromkeys(names))
    found = []
    for name in names:
        points = [rows.get(name) for rows in per_run]
        goal_text = next((p.goal_text for p in points if p is not None), "")
        found.append(HistoryRow(name, goal_text, points))
    return found


def draw_history(runs: list[recorded.RecordedRun], out: Path, png: bool = False) -> list[Path]:
    """One small chart per goal row: h2ping's ratio in each run that measured the
    row (x: those runs, oldest first), coloured by the goal (met, missed, hollow
    for n/a), the goal as a dashed line that no figure's label sits on."""
    return _save(history_figure(runs), out, png)


def history_figure(runs: list[recorded.RecordedRun]) -> Figure:
    """The figure :func:`draw_history` saves."""
    from matplotlib.lines import Line2D

    rows = history_rows(runs)
    columns = 3
    lines = math.ceil(len(rows) / columns)
    fig = _figure(4.6 * columns, 0.8 + 2.75 * lines)
    axes = fig.subplots(lines, columns, squeeze=False)
    labels = [
        (run.when.strftime("%m-%d\n%H:%M") if run.when else "?") + f"\n{run.commit or '?'}"
        for run in runs
    ]
    for ax, row in zip(axes.flat, rows, strict=False):
        # Only the runs that measured the row: no empty column.
        present = [(i, p) for i, p in enumerate(row.points) if p is not None]
        xs = list(range(len(present)))
        goals_at = [p.goal_ratio for _, p in present]
        goal_points = [(x, g) for x, g in zip(xs, goals_at, strict=True) if g is not None]
        if goal_points:
            gx, gy = zip(*goal_points, strict=True)
            ax.plot(gx, gy, color="black", linestyle="--", linewidth=1.2, marker="_")
        ax.axhline(1.0, color="#555555", linewidth=0.8, linestyle=":")
        ratios = [p.ratio for _, p in present]
        ax.plot(xs, ratios, color="#444444", linewidth=1.2)
        for x, (_, p), goal in zip(xs, present, goals_at, strict=True):
            assert p.ratio is not None  # history_rows keeps only rows with a ratio
            judged = p.colour != "n/a"
            ax.plot(
                x,
                p.ratio,
                marker="o",
                markersize=7,
                markerfacecolor=COLOURS[p.colour] if judged else "white",
                markeredgecolor=COLOURS[p.colour],
                markeredgewidth=1.5,
                linestyle="none",
            )
            # On the side away from the goal line, so the line never runs through it.
            above = goal is None or p.ratio >= goal
            ax.annotate(
                f"{p.ratio:.2f}",
                (x, p.ratio),
                xytext=(0, 7 if above else -7),
                textcoords="offset points",
                ha="center",
                va="bottom" if above else "top",
                fontsize=7.5,
            )
        missing = len(runs) - len(present)
        better = "higher" if present and present[0][1].higher_better else "lower"
        ax.set_title(
            f"{row.name}\ngoal {row.goal_text} ({better} is better)"
            + (f"; in {len(present)} of {len(runs)} runs" if missing else ""),
            fontsize=8.5,
        )
        _log_ratio_axis(ax, [*ratios, *(g for _, g in goal_points)], "y")
        ax.set_xlim(-0.5, max(len(present), 2) - 0.5)
        ax.set_xticks(xs, [labels[i] for i, _ in present], fontsize=7)
        ax.grid(axis="y", color="#dddddd", linewidth=0.6)
        ax.set_axisbelow(True)
    for ax in list(axes.flat)[len(rows) :]:
        ax.set_axis_off()
    handles = [
        Line2D([], [], marker="o", color=COLOURS[s], linestyle="none", label=LEGEND[s])
        for s in LEGEND
    ]
    handles.append(
        Line2D(
            [],
            [],
            marker="o",
            markerfacecolor="white",
            markeredgecolor=COLOURS["n/a"],
            linestyle="none",
            label="n/a: not judged",
        )
    )
    handles.append(Line2D([], [], color="black", linestyle="--", label="goal"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), frameon=False)
    fig.suptitle(
        "h2ping's figure over Go's per goal row (* rows: over its own base figure) in each "
        "recorded run that measured it, against today's goals; log scale",
        fontsize=11,
    )
    return fig


# --- the command -------------------------------------------------------------------


def write_run_chart(doc: dict[str, Any], out: Path, png: bool = False) -> list[Path]:
    """The chart of a run, from the JSON run.py writes (or its ``doc`` before that)."""
    rows = doc.get("goals") or goals.evaluate(doc.get("scenarios", {}))
    return draw_run(chart_rows(rows, doc.get("scenarios", {})), info_from_doc(doc), out, png)


def measured(run: recorded.RecordedRun) -> bool:
    """False for a section whose heading says its figures are not a measurement."""
    return "not a measurement" not in run.heading.lower()


def select_runs(
    runs: list[recorded.RecordedRun], everything: bool = False
) -> tuple[list[recorded.RecordedRun], list[recorded.RecordedRun]]:
    """(runs to draw, oldest first; runs left out)."""
    kept = [run for run in runs if everything or measured(run)]
    left = [run for run in runs if run not in kept]
    oldest = [run for run in kept if run.when is None] + sorted(
        (run for run in kept if run.when is not None), key=lambda run: run.when or 0
    )
    return oldest, left


def _say_runs(
    path: Path, runs: list[recorded.RecordedRun], left: list[recorded.RecordedRun]
) -> None:
    print(f"read {_shown(path)}: {len(runs)} runs with goal rows")
    for run in runs:
        counted = sum(row.get("ratio") is not None for row in run.rows())
        source = "goals table" if run.goals_table is not None else "scenario tables"
        commit = run.commit or "?"
        print(f"  {run.date}  commit {commit:8}  {counted:2} rows ({source})  {run.heading}")
    for run in left:
        print(f"  left out: {run.heading} (its heading says so; --all draws it)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="charts of the bench's goals table")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, default, what in (
        ("latest", LATEST_SVG, "the newest run recorded in RESULTS.md"),
        ("history", HISTORY_SVG, "each goal row's ratio across the runs in RESULTS.md"),
    ):
        sub = commands.add_parser(name, help=what)
        sub.add_argument("--results", type=Path, default=recorded.RESULTS_MD)
        sub.add_argument("--out", type=Path, default=default, help=f"default {default}")
        sub.add_argument("--png", action="store_true", help="a PNG beside the SVG")
        sub.add_argument(
            "--all", action="store_true", help="also the runs whose heading says not measured"
        )
    sub = commands.add_parser("json", help="a run from the JSON run.py wrote")
    sub.add_argument("file", type=Path)
    sub.add_argument("--out", type=Path, help="default: the JSON file's name, .svg")
    sub.add_argument("--png", action="store_true", help="a PNG beside the SVG")
    args = parser.parse_args(argv)

    if not have_matplotlib():
        print(f"charts need matplotlib: {INSTALL_HINT}", file=sys.stderr)
        return 2
    if args.command == "json":
        doc = json.loads(args.file.read_text())
        written = write_run_chart(doc, args.out or args.file.with_suffix(".svg"), args.png)
    else:
        runs, left = select_runs(recorded.read(args.results), args.all)
        _say_runs(args.results, runs, left)
        if not runs:
            print("no run to draw", file=sys.stderr)
            return 1
        if args.command == "latest":
            run = runs[-1]
            print(f"latest: {run.label()}")
            rows = chart_rows(run.rows(), run.scenarios)
            written = draw_run(rows, info_from_recorded(run), args.out, args.png)
        else:
            written = draw_history(runs, args.out, args.png)
    for path in written:
        print(f"wrote {_shown(path)}")
    return 0


def _shown(path: Path) -> Path:
    """``path`` relative to the working directory when it is under it."""
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


if __name__ == "__main__":
    sys.exit(main())
