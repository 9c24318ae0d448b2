"""The Pool with connections that need no socket: fake ones where only its choices
matter, real UpstreamConnections on a fake transport where their endings do."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from h2ping.errors import UpstreamError
from h2ping.forward import growth
from h2ping.forward.growth import FIRST_BACKOFF, LAST_BACKOFF, NoStreamsAllowed, PoolGrowth
from h2ping.forward.pool import Pool
from h2ping.http2.upstream import ConnState, UpstreamConnection
from h2ping.stats import Stats

from ..fakes import FakeTransport
from ..h2fake import REQUEST, FakeServer, RecordingSink, config


class FakeSlot:
    def __init__(self, conn: FakeConn) -> None:
        self.conn = conn
        self.spent = False

    def release(self) -> None:
        if not self.spent:
            self.spent = True
            self.conn.reserved -= 1
            self.conn.released += 1
            self.conn.notify()

    def open(self) -> None:
        assert not self.spent
        self.spent = True
        self.conn.reserved -= 1
        self.conn.streams[len(self.conn.streams) * 2 + 1] = None


class FakeConn:
    """What the pool reads of a connection, and the two callbacks it gives one."""

    def __init__(
        self,
        conn_id: int,
        on_change: Callable[[Any, ConnState], None],
        on_age: Callable[[Any], None],
        max_streams: int,
    ) -> None:
        self.id = conn_id
        self.upstream = "fake"
        self.state = ConnState.OPEN
        self.max_streams = max_streams
        self.streams: dict[int, None] = {}
        self.reserved = 0
        self.released = 0
        self.answered = 0
        self.age_limit = 1.0
        self.retired_for = ""
        self._on_change = on_change
        self.on_age = on_age
        self.table = self  # the pool asks a connection's stream table; here one object is both

    @property
    def busy(self) -> bool:
        return bool(self.streams or self.reserved)

    def count(self) -> int:
        return len(self.streams)

    def try_reserve(self) -> FakeSlot | None:
        if (
            self.state is not ConnState.OPEN
            or len(self.streams) + self.reserved >= self.max_streams
        ):
            return None
        self.reserved += 1
        return FakeSlot(self)

    def end_stream(self) -> None:
        self.streams.popitem()
        self.notify()

    def retire(self, reason: str) -> None:
        self.retired_for = reason
        self.state = ConnState.DRAINING if self.busy else ConnState.CLOSED
        self.notify()

    def close(self, reason: str) -> None:
        self.state = ConnState.CLOSED
        self.notify()

    def notify(self) -> None:
        self._on_change(self, self.state)


class FakeDialer:
    """Hands out FakeConns; ``gate`` holds each dial until the test lets it through."""

    def __init__(self, max_streams: int = 2) -> None:
        self.max_streams = max_streams
        self.conns: list[FakeConn] = []
        self.attempts = 0
        self.gate: asyncio.Event | None = None
        self.fail_with: Exception | None = None

    async def __call__(
        self,
        cfg: object,
        ssl_context: object,
        conn_id: int,
        on_change: Callable[[Any, ConnState], None],
        stats: Stats,
        on_age: Callable[[Any], None],
        ping_backoff: object = None,
        tls_sessions: object = None,
        on_preface: object = None,
        window_budget: object = None,
    ) -> FakeConn:
        self.attempts += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        conn = FakeConn(conn_id, on_change, on_age, self.max_streams)
        self.conns.append(conn)
        return conn


@asynccontextmanager
async def open_pool(
    max_streams: int = 2, *, full_and_held: bool = False, **settings: Any
) -> AsyncIterator[tuple[FakeDialer, Pool]]:
    """A FakeDialer and a Pool that dials with it; on the way out a held dial is let
    through and the pool closed, whatever the test did.

    ``full_and_held``: the pool's one connection already carries its one stream and
    the next dial waits on the gate, so whoever asks for a slot now has to queue."""
    dialer = FakeDialer(max_streams)
    pool = Pool(config(**settings), None, Stats(), dial=dialer)
    try:
        if full_and_held:
            assert max_streams == 1
            (await pool.acquire()).open()
            dialer.gate = asyncio.Event()
        yield dialer, pool
    finally:
        if dialer.gate is not None:
            dialer.gate.set()
        pool.close()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_opens_a_connection_only_when_no_slot_is_free() -> None:
    async with open_pool(max_streams=2) as (dialer, pool):
        assert pool.try_acquire() is None  # nothing open yet: the caller must wait
        first = await pool.acquire()
        second = pool.try_acquire()
        assert second is not None and first.conn is second.conn is dialer.conns[0]
        assert pool.try_acquire() is None
        third = asyncio.create_task(pool.acquire())
        await settle()
        assert third.done() and (await third).conn is dialer.conns[1]
        assert dialer.attempts == 2


async def test_oldest_connection_first() -> None:
    async with open_pool(max_streams=1) as (_dialer, pool):
        a = await pool.acquire()
        b = await pool.acquire()
        assert (a.conn.id, b.conn.id) == (1, 2)
        a.release()
        c = pool.try_acquire()
        assert c is not None and c.conn.id == 1


async def test_waiters_are_served_in_arrival_order() -> None:
    async with open_pool(max_streams=1, full_and_held=True) as (dialer, pool):
        waiters = [asyncio.create_task(pool.acquire()) for _ in range(3)]
        await settle()
        assert not any(w.done() for w in waiters)
        assert pool.try_acquire() is None, "a newcomer went ahead of the queue"
        order = []
        for _ in range(3):
            dialer.conns[0].end_stream()
            await settle()
            done = [i for i, w in enumerate(waiters) if w.done() and i not in order]
            assert len(done) == 1
            order += done
            waiters[done[0]].result().open()
        assert order == [0, 1, 2]


async def test_a_waiter_cancelled_after_being_woken_gives_its_slot_to_the_next() -> None:
    async with open_pool(max_streams=1, full_and_held=True) as (dialer, pool):
        first = asyncio.create_task(pool.acquire())
        second = asyncio.create_task(pool.acquire())
        await settle()
        conn = dialer.conns[0]
        conn.end_stream()
        await asyncio.sleep(0)  # the pool's turn wakes `first`: the slot is its result...
        first.cancel()  # ...and it is cancelled before it ran
        await settle()
        assert first.cancelled()
        assert conn.released == 1
        assert second.done() and second.result().conn is conn
        assert conn.reserved == 1


async def test_a_waiter_cancelled_while_waiting_leaves_the_queue() -> None:
    async with open_pool(max_streams=1, full_and_held=True) as (dialer, pool):
        gone = asyncio.create_task(pool.acquire())
        stays = asyncio.create_task(pool.acquire())
        await settle()
        gone.cancel()
        await settle()
        dialer.conns[0].end_stream()
        await settle()
        assert stays.done() and stays.result().conn is dialer.conns[0]
        assert dialer.conns[0].released == 0


async def test_a_failed_dial_fails_every_waiter_and_the_next_request_dials_again() -> None:
    async with open_pool() as (dialer, pool):
        dialer.fail_with = UpstreamError("connection_refused", "refused")
        waiters = [asyncio.create_task(pool.acquire()) for _ in range(3)]
        results = await asyncio.gather(*waiters, return_exceptions=True)
        assert all(
            isinstance(r, UpstreamError) and r.error == "connection_refused" for r in results
        )
        assert dialer.attempts == 1
        dialer.fail_with = None
        slot = await pool.acquire()
        assert slot.conn.id == 2 and dialer.attempts == 2


async def test_a_dial_that_breaks_fails_the_waiters_instead_of_hanging_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with open_pool() as (dialer, pool):
        dialer.fail_with = AttributeError("a bug in dialling")
        waiters = [asyncio.create_task(pool.acquire()) for _ in range(2)]
        results = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 2)
        assert all(
            isinstance(r, UpstreamError) and r.error == "proxy_internal_error" for r in results
        )
        assert "internal error" in caplog.text
        dialer.fail_with = None
        slot = await pool.acquire()  # the next request dials again
        assert slot.conn.id == 2


async def test_close_fails_waiters_and_closes_connections() -> None:
    async with open_pool(max_streams=1, full_and_held=True) as (dialer, pool):
        waiter = asyncio.create_task(pool.acquire())
        await settle()
        pool.close()
        with pytest.raises(UpstreamError):
            await waiter
        assert dialer.conns[0].state is ConnState.CLOSED
        with pytest.raises(UpstreamError):
            await pool.acquire()
        assert pool.try_acquire() is None


async def test_a_closed_connection_leaves_the_pool() -> None:
    async with open_pool() as (dialer, pool):
        (await pool.acquire()).release()
        assert pool.connections == dialer.conns
        dialer.conns[0].close("gone")
        await asyncio.sleep(0)  # counted out from the loop, not within its close
        assert pool.connections == []


async def test_a_draining_connection_makes_waiters_dial() -> None:
    async with open_pool(max_streams=1, full_and_held=True) as (dialer, pool):
        waiter = asyncio.create_task(pool.acquire())
        await settle()
        assert dialer.attempts == 2  # the waiter asked for a connection at once
        conn = dialer.conns[0]
        conn.state = ConnState.DRAINING  # GOAWAY: takes no new streams
        conn.end_stream()
        await settle()
        assert not waiter.done(), "a draining connection's slot was handed out"
        dialer.gate.set()
        await settle()
        assert waiter.done() and waiter.result().conn.id == 2


async def test_an_idle_connection_at_its_age_gets_its_successor_first_too() -> None:
    """The next request, a moment later, finds the successor open: it waits for no
    handshake."""
    async with open_pool() as (dialer, pool):
        (await pool.acquire()).release()
        conn = dialer.conns[0]
        conn.answered = 1  # it carried a request: more may come
        dialer.gate = asyncio.Event()
        conn.on_age(conn)
        await settle()
        assert dialer.attempts == 2 and conn.retired_for == ""  # open until then
        dialer.gate.set()
        await settle()
        assert conn.retired_for == "max-conn-age" and conn.state is ConnState.CLOSED
        slot = pool.try_acquire()
        assert slot is not None and slot.conn.id == 2


async def test_a_connection_never_used_closes_at_its_age_without_a_successor() -> None:
    async with open_pool() as (dialer, pool):
        (await pool.acquire()).release()
        conn = dialer.conns[0]
        conn.on_age(conn)
        await settle()
        assert conn.retired_for == "max-conn-age" and conn.state is ConnState.CLOSED
        assert dialer.attempts == 1 and pool.connections == []


async def test_a_busy_connection_at_its_age_gets_its_successor_first() -> None:
    async with open_pool() as (dialer, pool):
        (await pool.acquire()).open()
        conn = dialer.conns[0]
        dialer.gate = asyncio.Event()
        conn.on_age(conn)
        await settle()
        assert dialer.attempts == 2 and conn.retired_for == ""  # still taking streams
        slot = pool.try_acquire()
        assert slot is not None and slot.conn is conn
        slot.release()
        dialer.gate.set()
        await settle()
        assert conn.retired_for == "max-conn-age" and conn.state is ConnState.DRAINING
        slot = pool.try_acquire()
        assert slot is not None and slot.conn.id == 2


async def test_answered_counts_connections_that_left() -> None:
    async with open_pool(max_streams=1) as (dialer, pool):
        await pool.acquire()
        await pool.acquire()
        first, second = dialer.conns
        first.answered, second.answered = 3, 4
        assert pool.answered == 7
        first.close("gone")
        second.answered += 1
        assert pool.answered == 8


@pytest.mark.parametrize("death", ["connection-lost", "ping-timeout"])
async def test_a_dying_connection_is_not_handed_to_a_waiting_request(death: str) -> None:
    dialled: list[UpstreamConnection] = []
    never = asyncio.get_running_loop().create_future()

    async def dial(
        cfg,
        ssl_context,
        conn_id,
        on_change,
        stats,
        on_age=None,
        ping_backoff=None,
        tls_sessions=None,
        on_preface=None,
        window_budget=None,
    ):  # type: ignore[no-untyped-def]
        if dialled:
            await never  # the second connection never comes up
        conn = UpstreamConnection(cfg, conn_id, on_change, on_age)
        conn.connection_made(FakeTransport())
        conn.data_received(FakeServer.settings(max_concurrent_streams=1))
        dialled.append(conn)
        return conn

    cfg = config(ping_interval=0.01, ping_timeout=0.02) if death == "ping-timeout" else config()
    pool = Pool(cfg, None, Stats(), dial=dial)
    slot = await pool.acquire()
    sink = RecordingSink()
    slot.open(REQUEST, sink, end_stream=True)
    waiter = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0)  # queued; a second connection is being dialled
    if death == "connection-lost":
        dialled[0].connection_lost(ConnectionResetError("reset by peer"))
        await asyncio.sleep(0)
    else:  # the fake server never answers the PING
        for _ in range(100):
            await asyncio.sleep(0.01)
            if sink.error is not None:
                break
        # The pool acts on a connection's end from the loop, after its streams
        # failed: when this task's timer fell due in the same loop turn as the
        # PING's, it runs before the pool has.
        await asyncio.sleep(0)
    assert sink.error is not None
    assert not waiter.done(), "the dead connection's freed slot went to a waiting request"
    assert pool.connections == []
    pool.close()
    with pytest.raises(UpstreamError):
        await waiter


# ------------------------------------------------- a server that allows no streams


async def test_a_connection_that_allows_no_streams_is_full_and_the_next_dial_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(growth, "FIRST_BACKOFF", 0.2)
    async with open_pool(max_streams=0) as (dialer, pool):
        with pytest.raises(NoStreamsAllowed, match="upstream allows no streams"):
            async with asyncio.timeout(5):  # dialling on and on, it would never answer
                await pool.acquire()
        assert dialer.attempts == 1
        # Requests meanwhile wait for the back-off: no dial before it.
        waiters = [asyncio.create_task(pool.acquire()) for _ in range(50)]
        await settle()
        assert dialer.attempts == 1 and not any(w.done() for w in waiters)
        # Then one dial; it allows none either, and nothing in flight can make room.
        done, _ = await asyncio.wait(waiters, timeout=5)
        assert len(done) == 50 and dialer.attempts == 2
        assert all(isinstance(w.exception(), NoStreamsAllowed) for w in waiters)
        # The older connection that took nothing is closed: one is enough to hear from.
        assert dialer.conns[0].retired_for == "upstream allows no streams"
        assert pool.connections == [dialer.conns[1]]


async def test_after_the_back_off_a_connection_that_takes_streams_serves_and_ends_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(growth, "FIRST_BACKOFF", 0.05)
    async with open_pool(max_streams=0) as (dialer, pool):
        with pytest.raises(NoStreamsAllowed):
            async with asyncio.timeout(5):
                await pool.acquire()
        assert pool.refusal is not None
        dialer.max_streams = 1  # the server takes streams again
        async with asyncio.timeout(5):
            slot = await pool.acquire()
        assert dialer.attempts == 2 and slot.conn is dialer.conns[1]
        assert pool.refusal is None
        assert dialer.conns[0].retired_for == ""  # its limit may rise: kept until idle


async def test_a_request_waits_on_a_connection_in_flight_when_a_new_one_allows_none() -> None:
    async with open_pool(max_streams=1) as (dialer, pool):
        (await pool.acquire()).open()
        dialer.max_streams = 0  # the server sheds load: new connections get none
        waiter = asyncio.create_task(pool.acquire())
        await settle()
        assert dialer.attempts == 2 and not waiter.done(), "failed though a stream will end"
        dialer.conns[0].end_stream()
        await settle()
        assert waiter.done() and waiter.result().conn is dialer.conns[0]
        assert dialer.attempts == 2


async def test_a_server_that_raises_its_limit_ends_the_refusal() -> None:
    async with open_pool(max_streams=0) as (dialer, pool):
        with pytest.raises(NoStreamsAllowed):
            async with asyncio.timeout(5):
                await pool.acquire()
        (conn,) = dialer.conns
        conn.max_streams = 2  # its SETTINGS raised the limit
        conn.notify()
        slot = await pool.acquire()
        assert slot.conn is conn and dialer.attempts == 1


async def test_the_pool_holds_at_most_max_upstream_conns(caplog: pytest.LogCaptureFixture) -> None:
    async with open_pool(max_streams=1, max_upstream_conns=2) as (dialer, pool):
        for _ in range(2):
            (await pool.acquire()).open()
        waiters = [asyncio.create_task(pool.acquire()) for _ in range(3)]
        await settle()
        assert dialer.attempts == 2 and not any(w.done() for w in waiters)
        limit = [r.getMessage() for r in caplog.records if "limit reached" in r.getMessage()]
        assert limit == [
            "upstream connection limit reached: 2 connections (max-upstream-conns 2); "
            "requests wait for a stream slot on them"
        ]
        dialer.conns[1].end_stream()
        await settle()
        assert waiters[0].done() and waiters[0].result().conn is dialer.conns[1]
        assert dialer.attempts == 2


async def test_at_the_bound_a_retiring_connection_drains_to_make_room() -> None:
    async with open_pool(max_streams=1, max_upstream_conns=1) as (dialer, pool):
        (await pool.acquire()).open()
        old = dialer.conns[0]
        old.on_age(old)  # its successor cannot open: it stops taking streams instead
        await settle()
        assert old.retired_for == "max-conn-age" and dialer.attempts == 1
        waiter = asyncio.create_task(pool.acquire())
        old.end_stream()
        old.close("drained")
        await settle()
        assert waiter.done() and waiter.result().conn is dialer.conns[1]


def test_the_back_off_doubles_to_its_cap_and_ends_with_a_connection_that_takes_streams() -> None:
    now = [100.0]
    growth = PoolGrowth("up:443", 10, lambda: now[0])
    assert growth.wait() == 0 and growth.refusal is None
    waits = []
    for _ in range(8):
        growth.allows_none(1)
        waits.append(growth.wait())
    assert waits == [FIRST_BACKOFF, 1.0, 2.0, 4.0, 8.0, LAST_BACKOFF, LAST_BACKOFF, LAST_BACKOFF]
    assert growth.refusal is not None
    assert growth.refusal.detail == (
        "upstream allows no streams (up:443 sent SETTINGS_MAX_CONCURRENT_STREAMS 0)"
    )
    now[0] += 4.0
    assert growth.wait() == LAST_BACKOFF - 4.0
    growth.allows_some()
    assert growth.wait() == 0 and growth.refusal is None
    growth.allows_none(2)
    assert growth.wait() == FIRST_BACKOFF  # a new episode starts from the first step


def test_the_bound_is_told_at_most_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    growth = PoolGrowth("up:443", 3, lambda: now[0])
    assert not growth.at_limit(2)
    assert growth.at_limit(3) and growth.at_limit(3)
    now[0] += 59.0
    assert growth.at_limit(3)
    assert caplog.text.count("limit reached") == 1
    now[0] += 1.0
    assert growth.at_limit(4)
    assert caplog.text.count("limit reached") == 2


async def test_a_freed_slot_is_handed_over_from_the_loop_and_nobody_takes_it_ahead() -> None:
    """A connection tells the pool of a freed slot within its own call (amid the
    peer's frames): the pool hands it to the request waiting first from the loop,
    not from within that call; meanwhile a new request does not take it ahead."""
    async with open_pool(max_streams=1, full_and_held=True) as (dialer, pool):
        first = asyncio.create_task(pool.acquire())
        await settle()
        conn = dialer.conns[0]
        conn.end_stream()
        assert not first.done() and conn.reserved == 0, "handed over within the connection's call"
        assert pool.try_acquire() is None  # a newcomer waits behind `first`
        await settle()
        assert first.done() and first.result().conn is conn
