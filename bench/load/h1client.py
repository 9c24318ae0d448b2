"""A small HTTP/1.1 client for the fault scenarios: keep-alive, no header limits.

Clients such as aiohttp refuse header lines over 8 KiB; a proxy that passes a large
response header block on must be seen to do so, so this one parses with httptools
(no limits) and keeps every header.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import httptools

WRITE_CHUNK = 1 << 20


@dataclass
class Response:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    seconds: float = 0.0


@dataclass
class _Parse:
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: list[bytes] = field(default_factory=list)
    done: bool = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


class Connection:
    """One client connection to 127.0.0.1:port; requests go one after another."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self,
        method: str,
        path: str,
        headers: list[tuple[str, str]] = (),  # type: ignore[assignment]
        body: bytes | memoryview | None = None,
        timeout: float = 30.0,
    ) -> Response:
        """Send one request and read its whole response; raises TimeoutError or
        ConnectionError (the connection is then closed)."""
        started = time.monotonic()
        try:
            response = await asyncio.wait_for(self._exchange(method, path, headers, body), timeout)
        except BaseException:
            self.close()
            raise
        response.seconds = time.monotonic() - started
        return response

    async def _exchange(
        self,
        method: str,
        path: str,
        headers: list[tuple[str, str]],
        body: bytes | memoryview | None,
    ) -> Response:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(
                "127.0.0.1", self.port, limit=1 << 20
            )
        assert self.reader is not None
        lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{self.port}"]
        lines += [f"{name}: {value}" for name, value in headers]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        if body is not None:
            view = memoryview(body)
            for start in range(0, len(view), WRITE_CHUNK):
                self.writer.write(view[start : start + WRITE_CHUNK])
                await self.writer.drain()
        await self.writer.drain()
        state = _Parse()
        parser = httptools.HttpResponseParser(state)
        while not state.done:
            data = await self.reader.read(1 << 18)
            if not data:
                raise ConnectionError("connection closed before the response ended")
            parser.feed_data(data)
        if not parser.should_keep_alive():
            self.close()
        return Response(parser.get_status_code(), state.headers, b"".join(state.body))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def fetch(
    port: int,
    method: str,
    path: str,
    headers: list[tuple[str, str]] = (),  # type: ignore[assignment]
    body: bytes | memoryview | None = None,
    timeout: float = 30.0,
) -> Response:
    """One request on a connection of its own, closed afterwards."""
    conn = Connection(port)
    try:
        return await conn.request(method, path, headers, body, timeout)
    finally:
        conn.close()
