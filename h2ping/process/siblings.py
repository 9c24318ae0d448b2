"""How worker 1 of ``--workers N``, which serves ``-admin-listen``, learns what the
other workers did.

Each worker owns its counters, in its own memory. Before forking, the parent makes
one socketpair per other worker, and each worker keeps only its own ends
(:class:`Links`). Worker 1 asks with one line, ``KIND ID``; the other worker
answers from its own event loop with one line, ``ID JSON``. KIND is ``metrics``
(the answer is its :class:`~h2ping.process.metrics.Snapshot`) or ``ready`` (why it does
not serve, or null). Worker 1 asks all of them at once and waits a short time: a
worker that is stuck or gone counts as not answering, never as a hang, and an
answer that comes too late is told apart by its id and dropped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import socket
from typing import Any, Protocol, cast

from .metrics import Observed, Snapshot

log = logging.getLogger("h2ping.admin")

#: Lines longer than these mean the other end is not ours: the link is dropped.
MAX_QUESTION_BYTES = 64
MAX_ANSWER_BYTES = 1024 * 1024


class Answering(Observed, Protocol):
    """What a worker's answers read of its proxy."""

    def not_serving(self) -> str | None: ...


@dataclasses.dataclass
class Links:
    """One worker's ends of the socketpairs the parent made before forking."""

    instance: str  # the instance's name, without the worker's /index
    workers: int
    #: A worker other than 1: where worker 1 asks it.
    answer_on: socket.socket | None = None
    #: Worker 1: its end towards each other worker, by the worker's index.
    ask: dict[int, socket.socket] = dataclasses.field(default_factory=dict)


async def answer_siblings(proxy: Answering, sock: socket.socket) -> asyncio.BaseTransport:
    """Answer worker 1's questions about ``proxy`` on ``sock``; closing the returned
    transport stops it."""
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_unix_connection(lambda: _Answerer(proxy), sock=sock)
    return transport


class _Answerer(asyncio.Protocol):
    def __init__(self, proxy: Answering) -> None:
        self._proxy = proxy
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        *lines, self._buffer = (self._buffer + data).split(b"\n")
        if len(self._buffer) > MAX_QUESTION_BYTES:
            log.warning("worker 1 sent a question we cannot read: dropping the link")
            self._transport.abort()
            return
        for line in lines:
            kind, _, ident = line.decode("ascii", "replace").partition(" ")
            if not ident.isdigit():
                continue
            answer = json.dumps(self._answer(kind), separators=(",", ":"))
            self._transport.write(f"{ident} {answer}\n".encode())

    def _answer(self, kind: str) -> dict[str, Any]:
        if kind == "metrics":
            return Snapshot.of(self._proxy).to_json()
        if kind == "ready":
            return {"not_serving": self._proxy.not_serving()}
        return {"error": f"unknown question {kind!r}"}


class Siblings:
    """Worker 1's side: asks the other workers, each over its own link."""

    def __init__(self, links: Links) -> None:
        self.instance = links.instance
        self.workers = links.workers
        self._socks = links.ask
        self._askers: dict[int, _Asker] = {}

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for index, sock in self._socks.items():
            _, asker = await loop.create_unix_connection(
                functools.partial(_Asker, index), sock=sock
            )
            self._askers[index] = asker

    def close(self) -> None:
        for asker in self._askers.values():
            asker.close()

    async def snapshots(self, timeout: float) -> list[Snapshot]:
        """The snapshots of the workers that answered within ``timeout``."""
        answers = await self._ask_all("metrics", timeout)
        out = []
        for index, answer in answers.items():
            if answer is None:
                continue
            try:
                out.append(Snapshot.from_json(answer))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                log.error("worker %d sent metrics that cannot be read: %r", index, exc)
        return out

    async def not_ready(self, timeout: float) -> str | None:
        """Why some other worker does not serve (the first by index), or None."""
        answers = await self._ask_all("ready", timeout)
        for index, answer in answers.items():
            if answer is None:
                return self._askers[index].silence(timeout)
            reason = answer.get("not_serving")
            if reason is not None:
                return f"worker {index}: {reason}"
        return None

    async def _ask_all(self, kind: str, timeout: float) -> dict[int, dict[str, Any] | None]:
        askers = list(self._askers.values())
        answers = await asyncio.gather(*(asker.ask(kind, timeout) for asker in askers))
        return {asker.index: answer for asker, answer in zip(askers, answers, strict=True)}


class _Asker(asyncio.Protocol):
    """Worker 1's end of the link to one other worker."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.gone = False  # the link is closed: the worker exited, or we are stopping
        self._transport: asyncio.Transport | None = None
        self._buffer = b""
        self._pending: dict[int, asyncio.Future[dict[str, Any] | None]] = {}
        self._last_id = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.gone:
            log.debug("worker %d closed its metrics link", self.index)
        self.gone = True
        for future in self._pending.values():
            if not future.done():
                future.set_result(None)

    def close(self) -> None:
        self.gone = True
        if self._transport is not None:
            self._transport.close()

    def silence(self, timeout: float) -> str:
        """Why this worker gave no answer, for /readyz."""
        if self.gone:
            return f"worker {self.index} is gone (its link is closed)"
        return f"worker {self.index} did not answer within {timeout:g}s"

    def data_received(self, data: bytes) -> None:
        *lines, self._buffer = (self._buffer + data).split(b"\n")
        if len(self._buffer) > MAX_ANSWER_BYTES:
            log.error("worker %d sent an answer we cannot read: dropping the link", self.index)
            self.close()
            return
        for line in lines:
            ident, _, payload = line.partition(b" ")
            future = self._pending.get(int(ident)) if ident.isdigit() else None
            if future is None or future.done():
                continue  # too late: the scrape that asked has given up
            try:
                value = json.loads(payload)
            except ValueError:
                value = None
            future.set_result(value if isinstance(value, dict) else None)

    async def ask(self, kind: str, timeout: float) -> dict[str, Any] | None:
        """The answer, or None if none came within ``timeout`` seconds."""
        if self.gone or self._transport is None:
            return None
        self._last_id += 1
        ident = self._last_id
        future = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        self._transport.write(f"{kind} {ident}\n".encode())
        try:
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            log.warning("worker %d did not answer within %gs", self.index, timeout)
            return None
        finally:
            del self._pending[ident]
