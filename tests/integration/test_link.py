"""Across a long link (a DelayLink of 100 ms round trip before a TLS upstream): the
command's first request finds a connection already open, and at max-conn-age no
request waits for a new connection's handshakes. Each fails without its feature."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from h2ping.testing import DelayLink, ScriptedUpstream

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
