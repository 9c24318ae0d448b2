"""TCP relays that behave like the middleboxes h2ping exists to survive.

A relay listens on 127.0.0.1 and forwards each accepted connection to a target.
Only application bytes that cross it count as activity: kernel keepalive probes
never reach user space, exactly as at a real middlebox such as AWS Global
Accelerator.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct


class _Flow:
    """One relayed connection: two sockets and the pumps between them."""

    def __init__(
        self, relay: Relay, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter
    ) -> None:
        self.relay = relay
        self.client = client
        self.upstream = upstream
        self.last_activity = asyncio.get_running_loop().time()
        self.tasks: list[asyncio.Task[None]] = []
        self.forwarding = asyncio.Event()
        self.forwarding.set()

    def reset(self) -> None:
        """Close both sides with RST, as a middlebox dropping state does."""
        for writer in (self.client, self.upstream):
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()

    def close(self) -> None:
        """Both directions are over: release both sockets."""
        self.client.close()
        self.upstream.close()


class Relay:
    """Forward TCP to ``target_host:target_port``.

    ``throttle``: at most this many bytes per second from upstream to client, so
    DATA can queue ahead of a PING ACK. ``idle_cut``: reset a flow once no
    application byte crossed it, either way, for this many seconds.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        idle_cut: float | None = None,
        throttle: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.idle_cut = idle_cut
        self.throttle = throttle
        self.host = host
        self.port = port
        self.flows_accepted = 0
        self.flows_cut = 0
        self.bytes_to_client = 0
        self._flows: set[_Flow] = set()
        self._handlers: set[asyncio.Task[None]] = set()  # one per accepted connection
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Reset every open flow and wait until all of them are gone."""
        if self._server is not None:
            self._server.close()
        handlers = list(self._handlers)
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> Relay:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def _accept(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        # asyncio runs this in a task of its own, which only stop() (or the loop
        # closing) cancels. It must end without an exception even then: before
        # Python 3.13 asyncio reports a cancelled connection callback with a
        # CancelledError traceback.
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._relay(client_reader, client)
        except asyncio.CancelledError:
            pass
        finally:
            self._handlers.discard(task)

    async def _relay(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        try:
            up_reader, upstream = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:  # the target refused: so does the relay
            client.transport.abort()
            return
        except asyncio.CancelledError:
            client.transport.abort()
            raise
        self.flows_accepted += 1
        flow = _Flow(self, client, upstream)
        self._flows.add(flow)
        pumps = [
            asyncio.create_task(self._pump(flow, client_reader, upstream, to_client=False)),
            asyncio.create_task(self._pump(flow, up_reader, client, to_client=True)),
        ]
        flow.tasks = list(pumps)
        if self.idle_cut is not None:
            flow.tasks.append(asyncio.create_task(self._watch_idle(flow, self.idle_cut)))
        try:
            await asyncio.gather(*pumps, return_exceptions=True)
        except asyncio.CancelledError:
            flow.reset()
            raise
        finally:
            # Both directions are over (closed, or cut): a closed flow is not idle,
            # and its sockets are released.
            for task in flow.tasks:
                task.cancel()
            await asyncio.gather(*flow.tasks, return_exceptions=True)
            flow.close()
            self._flows.discard(flow)

    async def _pump(
        self,
        flow: _Flow,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        to_client: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        throttle = self.throttle if to_client else None
        chunk_size = min(16384, max(1, throttle // 20)) if throttle else 65536
        try:
            while True:
                await flow.forwarding.wait()
                data = await reader.read(chunk_size)
                if not data:
                    break
                await flow.forwarding.wait()  # a vanished peer: hold what was read
                flow.last_activity = loop.time()
                writer.write(data)
                await writer.drain()
                if to_client:
                    self.bytes_to_client += len(data)
                if throttle:
                    await asyncio.sleep(len(data) / throttle)
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            flow.reset()

    async def _watch_idle(self, flow: _Flow, idle_cut: float) -> None:
        loop = asyncio.get_running_loop()
        while True:
            remaining = flow.last_activity + idle_cut - loop.time()
            if remaining <= 0:
                self.flows_cut += 1
                flow.reset()
                return
            await asyncio.sleep(min(remaining, 0.05) + 0.001)


class IdleCutRelay(Relay):
    """Resets a flow after ``idle_cut`` seconds without application bytes."""

    def __init__(
        self, target_host: str, target_port: int, idle_cut: float, **options: object
    ) -> None:
        super().__init__(target_host, target_port, idle_cut=idle_cut, **options)  # type: ignore[arg-type]


class BlackholeRelay(Relay):
    """Forwards until :meth:`blackhole`; from then on the flows open at that moment
    carry nothing and are never closed. Later connections work normally."""

    def blackhole(self) -> int:
        """Silence every open flow; returns how many."""
        for flow in self._flows:
            flow.forwarding.clear()
        return len(self._flows)
