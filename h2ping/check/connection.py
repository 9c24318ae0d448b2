"""The one HTTP/2 connection ``h2ping check`` opens, asked one thing at a time:
the server's SETTINGS, a PING's round trip, a GET's response head.

It is driven through h2's public API only (``H2Connection`` and its events).
GOAWAY frames are taken out before h2 sees them, as h2ping's own connections do
(:mod:`h2ping.http2.engine.frames`): h2 closes its whole state machine on any GOAWAY,
and a GET the server promised to finish would fail with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import h2.events
import h2.exceptions
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes

from ..fields import Header
from ..http2.engine import our_settings
from ..http2.engine.errortext import describe_h2_error
from ..http2.engine.frames import GOAWAY, FloodError, FrameSizeError, FrameSplitter, parse_goaway
from ..http2.pingbackoff import punishes_pings
from ..http2.windows import UNMEASURED_WINDOW


class ProbeFailed(Exception):
    """h2ping cannot use the endpoint; the message says why, in one line."""


@dataclass
class GoAway:
    last_stream_id: int
    error: str
    debug: str
    punishes_pings: bool  # ENHANCE_YOUR_CALM, too_many_pings: gRPC's PING policy

    def __str__(self) -> str:
        debug = f', debug "{self.debug}"' if self.debug else ""
        return f"GOAWAY {self.error} (last stream {self.last_stream_id}{debug})"


def _code_name(code: int) -> str:
    try:
        return ErrorCodes(code).name
    except ValueError:
        return f"0x{code:x}"


def printable(data: bytes, limit: int = 80) -> str:
    """Peer-chosen bytes for one line of output: printable ASCII only."""
    return "".join(chr(b) if 32 <= b < 127 else "?" for b in data[:limit])


#: The bytes of an HTTP/2 frame header (RFC 9113, section 4.1).
FRAME_HEADER = 9


def _not_http2(first: bytes) -> str | None:
    """What the first bytes of an answer say when they are no HTTP/2 frames. Only the
    first read is looked at: a peer's first answer comes in one segment."""
    if first.startswith(b"HTTP/"):
        return "answered in HTTP/1.x, not HTTP/2"
    if first[:1] in (b"\x15", b"\x16") and first[1:2] == b"\x03":  # a TLS alert or handshake
        return "answered with TLS: use an https:// upstream"
    head = first[:FRAME_HEADER]
    if len(head) == FRAME_HEADER and all(32 <= b < 127 or b in b"\t\r\n" for b in head):
        # A frame header is binary: its length's first byte is 0 for any frame
        # under 64 KiB. Text is an HTTP/1.x server's answer without a status line
        # (an HTTP/0.9-style error page), or a banner.
        return f'answered with text ("{printable(first, 20)}"), not HTTP/2: it speaks HTTP/1.x'
    return None


class ProbeConnection(asyncio.BufferedProtocol):
    """One HTTP/2 client connection that answers the probe's questions. It sends
    its preface only on :meth:`start`, once the probe knows HTTP/2 was agreed."""

    def __init__(self, address: str, header_list_limit: int) -> None:
        self._address = address  # host:port, for messages
        self._loop = asyncio.get_running_loop()
        self._h2 = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        self._header_list_limit = header_list_limit
        self._frames = FrameSplitter()
        self._buffer = bytearray(64 * 1024)
        self._transport: asyncio.Transport | None = None
        self._started = False
        self._early = bytearray()  # what arrived before start()
        self._first_read = True
        self.ended: str | None = None  # why the connection is over, once it is
        self.lost: asyncio.Future[None] = self._loop.create_future()
        self.settings: asyncio.Future[dict[int, int]] = self._loop.create_future()
        self.sent_settings: dict[int, int] = {}
        self.goaway: GoAway | None = None
        self._pings: dict[bytes, asyncio.Future[float]] = {}
        self._heads: dict[int, asyncio.Future[tuple[list[Header], float]]] = {}

    # ------------------------------------------------------------- the probe's side

    def start(self) -> None:
        """Send the preface and our SETTINGS (h2ping's own), then handle what came."""
        self._h2.local_settings = our_settings(self._header_list_limit, UNMEASURED_WINDOW)
        self._h2.initiate_connection()
        self._started = True
        self._flush()
        early, self._early = bytes(self._early), bytearray()
        if early:
            self._received(early)

    async def ping(self, timeout: float) -> float:
        """One PING; its round trip in seconds."""
        when = "right after the connection opened" if not self._pings else "between PINGs"
        self._check_open(f"{when}: h2ping would open no stream on it")
        opaque = len(self._pings).to_bytes(8, "big")
        acked = self._pings[opaque] = self._loop.create_future()
        self._h2.ping(opaque)
        sent = time.perf_counter()
        self._flush()
        try:
            async with asyncio.timeout(timeout):
                return await acked - sent
        except TimeoutError:
            raise ProbeFailed(
                f"no PING ACK within {timeout:g}s (-ping-timeout): "
                "h2ping would close its connections as dead"
            ) from None

    async def get(self, headers: list[Header], timeout: float) -> tuple[list[Header], float]:
        """Send a GET; its response head and the seconds until it came."""
        self._check_open("before the request")
        stream_id = self._h2.get_next_available_stream_id()
        head = self._heads[stream_id] = self._loop.create_future()
        self._h2.send_headers(stream_id, headers, end_stream=True)
        sent = time.perf_counter()
        self._flush()
        try:
            async with asyncio.timeout(timeout):
                response, received = await head
        except TimeoutError:
            raise ProbeFailed(f"no response head within {timeout:g}s (-request-timeout)") from None
        return response, received - sent

    @property
    def connected(self) -> bool:
        """Whether the connection got as far as this protocol (TCP, and TLS if any)."""
        return self._transport is not None

    def finish(self) -> None:
        """Close cleanly: GOAWAY(NO_ERROR) if HTTP/2 got going, then the transport."""
        if self._transport is None or self._transport.is_closing():
            return
        if self._started and self.ended is None:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self._h2.close_connection()
                self._flush()
        self._transport.close()

    def _check_open(self, when: str) -> None:
        if self.ended is not None:
            raise ProbeFailed(self.ended)
        if self.goaway is not None:
            raise ProbeFailed(f"the upstream sent {self.goaway} {when}")

    # --------------------------------------------------------------- protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self._buffer)

    def buffer_updated(self, nbytes: int) -> None:
        self._received(bytes(self._buffer[:nbytes]))

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None:
            reason = f"{self._address} closed the connection"
        else:
            reason = f"connection to {self._address} lost: {exc}"
        if self.goaway is not None:
            reason += f" after {self.goaway}"
        if not self.settings.done():
            reason += " before its HTTP/2 SETTINGS"
        self._end(reason)
        if not self.lost.done():
            self.lost.set_result(None)

    @property
    def heard_nothing(self) -> bool:
        """Not one byte has come from the peer since :meth:`start`."""
        return self._first_read

    def _received(self, data: bytes) -> None:
        if self.ended is not None:
            return
        if not self._started:
            self._early += data
            return
        if self._first_read:
            self._first_read = False
            if (wrong := _not_http2(data)) is not None:
                self._abort(f"{self._address} {wrong}")
                return
        try:
            for kind, piece in self._frames.split(data):
                if kind == GOAWAY:
                    self._on_goaway(piece)
                else:
                    self._dispatch(self._h2.receive_data(piece))
        except (FloodError, FrameSizeError) as exc:
            self._abort(f"HTTP/2 protocol error from {self._address}: {exc}")
            return
        except Exception as exc:  # anything h2 raises on the peer's bytes
            error = describe_h2_error(exc)
            self._abort(f"HTTP/2 protocol error from {self._address}: {error}")
            return
        self._flush()

    def _dispatch(self, events: Sequence[h2.events.Event]) -> None:
        for event in events:
            if isinstance(event, h2.events.RemoteSettingsChanged):
                self.sent_settings.update(
                    {code: change.new_value for code, change in event.changed_settings.items()}
                )
                if not self.settings.done():
                    self.settings.set_result(dict(self.sent_settings))
            elif isinstance(event, h2.events.PingAckReceived):
                acked = self._pings.get(event.ping_data or b"")
                if acked is not None and not acked.done():
                    acked.set_result(time.perf_counter())
            elif isinstance(event, h2.events.ResponseReceived):
                head = self._heads.pop(event.stream_id or 0, None)
                if head is not None and not head.done():
                    head.set_result((list(event.headers or []), time.perf_counter()))
            elif isinstance(event, h2.events.DataReceived):  # the body is not read: let it flow
                self._h2.acknowledge_received_data(
                    event.flow_controlled_length or 0, event.stream_id or 0
                )
            elif isinstance(event, h2.events.StreamReset):
                head = self._heads.pop(event.stream_id or 0, None)
                code = _code_name(event.error_code or 0)
                _fail(head, f"the upstream reset the request stream ({code})")

    def _on_goaway(self, payload: bytes) -> None:
        goaway = parse_goaway(payload)
        last_stream_id, code, debug = goaway.last_stream_id, goaway.error_code, goaway.debug_data
        self.goaway = GoAway(
            last_stream_id, _code_name(code), printable(debug), punishes_pings(code, debug)
        )
        reason = f"the upstream sent {self.goaway}"
        for acked in self._pings.values():
            _fail(acked, f"{reason} instead of a PING ACK")
        for stream_id in [s for s in self._heads if s > last_stream_id]:
            _fail(self._heads.pop(stream_id), f"{reason}: the request was not processed")
        _fail(self.settings, f"{reason} before its HTTP/2 SETTINGS")

    def _abort(self, reason: str) -> None:
        self._end(reason)
        if self._transport is not None:
            self._transport.abort()

    def _end(self, reason: str) -> None:
        if self.ended is None:
            self.ended = reason
        waiters: list[asyncio.Future[Any]] = [
            self.settings,
            *self._pings.values(),
            *self._heads.values(),
        ]
        for waiter in waiters:
            _fail(waiter, self.ended)

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data and self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)


def _fail(waiter: asyncio.Future[Any] | None, reason: str) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_exception(ProbeFailed(reason))
        waiter.exception()  # no "never retrieved" warning when nobody waits any more
