"""A server that allows no streams (SETTINGS_MAX_CONCURRENT_STREAMS 0, as one may
send while it sheds load): each new connection is as full as the last, so h2ping
counts it as full instead of dialling another at once. Requests get a 502 that
says so, a handful of connections a second at most are opened, and the ones that
took nothing are closed again."""

from __future__ import annotations

import asyncio

import aiohttp

from h2ping.testing import ScriptedUpstream

from ..conftest import running_proxy

#: Requests sent one after another over about this long.
SPELL = 1.5


async def test_requests_get_502_and_connections_stay_few(
    session: aiohttp.ClientSession,
) -> None:
    async with (
        ScriptedUpstream(max_concurrent_streams=0) as up,
        running_proxy(up.url) as proxy,
    ):
        loop = asyncio.get_running_loop()
        started = loop.time()
        answers = 0
        while loop.time() - started < SPELL:
            async with session.get(
                proxy.url + "/x", timeout=aiohttp.ClientTimeout(total=5)
            ) as resp:
                assert resp.status == 502
                status = resp.headers["proxy-status"]
                assert "error=destination_unavailable" in status
                assert "upstream allows no streams" in status
                assert "SETTINGS_MAX_CONCURRENT_STREAMS 0" in status
            answers += 1
            await asyncio.sleep(0.02)
        assert answers > 20
        # A new connection after 0.5 s, 1 s, 2 s...: a handful, not thousands.
        assert len(up.connections) <= 4, len(up.connections)
        assert proxy.pool is not None
        assert len(proxy.pool.connections) <= 2  # the older ones that took nothing closed
        assert proxy.stats.connections_opened == len(up.connections)
        # Readiness says why, and dials nothing more to say it.
        dialled = len(up.connections)
        reason = await proxy.readiness(0.9)
        assert reason is not None and "upstream allows no streams" in reason
        assert len(up.connections) == dialled
