"""One stream's bad response fails that stream only (RFC 9113 5.4.2, 8.1.1).

Each case answers one request badly while 20 others are open on the same
connection, then answers those well: the bad one gets a 502 (or a cut response,
once its headers went out), every neighbour its 200, and the connection stays.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import pytest
from hyperframe.frame import DataFrame, HeadersFrame, RstStreamFrame, SettingsFrame

from h2ping.testing import RawPeer, RawUpstream

from ..conftest import running_proxy, wait_until

NEIGHBOURS = 20


@dataclass
class BadClient:
    """What the client of /bad has seen so far."""

    head: asyncio.Event = field(default_factory=asyncio.Event)  # its response head
    done: asyncio.Event = field(default_factory=asyncio.Event)  # its whole response, or its end

    async def wait(self, event: asyncio.Event) -> None:
        await asyncio.wait_for(event.wait(), 10)


BadAnswer = Callable[[RawPeer, int, BadClient], Awaitable[None]]


def huge_headers(total: int) -> list[tuple[str, str]]:
    """Fields adding up to about ``total`` bytes of header list (RFC 9113 6.5.2 sizes)."""
    return [(f"x-big-{i}", "v" * 4000) for i in range(total // 4040 + 1)]


async def answer_ok(peer: RawPeer, stream_id: int) -> None:
    peer.send(peer.headers_frame(stream_id, [(":status", "200"), ("content-length", "2")]))
    peer.send(DataFrame(stream_id, b"ok", flags=["END_STREAM"]).serialize())


def bad_first_then_neighbours(
    bad: BadAnswer, client: BadClient
) -> Callable[[RawPeer], Awaitable[None]]:
    """Wait until /bad and all its neighbours are open, answer /bad badly, then (once
    its client has the outcome) the rest."""

    async def script(peer: RawPeer) -> None:
        await peer.handshake()
        streams: dict[str, int] = {}
        while len(streams) < NEIGHBOURS + 1:
            stream_id, headers = await peer.read_request()
            streams[dict(headers)[":path"]] = stream_id
        await bad(peer, streams.pop("/bad"), client)
        await peer.drain()
        await client.wait(client.done)  # the proxy has dealt with the bad stream first
        for stream_id in streams.values():
            await answer_ok(peer, stream_id)
        await peer.drain()
        await asyncio.sleep(30)  # keep the connection; the test ends it

    return script


async def run_case(bad: BadAnswer) -> tuple[int, str, str, list[int]]:
    """Status, Proxy-Status and body of /bad (0: response cut), and the neighbours' statuses."""
    client = BadClient()
    async with (
        RawUpstream(bad_first_then_neighbours(bad, client)) as up,
        running_proxy(up.url) as proxy,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
    ):

        async def get(path: str, seen: BadClient | None = None) -> tuple[int, str, str]:
            async with session.get(proxy.url + path) as resp:
                if seen is not None:
                    seen.head.set()
                try:
                    body = await resp.text()
                except aiohttp.ClientPayloadError:
                    return 0, "", ""
                return resp.status, resp.headers.get("proxy-status", ""), body

        bad_task = asyncio.create_task(get("/bad", client))
        bad_task.add_done_callback(lambda _: client.done.set())
        neighbours = [asyncio.create_task(get(f"/n{i}")) for i in range(NEIGHBOURS)]
        status, proxy_status, body = await bad_task
        statuses = [s for s, _, body in await asyncio.gather(*neighbours) if body == "ok"]
        assert up.connections == 1, "the connection must survive one stream's fault"
        assert up.errors == []
        return status, proxy_status, body, statuses


async def oversized_header_list(peer: RawPeer, stream_id: int, client: BadClient) -> None:
    # The issue's case: a 120 KiB header block, over h2's own 64 KiB default.
    big = huge_headers(120 * 1024)
    peer.send(peer.headers_frame(stream_id, [(":status", "200"), *big], end_stream=True))


async def header_list_over_our_limit(peer: RawPeer, stream_id: int, client: BadClient) -> None:
    big = huge_headers(300 * 1024)  # over the 256 KiB default
    peer.send(peer.headers_frame(stream_id, [(":status", "200"), *big]))
    peer.send(DataFrame(stream_id, b"body", flags=["END_STREAM"]).serialize())


async def test_a_120_kib_header_block_is_passed_on_and_fails_nobody() -> None:
    status, _, _, statuses = await run_case(oversized_header_list)
    assert status == 200
    assert statuses == [200] * NEIGHBOURS


async def test_a_header_list_over_the_limit_fails_its_stream_only() -> None:
    status, proxy_status, body, statuses = await run_case(header_list_over_our_limit)
    assert status == 502, body
    assert "error=http_response_header_section_size" in proxy_status
    assert "262144" in proxy_status  # names the limit
    assert statuses == [200] * NEIGHBOURS


async def test_the_limit_is_what_we_advertise_and_is_configurable() -> None:
    seen: dict[int, int] = {}

    async def script(peer: RawPeer) -> None:
        await peer.reader.readexactly(24)  # the preface, then the client's SETTINGS
        settings = await peer.read_frame()
        assert isinstance(settings, SettingsFrame)
        seen.update(settings.settings)
        peer.send(SettingsFrame(0).serialize(), SettingsFrame(0, flags=["ACK"]).serialize())
        stream_id, _ = await peer.read_request()
        # 40 KiB: under h2's 64 KiB default, over the 32 KiB configured here.
        big = huge_headers(40 * 1024)
        peer.send(peer.headers_frame(stream_id, [(":status", "200"), *big], end_stream=True))
        await peer.drain()
        await asyncio.sleep(30)

    async with (
        RawUpstream(script) as up,
        running_proxy(up.url, max_response_header_bytes=32 * 1024) as proxy,
        aiohttp.ClientSession() as session,
    ):
        async with session.get(proxy.url + "/x") as resp:
            assert resp.status == 502
            assert "http_response_header_section_size" in resp.headers["proxy-status"]
    assert seen[0x6] == 32 * 1024  # SETTINGS_MAX_HEADER_LIST_SIZE


async def head_then(
    peer: RawPeer, stream_id: int, client: BadClient, *frames: bytes, length: str | None = "3"
) -> None:
    """Response headers, then (once the client has them) ``frames``."""
    fields = [(":status", "200")] + ([("content-length", length)] if length else [])
    peer.send(peer.headers_frame(stream_id, fields))
    await peer.drain()
    await client.wait(client.head)
    peer.send(*frames)


async def content_length_too_long(peer: RawPeer, stream_id: int, client: BadClient) -> None:
    await head_then(peer, stream_id, client, DataFrame(stream_id, b"abcdefgh").serialize())


async def content_length_too_short(peer: RawPeer, stream_id: int, client: BadClient) -> None:
    # All in one go: the proxy has not passed the head on yet, so a 502 stands in.
    peer.send(peer.headers_frame(stream_id, [(":status", "200"), ("content-length", "10")]))
    peer.send(DataFrame(stream_id, b"abc", flags=["END_STREAM"]).serialize())


async def invalid_content_length(peer: RawPeer, stream_id: int, client: BadClient) -> None:
    fields = [(":status", "200"), ("content-length", "12abc")]
    peer.send(peer.headers_frame(stream_id, fields, end_stream=True))


async def conflicting_content_lengths(peer: RawPeer, stream_id: int, client: BadClient) -> None:
    fields = [(":status", "200"), ("content-length", "1"), ("content-length", "2")]
    peer.send(peer.headers_frame(stream_id, fields, end_stream=True))


async def data_before_headers(peer: RawPeer, stream_id: int, client: BadClient) -> None:
    peer.send(DataFrame(stream_id, b"early", flags=["END_STREAM"]).serialize())


async def trailers_without_end_stream(peer: RawPeer, stream_id: int, client: BadClient) -> None:
    trailers = peer.headers_frame(stream_id, [("x-trailer", "1")])  # no END_STREAM
    data = DataFrame(stream_id, b"abc").serialize()
    await head_then(peer, stream_id, client, data, trailers, length=None)  # read as chunks


async def informational_with_end_stream(peer: RawPeer, stream_id: int, client: BadClient) -> None:
    peer.send(peer.headers_frame(stream_id, [(":status", "103")], end_stream=True))


async def informational_after_final(peer: RawPeer, stream_id: int, client: BadClient) -> None:
    await head_then(peer, stream_id, client, peer.headers_frame(stream_id, [(":status", "100")]))


async def headers_after_end_stream(peer: RawPeer, stream_id: int, client: BadClient) -> None:
    # The response is complete; a second HEADERS on the closed stream is the
    # peer's confusion, not a reason to fail the neighbours (RFC 9113 5.1 lets
    # a closed stream's frames be a stream error).
    await answer_ok(peer, stream_id)
    await peer.drain()
    await client.wait(client.done)
    peer.send(peer.headers_frame(stream_id, [(":status", "200")], end_stream=True))


async def data_after_reset(peer: RawPeer, stream_id: int, client: BadClient) -> None:
    # The server reset the stream, then a DATA frame it had queued still goes out.
    peer.send(RstStreamFrame(stream_id, error_code=2).serialize())
    peer.send(DataFrame(stream_id, b"late", flags=["END_STREAM"]).serialize())


def status_of(value: str) -> BadAnswer:
    """A response whose ``:status`` is ``value``."""

    async def answer(peer: RawPeer, stream_id: int, client: BadClient) -> None:
        fields = [(":status", value), ("content-length", "2")]
        peer.send(peer.headers_frame(stream_id, fields))
        peer.send(DataFrame(stream_id, b"no", flags=["END_STREAM"]).serialize())

    return answer


PROTOCOL = "error=http_protocol_error"
# case: (bad answer, status the client of /bad sees (0: its response is cut
# after the head), words in its Proxy-Status)
CASES: dict[str, tuple[BadAnswer, int, str]] = {
    "DATA beyond content-length": (content_length_too_long, 0, ""),
    "DATA short of content-length": (content_length_too_short, 502, "content-length"),
    "invalid content-length": (invalid_content_length, 502, "invalid content-length"),
    "two content-lengths": (conflicting_content_lengths, 502, "conflicting content-length"),
    "DATA before HEADERS": (data_before_headers, 502, "DATA before the response headers"),
    "trailers without END_STREAM": (trailers_without_end_stream, 0, ""),
    "1xx with END_STREAM": (informational_with_end_stream, 502, "informational response"),
    "1xx after the final response": (informational_after_final, 0, ""),
    "HEADERS after END_STREAM": (headers_after_end_stream, 200, ""),
    "DATA after RST_STREAM": (data_after_reset, 502, "stream reset by upstream"),
    # :status is three digits, 100 to 599 (RFC 9110 section 15)
    ":status 099": (status_of("099"), 502, "invalid :status"),
    ":status 600": (status_of("600"), 502, "invalid :status"),
    ":status 000": (status_of("000"), 502, "invalid :status"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_malformed_response_fails_its_stream_only(case: str) -> None:
    bad, want_status, words = CASES[case]
    status, proxy_status, body, statuses = await run_case(bad)
    assert status == want_status, (status, proxy_status, body)
    if want_status == 502:
        assert PROTOCOL in proxy_status
        assert words in proxy_status
    assert statuses == [200] * NEIGHBOURS


async def test_headers_frame_on_a_stream_never_opened_still_ends_the_connection() -> None:
    """Not every fault is one stream's: HEADERS on an idle stream of the wrong
    parity is a connection error (RFC 9113 5.1.1), and stays one."""

    async def script(peer: RawPeer) -> None:
        await peer.handshake()
        await peer.read_request()
        block = peer.encoder.encode([(":status", "200")])
        peer.send(HeadersFrame(99, block, flags=["END_HEADERS"]).serialize())
        await peer.drain()
        await asyncio.sleep(30)

    async with (
        RawUpstream(script) as up,
        running_proxy(up.url) as proxy,
        aiohttp.ClientSession() as session,
    ):
        async with session.get(proxy.url + "/x") as resp:
            assert resp.status == 502
            assert PROTOCOL in resp.headers["proxy-status"]
        pool = proxy.pool
        assert pool is not None
        await wait_until(lambda: pool.connections == [])
