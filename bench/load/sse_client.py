"""Hold C HTTP/1.1 server-sent-event streams through a proxy and measure delivery.

    cd bench && python -m load.sse_client --port 8080 --streams 1000 \\
        --path '/sse?interval_ms=20&bytes=64' --warmup 2 --seconds 10 --cpu proxy=PID

Run as its own process (pinned by the caller). It opens every stream, one connection
each, waits until each has its response head, lets ``--warmup`` seconds pass, then
counts for ``--seconds``: events received, their delay from the origin's send time
(the events carry it: ``data: <seq> <CLOCK_MONOTONIC us> ...``), sequence gaps, and
the CPU seconds (/proc utime + stime) that the ``--cpu-pid`` processes (and their
children) used in that same window. With ``--origin-port`` it also samples, four times
a second, the bytes waiting unread in its own sockets and in the proxy's sockets to
the origin. Then it closes every connection and prints one JSON line.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import collections
import contextlib
import json
import os
import resource
import signal
import sys
import time

import httptools

from common.measure import percentiles
from common.procs import run_on_uvloop, tree_cpu_seconds

QUEUE_SAMPLE_S = 0.25
#: The proxy counts as behind while this much waits unread in its upstream socket.
BEHIND_KIB = 256


class Window:
    """Shared by every stream: whether events count now, and what was counted."""

    def __init__(self, streams: int) -> None:
        self.counting = False
        self.delays_us = array.array("q")
        self.gaps = 0  # events missing from a stream's sequence (or repeated)
        self.per_stream = [0] * streams
        self.heads = 0  # streams that have their 200 head
        self.reads = 0  # data_received calls in the window: one per socket read
        self.all_heads = asyncio.get_running_loop().create_future()
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.queue_samples: list[tuple[int, int]] = []  # unread_bytes() in the window


class EventStream(asyncio.Protocol):
    """One request; parses the chunked response with httptools, splits events."""

    def __init__(self, index: int, request: bytes, window: Window) -> None:
        self.index = index
        self.request = request
        self.window = window
        self.parser = httptools.HttpResponseParser(self)
        self.rest = b""
        self.last_seq = 0
        self.transport: asyncio.Transport | None = None
        self.outcome = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.window.reads += self.window.counting
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.finish(f"bad response: {exc}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.finish("closed by the proxy")

    # httptools callbacks
    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status != 200:
            self.finish(f"status {status}")
            return
        window = self.window
        window.heads += 1
        if window.heads == len(window.per_stream) and not window.all_heads.done():
            window.all_heads.set_result(None)

    def on_body(self, body: bytes) -> None:
        if self.rest:
            body = self.rest + body
        events = body.split(b"\n\n")
        self.rest = events.pop()
        window = self.window
        now_us = time.monotonic_ns() // 1000
        for event in events:
            fields = event.split(b" ", 3)
            seq = int(fields[1])
            if seq != self.last_seq + 1:
                window.gaps += abs(seq - self.last_seq - 1) or 1
            self.last_seq = seq
            if window.counting:
                window.delays_us.append(now_us - int(fields[2]))
                window.per_stream[self.index] += 1

    def on_message_complete(self) -> None:
        self.finish("stream ended")

    def finish(self, outcome: str) -> None:
        if self.outcome:
            return
        self.outcome = outcome
        self.window.outcomes[outcome] += 1
        if self.transport is not None:
            self.transport.abort()


async def open_stream(
    index: int, args: argparse.Namespace, window: Window, gate: asyncio.Semaphore
) -> EventStream | None:
    request = (
        f"GET {args.path} HTTP/1.1\r\nHost: 127.0.0.1:{args.port}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()
    loop = asyncio.get_running_loop()
    try:
        async with gate:  # a connect storm would overflow the listen backlog
            _, protocol = await loop.create_connection(
                lambda: EventStream(index, request, window), "127.0.0.1", args.port
            )
    except OSError as exc:
        window.outcomes[f"connect: {exc.strerror or exc}"] += 1
        return None
    return protocol


def unread_bytes(proxy_port: int, origin_port: int) -> tuple[int, int]:
    """Bytes that arrived in a socket and wait to be read, from /proc/net/tcp: in the
    client's sockets (from the proxy) and in the proxy's upstream sockets (from the
    origin). Where events wait tells who is behind: the client, or the proxy."""
    by_client = by_proxy = 0
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split(None, 5)
            unread = int(fields[4].partition(":")[2], 16)
            if unread:
                remote_port = int(fields[2].partition(":")[2], 16)
                if remote_port == proxy_port:
                    by_client += unread
                elif remote_port == origin_port:
                    by_proxy += unread
    return by_client, by_proxy


async def sample_queues(args: argparse.Namespace, window: Window) -> None:
    """Every QUEUE_SAMPLE_S of the window, how much waits unread (unread_bytes)."""
    while True:
        await asyncio.sleep(QUEUE_SAMPLE_S)
        if window.counting:
            window.queue_samples.append(unread_bytes(args.port, args.origin_port))


def queue_figures(samples: list[tuple[int, int]]) -> dict[str, float | None]:
    figures: dict[str, float | None] = {}
    for index, whose in enumerate(("client", "proxy")):
        values = [sample[index] / 1024 for sample in samples]
        figures[f"unread_by_{whose}_kib_mean"] = sum(values) / len(values) if values else None
        figures[f"unread_by_{whose}_kib_max"] = max(values) if values else None
        figures[f"unread_by_{whose}_kib"] = [round(value) for value in values]  # in time order
    behind = sum(by_proxy >= BEHIND_KIB * 1024 for _, by_proxy in samples) * QUEUE_SAMPLE_S
    figures["proxy_behind_s"] = behind if samples else None
    return figures


async def stall(pid: int, seconds: float) -> None:
    """One second into the window, stop the proxy (SIGSTOP) for ``seconds``: as a
    pause of the host or a long collection would. Then see whether it catches up."""
    await asyncio.sleep(1.0)
    os.kill(pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def cpu_seconds(pids: list[int]) -> float:
    return sum(tree_cpu_seconds(pid) for pid in pids)


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run(args: argparse.Namespace) -> dict[str, object]:
    window = Window(args.streams)
    gate = asyncio.Semaphore(args.connect_concurrency)
    started = time.monotonic()
    streams = await asyncio.gather(
        *(open_stream(i, args, window, gate) for i in range(args.streams))
    )
    with contextlib.suppress(TimeoutError):  # counted below: heads < streams
        await asyncio.wait_for(asyncio.shield(window.all_heads), args.head_timeout)
    heads_seconds = time.monotonic() - started
    await asyncio.sleep(args.warmup)
    sampler = asyncio.create_task(sample_queues(args, window)) if args.origin_port else None
    stopper = None
    if args.stall:
        stopper = asyncio.create_task(stall(args.cpu_pid[args.cpu_name.index("proxy")], args.stall))
    cpu_before = [cpu_seconds([pid]) for pid in args.cpu_pid]
    own_before = own_cpu_seconds()
    window_start = time.monotonic()
    window.counting = True
    await asyncio.sleep(args.seconds)
    window.counting = False
    elapsed = time.monotonic() - window_start
    for task in (sampler, stopper):
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    cpu_after = [cpu_seconds([pid]) for pid in args.cpu_pid]
    cpu = [after - before for after, before in zip(cpu_after, cpu_before, strict=True)]
    own = own_cpu_seconds() - own_before
    for stream in streams:
        if stream is not None:
            stream.finish("closed by the client")
    delays = sorted(window.delays_us)
    events = len(delays)
    asked = args.streams * 1000 / args.interval_ms if args.interval_ms else None
    counts = window.per_stream
    return {
        "streams": args.streams,
        "heads": window.heads,
        "heads_seconds": round(heads_seconds, 2),
        "window_s": round(elapsed, 3),
        "events": events,
        "events_per_s": events / elapsed,
        "asked_per_s": asked,
        "delay_p50_ms": percentiles(delays, 50)[0] / 1000 if delays else None,
        "delay_p99_ms": percentiles(delays, 99)[0] / 1000 if delays else None,
        "delay_max_ms": delays[-1] / 1000 if delays else None,
        "gaps": window.gaps,
        "reads": window.reads,
        "events_per_read": events / window.reads if window.reads else None,
        "stream_events_min": min(counts),
        "stream_events_max": max(counts),
        "cpu_s": dict(zip(args.cpu_name, cpu, strict=True)),
        "client_cpu_s": own,
        "outcomes": dict(window.outcomes),
        "stall_s": args.stall,
        **queue_figures(window.queue_samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--streams", type=int, required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--interval-ms", type=float, help="the path's, for the asked rate")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--head-timeout", type=float, default=30.0)
    parser.add_argument("--connect-concurrency", type=int, default=200)
    parser.add_argument(
        "--stall",
        type=float,
        default=0.0,
        help="stop the proxy (the --cpu proxy=PID) this many seconds, 1 s into the window",
    )
    parser.add_argument(
        "--origin-port",
        type=int,
        default=0,
        help="the origin's port: sample what waits unread in the client's and the proxy's sockets",
    )
    parser.add_argument(
        "--cpu", action="append", default=[], metavar="NAME=PID", help="measure this process"
    )
    args = parser.parse_args()
    pairs = [item.split("=", 1) for item in args.cpu]
    args.cpu_name = [name for name, _ in pairs]
    args.cpu_pid = [int(pid) for _, pid in pairs]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.streams + 100 > hard:
        sys.exit(f"sse_client: {args.streams} streams need more than RLIMIT_NOFILE={hard}")
    report = run_on_uvloop(run(args))
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
