"""A fast stream does not starve the others: inbound work is bounded per loop turn.

Unit tests drive one connection with a fake transport; the end-to-end test runs
a small request beside a large download. Nothing here times anything: the
assertions are about order and progress.
"""

from __future__ import annotations

import asyncio
import itertools

import aiohttp
import pytest
from hyperframe.frame import DataFrame

from h2ping.http2.engine.frames import MAX_FRAME_SIZE
from h2ping.http2.inbound import INBOUND_BATCH, STREAM_SHARE
from h2ping.http2.upstream import ConnState
from h2ping.testing import ScriptedRequest

from ..conftest import TLSFiles, running_proxy, scripted
from ..h2fake import Harness

FRAMES = 64  # of MAX_FRAME_SIZE bytes each: 1 MiB, sixteen batches
TURN = INBOUND_BATCH + MAX_FRAME_SIZE + 9  # at most one frame past the batch


def body_frames(h: Harness, stream_id: int, end_stream: bool = True) -> tuple[bytes, bytes]:
    """DATA frames of distinct bytes, so that a loss or a reordering shows; and the body."""
    chunks = [bytes([i]) * MAX_FRAME_SIZE for i in range(FRAMES)]
    frames = [
        h.server.data(stream_id, chunk, end_stream=end_stream and i == FRAMES - 1)
        for i, chunk in enumerate(chunks)
    ]
    return b"".join(frames), b"".join(chunks)


async def test_one_big_read_is_handled_over_many_loop_turns_in_order() -> None:
    h = Harness(window=2**31 - 1)
    stream, sink = h.open()
    frames, body = body_frames(h, stream.stream_id)
    loop = asyncio.get_running_loop()
    seen: list[int] = []  # what had arrived each time another callback ran

    def other_callback() -> None:
        seen.append(len(sink.data))
        if not sink.ended:
            loop.call_soon(other_callback)

    loop.call_soon(other_callback)
    h.feed(h.server.headers(stream.stream_id, 200) + frames)  # one read of 1 MiB
    assert len(sink.data) <= TURN
    assert not h.transport.reading  # no more reads while a backlog waits
    await h.settle()

    assert bytes(sink.data) == body and sink.ended and sink.error is None
    assert h.transport.reading and h.transport.pauses == 1
    steps = [b - a for a, b in itertools.pairwise(seen)]
    assert len([s for s in steps if s]) >= len(body) // TURN  # progress, turn by turn
    assert max(steps) <= TURN


@pytest.mark.parametrize(("streams", "events"), [(20, 60), (200, 10)])
async def test_a_turn_takes_a_share_per_open_stream(streams: int, events: int) -> None:
    """Small events for each of many streams, in one read larger than INBOUND_BATCH:
    with 200 streams a turn's share (1 KiB each) takes the whole read at once, so
    each client gets its events in one write; with 20 the share stays at
    INBOUND_BATCH and the read takes several turns, reading paused meanwhile."""
    h = Harness(max_streams=streams, window=2**31 - 1)
    opened = [h.open() for _ in range(streams)]
    event = b"data: " + b"x" * 58  # 64 bytes, 73 framed
    read = b"".join(h.server.headers(stream.stream_id, 200) for stream, _ in opened)
    read += b"".join(
        h.server.data(stream.stream_id, event) for _ in range(events) for stream, _ in opened
    )
    assert len(read) > INBOUND_BATCH + MAX_FRAME_SIZE
    many = streams * STREAM_SHARE > INBOUND_BATCH
    assert many == (streams == 200) and (len(read) <= streams * STREAM_SHARE) == many
    h.feed(read)
    delivered = sum(len(sink.data) for _, sink in opened)
    if many:
        assert delivered == streams * events * len(event) and h.transport.reading
    else:
        assert delivered <= TURN and not h.transport.reading
    await h.settle()
    assert all(bytes(sink.data) == event * events for _, sink in opened)


async def test_bytes_read_during_a_backlog_queue_behind_it_goaway_included() -> None:
    h = Harness(window=2**31 - 1)
    first, first_sink = h.open()
    _later, later_sink = h.open()
    frames, body = body_frames(h, first.stream_id, end_stream=False)
    delivered_at_goaway: list[int] = []
    later_sink.on_error_hook = lambda error: delivered_at_goaway.append(len(first_sink.data))

    h.feed(h.server.headers(first.stream_id, 200) + frames)
    assert not h.transport.reading
    # A read that was already under way: the rest of the body, then GOAWAY
    # sparing only the first stream.
    h.feed(h.server.data(first.stream_id, b"tail", end_stream=True) + h.server.goaway(1))
    assert later_sink.error is None  # still behind the backlog
    await h.settle()

    assert bytes(first_sink.data) == body + b"tail" and first_sink.ended
    assert delivered_at_goaway == [len(body) + 4]  # GOAWAY took effect in its place
    assert later_sink.error is not None and later_sink.error.retryable
    assert h.conn.state is ConnState.CLOSED  # drained: its last stream ended


async def test_a_backlog_is_handled_before_the_connection_is_declared_lost() -> None:
    h = Harness(window=2**31 - 1)
    stream, sink = h.open()
    frames, body = body_frames(h, stream.stream_id)
    h.feed(h.server.headers(stream.stream_id, 200) + frames)
    h.conn.connection_lost(None)  # the server closed right after its last frame
    assert bytes(sink.data) == body and sink.ended and sink.error is None
    await asyncio.sleep(0)  # no turn is left scheduled to run on a closed connection
    assert h.conn.state is ConnState.CLOSED


async def test_a_connection_closed_during_a_backlog_stops_taking_turns() -> None:
    h = Harness(window=2**31 - 1)
    stream, sink = h.open()
    frames, _ = body_frames(h, stream.stream_id)
    h.feed(h.server.headers(stream.stream_id, 200) + frames)
    h.conn.close("test")
    delivered = len(sink.data)
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(sink.data) == delivered and sink.error is not None


async def test_a_small_request_completes_while_a_large_download_runs(
    tls: TLSFiles, session: aiohttp.ClientSession
) -> None:
    total = 64 * 1024 * 1024
    chunk = b"x" * (1024 * 1024)

    async def handler(request: ScriptedRequest) -> None:
        if request.path == "/small":
            await request.respond(200, [("content-length", "5")], b"small")
            return
        await request.send_headers(200, [("content-length", str(total))])
        for i in range(total // len(chunk)):
            await request.send_data(chunk, end_stream=i == total // len(chunk) - 1)

    async with scripted(tls, handler) as up, running_proxy(up.url, tls) as proxy:
        async with session.get(proxy.url + "/big") as big:
            received = len(await big.content.readexactly(len(chunk)))
            small = asyncio.create_task(session.get(proxy.url + "/small"))
            while not small.done():
                received += len(await big.content.read(256 * 1024))
            received_when_small_done = received
            async with small.result() as resp:
                assert (resp.status, await resp.read()) == (200, b"small")
            while data := await big.content.read(1024 * 1024):
                received += len(data)
        assert received == total
        # The small response came while most of the download was still to come.
        assert received_when_small_done < total // 2
        assert len(up.connections) == 1  # both on one connection


async def test_a_full_batch_pauses_reading_for_a_turn_even_with_nothing_left() -> None:
    """Else the loop hands over the next read in the same iteration (uvloop
    reads a socket up to 32 times per iteration), and the bound is per read only."""
    h = Harness(window=2**31 - 1)
    stream, sink = h.open()
    h.feed(h.server.headers(stream.stream_id, 200))
    frame = h.server.data(stream.stream_id, b"x" * (MAX_FRAME_SIZE - 9))  # 16 KiB with its header
    h.feed(frame * (INBOUND_BATCH // len(frame)))  # exactly one batch
    assert len(sink.data) == INBOUND_BATCH // len(frame) * (MAX_FRAME_SIZE - 9)
    assert not h.transport.reading
    await asyncio.sleep(0)
    assert h.transport.reading


async def test_reads_in_one_loop_iteration_share_one_batch() -> None:
    h = Harness(window=2**31 - 1)
    stream, sink = h.open()
    h.feed(h.server.headers(stream.stream_id, 200))
    await asyncio.sleep(0)  # a new iteration, with a share of its own
    frame = h.server.data(stream.stream_id, b"y" * 1000)
    read = frame * (INBOUND_BATCH // 2 // len(frame) + 1)  # a bit over half a batch
    h.feed(read)
    assert h.transport.reading  # within the share: nothing waits
    h.feed(read)  # the loop hands over a second read in the same iteration
    assert not h.transport.reading
    assert INBOUND_BATCH <= len(sink.data) * len(frame) // 1000 <= INBOUND_BATCH + len(frame)
    await h.settle()
    assert bytes(sink.data) == b"y" * (2 * len(read) // len(frame) * 1000)


async def test_data_frames_are_never_formatted_for_a_log_that_is_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """h2 would format each DATA frame (its payload as hex) for its trace log,
    a seventh of a download's CPU: the connection takes DATA past that."""

    def no_repr(frame: object) -> str:
        raise AssertionError("a DATA frame was formatted")

    monkeypatch.setattr(DataFrame, "__repr__", no_repr)
    h = Harness()
    stream, sink = h.open()
    h.feed(h.server.headers(stream.stream_id, 200), h.server.data(stream.stream_id, b"z", True))
    assert bytes(sink.data) == b"z" and sink.ended and sink.error is None
