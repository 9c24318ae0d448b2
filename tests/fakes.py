"""The one fake transport of the tests: it records what was written, in bytes and
write by write, whether reading was paused, and how it was closed.

Every test that hands a protocol (a client connection, an upstream connection,
the TLS layer, the inbound and outbound turns) a transport hands it this one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from hyperframe.frame import Frame

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class FakeTransport(asyncio.Transport):
    """Records the protocol's writes (``written``: all bytes; ``writes``: one entry a
    write, ``writelines`` counting as one), its pauses and resumes of reading, and
    ``close``/``abort``.

    ``strict`` (the default) fails the test on a pause while paused, a resume while
    reading, or a write after close, for the protocols that promise never to do so.
    ``fail`` makes every write raise, as a broken transport's does, recording
    nothing. ``buffered`` is what ``get_write_buffer_size`` answers.
    """

    def __init__(self, *, strict: bool = True, fail: bool = False, buffered: int = 0) -> None:
        super().__init__()
        self.strict = strict
        self.fail = fail
        self.buffered = buffered
        self.written = bytearray()
        self.writes: list[bytes] = []
        self._read = 0  # how much of ``written`` frames() has parsed
        self.closed = False
        self.aborted = False
        self.reading = True
        self.pauses = 0  # pause_reading calls
        self.resumes = 0  # resume_reading calls

    def pause_reading(self) -> None:
        if self.strict:
            assert self.reading, "paused twice"
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        if self.strict:
            assert not self.reading, "resumed while reading"
        self.reading = True
        self.resumes += 1

    def is_reading(self) -> bool:
        return self.reading

    def write(self, data: Any) -> None:
        if self.strict:
            assert not self.is_closing(), "write after close"
        if self.fail:
            raise RuntimeError("a broken transport")
        self.written += data
        self.writes.append(bytes(data))

    def writelines(self, parts: Iterable[Any]) -> None:
        self.write(b"".join(parts))  # one write, as the client connections' batches are

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def frames(self) -> list[Frame]:
        """The HTTP/2 frames written since the last call (past the client preface,
        which the first call checks)."""
        data = bytes(self.written[self._read :])
        if self._read == 0:
            assert data.startswith(PREFACE)
            data, self._read = data[len(PREFACE) :], len(PREFACE)
        out, pos = parse_frames(data)
        self._read += pos
        return out


def parse_frames(data: bytes) -> tuple[list[Frame], int]:
    """The whole HTTP/2 frames at the start of ``data``, and where they end."""
    out, pos = [], 0
    while pos + 9 <= len(data):
        frame, length = Frame.parse_frame_header(memoryview(data[pos : pos + 9]))
        frame.parse_body(memoryview(data[pos + 9 : pos + 9 + length]))
        out.append(frame)
        pos += 9 + length
    return out, pos
