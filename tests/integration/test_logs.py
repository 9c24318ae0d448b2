"""--log-format json: one JSON object per line, with the facts of the text line."""

from __future__ import annotations

import asyncio
import json
import logging
import operator
import re
import signal
import sys

import aiohttp
import pytest
from h2.errors import ErrorCodes

from h2ping.logs import JsonFormatter, plural, text_formatter
from h2ping.process import cli
from h2ping.process.descriptors import DescriptorWatch
from h2ping.stats import Stats
from h2ping.testing import ScriptedRequest, ScriptedUpstream

from ..conftest import free_port, running_proxy, wait_for_port, wait_until


def record(
    msg: str, *args: object, level: int = logging.WARNING, **extra: object
) -> logging.LogRecord:
    rec = logging.LogRecord("h2ping.upstream", level, __file__, 1, msg, args, None)
    rec.__dict__.update(extra)
    return rec


def test_json_has_the_text_lines_facts() -> None:
    rec = record("conn=%d dead: nothing received for %.1fs", 7, 16.0)
    text = text_formatter("genrm").format(rec)
    obj = json.loads(JsonFormatter("genrm").format(rec))
    # text: "<time> WARNING h2ping genrm: conn=7 dead: nothing received for 16.0s"
    assert text.endswith(f" {obj['level']} h2ping {obj['instance']}: {obj['event']}")
    assert obj["event"] == "conn=7 dead: nothing received for 16.0s"
    assert obj["conn"] == 7
    assert "stream" not in obj and "cause" not in obj
    assert obj["time"][:4].isdigit() and "T" in obj["time"]


def test_json_fields_from_extras_win_and_zero_conn_means_none() -> None:
    rec = record("GET /x conn=3: 502 %s", "boom", conn=4, stream=9, cause="connection_refused")
    obj = json.loads(JsonFormatter("n").format(rec))
    assert (obj["conn"], obj["stream"], obj["cause"]) == (4, 9, "connection_refused")
    # Connection ids start at 1; exchanges write conn=0 when no connection was reached.
    assert "conn" not in json.loads(JsonFormatter("n").format(record("GET /x conn=0: 502")))


def test_json_stays_on_one_line_with_a_traceback() -> None:
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        rec = record("internal error on\ntwo lines", level=logging.ERROR)
        rec.exc_info = sys.exc_info()
    line = JsonFormatter("n").format(rec)
    assert "\n" not in line
    obj = json.loads(line)
    assert obj["event"] == "internal error on\ntwo lines"
    assert obj["exc"].startswith("Traceback") and "ValueError: bad" in obj["exc"]


def test_text_format_survives_a_percent_in_the_name() -> None:
    assert text_formatter("100%").format(record("hi")).endswith(" WARNING h2ping 100%: hi")


def warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_failed_connect_is_one_line_with_request_conn_and_cause(
    session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="h2ping")
    async with running_proxy(f"http://127.0.0.1:{free_port()}") as proxy:
        async with session.get(f"{proxy.url}/v1/chat?key=secret") as resp:
            assert resp.status == 502
    [line] = warnings(caplog)
    assert line.getMessage().startswith("GET /v1/chat conn=1: 502 connection_refused: ")
    obj = json.loads(JsonFormatter("n").format(line))
    assert (obj["conn"], obj["cause"]) == (1, "connection_refused")


async def test_a_failed_stream_is_one_line_with_request_conn_stream_and_cause(
    session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    async def reset(request: ScriptedRequest) -> None:
        request.reset(ErrorCodes.INTERNAL_ERROR)

    caplog.set_level(logging.INFO, logger="h2ping")
    async with ScriptedUpstream(reset) as up, running_proxy(up.url) as proxy:
        async with session.post(f"{proxy.url}/judge", data=b"x") as resp:
            assert resp.status == 502
    [line] = warnings(caplog)
    text = text_formatter("n").format(line)
    assert text.endswith(
        " WARNING h2ping n: POST /judge conn=1 stream=1: 502 http_protocol_error: "
        "stream reset by upstream (INTERNAL_ERROR)"
    )
    obj = json.loads(JsonFormatter("n").format(line))
    assert (obj["conn"], obj["stream"], obj["cause"]) == (1, 1, "http_protocol_error")


def test_plural() -> None:
    assert [plural(n, "request") for n in (0, 1, 2)] == ["0 requests", "1 request", "2 requests"]


async def test_process_logs_json_lines(session: aiohttp.ClientSession) -> None:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "h2ping",
        "-listen", f"127.0.0.1:{port}",
        "-upstream", f"https://127.0.0.1:{free_port()}",
        "-log-format", "json", "-name", "judge",
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await wait_for_port(port, timeout=15)
        async with session.get(f"http://127.0.0.1:{port}/v1/models") as resp:
            assert resp.status == 502
        proc.send_signal(signal.SIGINT)
        _, stderr = await asyncio.wait_for(proc.communicate(), 15)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0
    lines = [json.loads(line) for line in stderr.decode().splitlines()]
    for obj in lines:
        assert {"time", "level", "instance", "event"} <= obj.keys(), obj
        assert obj["instance"] == "judge"
    events = [obj["event"] for obj in lines]
    assert events[0].startswith(f"listening on 127.0.0.1:{port} -> https://127.0.0.1:")
    assert events[-1].startswith("stopped: requests=1 completed=0 failed=1")
    # The dial at start is told once; each failed request is one line of its own,
    # naming the connection and the cause.
    start, failed = [obj for obj in lines if obj["level"] == "WARNING"]
    assert "cannot be reached at start: nothing accepts connections there" in start["event"]
    # conn=1 when the request came while the dial at start was still under way.
    said = re.match(r"GET /v1/models conn=([12]): 502 connection_refused: ", failed["event"])
    assert said is not None, failed["event"]
    assert (failed["conn"], failed["cause"]) == (int(said[1]), "connection_refused")


async def test_event_loop_errors_are_logged_in_our_format(caplog: pytest.LogCaptureFixture) -> None:
    """An exception in a loop callback is reported through the h2ping logger (so it is
    a JSON line with --log-format json), not by asyncio's own handler."""
    caplog.set_level(logging.ERROR, logger="h2ping")
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(cli._loop_exception_handler(DescriptorWatch(Stats())))
    try:
        loop.call_soon(operator.truediv, 1, 0)
        await wait_until(lambda: any(r.name == "h2ping" for r in caplog.records))
    finally:
        loop.set_exception_handler(None)
    [rec] = [r for r in caplog.records if r.name == "h2ping"]
    assert rec.getMessage().startswith("unhandled error in the event loop: ")
    assert rec.exc_info is not None and rec.exc_info[0] is ZeroDivisionError


async def test_asyncios_late_accept_retry_after_the_listener_closed_is_not_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Out of descriptors, asyncio's loop listens again a second after each failed
    accept; one that comes after shutdown closed the listener fails on its closed
    socket. That is no error of the proxy's; any other ValueError still is."""

    class Loop:
        def _start_serving(self) -> None:
            raise ValueError("Invalid file descriptor: -1")

        def _other(self) -> None:
            raise ValueError("Invalid file descriptor: -1")

    caplog.set_level(logging.DEBUG, logger="h2ping")
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(cli._loop_exception_handler(DescriptorWatch(Stats())))
    try:
        loop.call_soon(Loop()._start_serving)
        loop.call_soon(Loop()._other)
        await wait_until(lambda: any("_other" in r.getMessage() for r in caplog.records))
    finally:
        loop.set_exception_handler(None)
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "_other" in errors[0].getMessage()
    assert any("retry of accept" in r.getMessage() for r in caplog.records)
