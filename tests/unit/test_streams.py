"""Stream faults at the core: one connection, a fake transport, server frames as bytes."""

from __future__ import annotations

from h2.errors import ErrorCodes
from hyperframe.frame import RstStreamFrame

from h2ping import errors
from h2ping.http2.engine.fastconnection import DECODE_HEADROOM
from h2ping.http2.engine.peerrules import header_list_size
from h2ping.http2.upstream import ConnState

from ..h2fake import Harness, of

LIMIT = 64 * 1024


def fields(total: int, prefix: str = "x-big") -> list[tuple[str, str]]:
    return [(f"{prefix}-{i}", "v" * 1000) for i in range(total // 1000 + 1)]


async def test_an_oversized_block_is_decoded_so_the_next_one_still_decodes() -> None:
    """HPACK state stays in sync: the block over the limit still adds its last
    field to the dynamic table, and the next response refers to it by index."""
    h = Harness(max_response_header_bytes=LIMIT)
    big, big_sink = h.open()
    small, small_sink = h.open()
    await h.sent()
    shared = ("x-shared", "from the big block")
    h.feed(h.server.headers(big.stream_id, 200, [*fields(2 * LIMIT), shared], end_stream=True))
    h.feed(h.server.headers(small.stream_id, 200, [shared], end_stream=True))
    await h.settle()

    assert big_sink.error is not None
    assert big_sink.error.error == errors.HTTP_RESPONSE_HEADER_SECTION_SIZE
    assert f"over the limit of {LIMIT}" in big_sink.error.detail
    (reset,) = of(RstStreamFrame, await h.sent())
    assert (reset.stream_id, reset.error_code) == (big.stream_id, ErrorCodes.CANCEL)
    assert small_sink.ended and (b"x-shared", b"from the big block") in small_sink.headers
    assert h.conn.state is ConnState.OPEN and big.closed
    assert h.conn.table.streams == {}


async def test_the_limit_counts_as_rfc_9113_does_and_is_inclusive() -> None:
    h = Harness(max_response_header_bytes=LIMIT)
    at, at_sink = h.open()
    over, over_sink = h.open()
    status = [(b":status", b"200")]
    pad = LIMIT - header_list_size(status) - header_list_size([(b"x-pad", b"")])
    exactly = [("x-pad", "p" * pad)]
    assert header_list_size([*status, (b"x-pad", b"p" * pad)]) == LIMIT
    h.feed(h.server.headers(at.stream_id, 200, exactly, end_stream=True))
    h.feed(h.server.headers(over.stream_id, 200, [("x-pad", "p" * (pad + 1))], end_stream=True))
    await h.settle()
    assert at_sink.ended and at_sink.error is None
    assert over_sink.error is not None and not over_sink.ended


async def test_oversized_trailers_fail_the_stream_as_trailers() -> None:
    h = Harness(max_response_header_bytes=LIMIT)
    stream, sink = h.open()
    h.feed(h.server.headers(stream.stream_id, 200))
    h.feed(h.server.data(stream.stream_id, b"body"))
    h.feed(h.server.headers(stream.stream_id, None, fields(2 * LIMIT), end_stream=True))
    await h.settle()
    assert sink.error is not None
    assert sink.error.error == errors.HTTP_RESPONSE_TRAILER_SECTION_SIZE
    assert (sink.status, bytes(sink.data), sink.ended) == (200, b"body", False)
    assert h.conn.state is ConnState.OPEN


async def test_a_block_past_the_decoding_ceiling_ends_the_connection() -> None:
    h = Harness(max_response_header_bytes=LIMIT)
    stream, sink = h.open()
    # Indexed references to one 4 KB field: far past the limit plus the headroom.
    bomb = [("x-bomb", "b" * 4000)] * ((LIMIT + DECODE_HEADROOM) // 4000 + 10)
    h.feed(h.server.headers(stream.stream_id, 200, bomb, end_stream=True))
    await h.settle()
    assert h.conn.state is ConnState.CLOSED
    assert sink.error is not None and "too large to decode" in sink.error.detail


async def test_data_on_a_faulty_stream_goes_nowhere_and_the_connection_goes_on() -> None:
    h = Harness()
    bad, bad_sink = h.open()
    good, good_sink = h.open()
    h.feed(h.server.headers(bad.stream_id, 200, [("content-length", "2")]))
    h.feed(h.server.data(bad.stream_id, b"too long"))  # the fault
    h.feed(h.server.data(bad.stream_id, b"more", end_stream=True))  # already in flight
    h.feed(h.server.headers(good.stream_id, 200), h.server.data(good.stream_id, b"ok", True))
    assert bad_sink.error is not None
    assert bad_sink.error.error == errors.HTTP_PROTOCOL_ERROR
    assert "content-length" in bad_sink.error.detail
    assert bytes(bad_sink.data) == b""  # the bad DATA never reached the client
    assert good_sink.ended and bytes(good_sink.data) == b"ok"
    resets = [f for f in of(RstStreamFrame, await h.sent()) if f.stream_id == bad.stream_id]
    assert resets[0].error_code == ErrorCodes.PROTOCOL_ERROR
    assert h.conn.state is ConnState.OPEN and h.conn.table.streams == {}
