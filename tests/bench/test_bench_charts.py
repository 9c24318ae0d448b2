"""The bench's charts: RESULTS.md read back (bench/report/recorded.py), the rows a
chart shows and the SVG files drawn from them (bench/report/charts.py), run.py's chart
beside its JSON, and docs/benchmarks.md against the newest recorded run."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

# bench/ is not a package: its modules import each other from bench/, as its scripts do.
sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))

from report import charts, goals, recorded, tables
from scenarios import run

ROOT = Path(__file__).resolve().parents[2]
EXCERPT = Path(__file__).resolve().parent / "data" / "bench_results_excerpt.md"

# A small RESULTS.md in the bench's format: a run with a goals table and two of its
# scenario tables, an older run with tables only (no Go, a failed peer, a note under a
# table, the same table printed twice), a section with no run, and one whose heading
# says it is not a measurement.
SAMPLE = (Path(__file__).resolve().parent / "data" / "bench_results_sample.md").read_text()


@pytest.fixture
def sample() -> list[recorded.RecordedRun]:
    return recorded.parse(SAMPLE)


def by_heading(runs: list[recorded.RecordedRun], start: str) -> recorded.RecordedRun:
    (found,) = [r for r in runs if r.heading.startswith(start)]
    return found


# --- RESULTS.md read back ----------------------------------------------------------


def test_sections_with_tables_are_runs(sample: list[recorded.RecordedRun]) -> None:
    # The soak section has a fenced block but no table of run.py's: not a run.
    assert [r.heading.split(",")[0] for r in sample] == [
        "Newer run",
        "Older run",
        "First goals table",
    ]


def test_what_a_run_says_about_itself(sample: list[recorded.RecordedRun]) -> None:
    newer = by_heading(sample, "Newer run")
    assert newer.date == "2026-12-05 10:00 UTC"  # run.py's banner, to the second
    assert newer.commit == "abc1234"
    assert newer.machine == "`nproc` 4, Some CPU; Python 3.13.0"
    assert newer.command == "python bench/run.py --scenarios small_50,during"
    first = by_heading(sample, "First goals table")
    assert first.date == "2026-12-04 02:46 UTC"  # no banner: the heading's date and time
    assert first.commit == "1111111"  # no **h2ping:** line: the first commit named


def test_recorded_goals_table(sample: list[recorded.RecordedRun]) -> None:
    rows = {row["row"]: row for row in by_heading(sample, "Newer run").rows()}
    assert rows["small GETs, 50 conns, req/s"] == {
        "row": "small GETs, 50 conns, req/s",
        "scenario": "small_50",
        "goal": ">= 1.0x Go",
        "h2ping": 12_000.0,
        "go": 10_000.0,
        "base": 10_000.0,
        "ratio": 1.2,
        "status": "met",
    }
    delay = rows["event delay p99 ms, 1,000 streams"]
    assert (delay["ratio"], delay["difference"], delay["status"]) == (1.5, 2.5, "not met")
    during = rows["small GET median ms during 200 MiB download"]
    # The base of a row against h2ping's own figure is in the goal cell: taken out.
    assert (during["base"], during["go"]) == (0.5, 5.0)
    assert during["goal"] == "<= 2.0x h2ping idle_p50_ms"
    upload = rows["16 MiB upload MB/s"]
    assert (upload["status"], upload["why"], upload["h2ping"]) == (
        "n/a",
        "transfer_16m not run",
        None,
    )
    assert "ratio" not in upload
    # What the run printed after the table is not part of it.
    text = by_heading(sample, "Newer run").goals_text or ""
    assert text.splitlines()[0].startswith("goals: 1 of 2") and "wrote" not in text


def test_scenario_tables(sample: list[recorded.RecordedRun]) -> None:
    newer = by_heading(sample, "Newer run")
    small = newer.scenarios["small_50"]
    assert small["peers"]["h2ping"] == {"req_per_s": 12_000.0, "cpu_us_per_req": 80.0}
    assert small["peers"]["direct"] == {"req_per_s": 50_000.0, "cpu_us_per_req": None}
    assert small["ratios"]["req_per_s"] == {"direct": 0.24, "go": 1.2, "nghttpx": 0.3}
    during = newer.scenarios["small_during_download"]["peers"]
    assert during["go"] == {"idle_p50_ms": 0.25, "loaded_p50_ms": 5.0}
    older = by_heading(sample, "Older run")
    assert older.date == "2026-12-03 13:34 UTC"
    assert set(older.scenarios) == {"small_50", "transfer_16m", "workers"}
    transfer = older.scenarios["transfer_16m"]
    assert transfer["peers"]["go"] == {"download_mb_per_s": None, "upload_mb_per_s": None}
    assert transfer["errors"] == {"go": "bad transfer: curl exited 7"}
    assert older.scenarios["workers"]["peers"]["h2ping-w2"] == {"req_per_s": 13_500.0}


def test_a_run_without_goals_table_is_judged_from_its_tables(
    sample: list[recorded.RecordedRun],
) -> None:
    older = by_heading(sample, "Older run")
    assert older.goals_table is None
    rows = {row["row"]: row for row in older.rows()}
    assert list(rows) == [goal.row for goal in goals.GOALS]
    workers = rows["--workers 2 req/s"]
    assert (workers["ratio"], workers["status"]) == (1.5, "not met")
    assert rows["small GETs, 50 conns, req/s"]["why"] == "go not run in small_50"
    assert rows["16 MiB download MB/s"]["why"] == "go failed: bad transfer: curl exited 7"


def test_the_real_excerpt_judged_again_gives_its_goals_table() -> None:
    """A run as recorded: judging its scenario tables (figures as printed, rounded)
    gives the verdicts and, to the rounding, the ratios of the goals table it printed."""
    (run_,) = recorded.read(EXCERPT)
    assert (run_.date, run_.commit) == ("2026-12-04 03:02 UTC", "04f4512")
    assert run_.command == "GO_SIDECAR_SRC=../shared/peers/h2-ping-sidecar python bench/run.py"
    assert run_.goals_table is not None
    assert len(run_.goals_table) == 12
    assert set(run_.scenarios) == {
        "small_50",
        "latency_1",
        "transfer_16m",
        "small_during_download",
        "inflight",
        "sse_500",
        "sse_1000",
        "sse_2000",
        "workers",
    }
    again = {row["row"]: row for row in goals.evaluate(run_.scenarios)}
    for row in run_.goals_table:
        judged = again[row["row"]]
        assert (judged["status"], judged.get("why")) == (row["status"], row.get("why"))
        assert judged["ratio"] == pytest.approx(row["ratio"], rel=0.02), row["row"]


def test_the_parser_reads_the_columns_report_prints() -> None:
    """Each header METRICS reads back is a column of tables.py's table for that kind
    of scenario, and shows that key's figure unchanged."""
    for kind, metrics in recorded.METRICS.items():
        columns = tables.INFLIGHT_COLUMNS if kind == "inflight" else tables.COLUMNS[kind][1]
        getters = {header: getter for header, getter, _ in columns}
        for header, key in metrics.items():
            assert header in getters, (kind, header)
            if key == "full_rate":
                assert getters[header]({key: True}) == "yes"
            else:
                assert getters[header]({key: 123.5}) == 123.5, (kind, header)


def test_every_goal_figure_is_read_back() -> None:
    for goal in goals.GOALS:
        metrics = recorded.METRICS[recorded.kind(goal.scenario)].values()
        assert goal.metric in metrics and (goal.base_metric or goal.metric) in metrics, goal.row


def test_the_scenario_of_each_title() -> None:
    assert recorded._scenario_name("1. small requests, 50 connections") == "small_50"
    assert recorded._scenario_name("4. 10000 requests in flight for 60 s") == "inflight"
    assert recorded._scenario_name("7. streamed responses: 2,000 SSE streams, 64 B") == "sse_2000"
    assert recorded._scenario_name("9. something new") is None


# --- the rows a chart shows --------------------------------------------------------


def fake_run() -> dict[str, Any]:
    def scenario(**peers: dict[str, Any]) -> dict[str, Any]:
        return {"peers": {k.replace("_", "-"): v for k, v in peers.items()}, "errors": {}}

    return {
        "small_50": scenario(
            direct={"req_per_s": 50_000},
            go={"req_per_s": 10_000},
            nghttpx={"req_per_s": 40_000},
            baseline={"req_per_s": 1_000},
            h2ping={"req_per_s": 12_000},
        ),
        "sse_1000": scenario(
            go={"delay_p50_ms": 1.0, "delay_p99_ms": 5.0, "full_rate": True},
            h2ping={"delay_p50_ms": 1.5, "delay_p99_ms": 8.0},
        ),
        "small_during_download": scenario(
            go={"idle_p50_ms": 0.25, "loaded_p50_ms": 5.0},
            h2ping={"idle_p50_ms": 0.5, "loaded_p50_ms": 8.0},
        ),
        "workers": scenario(
            go={"req_per_s": 16_000},
            h2ping_w1={"req_per_s": 15_000},
            h2ping_w2={"req_per_s": 27_000},
        ),
    }


@pytest.fixture
def rows() -> dict[str, charts.ChartRow]:
    scenarios = fake_run()
    return {row.name: row for row in charts.chart_rows(goals.evaluate(scenarios), scenarios)}


def test_rows_against_go(rows: dict[str, charts.ChartRow]) -> None:
    small = rows["small GETs, 50 conns, req/s"]
    assert (small.ratio, small.goal_ratio, small.status, small.own) == (1.2, 1.1, "met", False)
    # The other proxies, not Go (the bar) and not the direct peers (no proxy).
    assert [(p.name, p.figure, p.ratio) for p in small.others] == [
        ("nghttpx", 40_000, 0.3),
        ("baseline", 1_000, 12.0),
    ]
    assert charts.describe(small) == (
        "h2ping 12,000 vs Go 10,000: 1.20x;  goal >= 1.1x Go: met",
        "vs nghttpx 40,000: 0.30x;  vs baseline 1,000: 12.00x",
    )


def test_a_difference_goal_on_the_ratio_axis(rows: dict[str, charts.ChartRow]) -> None:
    # h2ping - Go <= 2 ms with Go at 5 ms: the same test as h2ping / Go <= 7 / 5.
    p99 = rows["event delay p99 ms, 1,000 streams"]
    assert (p99.ratio, p99.difference, p99.status) == (1.6, 3.0, "not met")
    assert p99.goal_ratio == pytest.approx(1.4)
    assert charts.describe(p99)[0].startswith("h2ping 8.00 vs Go 5.00: 1.60x (+3.00 ms);")


def test_rows_against_h2pings_own_figure(rows: dict[str, charts.ChartRow]) -> None:
    during = rows["small GET median ms during 200 MiB download"]
    assert (during.ratio, during.goal_ratio, during.own) == (16.0, 2.0, True)
    assert during.base_label == "h2ping idle_p50_ms"
    # Go's own loaded / idle, drawn beside h2ping's.
    (go,) = during.others
    assert (go.name, go.ratio, go.base, go.marked) == ("go", 20.0, 0.25, True)
    assert charts.describe(during)[1] == "go 5.00 vs go idle_p50_ms 0.25: 20.00x"
    workers = rows["--workers 2 req/s"]
    assert (workers.ratio, workers.goal_ratio, workers.status) == (1.8, 1.8, "met")
    # No peer has a --workers 1 figure: Go's req/s is named, not drawn.
    (go,) = workers.others
    assert (go.name, go.ratio, go.marked) == ("go", 27_000 / 16_000, False)


def test_rows_of_scenarios_not_run(rows: dict[str, charts.ChartRow]) -> None:
    memory = rows["memory KiB per in-flight request"]
    assert (memory.status, memory.not_run, memory.ratio) == ("n/a", True, None)
    assert charts.describe(memory) == ("goal < 0.1x Go: n/a", "inflight not run")


def test_the_run_info_from_json_and_from_results(sample: list[recorded.RecordedRun]) -> None:
    doc = {"date": "2026-12-05T10:00:05+00:00", "commit": "abc1234+", "nproc": 2}
    doc |= {"cpu_model": "Some CPU", "quick": True}
    info = charts.info_from_doc(doc)
    assert (
        charts._run_title(info)
        == "2026-12-05 10:00:05 UTC, commit abc1234+, 2 x Some CPU, quick run"
    )
    info = charts.info_from_recorded(by_heading(sample, "Newer run"))
    assert charts._run_title(info) == "2026-12-05 10:00 UTC, commit abc1234, nproc 4, Some CPU"


def test_history_rows_across_runs(sample: list[recorded.RecordedRun]) -> None:
    runs, left = charts.select_runs(sample)
    assert [r.heading.split(",")[0] for r in runs] == ["Older run", "Newer run"]  # oldest first
    assert [r.heading.split(",")[0] for r in left] == ["First goals table"]
    history = {row.name: row for row in charts.history_rows(runs)}
    assert list(history)[: len(goals.GOALS)] == [goal.row for goal in goals.GOALS]
    small = [p and p.ratio for p in history["small GETs, 50 conns, req/s"].points]
    assert small == [None, 1.2]  # the older run had no Go
    workers = [p and p.ratio for p in history["--workers 2 req/s"].points]
    assert workers == [1.5, None]
    everything, _ = charts.select_runs(sample, everything=True)
    assert len(everything) == 3


# --- the SVG files ----------------------------------------------------------------


def svg_text(path: Path) -> str:
    """All the text of an SVG file, which must parse as XML with an <svg> root."""
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return "\n".join(t.strip() for t in root.itertext() if t.strip())


def test_run_chart(tmp_path: Path, rows: dict[str, charts.ChartRow]) -> None:
    pytest.importorskip("matplotlib")
    info = charts.RunInfo("2026-12-05 10:00 UTC", "abc1234", "2 x Some CPU")
    written = charts.draw_run(list(rows.values()), info, tmp_path / "run.svg", png=True)
    assert written == [tmp_path / "run.svg", tmp_path / "run.png"]
    assert (tmp_path / "run.png").read_bytes().startswith(b"\x89PNG")
    text = svg_text(tmp_path / "run.svg")
    shown = [row for row in rows.values() if not row.not_run]
    assert len(shown) == 6
    for row in shown:
        assert row.name + (" *" if row.own else "") in text
    assert "memory KiB per in-flight request" not in text  # its scenario was not run
    assert "commit abc1234" in text and "6 rows not run" in text
    assert "vs nghttpx 40,000: 0.30x;  vs baseline 1,000: 12.00x" in text
    # Drawn again from the same rows, the same file.
    first = (tmp_path / "run.svg").read_bytes()
    charts.draw_run(list(rows.values()), info, tmp_path / "run.svg")
    assert (tmp_path / "run.svg").read_bytes() == first


def test_no_chart_without_a_row(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = charts.chart_rows(goals.evaluate({}), {})
    assert charts.draw_run(rows, charts.RunInfo("today"), tmp_path / "none.svg") == []
    assert not (tmp_path / "none.svg").exists()


def test_history_chart(tmp_path: Path, sample: list[recorded.RecordedRun]) -> None:
    pytest.importorskip("matplotlib")
    runs, _ = charts.select_runs(sample)
    (out,) = charts.draw_history(runs, tmp_path / "history.svg")
    text = svg_text(out)
    for goal in goals.GOALS:
        assert goal.row in text
    assert "def5678" in text and "abc1234" in text  # the runs, by commit
    assert "in 1 of 2 runs" in text  # rows a run lacks


def test_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    results = tmp_path / "RESULTS.md"
    results.write_text(SAMPLE)
    latest = tmp_path / "img" / "latest.svg"
    assert charts.main(["latest", "--results", str(results), "--out", str(latest)]) == 0
    out = capsys.readouterr().out
    assert "2 runs with goal rows" in out
    assert re.search(r"2026-12-03 13:34 UTC  commit def5678 +1 rows \(scenario tables\)", out)
    assert re.search(r"2026-12-05 10:00 UTC  commit abc1234 +3 rows \(goals table\)", out)
    assert "left out: First goals table" in out
    assert "latest: 2026-12-05 10:00 UTC, commit abc1234" in out
    assert "small GETs, 50 conns, req/s" in svg_text(latest)
    history = tmp_path / "img" / "history.svg"
    argv = ["history", "--results", str(results), "--out", str(history), "--all"]
    assert charts.main(argv) == 0
    assert "3 runs with goal rows" in capsys.readouterr().out
    assert "1111111" in svg_text(history)  # the run left out by default, by its commit


def test_the_command_without_matplotlib(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(charts, "have_matplotlib", lambda: False)
    assert charts.main(["history"]) == 2
    assert capsys.readouterr().err == "charts need matplotlib: pip install -e '.[bench]'\n"


# --- run.py's chart beside its JSON -----------------------------------------------


def run_doc() -> dict[str, Any]:
    scenarios = fake_run()
    doc = {"date": "2026-12-05T10:00:05+00:00", "commit": "abc1234", "nproc": 2}
    doc |= {"cpu_model": "Some CPU", "quick": True, "scenarios": scenarios}
    return doc | {"goals": goals.evaluate(scenarios)}


def test_run_writes_its_chart_beside_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "results" / "latest.json"
    run.write_chart(run_doc(), out, png=True)
    assert capsys.readouterr().out.splitlines() == [
        f"wrote {tmp_path / 'results' / 'latest.svg'}",
        f"wrote {tmp_path / 'results' / 'latest.png'}",
    ]
    assert "--workers 2 req/s *" in svg_text(out.with_suffix(".svg"))
    # The same chart again from the JSON, by the command.
    out.write_text(json.dumps(run_doc()))
    assert charts.main(["json", str(out), "--out", str(tmp_path / "again.svg")]) == 0
    assert (tmp_path / "again.svg").read_bytes() == out.with_suffix(".svg").read_bytes()


def test_run_without_matplotlib_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(charts, "have_matplotlib", lambda: False)
    run.write_chart(run_doc(), tmp_path / "latest.json")
    captured = capsys.readouterr()
    assert (
        captured.out == "chart skipped: matplotlib is not installed (pip install -e '.[bench]')\n"
    )
    assert captured.err == "" and list(tmp_path.iterdir()) == []


def test_run_records_the_commit() -> None:
    commit = run._git_commit()
    if (ROOT / ".git").exists():
        assert commit is not None and re.fullmatch(r"[0-9a-f]{7,40}\+?", commit)


# --- docs/benchmarks.md against RESULTS.md -----------------------------------------


def newest_recorded() -> recorded.RecordedRun:
    runs, _ = charts.select_runs(recorded.read())
    return runs[-1]


def test_the_benchmarks_page_shows_the_newest_recorded_run() -> None:
    """docs/benchmarks.md gives the newest run of RESULTS.md: its date, commit,
    command and goals table as printed, and embeds the charts."""
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    newest = newest_recorded()
    assert newest.goals_text is not None, "the newest run has no goals table"
    assert newest.date in page and f"commit {newest.commit}" in page
    # The command as run, without the environment it was given (VAR=value words).
    assert newest.command is not None
    command = re.sub(r"^(\w+=\S+ )+", "", newest.command)
    assert f"`{command}`" in page
    assert newest.goals_text in page
    for image in ("img/bench-latest.svg", "img/bench-history.svg"):
        assert f"]({image})" in page
        assert (ROOT / "docs" / image).exists()


def test_the_committed_charts_show_every_row() -> None:
    """The SVG files in docs/img name each row of the newest recorded run (redraw them
    with ``python bench/charts.py latest`` and ``history`` after recording a run)."""
    newest = newest_recorded()
    latest = svg_text(ROOT / "docs" / "img" / "bench-latest.svg")
    assert f"commit {newest.commit}" in latest
    history = svg_text(ROOT / "docs" / "img" / "bench-history.svg")
    assert newest.commit is not None and newest.commit in history
    for row in newest.rows():
        assert row["row"] in latest and row["row"] in history


def test_colour_says_whether_the_goal_was_met(rows: dict[str, charts.ChartRow]) -> None:
    """Met, missed or not judged: the goal's verdict, not how h2ping did against Go."""
    small = rows["small GETs, 50 conns, req/s"]
    assert (small.status, small.colour) == ("met", "met")
    p99 = rows["event delay p99 ms, 1,000 streams"]
    assert (p99.status, p99.colour) == ("not met", "not met")
    # Against its own figure: h2ping's 16x beats Go's 20x, but misses the 2x goal.
    during = rows["small GET median ms during 200 MiB download"]
    assert (during.status, during.colour, during.start) == ("not met", "not met", 20.0)
    assert rows["memory KiB per in-flight request"].colour == "n/a"  # not run
    assert rows["--workers 2 req/s"].start is None  # no Go ratio: the bar starts at 1x


def svg_of(drawn: charts.Drawn, path: Path) -> str:
    drawn.figure.savefig(path, format="svg")
    return svg_text(path)


def test_each_bar_label_is_the_ratio_its_text_gives(
    tmp_path: Path, rows: dict[str, charts.ChartRow]
) -> None:
    """The label at a bar's end and the text beside the row give one ratio: on a
    row where less is better, and on a * row, too (16.00x, not 1/16 = 0.06x)."""
    pytest.importorskip("matplotlib")
    drawn = charts.run_figure(list(rows.values()), charts.RunInfo("today"))
    assert drawn is not None
    labels = [label.get_text() for label, _, _ in drawn.labels]
    shown = [row for row in rows.values() if not row.not_run and row.ratio is not None]
    expected = [f"{r.ratio:.2f}x" + (" n/a" if r.status == "n/a" else "") for r in shown]
    assert labels == expected
    for row in shown:
        assert f": {row.ratio:.2f}x" in charts.describe(row)[0]
    assert "16.00x" in labels and "0.06x" not in svg_of(drawn, tmp_path / "run.svg")


def test_the_legend_names_every_bar_style(tmp_path: Path, rows: dict[str, charts.ChartRow]) -> None:
    pytest.importorskip("matplotlib")
    drawn = charts.run_figure(list(rows.values()), charts.RunInfo("today"))
    assert drawn is not None
    styles = {(bar.get_facecolor(), bar.get_hatch()) for bar in drawn.axes.patches}
    legend = drawn.axes.get_legend()
    keys = {(patch.get_facecolor(), patch.get_hatch()) for patch in legend.get_patches()}
    assert styles <= keys, styles - keys
    text = [t.get_text() for t in legend.get_texts()]
    assert text[:4] == ["goal met", "goal missed", "n/a: not judged", "goal"]


def collision() -> charts.ChartRow:
    """A row whose goal mark stands just past its bar's end, where its label goes."""
    return charts.ChartRow(
        name="mean latency, 1 conn, us", status="met", why=None, goal_text="<= 1.3x Go",
        ratio=1.2, difference=None, h2ping=120, base=100, base_label="Go", goal_ratio=1.25,
    )  # fmt: skip


def test_no_goal_mark_runs_through_a_label(rows: dict[str, charts.ChartRow]) -> None:
    pytest.importorskip("matplotlib")
    all_rows = [*rows.values(), collision()]
    info = charts.RunInfo("today")
    unmoved = charts.run_figure(all_rows, info, clear_goals=False)
    assert unmoved is not None and charts.crossed_labels(unmoved) == ["1.20x"]  # staged
    drawn = charts.run_figure(all_rows, info)
    assert drawn is not None and charts.crossed_labels(drawn) == []
    newest = newest_recorded()
    recorded_rows = charts.chart_rows(newest.rows(), newest.scenarios)
    drawn = charts.run_figure(recorded_rows, charts.info_from_recorded(newest))
    assert drawn is not None and charts.crossed_labels(drawn) == []


def test_the_history_has_no_empty_column_and_no_label_on_a_goal_line() -> None:
    """Each panel has a column per run that measured its row, no other; each
    figure's label is on the side of its point away from the goal line."""
    pytest.importorskip("matplotlib")
    runs, _ = charts.select_runs(recorded.read())
    rows = charts.history_rows(runs)
    assert any(None in row.points for row in rows)  # some run lacks some row
    fig = charts.history_figure(runs)
    fig.draw_without_rendering()
    panels = [ax for ax in fig.axes if ax.axison]
    assert len(panels) == len(rows)
    for ax, row in zip(panels, rows, strict=True):
        present = [p for p in row.points if p is not None]
        assert len(ax.get_xticks()) == len(present), row.name
        [goal_line] = [line for line in ax.lines if line.get_linestyle() == "--"]
        goals_at = dict(zip(goal_line.get_xdata(), goal_line.get_ydata(), strict=True))
        for label in ax.texts:
            x = label.xy[0]
            if x not in goals_at:
                continue
            box = label.get_window_extent()
            y = ax.transData.transform((x, goals_at[x]))[1]
            assert not box.y0 - 1 <= y <= box.y1 + 1, (row.name, label.get_text())
