"""A server that punishes PINGs (GOAWAY ENHANCE_YOUR_CALM, ``too_many_pings``, as
gRPC servers send): h2ping warns, replays what the server did not process, and
PINGs half as often on its next connections, never above 300 s."""

from __future__ import annotations

import asyncio
import itertools
import logging

import aiohttp
import pytest
from h2.errors import ErrorCodes

from h2ping.http2.pingbackoff import MAX_INTERVAL, PingBackoff, punishes_pings
from h2ping.stats import Stats
from h2ping.testing import ScriptedConnection, ScriptedRequest

from ..conftest import TLSFiles, running_proxy, scrape_metrics, scripted, wait_until

INTERVAL = 0.2


def spacings(conn: ScriptedConnection) -> list[float]:
    return [later - earlier for earlier, later in itertools.pairwise(conn.ping_times)]


@pytest.mark.parametrize(
    ("code", "debug", "backs_off"),
    [
        (ErrorCodes.ENHANCE_YOUR_CALM, b"too_many_pings", True),
        # Any other GOAWAY leaves the interval alone (the same test, the feature off).
        (ErrorCodes.ENHANCE_YOUR_CALM, b"", False),
        (ErrorCodes.NO_ERROR, b"too_many_pings", False),
    ],
)
async def test_too_many_pings_doubles_the_interval_of_the_next_connection(
    tls: TLSFiles, caplog: pytest.LogCaptureFixture, code: int, debug: bytes, backs_off: bool
) -> None:
    caplog.set_level(logging.INFO, logger="h2ping")

    async def think(request: ScriptedRequest) -> None:
        await request.body()
        await asyncio.sleep(2.5)  # silent: h2ping PINGs meanwhile
        await request.respond(200, [("content-length", "2")], b"ok")

    async with (
        scripted(tls, think) as upstream,
        running_proxy(
            upstream.url, tls, ping_interval=INTERVAL, ping_timeout=10.0,
            admin_listen="127.0.0.1:0",
        ) as proxy,
        aiohttp.ClientSession() as client,
    ):  # fmt: skip
        call = asyncio.create_task(client.get(f"{proxy.url}/v1/judge"))
        await upstream.wait_for(lambda: bool(upstream.connections), timeout=10)
        first = upstream.connections[0]
        await upstream.wait_for(lambda: first.pings_received >= 2, timeout=10)
        # After its second PING the server has had enough, as grpc-go does: it
        # processed no stream (last_stream_id 0) and ends the connection.
        first.goaway(0, code, debug)
        await wait_until(lambda: proxy.stats.goaways == 1)  # read before the close
        first.close()
        await upstream.wait_for(lambda: len(upstream.connections) >= 2, timeout=10)
        second = upstream.connections[1]
        await upstream.wait_for(lambda: second.pings_received >= 4, timeout=10)
        async with await call as resp:  # replayed on the second connection
            assert resp.status == 200 and await resp.read() == b"ok"
        assert proxy.admin is not None
        metrics = await scrape_metrics(client, f"http://127.0.0.1:{proxy.admin.port}/metrics")
    assert metrics[("h2ping_replays_total", "")] == 1
    gaps = spacings(second)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    if backs_off:
        assert min(gaps) >= 2 * INTERVAL * 0.95, gaps
        assert metrics[("h2ping_too_many_pings_total", "")] == 1
        [warning] = warnings
        message = warning.getMessage()
        assert "too_many_pings" in message and "PING policy" in message, message
        assert f"after {2 * INTERVAL:g}s of silence (was {INTERVAL:g}s)" in message
    else:
        assert min(gaps) < 2 * INTERVAL * 0.9, gaps
        assert metrics[("h2ping_too_many_pings_total", "")] == 0
        assert warnings == []


def test_the_back_off_doubles_stays_under_300s_and_never_below_the_setting() -> None:
    stats = Stats()
    backoff = PingBackoff(60.0, stats)
    backoff.punished(1, 60.0)
    assert backoff.interval == 120.0
    backoff.punished(2, 60.0)  # opened before the first back-off: no second doubling
    assert backoff.interval == 120.0
    backoff.punished(3, 120.0)
    assert backoff.interval == 240.0
    backoff.punished(4, 240.0)
    assert backoff.interval == MAX_INTERVAL == 300.0
    backoff.punished(5, 300.0)
    assert backoff.interval == 300.0
    assert stats.too_many_pings == 5  # every such GOAWAY is counted
    slow = PingBackoff(320.0, Stats())  # a setting above the ceiling stays as it is
    slow.punished(1, 320.0)
    assert slow.interval == 320.0
    off = PingBackoff(0.0, Stats())  # no PINGs configured: nothing to stretch
    off.punished(1, 0.0)
    assert off.interval == 0.0


def test_which_goaway_punishes_pings() -> None:
    assert punishes_pings(ErrorCodes.ENHANCE_YOUR_CALM, b"too_many_pings")
    assert not punishes_pings(ErrorCodes.ENHANCE_YOUR_CALM, b"")
    assert not punishes_pings(ErrorCodes.NO_ERROR, b"too_many_pings")
