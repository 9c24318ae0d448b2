"""docs/sizing.md holds: its table is the capacity h2ping reckons, and the lines it
quotes are the lines a process at its descriptor limit writes."""

from __future__ import annotations

import asyncio
import re
import resource
import sys
from pathlib import Path

import aiohttp
import pytest

from h2ping.process.descriptors import SPARE_FOR_OTHERS, ClientCapacity
from h2ping.testing import ScriptedUpstream

from ..conftest import REPO_ROOT, free_port, held_a_second, one_request_alone, scrape_metrics
from ..launcher import launch

PAGE = REPO_ROOT / "docs" / "sizing.md"
LIMIT = 200


def page() -> str:
    return PAGE.read_text()


def test_the_table_is_the_capacity_reckoned() -> None:
    text = page()
    opened = int(re.search(r"With\s+(\d+) open at start:", text).group(1))  # type: ignore[union-attr]
    rows = re.findall(r"^\| (\d+) \| (\d+) \| ([\d,]+) \|$", text, re.MULTILINE)
    assert len(rows) >= 5
    for limit, streams, capacity in rows:
        reckoned = ClientCapacity(int(limit), opened, lambda s=int(streams): s)()
        assert reckoned == int(capacity.replace(",", "")), (limit, streams, capacity)


def test_the_spare_is_as_said() -> None:
    least, most = SPARE_FOR_OTHERS
    assert f"a sixteenth of the limit, at least {least} and at most {most}" in page()


def shape(line: str) -> str:
    """A log line without its time, instance name and numbers."""
    line = re.sub(r"^(?:.*? )?(INFO|WARNING) h2ping [^:]+: ", r"\1 ", line.strip())
    return re.sub(r"\d[\d,]*", "N", line)


def quoted(start: str) -> str:
    (line,) = [ln for ln in page().splitlines() if ln.startswith(start)]
    return line


@pytest.mark.one_loop
async def test_the_quoted_lines_are_those_written(tmp_path: Path) -> None:
    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))

    port, admin = free_port(), free_port()
    async with ScriptedUpstream(held_a_second) as upstream:
        command = [sys.executable, "-m", "h2ping", "--listen", f"127.0.0.1:{port}"]
        command += ["--upstream", upstream.url, "--admin-listen", f"127.0.0.1:{admin}"]
        command += ["--ready-file", str(tmp_path / "ready")]
        proxy = await launch(
            command, log=tmp_path / "log", ready_file=tmp_path / "ready", preexec_fn=low_limit
        )
        try:
            async with aiohttp.ClientSession() as session:
                metrics = await scrape_metrics(session, f"http://127.0.0.1:{admin}/metrics")
            answers = await asyncio.gather(
                *(one_request_alone(f"http://127.0.0.1:{port}/x") for _ in range(2 * LIMIT))
            )
        finally:
            await proxy.terminate()
    assert answers == [(200, "ok")] * (2 * LIMIT)
    lines = proxy.log_text().splitlines()
    (capacity,) = [line for line in lines if ": capacity: " in line]
    (full,) = [line for line in lines if ": at capacity: " in line]
    assert shape(capacity) == shape(quoted("INFO h2ping api.example.com: capacity:"))
    assert shape(full) == shape(quoted("WARNING h2ping api.example.com: at capacity:"))
    # The line's number is the formula's, with the line's own figures, and /metrics'.
    said = int(capacity.split(": capacity: ")[1].split()[0].replace(",", ""))
    opened = int(re.search(r"(\d+) open at start", capacity).group(1))  # type: ignore[union-attr]
    assert said == ClientCapacity(LIMIT, opened, lambda: None)()
    assert metrics[("h2ping_client_capacity", "")] == said
    assert metrics[("h2ping_descriptors_limit", "")] == LIMIT
