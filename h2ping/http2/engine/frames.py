"""Cutting the inbound HTTP/2 byte stream at frame boundaries, before h2 sees it.

Two jobs need frame boundaries. GOAWAY frames are taken out and handled by the
connection, because h2 closes its whole state machine on any received GOAWAY and
would fail the streams the server promised to finish. And every frame that
asks nothing of h2ping's users is charged what it costs to a
:class:`~.floodguard.FloodGuard`, so a flood ends the connection instead of the
process's CPU and memory (RFC 9113 10.5); a RST_STREAM or WINDOW_UPDATE on a
stream never opened is refused here too (RFC 9113 5.1). Only the 9-byte frame
headers are read; payloads pass through untouched.

A third job serves the fast layer (:mod:`.fast`) alone, and is off unless asked
for. With ``plain_data``, non-empty DATA frames with no flags (no END_STREAM, no
padding) are handed out on their own, as their payload, so the engine can
deliver them without h2's per-frame machinery (see
:meth:`.fastconnection.FastConnection.take_data`), several such frames of one
stream in a row (a download's) as one piece, the list of their payloads, so
that the engine can count them all in one step; and DATA frames
with END_STREAM alone as whole frames (``take_last_data``). With
``plain_headers``, so are HEADERS frames that hold a whole header block without
padding or priority (``take_response_headers``). Frames inside a header block
(HEADERS or PUSH_PROMISE waiting for its CONTINUATION) always go to h2, which
must see anything that interrupts the block.

Frames are taken out in batches of a bounded size, so that one connection
receiving at full speed cannot hold the event loop for all it read (uvloop
hands over several 256 KiB reads in one loop iteration): the connection
handles one batch per loop turn and leaves the rest for the next.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import h2.exceptions
from h2.errors import ErrorCodes
from hyperframe.frame import Frame

from . import floodguard as fg
from .floodguard import FloodGuard, IdleStreamError

FRAME_HEADER = 9
_DATA, HEADERS_TYPE, _PRIORITY, _RST_STREAM, _SETTINGS, _PUSH_PROMISE, _PING, _GOAWAY = (
    0x0, 0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7
)  # fmt: skip
_WINDOW_UPDATE, _CONTINUATION = 0x8, 0x9
SETTINGS_TYPE, CONTINUATION_TYPE = _SETTINGS, _CONTINUATION
_ACK = _END_STREAM = 0x1
_END_HEADERS = 0x4
_STREAM_ID_MASK = 0x7FFFFFFF
_PLAIN_HEADERS = _END_HEADERS | 0x1  # END_STREAM or not; no PADDED, no PRIORITY
#: A frame header in one read: length << 8 | type, flags, stream id (R bit included).
_HEAD = struct.Struct(">IBI")

#: Kinds of the pieces :meth:`FrameSplitter.take` hands out. A positive kind is
#: the stream id of a plain DATA frame, and the piece is its payload; or, for
#: several such frames of the stream in a row, the list of their payloads
#: (``list[bytes]``). Every other piece is ``bytes``.
RUN = 0  # a run of whole frames, for h2
GOAWAY = -1  # the payload of one GOAWAY frame
FRAME = -2  # one whole frame for a fast path: plain HEADERS, or DATA with END_STREAM

Piece = tuple[int, Any]  # (kind, bytes), or (stream id, list[bytes]): see the kinds above

#: Our SETTINGS_MAX_FRAME_SIZE (h2's default, which h2ping does not change).
MAX_FRAME_SIZE = 16384
_SETTING = 6  # bytes per SETTINGS entry
_SMALL_DATA = fg.SMALL_DATA


class FrameSizeError(Exception):
    """A frame header announced more than our SETTINGS_MAX_FRAME_SIZE."""


class FrameSplitter:
    """Feed bytes in; take back runs of whole frames for h2 and GOAWAY payloads.

    :meth:`take` hands out at most about ``budget`` bytes at a time, so that a
    caller can bound its work per event-loop callback and leave the rest
    (:attr:`ready`) for its next turn.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        plain_data: bool = False,
        plain_headers: bool = False,
        guard: FloodGuard | None = None,
    ) -> None:
        """``guard``: what the peer's frames are charged to (default: one of its
        own on ``clock``, with no table of streams, as a server's)."""
        self.guard = FloodGuard(clock) if guard is None else guard
        self._plain_data = plain_data
        self._plain_headers = plain_headers
        self._in_header_block = False
        self._charged_block = False  # the header block under way is on a closed stream
        self._buffer = b""
        self._pos = 0  # where the first frame not yet taken starts

    @property
    def backlog(self) -> int:
        """Bytes fed but not yet taken (whole frames, and a partial one)."""
        return len(self._buffer) - self._pos

    @property
    def ready(self) -> bool:
        """Whether :meth:`take` has work: a whole frame, or a frame header to refuse."""
        data, pos = self._buffer, self._pos
        if len(data) - pos < FRAME_HEADER:
            return False
        length = int.from_bytes(data[pos : pos + 3], "big")
        return length > MAX_FRAME_SIZE or len(data) - pos >= FRAME_HEADER + length

    def feed(self, data: bytes) -> None:
        if self._pos:  # one copy of the rest per read, never one per take
            self._buffer = self._buffer[self._pos :] + data
            self._pos = 0
        elif self._buffer:
            self._buffer += data
        else:
            self._buffer = data

    def split(self, data: bytes) -> list[Piece]:
        """Feed ``data`` and take every whole frame there is."""
        self.feed(data)
        return self.take()

    def take(self, budget: int | None = None) -> list[Piece]:
        """Return ``(kind, bytes)`` pieces in order (see :data:`RUN`, :data:`GOAWAY`).
        Stops after the frame that reaches ``budget`` bytes (None: no limit); a
        partial frame waits for more data."""
        data = self._buffer
        pieces: list[Piece] = []
        append = pieces.append
        start = pos = self._pos
        size = len(data)
        # A frame is begun below ``stop``: within the budget, its header whole.
        stop = size - FRAME_HEADER + 1
        if budget is not None and pos + budget < stop:
            stop = pos + budget
        costs: dict[str, float] = {}  # what the frames charged cost, by kind
        guard = self.guard
        hears = guard.hears  # None: not a client's (see FloodGuard)
        plain_data, plain_headers = self._plain_data, self._plain_headers
        in_block = self._in_header_block  # written back as the frames are taken
        unpack = _HEAD.unpack_from
        # The stream of the plain DATA piece handed out last (0: the last piece
        # was no such piece), which the same stream's next frame joins.
        run_of = 0
        while pos < stop:
            head, flags, stream_id = unpack(data, pos)  # one call for all nine bytes
            length = head >> 8
            if length > MAX_FRAME_SIZE:
                # Refuse before buffering up to 16 MiB of it (RFC 9113 4.2).
                raise FrameSizeError(f"frame of {length} bytes announced")
            body = pos + FRAME_HEADER
            frame_end = body + length
            if frame_end > size:
                break
            kind = head & 0xFF
            stream_id &= _STREAM_ID_MASK
            if not kind and not in_block:  # DATA (inside a header block, h2 refuses it)
                if length < _SMALL_DATA:
                    if not length and not flags & _END_STREAM:
                        _add(costs, fg.EMPTY_DATA, 1)
                        pos = frame_end
                        continue  # (h2's, whatever its stream)
                    if (
                        hears is not None
                        and hears(stream_id) is None
                        and not guard.in_flight(stream_id)
                    ):
                        # Past what was in flight when we reset it: a flood.
                        _add(costs, fg.CLOSED_STREAMS, 1 - length / _SMALL_DATA)
                if plain_data and stream_id and (not flags or flags == _END_STREAM):
                    if pos > start:
                        append((RUN, data[start:pos]))
                    if flags:
                        append((FRAME, data[pos:frame_end]))
                        run_of = 0
                    elif stream_id == run_of and pos == start:
                        # Right after this stream's plain DATA: one piece, a list.
                        held = pieces[-1][1]
                        if held.__class__ is list:
                            held.append(data[body:frame_end])
                        else:
                            held = [held, data[body:frame_end]]
                            pieces[-1] = (stream_id, held)
                        # The same stream's next frames, while they are plain DATA
                        # that asks nothing of the loop above: flagless, no smaller
                        # than a flood's (never charged), whole, begun in the budget.
                        # (A set R bit makes the stream id differ: the loop above.)
                        pos = frame_end
                        while pos < stop:
                            head, flags, next_id = unpack(data, pos)
                            length = head >> 8
                            if (
                                next_id != stream_id
                                or flags
                                or head & 0xFF
                                or length < _SMALL_DATA
                                or length > MAX_FRAME_SIZE
                            ):
                                break
                            frame_end = pos + FRAME_HEADER + length
                            if frame_end > size:
                                break
                            held.append(data[pos + FRAME_HEADER : frame_end])
                            pos = frame_end
                        start = pos
                        continue
                    else:
                        append((stream_id, data[body:frame_end]))
                        run_of = stream_id
                    start = frame_end
            elif in_block:
                # Only CONTINUATION may come now; h2 refuses anything else.
                if kind == _CONTINUATION:
                    if self._charged_block:
                        _add(costs, fg.CLOSED_STREAMS, 1 + length / fg.HPACK_BYTES_PER_UNIT)
                    if flags & _END_HEADERS:
                        in_block = self._in_header_block = self._charged_block = False
            elif kind == HEADERS_TYPE:
                if (
                    hears is not None
                    and hears(stream_id) is None
                    and not guard.in_flight(stream_id)
                ):
                    # A stream let go, past what was in flight: HPACK work for nothing.
                    _add(costs, fg.CLOSED_STREAMS, 1 + length / fg.HPACK_BYTES_PER_UNIT)
                    self._charged_block = not flags & _END_HEADERS
                if plain_headers and (flags | _END_STREAM) == _PLAIN_HEADERS and stream_id:
                    if pos > start:
                        append((RUN, data[start:pos]))
                    append((FRAME, data[pos:frame_end]))
                    start = frame_end
                    run_of = 0
                else:
                    in_block = self._in_header_block = not flags & _END_HEADERS
            elif kind == _GOAWAY:
                # (8 bytes of fixed fields, then debug data, read for the log)
                _add(costs, fg.GOAWAY, fg.GOAWAY_COST + max(0, length - 8) / fg.BYTES_PER_UNIT)
                if pos > start:
                    append((RUN, data[start:pos]))
                append((GOAWAY, data[body:frame_end]))
                start = frame_end
                run_of = 0
            elif kind == _PUSH_PROMISE:
                in_block = self._in_header_block = not flags & _END_HEADERS
            elif kind == _PING:
                _add(costs, fg.PING, 1)
            elif kind == _SETTINGS:
                _add(costs, fg.SETTINGS, 1 + length // _SETTING * fg.SETTINGS_ENTRY)
            elif kind == _PRIORITY:
                _add(costs, fg.PRIORITY, 1)
            elif kind in (_RST_STREAM, _WINDOW_UPDATE):
                if hears is not None:
                    if stream_id and guard.idle(stream_id):
                        name = "RST_STREAM" if kind == _RST_STREAM else "WINDOW_UPDATE"
                        raise IdleStreamError(f"{name} on stream {stream_id}, never opened")
                    _add(costs, fg.RST_STREAM if kind == _RST_STREAM else fg.WINDOW_UPDATE, 1)
            elif kind > _CONTINUATION:
                _add(costs, fg.UNKNOWN, 1 + length / fg.BYTES_PER_UNIT)
            pos = frame_end
        if pos > start:
            append((RUN, data[start:pos]))
        if pos == size:
            self._buffer, self._pos = b"", 0
        else:
            self._pos = pos
        if costs:
            guard.charge(costs)
        return pieces


def _add(costs: dict[str, float], kind: str, cost: float) -> None:
    costs[kind] = costs.get(kind, 0.0) + cost


def frames_in(run: bytes) -> Iterator[bytes]:
    """Each frame of a run of whole frames (a :data:`RUN` piece), in order."""
    pos, end = 0, len(run)
    while pos < end:
        frame_end = pos + FRAME_HEADER + int.from_bytes(run[pos : pos + 3], "big")
        yield run[pos:frame_end]
        pos = frame_end


def unreadable(run: bytes) -> tuple[int, int] | None:
    """(type, stream id) of the first frame of ``run`` that hyperframe cannot
    read (bad padding, a bad length for its type), named as h2 names a refused
    header block: a CONTINUATION by the HEADERS it belongs to. None if all read.
    For a fault in a run given to h2 whole, which h2 raises before it knows
    the frame."""
    named: tuple[int, int] | None = None
    for frame in frames_in(run):
        kind, stream_id = frame[3], int.from_bytes(frame[5:9], "big") & _STREAM_ID_MASK
        if kind != _CONTINUATION or named is None:
            named = (kind, stream_id)
        try:
            parsed, _ = Frame.parse_frame_header(memoryview(frame[:FRAME_HEADER]))
            parsed.parse_body(memoryview(frame[FRAME_HEADER:]))
        except Exception:
            return named
    return None


def data_frame(stream_id: int, payload: bytes) -> bytes:
    """A plain DATA frame again, from what :meth:`FrameSplitter.take` handed out."""
    return len(payload).to_bytes(3, "big") + b"\x00\x00" + stream_id.to_bytes(4, "big") + payload


@dataclass(frozen=True, slots=True)
class Goaway:
    """What a GOAWAY frame says (RFC 9113 6.8)."""

    last_stream_id: int
    error_code: int
    debug_data: bytes

    @property
    def code_name(self) -> str:
        """``NO_ERROR``, ``ENHANCE_YOUR_CALM``: the error code's name, else its number."""
        try:
            return ErrorCodes(self.error_code).name
        except ValueError:
            return str(self.error_code)

    def describe(self, last_stream_id: int) -> str:
        """For a log line: the debug data as printable ASCII, at most 80 characters."""
        text = "".join(chr(b) if 32 <= b < 127 else "?" for b in self.debug_data[:80])
        debug = f' debug="{text}"' if text else ""
        return f"last_stream_id={last_stream_id} error={self.code_name}{debug}"


def parse_goaway(payload: bytes) -> Goaway:
    """A GOAWAY frame's payload, read."""
    if len(payload) < 8:
        raise h2.exceptions.ProtocolError("GOAWAY frame shorter than 8 bytes")
    last_stream_id = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
    return Goaway(last_stream_id, int.from_bytes(payload[4:8], "big"), bytes(payload[8:]))
