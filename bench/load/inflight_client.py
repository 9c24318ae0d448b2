"""Hold N HTTP/1.1 requests in flight at once: one connection per request.

Run as its own process (pinned to a core by the caller). Prints ``SENT <epoch>``
once every request is written, then one JSON line with the outcome:

    cd bench && python -m load.inflight_client --port 8080 --n 10000 --path '/delay?ms=60000'
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import resource
import socket
import sys
import time

from common.procs import run_on_uvloop


class Exchange(asyncio.Protocol):
    """One request on its own connection; resolves ``done`` with an outcome string."""

    __slots__ = ("buf", "done", "request", "transport")

    def __init__(self, request: bytes, done: asyncio.Future[str]) -> None:
        self.request = request
        self.done = done
        self.buf = bytearray()
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        outcome = _complete(self.buf)
        if outcome is not None and not self.done.done():
            self.done.set_result(outcome)
            self.transport.close()  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(f"closed after {len(self.buf)} bytes")


def _complete(buf: bytearray) -> str | None:
    """``ok``/an error once the response is whole, None while more is expected."""
    head_end = buf.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    head = bytes(buf[:head_end]).lower()
    body = buf[head_end + 4 :]
    status = head[9:12].decode(errors="replace")
    if b"transfer-encoding: chunked" in head:
        if not body.endswith(b"0\r\n\r\n"):
            return None
    else:
        start = head.find(b"content-length:")
        if start < 0:
            return None  # read to EOF; connection_lost decides
        line_end = head.find(b"\r\n", start)
        if len(body) < int(head[start + 15 : line_end if line_end >= 0 else None]):
            return None
    if status != "200":
        return f"status {status}"
    return "ok" if b"slept" in body else "bad body"


async def one(
    i: int, args: argparse.Namespace, gate: asyncio.Semaphore, state: dict[str, float]
) -> tuple[str, float]:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str] = loop.create_future()
    request = (
        f"GET {args.path} HTTP/1.1\r\nHost: 127.0.0.1:{args.port}\r\nUser-Agent: inflight\r\n\r\n"
    ).encode()
    # Above ~28k connections the ephemeral ports of one source address run out.
    local = (
        f"127.0.0.{args.first_ip + i % args.source_ips}"
        if args.source_ips > 1 or args.first_ip > 1
        else None
    )
    started = time.monotonic()
    try:
        async with gate:  # a connect storm would overflow the listen backlog
            sock = await _connected(loop, args.port, local)
            await loop.create_connection(lambda: Exchange(request, done), sock=sock)
    except OSError as exc:
        return f"connect: {exc.strerror or exc}", 0.0
    state["sent"] += 1
    if state["sent"] == args.n:
        state["all_sent_at"] = time.time()
        print(f"SENT {state['all_sent_at']:.3f}", flush=True)
    try:
        outcome = await asyncio.wait_for(done, args.timeout)
    except TimeoutError:
        outcome = "timeout"
    if outcome == "ok" and "first_done_at" not in state:
        state["first_done_at"] = time.time()
    return outcome, time.monotonic() - started


#: Linux: a socket bound to an address takes its port at connect, not at bind. A
#: bind to (address, 0) alone searches the address's ports in use, each time.
_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)


async def _connected(
    loop: asyncio.AbstractEventLoop, port: int, local: str | None
) -> socket.socket:
    """A TCP socket connected to 127.0.0.1:``port``, from ``local`` when given."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        if local is not None:
            sock.setsockopt(socket.IPPROTO_IP, _BIND_ADDRESS_NO_PORT, 1)
            sock.bind((local, 0))
        await loop.sock_connect(sock, ("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    return sock


async def run(args: argparse.Namespace) -> dict[str, object]:
    gate = asyncio.Semaphore(args.connect_concurrency)
    state: dict[str, float] = {"sent": 0}
    started = time.time()
    results = await asyncio.gather(*(one(i, args, gate, state) for i in range(args.n)))
    outcomes = collections.Counter(outcome for outcome, _ in results)
    times = sorted(t for outcome, t in results if outcome == "ok")
    return {
        "n": args.n,
        "ok": outcomes.pop("ok", 0),
        "failures": dict(outcomes),
        "sent": int(state["sent"]),
        "started_at": started,
        "all_sent_at": state.get("all_sent_at"),
        "first_done_at": state.get("first_done_at"),
        "finished_at": time.time(),
        "min_s": times[0] if times else None,
        "max_s": times[-1] if times else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--connect-concurrency", type=int, default=256)
    parser.add_argument("--source-ips", type=int, default=1)
    parser.add_argument(
        "--first-ip", type=int, default=1, help="source addresses from 127.0.0.N on (N > 1)"
    )
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.n + 100 > hard:
        sys.exit(f"inflight_client: {args.n} connections need more than RLIMIT_NOFILE={hard}")
    report = run_on_uvloop(run(args))
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
