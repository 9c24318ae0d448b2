"""Across a long link (a DelayLink of 100 ms round trip before a TLS upstream): the
command's first request finds a connection already open, at max-conn-age no
request waits for a new connection's handshakes, and the receive windows fit the
link. Each fails without its feature."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from h2ping.http2.windows import ASSUMED_RATE, UNMEASURED_WINDOW
from h2ping.testing import DelayLink, ScriptedRequest, ScriptedUpstream

from ..conftest import TLSFiles, free_port, running_proxy
from ..launcher import launch

RTT = 0.1
#: Scheduling and TLS work on a busy machine, on top of the round trip counted; a new
#: connection's handshakes and request (three round trips, 300 ms) are well past it.
MARGIN = 0.1


async def timed_get(session: aiohttp.ClientSession, url: str) -> float:
    started = time.monotonic()
    async with session.get(url) as resp:
        assert resp.status == 200
        await resp.read()
    return time.monotonic() - started


@pytest.mark.one_loop  # the command's loop is its own
async def test_the_first_request_after_start_takes_one_round_trip(
    tls: TLSFiles, tmp_path: Path
) -> None:
    """TLS, the SETTINGS and the request would take three round trips; the command
    dials as it starts, so a request a moment after the ready file takes one."""
    async with ScriptedUpstream(ssl_context=tls.server_context()) as upstream:
        async with DelayLink("127.0.0.1", upstream.port, rtt=RTT) as link:
            port, ready = free_port(), tmp_path / "ready"
            command = [
                sys.executable, "-m", "h2ping", "-listen", f"127.0.0.1:{port}",
                "-upstream", f"https://127.0.0.1:{link.port}", "-ca-file", tls.ca_file,
                "-ready-file", str(ready),
            ]  # fmt: skip
            proxy = await launch(command, log=tmp_path / "log", ready_file=ready)
            try:
                await upstream.wait_for(lambda: len(upstream.connections) == 1)
                async with aiohttp.ClientSession() as session:
                    took = await timed_get(session, f"http://127.0.0.1:{port}/x")
            finally:
                assert await proxy.terminate() == 0
    assert took < RTT + MARGIN, f"{took * 1000:.0f} ms: more than one round trip"


async def test_a_cold_request_goes_right_behind_the_preface(tls: TLSFiles) -> None:
    """No connection open (the in-process proxy dials on demand): TLS takes a round
    trip, and the request leaves with the preface instead of after the server's
    SETTINGS, which come a round trip later: two round trips, not three."""
    async with ScriptedUpstream(ssl_context=tls.server_context()) as upstream:
        async with DelayLink("127.0.0.1", upstream.port, rtt=RTT) as link:
            url = f"https://127.0.0.1:{link.port}"
            async with (
                running_proxy(url, tls) as proxy,
                aiohttp.ClientSession() as session,
            ):
                took = await timed_get(session, proxy.url + "/x")
                assert proxy.stats.connections_opened == 1
    assert took < 2 * RTT + MARGIN, f"{took * 1000:.0f} ms: more than two round trips"


async def test_no_request_waits_for_a_handshake_at_rotation(tls: TLSFiles) -> None:
    """Requests half a second apart, each a round trip: most connections reach
    their age idle, between two requests, and the next request still takes one
    round trip, not the three of a new connection's handshakes."""
    async with ScriptedUpstream(ssl_context=tls.server_context()) as upstream:
        async with DelayLink("127.0.0.1", upstream.port, rtt=RTT) as link:
            url = f"https://127.0.0.1:{link.port}"
            async with (
                running_proxy(url, tls, max_conn_age=1.0, idle_conn_timeout=0) as proxy,
                aiohttp.ClientSession() as session,
            ):
                await timed_get(session, proxy.url + "/warm")
                times = []
                for _ in range(7):
                    await asyncio.sleep(0.4)
                    times.append(await timed_get(session, proxy.url + "/x"))
                retired = proxy.stats.retired
    assert retired >= 2, retired  # the requests crossed rotations
    assert max(times) < RTT + MARGIN, [round(t * 1000) for t in times]


async def test_the_window_grows_on_a_long_link_and_stays_small_on_a_short_one(
    tls: TLSFiles,
) -> None:
    """A 2 MiB response across the 100 ms link, then one straight on loopback: the
    long link's streams get what 160 MB/s moves in its round trip (16 MB; a fixed
    window would be 4 MiB), the short one's stay under 4 MiB (128 KiB unless
    this machine is slow to answer the preface's PING). Both bodies arrive whole."""
    body = bytes(range(256)) * (8 * 1024)

    async def big(request: ScriptedRequest) -> None:
        await request.respond(body=body)

    sizes = []
    async with ScriptedUpstream(big, ssl_context=tls.server_context()) as upstream:
        async with DelayLink("127.0.0.1", upstream.port, rtt=RTT) as link:
            for url in (f"https://127.0.0.1:{link.port}", upstream.url):
                async with (
                    running_proxy(url, tls) as proxy,
                    aiohttp.ClientSession() as session,
                    session.get(proxy.url + "/big") as resp,
                ):
                    assert await resp.read() == body
                    assert proxy.pool is not None
                    (conn,) = proxy.pool.connections
                    sizes.append(conn.window.size)
    long_link, short_link = sizes
    assert long_link >= 0.9 * RTT * ASSUMED_RATE, sizes
    assert short_link < UNMEASURED_WINDOW, sizes
