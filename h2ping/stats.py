"""Counters of what the proxy did: one object per proxy, read from Python and
printed in the shutdown summary line."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Stats:
    requests: int = 0
    failed: int = 0  # answered with a 502
    aborted: int = 0  # client connection cut after response headers
    replays: int = 0  # refused streams sent again
    replays_refused_for_size: int = 0  # refused, but the body had not been kept: 502
    unkept_bodies: int = 0  # bodies streamed without a replay guarantee (memory bound)
    retry_buffer_bytes: int = 0  # request body bytes kept for replay right now
    connections_opened: int = 0
    goaways: int = 0  # GOAWAY frames received
    retired: int = 0  # connections retired by max-conn-age
    pings_sent: int = 0
    ping_acks: int = 0
    ping_timeouts: int = 0  # connections declared dead: nothing arrived after a PING
    last_ping_rtt: float | None = None  # seconds, of the most recent acknowledged PING

    def summary(self) -> str:
        fields = dataclasses.asdict(self)
        rtt = fields.pop("last_ping_rtt")
        text = " ".join(f"{name}={value}" for name, value in fields.items())
        return text + (f" last_ping_rtt={rtt * 1000:.1f}ms" if rtt is not None else "")
