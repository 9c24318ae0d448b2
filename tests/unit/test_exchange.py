"""Exchange and the replays it asks for, without sockets or sleeps: a fake pool hands out fake
streams, a recording sink stands in for the client, and replay pauses are
collected from an injected ``call_later`` and run by hand."""

from __future__ import annotations

from typing import Any

import pytest

from h2ping.config import parse_upstream
from h2ping.errors import UpstreamError
from h2ping.forward.body import TOO_LARGE, RetryBudget
from h2ping.forward.exchange import Exchange, ExchangeContext
from h2ping.forward.replay import (
    MAX_REPLAYS,
    MAX_REPLAYS_WITH_PROGRESS,
    REPLAY_BACKOFF,
    REPLAY_MAX_PAUSE,
    ReplayPolicy,
)
from h2ping.http1.messages import Request, ResponseWriter
from h2ping.stats import Stats

from ..fakeloop import FakeLoop

REFUSED = "connection_refused"


def refused() -> UpstreamError:
    return UpstreamError(REFUSED, "REFUSED_STREAM", retryable=True)


class FakeStream:
    def __init__(self, stream_id: int, sink: Exchange, end_stream: bool) -> None:
        self.stream_id = stream_id
        self.sink = sink
        self.sent: list[bytes] = []
        self.ended = end_stream
        self.backlogged = False
        self.cancelled = False
        self.acked = 0

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    def end(self) -> None:
        self.ended = True

    def ack(self, nbytes: int) -> None:
        self.acked += nbytes

    def ack_held(self) -> None:
        pass

    def cancel(self) -> None:
        self.cancelled = True

    def reject_response(self) -> None:
        self.cancelled = True


class FakeSlot:
    conn_id = 1

    def __init__(self, pool: FakePool) -> None:
        self._pool = pool
        self.header_list_limit = pool.header_list_limit
        pool.slots.append(self)
        self.released = False

    def open(self, headers: Any, sink: Exchange, *, end_stream: bool) -> FakeStream:
        stream = FakeStream(2 * len(self._pool.streams) + 1, sink, end_stream)
        self._pool.streams.append(stream)
        return stream

    def release(self) -> None:
        self.released = True


class FakePool:
    """Always a free slot; ``answered`` counts the upstream's answers to others;
    its connections' peers take heads up to ``header_list_limit`` (None: any)."""

    def __init__(self) -> None:
        self.streams: list[FakeStream] = []
        self.slots: list[FakeSlot] = []
        self.answered = 0
        self.header_list_limit: int | None = None

    def try_acquire(self) -> FakeSlot:
        return FakeSlot(self)

    async def acquire(self, *, early: bool = True) -> FakeSlot:
        return FakeSlot(self)


class Sink:
    """The client connection's side of a ResponseWriter: what it was sent."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.flushes = 0
        self.write_paused = False
        self.done = False
        self.aborted = False
        self.reading = True

    def send(self, *parts: bytes) -> None:
        for part in parts:
            self.out += part

    @property
    def output(self) -> Sink:  # its own output: it keeps the queue too
        return self

    @property
    def reader(self) -> Sink:  # its own reading's switch too
        return self

    def mark(self) -> tuple[int, int]:
        return (self.flushes, len(self.out))

    def take_back(self, mark: tuple[int, int]) -> bool:
        if mark[0] != self.flushes:
            return False
        del self.out[mark[1] :]
        return True

    def response_done(self, writer: ResponseWriter, keep_alive: bool) -> None:
        self.done = True

    def abort(self) -> None:
        self.aborted = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


class Setup:
    def __init__(
        self,
        body: bytes = b"abc",
        retry_body_limit: int = 1024,
        *,
        chunked: bool = False,
        header_list_limit: int | None = None,
    ) -> None:
        """``chunked``: the body has no declared length and is still arriving."""
        self.pool = FakePool()
        self.pool.header_list_limit = header_list_limit
        self.stats = Stats()
        self.clock = FakeLoop()
        self.sink = Sink()
        ctx = ExchangeContext(
            pool=self.pool,
            upstream=parse_upstream("https://api.example"),
            replay=ReplayPolicy(
                budget=RetryBudget(1 << 20, self.stats),
                body_limit=retry_body_limit,
                progress=self.pool,
                stats=self.stats,
                call_later=self.clock.call_later,
                jitter=lambda: 0.5,
            ),
            stats=self.stats,
            live=set(),
        )
        self.live = ctx.live
        framing = (b"content-length", b"%d" % len(body))
        if chunked:
            framing = (b"transfer-encoding", b"chunked")
        request = Request(b"POST", b"/r", [(b"host", b"x"), framing], "1.1", True)
        request.body_complete = not chunked
        self.exchange = Exchange(ctx, request, ResponseWriter(self.sink, request))
        self.exchange.start()
        self.exchange.feed_body(body)
        if not chunked:
            self.exchange.end_body()

    @property
    def stream(self) -> FakeStream:
        return self.pool.streams[-1]

    def refuse(self, times: int, progress: bool = False) -> None:
        """The upstream refuses the current attempt ``times`` times in a row."""
        for _ in range(times):
            if progress:
                self.pool.answered += 1
            self.stream.sink.on_error(refused())
            self.clock.run_due()


# The mapped head of Setup's request, as SETTINGS_MAX_HEADER_LIST_SIZE counts it:
# :method POST, :scheme https, :authority api.example, :path /r, content-length 3.
SETUP_HEAD = (7 + 4) + (7 + 5) + (10 + 11) + (5 + 2) + (14 + 1) + 5 * 32


def test_a_head_over_the_peers_limit_is_431_and_opens_no_stream() -> None:
    setup = Setup(header_list_limit=SETUP_HEAD - 1)
    assert setup.pool.streams == []
    (slot,) = setup.pool.slots
    assert slot.released  # given back unused
    assert setup.sink.out.startswith(b"HTTP/1.1 431 ")
    assert b"proxy-status: h2ping; error=http_request_error" in setup.sink.out
    assert b"request header section of %d bytes" % SETUP_HEAD in setup.sink.out
    assert (setup.stats.replays, setup.stats.rejected, setup.stats.failed) == (0, 1, 0)
    assert not setup.live


def test_a_head_at_the_peers_limit_goes() -> None:
    setup = Setup(header_list_limit=SETUP_HEAD)
    assert setup.stream.sent == [b"abc"]


def test_a_refused_stream_is_replayed_at_once_with_the_whole_body() -> None:
    setup = Setup(body=b"abc")
    setup.refuse(1)
    first, second = setup.pool.streams
    assert (first.sent, second.sent, second.ended) == ([b"abc"], [b"abc"], True)
    assert setup.clock.delays == []  # the first replay does not wait
    assert setup.stats.replays == 1


def test_later_replays_pause_doubling_with_jitter_under_the_cap() -> None:
    setup = Setup()
    setup.refuse(MAX_REPLAYS)
    expected = [
        min(REPLAY_BACKOFF * 2**n, REPLAY_MAX_PAUSE / 2) * 1.5 for n in range(MAX_REPLAYS - 1)
    ]
    assert setup.clock.delays == pytest.approx(expected)
    assert max(setup.clock.delays) < REPLAY_MAX_PAUSE


def test_without_progress_elsewhere_it_gives_up_after_max_replays() -> None:
    setup = Setup()
    setup.refuse(MAX_REPLAYS + 1)
    assert len(setup.pool.streams) == MAX_REPLAYS + 1
    assert (setup.stats.replays, setup.stats.failed, setup.stats.responses["5xx"]) == (6, 1, 1)
    assert setup.sink.out.startswith(b"HTTP/1.1 502 ")
    assert b"gave up after %d replays" % MAX_REPLAYS in setup.sink.out


def test_while_the_upstream_answers_others_it_goes_on_up_to_the_limit() -> None:
    setup = Setup()
    setup.refuse(MAX_REPLAYS_WITH_PROGRESS + 1, progress=True)
    assert len(setup.pool.streams) == MAX_REPLAYS_WITH_PROGRESS + 1
    assert setup.stats.replays == MAX_REPLAYS_WITH_PROGRESS
    assert b"gave up after %d replays" % MAX_REPLAYS_WITH_PROGRESS in setup.sink.out


def test_progress_must_continue_past_max_replays() -> None:
    setup = Setup()
    setup.refuse(MAX_REPLAYS, progress=True)
    setup.refuse(1, progress=True)  # still answering others: one more
    setup.refuse(1)  # nothing answered since: the end
    assert setup.stats.replays == MAX_REPLAYS + 1
    assert setup.sink.out.startswith(b"HTTP/1.1 502 ")


def test_a_started_response_is_never_replayed() -> None:
    setup = Setup()
    setup.stream.sink.on_response([(b":status", b"200")], end_stream=False)
    setup.sink.flushes += 1  # the head reached the socket
    setup.stream.sink.on_error(refused())
    assert setup.clock.run_due() is False
    assert len(setup.pool.streams) == 1
    assert (setup.stats.replays, setup.stats.aborted) == (0, 1)
    assert setup.sink.aborted


def test_a_response_still_unsent_gives_way_to_a_502() -> None:
    setup = Setup()
    setup.stream.sink.on_response([(b":status", b"200")], end_stream=False)
    setup.stream.sink.on_error(refused())  # taken, then failed: no replay either
    assert setup.sink.out.startswith(b"HTTP/1.1 502 ")
    assert b" 200 " not in setup.sink.out
    assert (setup.stats.responses["2xx"], setup.stats.responses["5xx"]) == (0, 1)
    assert (setup.stats.replays, setup.stats.failed) == (0, 1)


def test_a_body_not_kept_is_not_replayed() -> None:
    setup = Setup(body=b"x" * 20, retry_body_limit=10)
    setup.refuse(1)
    assert len(setup.pool.streams) == 1
    assert (setup.stats.replays, setup.stats.replays_refused_for_size) == (0, 1)
    assert b"not retried: " + TOO_LARGE.encode() in setup.sink.out


def test_an_error_that_may_have_been_acted_on_is_not_replayed() -> None:
    setup = Setup()
    setup.stream.sink.on_error(UpstreamError("connection_terminated", "connection reset"))
    assert len(setup.pool.streams) == 1
    assert (setup.stats.replays, setup.stats.failed) == (0, 1)
    assert setup.sink.out.startswith(b"HTTP/1.1 502 ")


def test_a_body_given_up_during_a_replay_pause_is_still_sent_whole() -> None:
    setup = Setup(body=b"abc", retry_body_limit=10, chunked=True)
    setup.refuse(1)  # replayed at once: the kept b"abc" goes again
    setup.stream.sink.on_error(refused())  # the next replay waits a pause...
    setup.exchange.feed_body(b"x" * 10)  # ...while the body outgrows the limit
    setup.exchange.end_body()
    setup.clock.run_due()
    third = setup.stream
    assert (len(setup.pool.streams), third.sent, third.ended) == (3, [b"abc", b"x" * 10], True)
    third.sink.on_error(refused())  # not kept any more: not replayed again
    assert len(setup.pool.streams) == 3
    assert b"not retried: " + TOO_LARGE.encode() in setup.sink.out


def test_an_exchange_ends_once_however_its_end_comes() -> None:
    setup = Setup()
    stream = setup.stream
    stream.sink.on_response([(b":status", b"200")], end_stream=False)
    stream.sink.on_end()
    setup.exchange.cancel()  # the client leaves after its answer
    setup.exchange.cut()
    stream.sink.on_error(refused())
    assert (setup.stats.completed, setup.stats.cancelled, setup.stats.failed) == (1, 0, 0)
    assert setup.stats.cut_at_shutdown == 0
    assert (setup.live, stream.cancelled, setup.sink.done) == (set(), False, True)


def test_a_client_gone_mid_request_cancels_its_stream_and_is_counted_once() -> None:
    setup = Setup()
    stream = setup.stream
    setup.exchange.cancel()
    stream.sink.on_error(refused())  # the stream's own end, come late: no replay, no 502
    assert (stream.cancelled, len(setup.pool.streams), setup.live) == (True, 1, set())
    assert (setup.stats.cancelled, setup.stats.failed, setup.stats.replays) == (1, 0, 0)
    assert setup.sink.out == b""
