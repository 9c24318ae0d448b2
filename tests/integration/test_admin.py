"""The admin endpoint (--admin-listen): /healthz, /readyz and /metrics, used the way a
kubelet probe and a Prometheus scrape use them."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import aiohttp
from h2.errors import ErrorCodes
from prometheus_client.parser import text_string_to_metric_families

from h2ping import Proxy
from h2ping.process.admin import READY_TIMEOUT
from h2ping.testing import ScriptedRequest, ScriptedUpstream

from ..conftest import (
    TLSFiles,
    assert_not_accepting,
    echo_app,
    free_port,
    run_hypercorn,
    running_proxy,
    scrape_metrics,
    wait_until,
)


def admin_url(proxy: Proxy, path: str) -> str:
    assert proxy.admin is not None
    return f"http://127.0.0.1:{proxy.admin.port}{path}"


async def get(session: aiohttp.ClientSession, proxy: Proxy, path: str) -> tuple[int, str]:
    async with session.get(admin_url(proxy, path)) as resp:
        return resp.status, await resp.text()


async def scrape(session: aiohttp.ClientSession, proxy: Proxy) -> dict[tuple[str, str], float]:
    return await scrape_metrics(session, admin_url(proxy, "/metrics"))


async def test_probes_and_metrics_after_traffic(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    async with (
        run_hypercorn(echo_app, tls) as upstream,
        running_proxy(upstream, tls, admin_listen="127.0.0.1:0") as proxy,
    ):
        assert await get(session, proxy, "/healthz") == (200, "ok\n")
        before = await scrape(session, proxy)
        assert before[("h2ping_upstream_connections", "state=open")] == 0
        # Ready means an upstream connection could be opened; it is kept for traffic.
        assert await get(session, proxy, "/readyz") == (200, "ready\n")
        for i in range(3):
            async with session.post(f"{proxy.url}/echo", data=b"x" * i) as resp:
                assert resp.status == 200
        metrics = await scrape(session, proxy)
    assert metrics[("h2ping_requests_total", "outcome=ok")] == 3
    assert metrics[("h2ping_requests_total", "outcome=failed")] == 0
    assert metrics[("h2ping_responses_total", "status_class=2xx")] == 3
    assert metrics[("h2ping_requests_in_flight", "")] == 0
    assert metrics[("h2ping_upstream_connections", "state=open")] == 1
    assert metrics[("h2ping_upstream_connections_opened_total", "")] == 1
    info = next(labels for name, labels in metrics if name == "h2ping_info")
    assert f"upstream={upstream}" in info


async def test_metrics_count_failures_rejections_and_pings(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    async def handler(request: ScriptedRequest) -> None:
        await request.body()
        if request.path == "/reset":
            request.reset(ErrorCodes.INTERNAL_ERROR)
            return
        await asyncio.sleep(0.5)  # silent: PINGs go out meanwhile
        await request.respond(200, [("content-length", "2")], b"ok")

    async with (
        ScriptedUpstream(handler, ssl_context=tls.server_context()) as upstream,
        running_proxy(upstream.url, tls, admin_listen="127.0.0.1:0", ping_interval=0.1) as proxy,
    ):
        async with session.get(f"{proxy.url}/slow") as resp:
            assert (resp.status, await resp.read()) == (200, b"ok")
        async with session.get(f"{proxy.url}/reset") as resp:
            assert resp.status == 502
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"NOT HTTP\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.1 400")
        writer.close()
        metrics = await scrape(session, proxy)
    assert metrics[("h2ping_requests_total", "outcome=ok")] == 1
    assert metrics[("h2ping_requests_total", "outcome=failed")] == 1
    assert metrics[("h2ping_requests_total", "outcome=rejected")] == 1
    assert metrics[("h2ping_requests_total", "outcome=cut_at_shutdown")] == 0
    assert metrics[("h2ping_responses_total", "status_class=2xx")] == 1
    assert metrics[("h2ping_responses_total", "status_class=4xx")] == 1
    assert metrics[("h2ping_responses_total", "status_class=5xx")] == 1
    sent = metrics[("h2ping_pings_sent_total", "")]
    acked = metrics[("h2ping_ping_acks_total", "")]
    assert sent >= 2 and acked >= 2, (sent, acked)
    assert metrics[("h2ping_ping_rtt_seconds_count", "")] == acked
    assert metrics[("h2ping_ping_rtt_seconds_bucket", "le=+Inf")] == acked
    assert 0 < metrics[("h2ping_ping_rtt_seconds_sum", "")] < acked * 0.5
    assert metrics[("h2ping_ping_timeouts_total", "")] == 0


_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)")


async def test_metrics_follow_the_exposition_format(session: aiohttp.ClientSession) -> None:
    """HELP and TYPE before each family's samples, h2ping_ names, _total on counters,
    cumulative histogram buckets ending in +Inf = _count."""
    async with running_proxy("https://127.0.0.1:9", admin_listen="127.0.0.1:0") as proxy:
        for rtt in (0.0004, 0.003, 0.003, 0.2, 30.0):
            proxy.stats.ping_rtt.observe(rtt)
        proxy.stats.goaways = 2
        async with session.get(admin_url(proxy, "/metrics")) as resp:
            text = await resp.text()
    assert text.endswith("\n")
    families: dict[str, str] = {}
    current = ""
    # Each histogram series (family and labels other than le): its buckets in order.
    buckets: dict[str, list[tuple[float, float]]] = {}
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            current = line.split()[2]
            assert current not in families, f"{current} declared twice"
            assert current.startswith("h2ping_"), current
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert name == current, f"TYPE {name} without HELP first"
            families[name] = kind
            if kind == "counter":
                assert name.endswith("_total"), name
        else:
            match = _SAMPLE.fullmatch(line)
            assert match, f"not a sample line: {line!r}"
            name, labels, value = match.groups()
            base = name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
            assert current in (name, base) and current in families, f"{name} outside its family"
            values[name + (labels or "")] = float(value)
            if name.endswith("_bucket"):
                bound = re.fullmatch(r'\{(.*?),?le="([^"]+)"\}', labels or "")
                assert bound, labels
                series = f"{base}{{{bound.group(1)}}}"
                buckets.setdefault(series, []).append((float(bound.group(2)), float(value)))
    assert families["h2ping_ping_rtt_seconds"] == "histogram"
    assert families["h2ping_requests_in_flight"] == "gauge"
    for series, points in buckets.items():
        bounds = [b for b, _ in points]
        counts = [n for _, n in points]
        assert bounds == sorted(bounds) and bounds[-1] == float("inf"), series
        name, _, labels = series.partition("{")
        count = values[f"{name}_count" + (f"{{{labels}" if labels != "}" else "")]
        assert counts == sorted(counts) and counts[-1] == count, series
    assert values["h2ping_ping_rtt_seconds_count"] == 5
    assert values['h2ping_ping_rtt_seconds_bucket{le="0.001"}'] == 1
    assert values['h2ping_ping_rtt_seconds_bucket{le="0.005"}'] == 3
    assert values['h2ping_ping_rtt_seconds_bucket{le="10.0"}'] == 4
    assert values["h2ping_goaways_total"] == 2
    # And prometheus_client's parser agrees on every family and its type.
    parsed = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert parsed == {name.removesuffix("_total"): kind for name, kind in families.items()}


async def test_readyz_fails_while_the_upstream_is_unreachable(
    session: aiohttp.ClientSession,
) -> None:
    dead = f"https://127.0.0.1:{free_port()}"
    async with running_proxy(dead, admin_listen="127.0.0.1:0") as proxy:
        status, body = await get(session, proxy, "/readyz")
        assert (await get(session, proxy, "/healthz")) == (200, "ok\n")  # still alive
    assert status == 503
    assert body.startswith("not ready: upstream: connection_refused"), body


async def test_a_slow_readyz_holds_up_nothing_else(session: aiohttp.ClientSession) -> None:
    """An upstream that accepts TCP and never speaks: /readyz gives up after
    READY_TIMEOUT, and /healthz and /metrics answer at once meanwhile."""
    held: list[asyncio.StreamWriter] = []

    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    silent = await asyncio.start_server(mute, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{silent.sockets[0].getsockname()[1]}"
    try:
        async with running_proxy(url, admin_listen="127.0.0.1:0", connect_timeout=30) as proxy:
            loop = asyncio.get_running_loop()
            started = loop.time()
            ready = asyncio.create_task(get(session, proxy, "/readyz"))
            await wait_until(lambda: len(held) == 1)  # /readyz is waiting on the upstream
            assert (await get(session, proxy, "/healthz"))[0] == 200
            assert (await get(session, proxy, "/metrics"))[0] == 200
            assert not ready.done()
            quick = loop.time() - started
            status, body = await ready
            waited = loop.time() - started
    finally:
        silent.close()
        for writer in held:
            writer.close()
    assert quick < READY_TIMEOUT - 0.2, quick
    assert READY_TIMEOUT <= waited < READY_TIMEOUT + 1.0, waited
    assert (status, body) == (503, f"not ready: no upstream connection within {READY_TIMEOUT:g}s\n")


async def test_readyz_fails_while_draining(tls: TLSFiles, session: aiohttp.ClientSession) -> None:
    release = asyncio.Event()

    async def handler(request: ScriptedRequest) -> None:
        await request.body()
        await release.wait()
        await request.respond(200, [("content-length", "4")], b"done")

    async with (
        ScriptedUpstream(handler, ssl_context=tls.server_context()) as upstream,
        running_proxy(upstream.url, tls, admin_listen="127.0.0.1:0") as proxy,
    ):
        request = asyncio.create_task(session.get(f"{proxy.url}/slow"))
        await upstream.wait_for(lambda: len(upstream.requests) == 1)
        assert (await get(session, proxy, "/readyz"))[0] == 200
        stopping = asyncio.create_task(proxy.stop(grace=10))
        await wait_until(lambda: proxy.not_serving() is not None)
        assert await get(session, proxy, "/readyz") == (503, "not ready: draining\n")
        assert (await get(session, proxy, "/healthz"))[0] == 200
        release.set()
        async with await request as resp:
            assert (resp.status, await resp.read()) == (200, b"done")
        await stopping


async def raw(proxy: Proxy, data: bytes) -> bytes:
    assert proxy.admin is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.admin.port)
    writer.write(data)
    response = await asyncio.wait_for(reader.read(), 5)  # the server closes after one answer
    writer.close()
    return response


async def test_other_paths_methods_and_garbage() -> None:
    async with running_proxy("https://127.0.0.1:9", admin_listen="127.0.0.1:0") as proxy:
        not_found = await raw(proxy, b"GET /debug HTTP/1.1\r\nHost: a\r\n\r\n")
        post = await raw(proxy, b"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi")
        head = await raw(proxy, b"HEAD /healthz?probe=1 HTTP/1.1\r\nHost: a\r\n\r\n")
        garbage = await raw(proxy, b"\x16\x03\x01 hello\r\n\r\n")
        huge = await raw(proxy, b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n")
    assert not_found.startswith(b"HTTP/1.1 404 ")
    assert post.startswith(b"HTTP/1.1 405 ") and b"\r\nAllow: GET, HEAD\r\n" in post
    assert head.startswith(b"HTTP/1.1 200 ") and b"\r\nContent-Length: 3\r\n" in head
    assert head.endswith(b"\r\n\r\n")  # no body for HEAD
    assert garbage.startswith(b"HTTP/1.1 400 ")
    assert huge.startswith(b"HTTP/1.1 431 ")


async def test_embedded_proxy_serves_admin_and_stops_it(session: aiohttp.ClientSession) -> None:
    settings: dict[str, Any] = {"admin_listen": "127.0.0.1:0", "shutdown_grace": 0}
    async with Proxy(upstream="https://127.0.0.1:9", listen="127.0.0.1:0", **settings) as proxy:
        assert proxy.admin is not None
        port = proxy.admin.port
        assert await get(session, proxy, "/healthz") == (200, "ok\n")
    await assert_not_accepting(port, "the admin endpoint after stop")


async def test_event_loop_lag_is_measured_when_asked(session: aiohttp.ClientSession) -> None:
    async with (
        ScriptedUpstream() as upstream,
        running_proxy(upstream.url, admin_listen="127.0.0.1:0", loop_lag_interval=0.01) as proxy,
    ):
        lag = proxy.lag
        assert lag is not None
        await wait_until(lambda: lag.histogram.count >= 10)
        ticks = lag.histogram.count
        time.sleep(0.05)  # block the loop: one tick must see at least this much lag
        await wait_until(lambda: lag.histogram.count > ticks)
        metrics = await scrape(session, proxy)
        summary = proxy.summary()
    assert metrics[("h2ping_event_loop_lag_seconds_count", "")] >= 10
    assert (
        metrics[("h2ping_event_loop_lag_seconds_bucket", "le=0.03")]
        < metrics[("h2ping_event_loop_lag_seconds_count", "")]
    )
    assert "loop_lag_p99=" in summary and "loop_lag_max=" in summary
    # At least the 50 ms block less one 10 ms interval; uvloop's loop clock
    # counts whole milliseconds, so the difference can come out a hair under.
    assert proxy.lag is not None and proxy.lag.max >= 0.039
