"""The origin of the fault scenarios: h2ping.testing's ScriptedUpstream over TLS.

    cd bench && python -m load.fault_origin --port 8443 --cert CERT.pem --key KEY.pem

Every request carries ``?id=...``; the origin counts, per id, how often it arrived
and how often it was answered, so the bench can tell that no request was processed
twice and none was left hanging. Paths:

  /ok            200 with a body derived from the id (the client checks its hash);
                 held, like /big, until ``--hold`` requests have arrived (or 3 s)
  /big           200 with a header block of ``--big-header-kib`` KiB, sent first
                 once the hold ends; the ordinary answers follow 50 ms later
  /storm         the first one starts a storm of ``--storm-seconds``: meanwhile each
                 stream is refused (RST_STREAM REFUSED_STREAM, so never processed)
                 with probability ``--refuse``; others answer the body's sha256
  /upload        reads the whole body and answers its sha256

On SIGTERM or SIGINT it prints one JSON line with the counts and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import hashlib
import json
import random
import signal
import ssl
import time
from urllib.parse import parse_qs, urlsplit

import hpack
from h2.errors import ErrorCodes

from common.procs import run_on_uvloop
from h2ping.testing import ScriptedRequest, ScriptedUpstream

HOLD_LIMIT_S = 3.0  # the hold ends by then even if fewer requests came


def body_for(request_id: str) -> bytes:
    """The /ok body: 1 KiB that differs per id, so a mixed-up answer shows."""
    return hashlib.sha256(request_id.encode()).hexdigest().encode() * 16


def big_headers(kib: int) -> list[tuple[str, str]]:
    """Headers whose HPACK block is about ``kib`` KiB: random base64 values, which
    Huffman coding barely shrinks, 1 KiB each."""
    rng = random.Random(7)
    headers, encoder = [], hpack.Encoder()
    while len(encoder.encode(headers)) < kib * 1024:
        value = base64.b64encode(rng.randbytes(1024)).decode()[:1300]
        headers.append((f"x-big-{len(headers)}", value))
        encoder = hpack.Encoder()  # a fresh table, as the first response sees it
    return headers


class Origin:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.arrived: collections.Counter[str] = collections.Counter()
        self.answered: collections.Counter[str] = collections.Counter()
        self.refused = 0
        self.connection_of: dict[str, set[int]] = collections.defaultdict(set)
        self.rng = random.Random(args.seed)
        self.storm_until: float | None = None
        self.big = big_headers(args.big_header_kib)
        self.big_block_bytes = len(hpack.Encoder().encode(self.big))
        self.held = 0
        self.first_held_at: float | None = None
        self.release = asyncio.Event()
        self.big_sent = asyncio.Event()
        self.open = 0

    async def handle(self, request: ScriptedRequest) -> None:
        url = urlsplit(request.path)
        request_id = parse_qs(url.query).get("id", ["?"])[-1]
        self.arrived[request_id] += 1
        self.connection_of[request_id].add(request.connection.id)
        self.open += 1
        try:
            answered = await self.route(url.path, request, request_id)
        finally:
            self.open -= 1
        if answered:
            self.answered[request_id] += 1

    async def route(self, path: str, request: ScriptedRequest, request_id: str) -> bool:
        if path in ("/ok", "/big"):
            await self.hold()
            if path == "/big":
                await request.send_headers(200, [*self.big, ("content-length", "2")])
                await request.send_data(b"ok", end_stream=True)
                self.big_sent.set()
                return True
            if not self.big_sent.is_set():
                await asyncio.wait_for(self.big_sent.wait(), HOLD_LIMIT_S)
                await asyncio.sleep(0.05)  # the big block goes out (and lands) first
            body = body_for(request_id)
            await request.respond(200, [("content-length", str(len(body)))], body)
            return True
        if path == "/storm":
            now = time.monotonic()
            if self.storm_until is None:
                self.storm_until = now + self.args.storm_seconds
            if now < self.storm_until and self.rng.random() < self.args.refuse:
                self.refused += 1
                request.reset(ErrorCodes.REFUSED_STREAM)
                return False
            return await self.answer_hash(request)
        if path == "/upload":
            return await self.answer_hash(request)
        await request.respond(404, [("content-length", "0")])
        return True

    async def hold(self) -> None:
        """Hold /ok and /big until ``--hold`` of them arrived: all on one connection,
        all in flight, when the big header block goes out."""
        if self.release.is_set():
            return
        self.held += 1
        loop = asyncio.get_running_loop()
        if self.first_held_at is None:
            self.first_held_at = loop.time()
            loop.call_later(HOLD_LIMIT_S, self.release.set)
        if self.held >= self.args.hold:
            self.release.set()
        await self.release.wait()

    async def answer_hash(self, request: ScriptedRequest) -> bool:
        digest = hashlib.sha256()
        while chunk := await request.read():
            digest.update(chunk)
        body = digest.hexdigest().encode()
        await request.respond(200, [("content-length", str(len(body)))], body)
        return True

    def report(self) -> dict[str, object]:
        return {
            "requests": sum(self.arrived.values()),
            "ids": len(self.arrived),
            "arrived_more_than_once": sum(1 for n in self.arrived.values() if n > 1),
            "answered_more_than_once": sorted(i for i, n in self.answered.items() if n > 1),
            "refused": self.refused,
            "open_at_end": self.open,
            "answered": dict(self.answered),
            "connections": {i: sorted(c) for i, c in self.connection_of.items()},
            "big_block_bytes": self.big_block_bytes,
        }


async def serve(args: argparse.Namespace) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(args.cert, args.key)
    origin = Origin(args)
    server = ScriptedUpstream(
        origin.handle,
        ssl_context=context,
        port=args.port,
        max_concurrent_streams=1000,
        initial_window_size=args.window,
    )
    await server.start()
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    print(f"listening on 127.0.0.1:{server.port}", flush=True)
    await stop
    report = origin.report()  # before stop(): it cancels what is still open
    await server.stop()
    print(json.dumps(report), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--hold", type=int, default=21)
    parser.add_argument("--big-header-kib", type=int, default=120)
    parser.add_argument("--storm-seconds", type=float, default=10.0)
    parser.add_argument("--refuse", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--window", type=int, default=65535, help="stream receive window")
    args = parser.parse_args()
    run_on_uvloop(serve(args))


if __name__ == "__main__":
    main()
