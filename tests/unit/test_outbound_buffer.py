"""What the fast layer hands the writing: h2's outbound buffer itself, not a copy,
with the same bytes h2's ``data_to_send`` gives; h2's own call where the request
paths are off."""

from __future__ import annotations

from hyperframe.frame import DataFrame, Frame

from h2ping.http2.engine.fastconnection import FastConnection
from h2ping.http2.engine.manifest import FAST_PATHS, REQUEST_DATA
from h2ping.http2.engine.plain import H2_CONFIG

from ..fakes import parse_frames
from ..h2fake import FakeServer

REQUEST = [(":method", "POST"), (":scheme", "https"), (":authority", "x"), (":path", "/")]


def _frames(data: bytes) -> list[Frame]:
    frames, end = parse_frames(data)
    assert end == len(data)
    return frames


def _sending(fast: frozenset[str]) -> FastConnection:
    conn = FastConnection(H2_CONFIG, 65536, fast)
    conn.initiate_connection()
    conn.receive_data(FakeServer.settings(max_concurrent_streams=10))
    conn.data_to_send()
    conn.send_headers(1, REQUEST)
    return conn


def test_the_buffer_itself_is_handed_out_and_never_written_again() -> None:
    conn = _sending(frozenset(FAST_PATHS))
    conn.send_body(1, b"a" * 1000, end_stream=False)
    first = conn.take_outbound()
    assert isinstance(first, bytearray)  # the buffer h2 queued into: no copy
    kept = bytes(first)
    conn.send_body(1, b"b" * 500, end_stream=True)
    second = conn.take_outbound()
    assert bytes(first) == kept, "the buffer handed out was written to again"
    assert second is not first
    frames = _frames(kept) + _frames(bytes(second))
    assert [type(f).__name__ for f in frames] == ["HeadersFrame", "DataFrame", "DataFrame"]
    assert [f.data for f in frames if isinstance(f, DataFrame)] == [b"a" * 1000, b"b" * 500]
    assert conn.take_outbound() == b""


def test_the_same_bytes_as_h2s_own_call_and_h2s_call_with_the_paths_off() -> None:
    fast, plain = _sending(frozenset(FAST_PATHS)), _sending(frozenset(FAST_PATHS) - {REQUEST_DATA})
    for conn in (fast, plain):
        conn.send_body(1, b"c" * 3000, end_stream=True)
    taken, own = fast.take_outbound(), plain.take_outbound()
    assert isinstance(own, bytes)  # h2's data_to_send(): a copy
    assert taken == own
