"""Tests for h2ping.testing.ScriptedUpstream, driven by a minimal h2 client."""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import Callable, Sequence

import h2.events
import pytest
import trustme
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hyperframe.frame import GoAwayFrame

from h2ping.http2.engine.frames import FrameSplitter
from h2ping.testing import ScriptedRequest, ScriptedUpstream, echo_handler


class Client:
    """Just enough HTTP/2 client to drive the server: it acks all DATA at once.

    GOAWAY frames bypass h2 both ways (h2 would close the whole connection, and the
    streams the GOAWAY lets finish could not): they are written here, and inbound
    ones are split off and recorded as ``ConnectionTerminated`` events.
    """

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, scheme: str
    ) -> None:
        self.reader, self.writer, self.scheme = reader, writer, scheme
        self.conn = H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))
        self.frames = FrameSplitter()
        self.events: list[h2.events.Event] = []
        self.closed = False  # the server closed or dropped the connection
        self._changed = asyncio.Event()
        self.conn.initiate_connection()
        self.flush()
        # No await between here and the caller: h2 has not seen the server's SETTINGS yet.
        self._reading = asyncio.create_task(self._read_loop())

    @classmethod
    async def connect(cls, server: ScriptedUpstream, tls: ssl.SSLContext | None = None) -> Client:
        hostname = "localhost" if tls else None
        reader, writer = await asyncio.open_connection(
            server.host, server.port, ssl=tls, server_hostname=hostname
        )
        return cls(reader, writer, "https" if tls else "http")

    def flush(self) -> None:
        self.writer.write(self.conn.data_to_send())

    def goaway(self, last_stream_id: int, error_code: int = 0) -> None:
        frame = GoAwayFrame(0, last_stream_id=last_stream_id, error_code=error_code)
        self.flush()
        self.writer.write(frame.serialize())

    def _receive(self, is_goaway: bool, piece: bytes) -> list[h2.events.Event]:
        if is_goaway:
            event = h2.events.ConnectionTerminated()
            event.last_stream_id = int.from_bytes(piece[:4], "big") & 0x7FFFFFFF
            event.error_code = int.from_bytes(piece[4:8], "big")
            return [event]
        events = self.conn.receive_data(piece)
        for event in events:
            if isinstance(event, h2.events.DataReceived):
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        return events

    async def _read_loop(self) -> None:
        try:
            while data := await self.reader.read(65536):
                for is_goaway, piece in self.frames.split(data):
                    self.events += self._receive(is_goaway, piece)
                self.flush()
                self._wake()
        except ConnectionResetError:
            pass  # the server's drop may come as a reset: closed all the same
        finally:
            self.closed = True
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait(self, predicate: Callable[[], bool], timeout: float = 2.0) -> None:
        async def until() -> None:
            while not predicate():
                await self._changed.wait()

        await asyncio.wait_for(until(), timeout)

    def of(self, kind: type, stream_id: int | None = None) -> list:
        return [
            e
            for e in self.events
            if isinstance(e, kind) and stream_id in (None, getattr(e, "stream_id", None))
        ]

    def start(
        self, path: str = "/", method: str = "POST", headers: Sequence[tuple[str, str]] = ()
    ) -> int:
        """Open a stream whose body is still to come (see send_body)."""
        stream_id = self.conn.get_next_available_stream_id()
        pseudo = [(":method", method), (":path", path), (":scheme", self.scheme)]
        block = [*pseudo, (":authority", "example.test"), *headers]
        self.conn.send_headers(stream_id, block)
        self.flush()
        return stream_id

    async def send_body(self, stream_id: int, body: bytes) -> None:
        """Send ``body`` and END_STREAM, honouring the server's windows."""
        view = memoryview(body)
        while True:
            await self.wait(lambda: self.conn.local_flow_control_window(stream_id) > 0)
            window = self.conn.local_flow_control_window(stream_id)
            size = min(window, self.conn.max_outbound_frame_size, len(view))
            self.conn.send_data(stream_id, bytes(view[:size]), end_stream=size == len(view))
            self.flush()
            view = view[size:]
            if not view:
                return

    async def response(self, stream_id: int) -> tuple[int, dict[str, str], bytes]:
        await self.wait(lambda: bool(self.of(h2.events.StreamEnded, stream_id)))
        headers = dict(self.of(h2.events.ResponseReceived, stream_id)[0].headers)
        body = b"".join(e.data for e in self.of(h2.events.DataReceived, stream_id))
        return int(headers[":status"]), headers, body

    async def request(self, path: str = "/", body: bytes = b"") -> tuple[int, dict, bytes]:
        stream_id = self.start(path)
        await self.send_body(stream_id, body)
        return await self.response(stream_id)

    async def reset_code(self, stream_id: int) -> int:
        await self.wait(lambda: bool(self.of(h2.events.StreamReset, stream_id)))
        return self.of(h2.events.StreamReset, stream_id)[0].error_code

    async def close(self) -> None:
        self._reading.cancel()
        self.writer.close()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reading
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_contexts(ca: trustme.CA) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context without ALPN, client context offering h2)."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    client_ctx.set_alpn_protocols(["h2"])
    return server_ctx, client_ctx


@contextlib.asynccontextmanager
async def serving(server: ScriptedUpstream, tls: ssl.SSLContext | None = None):
    async with server:
        client = await Client.connect(server, tls)
        try:
            yield client
        finally:
            await client.close()


class NeverAnswer:
    """Handler that never responds; counts how many of its tasks were cancelled."""

    def __init__(self) -> None:
        self.cancelled = 0

    async def __call__(self, request: ScriptedRequest) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


async def test_echo_over_tls_negotiates_h2(
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server_ctx, client_ctx = tls_contexts
    server = ScriptedUpstream(ssl_context=server_ctx)
    async with serving(server, client_ctx) as client:
        status, headers, body = await client.request("/hello?x=1", b"ping")
        assert client.writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
        request = server.requests[0]
        assert (request.scheme, request.ended, request.closed) == ("https", True, True)
    assert server.url == f"https://127.0.0.1:{server.port}"
    assert (status, body) == (200, b"ping")
    assert headers["x-echo-method"] == "POST"
    assert headers["x-echo-path"] == "/hello?x=1"
    assert headers["x-echo-authority"] == "example.test"
    assert headers["content-type"] == "application/octet-stream"
    assert server.connections[0].alpn_protocol == "h2"


async def test_echo_over_h2c_records_request() -> None:
    server = ScriptedUpstream()
    async with serving(server) as client:
        stream_id = client.start("/a", headers=[("x-trace", "abc")])
        await client.send_body(stream_id, b"body")
        status, _, body = await client.response(stream_id)
    assert server.url == f"http://127.0.0.1:{server.port}"
    assert (status, body) == (200, b"body")
    [request] = server.requests
    assert (request.method, request.path, request.scheme) == ("POST", "/a", "http")
    assert request.header("X-Trace") == "abc"
    assert request.body_bytes_received == 4
    assert server.connections[0].streams_opened == 1
    assert server.open_streams == 0


async def test_one_mebibyte_round_trip_honours_flow_control_both_ways() -> None:
    payload = os.urandom(1024 * 1024)  # 16 x the default 64 KiB windows
    async with serving(ScriptedUpstream()) as client:
        status, headers, body = await client.request("/big", payload)
    assert status == 200
    assert headers["content-length"] == str(len(payload))
    assert body == payload


async def test_unread_body_stops_the_client_at_the_stream_window() -> None:
    gate = asyncio.Event()

    async def read_late(request: ScriptedRequest) -> None:
        await gate.wait()
        await echo_handler(request)

    server = ScriptedUpstream(read_late, initial_window_size=16384)
    async with serving(server) as client:
        stream_id = client.start()
        sending = asyncio.create_task(client.send_body(stream_id, b"x" * 100_000))
        await server.wait_for(lambda: bool(server.requests))
        request = server.requests[0]
        await server.wait_for(lambda: request.body_bytes_received == 16384)
        await asyncio.sleep(0.05)  # a window update, if wrongly sent, would arrive by now
        assert request.body_bytes_received == 16384
        assert client.conn.local_flow_control_window(stream_id) == 0
        assert not sending.done()
        gate.set()
        await sending
        _, _, body = await client.response(stream_id)
    assert body == b"x" * 100_000


async def test_settings_advertised_and_excess_stream_refused() -> None:
    server = ScriptedUpstream(NeverAnswer(), max_concurrent_streams=1, initial_window_size=20000)
    async with serving(server) as client:
        # The client has not processed the server's SETTINGS yet, so it opens both.
        first, second = client.start(), client.start()
        assert await client.reset_code(second) == ErrorCodes.REFUSED_STREAM
        await client.wait(lambda: bool(client.of(h2.events.RemoteSettingsChanged)))
        assert client.conn.remote_settings.max_concurrent_streams == 1
        assert client.conn.remote_settings.initial_window_size == 20000
        assert [r.stream_id for r in server.requests] == [first]
        assert server.connections[0].streams_refused == 1
        assert server.open_streams == 1


async def test_reset_sends_chosen_code_and_server_keeps_serving() -> None:
    async def scripted(request: ScriptedRequest) -> None:
        if request.path == "/refuse":
            request.reset(ErrorCodes.REFUSED_STREAM)
        elif request.path == "/crash":
            raise RuntimeError("scripted failure")
        else:
            await echo_handler(request)

    async with serving(ScriptedUpstream(scripted)) as client:
        refused, crashed = client.start("/refuse"), client.start("/crash")
        assert await client.reset_code(refused) == ErrorCodes.REFUSED_STREAM
        assert await client.reset_code(crashed) == ErrorCodes.INTERNAL_ERROR
        status, _, body = await client.request("/ok", b"still here")
    assert (status, body) == (200, b"still here")


async def test_goaway_keeps_serving_streams_up_to_last_stream_id() -> None:
    gate = asyncio.Event()

    async def wait_for_gate(request: ScriptedRequest) -> None:
        await gate.wait()
        await echo_handler(request)

    server = ScriptedUpstream(wait_for_gate)
    async with serving(server) as client:
        first = client.start()
        await server.wait_for(lambda: bool(server.requests))
        connection = server.connections[0]
        connection.goaway(last_stream_id=1)
        await client.wait(lambda: bool(client.of(h2.events.ConnectionTerminated)))
        [goaway] = client.of(h2.events.ConnectionTerminated)
        assert (goaway.last_stream_id, goaway.error_code) == (first, 0)
        # Both directions of stream 1 continue after the GOAWAY; a new stream is refused.
        await client.send_body(first, b"sent after goaway")
        late = client.start()
        assert await client.reset_code(late) == ErrorCodes.REFUSED_STREAM
        gate.set()
        status, _, body = await client.response(first)
    assert (status, body) == (200, b"sent after goaway")
    assert (connection.goaway_sent, connection.streams_refused) == (first, 1)


async def test_server_finishes_streams_after_client_goaway() -> None:
    server = ScriptedUpstream()
    async with serving(server) as client:
        stream_id = client.start()
        client.goaway(last_stream_id=0)
        await server.wait_for(lambda: server.connections[0].goaway_received == 0)
        await client.send_body(stream_id, b"bye")
        status, _, body = await client.response(stream_id)
    assert (status, body) == (200, b"bye")


async def test_client_reset_cancels_handler() -> None:
    handler = NeverAnswer()
    server = ScriptedUpstream(handler)
    async with serving(server) as client:
        stream_id = client.start()
        await server.wait_for(lambda: server.open_streams == 1)
        client.conn.reset_stream(stream_id, ErrorCodes.CANCEL)
        client.flush()
        request = server.requests[0]
        await asyncio.wait_for(request.reset_by_client.wait(), 2)
        await server.wait_for(lambda: handler.cancelled == 1)
        assert request.client_reset_code == ErrorCodes.CANCEL
        assert request.closed
        assert server.open_streams == 0


async def test_held_ping_ack_is_sent_on_release() -> None:
    server = ScriptedUpstream()
    async with serving(server) as client:
        await server.wait_for(lambda: bool(server.connections))
        connection = server.connections[0]
        connection.hold_ping_acks = True
        client.conn.ping(b"held-ack")
        client.flush()
        await server.wait_for(lambda: connection.held_ping_acks == 1)
        # Other traffic still flows while the ACK is held.
        assert (await client.request("/", b"echo"))[2] == b"echo"
        assert not client.of(h2.events.PingAckReceived)
        connection.release_ping_acks()
        await client.wait(lambda: bool(client.of(h2.events.PingAckReceived)))
        assert client.of(h2.events.PingAckReceived)[0].ping_data == b"held-ack"
        assert connection.pings_received == 1


async def test_ping_acks_are_automatic_by_default() -> None:
    server = ScriptedUpstream()
    async with serving(server) as client:
        client.conn.ping(b"12345678")
        client.flush()
        await client.wait(lambda: bool(client.of(h2.events.PingAckReceived)))
        (ack,) = client.of(h2.events.PingAckReceived)
        assert ack.ping_data == b"12345678"
        connection = server.connections[0]
        assert (connection.pings_received, connection.held_ping_acks) == (1, 0)


async def test_auto_ping_ack_false_holds_from_the_start() -> None:
    server = ScriptedUpstream(auto_ping_ack=False)
    async with serving(server) as client:
        client.conn.ping(b"12345678")
        client.flush()
        await server.wait_for(
            lambda: bool(server.connections) and server.connections[0].held_ping_acks == 1
        )
        # Held, not late: a request's whole round trip after it, still no ACK.
        assert (await client.request("/", b"echo"))[2] == b"echo"
        assert not client.of(h2.events.PingAckReceived)
        server.connections[0].hold_ping_acks = False  # releases what was held
        await client.wait(lambda: bool(client.of(h2.events.PingAckReceived)))
        (ack,) = client.of(h2.events.PingAckReceived)
        assert ack.ping_data == b"12345678"
        assert server.connections[0].held_ping_acks == 0


async def test_control_frames_of_its_own_held_by_a_cork_and_acknowledged() -> None:
    server = ScriptedUpstream()
    async with serving(server) as client:
        await server.wait_for(lambda: bool(server.connections))
        connection = server.connections[0]
        await server.wait_for(lambda: connection.settings_acked == 1)  # the first SETTINGS
        seen = len(client.events)
        window = client.conn.outbound_flow_control_window
        with connection.corked():
            connection.ping(b"servping")
            connection.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
            connection.window_update(1000)
            await asyncio.sleep(0.05)  # held: nothing reaches the client meanwhile
            assert len(client.events) == seen
        # The connection's own WINDOW_UPDATE at start came before ``seen``: wait for
        # the one sent under the cork.
        await client.wait(
            lambda: any(isinstance(e, h2.events.WindowUpdated) for e in client.events[seen:])
        )
        kinds = [type(e) for e in client.events[seen:]]
        assert kinds == [
            h2.events.PingReceived,
            h2.events.RemoteSettingsChanged,
            h2.events.WindowUpdated,
        ]
        await server.wait_for(lambda: connection.settings_acked == 2)
        assert connection.ping_acks_received == [b"servping"]
        assert client.conn.outbound_flow_control_window == window + 1000


async def test_stop_cancels_handlers_and_leaves_no_tasks() -> None:
    handler = NeverAnswer()
    server = ScriptedUpstream(handler)
    await server.start()
    client = await Client.connect(server)
    client.start()
    client.start()
    await server.wait_for(lambda: server.open_streams == 2)
    await server.stop()
    await client.wait(lambda: client.closed)
    await client.close()
    assert server.connections[0].closed
    assert (server.open_streams, handler.cancelled) == (0, 2)
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_close_drops_the_connection_and_cancels_handlers() -> None:
    handler = NeverAnswer()
    server = ScriptedUpstream(handler)
    async with serving(server) as client:
        client.start()
        await server.wait_for(lambda: server.open_streams == 1)
        server.connections[0].close()
        await client.wait(lambda: client.closed)
        assert not client.of(h2.events.ConnectionTerminated)  # no GOAWAY: an abrupt drop
        await server.wait_for(lambda: handler.cancelled == 1)
        assert server.connections[0].closed and server.open_streams == 0
