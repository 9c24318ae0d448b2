"""-max-streams-per-conn: one upstream connection carries at most N streams, so its
death fails at most N requests; more connections are opened instead."""

from __future__ import annotations

import asyncio
import collections

import aiohttp

from h2ping.testing import ScriptedRequest

from ..conftest import TLSFiles, running_proxy, scripted, wait_until

REQUESTS = 100
CAP = 8


async def test_a_capped_pool_spreads_streams_and_a_dead_connection_fails_few(
    tls: TLSFiles,
) -> None:
    release = asyncio.Event()

    async def slow(request: ScriptedRequest) -> None:
        await request.body()
        await release.wait()  # a long model call: every stream stays open meanwhile
        await request.respond(200, [("content-length", "2")], b"ok")

    async with (
        scripted(tls, slow, max_concurrent_streams=100) as upstream,
        running_proxy(upstream.url, tls, max_streams_per_conn=CAP) as proxy,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client,
    ):

        async def call(i: int) -> int:
            async with client.get(f"{proxy.url}/v1/chat/{i}") as resp:
                await resp.read()
                return resp.status

        calls = [asyncio.create_task(call(i)) for i in range(REQUESTS)]
        await upstream.wait_for(lambda: len(upstream.requests) == REQUESTS, timeout=30)
        per_conn = collections.Counter(r.connection.id for r in upstream.requests)
        assert len(upstream.connections) >= -(-REQUESTS // CAP)  # 13
        assert max(per_conn.values()) <= CAP, per_conn
        victim = upstream.connections[0]
        on_victim = per_conn[victim.id]
        victim.close()  # a connection dies with its streams (TCP reset, no GOAWAY)
        # Its requests are answered (502) while every other one is still held.
        await wait_until(lambda: sum(call.done() for call in calls) == on_victim)
        release.set()
        statuses = collections.Counter(await asyncio.gather(*calls))
        assert statuses[502] == on_victim <= CAP, statuses
        assert statuses[200] == REQUESTS - on_victim


def test_the_cap_is_a_setting() -> None:
    from h2ping.flags import SettingError, parse_args

    assert parse_args(["-upstream", "https://h"]).max_streams_per_conn == 0
    config = parse_args(["-upstream", "https://h", "-max-streams-per-conn=8"])
    assert config.max_streams_per_conn == 8
    env = {"H2PING_MAX_STREAMS_PER_CONN": "16"}
    assert parse_args(["--upstream", "https://h"], env).max_streams_per_conn == 16
    try:
        parse_args(["-upstream", "https://h", "-max-streams-per-conn", "-1"])
    except SettingError as exc:
        assert str(exc).startswith("-max-streams-per-conn: must be between 0 and")
    else:
        raise AssertionError("a negative cap was taken")
