"""Worker 1's /metrics and /readyz over the other workers of --workers N: snapshots
that add up, and workers that answer, answer late, stay silent or are gone. The
workers here are proxies in one process, joined by socketpairs as the parent of
--workers joins them; tests/integration/test_workers.py runs the real processes."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import aiohttp

from h2ping import Proxy
from h2ping.process.admin import METRICS_TIMEOUT, READY_TIMEOUT
from h2ping.process.metrics import Snapshot
from h2ping.process.siblings import Links
from h2ping.stats import Stats
from h2ping.testing import ScriptedRequest, ScriptedUpstream

from ..conftest import scrape_metrics, wait_until


def admin_url(proxy: Proxy, path: str) -> str:
    assert proxy.admin is not None
    return f"http://127.0.0.1:{proxy.admin.port}{path}"


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.get(url) as resp:
        return resp.status, await resp.text()


async def timed_scrape(
    session: aiohttp.ClientSession, proxy: Proxy
) -> tuple[dict[tuple[str, str], float], float]:
    started = time.monotonic()
    metrics = await scrape_metrics(session, admin_url(proxy, "/metrics"))
    return metrics, time.monotonic() - started


async def test_workers_that_answer_late_or_never_or_are_gone(
    session: aiohttp.ClientSession,
) -> None:
    """Worker 1 with two others: worker 2 is a proxy that answers; worker 3 is the
    test, silent, then late, then answering, then gone. No scrape waits longer than
    METRICS_TIMEOUT, and workers_reporting says whose numbers are in it."""
    to_2, of_2 = socket.socketpair()
    to_3, of_3 = socket.socketpair()
    async with ScriptedUpstream() as up:
        settings = {"upstream": up.url, "listen": "127.0.0.1:0", "shutdown_grace": 0}
        first = Proxy(name="api/1", admin_listen="127.0.0.1:0", **settings)
        second = Proxy(name="api/2", **settings)
        await second.start(links=Links("api", 3, answer_on=of_2))
        await first.start(links=Links("api", 3, ask={2: to_2, 3: to_3}))
        third, third_writer = await asyncio.open_unix_connection(sock=of_3)
        try:
            for proxy, requests in ((first, 2), (second, 3)):
                for _ in range(requests):
                    async with session.get(f"{proxy.url}/x") as resp:
                        assert resp.status == 200

            metrics, waited = await timed_scrape(session, first)  # worker 3 silent
            assert METRICS_TIMEOUT <= waited < METRICS_TIMEOUT + 1.0, waited
            assert metrics[("h2ping_requests_total", "outcome=ok")] == 2 + 3
            assert metrics[("h2ping_upstream_connections_opened_total", "")] == 2
            assert metrics[("h2ping_upstream_connections", "state=open")] == 2
            assert metrics[("h2ping_retry_buffer_limit_bytes", "")] == 2 * 1024**3
            assert metrics[("h2ping_workers", "")] == 3
            assert metrics[("h2ping_workers_reporting", "")] == 2
            [info] = [labels for name, labels in metrics if name == "h2ping_info"]
            assert "instance=api," in info, info
            status, body = await get(session, admin_url(first, "/readyz"))
            assert (status, body) == (
                503, f"not ready: worker 3 did not answer within {READY_TIMEOUT:g}s\n"
            )  # fmt: skip

            # Worker 3 answers the first scrape's question after that scrape gave up,
            # then the next one's in time: only the second answer counts.
            question = await third.readline()
            assert question.split()[0] == b"metrics", question
            assert (await third.readline()).split()[0] == b"ready"
            late = Snapshot(Stats(completed=100), 0, {}, 0, None).to_json()
            third_writer.write(question.split()[1] + b" " + json.dumps(late).encode() + b"\n")

            async def answer_in_time() -> None:
                ident = (await third.readline()).split()[1]
                snapshot = Snapshot(Stats(completed=1000), 1, {}, 7, None).to_json()
                third_writer.write(ident + b" " + json.dumps(snapshot).encode() + b"\n")

            answering = asyncio.create_task(answer_in_time())
            metrics, waited = await timed_scrape(session, first)
            await answering
            assert waited < METRICS_TIMEOUT, waited
            assert metrics[("h2ping_requests_total", "outcome=ok")] == 2 + 3 + 1000
            assert metrics[("h2ping_requests_in_flight", "")] == 1
            assert metrics[("h2ping_workers_reporting", "")] == 3

            third_writer.close()  # worker 3 exits: from now on no waiting for it
            metrics, waited = await timed_scrape(session, first)
            assert waited < METRICS_TIMEOUT / 2, waited
            assert metrics[("h2ping_workers_reporting", "")] == 2
            assert metrics[("h2ping_requests_total", "outcome=ok")] == 2 + 3
            status, body = await get(session, admin_url(first, "/readyz"))
            assert (status, body) == (503, "not ready: worker 3 is gone (its link is closed)\n")

            await second.stop()
            metrics, waited = await timed_scrape(session, first)
            assert waited < METRICS_TIMEOUT / 2, waited
            assert metrics[("h2ping_workers_reporting", "")] == 1
            assert metrics[("h2ping_requests_total", "outcome=ok")] == 2
        finally:
            third_writer.close()
            await first.stop()
            await second.stop()


async def test_ready_only_when_every_worker_serves(session: aiohttp.ClientSession) -> None:
    release = asyncio.Event()

    async def held(request: ScriptedRequest) -> None:
        await request.body()
        await release.wait()
        await request.respond(200, [("content-length", "2")], b"ok")

    to_2, of_2 = socket.socketpair()
    async with ScriptedUpstream(held) as up:
        settings = {"upstream": up.url, "listen": "127.0.0.1:0", "shutdown_grace": 10}
        first = Proxy(name="api/1", admin_listen="127.0.0.1:0", **settings)
        second = Proxy(name="api/2", **settings)
        await second.start(links=Links("api", 2, answer_on=of_2))
        await first.start(links=Links("api", 2, ask={2: to_2}))
        try:
            assert await get(session, admin_url(first, "/readyz")) == (200, "ready\n")
            # A request held open keeps worker 2 draining, still answering worker 1.
            request = asyncio.create_task(session.get(f"{second.url}/x"))
            await up.wait_for(lambda: len(up.requests) == 1)
            stopping = asyncio.create_task(second.stop())
            await wait_until(lambda: second.not_serving() is not None)
            assert await get(session, admin_url(first, "/readyz")) == (
                503, "not ready: worker 2: draining\n"
            )  # fmt: skip
            metrics = await scrape_metrics(session, admin_url(first, "/metrics"))
            assert metrics[("h2ping_requests_in_flight", "")] == 1
            assert metrics[("h2ping_workers_reporting", "")] == 2
            release.set()
            async with await request as resp:
                assert (resp.status, await resp.read()) == (200, b"ok")
            await stopping
        finally:
            release.set()
            await first.stop()
            await second.stop()
