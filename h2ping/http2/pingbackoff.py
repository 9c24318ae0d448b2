"""PING back-off, for servers that punish PINGs.

gRPC-style HTTP/2 servers enforce a PING policy (grpc-go's default: at most one
PING per 5 minutes while no stream is open): after a few PINGs that come more
often, they end the connection with ``GOAWAY(ENHANCE_YOUR_CALM)`` and the debug
data ``too_many_pings``, failing what runs on it. As gRPC's own clients do,
h2ping then doubles the PING interval of the connections it opens to that
upstream from then on, never above :data:`MAX_INTERVAL` (so that a 340 s idle
cut is still beaten) and never below the configured one. Connections already
open keep theirs. The back-off lasts as long as the process (each worker has its
own pool, so its own back-off).
"""

from __future__ import annotations

import logging

from h2.errors import ErrorCodes

from ..config import Config
from ..stats import Stats

log = logging.getLogger("h2ping.pingbackoff")

#: The debug data of the GOAWAY with which gRPC servers refuse more PINGs.
TOO_MANY_PINGS = b"too_many_pings"
#: The back-off stops here: below the middlebox's 340 s idle cut.
MAX_INTERVAL = 300.0


def punishes_pings(error_code: int, debug_data: bytes) -> bool:
    """Whether a GOAWAY says that our PINGs broke the server's policy."""
    return error_code == ErrorCodes.ENHANCE_YOUR_CALM and TOO_MANY_PINGS in debug_data


def new_connection_pings(config: Config, backoff: PingBackoff | None) -> tuple[float, bool]:
    """A new connection's PING interval, which its clocks are handed, and whether it
    also PINGs to measure the link (:mod:`.windows`): the shared back-off's for the
    connections of a pool, ``-ping-interval`` for one of its own (the check's)."""
    if backoff is None:
        return config.ping_interval, config.ping_interval > 0
    return backoff.interval, backoff.interval > 0 and not backoff.punishing


class PingBackoff:
    """The PING interval for the next connection to one upstream."""

    def __init__(self, configured: float, stats: Stats) -> None:
        self.configured = configured  # -ping-interval; 0: no PINGs, nothing to back off
        self.interval = configured
        self._stats = stats

    @property
    def punishing(self) -> bool:
        """The upstream has punished our PINGs: new connections send only the
        liveness PINGs, none to measure the link (:mod:`.windows`)."""
        return self.interval > self.configured

    def punished(self, conn_id: int, interval: float) -> None:
        """Connection ``conn_id``, which PINGed after ``interval`` seconds of silence,
        got GOAWAY(ENHANCE_YOUR_CALM, too_many_pings). Connections opened with a
        shorter interval than today's do not double it again."""
        self._stats.pings_punished()
        wanted = max(self.configured, min(2 * interval, MAX_INTERVAL))
        before, self.interval = self.interval, max(self.interval, wanted)
        now = (
            f"new connections PING after {self.interval:g}s of silence (was {before:g}s)"
            if self.interval > before
            else f"new connections already PING after {self.interval:g}s of silence"
        )
        log.warning(
            "conn=%d GOAWAY ENHANCE_YOUR_CALM too_many_pings: the upstream's HTTP/2 PING "
            "policy allows fewer PINGs than one per %gs of silence; %s. Let the server "
            "permit them (grpc-go: keepalive.EnforcementPolicy MinTime, "
            "PermitWithoutStream), or raise -ping-interval",
            conn_id,
            interval,
            now,
        )
