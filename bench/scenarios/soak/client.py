"""The clients and what they observe: each request checked by its body, h2ping's log
lines and the event loop's exception handler, kept for the report."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import logging
import random
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from h2ping.testing import (
    ScriptedConnection,
)
from scenarios.soak.settings import (
    BLOB,
    HANG_AFTER,
    KINDS,
    SILENT_DELAY,
)


@dataclass
class Tally:
    sent: int = 0
    succeeded: int = 0
    aborted: int = 0  # deliberately, by the client
    hung: int = 0
    corrupted: int = 0
    by_kind: collections.Counter[str] = field(default_factory=collections.Counter)
    failures: collections.Counter[str] = field(default_factory=collections.Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    hung_ids: list[str] = field(default_factory=list)

    def fail(self, cause: str, rid: int, kind: str) -> None:
        self.failures[cause] += 1
        self.examples.setdefault(cause, []).append(f"{kind}/{rid}")

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


class ProxyLog(logging.Handler):
    """Counts log records; keeps h2ping's per-request failure causes and every ERROR."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self.cause_by_rid: dict[int, str] = {}
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[(record.name, record.levelname)] += 1
        # h2ping's line for a failed request: "<METHOD /kind/id ...>: 502 <cause>" or
        # "...: response aborted after headers: <cause>" (parsed loosely: the
        # prefix around the path may change).
        if record.name == "h2ping.exchange" and record.levelno >= logging.WARNING:
            message = record.getMessage()
            rid = re.search(r" /[a-z_]+/(\d+)\b", message)
            cause = re.search(r"(?:response aborted after headers: |: 502 )(.*)", message)
            if rid and cause:
                self.cause_by_rid[int(rid[1])] = cause[1]
        if record.levelno >= logging.ERROR:
            self.errors.append(f"{record.name}: {record.getMessage()}")
            if record.exc_info:
                self.errors[-1] += "\n" + logging.Formatter().formatException(record.exc_info)


def normalise(text: str) -> str:
    """A failure cause without its numbers, so equal causes group together."""
    return re.sub(r"\d+(\.\d+)?", "N", text)[:160]


class LoopErrors:
    """The event loop's exception handler. Errors of the scripted upstream (a test
    tool, not h2ping) are kept apart: they show as failures of the requests on the
    connection they drop, but they are no fault of the proxy."""

    def __init__(self) -> None:
        self.proxy: list[str] = []
        self.upstream_tool: list[str] = []

    def __call__(self, _: asyncio.AbstractEventLoop, ctx: dict[str, Any]) -> None:
        detail = [str(ctx.get("message"))]
        detail += [f"{k}={ctx[k]!r}" for k in ("exception", "protocol", "task") if k in ctx]
        tool = isinstance(ctx.get("protocol"), ScriptedConnection)
        (self.upstream_tool if tool else self.proxy).append(" ".join(detail))


class Truncated(Exception):
    def __init__(self, exc: BaseException) -> None:
        super().__init__(type(exc).__name__)
        self.exc = exc


class Client:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        rng: random.Random,
        proxy_log: ProxyLog,
    ) -> None:
        self.session = session
        self.url = url
        self.rng = rng
        self.log = proxy_log
        self.tally = Tally()
        self._next_id = 1
        self._kinds = list(KINDS)
        self._weights = list(KINDS.values())

    async def worker(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            rid = self._next_id
            self._next_id += 1
            kind = self.rng.choices(self._kinds, self._weights)[0]
            await self.one(rid, kind)
            await asyncio.sleep(self.rng.uniform(0.0, 0.3))

    async def one(self, rid: int, kind: str) -> None:
        tally = self.tally
        tally.sent += 1
        tally.by_kind[kind] += 1
        method, headers, data, expected, abort_after = self._build(rid, kind)
        call = asyncio.ensure_future(self._exchange(method, f"/{kind}/{rid}", headers, data))
        try:
            async with asyncio.timeout(HANG_AFTER):
                if abort_after is not None:
                    done, _ = await asyncio.wait({call}, timeout=abort_after)
                    if not done:
                        call.cancel()
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await call
                        tally.aborted += 1
                        return
                status, proxy_status, body = await call
        except TimeoutError:
            call.cancel()
            tally.hung += 1
            tally.hung_ids.append(f"{kind}/{rid}")
            return
        except Truncated as exc:
            logged = self.log.cause_by_rid.get(rid)
            cause = normalise(logged) if logged else f"no h2ping log line ({exc})"
            tally.fail(f"cut after headers: {cause}", rid, kind)
            return
        except (aiohttp.ClientError, OSError) as exc:
            tally.fail(f"no response: {type(exc).__name__}: {normalise(str(exc))}", rid, kind)
            return
        if status == 502:
            match = re.search(r'error=([\w-]+); details="(.*)"', proxy_status)
            cause = f"{match[1]}: {match[2]}" if match else proxy_status or "no Proxy-Status"
            tally.fail(f"502 {normalise(cause)}", rid, kind)
        elif status != 200:
            tally.fail(f"status {status}", rid, kind)
        elif body != expected:
            tally.corrupted += 1
            tally.fail("corrupted body", rid, kind)
        else:
            tally.succeeded += 1

    async def _exchange(
        self, method: str, path: str, headers: dict[str, str], data: Any
    ) -> tuple[int, str, bytes]:
        async with self.session.request(method, self.url + path, headers=headers, data=data) as r:
            try:
                body = await r.read()
            except (aiohttp.ClientError, OSError) as exc:
                raise Truncated(exc) from None
            return r.status, r.headers.get("proxy-status", ""), body

    def _build(self, rid: int, kind: str) -> tuple[str, dict[str, str], Any, bytes, float | None]:
        """method, headers, body, the expected response body, abort-after (seconds)."""
        rng = self.rng
        headers = {"x-request-id": str(rid)}
        if kind == "small":
            body = rng.randbytes(rng.randint(0, 4000))
            return "POST", headers, body, body, None
        if kind == "upload":
            offset, size = rng.randint(0, 1024), rng.randint(256 * 1024, 1024 * 1024)
            body = BLOB[offset : offset + size]
            return "POST", headers, body, hashlib.sha256(body).hexdigest().encode(), None
        if kind == "download":
            offset, size = rng.randint(0, 1024), rng.randint(1024 * 1024, 4 * 1024 * 1024 - 1024)
            headers |= {"x-offset": str(offset), "x-size": str(size)}
            return "GET", headers, None, BLOB[offset : offset + size], None
        if kind in ("stream", "abort"):
            chunks, gap = (rng.randint(5, 30), 0.02) if kind == "stream" else (30, 0.1)
            headers |= {"x-chunks": str(chunks), "x-gap": str(gap)}
            expected = b"".join(f"{rid}:{i}\n".encode() for i in range(chunks))
            abort_after = rng.uniform(0.05, 2.5) if kind == "abort" else None
            return "GET", headers, None, expected, abort_after
        if kind == "silent":
            headers["x-delay"] = f"{rng.uniform(*SILENT_DELAY):.2f}"
            body = b"%d" % rid
            return "POST", headers, body, b"silent:" + body, None
        # abort_upload: a chunked upload the client gives up on halfway.
        return "POST", headers, _slow_upload(), b"", rng.uniform(0.1, 1.5)


async def _slow_upload() -> AsyncIterator[bytes]:
    for i in range(40):
        yield BLOB[i * 65536 : (i + 1) * 65536]
        await asyncio.sleep(0.05)
