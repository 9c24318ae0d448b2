"""The upstream's handler: serves each kind of request and counts, per request id,
what arrived and what was processed."""

from __future__ import annotations

import asyncio
import hashlib
import random

from h2.errors import ErrorCodes

from h2ping.testing import (
    ScriptedConnection,
    ScriptedRequest,
    ScriptedUpstream,
    StreamClosed,
)
from scenarios.soak.settings import (
    BLOB,
    REFUSE_RATE,
)


class SoakServer:
    """The upstream's handler: serves each kind and records what it processed.

    Arrivals and processings are counted per request id in byte arrays (one byte
    per request), so the bookkeeping of a long run does not grow RSS noticeably.
    """

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.arrivals = bytearray()
        self.processed = bytearray()
        self.refused = 0
        self.not_processed_after_goaway = 0
        #: Per server connection: the highest stream id processed there. A GOAWAY
        #: must never name a lower last_stream_id (that would be a lie).
        self.max_processed: dict[ScriptedConnection, int] = {}

    def prune(self, upstream: ScriptedUpstream) -> None:
        """Drop what the upstream recorded of finished connections and requests: it
        keeps every request it saw, which over minutes would look like a leak."""
        upstream.requests.clear()
        upstream.connections[:] = [c for c in upstream.connections if not c.closed]
        for conn in upstream.connections:
            conn.requests.clear()
        self.max_processed = {c: n for c, n in self.max_processed.items() if not c.closed}

    @staticmethod
    def _count(table: bytearray, rid: int) -> None:
        if rid >= len(table):
            table.extend(bytes(rid + 1024 - len(table)))
        table[rid] = min(255, table[rid] + 1)

    async def handle(self, request: ScriptedRequest) -> None:
        rid = int(request.header("x-request-id") or 0)
        self._count(self.arrivals, rid)
        if self.rng.random() < REFUSE_RATE:
            self.refused += 1
            request.reset(ErrorCodes.REFUSED_STREAM)
            return
        kind = request.path.split("/")[1]
        try:
            body = await request.body()
            if kind == "silent":
                await asyncio.sleep(float(request.header("x-delay") or 0))
            if not self._begin_processing(request, rid):
                return
            await self._respond(request, kind, body)
        except StreamClosed:
            pass  # the client went away, or its connection did

    def _begin_processing(self, request: ScriptedRequest, rid: int) -> bool:
        """Decide, in one step with no await, whether this request is processed."""
        conn = request.connection
        if request.closed:
            return False
        if conn.goaway_sent is not None and request.stream_id > conn.goaway_sent:
            # A GOAWAY went out before we started work: the stream was never
            # processed, as the GOAWAY promised.
            self.not_processed_after_goaway += 1
            request.reset(ErrorCodes.REFUSED_STREAM)
            return False
        self._count(self.processed, rid)
        self.max_processed[conn] = max(self.max_processed.get(conn, 0), request.stream_id)
        return True

    async def _respond(self, request: ScriptedRequest, kind: str, body: bytes) -> None:
        if kind == "small":
            await request.respond(200, [("content-length", str(len(body)))], body)
        elif kind in ("upload", "abort_upload"):
            await request.respond(200, body=hashlib.sha256(body).hexdigest().encode())
        elif kind == "download":
            offset = int(request.header("x-offset") or 0)
            size = int(request.header("x-size") or 0)
            payload = BLOB[offset : offset + size]
            await request.respond(200, [("content-length", str(size))], payload)
        elif kind in ("stream", "abort"):
            rid = request.header("x-request-id") or ""
            gap = float(request.header("x-gap") or 0)
            await request.send_headers(200)  # no content-length: chunked to the client
            for i in range(int(request.header("x-chunks") or 0)):
                await request.send_data(f"{rid}:{i}\n".encode())
                await asyncio.sleep(gap)
            await request.end()
        elif kind == "silent":
            await request.respond(200, body=b"silent:" + body)
        else:
            await request.respond(404, body=b"no such kind")
