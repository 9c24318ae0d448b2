"""h2ping.http2.tlslayer: TLS over the loop's TCP transport, holding nothing back at the end.

The unit tests drive a :class:`TLSLayer` with a fake TCP transport and a real TLS
server made of memory BIOs, so they decide byte by byte what arrives when. The
last tests check, on both event loops, what the layer assumes of the loop's own
TCP transports.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl

import pytest

from h2ping.http2.tlslayer import TCP_READ_SIZE, SessionCache, TLSLayer
from h2ping.http2.tunnel import TunnelClosed

from ..conftest import TLSFiles, close_with_reset
from ..fakes import FakeTransport


class App(asyncio.BufferedProtocol):
    """A protocol on top of the layer: keeps what arrives, pauses on request."""

    def __init__(self, buffer_size: int = 65536, pause_after: int | None = None) -> None:
        self.buffer = bytearray(buffer_size)
        self.received = bytearray()
        self.calls = 0
        self.pause_after = pause_after
        self.transport: asyncio.Transport | None = None
        self.lost: list[Exception | None] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.buffer)

    def buffer_updated(self, nbytes: int) -> None:
        assert not self.lost, "bytes after connection_lost"
        self.received += self.buffer[:nbytes]
        self.calls += 1
        if self.pause_after is not None and len(self.received) >= self.pause_after:
            assert self.transport is not None
            self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.append(exc)


class Server:
    """The other end: a TLS server on memory BIOs, fed what the layer wrote."""

    def __init__(self, tls: TLSFiles) -> None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls.cert_file, tls.key_file)
        context.set_alpn_protocols(["h2"])
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)

    def take(self, tcp: FakeTransport) -> None:
        self.incoming.write(bytes(tcp.written))
        tcp.written.clear()

    def handshake(self, tcp: FakeTransport, layer: TLSLayer) -> None:
        for _ in range(5):
            self.take(tcp)
            try:
                self.tls.do_handshake()
            except ssl.SSLWantReadError:
                feed(layer, self.outgoing.read())
                continue
            feed(layer, self.outgoing.read())
            self.take(tcp)  # the client's Finished
            return
        raise AssertionError("no handshake")

    def send(self, data: bytes) -> bytes:
        self.tls.write(data)
        return self.outgoing.read()

    def close_notify(self) -> bytes:
        with contextlib.suppress(ssl.SSLWantReadError):
            self.tls.unwrap()
        return self.outgoing.read()


def feed(layer: TLSLayer, data: bytes) -> int:
    """Hand ``data`` to the layer as the TCP transport would: as much as its
    buffer holds per read. Returns the number of reads."""
    reads = 0
    while data:
        buffer = layer.get_buffer(len(data))
        n = min(len(data), len(buffer))
        buffer[:n] = data[:n]
        layer.buffer_updated(n)
        data = data[n:]
        reads += 1
    return reads


async def connected(
    tls: TLSFiles,
    app: App,
    context: ssl.SSLContext | None = None,
    tunnel: str | None = None,
    tcp: FakeTransport | None = None,
) -> tuple[TLSLayer, FakeTransport, Server]:
    if context is None:
        context = ssl.create_default_context(cafile=tls.ca_file)
        context.set_alpn_protocols(["h2"])
    layer = TLSLayer(app, context, "127.0.0.1", tunnel=tunnel)
    tcp = FakeTransport(strict=False) if tcp is None else tcp
    layer.connection_made(tcp)
    server = Server(tls)
    server.handshake(tcp, layer)
    await asyncio.wait_for(layer.handshake, 1)
    assert app.transport is not None
    assert layer.ssl_object.selected_alpn_protocol() == "h2"
    return layer, tcp, server


PAYLOAD = bytes(range(256)) * 1024  # 256 KiB: sixteen TLS records


async def test_every_record_reaches_a_small_buffer_in_order(tls: TLSFiles) -> None:
    app = App(buffer_size=1000)
    layer, _, server = await connected(tls, app)
    reads = feed(layer, server.send(PAYLOAD))
    assert app.received == PAYLOAD
    # Each call fills the buffer, but for the last of each read.
    assert app.calls <= len(PAYLOAD) // 1000 + reads


async def test_records_are_gathered_into_one_call_per_read(tls: TLSFiles) -> None:
    app = App(buffer_size=len(PAYLOAD))
    layer, _, server = await connected(tls, app)
    reads = feed(layer, server.send(PAYLOAD))
    assert app.received == PAYLOAD
    assert app.calls <= reads < 16  # not one call per record


async def test_a_paused_protocol_pauses_tcp_and_gets_the_rest_on_resume(tls: TLSFiles) -> None:
    app = App(buffer_size=16384, pause_after=40_000)
    layer, tcp, server = await connected(tls, app)
    feed(layer, server.send(PAYLOAD))
    assert not tcp.reading
    assert 40_000 <= len(app.received) < len(PAYLOAD)
    app.pause_after = None
    assert app.transport is not None
    app.transport.resume_reading()
    assert not tcp.reading  # not before what TLS holds is handed over, next turn
    await asyncio.sleep(0)
    assert app.received == PAYLOAD
    assert tcp.reading


async def test_tcp_pauses_only_once_more_than_a_read_waits(tls: TLSFiles) -> None:
    """A protocol that pauses and resumes before much more arrives (the inbound
    schedule's turns) costs the TCP transport no pause: what comes meanwhile
    waits in TLS; past one read's worth, TCP pauses, so at most two wait."""
    app = App(buffer_size=16384, pause_after=1)
    layer, tcp, server = await connected(tls, app)
    feed(layer, server.send(b"a" * 20_000))  # the protocol pauses at the first call
    assert tcp.reading and tcp.pauses == 0
    first = len(app.received)
    assert first < 20_000
    app.pause_after = None
    assert app.transport is not None
    app.transport.resume_reading()
    await asyncio.sleep(0)
    assert app.received == b"a" * 20_000
    assert tcp.pauses == tcp.resumes == 0
    # Paused again, with more than a read coming: TCP pauses past one read's worth.
    app.transport.pause_reading()
    wire = server.send(PAYLOAD)
    reads = 0
    while tcp.reading and wire:
        reads += feed(layer, wire[: TCP_READ_SIZE // 4])
        wire = wire[TCP_READ_SIZE // 4 :]
    assert not tcp.reading and tcp.pauses == 1
    assert TCP_READ_SIZE < layer._incoming.pending <= 2 * TCP_READ_SIZE
    assert reads >= 4  # (several reads went by unpaused)
    app.transport.resume_reading()
    await asyncio.sleep(0)
    feed(layer, wire)  # the kernel's rest, once TCP reads again
    assert tcp.reading and tcp.resumes == 1
    assert app.received == b"a" * 20_000 + PAYLOAD


@pytest.mark.parametrize("close_notify", [False, True])
async def test_the_end_hands_over_everything_first_even_paused(
    tls: TLSFiles, close_notify: bool
) -> None:
    app = App(buffer_size=16384, pause_after=1)
    layer, _, server = await connected(tls, app)
    wire = server.send(PAYLOAD) + (server.close_notify() if close_notify else b"")
    feed(layer, wire)
    assert len(app.received) < len(PAYLOAD)
    layer.eof_received()
    layer.connection_lost(None)
    assert app.received == PAYLOAD
    assert app.lost == [None]


async def test_close_notify_closes_the_tcp_side(tls: TLSFiles) -> None:
    app = App()
    layer, tcp, server = await connected(tls, app)
    feed(layer, server.send(b"last words") + server.close_notify())
    assert app.received == b"last words"
    assert tcp.closed
    layer.connection_lost(None)
    assert app.lost == [None]


async def test_through_a_tunnel_an_end_without_close_notify_names_the_proxy(
    tls: TLSFiles,
) -> None:
    """Through a forward proxy, a bare end (the proxy's idle timer) is told as the
    tunnel's, after every byte; a server's close_notify is the server's own end."""
    app = App()
    layer, _, server = await connected(tls, app, tunnel="proxy.corp:3128")
    feed(layer, server.send(b"last words"))
    layer.connection_lost(None)
    assert app.received == b"last words"
    (lost,) = app.lost
    assert isinstance(lost, TunnelClosed)
    assert str(lost) == (
        "the tunnel through proxy proxy.corp:3128 closed (no TLS close_notify from the upstream)"
    )
    app = App()
    layer, _, server = await connected(tls, app, tunnel="proxy.corp:3128")
    feed(layer, server.send(b"bye") + server.close_notify())
    layer.connection_lost(None)
    assert (app.received, app.lost) == (b"bye", [None])
    app = App()
    layer, _, server = await connected(tls, app)  # directly: the server's end, as always
    layer.connection_lost(None)
    assert app.lost == [None]


async def test_a_reset_after_the_last_bytes_loses_none(tls: TLSFiles) -> None:
    app = App(buffer_size=4096, pause_after=1)
    layer, _, server = await connected(tls, app)
    feed(layer, server.send(PAYLOAD))
    reset = ConnectionResetError(104, "Connection reset by peer")
    layer.connection_lost(reset)
    assert app.received == PAYLOAD
    assert app.lost == [reset]


class SocketTransport(FakeTransport):
    """A fake TCP transport that names a real socket as its own: what the kernel
    holds is what was sent on the other end of the pair."""

    def __init__(self) -> None:
        super().__init__(strict=False)
        self.sock, self.peer = socket.socketpair()
        self.sock.setblocking(False)

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self.sock if name == "socket" else default


RESET = ConnectionResetError(104, "Connection reset by peer")


async def read_but_the_last(tls: TLSFiles, tcp: SocketTransport) -> tuple[TLSLayer, App, bytes]:
    """A paused protocol's layer that read all of PAYLOAD's records but their last
    64,000 bytes, which it returns: what the kernel would still hold."""
    app = App(buffer_size=16384, pause_after=1)
    layer, _, server = await connected(tls, app, tcp=tcp)
    wire = server.send(PAYLOAD)
    held = len(wire) - 64_000
    feed(layer, wire[:held])
    return layer, app, wire[held:]


async def test_a_reset_hands_over_what_the_kernel_still_holds(tls: TLSFiles) -> None:
    tcp = SocketTransport()
    with tcp.sock, tcp.peer:
        layer, app, rest = await read_but_the_last(tls, tcp)
        tcp.peer.sendall(rest)
        layer.connection_lost(RESET)
    assert app.received == PAYLOAD


async def test_a_descriptor_reused_by_another_file_is_not_read(tls: TLSFiles) -> None:
    tcp = SocketTransport()
    with tcp.sock, tcp.peer:
        layer, app, rest = await read_but_the_last(tls, tcp)
        read_end, write_end = os.pipe()
        os.write(write_end, rest)
        os.dup2(read_end, tcp.sock.fileno())  # the number now names a pipe
        os.close(read_end)
        os.close(write_end)
        layer.connection_lost(RESET)
    assert 0 < len(app.received) < len(PAYLOAD)
    assert app.received == PAYLOAD[: len(app.received)]
    assert app.lost == [RESET]


async def test_the_protocol_closing_stops_delivery(tls: TLSFiles) -> None:
    app = App(buffer_size=16384)
    layer, tcp, server = await connected(tls, app)
    wire = server.send(PAYLOAD)
    app.buffer_updated = lambda n: app.transport.close()  # type: ignore[method-assign,union-attr]
    feed(layer, wire)
    assert tcp.closed
    assert app.transport is not None and app.transport.is_closing()
    server.take(tcp)
    with contextlib.suppress(ssl.SSLWantReadError):
        server.tls.read(1)
    assert server.tls.pending() == 0
    layer.connection_lost(None)
    assert app.lost == [None]


async def test_writes_reach_the_server(tls: TLSFiles) -> None:
    app = App()
    _, tcp, server = await connected(tls, app)
    assert app.transport is not None
    app.transport.write(b"hello ")
    app.transport.writelines([b"wor", b"ld"])
    server.take(tcp)
    got = b""
    with contextlib.suppress(ssl.SSLWantReadError):
        while True:
            got += server.tls.read(100)
    assert got == b"hello world"


async def test_a_bad_certificate_fails_the_handshake_not_the_protocol(tls: TLSFiles) -> None:
    app = App()
    context = ssl.create_default_context()  # the test CA is not trusted
    context.set_alpn_protocols(["h2"])
    layer = TLSLayer(app, context, "127.0.0.1")
    tcp = FakeTransport(strict=False)
    layer.connection_made(tcp)
    server = Server(tls)
    with pytest.raises(ssl.SSLError, match="UNKNOWN_CA"):
        server.handshake(tcp, layer)
    with pytest.raises(ssl.SSLCertVerificationError):
        await layer.handshake
    assert app.transport is None
    assert tcp.closed
    layer.connection_lost(None)
    assert app.lost == []


async def test_a_close_during_the_handshake_fails_it(tls: TLSFiles) -> None:
    app = App()
    context = ssl.create_default_context(cafile=tls.ca_file)
    layer = TLSLayer(app, context, "127.0.0.1")
    layer.connection_made(FakeTransport(strict=False))
    layer.connection_lost(None)
    with pytest.raises(ssl.SSLEOFError):
        await layer.handshake
    assert app.lost == []


# ------------------------------------------------ what the loops' TCP transports do


class Pausing(asyncio.BufferedProtocol):
    """Pauses inside the first buffer_updated; records the order of events."""

    def __init__(self) -> None:
        self.buffer = bytearray(4096)
        self.events: list[str] = []
        self.received = bytearray()
        self.transport: asyncio.Transport | None = None
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.buffer)

    def buffer_updated(self, nbytes: int) -> None:
        self.received += self.buffer[:nbytes]
        self.events.append("data")
        if len(self.events) == 1:
            assert self.transport is not None
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.events.append("eof")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")
        if not self.done.done():
            self.done.set_result(None)


@pytest.mark.parametrize("ending", ["fin", "reset"])
async def test_the_loop_keeps_unread_bytes_in_the_kernel_while_paused(ending: str) -> None:
    """The TCP transport's side of the bargain: a pause called inside
    buffer_updated holds back the next read, and with it the FIN or reset that
    follows the bytes; on resume every byte comes, then the end."""
    loop = asyncio.get_running_loop()
    payload = bytes(range(256)) * 400  # 100 KiB: many of the protocol's reads
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    with listener:
        protocol = Pausing()
        connecting = loop.create_connection(lambda: protocol, *listener.getsockname())
        accepted, (transport, _) = await asyncio.gather(loop.sock_accept(listener), connecting)
        server = accepted[0]
        server.setblocking(True)
        server.sendall(payload)
        if ending == "reset":
            close_with_reset(server)
        else:
            server.shutdown(socket.SHUT_WR)
        await asyncio.sleep(0.2)  # everything, and the end, are in our kernel now
        assert protocol.events == ["data"]
        transport.resume_reading()
        await asyncio.wait_for(protocol.done, 5)
        server.close()
    assert protocol.received == payload
    assert protocol.events[-1] == "lost"
    assert set(protocol.events[:-1]) <= {"data", "eof"}
    assert "eof" not in protocol.events[:-2]


class _CountedReads(ssl.SSLObject):
    """An ``SSLObject`` that counts how often its session is read."""

    reads = 0

    @property
    def session(self) -> ssl.SSLSession | None:
        _CountedReads.reads += 1
        return super().session


def _handshake(
    client: ssl.SSLContext, server: ssl.SSLContext, session: ssl.SSLSession | None
) -> ssl.SSLObject:
    """One TLS connection over memory BIOs, its handshake done and the server's
    tickets read (they follow the handshake, with the first application bytes)."""
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    ours = client.wrap_bio(c_in, c_out, server_hostname="127.0.0.1", session=session)
    theirs = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(5):
        for side in (ours, theirs):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    theirs.write(b"x")
    c_in.write(s_out.read())
    assert ours.read(1) == b"x"
    return ours


@pytest.mark.parametrize("reads_leak", [True, False])
def test_sessions_are_read_once_per_full_handshake_where_reading_leaks(
    tls: TLSFiles, reads_leak: bool
) -> None:
    """Where reading a session leaks memory, the session of a full handshake is
    offered again while the server resumes it, and read anew only after a
    handshake that did not resume (here: the server's ticket keys changed).
    Elsewhere each connection resumes the session of the one before."""
    client = ssl.create_default_context(cafile=tls.ca_file)
    client.sslobject_class = _CountedReads
    server = tls.server_context()
    cache = SessionCache(reads_leak)
    _CountedReads.reads = 0
    resumed = []
    for dial in range(8):
        if dial == 5:
            server = tls.server_context()  # new ticket keys: no session resumes
        ssl_object = _handshake(client, server, cache.session())
        resumed.append(ssl_object.session_reused)
        cache.remember(ssl_object)
    assert resumed == [False, True, True, True, True, False, True, True]
    # Where reading leaks, one read after each full handshake; elsewhere one per dial.
    assert _CountedReads.reads == (2 if reads_leak else 7)


async def test_a_write_that_meets_a_reset_loses_no_byte_read_before_it(tls: TLSFiles) -> None:
    """A server sends its last bytes and resets (as one that closed does when our
    WINDOW_UPDATE reaches it): our next write fails, and the loop's transport
    ends the connection with those bytes unread in the kernel. Every one of them
    still reaches the protocol, before connection_lost."""
    loop = asyncio.get_running_loop()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(tls.cert_file, tls.key_file)
    client_context = ssl.create_default_context(cafile=tls.ca_file)
    listener = socket.create_server(("127.0.0.1", 0))
    sent = asyncio.Event()

    payload = PAYLOAD  # more than the layer reads while its protocol pauses

    def serve() -> None:
        raw, _ = listener.accept()
        with server_context.wrap_socket(raw, server_side=True) as server:
            server.sendall(payload)
            close_with_reset(server)
        loop.call_soon_threadsafe(sent.set)

    with listener:
        serving = loop.run_in_executor(None, serve)
        app = App(buffer_size=16384, pause_after=1)
        layer = TLSLayer(app, client_context, "127.0.0.1")
        client = socket.socket()
        # Room in our kernel for every byte the layer leaves there: the server's
        # send, and so its reset, never wait for our reads.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * len(payload))
        client.setblocking(False)
        await loop.sock_connect(client, listener.getsockname())
        await loop.create_connection(lambda: layer, sock=client)
        await asyncio.wait_for(layer.handshake, 5)
        await asyncio.wait_for(sent.wait(), 5)
        await asyncio.sleep(0.2)  # the reset is in our kernel, behind the bytes
        assert app.transport is not None and len(app.received) < len(payload)
        app.transport.write(b"a WINDOW_UPDATE")
        for _ in range(100):
            if app.lost:
                break
            await asyncio.sleep(0.01)
        await serving
    assert len(app.lost) == 1 and isinstance(app.lost[0], ConnectionResetError)
    assert app.received == payload
