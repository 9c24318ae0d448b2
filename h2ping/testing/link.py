"""A long link on one machine: a TCP relay that delays each direction.

Where the kernel has no netem, a user-space relay stands in for a path tens of
milliseconds long: every chunk read from one side is written to the other a
fixed one-way delay later, in order, and optionally no faster than a bandwidth
cap. Handshakes, windows and round trips then cost what they cost across the
internet, so a proxy's behaviour there can be measured and tested on loopback.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib

#: Bytes a direction may hold in flight before the relay stops reading its sender:
#: a window of this size fills an 80 ms link at 800 MB/s, and memory stays bounded.
MAX_IN_FLIGHT = 64 * 1024 * 1024


class _Direction:
    """Bytes from one side, each chunk due at the other a delay after it arrived."""

    def __init__(self, link: DelayLink, source: _Side) -> None:
        self._loop = asyncio.get_running_loop()
        self._link = link
        self._source = source
        self.sink: _Side | None = None  # until the link reaches the target
        self._queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self._queued = 0
        self._timer: asyncio.TimerHandle | None = None
        self._free_at = 0.0  # when the bandwidth cap has sent the bytes before
        self._end: str | None = None  # "eof" or "close": what follows the last byte

    @property
    def pending(self) -> bool:
        return bool(self._queue)

    def add(self, data: bytes) -> None:
        now = self._loop.time()
        sent_at = now
        if self._link.rate:  # the bytes leave one after another, at the cap
            self._free_at = sent_at = max(self._free_at, now) + len(data) / self._link.rate
        self._queue.append((sent_at + self._link.one_way, data))
        self._queued += len(data)
        if self._queued > MAX_IN_FLIGHT:
            self._source.pause()
        self.schedule()

    def finish(self, how: str) -> None:
        """After the last byte queued: ``eof`` (a half-close) or ``close``."""
        self._end = how
        self.schedule()

    def schedule(self) -> None:
        if self._timer is None and self.sink is not None and (self._queue or self._end):
            due = self._queue[0][0] if self._queue else self._loop.time()
            self._timer = self._loop.call_at(due, self._deliver)

    def _deliver(self) -> None:
        self._timer = None
        sink = self.sink
        assert sink is not None  # scheduled only with one
        now = self._loop.time()
        while self._queue and self._queue[0][0] <= now:
            _, data = self._queue.popleft()
            self._queued -= len(data)
            sink.write(data)
        if self._queued <= MAX_IN_FLIGHT // 2:
            self._source.resume()
        if not self._queue and self._end is not None:
            sink.close() if self._end == "close" else sink.write_eof()
            self._end = None
        self.schedule()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._queue.clear()
        self._queued = 0
        self._end = None


class _Side(asyncio.Protocol):
    """One socket of a relayed connection; what it reads goes the other way, late."""

    def __init__(self, link: DelayLink) -> None:
        self.link = link
        self.transport: asyncio.Transport | None = None
        self.outbound = _Direction(link, self)  # what this side read, on its way
        self.peer: _Side | None = None
        self._paused = False

    def join(self, peer: _Side) -> None:
        self.peer, peer.peer = peer, self
        self.outbound.sink, peer.outbound.sink = peer, self
        self.outbound.schedule()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.outbound.add(data)

    def eof_received(self) -> bool:
        self.outbound.finish("eof")
        return True  # half-closed: the other way may still carry bytes

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.sides.discard(self)
        self.transport = None
        peer = self.peer
        if peer is None:
            self.outbound.cancel()
        elif exc is not None:  # reset: so is the other side, at once
            self.outbound.cancel()
            peer.outbound.cancel()
            peer.abort()
        else:  # what this side sent still arrives, then the other side closes
            peer.outbound.cancel()  # nobody to deliver to here any more
            self.outbound.finish("close")

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def write_eof(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            with contextlib.suppress(OSError, RuntimeError):
                if self.transport.can_write_eof():
                    self.transport.write_eof()
                else:
                    self.transport.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None and not self.transport.is_closing():
            self._paused = False
            self.transport.resume_reading()


class DelayLink:
    """Forward TCP from ``host:port`` to ``target_host:target_port`` with ``rtt``
    seconds of round trip (half each way), and at most ``rate`` bytes a second
    each way when given. TCP's own handshake is not delayed (the kernel completes
    it at the relay): every byte after it is.

    ::

        async with DelayLink("127.0.0.1", origin_port, rtt=0.08) as link:
            ...  # connect to link.port: 80 ms each round trip
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        rtt: float,
        rate: float | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.one_way = rtt / 2
        self.rate = rate
        self.host = host
        self.port = port
        self.sides: set[_Side] = set()
        self._server: asyncio.Server | None = None
        self._joining: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._accepted, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop accepting and cut every relayed connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._joining):
            task.cancel()
        for side in list(self.sides):
            side.abort()
        await asyncio.sleep(0)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> DelayLink:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _accepted(self) -> _Side:
        client = _Side(self)
        self.sides.add(client)
        task = asyncio.get_running_loop().create_task(self._join(client))
        self._joining.add(task)
        task.add_done_callback(self._joining.discard)
        return client

    async def _join(self, client: _Side) -> None:
        """Reach the target; what the client sent meanwhile waits in its queue."""
        upstream = _Side(self)
        try:
            loop = asyncio.get_running_loop()
            await loop.create_connection(lambda: upstream, self.target_host, self.target_port)
        except OSError:
            client.abort()
            return
        if client.transport is None:  # the client left meanwhile
            upstream.close()
            return
        self.sides.add(upstream)
        client.join(upstream)
