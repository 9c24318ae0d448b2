"""Fault injection on a schedule (GOAWAYs, abrupt closes, vanished flows), and the
idle-cut relay that tells cuts of live flows from cleanups."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any

from h2ping import Proxy
from h2ping.testing import (
    BlackholeRelay,
    IdleCutRelay,
    ScriptedConnection,
    ScriptedUpstream,
)
from scenarios.soak.settings import (
    PING_INTERVAL,
    PING_TIMEOUT,
)
from scenarios.soak.upstream import SoakServer


@dataclass
class FaultCounts:
    goaways: int = 0
    two_step_goaways: int = 0
    abrupt_closes: int = 0
    blackholed: int = 0


class Faults:
    """Periodic fault injection on the upstream and the relay in front of it."""

    def __init__(
        self,
        upstream: ScriptedUpstream,
        server: SoakServer,
        blackhole: BlackholeRelay,
        rng: random.Random,
    ) -> None:
        self.upstream = upstream
        self.server = server
        self.blackhole = blackhole
        self.rng = rng
        self.counts = FaultCounts()
        self._silenced: dict[Any, asyncio.TimerHandle] = {}

    def _open_conns(self) -> list[ScriptedConnection]:
        return [c for c in self.upstream.connections if not c.closed]

    async def run(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(3.0)  # let the pool warm up first
        schedule = {
            self._goaway: (2.0, 6.0),
            self._abrupt_close: (15.0, 35.0),
            self._vanish: (30.0, 60.0),
        }
        due = {fault: loop.time() + self.rng.uniform(*gap) for fault, gap in schedule.items()}
        try:
            while loop.time() < until:
                fault, when = min(due.items(), key=lambda item: item[1])
                await asyncio.sleep(max(0.0, min(when, until) - loop.time()))
                if loop.time() >= until:
                    break
                fault()
                due[fault] = loop.time() + self.rng.uniform(*schedule[fault])
        finally:
            self.heal()

    def _goaway(self) -> None:
        candidates = [c for c in self._open_conns() if c.goaway_sent is None]
        if not candidates:
            return
        conn = self.rng.choice(candidates)
        self.counts.goaways += 1
        if self.rng.random() < 1 / 3:
            self.counts.two_step_goaways += 1
            conn.goaway(last_stream_id=2**31 - 1)
            asyncio.get_running_loop().call_later(0.5, self._final_goaway, conn)
        else:
            self._final_goaway(conn)

    def _final_goaway(self, conn: ScriptedConnection) -> None:
        if conn.closed:
            return
        # Anywhere between the last stream processed and the last stream seen:
        # streams above it were never started, so h2ping may replay them.
        low = self.server.max_processed.get(conn, 0)
        high = max(low, conn._h2.highest_inbound_stream_id)
        last = self.rng.randint(low, high)
        if last % 2 == 0 and last > low:
            last -= 1  # client stream ids are odd
        conn.goaway(last_stream_id=last)

    def _abrupt_close(self) -> None:
        conns = self._open_conns()
        if conns:
            self.counts.abrupt_closes += 1
            self.rng.choice(conns).close()

    def _vanish(self) -> None:
        # One flow only (BlackholeRelay.blackhole() would silence all of them).
        flows = [f for f in self.blackhole._flows if f not in self._silenced]
        if not flows:
            return
        flow = self.rng.choice(flows)
        flow.forwarding.clear()
        self.counts.blackholed += 1
        # A vanished peer's state is dropped eventually; by then h2ping must have
        # declared the connection dead (ping-interval + ping-timeout).
        self._silenced[flow] = asyncio.get_running_loop().call_later(
            PING_INTERVAL + PING_TIMEOUT + 2.0, self._drop, flow
        )

    def _drop(self, flow: Any) -> None:
        self._silenced.pop(flow, None)
        try:
            flow.reset()
        except ValueError:
            # uvloop: reset() cannot set SO_LINGER on a side that is already
            # closed (fd -1) and stops there; finish its work by hand.
            for writer in (flow.client, flow.upstream):
                writer.transport.abort()
            for task in flow.tasks:
                task.cancel()

    def heal(self) -> None:
        """Reset every flow still silenced, so the relay frees its sockets and tasks."""
        for flow, timer in list(self._silenced.items()):
            timer.cancel()
            self._drop(flow)


class WatchedIdleCutRelay(IdleCutRelay):
    """Tells real cuts from cleanups. A cut is live when h2ping still held an open
    connection on the flow: its PINGs should have made that impossible. A flow
    whose h2ping side had gone, but whose other side lingered, is a cleanup."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.proxy: Proxy | None = None
        self.live_cuts: list[str] = []

    async def _watch_idle(self, flow: Any, idle_cut: float) -> None:
        await super()._watch_idle(flow, idle_cut)
        # The flow was reset just now, within this loop turn: h2ping has not
        # noticed yet, so its connection on this flow is still in the pool.
        if self.proxy is None or self.proxy.pool is None:
            return
        try:
            proxy_end = flow.client.get_extra_info("peername")
            for conn in self.proxy.pool.connections:
                transport = conn._transport
                if transport is not None and transport.get_extra_info("sockname") == proxy_end:
                    self.live_cuts.append(
                        f"conn={conn.id} {conn.state.value} streams={conn.table.count()}"
                    )
        except Exception as exc:  # a check that breaks must not pass for a clean run
            self.live_cuts.append(f"could not tell whether the cut flow was live: {exc!r}")
