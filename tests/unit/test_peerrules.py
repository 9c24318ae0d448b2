"""The rules h2 leaves to its user, through one connection over a fake transport:
informational heads per stream, h2ping's own resets told as such, unknown
SETTINGS forgotten, DATA and HEADERS after our reset unanswered, the encoder's
table capped, and the flood budget earned by what h2ping sends."""

from __future__ import annotations

import logging

import hpack
import pytest
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hyperframe.frame import Frame, GoAwayFrame, HeadersFrame, RstStreamFrame

from h2ping.http2.engine import floodguard as fg
from h2ping.http2.engine.manifest import FAST_PATHS, REQUEST_HEADERS
from h2ping.http2.engine.peerrules import ENCODER_TABLE_LIMIT
from h2ping.http2.upstream import ConnState

from ..h2fake import REQUEST, FakeServer, Harness, RecordingSink, of, only_fast_paths


def hint(h: Harness, stream_id: int) -> bytes:
    return h.server.headers(stream_id, 103, [("link", "</a.css>; rel=preload")])


async def test_informational_heads_are_charged_by_their_size() -> None:
    """A stream whose request takes every 1xx (its exchange would stop at 5):
    a flood of them ends the connection; the heads of a stream h2ping reset are
    discarded unanswered, and charged as frames on a closed stream."""
    h = Harness()
    stream, sink = h.open()
    h.feed(hint(h, stream.stream_id) * 100)  # a hundred hints: well within the budget
    assert sink.error is None and h.conn.state is ConnState.OPEN
    other, _ = h.open()
    other.cancel()
    await h.sent()
    h.feed(hint(h, other.stream_id) * 50)
    assert not of(RstStreamFrame, await h.sent())
    h.feed(hint(h, stream.stream_id) * int(fg.BURST))
    await h.settle()
    (goaway,) = of(GoAwayFrame, await h.sent())
    assert goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
    assert h.conn.heard.fault is not None and fg.INFORMATIONAL in h.conn.heard.fault
    assert sink.error is not None and fg.INFORMATIONAL in sink.error.detail


async def test_data_on_a_stream_we_reset_is_not_answered_but_credited() -> None:
    h = Harness()
    stream, _ = h.open()
    h.feed(h.server.headers(stream.stream_id, 200))
    stream.cancel()
    await h.sent()
    # What the server had in flight: credited to the connection, no RST_STREAM.
    h.feed(FakeServer.data(stream.stream_id, b"d" * 16384) * 40)
    sent = await h.sent()
    assert not of(RstStreamFrame, sent)
    assert h.conn.state is ConnState.OPEN
    # A stream of tiny frames on it is a flood.
    h.feed(FakeServer.data(stream.stream_id, b"x") * int(fg.BURST + 100))
    await h.settle()
    (goaway,) = of(GoAwayFrame, await h.sent())
    assert goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
    assert h.conn.heard.fault is not None and "frames on closed streams" in h.conn.heard.fault


@pytest.mark.parametrize("forgotten", [False, True], ids=["held", "forgotten"])
async def test_a_head_on_a_stream_we_reset_is_discarded_and_spares_the_neighbour(
    forgotten: bool,
) -> None:
    """Trailers with a PRIORITY block on a stream h2ping reset, which h2 still
    holds or has forgotten (h2's own request path forgets closed streams on each
    request; h2ping's, now and then): no answer either way, the connection stays
    open, and its neighbour's response goes on."""
    paths = set(FAST_PATHS) - ({REQUEST_HEADERS} if forgotten else set())
    with only_fast_paths(paths):
        h = Harness()
    stream, _ = h.open()
    neighbour, sink = h.open()
    h.feed(h.server.headers(stream.stream_id, 200) + h.server.headers(neighbour.stream_id, 200))
    stream.cancel()
    h.open()  # a request after the reset: h2 counts its open streams
    await h.sent()
    raw = h.server.headers(stream.stream_id, None, [("x-t", "1")], end_stream=True)
    trailers, _ = Frame.parse_frame_header(memoryview(raw[:9]))
    trailers.parse_body(memoryview(raw[9:]))
    trailers.flags.add("PRIORITY")
    trailers.depends_on, trailers.stream_weight = 0, 15  # type: ignore[attr-defined]
    h.feed(trailers.serialize())
    sent = await h.sent()
    assert not of(RstStreamFrame, sent) and not of(GoAwayFrame, sent)
    assert h.conn.state is ConnState.OPEN
    h.feed(FakeServer.data(neighbour.stream_id, b"ok", end_stream=True))
    await h.settle()
    assert bytes(sink.data) == b"ok" and sink.ended and sink.error is None


async def test_a_window_update_overflow_is_our_reset() -> None:
    h = Harness()
    stream, sink = h.open()
    h.feed(FakeServer.window_update(stream.stream_id, 2**31 - 1))
    assert sink.error is not None
    assert "h2ping reset the stream: FLOW_CONTROL_ERROR" in sink.error.detail
    assert "reset by upstream" not in sink.error.detail
    (rst,) = of(RstStreamFrame, await h.sent())
    assert rst.error_code == ErrorCodes.FLOW_CONTROL_ERROR and h.conn.state is ConnState.OPEN


async def test_unknown_settings_are_not_kept() -> None:
    h = Harness()
    payload = b"".join((0x100 + i).to_bytes(2, "big") + bytes(4) for i in range(500))
    h.feed(len(payload).to_bytes(3, "big") + b"\x04\x00" + bytes(4) + payload)
    assert h.conn.state is ConnState.OPEN
    assert h.conn.heard.settings is not None
    assert set(h.conn.heard.settings) <= set(SettingCodes)
    assert len(h.conn._engine._h2.remote_settings) < 10  # h2's record of them too


@pytest.mark.parametrize("fast", [True, False], ids=["fast-paths", "plain-h2"])
@pytest.mark.parametrize("allowed", [2**32 - 1, 1 << 20, 1024])
async def test_the_encoder_table_stays_within_4096_bytes(fast: bool, allowed: int) -> None:
    """However large a table the peer allows, hpack's encoder (the one plain h2
    uses for every request) keeps at most 4,096 bytes, and says so."""
    if fast:
        h = Harness()
    else:
        with only_fast_paths(set()):
            h = Harness()
    h.feed(h.server.settings(header_table_size=allowed))
    await h.sent()
    decoder = hpack.Decoder()
    decoder.max_allowed_table_size = ENCODER_TABLE_LIMIT  # a peer that takes no more
    for i in range(50):
        headers = [*REQUEST, (b"x-unique", b"%d" % i * 40)]
        stream = h.slot().open(headers, RecordingSink(), end_stream=True)
        for frame in of(HeadersFrame, await h.sent()):
            decoder.decode(frame.data)  # raises on a size update over the limit
        h.feed(h.server.headers(stream.stream_id, 204, end_stream=True))
    assert decoder.header_table_size <= min(allowed, ENCODER_TABLE_LIMIT)


async def test_the_budget_is_earned_by_what_we_send() -> None:
    """An upload's WINDOW_UPDATEs, and a server refusing every stream, never trip it."""
    h = Harness(max_streams=100, window=1 << 20)
    stream, sink = h.open(end_stream=False)
    await h.sent()
    for _ in range(300):
        stream.send(b"u" * 16384)
        await h.sent()
        h.feed(
            (FakeServer.window_update(stream.stream_id, 4096) + FakeServer.window_update(0, 4096))
            * 4
        )
    assert h.conn.state is ConnState.OPEN and sink.error is None
    for _ in range(3000):
        refused, refused_sink = h.open()
        h.feed(FakeServer.rst(refused.stream_id, ErrorCodes.REFUSED_STREAM))
        assert refused_sink.error is not None and refused_sink.error.retryable
    assert h.conn.state is ConnState.OPEN


async def test_a_repeated_goaway_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="h2ping")
    h = Harness()
    stream, _ = h.open()
    for _ in range(5):  # one a second: within the flood budget
        h.feed(FakeServer.goaway(stream.stream_id))
    h.feed(FakeServer.goaway(0, ErrorCodes.NO_ERROR))  # news: the stream will not be served
    lines = [r.getMessage() for r in caplog.records if "GOAWAY received" in r.getMessage()]
    assert len(lines) == 2, lines
    assert "last_stream_id=1 " in lines[0] and "last_stream_id=0 " in lines[1]
