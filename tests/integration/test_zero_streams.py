"""A server that allows no streams (SETTINGS_MAX_CONCURRENT_STREAMS 0, as one may
send while it sheds load): each new connection is as full as the last, so h2ping
counts it as full instead of dialling another at once. Requests wait for the
next connection, a back-off later, and get a 502 that says so when it allows none
either: a handful of connections a second at most, the ones that took nothing
closed again."""

from __future__ import annotations

import asyncio

import aiohttp

from h2ping.testing import ScriptedUpstream

from ..conftest import running_proxy

#: Requests sent together, in waves one after another.
WAVES, WAVE = 3, 10


async def test_requests_get_502_and_connections_stay_few(
    session: aiohttp.ClientSession,
) -> None:
    async with (
        ScriptedUpstream(max_concurrent_streams=0) as up,
        running_proxy(up.url) as proxy,
    ):

        async def one() -> None:
            async with session.get(
                proxy.url + "/x", timeout=aiohttp.ClientTimeout(total=15)
            ) as resp:
                assert resp.status == 502
                status = resp.headers["proxy-status"]
                assert "error=destination_unavailable" in status
                assert "upstream allows no streams" in status
                assert "SETTINGS_MAX_CONCURRENT_STREAMS 0" in status

        # Each wave waits for the next connection (0.5 s, then 1 s, 2 s after the
        # last), which allows none either: one connection a wave, not thousands.
        for _ in range(WAVES):
            await asyncio.gather(*(one() for _ in range(WAVE)))
        assert len(up.connections) <= WAVES + 1, len(up.connections)
        assert proxy.pool is not None
        assert len(proxy.pool.connections) <= 2  # the older ones that took nothing closed
        assert proxy.stats.connections_opened == len(up.connections)
        # Readiness says why at once, and dials nothing to say it.
        dialled = len(up.connections)
        reason = await proxy.readiness(0.9)
        assert reason is not None and "upstream allows no streams" in reason
        assert len(up.connections) == dialled
