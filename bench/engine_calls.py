"""Function calls per streamed event and per request through one upstream
connection (engine, stream table, streams), counted by cProfile: a measure of
CPU per event that does not move with the machine's load.

    PYTHONPATH=. python bench/engine_calls.py [--events 5000] [--requests 1000] [--reads 2000]

The connection is the tests' harness (a fake transport, a scripted server's
frames); each event is one 64-byte DATA frame handled in its own loop turn, as
a streamed response's events arrive, and its credit is given back at once, as
the exchange does for a client that keeps up. Each request is a GET answered
with a HEADERS and one DATA frame ending the stream. The download is one
response's DATA in 8 KiB frames (nginx's http2_chunk_size), eight to a read
(about what a loopback read of 64 KiB brings), credited at once.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.h2fake import FakeServer, Harness, RecordingSink


class Acking(RecordingSink):
    def __init__(self) -> None:
        super().__init__()
        self.stream = None

    def on_data(self, data: bytes, flow_controlled_length: int) -> int:
        return flow_controlled_length  # taken at once, as a client keeping up


def print_counts(label: str, profile: cProfile.Profile, n: int) -> None:
    """One line: ``label``, the calls per unit of ``n``, and by whose code."""
    total, parts = counted(profile)
    by_whom = ", ".join(f"{k} {v / n:.1f}" for k, v in sorted(parts.items()))
    print(f"{label}: {total / n:.1f} calls ({by_whom})")


def counted(profile: cProfile.Profile) -> tuple[int, dict[str, int]]:
    stats = pstats.Stats(profile)
    by_module: dict[str, int] = {}
    for (path, _, _), (_, calls, *_) in stats.stats.items():  # type: ignore[attr-defined]
        key = (
            "h2ping"
            if "/h2ping/" in path
            else "h2/hpack"
            if "/h2/" in path or "/hpack/" in path
            else "other"
        )
        by_module[key] = by_module.get(key, 0) + calls
    return stats.total_calls, by_module  # type: ignore[attr-defined]


async def _one_response(path: bytes) -> tuple[Harness, Any]:
    """A connection with one GET on ``path`` whose response head has come, the
    sink giving each DATA frame's credit back at once; returns it and its stream."""
    h = Harness(max_streams=100, window=1 << 30, max_receive_window=1 << 24)
    await h.settle()
    sink = Acking()
    head = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"u.test")]
    stream = h.slot().open([*head, (b":path", path)], sink, end_stream=True)
    sink.stream = stream
    h.feed(h.server.headers(stream.stream_id, 200))
    await h.settle()
    return h, stream


async def _profiled(h: Harness, read: bytes, warm: int, reads: int) -> cProfile.Profile:
    """``read`` fed ``warm`` times, then ``reads`` times under cProfile, each in
    its own loop turn."""
    for _ in range(warm):
        h.feed(read)
        await h.settle()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(reads):
        h.feed(read)
        await h.settle()
        await asyncio.sleep(0)
    profile.disable()
    return profile


T = TypeVar("T")


def _own_task(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """Run ``coro`` as a task of its own: each loop turn then resumes it alone, not
    through its caller too (a call more per turn in the profile)."""
    return asyncio.get_running_loop().create_task(coro)


async def events(n: int) -> None:
    h, stream = await _one_response(b"/sse")
    frame = FakeServer.data(stream.stream_id, b"e" * 64)
    print_counts("per streamed event", await _own_task(_profiled(h, frame, 100, n)), n)


#: The download's frames: their payload, and how many one read brings.
DOWNLOAD_FRAME = 8192
FRAMES_PER_READ = 8


async def download(reads: int) -> None:
    h, stream = await _one_response(b"/16m")
    read = FakeServer.data(stream.stream_id, b"d" * DOWNLOAD_FRAME) * FRAMES_PER_READ
    total, parts = counted(await _own_task(_profiled(h, read, 50, reads)))
    frames = reads * FRAMES_PER_READ
    print(
        f"per download DATA frame ({DOWNLOAD_FRAME} B, {FRAMES_PER_READ} a read): "
        f"{total / frames:.1f} calls ("
        + ", ".join(f"{k} {v / frames:.1f}" for k, v in sorted(parts.items()))
        + ")"
    )


async def requests(n: int) -> None:
    h = Harness(max_streams=100, window=1 << 20)
    await h.settle()
    head = [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", b"u.test"),
        (b":path", b"/r"),
    ]

    async def one() -> None:
        sink = Acking()
        stream = h.slot().open(head, sink, end_stream=True)
        sink.stream = stream
        h.feed(
            h.server.headers(stream.stream_id, 200)
            + FakeServer.data(stream.stream_id, b"r" * 100, end_stream=True)
        )
        await h.settle()
        await asyncio.sleep(0)
        assert sink.ended

    for _ in range(50):
        await one()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(n):
        await one()
    profile.disable()
    print_counts("per request", profile, n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--reads", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(events(args.events))
    asyncio.run(requests(args.requests))
    asyncio.run(download(args.reads))


if __name__ == "__main__":
    main()
