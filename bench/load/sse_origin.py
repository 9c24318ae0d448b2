"""An HTTP/2 (TLS) origin that streams server-sent events, for the streaming scenario.

    cd bench && python -m load.sse_origin --port 8443 --cert CERT.pem --key KEY.pem

``GET /sse?interval_ms=T&bytes=B[&n=N]`` answers 200 ``text/event-stream`` and sends
one event of B bytes every T ms: N events and then END_STREAM, or without ``n`` until
the client goes away. Each event is ``data: <seq> <sent> <padding>\\n\\n``, ``sent``
being CLOCK_MONOTONIC in microseconds when the event was written, so a client on the
same machine can tell each event's delay.

It must not be what limits the proxy under test, so the hot path avoids the ``h2``
library: frames are built and parsed here (a DATA frame is 9 bytes and the payload)
and hpack only codes the header blocks (once per stream). Each event is its own DATA
frame. By default a connection writes once per event-loop iteration, so the events
that fall due together leave in one write (one TLS record, read by the proxy at
once); with ``--flush-each`` every event is written on its own as it falls due, as
an origin that flushes each event does: one TLS record per event. Flow control is
honoured: an event that does not fit the windows waits in its stream's queue,
keeping its send time (the wait is delay).

On SIGTERM or SIGINT it prints one JSON line (streams, events sent, writes, how late
its timers ran) and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import signal
import ssl
import struct
import sys
import time
from urllib.parse import parse_qs, urlsplit

import hpack

from common.procs import run_on_uvloop

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0x0,
    0x1,
    0x3,
    0x4,
    0x6,
    0x7,
    0x8,
    0x9,
)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_MAX_CONCURRENT_STREAMS, SETTINGS_INITIAL_WINDOW_SIZE = 0x3, 0x4
SETTINGS_MAX_FRAME_SIZE = 0x5
FRAME_HEAD = struct.Struct(">I BI")  # length << 8 | type, flags, stream id
MAX_STREAMS = 1_000_000  # one connection carries every stream of the scenario
PADDING = b"x" * 65536
LATE_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return FRAME_HEAD.pack(len(payload) << 8 | kind, flags, stream_id) + payload


class Stats:
    def __init__(self) -> None:
        self.streams = 0
        self.events = 0
        self.writes = 0  # transport writes: TLS records, give or take
        self.queued_events = 0  # written later than built: the windows were closed
        self.late = [0] * (len(LATE_BUCKETS_MS) + 1)  # per tick: its most late event
        self.late_max_ms = 0.0

    def timer_late(self, ms: float) -> None:
        self.late_max_ms = max(self.late_max_ms, ms)
        for index, bound in enumerate(LATE_BUCKETS_MS):
            if ms <= bound:
                self.late[index] += 1
                return
        self.late[-1] += 1

    def report(self) -> dict[str, object]:
        total, seen, p99 = sum(self.late), 0, None
        for index, count in enumerate(self.late):
            seen += count
            if p99 is None and total and seen >= 0.99 * total:
                p99 = LATE_BUCKETS_MS[index] if index < len(LATE_BUCKETS_MS) else None
        return {
            "streams": self.streams,
            "events": self.events,
            "writes": self.writes,
            "events_per_write": round(self.events / self.writes, 2) if self.writes else None,
            "queued_events": self.queued_events,
            "timer_late_p99_ms_at_most": p99,
            "timer_late_max_ms": round(self.late_max_ms, 1),
        }


class Stream:
    __slots__ = ("due", "end_at", "id", "interval", "queue", "seq", "size", "window")

    def __init__(self, stream_id: int, window: int, interval: float, size: int, n: int) -> None:
        self.id = stream_id
        self.window = window
        self.interval = interval
        self.size = size
        self.end_at = n  # last seq, 0 for endless
        self.seq = 0
        self.due = 0.0
        self.queue: collections.deque[tuple[bytes, bool]] = collections.deque()


class Connection(asyncio.Protocol):
    def __init__(self, stats: Stats, flush_each: bool) -> None:
        self.stats = stats
        self.flush_each = flush_each
        self.loop = asyncio.get_running_loop()
        self.buf = bytearray()
        self.preface = False
        self.out = bytearray()
        self.flush_pending = False
        self.transport: asyncio.Transport | None = None
        self.decoder = hpack.Decoder()
        self.decoder.max_allowed_table_size = 65536
        self.encoder = hpack.Encoder()
        self.streams: dict[int, Stream] = {}
        self.blocked: set[int] = set()  # streams with queued events
        self.peer_initial_window = 65535
        self.conn_window = 65535
        self.max_frame = 16384
        self.continuing: tuple[int, bytearray] | None = None
        self.rings: dict[float, collections.deque[Stream]] = {}  # by interval
        self.timer: asyncio.TimerHandle | None = None
        self.timer_due = 0.0

    # I/O ----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        settings = struct.pack(">HI", SETTINGS_MAX_CONCURRENT_STREAMS, MAX_STREAMS)
        self.write(frame(SETTINGS, 0, 0, settings))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.streams.clear()
        self.rings.clear()
        self.transport = None

    def write(self, data: bytes) -> None:
        self.out += data
        if not self.flush_pending:
            self.flush_pending = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.flush_pending = False
        if self.out and self.transport is not None:
            self.transport.write(bytes(self.out))
            self.stats.writes += 1
        self.out.clear()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if not self.preface:
            if len(buf) < len(PREFACE):
                return
            if buf[: len(PREFACE)] != PREFACE:
                self.transport.close()  # type: ignore[union-attr]
                return
            del buf[: len(PREFACE)]
            self.preface = True
        pos, end = 0, len(buf)
        while end - pos >= 9:
            head, flags, stream_id = FRAME_HEAD.unpack_from(buf, pos)
            length = head >> 8
            if end - pos - 9 < length:
                break
            payload = bytes(buf[pos + 9 : pos + 9 + length])
            pos += 9 + length
            self.on_frame(head & 0xFF, flags, stream_id & 0x7FFFFFFF, payload)
            if self.transport is None:
                return
        del buf[:pos]

    # frames -------------------------------------------------------------------------
    def on_frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            if stream_id == 0:
                self.conn_window += increment
                for blocked in list(self.blocked):
                    self.drain(self.streams.get(blocked))
            elif stream := self.streams.get(stream_id):
                stream.window += increment
                self.drain(stream)
        elif kind == HEADERS:
            if flags & PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            if flags & PRIORITY_FLAG:
                payload = payload[5:]
            if flags & END_HEADERS:
                self.on_request(stream_id, payload)
            else:
                self.continuing = (stream_id, bytearray(payload))
        elif kind == CONTINUATION and self.continuing is not None:
            self.continuing[1].extend(payload)
            if flags & END_HEADERS:
                stream_id, block = self.continuing
                self.continuing = None
                self.on_request(stream_id, bytes(block))
        elif kind == SETTINGS and not flags & ACK:
            for offset in range(0, len(payload) - 5, 6):
                key, value = struct.unpack_from(">HI", payload, offset)
                if key == SETTINGS_INITIAL_WINDOW_SIZE:
                    delta, self.peer_initial_window = value - self.peer_initial_window, value
                    for stream in self.streams.values():
                        stream.window += delta
                elif key == SETTINGS_MAX_FRAME_SIZE:
                    self.max_frame = value
            self.write(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            self.write(frame(PING, ACK, 0, payload))
        elif kind == DATA and payload:
            # Requests have no body, but return any credit a client spends anyway.
            credit = struct.pack(">I", len(payload))
            self.write(frame(WINDOW_UPDATE, 0, 0, credit))
            if stream_id in self.streams:
                self.write(frame(WINDOW_UPDATE, 0, stream_id, credit))
        elif kind == RST_STREAM:
            self.close_stream(stream_id)
        elif kind == GOAWAY:
            self.transport.close()  # type: ignore[union-attr]

    def on_request(self, stream_id: int, block: bytes) -> None:
        headers = dict(self.decoder.decode(block))
        url = urlsplit(headers.get(":path", ""))
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        if url.path != "/sse":
            self.respond_status(stream_id, 404)
            return
        try:
            interval = float(query.get("interval_ms", "20")) / 1000
            size = min(int(query.get("bytes", "64")), 16384)  # one DATA frame each
            n = int(query.get("n", "0"))
        except ValueError:
            self.respond_status(stream_id, 400)
            return
        stream = Stream(stream_id, self.peer_initial_window, interval, size, n)
        self.streams[stream_id] = stream
        self.stats.streams += 1
        block = self.encoder.encode(
            [
                (":status", "200"),
                ("content-type", "text/event-stream"),
                ("cache-control", "no-cache"),
            ]
        )
        self.write(frame(HEADERS, END_HEADERS, stream_id, block))
        stream.due = self.loop.time()
        if self.emit(stream):
            stream.due += interval
            self.schedule(stream)

    def respond_status(self, stream_id: int, status: int) -> None:
        block = self.encoder.encode([(":status", str(status))])
        self.write(frame(HEADERS, END_HEADERS | END_STREAM, stream_id, block))

    # events -------------------------------------------------------------------------
    def schedule(self, stream: Stream) -> None:
        """Queue ``stream`` for its next event. Streams of one interval stay ordered by
        due time in one ring, so a tick pops the due ones from the front: no timer per
        event (a uvloop timer per event cost more than the event itself)."""
        ring = self.rings.get(stream.interval)
        if ring is None:
            ring = self.rings[stream.interval] = collections.deque()
        ring.append(stream)
        if self.timer is None or stream.due < self.timer_due:
            self.arm(stream.due)

    def arm(self, due: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer_due = due
        self.timer = self.loop.call_at(due, self.tick)

    def tick(self) -> None:
        self.timer = None
        now = self.loop.time()
        late = 0.0
        for interval, ring in self.rings.items():
            while ring and ring[0].due <= now:
                stream = ring.popleft()
                if stream.id not in self.streams:
                    continue  # closed while it waited
                late = max(late, now - stream.due)
                if self.emit(stream):
                    # A fixed schedule; more than an interval behind, carry on from now
                    # rather than in a burst (which also keeps the ring in due order).
                    stream.due += interval
                    if stream.due <= now:
                        stream.due = now + interval
                    ring.append(stream)
        self.stats.timer_late(late * 1000)
        fronts = [ring[0].due for ring in self.rings.values() if ring]
        if fronts:
            self.arm(min(fronts))

    def emit(self, stream: Stream) -> bool:
        """Build and send (or queue) the stream's next event; False after its last."""
        stream.seq += 1
        head = b"data: %d %d " % (stream.seq, time.monotonic_ns() // 1000)
        event = head + PADDING[: max(0, stream.size - len(head) - 2)] + b"\n\n"
        last = stream.seq == stream.end_at
        self.stats.events += 1
        if stream.queue or not self.send(stream, event, last):
            stream.queue.append((event, last))
            self.blocked.add(stream.id)
            self.stats.queued_events += 1
        return not last

    def send(self, stream: Stream, event: bytes, last: bool) -> bool:
        size = len(event)
        if size > stream.window or size > self.conn_window or size > self.max_frame:
            return False
        stream.window -= size
        self.conn_window -= size
        data = frame(DATA, END_STREAM if last else 0, stream.id, event)
        if self.flush_each:
            # Written now, behind whatever is queued (a new stream's HEADERS); not
            # through write(), whose call_soon per event would cost more than the event.
            self.out += data
            self.flush()
        else:
            self.write(data)
        if last:
            self.close_stream(stream.id)
        return True

    def drain(self, stream: Stream | None) -> None:
        if stream is None:
            return
        while stream.queue:
            event, last = stream.queue[0]
            if not self.send(stream, event, last):
                return
            stream.queue.popleft()
        self.blocked.discard(stream.id)

    def close_stream(self, stream_id: int) -> None:
        # Its ring entry is dropped when the ring reaches it.
        self.streams.pop(stream_id, None)
        self.blocked.discard(stream_id)


async def serve(args: argparse.Namespace) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(args.cert, args.key)
    context.set_alpn_protocols(["h2"])
    stats = Stats()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Connection(stats, args.flush_each),
        "127.0.0.1",
        args.port,
        ssl=context,
        backlog=1024,
    )
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    print(f"listening on 127.0.0.1:{args.port}", flush=True)
    await stop
    server.close()
    print(json.dumps(stats.report()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True, help="PEM certificate chain")
    parser.add_argument("--key", required=True, help="PEM private key")
    parser.add_argument(
        "--flush-each",
        action="store_true",
        help="write each event on its own as it falls due (default: once per loop iteration)",
    )
    args = parser.parse_args()
    run_on_uvloop(serve(args))
    sys.exit(0)


if __name__ == "__main__":
    main()
