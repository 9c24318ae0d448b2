"""The runs of bench/run.py recorded in bench/RESULTS.md, read back as data.

RESULTS.md is Markdown: one ``## `` section per recorded run (or check), newest
first, with the command, the machine and h2ping's commit as bullets and the
bench's printed output in fenced blocks. This reads, from each section:

- the goals table, where the run printed one (``goals: N of M judged met``);
- the scenario tables (``1. small requests, ...`` with one line per peer), into
  figures per peer under the keys run.py uses, so that goals.evaluate can judge a
  run recorded before the goals table existed.

Standard library only (goals.py and tables.py are too).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from report import goals

RESULTS_MD = Path(__file__).resolve().parents[1] / "RESULTS.md"

# The scenario of a table, by the number its title starts with (tables.render).
NUMBERED = {
    "1": "small_50",
    "2": "latency_1",
    "3": "transfer_16m",
    "4": "inflight",
    "5": "inflight50k",
    "6": "workers",
    "8": "small_during_download",
}  # 7 is a streaming scenario, named by its stream count: sse_500, sse_1000, ...

# Per kind of table (tables.COLUMNS' keys, and "inflight"): the column headers read
# back, and the key of the figure each shows unchanged. Enough for every goal's
# figures and the peers' ratios; tests/bench/test_bench_charts.py holds it to tables.py.
METRICS: dict[str, dict[str, str]] = {
    "small_50": {"req/s": "req_per_s", "CPU us/req": "cpu_us_per_req"},
    "latency_1": {
        "mean": "mean_us",
        "p50": "p50_us",
        "p99": "p99_us",
        "CPU us/req": "cpu_us_per_req",
    },
    "transfer_16m": {"download": "download_mb_per_s", "upload": "upload_mb_per_s"},
    "inflight": {"KiB/req": "rss_per_request_kib"},
    "sse": {
        "events/s": "events_per_s",
        "full rate": "full_rate",
        "p50 ms": "delay_p50_ms",
        "p99 ms": "delay_p99_ms",
        "CPU s/10k ev": "cpu_per_10k_events",
    },
    "small_during_download": {"idle p50": "idle_p50_ms", "loaded p50": "loaded_p50_ms"},
    "workers": {"req/s": "req_per_s", "CPU us/req": "cpu_us_per_req"},
}

_TITLE = re.compile(r"^(\d)\. ")
_STREAMS = re.compile(r"([\d,]+) SSE streams")
_CELLS = re.compile(r"\s{2,}")
_GOALS_TITLE = re.compile(r"^goals: \d+ of \d+ judged met")
_BANNER = re.compile(r"^==== h2ping bench, (\S+?),")
_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})(?:,? (\d{2}):(\d{2}))?")
_COMMIT = re.compile(r"commit ([0-9a-f]{7,40})\b")
_ERROR = re.compile(r"^  (\S+): ERROR (.*)$")


@dataclass
class RecordedRun:
    """One ``## `` section of RESULTS.md that holds a run's tables."""

    heading: str
    when: datetime.datetime | None  # the run's start (UTC), as far as the section says
    commit: str | None = None
    machine: str | None = None
    command: str | None = None
    # As run.py keeps them: {scenario: {"peers": {peer: {key: figure}}, "errors": {...}}}
    scenarios: dict[str, dict[str, Any]] = field(default_factory=dict)
    goals_table: list[dict[str, Any]] | None = None  # rows as recorded, keys as goals.evaluate
    goals_text: str | None = None  # the goals table as printed
    intro: str = ""  # the section's text before its first fenced block

    @property
    def date(self) -> str:
        return self.when.strftime("%Y-%m-%d %H:%M UTC") if self.when else "undated"

    def rows(self) -> list[dict[str, Any]]:
        """The goal rows: as recorded, else judged now from the scenario tables."""
        if self.goals_table is not None:
            return self.goals_table
        return goals.evaluate(self.scenarios)

    def label(self) -> str:
        return f"{self.date}, commit {self.commit or '?'}"


@dataclass
class Section:
    heading: str
    body: str


def sections(text: str) -> list[Section]:
    """The ``## `` sections of a Markdown text (``###`` and deeper stay in their body)."""
    found: list[Section] = []
    for chunk in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading, _, body = chunk.partition("\n")
        found.append(Section(heading.strip(), body))
    return found


def fenced_blocks(body: str) -> list[str]:
    """The contents of the ```` ``` ```` blocks of a section, in order."""
    return re.findall(r"^```[^\n]*\n(.*?)^```", body, flags=re.MULTILINE | re.DOTALL)


def parse(text: str) -> list[RecordedRun]:
    """Every section with a goals table or a scenario table, in the order written."""
    runs = []
    for section in sections(text):
        run = parse_section(section)
        if run is not None:
            runs.append(run)
    return runs


def read(path: Path = RESULTS_MD) -> list[RecordedRun]:
    return parse(path.read_text(encoding="utf-8"))


def parse_section(section: Section) -> RecordedRun | None:
    blocks = fenced_blocks(section.body)
    run = RecordedRun(
        section.heading,
        _when(section.heading, blocks),
        intro=section.body.split("```", 1)[0].strip(),
    )
    run.commit, run.machine, run.command = _bullets(run.intro)
    for block in blocks:
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if _GOALS_TITLE.match(line):
                run.goals_table, run.goals_text = _goals_table(lines[i:])
            elif _TITLE.match(line):
                scenario = _scenario_name(line)
                if scenario is not None:
                    # A later table of the same scenario (the summary) replaces the first.
                    run.scenarios[scenario] = _scenario_table(scenario, lines[i + 1 :])
    if run.goals_table is None and not any(s["peers"] for s in run.scenarios.values()):
        return None
    return run


def _when(heading: str, blocks: list[str]) -> datetime.datetime | None:
    """The start printed by run.py, else the heading's date (and time, if it has one)."""
    for block in blocks:
        for line in block.splitlines():
            match = _BANNER.match(line)
            if match:
                try:
                    return datetime.datetime.fromisoformat(match.group(1)).astimezone(datetime.UTC)
                except ValueError:
                    pass
    match = _DATE.search(heading)
    if match is None:
        return None
    day, hour, minute = match.groups()
    when = datetime.datetime.fromisoformat(day).replace(tzinfo=datetime.UTC)
    return when.replace(hour=int(hour), minute=int(minute)) if hour else when


def _bullets(intro: str) -> tuple[str | None, str | None, str | None]:
    """(h2ping's commit, the machine, the command) from the section's bullets."""
    items = re.split(r"^- ", intro, flags=re.MULTILINE)[1:]
    bullets = {}
    for item in items:
        match = re.match(r"\*\*(.+?):\*\*\s*(.*)", item, flags=re.DOTALL)
        if match:
            bullets[match.group(1)] = " ".join(match.group(2).split())
    commit = None
    for text in (bullets.get("h2ping", ""), intro):  # h2ping's own line first
        match = _COMMIT.search(" ".join(text.split()))
        if match:
            commit = match.group(1)
            break
    command = bullets.get("Command")
    if command:
        code = re.search(r"`([^`]+)`", command)
        command = code.group(1) if code else command
    return commit, bullets.get("Machine"), command


def _scenario_name(title: str) -> str | None:
    number = title[0]
    if number == "7":
        match = _STREAMS.search(title)
        return f"sse_{match.group(1).replace(',', '')}" if match else None
    return NUMBERED.get(number)


def kind(scenario: str) -> str:
    """The METRICS entry of a scenario: ``sse_500`` -> ``sse``, ``inflight50k`` -> ``inflight``."""
    if scenario.startswith("sse_"):
        return "sse"
    return "inflight" if scenario.startswith("inflight") else scenario


def _scenario_table(scenario: str, lines: list[str]) -> dict[str, Any]:
    """Figures per peer from the lines after a table's title, to the first blank line."""
    metrics = METRICS.get(kind(scenario), {})
    peers: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    ratios: dict[str, dict[str, float]] = {}  # "h2ping/peer METRIC" columns, as tables.add_ratios
    headers: list[str] | None = None
    for line in lines:
        if not line.strip() or _TITLE.match(line):
            break
        error = _ERROR.match(line)
        if error:
            errors[error.group(1)] = error.group(2)
            continue
        cells = _CELLS.split(line.strip())
        if headers is None:
            if cells[0] == "peer":
                headers = cells
            continue
        if len(cells) != len(headers):
            continue  # a note under the table
        figures = {}
        for header, cell in zip(headers, cells, strict=True):
            value = _value(cell)
            if header in metrics:
                figures[metrics[header]] = value
            elif header.startswith("h2ping/peer ") and isinstance(value, float):
                ratios.setdefault(header.removeprefix("h2ping/peer "), {})[cells[0]] = value
        peers[cells[0]] = figures
    return {"peers": peers, "errors": errors, "ratios": ratios}


def _value(cell: str) -> float | bool | None:
    if cell in ("yes", "NO"):
        return cell == "yes"
    try:
        return float(cell.replace(",", "").removesuffix("x"))
    except ValueError:
        return None  # n/a, -, ?


def _goals_table(lines: list[str]) -> tuple[list[dict[str, Any]], str]:
    """The rows of a printed goals table (goals.render), keys as goals.evaluate's."""
    specs = {goal.row: goal for goal in goals.GOALS}
    rows: list[dict[str, Any]] = []
    taken = [lines[0]]
    for line in lines[1:]:
        if not line.startswith("  "):
            break  # a blank line, or what the run printed next
        taken.append(line)
        cells = _CELLS.split(line.strip())
        if cells[0] == "goal row" or len(cells) != 6:
            continue
        name, mine, go, ratio, goal_text, status = cells
        row: dict[str, Any] = {"row": name, "goal": goal_text}
        goal = specs.get(name)
        if goal is not None:
            row["scenario"] = goal.scenario
        row["h2ping"], row["go"] = _number(mine), _number(go)
        base = re.search(r"\(([\d,.]+)\)$", goal_text)  # a base that is not Go's figure
        row["base"] = _number(base.group(1)) if base else row["go"]
        if base:
            row["goal"] = goal_text[: base.start()].rstrip()
        match = re.match(r"([\d.]+)x(?: \(([+-][\d.]+) )?", ratio)
        if match:
            row["ratio"] = float(match.group(1))
            if match.group(2):
                row["difference"] = float(match.group(2))
        verdict, _, why = status.partition(": ")
        row["status"] = verdict
        if why:
            row["why"] = why
        rows.append(row)
    return rows, "\n".join(taken)


def _number(cell: str) -> float | None:
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return None
