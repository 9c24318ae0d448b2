"""PINGs keep silent requests alive through an idle-cutting middlebox, and a
vanished peer is found within ping-interval + ping-timeout.

Time is scaled down: the middlebox cuts after 1.5 s without application bytes
(340 s in production), h2ping pings after 0.3 s of silence (60 s).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from h2ping.testing import BlackholeRelay, IdleCutRelay, Relay, ScriptedRequest, ScriptedUpstream

from ..conftest import TLSFiles, running_proxy

CUT = 1.5
PING = 0.3


@asynccontextmanager
async def behind(
    relay_type: type[Relay], upstream: ScriptedUpstream, **options: object
) -> AsyncIterator[Relay]:
    async with relay_type("127.0.0.1", upstream.port, **options) as relay:  # type: ignore[arg-type]
        yield relay


def silent_handler(delay: float):
    async def handler(request: ScriptedRequest) -> None:
        body = await request.body()
        await asyncio.sleep(delay)  # nothing at all on the wire meanwhile
        await request.respond(200, body=b"answer:" + body)

    return handler


@pytest.mark.parametrize("ping_interval", [PING, 0.0], ids=["pings-on", "pings-off"])
async def test_long_silent_request_survives_idle_cut(
    tls: TLSFiles, session: aiohttp.ClientSession, ping_interval: float
) -> None:
    """The reason h2ping exists. With pings off the same request must die: that
    proves the relay really cuts and the first case means something."""
    async with (
        ScriptedUpstream(silent_handler(3 * CUT), ssl_context=tls.server_context()) as up,
        behind(IdleCutRelay, up, idle_cut=CUT) as relay,
        running_proxy(
            f"https://127.0.0.1:{relay.port}", tls, ping_interval=ping_interval, ping_timeout=1.0
        ) as proxy,
    ):
        async with session.post(proxy.url + "/judge", data=b"q") as resp:
            body = await resp.read()
            status = resp.status
            proxy_status = resp.headers.get("proxy-status", "")
    if ping_interval:
        assert (status, body) == (200, b"answer:q")
        assert relay.flows_cut == 0
        assert proxy.stats.pings_sent >= 3 * CUT / PING - 3
        assert proxy.stats.ping_acks >= proxy.stats.pings_sent - 1
        assert proxy.stats.last_ping_rtt is not None
    else:
        assert status == 502
        assert "connection_terminated" in proxy_status
        assert relay.flows_cut == 1
        assert proxy.stats.pings_sent == 0


async def test_200_silent_requests_over_several_connections(tls: TLSFiles) -> None:
    async with (
        ScriptedUpstream(
            silent_handler(3 * CUT), ssl_context=tls.server_context(), max_concurrent_streams=50
        ) as up,
        behind(IdleCutRelay, up, idle_cut=CUT) as relay,
        running_proxy(f"https://127.0.0.1:{relay.port}", tls, ping_interval=PING) as proxy,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        responses = await asyncio.gather(
            *(session.post(proxy.url + "/j", data=b"%d" % i) for i in range(200))
        )
        bodies = [await r.read() for r in responses]
        assert [r.status for r in responses] == [200] * 200
        assert bodies == [b"answer:%d" % i for i in range(200)]
        assert len(up.connections) >= 4  # 50 streams each
        assert relay.flows_cut == 0
        # PINGs scale with connections, not requests.
        pings_per_connection = proxy.stats.pings_sent / len(up.connections)
        assert pings_per_connection <= 3 * CUT / PING + 2


async def test_vanished_peer_fails_fast_and_next_request_succeeds(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    timeout = 1.0

    async def handler(request: ScriptedRequest) -> None:
        await request.body()
        if request.path == "/first":
            await asyncio.sleep(60)  # would hang for a minute without detection
        await request.respond(200, body=b"fresh")

    async with (
        ScriptedUpstream(handler, ssl_context=tls.server_context()) as up,
        behind(BlackholeRelay, up) as relay,
        running_proxy(
            f"https://127.0.0.1:{relay.port}", tls, ping_interval=PING, ping_timeout=timeout
        ) as proxy,
    ):
        loop = asyncio.get_running_loop()
        call = asyncio.create_task(session.get(proxy.url + "/first"))
        await up.wait_for(lambda: len(up.requests) == 1)
        assert isinstance(relay, BlackholeRelay)
        assert relay.blackhole() == 1
        started = loop.time()
        resp = await asyncio.wait_for(call, 10)
        elapsed = loop.time() - started
        assert resp.status == 502
        assert "dead" in await resp.text()
        assert "connection_terminated" in resp.headers["proxy-status"]
        assert elapsed <= PING + timeout + 1.0
        assert proxy.stats.ping_timeouts == 1

        async with session.get(proxy.url + "/second") as again:
            assert again.status == 200
            assert await again.read() == b"fresh"
        assert relay.flows_accepted == 2


async def test_ping_ack_behind_megabytes_of_data_does_not_kill(tls: TLSFiles) -> None:
    """The upstream's PING ACK sits behind MiBs of DATA on a throttled path, far
    longer than ping-timeout. Frames keep arriving, so the connection is alive:
    the Go transport would kill it here and fail every request on it."""
    size = 3 * 1024 * 1024
    throttle = 1024 * 1024  # bytes/s: the ACK waits about 3 s behind the DATA

    async def handler(request: ScriptedRequest) -> None:
        await request.body()
        if request.path == "/big":
            await request.respond(200, body=b"d" * size)
        else:
            await asyncio.sleep(2.5)
            await request.respond(200, body=b"slow-ok")

    async with (
        ScriptedUpstream(handler, ssl_context=tls.server_context()) as up,
        behind(Relay, up, throttle=throttle) as relay,
        running_proxy(
            f"https://127.0.0.1:{relay.port}", tls, ping_interval=PING, ping_timeout=0.5
        ) as proxy,
        aiohttp.ClientSession() as session,
    ):
        # The slow request first, so pings are due while the big body streams in.
        slow = asyncio.create_task(session.get(proxy.url + "/slow"))
        await up.wait_for(lambda: len(up.requests) == 1)
        await asyncio.sleep(PING * 2)
        # Hold the next ACKs at the server too: only DATA arrives for a while.
        conn = up.connections[0]
        conn.hold_ping_acks = True
        async with session.get(proxy.url + "/big") as resp:
            assert len(await resp.read()) == size
        conn.hold_ping_acks = False
        slow_resp = await asyncio.wait_for(slow, 10)
        assert slow_resp.status == 200
        assert await slow_resp.read() == b"slow-ok"
        assert proxy.stats.ping_timeouts == 0
        assert len(up.connections) == 1 and not conn.closed
        assert proxy.stats.pings_sent >= 1


async def test_no_pings_while_frames_keep_arriving(tls: TLSFiles) -> None:
    interval = 0.6  # five times the gap between frames: robust on a loaded machine

    async def handler(request: ScriptedRequest) -> None:
        await request.body()
        await request.send_headers(200)
        for _ in range(20):  # a frame every 0.1 s for 2 s: never `interval` of silence
            await request.send_data(b"tick\n")
            await asyncio.sleep(0.1)
        await request.end()

    async with (
        ScriptedUpstream(handler, ssl_context=tls.server_context()) as up,
        running_proxy(up.url, tls, ping_interval=interval) as proxy,
        aiohttp.ClientSession() as session,
    ):
        async with session.get(proxy.url + "/stream") as resp:
            assert await resp.read() == b"tick\n" * 20
        assert proxy.stats.pings_sent == 0
        # Only the preface's PING, which measures the round trip (a trickle of
        # frames is too little for the receive windows to measure more).
        assert up.connections[0].pings_received == proxy.stats.window_pings == 1
        # Then silence: the idle pooled connection is pinged, so it stays usable.
        await asyncio.sleep(3.5 * interval)
        assert proxy.stats.pings_sent >= 2
        assert up.connections[0].pings_received == proxy.stats.pings_sent + 1


async def test_tcp_keepalive_on_both_sides(tls: TLSFiles, session: aiohttp.ClientSession) -> None:
    async with (
        ScriptedUpstream(silent_handler(0), ssl_context=tls.server_context()) as up,
        running_proxy(up.url, tls) as proxy,
    ):
        async with session.post(proxy.url + "/k", data=b"x") as resp:
            assert resp.status == 200
            (client,) = proxy.clients
            assert proxy.pool is not None
            (conn,) = proxy.pool.connections
            sockets = [
                client._transport.get_extra_info("socket"),  # type: ignore[union-attr]
                conn._transport.get_extra_info("socket"),  # type: ignore[union-attr]
            ]
            for sock in sockets:
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                if hasattr(socket, "TCP_KEEPIDLE"):
                    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 60
                    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 10
                    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
