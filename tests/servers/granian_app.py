"""The ASGI app Granian serves: the routes of backend.py. It runs in Granian's
worker process, so it counts requests in the file named by ``$IDS``."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

STREAM_CHUNKS = int(os.environ.get("STREAM_CHUNKS", "10"))
STREAM_GAP_MS = int(os.environ.get("STREAM_GAP_MS", "60"))
BIG_SIZE = 16 * 1024 * 1024
BIG = (bytes(range(251)) * (BIG_SIZE // 251 + 1))[:BIG_SIZE]

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


async def respond(send: Send, body: bytes) -> None:
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    headers = dict(scope["headers"])
    if b"x-id" in headers:
        # O_APPEND: one write per line, whole, whichever worker writes it.
        fd = os.open(os.environ["IDS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, headers[b"x-id"] + b"\n")
        os.close(fd)
    path = scope["path"]
    if path == "/hello":
        await respond(send, b"hello\n")
    elif path in ("/echo", "/slow", "/sha256"):
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if path == "/sha256":
            await respond(send, hashlib.sha256(body).hexdigest().encode())
            return
        ms = parse_qs(scope["query_string"].decode()).get("ms", ["0"])[0]
        await asyncio.sleep(int(ms) / 1000)
        await respond(send, bytes(body))
    elif path == "/big":
        await respond(send, BIG)
    elif path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(STREAM_CHUNKS):
            if i:
                await asyncio.sleep(STREAM_GAP_MS / 1000)
            await send(
                {"type": "http.response.body", "body": b"chunk %02d\n" % i, "more_body": True}
            )
        await send({"type": "http.response.body", "body": b""})
    else:
        await respond(send, b"")
