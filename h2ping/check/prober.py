"""The one HTTP/2 connection ``h2ping check`` opens: the proxy's own
(:class:`~h2ping.http2.upstream.UpstreamConnection`, dialled by
:func:`~h2ping.http2.dial.dial`), asked one thing at a time: a PING's round trip,
a GET's response head (on a stream slot, as the proxy sends a request).

The connection is not changed for the check: :class:`Prober` is its
observer (:class:`~h2ping.http2.observer.ConnectionObserver`), told of the peer's
SETTINGS as sent, PING ACKs, a GOAWAY, the socket's loss and the end. What else
the server said (the first bytes of a peer that speaks no HTTP/2, the fault that
ended the connection) is read from what the connection heard
(:attr:`~h2ping.http2.upstream.UpstreamConnection.heard`); the check words from
these how the connection ended, in its own terms.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from h2.errors import ErrorCodes

from ..config import Config
from ..errors import UpstreamError
from ..fields import Header
from ..http2.dial import DialSteps, dial
from ..http2.engine import TEXT_ANSWER, Goaway, not_http2
from ..http2.observer import reported
from ..http2.pingbackoff import punishes_pings
from ..http2.streams import SlotLost, UpstreamStream
from ..http2.upstream import ConnState, UpstreamConnection
from ..stats import Stats


class ProbeFailed(Exception):
    """h2ping cannot use the endpoint; the message says why, in one line."""


@dataclass
class GoAway:
    last_stream_id: int
    error: str
    debug: str
    punishes_pings: bool  # ENHANCE_YOUR_CALM, too_many_pings: gRPC's PING policy

    def __str__(self) -> str:
        debug = f', debug "{self.debug}"' if self.debug else ""
        return f"GOAWAY {self.error} (last stream {self.last_stream_id}{debug})"


def _code_name(code: int) -> str:
    try:
        return ErrorCodes(code).name
    except ValueError:
        return f"0x{code:x}"


#: How Python writes the bytes that are no printable ASCII in a string literal.
_ESCAPES = {
    ord("\\"): "\\\\",
    ord('"'): '\\"',
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}


def printable(data: bytes, limit: int = 80) -> str:
    """Peer-chosen bytes (the first ``limit``) for one line of output, inside double
    quotes: printable ASCII as it is, the rest escaped as Python escapes them
    (``\\n``, ``\\x00``), so nothing is lost and nothing breaks the line."""
    return "".join(
        _ESCAPES.get(b) or (chr(b) if 32 <= b < 127 else f"\\x{b:02x}") for b in data[:limit]
    )


def _reported(goaway: Goaway) -> GoAway:
    code, debug = goaway.error_code, goaway.debug_data
    return GoAway(
        goaway.last_stream_id, _code_name(code), printable(debug), punishes_pings(code, debug)
    )


def _quiet(config: Config) -> Config:
    """The proxy's settings for a connection that sends only the check's PINGs (no
    keepalive PINGs, none to measure the link) and that no clock of its own ends."""
    return dataclasses.replace(config, ping_interval=0, idle_conn_timeout=0, max_conn_age=0)


def _no_news(conn: UpstreamConnection, state: ConnState) -> None:
    """What a pool hears of its connections: the check hears it as the connection's observer."""


class Prober:
    """One connection that answers the check's questions, one at a time."""

    def __init__(self, config: Config, address: str) -> None:
        self._config = config
        self.address = address  # host:port, for messages
        self._loop = asyncio.get_running_loop()
        self.steps = DialSteps()
        self.settings: dict[int, int] | None = None  # the peer's first SETTINGS, as sent
        self.goaway: GoAway | None = None
        self.lost: asyncio.Future[None] = self._loop.create_future()
        self._lost_by_peer: tuple[Exception | None] | None = None  # (exc,) once the peer ended it
        self._pings: dict[bytes, asyncio.Future[float]] = {}
        self._stats = Stats()  # the connection's counters, which nobody reads here
        # Logged as the proxy logs its own connections' lives; then told to the probe.
        self.connection = UpstreamConnection(
            _quiet(config), 1, _no_news, observer=reported(self._stats, 1, self)
        )

    # ------------------------------------------------------------- the probe's side

    async def connect(self, ssl_context: ssl.SSLContext | None) -> None:
        """Dial as h2ping dials (TCP, TLS with ALPN, the server's first SETTINGS,
        within -connect-timeout); :attr:`steps` tells how far it got."""
        try:
            await dial(self.connection, self._config, ssl_context, self._stats, steps=self.steps)
        except UpstreamError as exc:
            raise ProbeFailed(self._setup_failure(exc)) from None

    async def ping(self, timeout: float) -> float:
        """One PING; its round trip in seconds."""
        when = "right after the connection opened" if not self._pings else "between PINGs"
        self._check_open(f"{when}: h2ping would open no stream on it")
        payload = len(self._pings).to_bytes(8, "big")
        acked = self._pings[payload] = self._loop.create_future()
        sent = time.perf_counter()
        self.connection.ping(payload)
        try:
            async with asyncio.timeout(timeout):
                return await acked - sent
        except TimeoutError:
            raise ProbeFailed(
                f"no PING ACK within {timeout:g}s (-ping-timeout): "
                "h2ping would close its connections as dead"
            ) from None

    async def get(self, headers: list[Header], timeout: float) -> tuple[list[Header], float]:
        """Send a GET on a stream slot of the connection, as the proxy sends a request;
        its response head and the seconds until it came."""
        self._check_open("before the request")
        slot = self.connection.table.try_reserve()
        if slot is None:
            raise ProbeFailed(f"the connection took no new stream ({self.connection.close_reason})")
        head = _ResponseHead(self)
        try:
            head.stream = slot.open(headers, head, end_stream=True)
        except SlotLost as exc:
            raise ProbeFailed(exc.detail) from None
        sent = time.perf_counter()
        try:
            async with asyncio.timeout(timeout):
                response, received = await head.received
        except TimeoutError:
            raise ProbeFailed(f"no response head within {timeout:g}s (-request-timeout)") from None
        return response, received - sent

    @property
    def connected(self) -> bool:
        """Whether the connection got as far as the protocol (TCP, and TLS if any)."""
        steps = self.steps
        return (steps.tls if self._config.upstream.tls else steps.tcp) is not None

    @property
    def heard_nothing(self) -> bool:
        """Not one byte has come from the peer over HTTP/2's transport."""
        return not self.connection.heard.opening

    @property
    def lost_by_peer(self) -> bool:
        """The peer closed the connection, or it broke, without the check closing it."""
        return self._lost_by_peer is not None

    def finish(self) -> None:
        """Close cleanly: GOAWAY(NO_ERROR) if HTTP/2 got going, then the transport."""
        self.connection.close("check done")

    def ended(self) -> str | None:
        """Why the connection is over, in the check's words; None while it is not
        (or when the check itself ended it)."""
        return self._broken() or self._lost()

    def _broken(self) -> str | None:
        """How the peer broke HTTP/2, if it did: it speaks none, or broke a rule."""
        heard = self.connection.heard
        if heard.opening and (wrong := not_http2(heard.opening)) is not None:
            if wrong == TEXT_ANSWER:  # the proxy's words, then how the text began
                wrong += f' (it began "{printable(heard.opening, 20)}")'
            return f"{self.address} {wrong}"
        if heard.fault is not None:
            return f"HTTP/2 protocol error from {self.address}: {heard.fault}"
        return None

    def _lost(self) -> str | None:
        """How the peer ended the connection, if it did."""
        if self._lost_by_peer is None:
            return None
        (exc,) = self._lost_by_peer
        if exc is None:
            reason = f"{self.address} closed the connection"
        else:
            reason = f"connection to {self.address} lost: {exc}"
        if self.goaway is not None:
            reason += f" after {self.goaway}"
        if self.settings is None:
            reason += " before its HTTP/2 SETTINGS"
        return reason

    def _setup_failure(self, error: UpstreamError) -> str:
        tls = self.steps.ssl_object
        if tls is not None and tls.selected_alpn_protocol() != "h2":
            return error.detail  # no HTTP/2: what the server did next on it is no matter
        if (broken := self._broken()) is not None:
            return broken
        if self.settings is None and self.goaway is not None:
            return f"the upstream sent {self.goaway} before its HTTP/2 SETTINGS"
        return self._lost() or error.detail

    def _check_open(self, when: str) -> None:
        if (ended := self.ended()) is not None:
            raise ProbeFailed(ended)
        if self.goaway is not None:
            raise ProbeFailed(f"the upstream sent {self.goaway} {when}")
        if self.connection.state is ConnState.CLOSED:
            raise ProbeFailed(f"the connection was closed ({self.connection.close_reason})")

    # ------------------------------------------------- told by the connection
    #
    # The connection's observer (:class:`~h2ping.http2.observer.ConnectionObserver`):
    # it hears of a GOAWAY and of the socket's end before their handling fails
    # what the probe waits for, which it then words.

    def dialled(self) -> None:
        pass  # the dial's steps are timed in :attr:`steps`

    def tls_done(self, ssl_object: ssl.SSLObject) -> None:
        pass  # idem

    def settings_heard(self, settings: Mapping[int, int]) -> None:
        if self.settings is None:
            self.settings = dict(settings)

    def ping_sent(self, payload: bytes, for_window: bool) -> None:
        pass  # sent by :meth:`ping`, which times it

    def ping_acked(self, payload: bytes, round_trip: float | None, for_window: bool) -> None:
        acked = self._pings.get(payload)
        if acked is not None and not acked.done():
            acked.set_result(time.perf_counter())

    def window_widened(self, size: int, round_trip: float) -> None:
        pass  # the check's connection measures no window (its PINGs are its own)

    def goaway_received(self, goaway: Goaway, open_streams: int) -> None:
        self.goaway = _reported(goaway)
        reason = f"the upstream sent {self.goaway}"
        for acked in self._pings.values():
            _fail(acked, f"{reason} instead of a PING ACK")
        if self.connection.state is ConnState.CONNECTING:
            # The proxy waits on for the SETTINGS, and would time out; the check says why.
            self.connection.close(f"GOAWAY {goaway.code_name} before SETTINGS")

    def stream_reset(self, stream_id: int, error_code: int, by_peer: bool) -> None:
        pass  # the GET's sink hears of its reset, with its code (:meth:`stream_failed`)

    def peer_dead(
        self, silent_for: float, since_ping: float, timeout: float, open_streams: int
    ) -> None:
        pass  # the check runs no keepalive: its own PINGs time out on their own

    def went_idle(self, seconds: float) -> None:
        pass  # idem: the check's connection has no idle clock

    def writes_stalled(
        self, waiting: int, stalled_for: float, timeout: float, open_streams: int
    ) -> None:
        pass  # the cut that follows ends the probe's waits, which word it

    def socket_lost(self, exc: Exception | None, by_peer: bool) -> None:
        if by_peer:
            self._lost_by_peer = (exc,)
        if not self.lost.done():
            self.lost.set_result(None)

    def closed(self, reason: str) -> None:
        why = self.ended() or f"the connection was closed ({reason})"
        for acked in self._pings.values():
            _fail(acked, why)

    def stream_failed(self, stream: UpstreamStream | None, error: UpstreamError) -> str:
        """The check's words for a GET's stream that failed with ``error``."""
        if (ended := self.ended()) is not None:
            return ended
        goaway = self.goaway
        if goaway is not None and stream is not None and stream.stream_id > goaway.last_stream_id:
            return f"the upstream sent {goaway}: the request was not processed"
        if error.reset_code is not None:
            return f"the upstream reset the request stream ({_code_name(error.reset_code)})"
        return error.detail


class _ResponseHead:
    """The GET's :class:`~h2ping.http2.streams.StreamSink`: it waits for the response
    head alone, and lets the body flow."""

    def __init__(self, probe: Prober) -> None:
        self._probe = probe
        self.stream: UpstreamStream | None = None
        self.received: asyncio.Future[tuple[list[Header], float]] = (
            asyncio.get_running_loop().create_future()
        )

    def on_informational(self, headers: list[Header]) -> None:
        pass  # the final response head is the one timed

    def on_response(self, headers: list[Header], end_stream: bool) -> None:
        if not self.received.done():
            self.received.set_result((list(headers), time.perf_counter()))

    def on_data(self, data: bytes, flow_controlled_length: int) -> int:
        return flow_controlled_length  # read and dropped: all of its credit goes back

    def on_end(self) -> None:
        pass

    def on_error(self, error: UpstreamError) -> None:
        _fail(self.received, self._probe.stream_failed(self.stream, error))

    def on_send_ready(self) -> None:
        pass


def _fail(waiter: asyncio.Future[Any] | None, reason: str) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_exception(ProbeFailed(reason))
        waiter.exception()  # no "never retrieved" warning when nobody waits any more
