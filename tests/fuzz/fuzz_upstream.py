"""The fuzzers' HTTP/2 harness: a raw upstream that plays a :class:`FramePlan`
of frames, valid or not, on the first connection of each example, behind a
proxy (:class:`H2Harness`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import hpack
from h2.errors import ErrorCodes

from h2ping import Proxy
from h2ping.testing import RawPeer, RawUpstream

from .fuzz_harness import Harness

_DATA, _HEADERS, _PRIORITY, _RST, _SETTINGS, _PUSH, _PING, _GOAWAY, _WINDOW, _CONT = range(10)
_END_STREAM, _ACK, _END_HEADERS, _PADDED = 0x1, 0x1, 0x4, 0x8


def frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    """A raw frame, whatever it says: hyperframe refuses to build invalid ones."""
    return (
        len(payload).to_bytes(3, "big")
        + bytes([kind, flags])
        + stream_id.to_bytes(4, "big")
        + payload
    )


@dataclass
class FramePlan:
    settings: dict[int, int]  # our first SETTINGS frame
    body: int  # the client's request body size (0: a GET)
    steps: list[tuple[Any, ...]]
    ending: str
    garbage: bytes

    def header_list_limited(self) -> bool:
        """Whether the plan's SETTINGS announce a header list limit smaller than
        the test's request heads: h2ping then answers them 431 itself."""
        maps = [self.settings] + [step[1] for step in self.steps if step[0] == "settings"]
        return any(m.get(6, 4096) < 4096 for m in maps)

    def statuses(self) -> set[int]:
        """Final statuses the plan's HEADERS frames could pass to the client."""
        return {
            int(step[2])
            for step in self.steps
            if step[0] == "headers" and step[2] and step[2].isdigit() and len(step[2]) == 3
        }


class FrameScripts:
    """The raw upstream's behaviour: the first connection of an example follows
    the example's plan; every other connection, and that one once its plan is
    played, answers each request with ``200 ok`` and acknowledges PINGs."""

    def __init__(self) -> None:
        self.plan: FramePlan | None = None
        self.running = 0
        self.settled = asyncio.Event()  # the planned connection plays well, or is gone
        self.errors: list[str] = []

    def next_example(self, plan: FramePlan) -> None:
        self.plan = plan
        self.settled = asyncio.Event()

    async def __call__(self, peer: RawPeer) -> None:
        plan, self.plan = self.plan, None
        settled = self.settled if plan is not None else None
        self.running += 1
        try:
            await self._play(peer, plan, settled)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception as exc:  # a bug of this script, not of h2ping
            self.errors.append(repr(exc))
        finally:
            self.running -= 1
            if settled is not None:
                settled.set()

    async def _play(
        self, peer: RawPeer, plan: FramePlan | None, settled: asyncio.Event | None
    ) -> None:
        await peer.handshake(plan.settings if plan else {3: 100})
        # The first request may come right behind the proxy's preface, before it
        # has seen our SETTINGS: our HEADER_TABLE_SIZE binds the blocks after it.
        stream_id, _ = await peer.read_request()
        if plan is not None and 1 in plan.settings:
            peer.decoder.max_allowed_table_size = plan.settings[1]
        if plan is None:
            await self._answer(peer, stream_id)
            await self._serve(peer)
            return
        for step in plan.steps:
            if step[0] == "pause":
                await peer.drain()
                await asyncio.sleep(0.005)
            else:
                peer.send(self._render(peer, step, stream_id))
        ending = plan.ending
        if ending in ("answer", "reset"):
            if ending == "answer":
                await self._answer(peer, stream_id)
            else:
                peer.send(
                    frame(_RST, 0, stream_id, int(ErrorCodes.INTERNAL_ERROR).to_bytes(4, "big"))
                )
            assert settled is not None
            settled.set()
            await self._serve(peer)
        elif ending == "goaway":
            last = max(stream_id - 2, 0).to_bytes(4, "big")
            peer.send(frame(_GOAWAY, 0, 0, last + b"\x00\x00\x00\x02"))
        elif ending == "abort":
            peer.writer.transport.abort()
        elif ending == "silent":  # a vanished peer: read, never answer, not even PINGs
            while await peer.reader.read(65536):
                pass
        elif ending == "garbage":
            peer.send(plan.garbage)
        # "close", "goaway", "garbage": RawUpstream closes the socket when we return.

    @staticmethod
    async def _answer(peer: RawPeer, stream_id: int) -> None:
        peer.send(peer.headers_frame(stream_id, [(":status", "200"), ("content-length", "2")]))
        peer.send(frame(_DATA, _END_STREAM, stream_id, b"ok"))
        await peer.drain()

    async def _serve(self, peer: RawPeer) -> None:
        """Behave: answer requests, acknowledge PINGs and SETTINGS."""
        while True:
            header = await peer.reader.readexactly(9)
            length = int.from_bytes(header[:3], "big")
            kind, flags = header[3], header[4]
            stream_id = int.from_bytes(header[5:9], "big") & 0x7FFFFFFF
            payload = await peer.reader.readexactly(length)
            if kind == _HEADERS:
                try:
                    peer.decoder.decode(_header_block(flags, payload))
                except hpack.HPACKError:
                    return  # we lost track of the proxy's header table: hang up
                await self._answer(peer, stream_id)
            elif kind == _PING and not flags & _ACK:
                peer.send(frame(_PING, _ACK, 0, payload))
            elif kind == _SETTINGS and not flags & _ACK:
                peer.send(frame(_SETTINGS, _ACK, 0, b""))

    @staticmethod
    def _render(peer: RawPeer, step: tuple[Any, ...], ours: int) -> bytes:
        kind, *args = step

        def sid(ref: str) -> int:
            return {"ours": ours, "zero": 0, "idle": ours + 2, "even": ours + 1}.get(ref, 2**31 - 1)

        if kind == "headers":
            ref, status, extra, end_stream, end_headers = args
            fields = ([(":status", status)] if status is not None else []) + list(extra)
            block = peer.encoder.encode(fields)
            flags = (_END_STREAM if end_stream else 0) | (_END_HEADERS if end_headers else 0)
            return frame(_HEADERS, flags, sid(ref), block)
        if kind == "data":
            ref, size, end_stream, pad = args
            flags = _END_STREAM if end_stream else 0
            payload = b"d" * size
            if pad is not None:
                flags |= _PADDED
                payload = bytes([pad]) + payload + b"\x00" * pad
            return frame(_DATA, flags, sid(ref), payload)
        if kind == "rst":
            return frame(_RST, 0, sid(args[0]), args[1].to_bytes(4, "big"))
        if kind == "window":
            return frame(_WINDOW, 0, sid(args[0]), args[1].to_bytes(4, "big"))
        if kind == "settings":
            values, ack = args
            payload = b"".join(
                k.to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in values.items()
            )
            if 1 in values:
                peer.decoder.max_allowed_table_size = max(
                    peer.decoder.max_allowed_table_size, values[1]
                )
            return frame(_SETTINGS, _ACK if ack else 0, 0, payload)
        if kind == "ping":
            count, ack, length = args
            return frame(_PING, _ACK if ack else 0, 0, b"p" * length) * count
        if kind == "goaway":
            ref, code, debug = args
            last = {"ours": ours, "below": max(ours - 2, 0), "zero": 0}.get(ref, 2**31 - 1)
            return frame(_GOAWAY, 0, 0, last.to_bytes(4, "big") + code.to_bytes(4, "big") + debug)
        if kind == "push":
            block = peer.encoder.encode([(":method", "GET"), (":path", "/pushed")])
            return frame(_PUSH, _END_HEADERS, sid(args[0]), (ours + 1).to_bytes(4, "big") + block)
        if kind == "priority":
            return frame(_PRIORITY, 0, sid(args[0]), args[1].to_bytes(4, "big") + b"\x10")
        if kind == "continuation":
            return frame(_CONT, _END_HEADERS, sid(args[0]), peer.encoder.encode([("x-c", "1")]))
        return frame(args[0], 0, 0, args[1])  # an unknown frame type: to be ignored


def _header_block(flags: int, payload: bytes) -> bytes:
    """The header block of a HEADERS frame: without its padding and priority fields."""
    start = (1 + payload[0] if flags & _PADDED else 0) + (5 if flags & 0x20 else 0)
    end = len(payload) - (payload[0] if flags & _PADDED else 0)
    return payload[start:end]


class H2Harness(Harness):
    def __init__(self, loop_kind: str) -> None:
        super().__init__(loop_kind)
        self.run(self._start())

    async def _start(self) -> None:
        self.scripts = FrameScripts()
        self.upstream = RawUpstream(self.scripts)
        await self.upstream.start()
        self.proxy = Proxy(
            upstream=self.upstream.url,
            listen="127.0.0.1:0",
            ping_interval=0.2,
            ping_timeout=0.3,
            connect_timeout=2.0,
            shutdown_grace=0.0,
        )
        await self.proxy.start()
        self.snapshot_tasks()

    def leftovers(self) -> dict[str, object]:
        proxy = self.proxy
        assert proxy.pool is not None
        return {
            "exchanges": len(proxy.exchanges),
            "client connections": len(proxy.clients),
            "kept body bytes": proxy.retry_budget.used,
            "pool connections": len(proxy.pool.connections),
            "upstream scripts": self.scripts.running,
        }

    def close(self) -> None:
        self.run(self.proxy.stop(grace=0))
        self.run(self.upstream.stop())
        super().close()
