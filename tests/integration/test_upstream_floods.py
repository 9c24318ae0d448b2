"""An upstream that floods h2ping with frames that cost it work, or breaks a rule
h2 leaves to its user: each attack ends the way RFC 9113 says (the connection
with GOAWAY and the right code, or the one stream), before the attacker has sent
more than a bounded share of its frames, with a handful of log lines; the
client's request gets a 502 naming the cause, and a fresh one is served at once.

The raw upstream reads what h2ping writes while it attacks, so each case also
sees h2ping's own frames: its GOAWAY and its RST_STREAMs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import (
    DataFrame,
    Frame,
    GoAwayFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from h2ping.testing import RawPeer, RawUpstream

from ..conftest import running_proxy


@dataclass
class Seen:
    """What the upstream saw of the first (attacked) connection."""

    frames: list[Frame] = field(default_factory=list)  # h2ping's, during the attack
    sent: int = 0  # attack frames written before h2ping ended the connection
    total: int = 0  # attack frames the upstream meant to send

    @property
    def goaway(self) -> GoAwayFrame | None:
        return next((f for f in self.frames if isinstance(f, GoAwayFrame)), None)

    @property
    def resets(self) -> list[tuple[int, int]]:
        return [(f.stream_id, f.error_code) for f in self.frames if isinstance(f, RstStreamFrame)]


async def read_all(peer: RawPeer, seen: Seen, resets: int) -> None:
    """Read h2ping's frames until the connection ends, or (``resets``) once
    that many RST_STREAMs came: the connection then goes on."""
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        while not resets or len(seen.resets) < resets:
            seen.frames.append(await peer.read_frame())


async def send_many(peer: RawPeer, seen: Seen, frame: bytes, total: int, pace: float = 0) -> None:
    """Write ``total`` copies of ``frame`` (in chunks, or one per ``pace`` seconds),
    stopping once h2ping has closed the connection."""
    chunk = 1 if pace else min(total, max(1, 64 * 1024 // len(frame)))
    seen.total += total
    with contextlib.suppress(ConnectionError):
        sent = 0
        while sent < total and not peer.reader.at_eof():
            peer.send(frame * chunk)
            await peer.drain()
            sent += chunk
            seen.sent += chunk
            await asyncio.sleep(pace)


Attack = Callable[[RawPeer, int, Seen], Awaitable[None]]


def settings_of(entries: int) -> bytes:
    """SETTINGS of identifiers h2 does not know, each new: the costliest to h2."""
    payload = b"".join((0x10 + i).to_bytes(2, "big") + bytes(4) for i in range(entries))
    return len(payload).to_bytes(3, "big") + b"\x04\x00" + bytes(4) + payload


async def big_settings(peer: RawPeer, stream_id: int, seen: Seen) -> None:
    # 16 KiB SETTINGS frames at 95 a second: under a count of frames per second.
    await send_many(peer, seen, settings_of(16384 // 6), 190, pace=1 / 95)


async def priority_flood(peer: RawPeer, stream_id: int, seen: Seen) -> None:
    frame = PriorityFrame(stream_id, depends_on=0, stream_weight=16).serialize()
    await send_many(peer, seen, frame, 2_000_000)


async def unknown_flood(peer: RawPeer, stream_id: int, seen: Seen) -> None:
    frame = b"\x00\x00\x08\x20\x00\x00\x00\x00\x00" + bytes(8)  # type 0x20
    await send_many(peer, seen, frame, 2_000_000)


async def early_hints_flood(peer: RawPeer, stream_id: int, seen: Seen) -> None:
    head = peer.headers_frame(stream_id, [(":status", "103"), ("link", "</a.css>; rel=preload")])
    await send_many(peer, seen, head, 1_000_000)


async def goaway_flood(peer: RawPeer, stream_id: int, seen: Seen) -> None:
    frame = GoAwayFrame(0, last_stream_id=stream_id, error_code=0).serialize()
    await send_many(peer, seen, frame, 1_000_000)


async def resets_on_idle_streams(peer: RawPeer, stream_id: int, seen: Seen) -> None:
    frames = b"".join(RstStreamFrame(sid, error_code=8).serialize() for sid in range(101, 4001, 2))
    await send_many(peer, seen, frames, 1)


async def table_size_over_limit(peer: RawPeer, stream_id: int, seen: Seen) -> None:
    peer.encoder.header_table_size = 65536  # over our SETTINGS_HEADER_TABLE_SIZE (4,096)
    await send_many(peer, seen, peer.headers_frame(stream_id, [(":status", "200")]), 1)


async def data_after_our_reset(peer: RawPeer, stream_id: int, seen: Seen) -> None:
    # An uppercase name: h2ping resets the stream; then 1-byte DATA frames on it.
    peer.send(peer.headers_frame(stream_id, [(":status", "200"), ("X-Upper", "1")]))
    await send_many(peer, seen, DataFrame(stream_id, b"x").serialize(), 2_000_000)


async def window_overflow(peer: RawPeer, stream_id: int, seen: Seen) -> None:
    frame = WindowUpdateFrame(stream_id, window_increment=2**31 - 1).serialize()
    await send_many(peer, seen, frame, 1)


#: Far longer than any case takes (a second or two): a case that hangs fails.
LIMIT = aiohttp.ClientTimeout(total=20)

EYC, PROTOCOL, COMPRESSION = (
    ErrorCodes.ENHANCE_YOUR_CALM,
    ErrorCodes.PROTOCOL_ERROR,
    ErrorCodes.COMPRESSION_ERROR,
)


@dataclass
class Case:
    attack: Attack
    detail: str  # in the client's Proxy-Status
    goaway: int | None  # h2ping's GOAWAY code; None: the connection stays
    resets: list[int] = field(default_factory=list)  # h2ping's RST_STREAM codes on the stream


CASES = {
    "16 KiB SETTINGS at 95/s": Case(big_settings, "flood of SETTINGS frames", EYC),
    "PRIORITY flood": Case(priority_flood, "flood of PRIORITY frames", EYC),
    "unknown-type flood": Case(unknown_flood, "frames of extension or unknown types", EYC),
    # The request fails at its sixth 1xx (its stream reset); the heads that
    # follow on the stream are discarded unanswered, and end the connection.
    "1xx flood on one stream": Case(
        early_hints_flood, "more than 5 informational responses", EYC, [PROTOCOL]
    ),
    "GOAWAY flood": Case(goaway_flood, "flood of GOAWAY frames", EYC),
    "RST_STREAM on idle streams": Case(
        resets_on_idle_streams, "RST_STREAM on stream 101, never opened", PROTOCOL
    ),
    "table size update over the limit": Case(
        table_size_over_limit, "undecodable header block (HPACK)", COMPRESSION
    ),
    # One RST_STREAM for the malformed head; the DATA after it goes unanswered.
    "DATA after our reset": Case(
        data_after_our_reset, "malformed response header block", EYC, [PROTOCOL]
    ),
    "WINDOW_UPDATE overflow": Case(
        window_overflow,
        "h2ping reset the stream: FLOW_CONTROL_ERROR",
        None,
        [ErrorCodes.FLOW_CONTROL_ERROR],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
async def test_an_attack_ends_as_the_rfc_says_and_the_next_request_is_served(
    name: str, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    case = CASES[name]
    seen = Seen()
    requests = 0

    async def script(peer: RawPeer) -> None:
        nonlocal requests
        await peer.handshake({SettingsFrame.MAX_CONCURRENT_STREAMS: 100})
        while True:
            stream_id, _ = await peer.read_request()
            requests += 1
            if requests == 1:
                stays = case.goaway is None
                reader = asyncio.create_task(read_all(peer, seen, len(case.resets) * stays))
                await case.attack(peer, stream_id, seen)
                await asyncio.wait_for(reader, 10)
                if not stays:
                    return
            else:
                peer.send(peer.headers_frame(stream_id, [(":status", "200")]))
                peer.send(DataFrame(stream_id, b"ok", flags=["END_STREAM"]).serialize())
                await peer.drain()

    caplog.set_level(logging.INFO, logger="h2ping")
    async with RawUpstream(script) as up, running_proxy(up.url) as proxy:
        async with session.get(proxy.url + "/attacked", timeout=LIMIT) as resp:
            assert resp.status == 502, await resp.text()
            assert case.detail in resp.headers["proxy-status"]
        lines = [r.getMessage() for r in caplog.records if r.name.startswith("h2ping")]
        async with session.get(proxy.url + "/next") as resp:
            assert resp.status == 200
            assert await resp.read() == b"ok"
        assert up.errors == []
        assert up.connections == (1 if case.goaway is None else 2)
    goaway = seen.goaway
    if case.goaway is None:
        assert goaway is None
    else:
        assert goaway is not None and goaway.error_code == case.goaway, seen.frames[-3:]
        assert seen.sent < seen.total / 2 or seen.total <= 1, (seen.sent, seen.total)
    assert [code for _, code in seen.resets] == case.resets
    # A handful of lines: the protocol error, the request's failure, a GOAWAY or two.
    assert len(lines) <= 6, lines
