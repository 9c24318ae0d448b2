"""The benchmark's rounds (bench/scenarios/suite.py): the compared peers measured in turn,
several times, and one peer's figures taken as the medians of its rounds."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))

from common.procs import BenchError
from peers.lineup import Peer
from report import tables
from scenarios import suite


def bench(rounds: int, peers: list[str]) -> suite.Bench:
    # No process is started: each peer below is a Peer without one.
    return suite.Bench(None, None, Path("."), False, peers, rounds)  # type: ignore[arg-type]


def test_one_round_is_the_figures_unchanged() -> None:
    only = {"req_per_s": 5.0, "other": "x"}
    assert suite.merge_rounds([only], ("req_per_s",)) is only


def test_the_median_round_keeps_its_figures_and_each_key_is_its_median() -> None:
    runs = [
        {"req_per_s": 300.0, "cpu_us_per_req": 10.0, "run": "a"},
        {"req_per_s": 100.0, "cpu_us_per_req": 30.0, "run": "b"},
        {"req_per_s": 200.0, "cpu_us_per_req": 50.0, "run": "c"},
    ]
    merged = suite.merge_rounds(runs, ("req_per_s", "cpu_us_per_req"))
    assert merged["run"] == "c"  # the round with the median req/s
    assert merged["req_per_s"] == 200.0
    assert merged["cpu_us_per_req"] == 30.0  # the median of its own, not round c's
    assert [r["req_per_s"] for r in merged["rounds"]] == [300.0, 100.0, 200.0]
    assert "rounds" not in runs[2]  # the round itself is left as it was


def test_an_even_count_keeps_the_lower_middle_round() -> None:
    runs = [{"mean_us": value, "run": value} for value in (4.0, 1.0, 3.0, 2.0)]
    merged = suite.merge_rounds(runs, ("mean_us",))
    assert merged["run"] == 2.0
    assert merged["mean_us"] == 2.5


def test_the_compared_peers_go_round_in_turn_and_the_others_once() -> None:
    started: list[str] = []
    values = iter(range(1, 100))

    def start(_bench: suite.Bench, name: str) -> Peer:
        started.append(name)
        return Peer(name, "http://127.0.0.1:1", True)

    def run(_bench: suite.Bench, peer: Peer) -> dict[str, Any]:
        return {"req_per_s": float(next(values))}

    b = bench(3, ["direct", "go", "h2ping"])
    figures, errors = suite._each_peer(b, "s", b.peers, run, start=start, keys=("req_per_s",))
    assert errors == {}
    assert started == ["direct", "go", "h2ping", "go", "h2ping", "go", "h2ping"]
    assert "rounds" not in figures["direct"]
    assert [r["req_per_s"] for r in figures["go"]["rounds"]] == [2.0, 4.0, 6.0]
    assert figures["h2ping"]["req_per_s"] == 5.0
    text = tables._round_lines(figures)
    assert text == [
        "  go, 3 rounds (medians above): req_per_s 2 4 6",
        "  h2ping, 3 rounds (medians above): req_per_s 3 5 7",
    ]


def test_without_keys_a_scenario_measures_each_peer_once() -> None:
    started: list[str] = []

    def start(_bench: suite.Bench, name: str) -> Peer:
        started.append(name)
        return Peer(name, "http://127.0.0.1:1", True)

    b = bench(3, ["go", "h2ping"])
    suite._each_peer(b, "s", b.peers, lambda _b, _p: {"x": 1.0}, start=start)
    assert started == ["go", "h2ping"]


def test_a_failed_round_fails_the_peer_and_stops_its_rounds() -> None:
    started: list[str] = []

    def start(_bench: suite.Bench, name: str) -> Peer:
        started.append(name)
        return Peer(name, "http://127.0.0.1:1", True)

    def run(_bench: suite.Bench, peer: Peer) -> dict[str, Any]:
        if peer.name == "go" and started.count("go") == 2:
            raise BenchError("go died")
        return {"req_per_s": 1.0}

    b = bench(3, ["go", "h2ping"])
    figures, errors = suite._each_peer(b, "s", b.peers, run, start=start, keys=("req_per_s",))
    assert errors == {"go": "go died"}
    assert "go" not in figures  # no figure from the rounds that did not fail
    assert started == ["go", "h2ping", "go", "h2ping", "h2ping"]
    assert len(figures["h2ping"]["rounds"]) == 3


def test_after_runs_for_every_start_with_its_figures_or_none() -> None:
    seen: list[Any] = []

    def start(_bench: suite.Bench, name: str) -> Peer:
        if name == "nghttpx":
            raise BenchError("no nghttpx")
        return Peer(name, "http://127.0.0.1:1", True)

    def run(_bench: suite.Bench, peer: Peer) -> dict[str, Any]:
        return {"x": 1.0, "peer": peer.name}

    b = bench(3, ["go", "nghttpx", "h2ping"])
    figures, errors = suite._each_peer(
        b, "s", b.peers, run, start=start, keys=("x",), rounds=2, after=seen.append
    )
    assert errors == {"nghttpx": "no nghttpx"}
    # rounds=2 overrides the bench's 3: go and h2ping twice, nghttpx (failed) once
    assert [f and f["peer"] for f in seen] == ["go", None, "h2ping", "go", "h2ping"]
    assert len(figures["go"]["rounds"]) == 2


def test_a_round_without_the_first_figure_ranks_last() -> None:
    runs = [{"cpu": None, "run": "a"}, {"cpu": 2.0, "run": "b"}, {"cpu": 1.0, "run": "c"}]
    merged = suite.merge_rounds(runs, ("cpu",))
    assert merged["run"] == "b"  # ranked c, b, a: the middle one
    assert merged["cpu"] == 1.5  # the median of the figures there are


def test_round_lines_keep_small_figures_and_say_yes_or_no() -> None:
    peers = {"go": {"rounds": [{"cpu": 0.244, "ok": True}, {"cpu": 1234.5, "ok": False}]}}
    assert tables._round_lines(peers) == [
        "  go, 2 rounds (medians above): cpu 0.244 1,234; ok yes NO"
    ]


def test_the_full_rate_counts_only_if_every_round_had_it() -> None:
    from scenarios import streaming

    merged = {"full_rate": True, "rounds": [{"full_rate": True}, {"full_rate": False}]}
    streaming.full_rate_every_round(merged)
    assert merged["full_rate"] is False
    once = {"full_rate": True}  # one round: as it was
    streaming.full_rate_every_round(once)
    assert once["full_rate"] is True
