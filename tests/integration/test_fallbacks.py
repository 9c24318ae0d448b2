"""What h2ping assumes of its libraries without a probe (message texts, a class's
module, httptools' ``__context__``) only sharpens what it says or does; with the
assumption false, it still does the right thing."""

from __future__ import annotations

import asyncio
import inspect
import pathlib
from typing import Any

import h2
import h2.connection
import h2.exceptions
import httptools
import pytest

from h2ping import errors, sockets
from h2ping.http1 import reader
from h2ping.http2.engine import errortext as h2errors

from ..h2fake import FakeServer, Harness
from .test_http1_strict import proxy_and_upstream, send_raw


def test_every_h2_message_text_matched_is_in_the_installed_h2() -> None:
    """The texts describe_h2_error looks for: where one is gone, the generic
    description stands in (below); this says when to update the list."""
    source = "".join(
        path.read_text() for path in pathlib.Path(inspect.getfile(h2)).parent.glob("*.py")
    )
    missing = {start for start, _ in h2errors._H2_MESSAGE_TEXT if start not in source}
    # h2's state machines' refusals, as the installed h2 words them.
    machine = h2.connection.H2ConnectionStateMachine()
    machine.state = h2.connection.ConnectionState.CLOSED
    with pytest.raises(h2.exceptions.ProtocolError) as refused:
        machine.process_input(h2.connection.ConnectionInputs.RECV_PING)
    if h2errors._STATE_MACHINE.match(str(refused.value)) is None:
        missing.add("Invalid input")
    # h2 4.1.0, the oldest tested, does not check for conflicting values yet.
    newer = {"Conflicting content-length"} if h2.__version__.startswith("4.1.") else set()
    assert missing <= newer


async def test_a_reworded_h2_error_still_fails_only_its_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(h2errors, "_H2_MESSAGE_TEXT", ())  # no text matches
    h = Harness()
    bad, bad_sink = h.open()
    good, good_sink = h.open()
    h.feed(h.server.headers(bad.stream_id, 200, [("content-length", "x")]))
    h.feed(h.server.headers(good.stream_id, 200), FakeServer.data(good.stream_id, b"ok", True))
    await h.settle()
    assert bad_sink.error is not None
    assert bad_sink.error.error == errors.HTTP_PROTOCOL_ERROR
    assert bad_sink.error.detail == "malformed response: bad response header block (ProtocolError)"
    assert good_sink.ended and bytes(good_sink.data) == b"ok"


class _Unknown:
    """A transport class from no module h2ping knows."""

    def __init__(self) -> None:
        self.written: list[Any] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def writelines(self, parts: list[bytes]) -> None:
        self.written.append(list(parts))


class _UvloopLike(_Unknown):
    pass


_UvloopLike.__module__ = "uvloop.loop"


@pytest.mark.parametrize(
    ("kind", "affected", "joined"),
    [(_Unknown, True, True), (_UvloopLike, True, False), (_Unknown, False, False)],
)
def test_writelines_is_used_only_where_it_is_known_to_pause(
    monkeypatch: pytest.MonkeyPatch, kind: type[_Unknown], affected: bool, joined: bool
) -> None:
    monkeypatch.setattr(sockets, "_WRITELINES_SKIPS_PAUSE", affected)
    transport = kind()
    sockets.batch_writer(transport)([b"a", b"b"])  # type: ignore[arg-type]
    assert transport.written == ([b"ab"] if joined else [[b"a", b"b"]])


_PARSER = httptools.HttpRequestParser


class _ContextlessParser:
    """httptools' parser, raising its callback errors with no ``__context__``."""

    def __init__(self, protocol: Any) -> None:
        self._parser = _PARSER(protocol)

    def feed_data(self, data: bytes | memoryview) -> None:
        error = None
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            error = httptools.HttpParserCallbackError(str(exc))
        if error is not None:
            raise error  # outside the except: no __context__

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parser, name)


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"v" * 70_000 + b"\r\n\r\n", 431),
    ],
)
async def test_rejections_without_httptools_context(
    monkeypatch: pytest.MonkeyPatch, data: bytes, status: int
) -> None:
    monkeypatch.setattr(reader.httptools, "HttpRequestParser", _ContextlessParser)
    async with proxy_and_upstream() as (proxy, up):
        raw = await send_raw(proxy.port, data)
        await asyncio.sleep(0.05)  # silence: nothing may reach the upstream meanwhile either
        assert up.requests == []
    assert raw.startswith(b"HTTP/1.1 %d " % status), raw[:80]
