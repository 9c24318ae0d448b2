"""What each finished request leaves behind: its latency in /metrics
(``request_duration_seconds``, ``upstream_headers_seconds``) and its access-log line."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import time
from pathlib import Path

import aiohttp
import pytest
from h2.errors import ErrorCodes

from h2ping.process.accesslog import QUEUE_LINES, AccessLog, Entry, format_entry
from h2ping.stats import OUTCOMES, Stats
from h2ping.testing import ScriptedRequest

from ..conftest import (
    TLSFiles,
    free_port,
    running_proxy,
    scrape_metrics,
    scripted,
    send_raw,
    wait_until,
)
from ..launcher import H2PING_SIDECAR, launch

SECRET = "s3cr3t-k3y"  # in the query and in a header: never in a log line
THINK = 0.3  # the origin's time to response headers


async def model(request: ScriptedRequest) -> None:
    """Thinks THINK seconds, then answers ``hello`` (or resets ``/reset``)."""
    await request.body()
    if request.path.startswith("/reset"):
        request.reset(ErrorCodes.INTERNAL_ERROR)
        return
    await asyncio.sleep(THINK)
    await request.respond(200, [("content-length", "5")], b"hello")


async def test_latency_histograms_by_outcome(tls: TLSFiles) -> None:
    async with (
        scripted(tls, model) as upstream,
        running_proxy(upstream.url, tls, admin_listen="127.0.0.1:0") as proxy,
        aiohttp.ClientSession() as client,
    ):
        for path in ("/v1/chat", "/v1/chat", "/reset"):
            async with client.post(f"{proxy.url}{path}", data=b"hi") as resp:
                await resp.read()
        assert proxy.admin is not None
        metrics = await scrape_metrics(client, f"http://127.0.0.1:{proxy.admin.port}/metrics")
    duration = "h2ping_request_duration_seconds"
    assert metrics[(f"{duration}_count", "outcome=ok")] == 2
    assert metrics[(f"{duration}_bucket", "le=0.25,outcome=ok")] == 0  # each took THINK
    assert metrics[(f"{duration}_bucket", "le=+Inf,outcome=ok")] == 2
    assert metrics[(f"{duration}_sum", "outcome=ok")] >= 2 * THINK
    assert metrics[(f"{duration}_count", "outcome=failed")] == 1
    for outcome in OUTCOMES:  # one observation per request that ended so
        count = metrics[(f"{duration}_count", f"outcome={outcome}")]
        assert count == metrics[("h2ping_requests_total", f"outcome={outcome}")], outcome
    headers = "h2ping_upstream_headers_seconds"
    assert metrics[(f"{headers}_count", "")] == 2  # the reset one had no headers
    assert metrics[(f"{headers}_bucket", "le=0.25")] == 0
    assert metrics[(f"{headers}_bucket", "le=3600.0")] == 2
    assert metrics[(f"{headers}_bucket", "le=7200.0")] == 2  # buckets reach past an hour
    assert metrics[(f"{headers}_sum", "")] >= 2 * THINK
    assert ("h2ping_access_log_dropped_total", "") not in metrics  # no access log: not there


#: ``TIME "INSTANCE" METHOD "PATH" key=value ...``, the quoted parts escaped.
TEXT_LINE = re.compile(r'(\S+) "((?:[^"\\]|\\.)*)" (\S+) "((?:[^"\\]|\\.)*)" (.*)')


def unquote(text: str) -> bytes:
    """The bytes a quoted part of a text line stands for."""
    return text.encode("ascii").decode("unicode_escape").encode("latin-1")


def parse_text_line(line: str) -> dict[str, str]:
    """A text access-log line as a dict, the quoted parts unescaped."""
    match = TEXT_LINE.fullmatch(line)
    assert match is not None, line
    stamp, instance, method, path, rest = match.groups()
    fields = dict(pair.split("=", 1) for pair in rest.split(" "))
    return {
        "time": stamp,
        "instance": unquote(instance).decode(),
        "method": method,
        "path": unquote(path).decode("latin-1"),
        **fields,
    }


@pytest.mark.parametrize(
    ("instance", "target"),
    [
        ("api example", b"/v1/chat"),
        ('gym "eval" run\\2', b'/a"b\\c'),
        ("pr\u00fcfung \u2603", b"/caf\xc3\xa9/\xff\x01end"),
    ],
)
def test_text_lines_split_one_way_whatever_the_name_and_path(instance: str, target: bytes) -> None:
    entry = (1.5e9, b"GET", target + b"?key=secret", 200, 0, 5, 0.25, 0.125, 3, 5, 0, "ok")
    line = format_entry(entry, "text", instance)
    assert "\n" not in line and all(" " <= ch <= "~" for ch in line), line
    fields = parse_text_line(line)
    assert fields["instance"] == instance
    assert fields["path"].encode("latin-1") == target  # the query is never written
    assert (fields["method"], fields["status"], fields["outcome"]) == ("GET", "200", "ok")


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_one_access_log_line_per_request(
    tls: TLSFiles, tmp_path: Path, log_format: str
) -> None:
    path = tmp_path / "access.log"
    async with (
        scripted(tls, model) as upstream,
        running_proxy(upstream.url, tls, access_log=str(path), log_format=log_format) as proxy,
        aiohttp.ClientSession() as client,
    ):
        began = time.time()
        async with client.post(
            f"{proxy.url}/v1/chat?api-key={SECRET}",
            data=b"hello world",
            headers={"Authorization": f"Bearer {SECRET}", "X-Note": SECRET},
        ) as resp:
            assert await resp.read() == b"hello"
        async with client.get(f"{proxy.url}/reset?{SECRET}") as resp:
            assert resp.status == 502
    # Stopped: every line is written.
    text = path.read_text()
    assert SECRET not in text and "api-key" not in text and "Bearer" not in text
    assert "hello" not in text  # no body either
    lines = text.splitlines()
    assert len(lines) == 2, lines
    if log_format == "json":
        ok, failed = (json.loads(line) for line in lines)
    else:
        ok, failed = (parse_text_line(line) for line in lines)
    assert ok["instance"] == "127.0.0.1"
    assert (ok["method"], ok["path"], ok["outcome"]) == ("POST", "/v1/chat", "ok")
    assert str(ok["status"]) == "200"
    assert (int(ok["request_bytes"]), int(ok["response_bytes"])) == (11, 5)
    assert int(ok["conn"]) == 1 and int(ok["stream"]) == 1 and int(ok["replays"]) == 0
    assert float(ok["duration"]) >= float(ok["time_to_headers"]) >= THINK
    stamp = ok["time"]
    assert stamp[:4].isdigit() and stamp[10] == "T", stamp  # ISO 8601, local time
    assert (failed["method"], failed["path"], failed["outcome"]) == ("GET", "/reset", "failed")
    assert str(failed["status"]) == "502"
    assert int(failed["response_bytes"]) > 0  # h2ping's own one-line error body
    empty = None if log_format == "json" else "-"
    assert failed["time_to_headers"] == empty
    assert time.time() - began < 30


async def test_access_log_on_stderr(tls: TLSFiles, capfd: pytest.CaptureFixture[str]) -> None:
    async with (
        scripted(tls, model) as upstream,
        running_proxy(upstream.url, tls, access_log="-", log_format="json") as proxy,
        aiohttp.ClientSession() as client,
    ):
        async with client.get(f"{proxy.url}/v1/models?{SECRET}") as resp:
            await resp.read()
    err = capfd.readouterr().err
    [line] = [json.loads(line) for line in err.splitlines() if '"outcome"' in line]
    assert line["path"] == "/v1/models" and line["status"] == 200
    assert SECRET not in err


def entry(n: int) -> Entry:
    return (time.time(), b"GET", b"/x", 200, 0, 5, 0.01, 0.005, 1, 2 * n + 1, 0, "ok")


async def test_a_stuck_disk_drops_and_counts_lines_without_blocking(tmp_path: Path) -> None:
    """A FIFO that nobody drains stands for a disk that stopped: the writer blocks in
    write(), the queue fills, and the lines after it are dropped and counted while
    the event loop carries on."""
    fifo = tmp_path / "stuck"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets the writer open it
    stats = Stats()
    access_log = AccessLog(str(fifo), "text", "test", stats)
    access_log.open()
    try:
        total = QUEUE_LINES * 2
        started = time.monotonic()
        for n in range(total):
            access_log.write(entry(n))
        assert time.monotonic() - started < 5  # never waited for the writer
        assert stats.access_log_dropped > 0
        assert stats.access_log_dropped <= total - QUEUE_LINES  # the queue is bounded
        written = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the disk recovers: the queued lines arrive
            await asyncio.sleep(0.05)
            try:
                chunk = os.read(reader, 1 << 20)
            except BlockingIOError:
                chunk = b""
            written += chunk.count(b"\n")
            if not chunk and written + stats.access_log_dropped >= total:
                break
        assert written + stats.access_log_dropped == total
    finally:
        await access_log.close()
        os.close(reader)


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_sighup_reopens_the_access_log(tls: TLSFiles, tmp_path: Path, workers: str) -> None:
    """Log rotation: rename the file, send SIGHUP, and the next lines go to a new file
    (with -workers, whichever worker serves them)."""
    port = free_port()
    ready, path = tmp_path / "p.ready", tmp_path / "access.log"
    async with scripted(tls, model) as upstream:
        launched = await launch(
            [H2PING_SIDECAR, "-listen", f"127.0.0.1:{port}", "-upstream", upstream.url,
             "-ca-file", tls.ca_file, "-ready-file", ready, "-access-log", path,
             "-workers", workers],
            log=tmp_path / "p.log", ready_file=ready,
        )  # fmt: skip
        try:
            for name in ("/before", "/after"):
                for _ in range(6):  # on new client connections: the workers take turns
                    async with aiohttp.ClientSession() as one:
                        async with one.get(f"http://127.0.0.1:{port}{name}") as resp:
                            assert resp.status == 200
                line = f' "{name}" '
                await wait_until(lambda line=line: path.read_text().count(line) == 6)
                if name == "/before":
                    path.rename(tmp_path / "access.log.1")
                    launched.proc.send_signal(signal.SIGHUP)
                    await asyncio.sleep(0.3)
            assert launched.proc.poll() is None, "SIGHUP ended the process"
            assert await launched.terminate() == 0
        finally:
            launched.kill()
    rotated, fresh = (tmp_path / "access.log.1").read_text(), path.read_text()
    assert rotated.count(' "/before" ') == 6 and ' "/after" ' not in rotated
    assert fresh.count(' "/after" ') == 6 and ' "/before" ' not in fresh


def test_an_access_log_that_cannot_be_opened_stops_the_start(tmp_path: Path) -> None:
    import subprocess
    import sys

    missing = tmp_path / "no-such-dir" / "access.log"
    done = subprocess.run(
        [sys.executable, "-m", "h2ping", "-listen", "127.0.0.1:0",
         "-upstream", "https://127.0.0.1:9", "-access-log", str(missing)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert f"cannot open -access-log {missing}: no such file or directory" in done.stderr


async def test_userinfo_and_fragments_never_reach_a_log_line(
    tls: TLSFiles, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An absolute-form target may carry ``user:password@``, any target a
    ``#fragment``: neither is logged, in the access log or the proxy's own lines
    (a 502 names its request)."""
    caplog.set_level(logging.INFO, logger="h2ping")
    path = tmp_path / "access.log"
    targets = [
        b"http://alice:" + SECRET.encode() + b"@upstream.example/v1/a#" + SECRET.encode(),
        b"/reset/b#" + SECRET.encode(),
        b"https://" + SECRET.encode() + b"@upstream.example?x=" + SECRET.encode(),
    ]
    async with (
        scripted(tls, model) as upstream,
        running_proxy(upstream.url, tls, access_log=str(path)) as proxy,
    ):
        for target in targets:
            raw = await send_raw(
                proxy.port, b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % target
            )
            assert raw.startswith((b"HTTP/1.1 200 ", b"HTTP/1.1 502 ")), raw[:40]
    lines = path.read_text().splitlines()
    assert [parse_text_line(line)["path"] for line in lines] == [
        "http://upstream.example/v1/a",
        "/reset/b",
        "https://upstream.example",
    ]
    assert "alice" not in caplog.text and SECRET not in caplog.text
    assert "GET /reset/b conn=1" in caplog.text  # the 502's line names its request
