"""A raw HTTP/2 peer: writes whatever frames a test scripts, valid or not.

:class:`ScriptedUpstream` speaks through the ``h2`` library, which refuses to send
malformed frames. :class:`RawUpstream` does not: its script gets a :class:`RawPeer`
that reads the client's frames and writes arbitrary bytes, so a test can stage
protocol violations, floods and garbage. h2c (prior knowledge) only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import hpack
from hyperframe.frame import ContinuationFrame, Frame, HeadersFrame, SettingsFrame

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

Script = Callable[["RawPeer"], Awaitable[None]]


class RawPeer:
    """One accepted connection, driven by the test's script."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()

    async def handshake(self, settings: dict[int, int] | None = None) -> None:
        """Read the client preface, send our SETTINGS and ACK the client's."""
        preface = await self.reader.readexactly(len(PREFACE))
        if preface != PREFACE:
            raise ConnectionError("not an HTTP/2 client preface")
        frame = SettingsFrame(0)
        frame.settings = settings or {}
        self.send(frame.serialize())
        self.send(SettingsFrame(0, flags=["ACK"]).serialize())
        await self.writer.drain()

    async def read_frame(self) -> Frame:
        header = await self.reader.readexactly(9)
        frame, length = Frame.parse_frame_header(memoryview(header))
        frame.parse_body(memoryview(await self.reader.readexactly(length)))
        return frame

    async def read_request(self) -> tuple[int, list[tuple[str, str]]]:
        """Skip frames until a HEADERS frame; return its stream id and decoded headers."""
        while True:
            frame = await self.read_frame()
            if isinstance(frame, HeadersFrame):
                fields = self.decoder.decode(frame.data)
                return frame.stream_id, [(str(n), str(v)) for n, v in fields]

    def headers_frame(
        self, stream_id: int, headers: list[tuple[str, str]], *, end_stream: bool = False
    ) -> bytes:
        """HEADERS (plus CONTINUATION frames when the block exceeds 16 KiB)."""
        block = self.encoder.encode(headers)
        pieces = [block[i : i + 16384] for i in range(0, len(block), 16384)] or [b""]
        frames: list[HeadersFrame | ContinuationFrame] = []
        for i, piece in enumerate(pieces):
            flags = ["END_HEADERS"] if i == len(pieces) - 1 else []
            if i == 0:
                frames.append(
                    HeadersFrame(
                        stream_id, piece, flags=flags + (["END_STREAM"] if end_stream else [])
                    )
                )
            else:
                frames.append(ContinuationFrame(stream_id, piece, flags=flags))
        return b"".join(frame.serialize() for frame in frames)

    def send(self, *chunks: bytes) -> None:
        for chunk in chunks:
            self.writer.write(chunk)

    async def drain(self) -> None:
        await self.writer.drain()


class RawUpstream:
    """Listens on 127.0.0.1 and runs ``script`` for each accepted connection."""

    def __init__(self, script: Script, host: str = "127.0.0.1") -> None:
        self.script = script
        self.host = host
        self.port = 0
        self.connections = 0
        self.errors: list[BaseException] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> RawUpstream:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # The script runs in a task of its own: stop() cancels that, never this
        # server callback (asyncio reports a cancelled callback as an error).
        self.connections += 1
        task = asyncio.create_task(self._run_script(RawPeer(reader, writer)))
        self._tasks.add(task)
        try:
            await task
        except asyncio.CancelledError:
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _run_script(self, peer: RawPeer) -> None:
        try:
            await self.script(peer)
            await peer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up: often the point of the test
        except Exception as exc:  # recorded for the test to inspect
            self.errors.append(exc)
