"""http1.messages without sockets: the keep-alive decision over each of its inputs,
and the response head that announces it."""

from __future__ import annotations

import itertools

import httptools
import pytest

from h2ping.http1.messages import JOIN_CHUNK_BELOW, Request, ResponseWriter, keeps_alive


class Sink:
    """A ResponseSink that keeps what it is sent."""

    def __init__(self) -> None:
        self.write_paused = False
        self.flushes = 0
        self.out: list[bytes] = []
        self.done: list[tuple[ResponseWriter, bool]] = []

    def send(self, *parts: bytes) -> None:
        self.out.extend(parts)

    @property
    def output(self) -> Sink:  # its own output: it keeps the queue too
        return self

    @property
    def reader(self) -> Sink:  # its own reading's switch too
        return self

    def mark(self) -> tuple[int, int]:
        return (self.flushes, len(self.out))

    def take_back(self, mark: tuple[int, int]) -> bool:
        if mark[0] != self.flushes:
            return False
        del self.out[mark[1] :]
        return True

    def response_done(self, writer: ResponseWriter, keep_alive: bool) -> None:
        self.done.append((writer, keep_alive))

    def abort(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Head:
    """Parser callbacks: the request as the listener makes it, the client's wish
    read by llhttp when the head is complete (as the listener does)."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.request: Request | None = None

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        self.request = Request(
            parser.get_method(),
            self.url,
            self.headers,
            parser.get_http_version(),
            parser.should_keep_alive(),
        )


def parsed(head: bytes) -> Request:
    fields = Head()
    fields.parser.feed_data(head)
    assert fields.request is not None
    fields.request.body_complete = True
    return fields.request


@pytest.mark.parametrize(
    ("wants", "body_complete", "close_delimited", "error"),
    list(itertools.product((True, False), repeat=4)),
)
def test_kept_alive_only_when_every_input_allows(
    wants: bool, body_complete: bool, close_delimited: bool, error: bool
) -> None:
    request = Request(b"GET", b"/", [], "1.1", wants)
    request.body_complete = body_complete
    expected = wants and body_complete and not close_delimited and not error
    assert keeps_alive(request, close_delimited, error) is expected


H11 = b"GET / HTTP/1.1\r\nHost: x\r\n"
H10 = b"GET / HTTP/1.0\r\n"
LENGTH = [(b"content-length", b"2")]

#: head, response status and fields, has_body -> kept alive, Connection field sent
CASES = {
    "1.1 by default": (H11, 200, LENGTH, True, True, None),
    "1.1 asked to close": (H11 + b"Connection: close\r\n", 200, LENGTH, True, False, b"close"),
    "1.1 asked to close, any case": (
        H11 + b"Connection: Close\r\n",
        200,
        LENGTH,
        True,
        False,
        b"close",
    ),
    "1.1 chunked body": (H11, 200, [], True, True, None),
    "1.1 HEAD without length": (b"HEAD / HTTP/1.1\r\nHost: x\r\n", 200, [], True, True, None),
    "1.1 204 without length": (H11, 204, [], True, True, None),
    "1.0 by default": (H10, 200, LENGTH, True, False, b"close"),
    "1.0 asked to keep alive": (
        H10 + b"Connection: keep-alive\r\n",
        200,
        LENGTH,
        True,
        True,
        b"keep-alive",
    ),
    "1.0 body ended by closing": (
        H10 + b"Connection: keep-alive\r\n",
        200,
        [],
        True,
        False,
        b"close",
    ),
    "1.0 no body, no length": (
        H10 + b"Connection: keep-alive\r\n",
        200,
        [],
        False,
        True,
        b"keep-alive",
    ),
    "1.0 HEAD without length": (
        b"HEAD / HTTP/1.0\r\nConnection: keep-alive\r\n",
        200,
        [],
        True,
        True,
        b"keep-alive",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_the_head_announces_the_decision(case: str) -> None:
    head, status, fields, has_body, kept, connection = CASES[case]
    sink = Sink()
    writer = ResponseWriter(sink, parsed(head + b"\r\n"))
    writer.start(status, fields, has_body=has_body)
    writer.end()
    sent = b"".join(sink.out)
    assert writer.keep_alive is kept
    assert sink.done == [(writer, kept)]  # the listener is told the decision, never asks
    if connection is None:
        assert b"connection:" not in sent
    else:
        assert b"\r\nconnection: " + connection + b"\r\n" in sent


def test_response_before_the_whole_request_body_closes() -> None:
    request = parsed(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
    request.body_complete = False  # the rest would be read as the next request
    sink = Sink()
    writer = ResponseWriter(sink, request)
    writer.start(200, LENGTH)
    assert not writer.keep_alive
    assert b"connection: close" in b"".join(sink.out)


def test_proxy_error_closes() -> None:
    sink = Sink()
    writer = ResponseWriter(sink, parsed(H11 + b"\r\n"))
    writer.send_error(502, "upstream down")
    assert not writer.keep_alive
    assert b"connection: close" in b"".join(sink.out)


def test_error_in_place_of_a_retracted_response_closes() -> None:
    sink = Sink()
    writer = ResponseWriter(sink, parsed(H11 + b"\r\n"))
    writer.start(200, LENGTH)
    assert writer.keep_alive
    assert writer.retract()
    writer.send_error(502, "upstream reset the stream")
    assert not writer.keep_alive
    assert sink.out[0].startswith(b"HTTP/1.1 502 ")


class Body:
    """httptools callbacks: the response body as a client reads it."""

    def __init__(self) -> None:
        self.body = b""
        self.complete = False

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


@pytest.mark.parametrize(
    "size",
    [1, 64, JOIN_CHUNK_BELOW - 1, JOIN_CHUNK_BELOW, JOIN_CHUNK_BELOW + 1, 16384],
)
def test_a_chunk_is_framed_alike_in_one_buffer_or_in_three(size: int) -> None:
    """A small chunk leaves joined with its size line and CRLF, a large one as three
    buffers: either way a client parses back exactly the body sent, chunk by chunk."""
    sink = Sink()
    writer = ResponseWriter(sink, parsed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
    writer.start(200, [])
    head = len(sink.out)
    data = bytes(range(256)) * (size // 256) + b"e" * (size % 256)
    writer.write(data)
    chunk = sink.out[head:]
    assert b"".join(chunk) == b"%x\r\n" % size + data + b"\r\n"
    assert len(chunk) == (1 if size < JOIN_CHUNK_BELOW else 3)
    writer.write(b"last")
    writer.end()
    client = Body()
    parser = httptools.HttpResponseParser(client)
    parser.feed_data(b"".join(sink.out))
    assert client.complete and client.body == data + b"last"
