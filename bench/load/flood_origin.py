"""The origin of the flood scenario: a raw HTTP/2 server over TLS that floods the
connection a request arrives on, with frames a server may send but should not
send by the hundred thousand.

    cd bench && python -m load.flood_origin --port 8443 --cert CERT.pem --key KEY.pem

``GET /flood/ATTACK`` starts ATTACK on that request's stream and connection for
``--seconds`` (or until the client ends the connection), then closes the
connection; any other path is answered 200 ``ok``. The attacks:

  settings   16 KiB SETTINGS frames (2,730 new identifiers each), 95 a second
  priority   PRIORITY frames
  unknown    frames of an unknown type (0x20), 8 bytes each
  hints      ``103`` heads on the request's stream
  goaway     GOAWAY frames (NO_ERROR, the request's stream as the last)
  resets     RST_STREAM on stream ids never opened
  reflect    a response head with an uppercase name (the client resets the
             stream), then 1-byte DATA frames on that stream

It reads what the client writes meanwhile, so each attack's record says when the
client ended the connection, with which GOAWAY code, and how many RST_STREAMs it
wrote. On SIGTERM or SIGINT it prints one JSON line of records and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import ssl
import time
from typing import Any

import hpack
from hyperframe.frame import (
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
)

from common.procs import run_on_uvloop

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
CHUNK = 64 * 1024


def _settings_16k() -> bytes:
    payload = b"".join((0x10 + i).to_bytes(2, "big") + bytes(4) for i in range(16384 // 6))
    return len(payload).to_bytes(3, "big") + b"\x04\x00" + bytes(4) + payload


class Connection:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seconds: float
    ) -> None:
        self.reader, self.writer = reader, writer
        self.seconds = seconds
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        self.closed = asyncio.Event()
        self.goaway: int | None = None
        self.goaway_at: float | None = None
        self.resets = 0
        self.attack: asyncio.Task[dict[str, Any]] | None = None

    def headers(self, stream_id: int, fields: list[tuple[str, str]], end: bool = False) -> bytes:
        flags = ["END_HEADERS", *(["END_STREAM"] if end else [])]
        return HeadersFrame(stream_id, self.encoder.encode(fields), flags=flags).serialize()

    async def run(self, records: list[dict[str, Any]]) -> None:
        if await self.reader.readexactly(len(PREFACE)) != PREFACE:
            return
        settings = SettingsFrame(0)
        settings.settings = {SettingsFrame.MAX_CONCURRENT_STREAMS: 100}
        self.writer.write(settings.serialize() + SettingsFrame(0, flags=["ACK"]).serialize())
        try:
            while True:
                header = await self.reader.readexactly(9)
                frame, length = Frame.parse_frame_header(memoryview(header))
                frame.parse_body(memoryview(await self.reader.readexactly(length)))
                self.on_frame(frame, records)
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            self.closed.set()
            if self.attack is not None:
                with contextlib.suppress(BaseException):
                    await self.attack

    def on_frame(self, frame: Frame, records: list[dict[str, Any]]) -> None:
        if isinstance(frame, GoAwayFrame) and self.goaway is None:
            self.goaway, self.goaway_at = frame.error_code, time.monotonic()
        elif isinstance(frame, RstStreamFrame):
            self.resets += 1
        elif isinstance(frame, HeadersFrame):
            fields = dict(self.decoder.decode(frame.data))
            path = str(fields.get(":path", "/"))
            if path.startswith("/flood/") and self.attack is None:
                name = path.split("/")[2].split("?")[0]
                self.attack = asyncio.create_task(self.flood(name, frame.stream_id))
                self.attack.add_done_callback(
                    lambda t: t.cancelled() or t.exception() or records.append(t.result())
                )
            else:
                self.writer.write(self.headers(frame.stream_id, [(":status", "200")]))
                self.writer.write(
                    DataFrame(frame.stream_id, b"ok", flags=["END_STREAM"]).serialize()
                )

    def attack_frame(self, name: str, stream_id: int) -> tuple[bytes, float]:
        """One unit of the attack, and the pause after each (0: as fast as it drains)."""
        if name == "settings":
            return _settings_16k(), 1 / 95
        if name == "priority":
            return PriorityFrame(stream_id, depends_on=0, stream_weight=16).serialize(), 0
        if name == "unknown":
            return b"\x00\x00\x08\x20\x00\x00\x00\x00\x00" + bytes(8), 0
        if name == "hints":
            fields = [(":status", "103"), ("link", "</a.css>; rel=preload")]
            return self.headers(stream_id, fields), 0
        if name == "goaway":
            return GoAwayFrame(0, last_stream_id=stream_id, error_code=0).serialize(), 0
        if name == "resets":
            return b"".join(
                RstStreamFrame(sid, error_code=8).serialize()
                for sid in range(stream_id + 1000, stream_id + 3000, 2)
            ), 0
        if name == "reflect":
            return DataFrame(stream_id, b"x").serialize(), 0
        raise ValueError(name)

    def over(self) -> bool:
        """Whether the client ended the connection (or it broke)."""
        return self.closed.is_set() or self.writer.transport.is_closing()

    async def flood(self, name: str, stream_id: int) -> dict[str, Any]:
        unit, pause = self.attack_frame(name, stream_id)
        if name == "reflect":
            self.writer.write(self.headers(stream_id, [(":status", "200"), ("X-Upper", "1")]))
        blob = unit if pause else unit * max(1, CHUNK // len(unit))
        started = time.monotonic()
        deadline = started + self.seconds
        sent, stalled = 0, False
        with contextlib.suppress(ConnectionError, ssl.SSLError, RuntimeError):
            while time.monotonic() < deadline and not self.over():
                self.writer.write(blob)
                left = deadline - time.monotonic()
                try:
                    await asyncio.wait_for(self.writer.drain(), left)
                except TimeoutError:
                    stalled = left > 1.0  # the client stopped reading for over a second
                    break
                sent += len(blob)
                await asyncio.sleep(pause)  # (0: lets the reader see the client's end)
        ended_by_client = self.goaway is not None or self.over()  # before we close it
        if ended_by_client:  # let the reader take the client's last frames (its GOAWAY)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.closed.wait(), 1.0)
        ended = self.goaway_at if self.goaway_at is not None else time.monotonic()
        if not self.over():
            self.writer.close()
        return {
            "attack": name,
            "bytes_sent": sent,
            "frames_sent": sent // len(unit) * (1000 if name == "resets" else 1),
            "client_goaway": self.goaway,
            "client_resets": self.resets,
            "client_ended_it": ended_by_client,
            "client_stopped_reading": stalled,
            "seconds": round(ended - started, 3),
        }


async def serve(args: argparse.Namespace) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(args.cert, args.key)
    context.set_alpn_protocols(["h2"])
    records: list[dict[str, Any]] = []
    tasks: set[asyncio.Task[None]] = set()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(Connection(reader, writer, args.seconds).run(records))
        tasks.add(task)
        try:
            await task
        except (Exception, asyncio.CancelledError):  # one connection's trouble, or the end
            pass
        finally:
            tasks.discard(task)
            writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", args.port, ssl=context)
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    print(f"listening on 127.0.0.1:{args.port}", flush=True)
    await stop
    server.close()
    for task in list(tasks):
        task.cancel()
    print(json.dumps({"records": records}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--seconds", type=float, default=10.0, help="longest flood")
    args = parser.parse_args()
    run_on_uvloop(serve(args))


if __name__ == "__main__":
    main()
