"""h2ping's upstream connections through a real HTTP forward proxy: squid
(tests/servers/squid.py) on loopback, in front of real HTTP/2 servers (nginx, and
the scripted upstream over TLS for GOAWAYs). Every case runs on both loops.

What a cluster behind an egress proxy needs: traffic of every shape through the
tunnel, PINGs that outlast the proxy's idle timeout, NO_PROXY, credentials, and
plain words naming the proxy (never the upstream) when the proxy is the problem.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import logging
import os
import pathlib
import sys
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from h2ping.testing import ScriptedRequest, ScriptedUpstream

from ..conftest import (
    TLSFiles,
    free_port,
    running_proxy,
    scrape_metrics,
    scripted,
    wait_until,
)
from ..launcher import launch
from . import BIG_SIZE, STREAM_CHUNKS, Origin, big_body, stream_chunk
from .nginx import run_nginx
from .squid import Squid, run_squid

#: Real servers: CI runs the file on one Python only.
pytestmark = pytest.mark.servers

CREDENTIALS = ("trainer", "s3cret-Pa55")


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


@pytest.fixture
async def nginx(tls: TLSFiles, tmp_path: pathlib.Path) -> AsyncIterator[Origin]:
    async with run_nginx(tls, tmp_path) as origin:
        yield origin


def tunnel_lines(squid: Squid, target_port: int) -> list[str]:
    """Squid's access-log lines for tunnels it opened to ``target_port``."""
    return [
        line
        for line in squid.connects()
        if f"CONNECT 127.0.0.1:{target_port} " in line and "TCP_TUNNEL/200" in line
    ]


# ------------------------------------------------------------------ traffic


async def test_get_post_16_mib_and_events_through_squid(
    nginx: Origin, tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    port = port_of(nginx.url)
    upload = os.urandom(BIG_SIZE)
    body = os.urandom(70_000)
    async with run_squid([port]) as squid:
        async with running_proxy(nginx.url, tls, proxy=squid.url) as proxy:
            async with session.get(proxy.url + "/hello") as resp:
                assert resp.status == 200
                assert await resp.read() == b"hello\n"
            async with session.post(proxy.url + "/echo", data=body) as resp:
                assert resp.status == 200
                assert await resp.read() == body
            async with session.post(proxy.url + "/sha256", data=upload) as resp:
                assert await resp.text() == hashlib.sha256(upload).hexdigest()
            async with session.get(proxy.url + "/big") as resp:
                digest = hashlib.sha256()
                async for chunk in resp.content.iter_any():
                    digest.update(chunk)
            assert digest.hexdigest() == hashlib.sha256(big_body()).hexdigest()
            pieces = []
            async with session.get(proxy.url + "/stream") as resp:
                async for chunk in resp.content.iter_any():
                    pieces.append(chunk)
            assert b"".join(pieces) == b"".join(stream_chunk(i) for i in range(STREAM_CHUNKS))
            assert len(pieces) >= STREAM_CHUNKS // 2  # events arrive as they are sent
            stats = proxy.stats
        # Squid logs a tunnel when it ends: h2ping's stop closed them.
        await wait_until(lambda: len(tunnel_lines(squid, port)) == stats.connections_opened)
    assert stats.failed == stats.aborted == 0
    assert stats.connections_opened >= 1


async def test_the_connection_opened_at_start_goes_through_the_tunnel(
    nginx: Origin, tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    """The dial at start (warm_up) opens its tunnel before any request, and the
    first request takes that connection."""
    port = port_of(nginx.url)
    async with run_squid([port]) as squid:
        async with running_proxy(nginx.url, tls, proxy=squid.url) as proxy:
            proxy.warm_up()
            await wait_until(lambda: proxy.connection_states().get("open") == 1)
            async with session.get(proxy.url + "/hello") as resp:
                assert resp.status == 200
            opened = proxy.stats.connections_opened
        await wait_until(lambda: len(tunnel_lines(squid, port)) == 1)
    assert opened == 1


async def test_h2c_goes_through_the_tunnel_too(
    tmp_path: pathlib.Path, session: aiohttp.ClientSession
) -> None:
    """An http:// upstream (h2c with prior knowledge) through CONNECT as well."""
    async with ScriptedUpstream(port=free_port()) as upstream:
        async with run_squid([upstream.port]) as squid:
            async with running_proxy(upstream.url, proxy=squid.url) as proxy:
                async with session.post(proxy.url + "/x", data=b"through") as resp:
                    assert resp.status == 200
                    assert await resp.read() == b"through"
            await wait_until(lambda: len(tunnel_lines(squid, upstream.port)) == 1)


@pytest.mark.parametrize("pings", [True, False], ids=["pings", "no-pings"])
async def test_a_silent_request_outlasts_the_tunnels_idle_timeout_with_pings(
    pings: bool, nginx: Origin, tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    """Squid closes a tunnel on which the server sent nothing for 2 s; the origin
    answers after 5 s of silence. The PINGs' ACKs are bytes from the server through
    the tunnel: with them the request is answered, without them squid cuts it and
    the 502 says it was the tunnel through the proxy that closed."""
    port = port_of(nginx.url)
    async with run_squid([port], idle_timeout=2) as squid:
        interval = 0.5 if pings else 0.0
        async with running_proxy(nginx.url, tls, proxy=squid.url, ping_interval=interval) as proxy:
            async with session.post(proxy.url + "/slow?ms=5000", data=b"late") as resp:
                status, text = resp.status, await resp.text()
                proxy_status = resp.headers.get("Proxy-Status", "")
            stats = proxy.stats
    if pings:
        assert (status, text) == (200, "late")
        assert stats.ping_acks >= 5
    else:
        assert status == 502
        assert f"the tunnel through proxy {squid.address} closed" in proxy_status
        assert proxy_status.startswith(
            f'h2ping; error=connection_terminated; next-hop="{squid.address}";'
        )


# ------------------------------------------------------------- where it goes


async def test_no_proxy_matching_the_upstream_goes_direct(
    nginx: Origin,
    tls: TLSFiles,
    session: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``-proxy env``: HTTPS_PROXY names a squid that refuses the origin's port; the
    request fails through it, and succeeds directly once NO_PROXY names the origin."""
    port = port_of(nginx.url)
    async with run_squid([port + 1]) as squid:
        monkeypatch.setenv("HTTPS_PROXY", squid.url)
        monkeypatch.delenv("https_proxy", raising=False)
        for name in ("no_proxy", "NO_PROXY"):
            monkeypatch.delenv(name, raising=False)
        async with running_proxy(nginx.url, tls, proxy="env") as proxy:
            assert proxy.config.upstream_proxy is not None
            async with session.get(proxy.url + "/hello") as resp:
                assert resp.status == 502
                assert "received-status=403" in resp.headers["Proxy-Status"]
        monkeypatch.setenv("NO_PROXY", f"localhost, .example.com,127.0.0.1:{port}")
        async with running_proxy(nginx.url, tls, proxy="env") as proxy:
            assert proxy.config.upstream_proxy is None
            async with session.get(proxy.url + "/hello") as resp:
                assert resp.status == 200
        assert len(squid.connects()) == 1  # the refused one only


# ------------------------------------------------------------ the proxy fails


async def test_a_refused_connect_is_a_502_naming_the_proxy(
    nginx: Origin,
    tls: TLSFiles,
    session: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = port_of(nginx.url)
    async with run_squid([port + 1]) as squid:  # the origin's port is not allowed
        async with running_proxy(nginx.url, tls, proxy=squid.url) as proxy:
            async with session.get(proxy.url + "/hello") as resp:
                status, text, proxy_status = resp.status, await resp.text(), resp.headers
    said = f"proxy {squid.address} answered CONNECT 127.0.0.1:{port} with 403 Forbidden"
    assert status == 502
    assert said in text
    assert proxy_status["Proxy-Status"].startswith(
        f'h2ping; error=http_request_denied; next-hop="{squid.address}"; received-status=403;'
    )
    assert any(said in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


async def test_407_without_credentials_then_with_them(
    nginx: Origin,
    tls: TLSFiles,
    session: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = port_of(nginx.url)
    user, password = CREDENTIALS
    async with run_squid([port], credentials=CREDENTIALS) as squid:
        async with running_proxy(nginx.url, tls, proxy=f"http://{squid.address}") as proxy:
            async with session.get(proxy.url + "/hello") as resp:
                assert resp.status == 502
                none_given = resp.headers["Proxy-Status"]
        wrong = f"http://{user}:nope@{squid.address}"
        async with running_proxy(nginx.url, tls, proxy=wrong) as proxy:
            async with session.get(proxy.url + "/hello") as resp:
                assert resp.status == 502
                refused = resp.headers["Proxy-Status"]
        async with running_proxy(nginx.url, tls, proxy=squid.url) as proxy:
            assert str(proxy.config.proxy) == f"http://***@{squid.address}"
            async with session.get(proxy.url + "/hello") as resp:
                assert resp.status == 200
                assert await resp.read() == b"hello\n"
    assert "error=proxy_configuration_error" in none_given
    assert "received-status=407" in none_given
    assert "(it asks for Basic): give them in -proxy" in none_given
    assert "it did not take the credentials in -proxy" in refused
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "407 Proxy Authentication Required" in logged
    assert password not in logged and "nope" not in logged
    assert password not in none_given + refused


async def test_a_stopped_proxy_is_a_502_naming_it(
    nginx: Origin, tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    port = port_of(nginx.url)
    async with run_squid([port]) as squid:
        pass  # started, then stopped: nothing listens at its address now
    async with running_proxy(nginx.url, tls, proxy=squid.url) as proxy:
        async with session.get(proxy.url + "/hello") as resp:
            status, proxy_status = resp.status, resp.headers["Proxy-Status"]
    assert status == 502
    assert proxy_status == (
        f'h2ping; error=connection_refused; next-hop="{squid.address}"; '
        f'details="proxy {squid.address} refused the connection: is the proxy running? (-proxy)"'
    )


@contextlib.asynccontextmanager
async def fake_proxy(answer: bytes | None) -> AsyncIterator[int]:
    """A listener that reads a CONNECT head and answers ``answer`` then closes (or,
    with None, says nothing at all): proxies squid cannot play."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            if answer is None:
                await reader.read()  # until the dialler gives up
            else:
                writer.write(answer)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (None, "did not answer CONNECT 127.0.0.1:{port} in 1s"),
        (b"HTTP/1.1 200 OK\r\n\r\n", "during the TLS handshake with 127.0.0.1:{port}"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "did not answer CONNECT in HTTP/1.x"),
    ],
    ids=["silent", "closed-before-tls", "not-http"],
)
async def test_a_proxy_that_fails_otherwise_is_named(
    answer: bytes | None,
    words: str,
    nginx: Origin,
    tls: TLSFiles,
    session: aiohttp.ClientSession,
) -> None:
    port = port_of(nginx.url)
    async with fake_proxy(answer) as proxy_port:
        address = f"127.0.0.1:{proxy_port}"
        async with running_proxy(
            nginx.url, tls, proxy=f"http://{address}", connect_timeout=1.0
        ) as proxy:
            async with session.get(proxy.url + "/hello") as resp:
                status, proxy_status = resp.status, resp.headers["Proxy-Status"]
    assert status == 502
    assert f'next-hop="{address}"' in proxy_status
    assert f"proxy {address} " in proxy_status
    assert words.format(port=port, proxy=address) in proxy_status


# ------------------------------------------------------- connections' life


async def test_rotation_and_a_goaway_replay_through_the_tunnel_lose_nothing(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    """Connections retire every second (-max-conn-age) while requests flow, and the
    first connection's server sends GOAWAY below two of its streams: every request
    is answered once, the refused ones replayed on a new tunnel, and the new
    connections resume the TLS session of the first."""
    release = asyncio.Event()

    async def handler(request: ScriptedRequest) -> None:
        body = await request.body()
        if request.connection.id == 1 and request.header("x-phase") == "goaway":
            await release.wait()
        await request.respond(200, [("content-length", str(len(body)))], body)

    async with scripted(tls, handler, port=free_port()) as upstream:
        async with run_squid([upstream.port]) as squid:
            async with running_proxy(upstream.url, tls, proxy=squid.url, max_conn_age=1.0) as proxy:

                async def call(i: int, phase: str) -> tuple[int, bytes]:
                    headers = {"x-id": str(i), "x-phase": phase}
                    async with session.post(
                        proxy.url + "/r", data=b"%d" % i, headers=headers
                    ) as resp:
                        return resp.status, await resp.read()

                held = [asyncio.create_task(call(i, "goaway")) for i in range(4)]
                await upstream.wait_for(lambda: len(upstream.requests) == 4)
                first = upstream.connections[0]
                last = sorted(r.stream_id for r in first.requests)[1]
                first.goaway(last_stream_id=last)
                await wait_until(lambda: proxy.stats.goaways == 1)
                release.set()
                results = await asyncio.gather(*held)
                deadline = time.monotonic() + 3.0
                i = 4
                while time.monotonic() < deadline:  # through three retirements
                    results.append(await call(i, "rotate"))
                    i += 1
                    await asyncio.sleep(0.05)
                stats = proxy.stats
            await wait_until(lambda: len(tunnel_lines(squid, upstream.port)) >= 3)
    assert results == [(200, b"%d" % n) for n in range(i)]
    assert stats.failed == stats.aborted == 0
    assert stats.replays == 2
    assert stats.retired >= 2
    assert stats.tls_resumptions >= 1
    seen = collections.Counter(r.header("x-id") for r in upstream.requests)
    replayed = {r.header("x-id") for r in first.requests if r.stream_id > last}
    assert len(replayed) == 2  # refused unprocessed on the first connection, served later
    assert seen == {str(n): 2 if str(n) in replayed else 1 for n in range(i)}


# ------------------------------------------------ the check, the command line


async def run_h2ping(*args: str) -> tuple[int, str]:
    """``python -m h2ping ARGS``: exit code and output, without the caller's
    H2PING_* or proxy variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("H2PING_")}
    env = {k: v for k, v in env.items() if not k.lower().endswith("_proxy")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "h2ping", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


@pytest.mark.one_loop  # the loop under test is the command's
async def test_check_reports_the_hop_before_tls_and_http2(nginx: Origin, tls: TLSFiles) -> None:
    port = port_of(nginx.url)
    async with run_squid([port], credentials=CREDENTIALS) as squid:
        argv = ["check", "-upstream", nginx.url, "-proxy", squid.url, "-ca-file", tls.ca_file]
        code, out = await run_h2ping(*argv, "-path", "/hello")
        json_code, json_out = await run_h2ping(*argv, "-log-format", "json")
        refused_code, refused = await run_h2ping(
            "check", "-upstream", nginx.url, "-proxy", f"http://{squid.address}"
        )
    assert code == 0, out
    labels = [line.split(" ", 1)[0] for line in out.splitlines()]
    assert labels[:4] == ["upstream", "proxy", "connected", "tls"], out
    proxy_line = next(line for line in out.splitlines() if line.startswith("proxy "))
    assert proxy_line.startswith(f"proxy        {squid.address}: TCP ")
    assert f", CONNECT 127.0.0.1:{port}: 200 Connection established in " in proxy_line
    assert f"connected    127.0.0.1:{port} through the tunnel: TLS " in out
    assert ", resumes sessions" in out  # the second handshake went through the proxy too
    assert "request      GET /hello: 200" in out
    assert out.rstrip().endswith(f"through proxy {squid.address}, answered 3 of 3 PINGs")
    assert json_code == 0
    found = json.loads(json_out)
    assert found["proxy"]["address"] == squid.address
    assert found["proxy"]["connect_status"] == 200
    assert found["proxy"]["connect_ms"] > 0
    assert refused_code == 1
    assert f"proxy        {squid.address}: TCP " in refused
    assert ": 407 Proxy Authentication Required in " in refused
    verdict = refused.splitlines()[-1]
    assert verdict.startswith(f"verdict      NOT usable: proxy {squid.address} answered CONNECT")
    assert CREDENTIALS[1] not in out + json_out + refused


@pytest.mark.one_loop
async def test_the_command_says_it_goes_through_the_proxy(
    nginx: Origin, tls: TLSFiles, tmp_path: pathlib.Path
) -> None:
    """The start line and /metrics name the proxy's address, never its credentials;
    the start-up dial's warning blames the proxy that refused, not the upstream."""
    port = port_of(nginx.url)
    async with run_squid([port + 1], credentials=CREDENTIALS) as squid:  # refuses the origin
        listen, admin = free_port(), free_port()
        ready = tmp_path / "ready"
        argv = [
            sys.executable, "-m", "h2ping", "-upstream", nginx.url, "-proxy", squid.url,
            "-ca-file", tls.ca_file, "-listen", f"127.0.0.1:{listen}",
            "-admin-listen", f"127.0.0.1:{admin}", "-ready-file", str(ready),
        ]  # fmt: skip
        launched = await launch(argv, log=tmp_path / "log", ready_file=ready)
        try:
            await wait_until(lambda: "cannot be reached at start" in launched.log_text(), 20)
            async with aiohttp.ClientSession() as session:
                metrics = await scrape_metrics(session, f"http://127.0.0.1:{admin}/metrics")
        finally:
            assert await launched.terminate() == 0
    log = launched.log_text()
    assert f"listening on 127.0.0.1:{listen} -> {nginx.url} through proxy {squid.address}" in log
    assert metrics[("h2ping_upstream_proxy", f"proxy={squid.address}")] == 1
    (warning,) = [line for line in log.splitlines() if "cannot be reached at start" in line]
    assert warning.split(": ", 1)[1].startswith(
        f"upstream {nginx.url} cannot be reached at start: the proxy {squid.address} refused "
        f"the tunnel (http_request_denied: proxy {squid.address} answered CONNECT "
        f"127.0.0.1:{port} with 403 Forbidden"
    )
    assert warning.endswith(
        f"to see why: h2ping check -upstream {nginx.url} -proxy http://***@{squid.address}"
    )
    assert CREDENTIALS[1] not in log
