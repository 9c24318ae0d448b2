"""ClientConnection without sockets: bytes in, a fake transport's bytes out, and a
handler that records what the connection told it."""

from __future__ import annotations

import asyncio

from h2ping.http1.listener import ClientConnection, ListenerLimits, ReadState
from h2ping.http1.messages import Request, ResponseWriter
from h2ping.stats import Stats

from .h2fake import FakeTransport


class Handler:
    """Records the calls a request's handler receives."""

    def __init__(self, request: Request, writer: ResponseWriter) -> None:
        self.request = request
        self.writer = writer
        self.events: list[object] = []

    def start(self) -> None:
        self.events.append("start")

    def feed_body(self, data: bytes) -> None:
        self.events.append(bytes(data))

    def end_body(self) -> None:
        self.events.append("end")

    def client_drained(self) -> None:
        self.events.append("drained")

    def cancel(self) -> None:
        self.events.append("cancel")

    def reject(self, status: int) -> None:
        self.events.append(f"reject {status}")

    def answer(self, body: bytes = b"ok") -> None:
        self.writer.start(200, [(b"content-length", b"%d" % len(body))])
        self.writer.write(body)
        self.writer.end()

    def body(self) -> bytes:
        return b"".join(event for event in self.events if isinstance(event, bytes))


class Client:
    """One ClientConnection over a FakeTransport."""

    def __init__(self) -> None:
        self.handlers: list[Handler] = []
        self.stats = Stats()
        self.transport = FakeTransport()
        self.conn = ClientConnection(
            self._handler, set(), self.stats, ListenerLimits(header_timeout=30, idle_timeout=30)
        )
        self.conn.connection_made(self.transport)

    def _handler(self, request: Request, writer: ResponseWriter) -> Handler:
        handler = Handler(request, writer)
        self.handlers.append(handler)
        return handler

    def send(self, data: bytes) -> None:
        """As the transport hands a read to a buffered protocol."""
        buffer = self.conn.get_buffer(len(data))
        buffer[: len(data)] = data
        self.conn.buffer_updated(len(data))

    async def output(self) -> bytes:
        """What was written by the end of this loop turn; taken off the transport."""
        await asyncio.sleep(0)
        out = bytes(self.transport.written)
        self.transport.written.clear()
        return out


GET = b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n"


async def test_keep_alive_serves_requests_one_after_another() -> None:
    client = Client()
    for i in range(3):
        client.send(GET % i)
        handler = client.handlers[-1]
        assert handler.events == ["start", "end"]
        assert handler.request.target == b"/%d" % i
        assert client.conn.state is ReadState.BETWEEN
        handler.answer(b"r%d" % i)
        assert await client.output() == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nr%d" % i
    assert not client.transport.is_closing()
    assert (client.stats.requests, client.stats.rejected) == (3, 0)
    assert client.conn.idle


async def test_connection_close_closes_after_the_response() -> None:
    client = Client()
    client.send(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    client.handlers[0].answer()
    assert (await client.output()).endswith(b"connection: close\r\n\r\nok")
    assert client.transport.closed
    assert client.conn.state is ReadState.CLOSED


async def test_pipelined_requests_wait_their_turn_with_reading_paused() -> None:
    client = Client()
    client.send(GET % 1 + GET % 2)
    first, second = client.handlers
    assert (first.events, second.events) == (["start", "end"], ["end"])
    assert not client.transport.reading
    first.answer(b"r1")
    assert second.events == ["end", "start"]  # its turn: now it may answer
    assert client.transport.reading
    second.answer(b"r2")
    out = await client.output()
    assert out.index(b"r1") < out.index(b"r2")


async def test_malformed_head_is_answered_400_and_closed() -> None:
    client = Client()
    client.send(b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n")
    out = await client.output()
    assert out.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"connection: close" in out
    assert (client.handlers, client.transport.closed) == ([], True)
    assert (client.stats.requests, client.stats.rejected, client.stats.responses["4xx"]) == (
        1,
        1,
        1,
    )


async def test_oversized_head_is_answered_431() -> None:
    client = Client()
    client.send(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000)
    assert (await client.output()).startswith(b"HTTP/1.1 431 ")
    assert client.transport.closed


async def test_rejection_waits_for_the_responses_before_it() -> None:
    client = Client()
    client.send(GET % 1 + b"NOT HTTP\r\n\r\n")
    assert client.conn.state is ReadState.REJECTED
    assert await client.output() == b""  # the first request is still being answered
    client.handlers[0].answer()
    out = await client.output()
    assert out.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"HTTP/1.1 400 Bad Request\r\n" in out
    assert client.transport.closed


async def test_bad_body_after_the_connection_closed_is_not_answered() -> None:
    client = Client()
    answer_at_once = client._handler

    def handler(request: Request, writer: ResponseWriter) -> Handler:
        # An exchange that fails at once (no upstream) answers from start().
        made = answer_at_once(request, writer)
        made.start = lambda: writer.send_error(502, "upstream down")  # type: ignore[method-assign]
        return made

    client.conn._factory = handler
    # The 502 closes the connection while llhttp goes on to the bad chunk.
    client.send(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
    assert (await client.output()).startswith(b"HTTP/1.1 502 ")
    assert client.conn.state is ReadState.CLOSED
    assert not client.stats.responses  # no 400 counted that was never sent
    assert client.handlers[0].events == []  # the handler keeps its own outcome


async def test_content_length_body_arrives_in_pieces() -> None:
    client = Client()
    client.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhe")
    (handler,) = client.handlers
    assert client.conn.state is ReadState.BODY
    client.send(b"llo" + GET % 2)
    assert (handler.body(), handler.events[-1]) == (b"hello", "end")
    assert len(client.handlers) == 2  # the next request, after exactly five bytes


async def test_chunked_body() -> None:
    client = Client()
    client.send(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
    (handler,) = client.handlers
    assert handler.body() == b"abc"
    assert client.conn.state is ReadState.BODY
    client.send(b"2\r\nde\r\n0\r\n\r\n")
    assert (handler.body(), handler.events[-1]) == (b"abcde", "end")
    assert client.conn.state is ReadState.BETWEEN


async def test_malformed_chunk_rejects_the_request_being_read() -> None:
    client = Client()
    client.send(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
    (handler,) = client.handlers
    assert handler.events == ["start", "reject 400"]
    assert (await client.output()).startswith(b"HTTP/1.1 400 ")
    # The handler counts the request's outcome; the listener counts the 400 it sent.
    assert (client.stats.requests, client.stats.rejected, client.stats.responses["4xx"]) == (
        1,
        0,
        1,
    )


async def test_client_going_away_mid_body_cancels_the_request() -> None:
    client = Client()
    client.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345")
    client.conn.connection_lost(None)
    (handler,) = client.handlers
    # Told once as pending and once as being read: a handler's cancel is idempotent.
    assert handler.events[:2] == ["start", b"12345"]
    assert set(handler.events[2:]) == {"cancel"}
    assert client.conn.state is ReadState.CLOSED
    client.send(b"67890")  # late bytes are not read
    assert handler.body() == b"12345"


async def test_upgrade_request_body_is_read_as_http1() -> None:
    client = Client()
    client.send(
        b"POST / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: other\r\n"
        b"Content-Length: 3\r\n\r\nabc" + GET % 2
    )
    first, second = client.handlers
    assert (first.body(), first.events[-1]) == (b"abc", "end")
    assert second.request.target == b"/2"


async def test_pause_and_resume() -> None:
    client = Client()
    client.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n")
    (handler,) = client.handlers
    handler.writer.pause_reading()  # the upstream cannot take more of the body
    assert not client.transport.reading
    handler.writer.resume_reading()
    assert client.transport.reading
    client.conn.pause_writing()  # the client's socket buffer is full
    assert handler.writer.paused
    client.conn.resume_writing()
    assert not handler.writer.paused
    assert handler.events[-1] == "drained"
