"""Liveness on a fake clock: when PINGs go out, and when a peer counts as dead."""

from __future__ import annotations

from h2ping.http2.liveness import DEATH_CONFIRM_DELAY, Liveness

from ..fakeloop import FakeLoop


class Peer:
    def __init__(self, interval: float = 1.0, timeout: float = 0.5) -> None:
        self.loop = FakeLoop()
        self.pings: list[bytes] = []
        self.deaths: list[tuple[float, float]] = []
        self.liveness = Liveness(
            interval,
            timeout,
            self.pings.append,
            lambda silent, since: self.deaths.append((silent, since)),
            loop=self.loop,  # type: ignore[arg-type]
        )
        self.liveness.start()


def test_no_ping_while_bytes_keep_arriving() -> None:
    peer = Peer(interval=1.0)
    for _ in range(20):
        peer.loop.advance(0.6)
        peer.liveness.saw_bytes()
    assert peer.pings == [] and peer.deaths == []
    assert peer.loop.pending == 1  # one timer, re-armed lazily


def test_ping_after_an_interval_of_silence_then_again_after_the_next() -> None:
    peer = Peer(interval=1.0, timeout=0.5)
    peer.loop.advance(0.99)
    assert peer.pings == []
    peer.loop.advance(0.02)
    assert peer.pings == [(1).to_bytes(8, "big")]
    peer.loop.advance(0.1)
    peer.liveness.saw_bytes()  # the ACK, or any frame
    peer.loop.advance(0.95)
    assert len(peer.pings) == 1, "pinged before a full interval of silence"
    peer.loop.advance(0.1)
    assert peer.pings[-1] == (2).to_bytes(8, "big")
    assert len(peer.pings) == 2 and peer.deaths == []


def test_dead_when_nothing_arrives_within_the_timeout_of_a_ping() -> None:
    peer = Peer(interval=1.0, timeout=0.5)
    peer.loop.advance(1.0)
    assert len(peer.pings) == 1
    peer.loop.advance(0.5)
    assert peer.deaths == [], "declared dead without the confirming look"
    peer.loop.advance(DEATH_CONFIRM_DELAY)
    assert len(peer.deaths) == 1
    silent_for, since_ping = peer.deaths[0]
    assert abs(since_ping - (0.5 + DEATH_CONFIRM_DELAY)) < 1e-9
    assert abs(silent_for - (1.5 + DEATH_CONFIRM_DELAY)) < 1e-9
    peer.loop.advance(10)
    assert len(peer.deaths) == 1 and len(peer.pings) == 1  # once, and no more PINGs
    assert peer.loop.pending == 0


def test_bytes_found_during_the_confirming_look_keep_it_alive() -> None:
    """The event loop was blocked: the bytes were in the socket, not yet read."""
    peer = Peer(interval=1.0, timeout=0.5)
    peer.loop.advance(1.5)
    peer.loop.advance(DEATH_CONFIRM_DELAY / 2)
    peer.liveness.saw_bytes()
    peer.loop.advance(DEATH_CONFIRM_DELAY)
    assert peer.deaths == []
    peer.loop.advance(1.0)
    assert len(peer.pings) == 2 and peer.deaths == []


def test_any_byte_counts_not_only_the_ack() -> None:
    peer = Peer(interval=1.0, timeout=0.5)
    peer.loop.advance(1.0)
    for _ in range(10):  # DATA keeps coming; the ACK is stuck behind it
        peer.loop.advance(0.3)
        peer.liveness.saw_bytes()
    assert peer.deaths == [] and len(peer.pings) == 1


def test_ack_of_our_ping_gives_the_round_trip() -> None:
    peer = Peer()
    peer.loop.advance(1.0)
    assert peer.liveness.on_ack(b"unrelated") is None
    round_trip = peer.liveness.on_ack(peer.pings[0])
    assert round_trip is not None and round_trip >= 0


def test_interval_zero_never_pings() -> None:
    peer = Peer(interval=0.0)
    peer.loop.advance(1000)
    assert peer.pings == [] and peer.loop.pending == 0


def test_stop_cancels_the_timer() -> None:
    peer = Peer()
    peer.liveness.stop()
    peer.loop.advance(1000)
    assert peer.pings == [] and peer.deaths == []
