"""The two schedules of an upstream connection, each alone: InboundTurns (when
inbound frames are handled) and OutboundPump (which request bodies are framed,
and when h2's output is written)."""

from __future__ import annotations

import asyncio

from h2ping.http2.engine import H2Engine, new_engine
from h2ping.http2.inbound import INBOUND_BATCH, STREAM_SHARE, TURN_MAX, InboundTurns, turn_share
from h2ping.http2.outbound import PUMP_BATCH, OutboundPump

from ..fakes import FakeTransport


class Backlog:
    """Stands for the connection and its frame backlog: a turn asks the schedule
    for its budget, handles up to that much, and says what came of it."""

    def __init__(self) -> None:
        self.size = 0
        self.batches: list[int] = []
        self.over = False  # the connection ended in its batch
        self.streams = 1
        self.inbound: InboundTurns | None = None

    def turn(self, scheduled: bool = False) -> None:
        """What the connection does when bytes arrive, and on each scheduled turn."""
        assert self.inbound is not None
        budget = self.inbound.budget(self.streams, scheduled)
        if budget is None:
            return
        taken = min(self.size, max(budget, 0))
        self.size -= taken
        self.batches.append(taken)
        if not self.over:
            self.inbound.took(taken, self.size > 0)


def turns(backlog: Backlog, transport: FakeTransport) -> InboundTurns:
    inbound = InboundTurns(asyncio.get_running_loop(), backlog.turn)
    backlog.inbound = inbound
    inbound.attach(transport)
    return inbound


async def test_a_small_read_is_handled_at_once_and_reading_goes_on() -> None:
    backlog, transport = Backlog(), FakeTransport(strict=False)
    turns(backlog, transport)
    backlog.size = 1000
    backlog.turn()
    assert backlog.batches == [1000] and transport.reading


async def test_a_large_backlog_is_handled_one_share_per_iteration_without_reading() -> None:
    backlog, transport = Backlog(), FakeTransport(strict=False)
    turns(backlog, transport)
    backlog.size = 3 * INBOUND_BATCH
    backlog.turn()
    assert backlog.batches == [INBOUND_BATCH] and not transport.reading
    backlog.turn()  # more bytes in the same iteration wait for the next turn
    assert backlog.batches == [INBOUND_BATCH]
    await asyncio.sleep(0)
    assert backlog.batches == [INBOUND_BATCH] * 2 and not transport.reading
    await asyncio.sleep(0)
    assert backlog.batches == [INBOUND_BATCH] * 3
    # The last share used the whole turn: paused until the next iteration proves
    # the backlog empty, so the loop hands over no second read in this one.
    assert not transport.reading
    await asyncio.sleep(0)
    assert transport.reading and backlog.size == 0
    assert transport.pauses == 1


async def test_a_hold_keeps_reading_off_whatever_the_backlog_says() -> None:
    """Held (the peer reads none of our writes): the backlog already read is
    handled, one share a turn, and reading resumes only once both allow it."""
    backlog, transport = Backlog(), FakeTransport()  # strict: no double pause or resume
    inbound = turns(backlog, transport)
    backlog.size = 2 * INBOUND_BATCH
    backlog.turn()
    inbound.hold(True)
    assert not transport.reading and transport.pauses == 1
    for _ in range(4):
        await asyncio.sleep(0)
    assert backlog.size == 0 and not transport.reading, "a drained backlog resumed a hold"
    inbound.hold(False)
    assert transport.reading and transport.resumes == 1
    inbound.hold(True)  # with nothing waiting: paused at once
    assert not transport.reading and transport.pauses == 2
    backlog.size = 1000
    backlog.turn()
    assert backlog.batches[-1] == 1000 and not transport.reading
    inbound.hold(False)
    assert transport.reading


def test_the_share_grows_with_the_open_streams_up_to_its_cap() -> None:
    assert turn_share(0) == turn_share(1) == INBOUND_BATCH
    assert turn_share(INBOUND_BATCH // STREAM_SHARE) == INBOUND_BATCH
    assert turn_share(1000) == 1000 * STREAM_SHARE > INBOUND_BATCH
    assert turn_share(100_000) == TURN_MAX


async def test_a_connection_with_many_streams_takes_a_larger_share_per_iteration() -> None:
    # A thousand streams of small events: a turn must carry several frames per
    # stream, or a backlog is written out one event per client write.
    backlog, transport = Backlog(), FakeTransport(strict=False)
    turns(backlog, transport)
    backlog.streams = 1000
    backlog.size = 3 * 1000 * STREAM_SHARE
    backlog.turn()
    assert backlog.batches == [1000 * STREAM_SHARE] and not transport.reading
    backlog.streams = 1  # the streams ended meanwhile: back to the base share
    await asyncio.sleep(0)
    assert backlog.batches == [1000 * STREAM_SHARE, INBOUND_BATCH]


async def test_reads_in_one_iteration_share_one_budget() -> None:
    backlog, transport = Backlog(), FakeTransport(strict=False)
    turns(backlog, transport)
    for _ in range(3):
        backlog.size += INBOUND_BATCH // 2
        backlog.turn()
    # Two halves fill the iteration's share; the third waits for the next one.
    assert sum(backlog.batches) == INBOUND_BATCH and not transport.reading
    await asyncio.sleep(0)
    assert backlog.size == 0


async def test_stop_cancels_the_next_turn() -> None:
    backlog, transport = Backlog(), FakeTransport(strict=False)
    inbound = turns(backlog, transport)
    backlog.size = 2 * INBOUND_BATCH
    backlog.turn()
    inbound.stop()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert backlog.batches == [INBOUND_BATCH]


async def test_a_connection_that_ended_in_its_batch_takes_no_turn() -> None:
    backlog, transport = Backlog(), FakeTransport(strict=False)
    turns(backlog, transport)
    backlog.size = 2 * INBOUND_BATCH
    backlog.over = True
    backlog.turn()
    await asyncio.sleep(0)
    assert backlog.batches == [INBOUND_BATCH] and transport.reading


# --------------------------------------------------------------------- outbound


class Sink:
    def __init__(self) -> None:
        self.ready = 0

    def on_send_ready(self) -> None:
        self.ready += 1


class Events:
    """No peer speaks in these tests: nothing is ever called."""


class Stream:
    """Stands for an UpstreamStream: frames what ``budget`` allows from ``queued``,
    when its body grows (``pump``, as ``send`` does) or on the pump's turns."""

    def __init__(self, queued: int, log: list[Stream] | None = None) -> None:
        self.queued = queued
        self.window = 2**31  # the peer's window on it
        self.log = log if log is not None else []  # the order streams are framed in
        self.budgets: list[int] = []
        self.sink = Sink()
        self.closed = False
        self.backlogged = False

    def got_send_ready(self) -> None:
        self.sink.on_send_ready()

    def frame_body(self, budget: int) -> tuple[int, bool, bool, bool]:
        self.budgets.append(budget)
        self.log.append(self)
        framed = min(self.queued, max(budget, 0), self.window)
        self.window -= framed
        self.queued -= framed
        spent = self.queued > 0 and budget - framed <= 0 and self.window > 0
        return framed, spent, self.queued == 0, self.queued > 0

    def pump(self, outbound: OutboundPump) -> None:
        """As UpstreamStream's own: frame within the pump's budget, tell it the values."""
        framed, spent, ready, queued = self.frame_body(outbound.budget)
        outbound.framed(self, framed, spent, queued, ready)  # type: ignore[arg-type]


def pump() -> tuple[OutboundPump, FakeTransport, H2Engine]:
    conn = new_engine(Events(), 65536)  # type: ignore[arg-type]
    conn.start(65535, 65535)
    outbound = OutboundPump(asyncio.get_running_loop(), conn)
    transport = FakeTransport(strict=False)
    outbound.attach(transport)
    return outbound, transport, conn


async def test_streams_share_one_batch_per_write_and_take_turns() -> None:
    outbound, _, _ = pump()
    a, b = Stream(PUMP_BATCH), Stream(PUMP_BATCH)
    a.pump(outbound)
    b.pump(outbound)
    assert a.queued == 0 and b.budgets == [0] and b.queued == PUMP_BATCH
    await asyncio.sleep(0)  # the write, then b's turn
    await asyncio.sleep(0)
    assert b.queued == 0 and b.sink.ready == 1


async def test_nothing_is_framed_while_the_transport_pauses_writing() -> None:
    outbound, _, _ = pump()
    stream = Stream(1000)
    outbound.pause_writing()
    stream.pump(outbound)
    assert stream.budgets == [0] and stream.queued == 1000
    outbound.resume_writing()
    assert stream.queued == 0


async def test_a_forgotten_stream_is_not_pumped_again() -> None:
    outbound, _, _ = pump()
    stream = Stream(1000)
    outbound.pause_writing()
    stream.pump(outbound)
    outbound.forget(stream)  # type: ignore[arg-type]
    outbound.resume_writing()
    assert stream.budgets == [0]


async def test_one_write_per_iteration_whatever_is_queued() -> None:
    outbound, transport, conn = pump()
    for _ in range(3):
        conn.ping(b"12345678")
        outbound.schedule_flush()
    assert transport.writes == []
    await asyncio.sleep(0)
    assert len(transport.writes) == 1


async def test_windows_opened_amid_a_batch_are_pumped_after_it_in_their_order() -> None:
    """The peer's WINDOW_UPDATEs reach the pump while the engine handles a batch:
    nothing is framed then (the engine is amid its frames); the connection has
    the streams pumped once the batch is over, in the order their windows opened."""
    outbound, _, _ = pump()
    log: list[Stream] = []
    a, b, c = Stream(1000, log), Stream(1000, log), Stream(1000, log)
    for stream in (a, b, c):
        stream.window = 0
        stream.pump(outbound)  # each waits on its window
    log.clear()
    for stream in (c, a, b):
        stream.window = 1000
        outbound.window_opened(stream)  # type: ignore[arg-type]
    outbound.forget(b)  # reset by the peer later in the same batch
    assert log == [] and outbound.opened
    outbound.pump_opened()
    assert log == [c, a] and a.queued == c.queued == 0 and b.queued == 1000
    assert not outbound.opened


async def test_the_connections_window_opened_pumps_every_waiting_stream_after_the_batch() -> None:
    outbound, _, _ = pump()
    log: list[Stream] = []
    a, b = Stream(1000, log), Stream(1000, log)
    for stream in (a, b):
        stream.window = 0
        stream.pump(outbound)
        stream.window = 1000
    log.clear()
    outbound.window_opened(None)
    assert log == []
    outbound.pump_opened()
    assert log == [a, b] and a.queued == b.queued == 0


async def test_the_first_write_of_a_turn_may_go_at_once_and_the_rest_wait_for_its_end() -> None:
    outbound, transport, conn = pump()
    conn.ping(b"12345678")
    outbound.flush_first()  # a request whole in its HEADERS, first of the turn
    assert len(transport.writes) == 1
    conn.ping(b"87654321")
    outbound.flush_first()  # the next in the same turn waits
    outbound.schedule_flush()
    assert len(transport.writes) == 1
    await asyncio.sleep(0)
    assert len(transport.writes) == 2  # the turn's one write, with all the rest
    await asyncio.sleep(0)
    conn.ping(b"abcdefgh")
    outbound.flush_first()  # a new turn
    assert len(transport.writes) == 3
