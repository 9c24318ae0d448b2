"""``python -m h2ping.demo``: h2ping against an embedded HTTP/2 upstream, no network.

Starts a local HTTP/2 server (h2c, prior knowledge) and h2ping in front of it, then
sends plain HTTP/1.1 requests the way an aiohttp client would and prints what came
back: status, the upstream's view of the request, and that the bytes round-tripped.

``--serve`` starts only the server, over TLS, and keeps it up until Ctrl-C: an
upstream to try h2ping, ``h2ping check`` and curl against. Each run has an id of
its own, printed at the start and repeated in every answer: the certificate is the
same for every run, so that is how a client tells this run's server from another
demo server left on the port. Its certificate (for
``localhost`` and ``127.0.0.1``, valid until 2126) and the CA that signed it ship
in ``demo_tls/``: they protect nothing, and serve nothing but this demo.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import secrets
import signal
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .process.proxy import Proxy
from .testing import ScriptedRequest, ScriptedUpstream

#: The demo server's certificate, key and CA (see the module).
TLS_FILES = Path(__file__).resolve().parent / "demo_tls"
SERVE_PORT = 8443
CA_COPY = "h2ping-demo-ca.pem"  # written where --serve starts, for -ca-file
#: The response header that names the --serve run that answered.
RUN_HEADER = "x-h2ping-demo-run"


def _upstream_handler(run: str | None = None) -> Callable[[ScriptedRequest], Awaitable[None]]:
    """The demo server's answers; with ``--serve``, each names the server's ``run``
    (as its start line does), so a client can tell it reached this run's server."""
    said = f" (demo run {run})" if run else ""
    marks = [(RUN_HEADER, run)] if run else []

    async def handle(request: ScriptedRequest) -> None:
        body = await request.body()
        if request.path.startswith("/slow"):
            # A model that thinks before its first byte: /slow?s=400 outlasts an idle cut.
            seconds = parse_qs(urlsplit(request.path).query).get("s", ["1.5"])[0]
            await asyncio.sleep(float(seconds) if seconds.replace(".", "", 1).isdigit() else 1.5)
        if request.path.startswith("/stream"):
            await request.send_headers(200, [("content-type", "text/event-stream"), *marks])
            for i in range(3):
                await request.send_data(b"data: token %d\n\n" % i)
                await asyncio.sleep(0.2)
            await request.end()
            return
        info = (
            f"upstream saw {request.method} {request.path} on HTTP/2 stream "
            f"{request.stream_id}, :authority {request.authority}, authorization "
            f"{'present' if request.header('authorization') else 'absent'}, "
            f"{len(body)} body bytes sha256={hashlib.sha256(body).hexdigest()[:16]}{said}\n"
        )
        await request.respond(200, [("content-type", "text/plain"), *marks], info.encode())

    return handle


async def _http1(port: int, method: str, path: str, body: bytes = b"") -> tuple[str, bytes]:
    """A minimal HTTP/1.1 client (the demo needs nothing beyond the runtime deps)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer demo-token\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    writer.write(head.encode() + body)
    raw = await reader.read()
    writer.close()
    status_line, _, rest = raw.partition(b"\r\n")
    fields, _, payload = rest.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in fields.lower():
        payload = _dechunk(payload)
    return status_line.decode(), payload


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2 :]
    return bytes(out)


async def run_demo() -> int:
    async with (
        ScriptedUpstream(_upstream_handler()) as upstream,
        Proxy(upstream=upstream.url, listen="127.0.0.1:0", ping_interval=0.5) as proxy,
    ):
        print(f"embedded HTTP/2 upstream: {upstream.url} (h2c)")
        print(f"h2ping listening on {proxy.url} -> {upstream.url}\n")

        status, body = await _http1(proxy.port, "GET", "/v1/models")
        print(f"GET /v1/models -> {status}\n    {body.decode().rstrip()}")

        payload = os.urandom(1024 * 1024)
        status, body = await _http1(proxy.port, "POST", "/v1/echo", payload)
        print(f"POST /v1/echo (1 MiB) -> {status}\n    {body.decode().rstrip()}")
        print(f"    client sent sha256={hashlib.sha256(payload).hexdigest()[:16]}")

        status, body = await _http1(proxy.port, "GET", "/stream")
        print(f"GET /stream -> {status}, chunked body:\n    {body.decode()!r}")

        started = time.monotonic()
        pings_before = proxy.stats.pings_sent
        status, body = await _http1(proxy.port, "POST", "/slow", b"{}")
        print(
            f"POST /slow -> {status} after {time.monotonic() - started:.1f}s of silence; "
            f"h2ping sent {proxy.stats.pings_sent - pings_before} PINGs meanwhile "
            f"(ping-interval {proxy.config.ping_interval:g}s)"
        )
        print(f"\nproxy counters: {proxy.summary()}")
        print(f"upstream connections opened: {len(upstream.connections)}")
    return 0


async def serve(port: int, ready_file: str | None = None) -> int:
    """The demo upstream over TLS until SIGINT or SIGTERM. Only once it listens does
    it copy its CA beside us (and write ``ready_file``): a failed start leaves no
    file behind; both go again at the exit."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(TLS_FILES / "server.pem", TLS_FILES / "server.key")
    run = secrets.token_hex(4)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    server = ScriptedUpstream(_upstream_handler(run), ssl_context=context, port=port)
    try:
        await server.start()
    except OSError as exc:
        print(f"python -m h2ping.demo: {_cannot_serve(port, exc)}", file=sys.stderr)
        return 1
    written: list[str] = []
    try:
        _write_beside(CA_COPY, (TLS_FILES / "ca.pem").read_bytes(), written)
        if ready_file is not None:  # after the CA copy, which a reader of it may use
            _write_beside(ready_file, f"{os.getpid()}\n".encode(), written)
        print(f"demo upstream: {server.url} (HTTP/2 over TLS), run {run}", flush=True)
        print(f'  each answer says "demo run {run}" and has {RUN_HEADER}: {run}', flush=True)
        print("  GET /slow?s=N answers after N seconds, /stream sends tokens as", flush=True)
        print("  server-sent events, anything else echoes what it got", flush=True)
        print(f"  its CA is in {CA_COPY}: pass -ca-file {CA_COPY}; stop with Ctrl-C", flush=True)
        await stop.wait()
    except OSError as exc:  # a folder we may not write to
        print(
            f"python -m h2ping.demo: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr
        )
        return 1
    finally:
        await server.stop()
        for path in written:
            with contextlib.suppress(OSError):
                os.unlink(path)
    print(f"demo upstream run {run} stopped", flush=True)
    return 0


def _cannot_serve(port: int, exc: OSError) -> str:
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    hint = {
        errno.EADDRINUSE: "another process has it, perhaps another demo server: "
        "choose another port with --port N",
        errno.EACCES: "not allowed to bind it: choose another port with --port N",
    }.get(exc.errno or 0, "choose another port with --port N")
    return f"cannot serve on port {port}: {reason[:1].lower()}{reason[1:]} ({hint})"


def _write_beside(path: str, data: bytes, written: list[str]) -> None:
    """Write ``path`` all at once (a reader never sees it half written), and note it
    for removal at the exit."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temporary, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise OSError(exc.errno, exc.strerror, path) from None
    written.append(path)


USAGE = """Usage: python -m h2ping.demo [--serve [--port N] [--ready-file PATH]]

Starts an embedded HTTP/2 upstream (h2c, no network needed) and h2ping in front of
it on 127.0.0.1, sends four HTTP/1.1 requests through (a GET, a 1 MiB POST, a
streamed response and a slow request that h2ping keeps alive with PINGs), prints
what came back and the proxy's counters, then stops.

With --serve it starts only the upstream, over TLS on 127.0.0.1:8443 (--port N
for another), writes its CA to h2ping-demo-ca.pem here once it serves, and serves
until Ctrl-C: run h2ping, curl and h2ping check against it. It prints a run id that
each of its answers repeats, so a client can tell it reached this run's server.
--ready-file PATH: once serving, write the process's PID and a newline there.
Both files are removed at the exit; nothing is written when it cannot start.
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "-help", "--help"):
        print(USAGE, end="")
        return 0
    if not args:
        return _run(run_demo())
    if args[0] != "--serve":
        return _usage_error(f"unexpected argument {args[0]!r}")
    port, ready_file = SERVE_PORT, None
    rest = args[1:]
    while rest:
        option, *rest = rest
        if option not in ("--port", "--ready-file"):
            return _usage_error(f"unexpected argument {option!r}")
        if not rest:
            return _usage_error(f"{option} needs a value")
        value, *rest = rest
        if option == "--ready-file":
            ready_file = value
        elif value.isascii() and value.isdigit() and 0 < int(value) < 65536:
            port = int(value)
        else:
            return _usage_error(f"--port wants a number from 1 to 65535, not {value!r}")
    return _run(serve(port, ready_file))


def _run(job: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(job)
    return uvloop.run(job)


def _usage_error(message: str) -> int:
    print(f"python -m h2ping.demo: {message}", file=sys.stderr)
    print(USAGE, end="", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
