"""The one door between an upstream connection and h2: bytes in, calls out, and sends.

:class:`H2Engine` holds h2's connection state (:mod:`.connection`), the frame
splitter in front of it (:mod:`.frames`) and the fast paths this process takes
(:mod:`.fastpaths`). The connection feeds it what the socket read
(:meth:`H2Engine.feed`) and lets it handle a bounded batch per loop turn
(:meth:`H2Engine.handle`). What the peer said on a stream goes to that stream's
own ``got_*`` method (:class:`StreamEvents`), looked up in the connection's table
of streams, which the engine only reads; what it said to the connection goes to
the :class:`PeerEvents` the connection gave. One call per thing said, whichever
way the frame was taken (a fast path, or h2 and its events). What to send goes
through the engine's methods, and :meth:`H2Engine.data_to_send` hands over the
bytes.

What the peer has said that a report wants beyond those calls (the settings as
sent, the first bytes read, the fault that ended the connection) the engine
keeps in :class:`Heard`.

Nothing outside this package needs to know which frames a fast path took, how
h2's errors are worded, or any name h2 keeps private: the modules beside this
one are the engine's own, and everything else takes what it needs from the
package itself (``h2ping.http2.engine``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes

from ...fields import Header
from . import fastpaths
from .connection import H2_CONFIG, H2Connection, StreamFault
from .errortext import describe_h2_error
from .floodguard import FloodError, FloodGuard, IdleStreamError
from .frames import (
    FRAME,
    FRAME_HEADER,
    GOAWAY,
    HEADERS_TYPE,
    RUN,
    FrameSizeError,
    FrameSplitter,
    Goaway,
    data_frame,
    parse_goaway,
)
from .manifest import DATA, RESPONSE_HEADERS
from .opening import not_http2
from .peerrules import PeerRules

#: h2's initial connection window, before WINDOW_UPDATE raises it (RFC 9113 6.9.2).
DEFAULT_WINDOW = 65535


class StreamEvents(Protocol):
    """What the peer said on one stream, told to that stream in frame order."""

    def got_informational(self, headers: list[Header]) -> None: ...
    def got_response(self, headers: list[Header], end_stream: bool) -> None: ...
    def got_data(self, data: bytes, flow_controlled_length: int) -> None: ...
    def got_end(self) -> None: ...
    def got_reset(self, error_code: int) -> None: ...
    def got_fault(self, error: str, detail: str) -> None:
        """The response broke HTTP/2's rules; the engine has reset the stream."""


class PeerEvents(Protocol):
    """What the peer said to the connection itself, in frame order."""

    def on_unclaimed_data(self, stream_id: int, flow_controlled_length: int) -> None:
        """DATA on a stream not in the table: its credit is still the connection's."""

    def on_window_update(self, stream_id: int) -> None: ...
    def on_settings(self, max_concurrent_streams: int, initial_window_changed: bool) -> None: ...
    def on_ping_ack(self, payload: bytes) -> None: ...
    def on_goaway(self, goaway: Goaway) -> None: ...
    def on_internal_error(self, stream_id: int) -> None:
        """Serving ``stream_id`` raised (a bug of ours): only that stream may suffer."""


class _Deaf:
    """The :class:`PeerEvents` of an engine whose connection ended: nobody listens."""

    def on_unclaimed_data(self, stream_id: int, flow_controlled_length: int) -> None:
        pass

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

#: How much of the first bytes read :class:`Heard` keeps.
OPENING = 64


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
    """h2's client connection behind h2ping's fast paths, for one upstream connection."""

    def __init__(
        self,
        events: PeerEvents,
        streams: Mapping[int, StreamEvents],
        header_list_limit: int,
        fast: Collection[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``fast``: the fast paths to take (default: those whose probes passed);
        ``clock`` times the flood budget (:mod:`.floodguard`)."""
        self.fast = frozenset(fastpaths.enabled() if fast is None else fast)
        self._events = events
        self._streams = streams
        self.responses = 0  # response heads received: the peer is taking work
        self.heard = Heard()
        # DATA of one stream, held while more of it follows with nothing between
        # (see _deliver): one delivery, one write to the client, one credit back.
        self._held_stream = 0
        self._held: list[bytes] = []
        self._held_length = 0
        # Set once h2ping has ended the connection (its own GOAWAY went to h2,
        # which is CLOSED now): what the peer sent after is not handed to h2.
        self._over = False
        self._h2 = H2Connection(H2_CONFIG, header_list_limit, self.fast)
        self._guard = FloodGuard(clock, streams)
        self._rules = PeerRules(self._h2, self._guard)
        self._frames = FrameSplitter(
            clock,
            plain_data=DATA in self.fast,
            plain_headers=RESPONSE_HEADERS in self.fast,
            guard=self._guard,
        )

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
        :class:`PeerEvents` what they say; returns the bytes handled. Raises
        :class:`ConnectionFault` when the peer broke the protocol; the connection
        must then end (see :meth:`close`)."""
        frames = self._frames
        backlog = frames.backlog
        try:
            for kind, piece in frames.take(budget):
                if self._over:
                    # The connection ended while this batch was handled (its last
                    # stream did, and the drained connection closed): h2 is CLOSED
                    # and would call the frames after (a PING, a SETTINGS...) a
                    # protocol error. Nothing waits on them any more.
                    break
                if kind == RUN:
                    self._receive(piece)
                elif kind > 0:  # a plain DATA frame's payload, on stream ``kind``
                    self._plain_data(kind, piece)
                elif kind == FRAME:
                    self._whole_frame(piece)
                elif kind == GOAWAY:
                    self._release()
                    self._events.on_goaway(parse_goaway(piece))
        except FloodError as exc:
            raise self._fault(str(exc), ErrorCodes.ENHANCE_YOUR_CALM) from exc
        except IdleStreamError as exc:
            raise self._fault(f"{exc} (RFC 9113 5.1)") from exc
        except FrameSizeError as exc:
            raise self._fault(
                f"{exc}, above SETTINGS_MAX_FRAME_SIZE", ErrorCodes.FRAME_SIZE_ERROR
            ) from exc
        except ConnectionFault as fault:
            raise self._fault(fault.detail, fault.error_code) from fault
        except Exception as exc:  # anything h2 raises on the peer's bytes
            code = getattr(exc, "error_code", ErrorCodes.PROTOCOL_ERROR)  # as h2's GOAWAY has it
            raise self._fault(describe_h2_error(exc, frame=self._h2.fault_frame), code) from exc
        finally:
            self._release()  # what came before a fault was good
        return backlog - frames.backlog

    def _fault(self, detail: str, error_code: int = ErrorCodes.PROTOCOL_ERROR) -> ConnectionFault:
        heard = self.heard
        if heard.settings is None:  # the first frame broke it: is the peer speaking HTTP/2?
            detail = not_http2(heard.opening) or detail
        heard.fault = detail
        return ConnectionFault(detail, error_code)

    def _receive(self, data: bytes) -> None:
        self._tell(self._h2.receive_data(data))

    def _plain_data(self, stream_id: int, payload: bytes) -> None:
        size = len(payload)
        if self._h2.take_plain_data(stream_id, size):
            self._deliver(stream_id, payload, size)
        else:
            self._receive(data_frame(stream_id, payload))

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
        data = held[0] if len(held) == 1 else b"".join(held)
        try:
            stream = self._streams.get(stream_id)
            if stream is not None:
                stream.got_data(data, length)
            else:
                self._events.on_unclaimed_data(stream_id, length)
        except Exception:  # a bug serving one stream must not end the others
            self._events.on_internal_error(stream_id)

    def _whole_frame(self, frame: bytes) -> None:
        """A response's plain HEADERS, or a last DATA frame: taken without h2's
        frame parsing where h2 would do nothing else, else given to h2."""
        stream_id = int.from_bytes(frame[5:9], "big") & 0x7FFFFFFF
        payload = frame[FRAME_HEADER:]
        if frame[3] == HEADERS_TYPE:
            self._release()
            end = bool(frame[4] & 0x1)
            taken = self._h2.take_response_headers(stream_id, payload, end)
            if taken is None:
                self._receive(frame)
            elif taken[0] is None:
                self._tell(taken[1])
            else:
                self._final_response(stream_id, taken[0], end)
            return
        size = len(payload)
        if not self._h2.take_last_data(stream_id, size):
            self._receive(frame)
            return
        self._deliver(stream_id, payload, size)
        self._release()
        try:
            if (stream := self._streams.get(stream_id)) is not None:
                stream.got_end()
        except Exception:
            self._events.on_internal_error(stream_id)

    def _final_response(self, stream_id: int, headers: list[Header], end: bool) -> None:
        """What h2's ResponseReceived (and StreamEnded, with ``end``) would tell."""
        try:
            self._got_response(stream_id, headers, end)
        except Exception:  # a bug serving one stream must not end the others
            self._events.on_internal_error(stream_id)
        if not end:
            return
        try:
            self._got_end(stream_id)
        except Exception:
            self._events.on_internal_error(stream_id)

    def _got_response(self, stream_id: int, headers: list[Header], ended: bool) -> None:
        self.responses += 1
        if (stream := self._streams.get(stream_id)) is not None:
            stream.got_response(headers, ended)

    def _got_end(self, stream_id: int) -> None:
        # Looked up after the response head: telling it may have ended the stream.
        if (stream := self._streams.get(stream_id)) is not None:
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
        elif isinstance(event, h2.events.StreamReset | StreamFault):
            if isinstance(event, StreamFault) or not event.remote_reset:
                self._guard.reset(event.stream_id)  # reset by h2ping: frames may follow
            if (stream := self._streams.get(event.stream_id)) is None:
                return  # forgotten by the connection: h2 has reset it, or will
            if isinstance(event, StreamFault):
                stream.got_fault(event.error, event.detail)
            elif event.remote_reset:
                stream.got_reset(event.error_code)
            else:  # h2 reset it, for what the peer did on it
                stream.got_fault(*self._rules.local_reset(event.error_code))
        elif isinstance(event, h2.events.InformationalResponseReceived):
            self._rules.informational(event.headers)  # charged by its size
            if (stream := self._streams.get(event.stream_id)) is not None:
                stream.got_informational(event.headers)
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            sent = self._rules.settings_changed(event.changed_settings)
            self.heard.settings = {**(self.heard.settings or {}), **sent}
            events.on_settings(
                self._h2.remote_settings.max_concurrent_streams,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE in event.changed_settings,
            )
        elif isinstance(event, h2.events.PingAckReceived):
            events.on_ping_ack(event.ping_data)
        # The rest need nothing of h2ping: h2 answers PINGs and acknowledges
        # SETTINGS itself; response trailers are not forwarded.

    # ------------------------------------------------------------------ outbound

    def start(self, stream_window: int, connection_window: int) -> None:
        """The connection preface, with all our settings in its one SETTINGS frame
        (never h2's defaults first: a server must not see a smaller header list
        limit than we enforce), and the connection window raised at once."""
        self._h2.local_settings = our_settings(self._h2.header_list_limit, stream_window)
        self._h2.initiate_connection()
        if connection_window > DEFAULT_WINDOW:
            self._h2.increment_flow_control_window(connection_window - DEFAULT_WINDOW)

    def next_stream_id(self) -> int:
        return self._h2.get_next_available_stream_id()

    def send_request(self, stream_id: int, headers: list[Header], end_stream: bool) -> None:
        """Open ``stream_id`` with a request's HEADERS."""
        self._h2.send_request(stream_id, headers, end_stream)
        self._guard.opened(stream_id)

    def send_window(self, stream_id: int) -> int:
        """How much request body the peer's windows take on ``stream_id`` now."""
        return self._h2.local_flow_control_window(stream_id)

    @property
    def peer_header_list_limit(self) -> int | None:
        """The peer's SETTINGS_MAX_HEADER_LIST_SIZE as it stands (None: unlimited,
        which is also what it reads before the peer's first SETTINGS)."""
        return self._h2.remote_settings.max_header_list_size

    @property
    def max_frame_size(self) -> int:
        """The largest DATA payload the peer takes in one frame."""
        return self._h2.max_outbound_frame_size

    def send_data(self, stream_id: int, data: bytes | memoryview, end_stream: bool) -> None:
        """Raises h2's ``StreamClosedError`` when the stream is gone."""
        self._h2.send_body(stream_id, data, end_stream)
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
        WINDOW_UPDATE is now due (h2 batches them)."""
        if self._h2.ack_quietly(stream_id, nbytes):
            return False  # no WINDOW_UPDATE due yet: nothing to send
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
        self._over = True
        if self._h2.state_machine.state is h2.connection.ConnectionState.CLOSED:
            return
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._h2.close_connection(error_code=error_code)

    def let_go(self) -> None:
        """The connection ended: tell its :class:`PeerEvents` and its streams
        nothing more, and let go of them (they lead back to the connection, a
        cycle only the cyclic collector would undo), as of h2's own cycle."""
        self._events = _DEAF
        self._streams = {}
        self._h2.let_go()

    def data_to_send(self) -> bytes:
        """Everything queued for the peer since the last call."""
        return self._h2.data_to_send()
