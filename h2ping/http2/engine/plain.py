"""The plain engine: one upstream connection's h2, on h2's documented API alone.

This is the engine a newcomer should read first, and the one that runs when h2
changes in a way the fast layer (:mod:`.fast`) does not recognise. It drives
``h2.connection.H2Connection`` through its public methods only
(``receive_data`` and its events, ``send_headers``, ``send_data``,
``acknowledge_received_data``, ``increment_flow_control_window``, ``ping``,
``close_connection``, ``data_to_send``...), with hyperframe-free frame
boundaries from :mod:`.frames` in front of it.

What it adds to h2, all on that API:

- GOAWAY frames never reach h2 (:mod:`.frames` takes them out): h2 closes its
  whole state machine on any GOAWAY, graceful ones included, and would fail the
  streams the server promised to finish. The connection hears each one
  (:meth:`PeerEvents.on_goaway`) and drains.
- Each frame goes to h2 on its own, so that when h2 refuses one, the fault names
  it (type and stream id), and what came before it was told first.
- DATA of one stream arriving in a row (a download) is delivered in one piece:
  one write to the client and one credit back instead of one per frame.
- A flood of frames that ask nothing of h2ping's clients ends the connection
  (:mod:`.floodguard`); the rules h2 leaves to its user are in :mod:`.peerrules`.

Who owns what. The engine owns h2's connection. Its caller (the upstream
connection's stream table) owns the streams, their slots and their state, and
is the only holder of them: it gives the engine one way to find who hears a
stream (:meth:`H2Engine.heard_through`, the table's lookup by id), which the
engine and its flood guard only read through. A stream the table no longer
holds is nobody's: what the peer still sends on it is dropped, its DATA's credit
goes back to the connection's window, and the flood guard charges small frames on it.

Credit: what a stream's client took at once comes back from the stream as the
value its ``got_data`` returns, and the engine gives it back to the peer's
windows itself; the connection writes the WINDOW_UPDATEs after the batch.
Credit given later (a slow client drained) comes through :meth:`H2Engine.give_credit`.

Where plain h2 differs from the fast layer, it does what h2 does:

- A stream's fault is the connection's: h2 raises RFC 9113 stream errors (DATA
  beyond a ``content-length``, HEADERS on a stream that ended...) as connection
  errors, so one malformed response fails every request on its connection;
  so does a response head over the header list limit, which h2's decoder refuses.
- The header list limit (``header_list_limit``, our
  SETTINGS_MAX_HEADER_LIST_SIZE) reaches h2's decoder only as h2 applies a
  local setting: once the peer acknowledges it. The preface's SETTINGS carries
  it, and a second SETTINGS frame repeats it, which h2 applies on its ACK;
  before that ACK h2 refuses header lists over its default (64 KiB) for the
  whole connection.
- h2's GOAWAY for an undecodable header block says PROTOCOL_ERROR (RFC 9113
  says COMPRESSION_ERROR).
- hpack's encoder indexes request fields (in a table of at most 4 KiB,
  :mod:`.peerrules`), where the fast layer's leave its table alone; and h2's
  connection is freed by the cyclic collector, not by reference counting (its
  frame dispatch table refers back to it).
- DATA on a stream h2ping reset is answered with another RST_STREAM each time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes

from ...fields import Header
from .errortext import describe_h2_error
from .floodguard import FloodError, FloodGuard, IdleStreamError
from .frames import (
    CONTINUATION_TYPE,
    GOAWAY,
    SETTINGS_TYPE,
    FrameSizeError,
    FrameSplitter,
    Goaway,
    frames_in,
    parse_goaway,
)
from .opening import not_http2
from .peerrules import PeerRules

#: h2's initial connection window, before WINDOW_UPDATE raises it (RFC 9113 6.9.2).
DEFAULT_WINDOW = 65535
#: How much of the first bytes read :class:`Heard` keeps.
OPENING = 64

#: How h2ping drives h2: headers.request_headers produces what h2's outbound
#: checks would, so they are off; responses are checked per stream by
#: headers.response_head.
H2_CONFIG = h2.config.H2Configuration(
    client_side=True,
    header_encoding=None,
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
    validate_inbound_headers=False,
    normalize_inbound_headers=False,
)


class StreamEvents(Protocol):
    """What the peer said on one stream, told to that stream in frame order."""

    def got_informational(self, headers: list[Header]) -> None: ...
    def got_response(self, headers: list[Header], end_stream: bool) -> None: ...
    def got_data(self, data: bytes, flow_controlled_length: int) -> int:
        """Returns the credit to give back now (the engine does: see ``_release``)."""
        ...

    def got_end(self) -> None: ...
    def got_reset(self, error_code: int) -> None: ...
    def got_fault(self, error: str, detail: str) -> None:
        """The response broke HTTP/2's rules; the engine has reset the stream."""


class PeerEvents(Protocol):
    """What the peer said to the connection itself, in frame order."""

    def on_window_update(self, stream_id: int) -> None: ...
    def on_settings(self, max_concurrent_streams: int, initial_window_changed: bool) -> None: ...
    def on_ping_ack(self, payload: bytes) -> None: ...
    def on_goaway(self, goaway: Goaway) -> None: ...
    def on_internal_error(self, stream_id: int) -> None:
        """Serving ``stream_id`` raised (a bug of ours): only that stream may suffer."""


class _Deaf:
    """The :class:`PeerEvents` of an engine whose connection ended: nobody listens."""

    def on_window_update(self, stream_id: int) -> None:
        pass

    def on_settings(self, max_concurrent_streams: int, initial_window_changed: bool) -> None:
        pass

    def on_ping_ack(self, payload: bytes) -> None:
        pass

    def on_goaway(self, goaway: Goaway) -> None:
        pass

    def on_internal_error(self, stream_id: int) -> None:
        pass


_DEAF = _Deaf()


@dataclass(slots=True)
class Heard:
    """What the peer has said beyond the calls of :class:`PeerEvents`, as a report
    of the connection tells it (``h2ping check``)."""

    #: The start of the first bytes read: a peer that speaks no HTTP/2 shows it.
    opening: bytes = b""
    #: Every setting h2 knows that the peer's SETTINGS frames carried, by code,
    #: as sent (a setting never sent is missing; unknown identifiers are
    #: ignored, RFC 9113 6.5.2); None before its first SETTINGS.
    settings: dict[int, int] | None = None
    #: How the peer broke HTTP/2 for the whole connection, if it did
    #: (:attr:`ConnectionFault.detail`).
    fault: str | None = None


class ConnectionFault(Exception):
    """The peer broke HTTP/2 for the whole connection: it must end with a GOAWAY
    of ``error_code``. ``detail`` is a fixed text that quotes nothing the peer sent."""

    def __init__(self, detail: str, error_code: int = ErrorCodes.PROTOCOL_ERROR) -> None:
        super().__init__(detail)
        self.detail = detail
        self.error_code = error_code


def our_settings(header_list_limit: int, stream_window: int) -> h2.settings.Settings:
    """h2ping's SETTINGS, all in the preface's one frame: no push, our stream
    window and our header list limit."""
    return h2.settings.Settings(
        client=True,
        initial_values={
            h2.settings.SettingCodes.ENABLE_PUSH: 0,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: stream_window,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: header_list_limit,
        },
    )


class H2Engine:
    """h2's client connection for one upstream connection: bytes in, calls out
    (:class:`PeerEvents`, each stream's :class:`StreamEvents`), and sends."""

    #: The fast paths this engine takes (:mod:`.fast`): none.
    fast: frozenset[str] = frozenset()

    def __init__(
        self,
        events: PeerEvents,
        header_list_limit: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``events`` hears what the peer says to the connection; ``header_list_limit``
        is our SETTINGS_MAX_HEADER_LIST_SIZE; ``clock`` times the flood budget."""
        self._events = events
        self.header_list_limit = header_list_limit
        self._hear: Callable[[int], StreamEvents | None] = _nobody  # see heard_through
        self.responses = 0  # response heads received: the peer is taking work
        #: The peer's SETTINGS_MAX_HEADER_LIST_SIZE as it stands (None: unlimited,
        #: which is also what it is before the peer's first SETTINGS); kept here
        #: as its SETTINGS are told, read for every request.
        self.peer_header_list_limit: int | None = None
        self.heard = Heard()
        # DATA of one stream, held while more of it follows with nothing between
        # (see _deliver): one delivery, one write to the client, one credit back.
        self._held_stream = 0
        self._held: list[bytes] = []
        self._held_length = 0
        # Set once h2ping has ended the connection (its own GOAWAY went to h2,
        # which is CLOSED now): what the peer sent after is not handed to h2.
        self._over = False
        self._h2_ended = False  # h2 refused the peer's bytes and sent its own GOAWAY
        self._at: tuple[int, int] | None = None  # (type, stream id) of the frame h2 has
        self._guard = FloodGuard(clock, _nobody)
        self._h2 = self._new_h2()
        self._rules = PeerRules(self._h2, self._guard)
        self._frames = self._new_splitter(clock)

    def _new_h2(self) -> h2.connection.H2Connection:
        return h2.connection.H2Connection(H2_CONFIG)

    def _new_splitter(self, clock: Callable[[], float]) -> FrameSplitter:
        return FrameSplitter(clock, guard=self._guard)

    # ------------------------------------------------------------------ inbound

    def feed(self, data: bytes) -> None:
        """Keep ``data`` (bytes read from the peer) for :meth:`handle`."""
        heard = self.heard
        if not heard.opening:
            heard.opening = data[:OPENING]
        self._frames.feed(data)

    @property
    def ready(self) -> bool:
        """Whether :meth:`handle` has work: a whole frame waits."""
        return self._frames.ready

    def handle(self, budget: int | None = None) -> int:
        """Handle about ``budget`` bytes of whole frames (None: all), telling the
        :class:`PeerEvents` and the streams what they say; returns the bytes
        handled. Raises :class:`ConnectionFault` when the peer broke the
        protocol; the connection must then end (see :meth:`close`).

        What :meth:`FrameSplitter.take` hands out is GOAWAY payloads, and runs
        of whole frames, each frame given to h2 on its own."""
        frames = self._frames
        backlog = frames.backlog
        try:
            for kind, piece in frames.take(budget):
                if kind == GOAWAY:
                    if self._over:
                        break
                    self._goaway(piece)
                    continue
                for frame in frames_in(piece):
                    if self._over:
                        # The connection ended while this batch was handled (its
                        # last stream did, and the drained connection closed): h2
                        # is CLOSED and would call the frames after (a PING, a
                        # SETTINGS...) a protocol error. Nothing waits on them.
                        return backlog - frames.backlog
                    self._receive(frame)
        except Exception as exc:
            raise self._connection_fault(exc) from exc
        finally:
            self._release()  # what came before a fault was good
        return backlog - frames.backlog

    def _receive(self, frame: bytes) -> None:
        """One whole frame, for h2."""
        kind = frame[3]
        if kind != CONTINUATION_TYPE:  # h2 refuses a header block as its HEADERS
            self._at = (kind, int.from_bytes(frame[5:9], "big") & 0x7FFFFFFF)
        if kind == SETTINGS_TYPE:
            frame = self._rules.capped(frame)
        self._tell(self._h2.receive_data(frame))

    def _connection_fault(self, exc: Exception) -> ConnectionFault:
        """What ``exc``, raised while handling the peer's frames, means for the connection."""
        if isinstance(exc, FloodError):
            return self._fault(str(exc), ErrorCodes.ENHANCE_YOUR_CALM)
        if isinstance(exc, IdleStreamError):
            return self._fault(f"{exc} (RFC 9113 5.1)")
        if isinstance(exc, FrameSizeError):
            detail = f"{exc}, above SETTINGS_MAX_FRAME_SIZE"
            return self._fault(detail, ErrorCodes.FRAME_SIZE_ERROR)
        if isinstance(exc, ConnectionFault):
            return self._fault(exc.detail, exc.error_code)
        # Anything h2 raises on the peer's bytes: for a ProtocolError h2 has sent
        # its own GOAWAY, with its error code.
        self._h2_ended = isinstance(exc, h2.exceptions.ProtocolError)
        code = getattr(exc, "error_code", ErrorCodes.PROTOCOL_ERROR)
        return self._fault(describe_h2_error(exc, frame=self._refused()), code)

    def _refused(self) -> tuple[int, int] | None:
        """(type, stream id) of the frame h2 refused, if known."""
        return self._at

    def _goaway(self, payload: bytes) -> None:
        self._release()
        self._events.on_goaway(parse_goaway(payload))

    def _fault(self, detail: str, error_code: int = ErrorCodes.PROTOCOL_ERROR) -> ConnectionFault:
        heard = self.heard
        if heard.settings is None:  # the first frame broke it: is the peer speaking HTTP/2?
            detail = not_http2(heard.opening) or detail
        heard.fault = detail
        return ConnectionFault(detail, error_code)

    def _deliver(self, stream_id: int, data: bytes, flow_controlled_length: int) -> None:
        """Hold DATA for its stream. Frames of one stream often come in a row (a
        download): held together, they cost one delivery instead of one each.
        Anything else the peer says releases what is held first, so the order
        of what streams hear is the order of the frames."""
        if stream_id != self._held_stream:
            self._release()
            self._held_stream = stream_id
        self._held.append(data)
        self._held_length += flow_controlled_length

    def _release(self) -> None:
        """Deliver the DATA held (see :meth:`_deliver`), if any."""
        if not self._held:
            return
        stream_id, held, length = self._held_stream, self._held, self._held_length
        self._held_stream, self._held, self._held_length = 0, [], 0
        data = b"".join(held)  # one frame's: its payload itself, no copy
        try:
            stream = self._hear(stream_id)
            if stream is not None:
                # What its client took at once goes back to the peer's windows
                # here; the connection writes it after the batch.
                if taken := stream.got_data(data, length):
                    self.give_credit(stream_id, taken)
            else:  # nobody's: its credit still counts against the connection's window
                self.give_credit(stream_id, length)
        except Exception:  # a bug serving one stream must not end the others
            self._events.on_internal_error(stream_id)

    def _got_response(self, stream_id: int, headers: list[Header], ended: bool) -> None:
        self.responses += 1
        if (stream := self._hear(stream_id)) is not None:
            stream.got_response(headers, ended)

    def _got_end(self, stream_id: int) -> None:
        # Looked up after the response head: telling it may have ended the stream.
        if (stream := self._hear(stream_id)) is not None:
            stream.got_end()

    def _tell(self, said: list[h2.events.Event]) -> None:
        events = self._events
        for event in said:
            if self._over:
                return  # the connection ended while telling these (see handle)
            if event.__class__ is h2.events.DataReceived:
                self._deliver(event.stream_id, event.data, event.flow_controlled_length)
                continue
            self._release()
            try:
                self._tell_one(events, event)
            except FloodError:
                raise  # the peer's, not a bug: the connection ends
            except Exception:  # a bug serving one stream must not end the others
                events.on_internal_error(getattr(event, "stream_id", 0))

    def _tell_one(self, events: PeerEvents, event: h2.events.Event) -> None:
        # No h2 event class derives from another: isinstance picks exactly one.
        if isinstance(event, h2.events.WindowUpdated):
            events.on_window_update(event.stream_id)
        elif isinstance(event, h2.events.ResponseReceived):
            self._got_response(event.stream_id, event.headers, event.stream_ended is not None)
        elif isinstance(event, h2.events.StreamEnded):
            self._got_end(event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            if not event.remote_reset:
                self._guard.reset(event.stream_id)  # reset by h2ping: frames may follow
            if (stream := self._hear(event.stream_id)) is None:
                return  # forgotten by the connection: h2 has reset it, or will
            if event.remote_reset:
                stream.got_reset(event.error_code)
            else:  # h2 reset it, for what the peer did on it
                stream.got_fault(*self._rules.local_reset(event.error_code))
        elif isinstance(event, h2.events.InformationalResponseReceived):
            self._rules.informational(event.headers)  # charged by its size
            if (stream := self._hear(event.stream_id)) is not None:
                stream.got_informational(event.headers)
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            sent = self._rules.settings_changed(event.changed_settings)
            self.heard.settings = {**(self.heard.settings or {}), **sent}
            self.peer_header_list_limit = self._h2.remote_settings.max_header_list_size
            events.on_settings(
                self._h2.remote_settings.max_concurrent_streams,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE in event.changed_settings,
            )
        elif isinstance(event, h2.events.PingAckReceived):
            events.on_ping_ack(event.ping_data)
        else:
            self._tell_other(event)

    def _tell_other(self, event: h2.events.Event) -> None:
        """The rest need nothing of h2ping: h2 answers PINGs and acknowledges
        SETTINGS itself; response trailers are not forwarded."""

    # ------------------------------------------------------------------ outbound

    def start(self, stream_window: int, connection_window: int) -> None:
        """The connection preface, with all our settings in its one SETTINGS frame
        (never h2's defaults first: a server must not see a smaller header list
        limit than we enforce), and the connection window raised at once."""
        self._h2.local_settings = our_settings(self.header_list_limit, stream_window)
        self._h2.initiate_connection()
        if connection_window > DEFAULT_WINDOW:
            self._h2.increment_flow_control_window(connection_window - DEFAULT_WINDOW)
        self._limit_decoding()

    def _limit_decoding(self) -> None:
        """Have h2's decoder hold our header list limit: h2 applies a local
        setting once the peer acknowledges a SETTINGS frame changing it, and the
        preface's initial values change nothing. The same value again does."""
        limit = h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE
        self._h2.update_settings({limit: self.header_list_limit})

    def next_stream_id(self) -> int:
        return self._h2.get_next_available_stream_id()

    def heard_through(self, lookup: Callable[[int], StreamEvents | None]) -> None:
        """``lookup(stream_id)``: who hears what the peer says on that stream, None
        once nobody does. The caller's own table, read through this alone."""
        self._hear = lookup
        self._guard.served_by(lookup)

    def send_request(self, stream_id: int, headers: list[Header], end_stream: bool) -> None:
        """Open ``stream_id`` with a request's HEADERS."""
        self._h2.send_headers(stream_id, headers, end_stream=end_stream)
        self._guard.opened(stream_id)

    def send_window(self, stream_id: int) -> int:
        """How much request body the peer's windows take on ``stream_id`` now."""
        return self._h2.local_flow_control_window(stream_id)

    @property
    def max_frame_size(self) -> int:
        """The largest DATA payload the peer takes in one frame."""
        return self._h2.max_outbound_frame_size

    def send_data(self, stream_id: int, data: bytes | memoryview, end_stream: bool) -> None:
        """Raises h2's ``StreamClosedError`` when the stream is gone."""
        self._h2.send_data(stream_id, data, end_stream=end_stream)
        self._guard.sent_data()

    def end_stream(self, stream_id: int) -> None:
        self._h2.end_stream(stream_id)

    def reset_stream(self, stream_id: int, error_code: int) -> None:
        """RST_STREAM, unless h2 already considers the stream closed."""
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._h2.reset_stream(stream_id, error_code)
        self._guard.reset(stream_id)

    def give_credit(self, stream_id: int, nbytes: int) -> bool:
        """Return ``nbytes`` of received DATA to the peer's windows; True when a
        WINDOW_UPDATE may be due (h2 batches them)."""
        try:
            self._h2.acknowledge_received_data(nbytes, stream_id)
        except h2.exceptions.ProtocolError:
            return False
        return True

    def widen(self, stream_id: int, increment: int) -> None:
        """Grow ``stream_id``'s receive window by ``increment`` (a WINDOW_UPDATE),
        unless the stream is closed by now."""
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._h2.increment_flow_control_window(increment, stream_id)

    def ping(self, payload: bytes) -> None:
        self._h2.ping(payload)
        self._guard.sent_ping()

    def close(self, error_code: int = ErrorCodes.NO_ERROR) -> None:
        """GOAWAY with ``error_code``, unless h2 has sent one of its own (it does
        for the errors it detects: one is enough). Nothing the peer sends after
        is handed to h2."""
        if self._over:
            return
        self._over = True
        if self._h2_ended:
            return
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._h2.close_connection(error_code=error_code)

    def let_go(self) -> None:
        """The connection ended: tell its :class:`PeerEvents` and its streams
        nothing more, and let go of them (they lead back to the connection, a
        cycle only the cyclic collector would undo)."""
        self._events = _DEAF
        self._hear = _nobody
        self._guard.served_by(_nobody)

    def data_to_send(self) -> bytes | bytearray:
        """Everything queued for the peer since the last call (the caller only
        reads it: it may be the buffer it was queued in)."""
        return self._h2.data_to_send()


def _nobody(stream_id: int) -> None:
    """Who hears a stream before the engine is given its caller's lookup, and after
    the connection ended: nobody."""


def new_engine(events: PeerEvents, header_list_limit: int) -> H2Engine:
    """An engine for a new upstream connection: the plain one."""
    return H2Engine(events, header_list_limit)


def fast_paths_taken() -> frozenset[str]:
    """The fast paths this process takes: none, on plain h2."""
    return frozenset()


def fast_path_states() -> dict[str, int]:
    """Each fast path, 1 when taken (for /metrics): there are none."""
    return {}
