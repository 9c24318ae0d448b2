"""The fuzzers' HTTP/1.1 harness: an event loop kept across examples that records
what goes wrong on it, a client conversation read back into responses, and an
h2c echo server behind a proxy (:class:`H1Harness`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, cast

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import uvloop

from h2ping import Proxy

#: h2ping's request-head timeout in the harness: a partial head gets its 408 soon.
HEADER_TIMEOUT = 0.25
#: How long a client waits for an answer (or a close) before calling it hung.
ANSWER_WITHIN = HEADER_TIMEOUT + 2.0
#: How long resources may take to return to their starting values.
SETTLE_WITHIN = 3.0


# ----------------------------------------------------------------- one loop, many examples


class Harness:
    """An event loop kept across examples, recording whatever goes wrong on it."""

    def __init__(self, loop_kind: str) -> None:
        factory = uvloop.new_event_loop if loop_kind == "uvloop" else asyncio.new_event_loop
        self.loop = factory()
        self.loop_errors: list[str] = []
        self.loop.set_exception_handler(self._on_loop_error)
        self.log_errors = _ErrorLog()
        logging.getLogger("h2ping").addHandler(self.log_errors)
        self.baseline_tasks: set[asyncio.Task[Any]] = set()

    def _on_loop_error(self, _: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        detail = [str(context.get("message"))]
        detail += [f"{k}={context[k]!r}" for k in ("exception", "protocol", "task") if k in context]
        self.loop_errors.append(" ".join(detail))

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 30.0) -> Any:
        async def bounded() -> Any:
            async with asyncio.timeout(timeout):
                return await coro

        return self.loop.run_until_complete(bounded())

    def snapshot_tasks(self) -> None:
        """Call from inside ``run`` once the servers are up."""
        self.baseline_tasks = self._other_tasks()

    def _other_tasks(self) -> set[asyncio.Task[Any]]:
        return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]

    async def settle(
        self, leftovers: Callable[[], dict[str, object]], *, tasks_too: bool = True
    ) -> None:
        """Wait until nothing is left over; fail with what is, if it stays."""
        deadline = self.loop.time() + SETTLE_WITHIN
        while True:
            left = {name: n for name, n in leftovers().items() if n}
            tasks = self._other_tasks() - self.baseline_tasks if tasks_too else set()
            if tasks:
                left["tasks"] = sorted(repr(t.get_coro()) for t in tasks)
            if not left:
                return
            if self.loop.time() > deadline:
                raise AssertionError(f"left behind after the example: {left}")
            await asyncio.sleep(0.01)

    def check_quiet(self) -> None:
        """Nothing reached the loop's exception handler, h2ping logged no ERROR."""
        errors, self.loop_errors = self.loop_errors, []
        logged, self.log_errors.records = self.log_errors.records, []
        assert not errors, errors
        assert not logged, logged

    def close(self) -> None:
        logging.getLogger("h2ping").removeHandler(self.log_errors)
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


class _ErrorLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {record.getMessage()}")


LOOP_KINDS = ["uvloop", "asyncio"]


# ----------------------------------------------------------------- HTTP/1.1 on the wire


@dataclass
class Response:
    status: int
    fields: list[tuple[bytes, bytes]]
    body: bytes

    def field(self, name: bytes) -> bytes | None:
        return next((v for n, v in self.fields if n == name), None)


_STATUS_LINE = re.compile(rb"HTTP/1\.1 ([1-5][0-9][0-9]) [^\r\n]*")
_FIELD_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([^\r\n]*?)[ \t]*")
_CHUNK_SIZE = re.compile(rb"([0-9a-fA-F]+)(;[^\r\n]*)?")


def parse_responses(
    data: bytes, no_body: Callable[[int, int], bool], eof: bool
) -> tuple[list[Response], bytes]:
    """The whole responses at the start of ``data``, and what follows them.

    Fails (AssertionError) on anything that is not HTTP/1.1. ``no_body(i, status)``
    says whether final response ``i`` answers a HEAD request.
    """
    responses: list[Response] = []
    pos, finals = 0, 0
    while pos < len(data):
        head_end = data.find(b"\r\n\r\n", pos)
        if head_end < 0:
            partial = data[pos : pos + 9]
            assert b"HTTP/1.1 "[: len(partial)] == partial, f"not a status line: {data[pos:]!r}"
            break
        status_line, *lines = data[pos:head_end].split(b"\r\n")
        match = _STATUS_LINE.fullmatch(status_line)
        assert match, f"invalid status line {status_line!r}"
        status = int(match[1])
        fields = []
        for line in lines:
            field_match = _FIELD_LINE.fullmatch(line)
            assert field_match, f"invalid field line {line!r}"
            fields.append((field_match[1].lower(), field_match[2]))
        body_start = head_end + 4
        codings = [v for n, v in fields if n == b"transfer-encoding"]
        lengths = [v for n, v in fields if n == b"content-length"]
        assert not (codings and lengths), f"both Content-Length and Transfer-Encoding: {fields}"
        if status < 200 or status in (204, 304) or no_body(finals, status):
            body, end = b"", body_start
        elif codings:
            assert codings == [b"chunked"], codings
            parsed = _parse_chunked(data, body_start)
            if parsed is None:
                break
            body, end = parsed
        elif lengths:
            assert len(lengths) == 1 and lengths[0].isdigit(), lengths
            end = body_start + int(lengths[0])
            if end > len(data):
                break
            body = data[body_start:end]
        elif eof:  # delimited by the close
            body, end = data[body_start:], len(data)
        else:
            break
        responses.append(Response(status, fields, body))
        finals += status >= 200
        pos = end
    return responses, data[pos:]


def _parse_chunked(data: bytes, pos: int) -> tuple[bytes, int] | None:
    body = bytearray()
    while True:
        line_end = data.find(b"\r\n", pos)
        if line_end < 0:
            return None
        match = _CHUNK_SIZE.fullmatch(data[pos:line_end])
        assert match, f"invalid chunk size line {data[pos:line_end]!r}"
        size = int(match[1], 16)
        pos = line_end + 2
        if size == 0:
            if len(data) < pos + 2:
                return None
            assert data[pos : pos + 2] == b"\r\n", f"trailer fields: {data[pos:]!r}"
            return bytes(body), pos + 2
        if len(data) < pos + size + 2:
            return None
        assert data[pos + size : pos + size + 2] == b"\r\n", "chunk without its CRLF"
        body += data[pos : pos + size]
        pos += size + 2


@dataclass
class Conversation:
    responses: list[Response]
    rest: bytes  # bytes after the last whole response
    eof: bool  # the proxy closed (FIN or RST)
    reset: bool  # ... with a RST (or our own write failed on the closed socket)
    timed_out: bool

    @property
    def finals(self) -> list[Response]:
        return [r for r in self.responses if r.status >= 200]


async def converse(
    port: int,
    pieces: list[bytes],
    done: Callable[[list[Response]], bool],
    no_body: Callable[[int, int], bool] = lambda i, s: False,
    within: float = ANSWER_WITHIN,
) -> Conversation:
    """Send ``pieces`` (one write each) while reading, until ``done`` holds, the
    proxy closes, or ``within`` seconds pass."""
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def send() -> None:
        with contextlib.suppress(ConnectionError):
            for piece in pieces:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.001)  # let the proxy read each piece on its own

    sender = asyncio.create_task(send())
    received, eof, reset, timed_out = b"", False, False, False
    deadline = loop.time() + within
    try:
        while not done(parse_responses(received, no_body, eof=False)[0]):
            try:
                async with asyncio.timeout(deadline - loop.time()):
                    chunk = await reader.read(65536)
            except TimeoutError:
                timed_out = True
                break
            except ConnectionError:  # reset, or a write of ours met the close (EPIPE)
                eof = reset = True
                break
            if not chunk:
                eof = True
                break
            received += chunk
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        writer.transport.abort()
    responses, rest = parse_responses(received, no_body, eof=eof)
    return Conversation(responses, rest, eof, reset, timed_out)


# ----------------------------------------------------------------- the HTTP/1.1 harness


class EchoServer:
    """A small h2c server that answers each request with itself: body, method,
    path and every field, byte for byte (hex in ``x-echo-fields``). It counts the
    requests it saw and answered, which the 502 rule needs, and has no task per
    request, so a leaked task is h2ping's."""

    def __init__(self) -> None:
        self.seen = 0  # requests whose head arrived
        self.answered = 0
        self.connections: set[EchoConnection] = set()
        self.port = 0
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def open_streams(self) -> int:
        return sum(len(c.requests) + len(c.unsent) for c in self.connections)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: EchoConnection(self), "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for conn in list(self.connections):
                conn.transport.abort()
            await self._server.wait_closed()


class EchoConnection(asyncio.Protocol):
    def __init__(self, server: EchoServer) -> None:
        self.server = server
        self.requests: dict[int, tuple[list[tuple[bytes, bytes]], bytearray]] = {}
        self.unsent: dict[int, memoryview] = {}  # response bodies waiting on windows
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.h2 = h2.connection.H2Connection(config)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.server.connections.add(self)
        self.h2.initiate_connection()
        self.transport.write(self.h2.data_to_send())

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.requests.clear()
        self.unsent.clear()

    def data_received(self, data: bytes) -> None:
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError:
            # h2's checks of the request refused it: the upstream never saw it.
            self.transport.write(self.h2.data_to_send())
            self.transport.close()
            return
        for event in events:
            # A stream h2ping reset in the same read as its last frame is closed
            # in h2 by now: nothing to answer, nothing to send.
            with contextlib.suppress(h2.exceptions.StreamClosedError):
                self._on_event(event)
        self.transport.write(self.h2.data_to_send())

    def _on_event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self.server.seen += 1
            self.requests[event.stream_id] = (list(event.headers), bytearray())
        elif isinstance(event, h2.events.DataReceived):
            if event.stream_id in self.requests:
                self.requests[event.stream_id][1].extend(event.data)
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded) and event.stream_id in self.requests:
            self._respond(*self.requests.pop(event.stream_id), event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            self.requests.pop(event.stream_id, None)
            self.unsent.pop(event.stream_id, None)
        elif isinstance(event, h2.events.WindowUpdated):
            for stream_id in list(self.unsent):
                self._send_body(stream_id)

    def _respond(self, fields: list[tuple[bytes, bytes]], body: bytearray, stream_id: int) -> None:
        pseudo = {name: value for name, value in fields if name.startswith(b":")}
        others = b"\n".join(name + b":" + value for name, value in fields if name[:1] != b":")
        head = pseudo[b":method"] == b"HEAD"
        headers = [
            (b":status", b"200"),
            (b"x-echo-method", pseudo[b":method"]),
            (b"x-echo-path", pseudo[b":path"]),
            (b"x-echo-fields", others.hex().encode()),
            (b"content-length", b"%d" % len(body)),
        ]
        self.h2.send_headers(stream_id, headers, end_stream=head or not body)
        self.server.answered += 1
        if body and not head:
            self.unsent[stream_id] = memoryview(bytes(body))
            self._send_body(stream_id)

    def _send_body(self, stream_id: int) -> None:
        rest = self.unsent.pop(stream_id)
        while rest:
            size = min(
                len(rest),
                self.h2.local_flow_control_window(stream_id),
                self.h2.max_outbound_frame_size,
            )
            if size <= 0:
                self.unsent[stream_id] = rest  # the rest when the window opens
                return
            self.h2.send_data(stream_id, rest[:size].tobytes(), end_stream=size == len(rest))
            rest = rest[size:]


class H1Harness(Harness):
    def __init__(self, loop_kind: str) -> None:
        super().__init__(loop_kind)
        self.run(self._start())

    async def _start(self) -> None:
        self.upstream = EchoServer()
        await self.upstream.start()
        self.proxy = Proxy(
            upstream=self.upstream.url,
            listen="127.0.0.1:0",
            header_timeout=HEADER_TIMEOUT,
            shutdown_grace=0.0,
        )
        await self.proxy.start()
        self.snapshot_tasks()

    def leftovers(self) -> dict[str, object]:
        proxy, pool = self.proxy, self.proxy.pool
        assert pool is not None
        return {
            "exchanges": len(proxy.exchanges),
            "client connections": len(proxy.clients),
            "kept body bytes": proxy.retry_budget.used,
            "pool streams": sum(c.table.count() + c.table.reserved for c in pool.connections),
            "upstream open streams": self.upstream.open_streams,
        }

    def close(self) -> None:
        self.run(self.proxy.stop(grace=0))
        self.run(self.upstream.stop())
        super().close()
