"""The floor: the least an HTTP/1.1 -> HTTP/2-over-TLS proxy in pure Python must do
per request and per byte, on the libraries h2ping uses (uvloop, ssl, httptools,
hpack), written for speed and nothing else.

It does what no proxy can skip: parses each HTTP/1.1 request (httptools), sends its
HEADERS (a fixed encoder: literals, no table) and body (DATA within the peer's
windows) on one TLS + HTTP/2 connection shared by every client, parses the frames
that come back, decodes each response's header block with hpack, and writes the
response to its client (Content-Length as given, else chunked). It announces a
4 MiB stream and 1 GiB connection window, returns credit a quarter window at a
time, and withholds a stream's credit while its client is not reading. No PINGs,
no pool, no reconnection, no error handling beyond not hanging. DATA payloads
reach the client as views of the buffer TLS decrypts into: no copy in Python.

TLS is uvloop's own transport (``loop.create_connection(ssl=...)``), decrypting
into this buffer through its BufferedProtocol path. An ``ssl.SSLObject`` over
memory BIOs on a plain TCP transport cost the same CPU per byte, 4-7% more per
request, and doubled the mean latency on one connection (bench/RESULTS.md).

    cd bench && python -m peers.floor_relay --listen 127.0.0.1:8080 \
        --upstream https://127.0.0.1:8443 --ca-file ca.pem
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import ssl
import struct
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from urllib.parse import urlsplit

import hpack
import httptools
import uvloop

FRAME = struct.Struct(">LBL")  # length << 8 | type, flags, stream id
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 6, 7, 8, 9,
)  # fmt: skip
END_STREAM, END_HEADERS, PADDED, PRIORITY = 0x1, 0x4, 0x8, 0x20
STREAM_WINDOW = 4 << 20  # what Go's transport announces
CONN_WINDOW = 1 << 30
STREAM_REFILL = STREAM_WINDOW // 4  # credit goes back in quarter-window steps
CONN_REFILL = CONN_WINDOW // 4
READ_BUFFER = 1 << 20
MIN_FREE = 64 << 10  # less room than this at the read buffer's end: start again at 0
BODY_HIGH = 1 << 20  # a request body buffered beyond this pauses its client's reads
HOP_BY_HOP = frozenset(
    b"connection keep-alive proxy-connection transfer-encoding upgrade te host expect".split()
)
REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}


def frame(kind: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return FRAME.pack(len(payload) << 8 | kind, flags, sid) + payload


def window_update(sid: int, n: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, sid, n.to_bytes(4, "big"))


def hstr(value: bytes) -> bytes:
    """An HPACK string literal, no Huffman (RFC 7541 5.2)."""
    n = len(value)
    if n < 127:
        return bytes((n,)) + value
    out, n = bytearray(b"\x7f"), n - 127
    while n >= 128:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + value


class Exchange:
    """One request and its response."""

    __slots__ = (
        "block", "body", "body_done", "body_len", "chunked", "client", "done", "head",
        "head_only", "keep_alive", "marked", "parts", "sent_end", "sid", "started", "unacked",
        "window",
    )  # fmt: skip

    def __init__(self, client: Client, block: bytes, head_only: bool, keep_alive: bool) -> None:
        self.client = client
        self.sid = 0  # until HEADERS goes
        self.block = block
        self.body: deque[memoryview] = deque()
        self.body_len = 0
        self.body_done = False
        self.sent_end = False
        self.window = 0  # the peer's credit for this stream's body
        self.unacked = 0  # bytes received not yet credited back
        self.head = bytearray()  # response HEADERS (+ CONTINUATION) being collected
        self.parts: list[bytes | memoryview] = []  # response bytes not yet written
        self.chunked = False
        self.done = False
        self.head_only = head_only
        self.keep_alive = keep_alive
        self.marked = False  # in Upstream.touched: written after this read
        self.started = False  # its response head is out


class Upstream(asyncio.BufferedProtocol):
    """The one HTTP/2 connection. ``write`` sends plaintext through TLS."""

    def __init__(self, authority: bytes) -> None:
        self.authority = authority
        self.write: Callable[[bytes], object] = lambda data: None
        self.buf = bytearray(READ_BUFFER)
        self.view = memoryview(self.buf)
        self.pos = self.fill = 0  # unparsed bytes: buf[pos:fill]
        self.lent: list[asyncio.Transport] = []  # may hold views of buf still
        self.streams: dict[int, Exchange] = {}
        self.next_id = 1
        self.decoder = hpack.Decoder()
        self.window = 65535  # the peer's connection credit
        self.initial = 65535  # its credit per new stream
        self.max_frame = 16384
        self.max_streams = 100
        self.waiting: deque[Exchange] = deque()  # over the peer's stream limit
        self.blocked: dict[Exchange, None] = {}  # body waiting for credit, in order
        self.unacked = 0
        self.touched: list[Exchange] = []
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.write = transport.write  # type: ignore[attr-defined]
        settings = struct.pack(">HLHL", 0x2, 0, 0x4, STREAM_WINDOW)  # no push; stream window
        self.write(
            PREFACE + frame(SETTINGS, 0, 0, settings) + window_update(0, CONN_WINDOW - 65535)
        )

    def connection_lost(self, exc: Exception | None) -> None:
        for ex in list(self.streams.values()):
            ex.client.transport.close()
        if not self.lost.done():
            self.lost.set_result(None)

    # Requests ------------------------------------------------------------------------------

    def start(self, ex: Exchange) -> None:
        if len(self.streams) >= self.max_streams:
            self.waiting.append(ex)
            return
        sid = ex.sid = self.next_id
        self.next_id += 2
        self.streams[sid] = ex
        ex.window = self.initial
        end = END_STREAM if ex.body_done and not ex.body else 0
        ex.sent_end = bool(end)
        block, mf = ex.block, self.max_frame
        if len(block) <= mf:
            self.write(FRAME.pack(len(block) << 8 | HEADERS, END_HEADERS | end, sid) + block)
        else:
            out = [frame(HEADERS, end, sid, block[:mf])]
            for i in range(mf, len(block), mf):
                last = END_HEADERS if i + mf >= len(block) else 0
                out.append(frame(CONTINUATION, last, sid, block[i : i + mf]))
            self.write(b"".join(out))
        if not end:
            self.pump(ex)

    def pump(self, ex: Exchange) -> None:
        """Send what the peer's windows allow of a request body."""
        if ex.done:  # answered already: the rest of the body goes nowhere
            ex.body.clear()
            ex.body_len = 0
        if not ex.sid or ex.sent_end:
            return self.resume(ex)
        out: list[bytes | memoryview] = []
        body, sid, mf = ex.body, ex.sid, self.max_frame
        while body and self.window > 0 and ex.window > 0:
            chunk = body[0]
            n = min(len(chunk), self.window, ex.window, mf)
            if n == len(chunk):
                body.popleft()
            else:
                body[0] = chunk[n:]
                chunk = chunk[:n]
            ex.body_len -= n
            self.window -= n
            ex.window -= n
            last = END_STREAM if ex.body_done and not body else 0
            out += (FRAME.pack(n << 8, last, sid), chunk)
        if ex.body_done and not body:
            if not out:
                out.append(frame(DATA, END_STREAM, sid))
            ex.sent_end = True
        if out:
            self.write(b"".join(out))
        if body:
            self.blocked[ex] = None
        else:
            self.blocked.pop(ex, None)
        self.resume(ex)

    def resume(self, ex: Exchange) -> None:
        client = ex.client
        if client.reads_paused and ex.body_len < BODY_HIGH // 2:
            client.reads_paused = False
            client.transport.resume_reading()

    def finish(self, ex: Exchange) -> None:
        if ex.sid in self.streams and not ex.sent_end:  # a body cut short
            self.write(frame(RST_STREAM, 0, ex.sid, b"\0\0\0\x08"))  # CANCEL
            ex.sent_end = True
        self.streams.pop(ex.sid, None)
        self.blocked.pop(ex, None)
        while self.waiting and len(self.streams) < self.max_streams:
            self.start(self.waiting.popleft())

    # Frames --------------------------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        if READ_BUFFER - self.fill < MIN_FREE:
            tail = self.fill - self.pos
            if any(t.get_write_buffer_size() for t in self.lent):
                # A client still holds views of this buffer: leave it to them.
                old, self.buf = self.view, bytearray(READ_BUFFER)
                self.view = memoryview(self.buf)
                self.buf[:tail] = old[self.pos : self.fill]
            else:
                self.buf[:tail] = self.view[self.pos : self.fill]
            self.lent.clear()
            self.pos, self.fill = 0, tail
        return self.view[self.fill :]

    def buffer_updated(self, nbytes: int) -> None:
        self.fill += nbytes
        buf, view, pos, end = self.buf, self.view, self.pos, self.fill
        streams, touched, unpack = self.streams, self.touched, FRAME.unpack_from
        while end - pos >= 9:
            lt, flags, sid = unpack(buf, pos)
            stop = pos + 9 + (lt >> 8)
            if stop > end:
                break
            if lt & 0xFF == DATA:
                self.unacked += lt >> 8
                ex = streams.get(sid)
                if ex is not None:
                    ex.unacked += lt >> 8
                    first = pos + 9
                    if flags & PADDED:
                        first, stop_data = first + 1, stop - buf[first]
                    else:
                        stop_data = stop
                    if not ex.marked:
                        ex.marked = True
                        touched.append(ex)
                    if ex.chunked:
                        if stop_data > first:
                            ex.parts += (b"%x\r\n" % (stop_data - first), view[first:stop_data])
                            ex.parts.append(b"\r\n")
                        if flags & END_STREAM:
                            ex.parts.append(b"0\r\n\r\n")
                    else:
                        ex.parts.append(view[first:stop_data])
                    if flags & END_STREAM:
                        ex.done = True
            else:
                self.control(lt & 0xFF, flags, sid & 0x7FFFFFFF, pos + 9, stop)
            pos = stop
        self.pos = pos
        if self.unacked >= CONN_REFILL:
            self.write(window_update(0, self.unacked))
            self.unacked = 0
        for ex in touched:
            ex.marked = False
            ex.client.deliver(ex, self)
        touched.clear()

    def control(self, kind: int, flags: int, sid: int, first: int, stop: int) -> None:
        payload = self.view[first:stop]
        if kind in (HEADERS, CONTINUATION):
            ex = self.streams.get(sid)
            if ex is None:
                return
            if kind == HEADERS:
                pad = payload[0] if flags & PADDED else 0
                skip = (1 if flags & PADDED else 0) + (5 if flags & PRIORITY else 0)
                payload = payload[skip : len(payload) - pad]
            ex.head += payload
            if flags & END_HEADERS:
                fields = self.decoder.decode(bytes(ex.head), raw=True)
                ex.head.clear()
                ex.client.respond(ex, fields, bool(flags & END_STREAM), self)
        elif kind == WINDOW_UPDATE:
            n = int.from_bytes(payload, "big") & 0x7FFFFFFF
            if sid == 0:
                self.window += n
                for ex in list(self.blocked):
                    self.pump(ex)
            elif (ex := self.streams.get(sid)) is not None:
                ex.window += n
                if ex in self.blocked:
                    self.pump(ex)
        elif kind == SETTINGS and not flags & 0x1:
            for i in range(0, len(payload) - 5, 6):
                key, value = struct.unpack_from(">HL", payload, i)
                if key == 0x3:
                    self.max_streams = value
                elif key == 0x4:
                    for ex in self.streams.values():
                        ex.window += value - self.initial
                    self.initial = value
                elif key == 0x5:
                    self.max_frame = value
            self.write(frame(SETTINGS, 0x1, 0))
            for ex in list(self.blocked):
                self.pump(ex)
        elif kind == PING and not flags & 0x1:
            self.write(frame(PING, 0x1, 0, bytes(payload)))
        elif kind == RST_STREAM and (ex := self.streams.get(sid)) is not None:
            ex.sent_end = True  # no RST_STREAM answers one
            self.finish(ex)
            ex.client.transport.close()  # the response, if begun, cannot be finished
        elif kind == GOAWAY:
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            for ex in [ex for s, ex in self.streams.items() if s > last]:
                ex.sent_end = True
                self.finish(ex)
                ex.client.transport.close()

    def credit(self, ex: Exchange) -> None:
        """Give a stream back what its client took, a quarter window at a time."""
        if ex.unacked >= STREAM_REFILL and not ex.done:
            self.write(window_update(ex.sid, ex.unacked))
            ex.unacked = 0


class Client(asyncio.Protocol):
    """One HTTP/1.1 client connection; its responses go out in request order."""

    def __init__(self, upstream: Upstream) -> None:
        self.up = upstream
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport
        self.queue: deque[Exchange] = deque()
        self.url = b""
        self.fields: list[tuple[bytes, bytes]] = []
        self.current: Exchange | None = None
        self.reads_paused = False
        self.writes_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        up = self.up
        for ex in self.queue:
            if ex.sid in up.streams:
                ex.sent_end = False  # so that finish cancels the stream
                up.finish(ex)
            elif ex in up.waiting:
                up.waiting.remove(ex)
        self.queue.clear()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            self.transport.close()

    def on_message_begin(self) -> None:
        self.url = b""
        self.fields = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        method = parser.get_method()
        authority, expect, body = self.up.authority, False, False
        block = [b"\x82" if method == b"GET" else b"\x02" + hstr(method), b"\x87"]
        block.append(b"\x04" + hstr(self.url))
        for name, value in self.fields:
            if name in HOP_BY_HOP:
                if name == b"host":
                    authority = value
                elif name == b"expect":
                    expect = value.lower() == b"100-continue"
                elif name == b"transfer-encoding":
                    body = True
                continue
            if name == b"content-length":
                body = value != b"0"
            block.append(b"\0" + hstr(name) + hstr(value))
        block.insert(1, b"\x01" + hstr(authority))
        ex = Exchange(self, b"".join(block), method == b"HEAD", parser.should_keep_alive())
        ex.body_done = not body
        self.queue.append(ex)
        self.current = ex
        if expect and body:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self.up.start(ex)

    def on_body(self, body: bytes) -> None:
        ex = self.current
        assert ex is not None
        ex.body.append(memoryview(body))
        ex.body_len += len(body)
        self.up.pump(ex)
        if ex.body_len > BODY_HIGH and not self.reads_paused:
            self.reads_paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        ex = self.current
        assert ex is not None
        if not ex.body_done:
            ex.body_done = True
            self.up.pump(ex)

    def respond(self, ex: Exchange, fields: list, end: bool, up: Upstream) -> None:
        if ex.started:  # trailers: dropped, the end kept
            if end:
                ex.parts.append(b"0\r\n\r\n" if ex.chunked else b"")
                ex.done = True
                if not ex.marked:
                    ex.marked = True
                    up.touched.append(ex)
            return
        status = int(fields[0][1])
        if status < 200:
            return  # a 1xx: the client had its 100 Continue from here
        lines = [b"HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status, b""))]
        length = False
        for name, value in fields:
            if name[0] != 58:  # ":"
                lines += (name, b": ", value, b"\r\n")
                length = length or name == b"content-length"
        if not (length or ex.head_only or status in (204, 304)):
            if end:
                lines.append(b"content-length: 0\r\n")
            else:
                lines.append(b"transfer-encoding: chunked\r\n")
                ex.chunked = True
        if not ex.keep_alive:
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        ex.started = True
        ex.parts.append(b"".join(lines))
        if end:
            ex.done = True
            self.deliver(ex, up)
        elif not ex.marked:
            ex.marked = True
            up.touched.append(ex)

    def deliver(self, ex: Exchange, up: Upstream) -> None:
        """Write what came for ``ex`` if it is next in line, else keep a copy."""
        if not self.queue:
            return  # the client is gone
        if ex is not self.queue[0]:
            ex.parts = [bytes(part) for part in ex.parts]  # views of the read buffer
            if ex.done:
                up.finish(ex)
            return
        transport = self.transport
        transport.writelines(ex.parts)
        ex.parts = []
        if transport.get_write_buffer_size():
            up.lent.append(transport)
        if not ex.done:
            if not self.writes_paused:
                up.credit(ex)
            return
        up.finish(ex)
        self.queue.popleft()
        if not ex.keep_alive:
            transport.close()
        elif self.queue and (self.queue[0].parts or self.queue[0].done):
            self.deliver(self.queue[0], up)

    def pause_writing(self) -> None:
        self.writes_paused = True

    def resume_writing(self) -> None:
        self.writes_paused = False
        if self.queue and self.queue[0].sid in self.up.streams:
            self.up.credit(self.queue[0])


async def serve(listen: str, upstream: str, ca_file: str | None) -> None:
    loop = asyncio.get_running_loop()
    url = urlsplit(upstream)
    host, port = url.hostname or "127.0.0.1", url.port or 443
    context = ssl.create_default_context(cafile=ca_file)
    context.set_alpn_protocols(["h2"])
    up = Upstream(url.netloc.encode())
    await loop.create_connection(lambda: up, host, port, ssl=context, server_hostname=host)
    lhost, _, lport = listen.rpartition(":")
    server = await loop.create_server(lambda: Client(up), lhost, int(lport), backlog=4096)
    print(f"floor relay listening on {listen} -> {upstream}", flush=True)
    stop = loop.create_future()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, lambda: stop.done() or stop.set_result(None))
    await asyncio.wait([stop, up.lost], return_when=asyncio.FIRST_COMPLETED)
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:8080")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--ca-file")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(serve(args.listen, args.upstream, args.ca_file))


if __name__ == "__main__":
    main()
