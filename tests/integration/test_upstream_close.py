"""Responses an upstream finished sending before it closed the connection reach the
client whole: whatever order the last DATA frames and the GOAWAY come in, and
whether the close is a TLS close_notify, a bare TCP FIN or a reset.

The origin here is a blocking TLS server of its own (memory BIOs over a plain
socket), so the test decides exactly what goes on the wire: every response, the
GOAWAY and the close leave in one write, as a server ending a connection sends
them. The responses add up to several reads and several of the proxy's inbound
turns, so the close arrives while the proxy still has most of them to read.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import ssl
import threading

import aiohttp
import h2.config
import h2.connection
import h2.events
import hyperframe.frame
import pytest

from ..conftest import TLSFiles, close_with_reset, running_proxy

N_STREAMS = 8
BODY_SIZE = 48 * 1024  # 8 x 48 KiB: six of the proxy's 64 KiB turns

ORDERS = ("goaway_first", "goaway_between", "goaway_last")
CLOSES = ("close_notify", "fin", "reset")


def body_for(path: str) -> bytes:
    seed = hashlib.sha256(path.encode()).digest()
    return (seed * (BODY_SIZE // len(seed) + 1))[:BODY_SIZE]


class ClosingOrigin:
    """Takes one connection, waits for ``N_STREAMS`` requests, then sends every
    response, a GOAWAY naming the last stream, and the close in one write."""

    def __init__(self, tls: TLSFiles, order: str, close: str) -> None:
        self.order, self.close = order, close
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(tls.cert_file, tls.key_file)
        self.context.set_alpn_protocols(["h2"])
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> ClosingOrigin:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.listener.close()
        self.thread.join(10)

    def _serve(self) -> None:
        try:
            raw, _ = self.listener.accept()
        except OSError:
            return
        self.connections += 1
        try:
            with raw:
                raw.settimeout(10)
                self._converse(raw)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _converse(self, raw: socket.socket) -> None:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.context.wrap_bio(incoming, outgoing, server_side=True)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                raw.sendall(outgoing.read())
                incoming.write(raw.recv(65536))
        raw.sendall(outgoing.read())

        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        conn.initiate_connection()
        paths: dict[int, str] = {}
        while True:
            # The proxy's first bytes may have come in with the handshake's last.
            with contextlib.suppress(ssl.SSLWantReadError):
                while True:
                    for event in conn.receive_data(tls.read(65536)):
                        if isinstance(event, h2.events.RequestReceived):
                            paths[event.stream_id] = dict(event.headers)[b":path"].decode()
            tls.write(conn.data_to_send())
            raw.sendall(outgoing.read())
            if len(paths) == N_STREAMS:
                break
            data = raw.recv(65536)
            if not data:
                raise AssertionError("the proxy closed before sending every request")
            incoming.write(data)

        last = max(paths)
        goaway = hyperframe.frame.GoAwayFrame(0, last_stream_id=last).serialize()
        responses = []
        for stream_id, path in sorted(paths.items()):
            body = body_for(path)
            conn.send_headers(
                stream_id, [(b":status", b"200"), (b"content-length", str(len(body)).encode())]
            )
            for at in range(0, len(body), 16384):
                chunk = body[at : at + 16384]
                conn.send_data(stream_id, chunk, end_stream=at + len(chunk) == len(body))
            responses.append(conn.data_to_send())
        half = len(responses) // 2
        if self.order == "goaway_first":
            parts = [goaway, *responses]
        elif self.order == "goaway_between":
            parts = [*responses[:half], goaway, *responses[half:]]
        else:
            parts = [*responses, goaway]
        tls.write(b"".join(parts))
        if self.close == "close_notify":
            with contextlib.suppress(ssl.SSLWantReadError):
                tls.unwrap()
        raw.sendall(outgoing.read())

        if self.close == "reset":
            close_with_reset(raw)  # after every byte: the reset must not destroy them
            return
        # A FIN even if the proxy's WINDOW_UPDATEs wait unread here (a close
        # with unread bytes would be a reset), then wait for the proxy to close.
        raw.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            while raw.recv(65536):
                pass


@pytest.mark.parametrize("close", CLOSES)
@pytest.mark.parametrize("order", ORDERS)
async def test_responses_sent_before_the_close_arrive_whole(
    tls: TLSFiles, order: str, close: str
) -> None:
    with ClosingOrigin(tls, order, close) as origin:
        async with (
            running_proxy(f"https://127.0.0.1:{origin.port}", tls) as proxy,
            aiohttp.ClientSession() as session,
        ):

            async def get(i: int) -> tuple[int, bytes]:
                async with session.get(f"{proxy.url}/r/{i}") as resp:
                    return resp.status, await resp.read()

            results = await asyncio.wait_for(
                asyncio.gather(*(get(i) for i in range(N_STREAMS))), 20
            )
            stats = proxy.stats
    assert origin.error is None, origin.error
    assert origin.connections == 1
    for i, (status, body) in enumerate(results):
        assert status == 200, f"/r/{i}: {status} {body[:200]!r}"
        assert body == body_for(f"/r/{i}"), f"/r/{i}: {len(body)} bytes"
    assert stats.failed == 0
    assert stats.replays == 0  # every stream was processed: none may be replayed
    assert stats.completed == N_STREAMS
