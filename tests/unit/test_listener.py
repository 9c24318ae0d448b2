"""ClientConnection without sockets: bytes in, a fake transport's bytes out, and a
handler that records what the connection told it."""

from __future__ import annotations

import asyncio
import gc
import itertools
import weakref
from collections.abc import Callable
from typing import Any, cast

import pytest

from h2ping.http1.listener import ClientConnection, ListenerLimits
from h2ping.http1.messages import Request, ResponseWriter
from h2ping.http1.reader import ReadState, RequestReader
from h2ping.stats import Stats

from ..fakes import FakeTransport


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

    def __init__(self, connection: type[ClientConnection] = ClientConnection) -> None:
        self.handlers: list[Handler] = []
        self.stats = Stats()
        self.transport = FakeTransport()
        self.conn = connection(
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
        assert handler.events == ["start"]  # no body: no end of one to be told
        assert handler.request.target == b"/%d" % i
        assert client.conn.state is ReadState.BETWEEN
        handler.answer(b"r%d" % i)
        assert await client.output() == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nr%d" % i
    assert not client.transport.is_closing()
    assert (client.stats.requests, client.stats.rejected) == (3, 0)
    assert client.conn.idle


async def test_the_parser_is_let_go_between_keep_alive_requests() -> None:
    # A connection waiting on its response, or idle, holds no parser (~900 bytes).
    client = Client()
    assert client.conn.reader._parser is None  # none before the first byte either
    client.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
    assert client.conn.reader._parser is not None  # a body is arriving
    client.send(b"cd")
    assert client.conn.reader._parser is None
    client.handlers[0].answer()
    await client.output()
    client.send(b"GET / HTTP/1.1\r\nHo")  # a head arriving in pieces keeps its parser
    assert client.conn.reader._parser is not None
    client.send(b"st: x\r\n\r\n")
    assert client.conn.reader._parser is None
    assert [h.events for h in client.handlers] == [["start", b"ab", b"cd", "end"], ["start"]]


async def test_after_a_request_that_asked_to_close_what_follows_is_refused() -> None:
    # The parser that read it is kept: it refuses bytes after such a request, where
    # a new one would read them as a request.
    client = Client()
    client.send(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert client.conn.reader._parser is not None
    client.send(GET % 2)
    assert len(client.handlers) == 1
    client.handlers[0].answer()
    assert (await client.output()).count(b"HTTP/1.1 ") == 1
    assert client.transport.closed


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
    assert (first.events, second.events) == (["start"], [])
    assert not client.transport.reading
    first.answer(b"r1")
    assert second.events == ["start"]  # its turn: now it may answer
    assert client.transport.reading
    second.answer(b"r2")
    out = await client.output()
    assert out.index(b"r1") < out.index(b"r2")


async def test_every_request_of_one_read_waits_its_turn() -> None:
    # Reading pauses at the second request, but the read in hand is parsed to its end.
    client = Client()
    client.send(b"".join(GET % i for i in range(5)))
    assert [h.events for h in client.handlers] == [["start"]] + [[]] * 4
    assert not client.transport.reading
    for i, handler in enumerate(client.handlers[:4]):
        handler.answer(b"r%d" % i)
        assert client.handlers[i + 1].events[-1] == "start"
        assert client.transport.reading is (i == 3)  # once only one is left
    client.handlers[4].answer(b"r4")
    out = await client.output()
    places = [out.index(b"r%d" % i) for i in range(5)]
    assert places == sorted(places)


async def test_a_lost_connection_is_freed_without_the_cyclic_collector() -> None:
    # Its reader, deadline and output refer back to it; losing it undoes that.
    client = Client()
    client.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345")
    client.handlers[0].writer.start(200, [])  # output queued, a response under way
    gc.disable()
    try:
        client.conn.connection_lost(None)
        gone = weakref.ref(client.conn)
        del client.conn
        client.handlers.clear()  # their writers refer to it too
        assert gone() is None
    finally:
        gc.enable()


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


def answered_at_once(client: Client) -> None:
    """Requests answered, with a close, from the handler's start (an exchange
    that fails without an upstream does so)."""
    make = client.conn._factory

    def factory(request: Request, writer: ResponseWriter) -> Handler:
        handler = cast(Handler, make(request, writer))
        handler.start = lambda: writer.send_error(502, "no upstream")  # type: ignore[method-assign]
        return handler

    client.conn._factory = factory


async def test_bad_body_after_the_connection_closed_is_not_answered() -> None:
    client = Client()
    answered_at_once(client)
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


# ----------------------------------------------------------------- moves between states

B, H, D = ReadState.BETWEEN, ReadState.HEAD, ReadState.BODY
UP, UB = ReadState.UPGRADING, ReadState.UPGRADED_BODY
R, C = ReadState.REJECTED, ReadState.CLOSED

#: The moves a client connection may make, written out apart from the listener's
#: own table: every one is allowed, every other one refused.
MOVES = {
    (B, H), (B, R), (B, C),
    (H, D), (H, R), (H, C),
    (D, B), (D, UP), (D, R), (D, C),
    (UP, UB), (UP, C),
    (UB, B), (UB, R), (UB, C),
    (R, C),
}  # fmt: skip


@pytest.mark.parametrize(
    ("before", "after"),
    list(itertools.product(ReadState, repeat=2)),
    ids=lambda state: state.name,
)
async def test_every_listed_move_is_allowed_and_no_other(
    before: ReadState, after: ReadState
) -> None:
    reader = Client().conn.reader
    reader.state = before
    allowed = (before, after) in MOVES
    assert reader.enter(after) is allowed
    assert reader.state is (after if allowed else before)


class RecordingReader(RequestReader):
    """Keeps each move asked of it: from, to, and whether it was made."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[ReadState, ReadState, bool]] = []

    def enter(self, state: ReadState) -> bool:
        before = self.state
        made = super().enter(state)
        self.asked.append((before, state, made))
        return made


class Recording(ClientConnection):
    """A connection whose reader keeps each move asked of it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reader = RecordingReader()

    @property
    def asked(self) -> list[tuple[ReadState, ReadState, bool]]:
        return cast(RecordingReader, self.reader).asked


CHUNKED = b"Transfer-Encoding: chunked\r\n\r\n"
LENGTH_3 = b"Content-Length: 3\r\n\r\n"
POST_CHUNKED = b"POST / HTTP/1.1\r\nHost: x\r\n" + CHUNKED
POST_10 = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345"
UPGRADE = b"POST / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: other\r\n"
GET_CLOSE = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def answer_first(client: Client) -> None:
    client.handlers[0].answer()


def answer_then_close_if_idle(client: Client) -> None:
    client.handlers[0].answer()
    client.conn.close_if_idle()


def lost(client: Client) -> None:
    client.conn.connection_lost(None)


def response_begun(client: Client) -> None:
    """Requests whose response begins at once, from the handler's start."""
    make = client.conn._factory

    def factory(request: Request, writer: ResponseWriter) -> Handler:
        handler = cast(Handler, make(request, writer))
        handler.start = lambda: writer.start(200, [])  # type: ignore[method-assign]
        return handler

    client.conn._factory = factory


def head_too_slow(client: Client) -> None:
    client.conn._deadline._expired()  # as its timer fires


def nothing(client: Client) -> None:
    pass


#: What a client does, and what follows: every move of the table, made by bytes
#: and events as they come. Each is: set-up, bytes sent, what happens next.
SCENARIOS: dict[str, tuple[Callable[[Client], None], bytes, Callable[[Client], None]]] = {
    "kept alive, then idle": (nothing, GET % 1, answer_then_close_if_idle),
    "bytes after Connection: close": (nothing, GET_CLOSE + b"GET / HTTP/1.1\r\n", answer_first),
    "bad head": (nothing, b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n", nothing),
    "head too slow": (nothing, b"GET / HTTP/1.1\r\n", head_too_slow),
    "gone mid-head": (nothing, b"GET / HTTP/1.1\r\n", lost),
    "bad body": (nothing, POST_CHUNKED + b"zz\r\n", nothing),
    "gone mid-body": (nothing, POST_10, lost),
    "Upgrade with a body": (nothing, UPGRADE + LENGTH_3 + b"abc" + GET % 2, nothing),
    "Upgrade with a bad body": (nothing, UPGRADE + CHUNKED + b"zz\r\n", nothing),
    "gone mid-Upgrade body": (nothing, UPGRADE + LENGTH_3 + b"a", lost),
    # What follows the request in the same read is handed on after the 502 closed it.
    "closed by a response, then a body": (answered_at_once, POST_CHUNKED + b"0\r\n\r\n", nothing),
    "closed by a response, then a bad body": (answered_at_once, POST_CHUNKED + b"zz\r\n", nothing),
    # The response already begun is cut: no 400 follows it.
    "a response begun, then a bad body": (response_begun, POST_CHUNKED + b"zz\r\n", nothing),
}  # fmt: skip


async def test_the_moves_made_are_those_of_the_table() -> None:
    made: set[tuple[ReadState, ReadState]] = set()
    refused: set[tuple[ReadState, ReadState]] = set()
    for before, data, after in SCENARIOS.values():
        client = Client(Recording)
        before(client)
        client.send(data)
        after(client)
        await client.output()
        conn = cast(Recording, client.conn)
        made.update((old, new) for old, new, entered in conn.asked if entered)
        refused.update((old, new) for old, new, entered in conn.asked if not entered)
    # Every move of the table is made, but one: UPGRADING lasts from one parser
    # callback to the next line of the same read, where nothing can close it.
    assert made == MOVES - {(UP, C)}
    # None refused: a read is parsed whole before its connection acts on any of
    # it, and once a response to a request of that read closed the connection,
    # nothing more of the read is acted on (a refusal it handed back included).
    assert refused == set()


async def test_a_heads_deadline_starts_where_it_began_and_a_trickle_never_moves_it() -> None:
    client = Client()
    timer = client.conn._deadline._timer
    client.send(GET % 1)  # a head read whole: no deadline runs while it is answered
    assert timer._deadline is None
    client.handlers[0].answer()
    await client.output()
    idle = timer._deadline  # the kept-alive connection's idle wait
    assert idle is not None
    await asyncio.sleep(0.01)  # the loop's clock moves on
    client.send(b"GET /2 HTTP/1.1\r\n")  # a head began: its own deadline, from now
    head = timer._deadline
    assert head is not None and head > idle
    for line in (b"X-A: 1\r\n", b"X-B: 2\r\n"):
        await asyncio.sleep(0.01)
        client.send(line)
        assert timer._deadline == head  # more of the same head: it stays
    client.send(b"Host: x\r\n\r\n" + GET % 3)  # whole, with a pipelined one behind it
    assert timer._deadline is None
    assert len(client.handlers) == 3


async def test_requests_after_one_whose_answer_closed_the_connection_are_never_made() -> None:
    """A read holds a GET and a pipelined POST behind it. The GET is answered at
    once with the proxy's own error (as a request the pool refuses at once is),
    which closes the connection while the read is being acted on: the POST behind
    it is never made, so nothing of it goes upstream."""

    class Refusing(Client):
        def _handler(self, request: Request, writer: ResponseWriter) -> Handler:
            handler = super()._handler(request, writer)
            handler.start = lambda: writer.send_error(502, "refused")  # type: ignore[method-assign]
            return handler

    client = Refusing()
    client.send(
        b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n"
        b"POST /second HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"
    )
    assert [h.request.target for h in client.handlers] == [b"/first"]
    assert client.transport.is_closing()
    assert (await client.output()).startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
    client.conn.connection_lost(None)
    assert client.stats.requests == 1


async def test_a_response_written_whole_goes_out_at_once() -> None:
    # Not at the end of the loop turn: what ends its stream and its exchange after
    # it (and any other work of the turn) is not between the client and its answer.
    client = Client()
    client.send(GET % 1)
    client.handlers[0].writer.start(200, [(b"content-length", b"2")])
    client.handlers[0].writer.write(b"r1")
    assert not client.transport.writes  # a response under way waits for the turn's end
    client.handlers[0].writer.end()
    assert client.transport.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nr1"]
    assert await client.output() == client.transport.writes[0]  # and nothing again


async def test_responses_to_pipelined_requests_go_out_together() -> None:
    client = Client()
    client.send(GET % 1 + GET % 2)
    first, second = client.handlers
    first.answer(b"r1")
    assert not client.transport.writes  # the next one's turn came: it may answer now
    second.answer(b"r2")
    assert len(client.transport.writes) == 1  # both, in one write
    assert client.transport.writes[0].count(b"HTTP/1.1 200 OK") == 2
