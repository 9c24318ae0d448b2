"""The origin's pinning (bench/load/origin.py): nginx's master and its workers move
together, to the load's core or back to every core."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))

from load.origin import Origin

CORES = sorted(os.sched_getaffinity(0))
pytestmark = pytest.mark.skipif(len(CORES) < 2, reason="needs two cores to pin to one")


@pytest.fixture
def master() -> Iterator[tuple[int, int]]:
    """A process with one child, as nginx's master with one worker: (pid, child)."""
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    try:
        yield proc.pid, child
    finally:
        proc.kill()
        proc.wait()
        subprocess.run(["kill", str(child)], check=False)


def origin(pid: int) -> Origin:
    return Origin(tls_port=0, h1_port=0, ca_path=Path("."), pid=pid)


def test_the_master_and_its_workers_move_to_the_core_named(master: tuple[int, int]) -> None:
    pid, child = master
    origin(pid).pin({CORES[-1]})
    assert os.sched_getaffinity(pid) == {CORES[-1]}
    assert os.sched_getaffinity(child) == {CORES[-1]}


def test_none_lets_them_float_again(master: tuple[int, int]) -> None:
    pid, child = master
    origin(pid).pin({CORES[-1]})
    origin(pid).pin(None)
    assert os.sched_getaffinity(pid) == set(CORES)
    assert os.sched_getaffinity(child) == set(CORES)
