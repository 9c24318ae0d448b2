"""Driving an UpstreamConnection without sockets: the shared fake transport
(:mod:`tests.fakes`) records what the client wrote, a fake server builds frames
with hyperframe and hpack, and :class:`Harness` is one connection over both."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Iterable, Iterator
from typing import Any
from unittest import mock

import hpack
from h2.settings import SettingCodes
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from h2ping.config import Config, parse_upstream
from h2ping.errors import UpstreamError
from h2ping.fields import Header
from h2ping.http2.engine import fastpaths
from h2ping.http2.observer import reported
from h2ping.http2.streams import StreamSlot, UpstreamStream
from h2ping.http2.upstream import ConnState, UpstreamConnection
from h2ping.stats import Stats

from .fakes import FakeTransport

REQUEST: list[Header] = [
    (b":method", b"POST"),
    (b":scheme", b"https"),
    (b":authority", b"upstream.test"),
    (b":path", b"/x"),
]


def config(**settings: Any) -> Config:
    settings.setdefault("ping_interval", 0.0)  # no timers unless a test asks for them
    settings.setdefault("max_conn_age", 0.0)
    settings.setdefault("idle_conn_timeout", 0.0)
    return Config(upstream=parse_upstream("https://upstream.test"), **settings)


@contextlib.contextmanager
def only_fast_paths(paths: Collection[str]) -> Iterator[None]:
    """Connections made meanwhile take these fast paths, whatever the probes said."""
    with mock.patch.object(fastpaths, "enabled", lambda: frozenset(paths)):
        yield


def forget_to_count_plain_data(monkeypatch: Any) -> None:
    """Break the fast DATA path: it takes a frame but leaves the stream's window
    as it was (what the probes and the differential test must catch)."""
    from h2ping.http2.engine.fastconnection import FastConnection

    take = FastConnection.take_data

    def forgetful(self: FastConnection, stream_id: int, size: int, last: bool = False) -> Any:
        taken = take(self, stream_id, size, last)
        if taken:
            self.streams[stream_id]._inbound_window_manager.current_window_size += size
        return taken

    monkeypatch.setattr(FastConnection, "take_data", forgetful)


class FakeServer:
    """Server frames as bytes. One HPACK encoder, as a real server has per connection."""

    def __init__(self) -> None:
        self._encoder = hpack.Encoder()

    @staticmethod
    def settings(ack: bool = False, **values: int) -> bytes:
        frame = SettingsFrame(0, flags=["ACK"] if ack else [])
        frame.settings = {getattr(SettingCodes, name.upper()): v for name, v in values.items()}
        return frame.serialize()

    def headers(
        self,
        stream_id: int,
        status: int | None = 200,
        extra: Iterable[tuple[str, str]] = (),
        end_stream: bool = False,
    ) -> bytes:
        """HEADERS (and CONTINUATION frames past 16 KiB); ``status=None`` for trailers."""
        fields = [(":status", str(status))] if status is not None else []
        block = self._encoder.encode([*fields, *extra])
        pieces = [block[i : i + 16384] for i in range(0, len(block), 16384)] or [b""]
        frames: list[Frame] = [
            HeadersFrame(stream_id, pieces[0], flags=["END_STREAM"] if end_stream else [])
        ]
        frames += [ContinuationFrame(stream_id, piece) for piece in pieces[1:]]
        frames[-1].flags.add("END_HEADERS")
        return b"".join(frame.serialize() for frame in frames)

    @staticmethod
    def data(stream_id: int, payload: bytes, end_stream: bool = False) -> bytes:
        frame = DataFrame(stream_id, flags=["END_STREAM"] if end_stream else [])
        frame.data = payload
        return frame.serialize()

    @staticmethod
    def goaway(last_stream_id: int, error_code: int = 0) -> bytes:
        return GoAwayFrame(0, last_stream_id=last_stream_id, error_code=error_code).serialize()

    @staticmethod
    def rst(stream_id: int, error_code: int) -> bytes:
        return RstStreamFrame(stream_id, error_code=error_code).serialize()

    @staticmethod
    def ping_ack(payload: bytes) -> bytes:
        return PingFrame(0, flags=["ACK"], opaque_data=payload).serialize()

    @staticmethod
    def window_update(stream_id: int, increment: int) -> bytes:
        return WindowUpdateFrame(stream_id, window_increment=increment).serialize()


class RecordingSink:
    """A StreamSink that records what the stream reported."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: list[Header] = []
        self.end_stream_with_headers = False
        self.data = bytearray()
        self.ended = False
        self.error: UpstreamError | None = None
        self.send_ready = 0
        self.informational: list[list[Header]] = []
        self.on_error_hook: Any = None  # called with the error, to act from inside the callback

    def on_informational(self, headers: list[Header]) -> None:
        self.informational.append(headers)

    def on_response(self, headers: list[Header], end_stream: bool) -> None:
        self.headers = headers
        self.status = int(dict(headers)[b":status"])
        self.end_stream_with_headers = end_stream

    def on_data(self, data: bytes, flow_controlled_length: int) -> int:
        """Holds every credit (a client that reads nothing yet): returns none."""
        self.data += data
        return 0

    def on_end(self) -> None:
        self.ended = True

    def on_error(self, error: UpstreamError) -> None:
        self.error = error
        if self.on_error_hook is not None:
            self.on_error_hook(error)

    def on_send_ready(self) -> None:
        self.send_ready += 1


class Harness:
    """One connection, the bytes it wrote, and how often it told its pool."""

    def __init__(self, max_streams: int = 10, window: int = 65535, **settings: object) -> None:
        self.changes = 0
        self.stats = Stats()
        self.conn = UpstreamConnection(
            config(**settings), 1, self._changed, observer=reported(self.stats, 1)
        )
        self.transport = FakeTransport()
        self.server = FakeServer()
        self.conn.connection_made(self.transport)
        self.handshake = self.transport.frames()
        self.feed(
            self.server.settings(max_concurrent_streams=max_streams, initial_window_size=window),
            self.server.settings(ack=True),  # our windows apply from the peer's ACK on
        )

    def _changed(self, conn: UpstreamConnection, state: ConnState) -> None:
        self.changes += 1

    def feed(self, *chunks: bytes) -> None:
        for chunk in chunks:
            self.conn.data_received(chunk)

    async def settle(self) -> None:
        """Let the loop turn until the connection has taken in all it was fed
        (more than a batch takes several turns, with reading paused meanwhile)."""
        while not self.transport.reading and self.conn.state is not ConnState.CLOSED:
            await asyncio.sleep(0)

    def slot(self) -> StreamSlot:
        slot = self.conn.table.try_reserve()
        assert slot is not None
        return slot

    def open(self, end_stream: bool = True) -> tuple[UpstreamStream, RecordingSink]:
        sink = RecordingSink()
        return self.slot().open(REQUEST, sink, end_stream=end_stream), sink

    async def sent(self) -> list[Frame]:
        await asyncio.sleep(0)  # writes are coalesced into one per loop turn
        return self.transport.frames()

    async def sent_all(self, turns: int = 20) -> list[Frame]:
        """What was written over ``turns`` loop turns: request bodies go out a
        batch per turn."""
        frames: list[Frame] = []
        for _ in range(turns):
            frames += await self.sent()
        return frames


def of(kind: type[Frame], frames: list[Frame]) -> list:
    return [f for f in frames if isinstance(f, kind)]


def data_bytes(frames: list[Frame], stream_id: int) -> int:
    return sum(len(f.data) for f in of(DataFrame, frames) if f.stream_id == stream_id)
