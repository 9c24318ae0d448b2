"""The engine's end and its faults: frames read with the last response, after the
connection ended itself, are not protocol errors; a fault h2 raises says which
frame it was, and never what the peer's headers hold."""

from __future__ import annotations

import hpack
import pytest
from hyperframe.frame import DataFrame, HeadersFrame, PingFrame, SettingsFrame, WindowUpdateFrame

from h2ping.fields import Header
from h2ping.http2.engine import ConnectionFault, H2Engine
from h2ping.http2.engine import errortext as h2errors
from h2ping.http2.engine.fast import new_engine
from h2ping.http2.engine.manifest import FAST_PATHS

REQUEST: list[Header] = [
    (b":method", b"GET"),
    (b":scheme", b"https"),
    (b":authority", b"example.test"),
    (b":path", b"/"),
]


class Events:
    """The connection's side of the engine: what it hears, and (``on_end``)
    the connection closing once its one stream ends, as a drained one does."""

    def __init__(self) -> None:
        self.engine: H2Engine | None = None
        self.pings: list[bytes] = []
        self.settings = 0
        self.data = b""
        self.ended = False

    # PeerEvents
    def on_settings(self, max_concurrent_streams: int, initial_window_changed: bool) -> None:
        self.settings += 1

    def on_ping_ack(self, payload: bytes) -> None:
        self.pings.append(payload)

    def on_window_update(self, stream_id: int) -> None:
        pass

    # StreamEvents of stream 1
    def got_response(self, headers: list[Header], end_stream: bool) -> None:
        pass

    def got_data(self, data: bytes, flow_controlled_length: int) -> int:
        self.data += data
        return 0

    def got_end(self) -> None:
        self.ended = True
        assert self.engine is not None
        self.engine.close()  # the drained connection's last stream: it closes now


def started(fast: frozenset[str]) -> tuple[H2Engine, Events]:
    events = Events()
    engine = new_engine(events, 65536, fast=fast)  # type: ignore[arg-type]
    events.engine = engine
    engine.start(65535, 65535)
    engine.heard_through({1: events}.get)  # type: ignore[dict-item]
    engine.send_request(1, REQUEST, True)
    engine.data_to_send()
    return engine, events


def response(block: list[tuple[bytes, bytes]]) -> bytes:
    return HeadersFrame(1, hpack.Encoder().encode(block), flags=["END_HEADERS"]).serialize()


PATHS = [pytest.param(frozenset(FAST_PATHS), id="fast"), pytest.param(frozenset(), id="plain")]


@pytest.mark.parametrize("fast", PATHS)
def test_frames_read_with_the_last_response_after_the_close_are_no_fault(
    fast: frozenset[str],
) -> None:
    engine, events = started(fast)
    engine.feed(
        SettingsFrame(0).serialize()
        + response([(b":status", b"200"), (b"content-length", b"5")])
        + DataFrame(1, b"hello", flags=["END_STREAM"]).serialize()
        # In the same read: what a server may send after its last response.
        + PingFrame(0, b"servping").serialize()
        + PingFrame(0, b"ourping!", flags=["ACK"]).serialize()
        + SettingsFrame(0, settings={4: 1 << 20}).serialize()
        + WindowUpdateFrame(0, window_increment=1000).serialize()
    )
    engine.handle()  # no ConnectionFault
    assert (events.data, events.ended, events.settings) == (b"hello", True, 1)
    assert engine.heard.fault is None
    assert not engine.ready


def test_a_fault_names_its_frame_and_class_but_no_header_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """h2 alone (no stream faults) refuses a bad content-length for the whole
    connection, quoting the value; with its message matched by no known text,
    the fault still says what h2 raised, and on which frame."""
    monkeypatch.setattr(h2errors, "_H2_MESSAGE_TEXT", ())
    engine, _ = started(frozenset())
    secret = b"secret-token-123"
    engine.feed(
        SettingsFrame(0).serialize() + response([(b":status", b"200"), (b"content-length", secret)])
    )
    with pytest.raises(ConnectionFault) as raised:
        engine.handle()
    detail = raised.value.detail
    assert detail == "malformed frame or header block (ProtocolError; HEADERS frame on stream 1)"
    assert engine.heard.fault == detail


def test_a_refused_state_machine_input_is_named() -> None:
    """h2's state machines word their refusals with enum names alone: kept."""
    import h2.exceptions

    refused = h2.exceptions.ProtocolError(
        "Invalid input ConnectionInputs.RECV_PING in state ConnectionState.CLOSED"
    )
    assert h2errors.describe_h2_error(refused, frame=(0x6, 0)) == (
        "h2 refused RECV_PING in state CLOSED (ProtocolError; PING frame on stream 0)"
    )
    assert (
        h2errors.describe_h2_error(refused)
        == "h2 refused RECV_PING in state CLOSED (ProtocolError)"
    )


@pytest.mark.parametrize("fast", PATHS)
def test_a_connection_fault_on_a_fast_path_names_its_frame_too(fast: frozenset[str]) -> None:
    """A header block HPACK cannot decode ends the connection, whether the
    response_headers path or h2 took the frame."""
    engine, _ = started(fast)
    garbage = HeadersFrame(1, b"\xff\xff\xff\xff\xff", flags=["END_HEADERS"]).serialize()
    engine.feed(SettingsFrame(0).serialize() + garbage)
    with pytest.raises(ConnectionFault) as raised:
        engine.handle()
    assert raised.value.detail.endswith("(ProtocolError; HEADERS frame on stream 1)")


def test_headers_on_a_stream_that_ended_name_their_frame() -> None:
    """Plain h2 (no stream faults) refuses HEADERS after a stream's END_STREAM
    for the whole connection (RFC 9113 5.1 allows either)."""
    engine, events = started(frozenset())
    events.engine = None  # the stream's end leaves the connection open here
    events.got_end = lambda: None  # type: ignore[method-assign]
    engine.feed(
        SettingsFrame(0).serialize()
        + response([(b":status", b"200"), (b"content-length", b"0")])
        + DataFrame(1, b"", flags=["END_STREAM"]).serialize()
        + response([(b":status", b"200")])
    )
    with pytest.raises(ConnectionFault) as raised:
        engine.handle()
    assert raised.value.detail == (
        "frame on a closed stream (StreamClosedError; HEADERS frame on stream 1)"
    )
