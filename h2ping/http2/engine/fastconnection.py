"""The fast layer's h2 connection: h2's own, with one stream's fault failing that
stream only, and fast paths for the frames every request and response has.

The plain engine (:mod:`.plain`) drives ``h2.connection.H2Connection`` on its
documented API; the fast engine (:mod:`.fast`) drives this subclass, which
reaches into h2's private parts for two things.

One stream's fault fails that stream only (the ``stream_faults`` path). h2
raises a ``ProtocolError`` for faults that RFC 9113 makes stream errors, and
any ``ProtocolError`` ends its whole connection, failing every neighbour of the
faulty stream. Here those faults reset their stream alone and become a
:class:`StreamFault` event:

- a malformed response (RFC 9113 8.1.1): DATA beyond or short of its
  ``content-length``, an invalid or repeated ``content-length``, DATA before the
  response headers, trailers without END_STREAM, an informational response with
  END_STREAM or after the final one;
- a header list over our SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 10.5.1). h2
  refuses it while decoding, which leaves HPACK state unusable; instead the
  header block is decoded whole, up to a hard ceiling, and the limit is checked
  per stream afterwards, so the connection's HPACK state stays in sync (4.3);
- HEADERS on a stream that already ended (RFC 9113 5.1 allows a stream error).

Faults of the connection itself stay connection errors: HPACK decoding errors, a
header list over the ceiling (an HPACK bomb), flow-control violations, frames
on streams never opened, and everything h2 raises outside one stream.

And the frames every request and response has skip h2's per-frame parsing,
dispatch and event objects: each fast path does the bookkeeping h2 would
(stream states, flow-control windows, the content-length count) only where h2
would do nothing else, and declines everything else, which the caller then
hands to h2.

All of this reaches into h2's private parts, grouped into the fast paths that
:mod:`.manifest` lists name by name, each on only where its probe passed in
this process (:mod:`.fastpaths`):

- ``receive``: :meth:`FastConnection._handle_frame`, h2's ``_receive_frame``
  without its trace formatting; off, h2's own ``_receive_frame`` runs.
- ``data``: ``take_data``, ``take_last_data``, ``ack_quietly`` and
  ``ack_taken`` (for a stream ``take_data`` returned); off, the first three
  decline and h2 takes every frame.
- ``stream_faults``: the ``_receive_frame`` and ``_begin_new_stream`` overrides,
  the ``__class__`` swap to :class:`_Stream`, and closing a stream by writing
  its state machine; off, those faults end the connection as plain h2 has it,
  and h2's decoder enforces the header list limit.
- ``hpack``: :class:`.hpackdecode.FieldCachingDecoder` as h2's decoder.
- ``request_headers``: :meth:`FastConnection.send_request` frames a request's
  HEADERS itself, its block from :mod:`.hpackencode`, making the state changes
  h2's ``send_headers`` would, and forgetting closed streams
  (``open_outbound_streams``) only now and then instead of on every request;
  off, h2's ``send_headers`` and hpack's encoder do it all. What a new stream
  takes from h2's settings is read once between SETTINGS frames, which the
  ``_receive_frame`` override sees.
- ``response_headers``: :meth:`FastConnection.take_response_headers` takes a
  response's first header block, in one unpadded HEADERS frame, without
  hyperframe's frame objects and h2's frame dispatch, doing the rest as h2's
  ``_receive_headers_frame`` and ``receive_data`` do; with ``stream_faults`` its
  streams are :class:`_UncheckedStream`; off, h2 takes every HEADERS frame.

Whatever paths are on, it also caps hpack's encoder table (:mod:`.hpackencode`),
says which frame h2 refused for the whole connection (``fault_frame``), names
an undecodable header block a COMPRESSION_ERROR, and undoes h2's own reference
cycle at the connection's end (``let_go``).

tests/integration/test_stream_faults.py covers each fault; the engine's differential tests
hold the fast paths to what the plain engine does, event for event and byte for byte.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any, cast

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.stream
import hpack
from h2.errors import ErrorCodes
from hyperframe.frame import (
    DataFrame,
    Frame,
    HeadersFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from ... import errors
from ...fields import Header
from .errortext import describe_h2_error
from .hpackdecode import FieldCachingDecoder
from .hpackencode import CappedEncoder, RequestBlockEncoder
from .manifest import (
    DATA,
    FAST_PATHS,
    HPACK,
    RECEIVE,
    REQUEST_DATA,
    REQUEST_HEADERS,
    RESPONSE_HEADERS,
    STREAM_FAULTS,
    lookup,
)
from .peerrules import header_list_size
from .plain import H2_CONFIG

#: A header list up to this much above our limit is still decoded (so only its
#: stream fails); beyond it decoding costs too much, and the connection ends.
#: Only HPACK's indexed fields can get there: h2 takes a header block in at most
#: 64 frames of 16 KiB, and literal fields decode to about their encoded size.
DECODE_HEADROOM = 4 * 1024 * 1024

# h2's undocumented enums, looked up so that a release without one still
# imports: the manifest's check then turns the paths using it off.
_CLIENT_OPEN = lookup("h2.connection.ConnectionState.CLIENT_OPEN")
#: Connection states in which a request's HEADERS are framed by h2ping (the
#: first request moves the connection from IDLE to CLIENT_OPEN).
_SENDING = (lookup("h2.connection.ConnectionState.IDLE"), _CLIENT_OPEN)
#: Stream states in which a response's DATA is taken (ours is the client side).
_RECEIVING = (
    lookup("h2.stream.StreamState.OPEN"),
    lookup("h2.stream.StreamState.HALF_CLOSED_LOCAL"),
)
_CLOSED = lookup("h2.stream.StreamState.CLOSED")
#: Stream states in which a request's body may still be sent.
_BODY_SENDING = (
    lookup("h2.stream.StreamState.OPEN"),
    lookup("h2.stream.StreamState.HALF_CLOSED_REMOTE"),
)
_IDLE = _SENDING[0]
_OPEN, _HALF_CLOSED_LOCAL = _RECEIVING
_HALF_CLOSED_REMOTE = lookup("h2.stream.StreamState.HALF_CLOSED_REMOTE")
_SEND_HEADERS = lookup("h2.connection.ConnectionInputs.SEND_HEADERS")
_STREAM_SEND_END = lookup("h2.stream.StreamInputs.SEND_END_STREAM")
_RECV_HEADERS = lookup("h2.connection.ConnectionInputs.RECV_HEADERS")
_CLOSED_BY_RESET = lookup("h2.stream.StreamClosedBy.SEND_RST_STREAM")
_CLOSED_BY_END = lookup("h2.stream.StreamClosedBy.RECV_END_STREAM")
#: A stream's state once its response ends (RECV_END_STREAM), by its state
#: before, as h2's stream state machine has it: the request's END_STREAM sent
#: or not. The fast paths make this move, and those of a request sent and a
#: response head received, by writing their outcome; the probes compare every
#: attribute of the streams they leave with plain h2's.
_AFTER_RESPONSE_END = {_OPEN: _HALF_CLOSED_REMOTE, _HALF_CLOSED_LOCAL: _CLOSED}
_DATA_FRAME, _HEADERS_FRAME, _END_STREAM, _END_HEADERS = b"\x00", b"\x01", 0x1, 0x4
#: h2 forgets closed streams whenever it counts open ones, on every request it
#: sends; the fast path counts (and forgets) once its table has doubled.
_FORGET_FLOOR = 32


def _copies_inbound_frame_size() -> bool:
    """Whether h2 gives a new stream the connection's max_inbound_frame_size
    (h2 before 4.2 does; later releases keep it on the connection alone)."""
    try:
        conn = h2.connection.H2Connection(H2_CONFIG)
        stream = conn._begin_new_stream(1, lookup("h2.connection.AllowedStreamIDs.ODD"))
        return "max_inbound_frame_size" in vars(stream)
    except Exception:  # a changed h2: the request_headers probe judges the path
        return False


#: What _begin_new_stream does here, request_headers does too.
_COPIES_INBOUND_FRAME_SIZE = _copies_inbound_frame_size()


def _response_ended(machine: Any) -> None:
    """RECV_END_STREAM on a receiving stream (OPEN or HALF_CLOSED_LOCAL), as
    h2's state machine makes it, without the StreamEnded event nobody reads."""
    state = _AFTER_RESPONSE_END[machine.state]
    machine.state = state
    if state is _CLOSED:
        machine.stream_closed_by = _CLOSED_BY_END  # stream_ended


#: What h2 raises a header block's decoding failure from (its _decode_headers).
_DECODING_FAILURES = (hpack.HPACKError, IndexError, TypeError, UnicodeDecodeError)


def _compression_error(exc: h2.exceptions.ProtocolError) -> None:
    """A header block that fails to decode is a connection error of type
    COMPRESSION_ERROR (RFC 9113 4.3), a table size update over our limit among
    them (RFC 7541 4.2); h2 says PROTOCOL_ERROR. Its GOAWAY takes the code given
    here. (An oversized header list stays h2's ENHANCE_YOUR_CALM.)"""
    # h2 raises it ``from`` the decoder's error; releases before 4.2 inside the
    # ``except`` only, which leaves it as the context.
    cause = exc.__cause__ or exc.__context__
    if type(exc) is h2.exceptions.ProtocolError and isinstance(cause, _DECODING_FAILURES):
        exc.error_code = ErrorCodes.COMPRESSION_ERROR


class StreamFault(h2.events.Event):
    """A stream's response was bad: the stream has been reset with ``error_code``.

    ``error`` is the RFC 9209 error type, ``detail`` a fixed description that
    quotes nothing from the peer."""

    def __init__(self, stream_id: int, error: str, detail: str, error_code: int) -> None:
        self.stream_id = stream_id
        self.error = error
        self.detail = detail
        self.error_code = error_code

    def __repr__(self) -> str:
        return f"<StreamFault stream_id:{self.stream_id}, error:{self.error}>"


class _Fault(Exception):
    """Raised by a stream for a fault of its own; never leaves this module."""

    def __init__(self, stream_id: int, error: str, detail: str, error_code: int) -> None:
        super().__init__(detail)
        self.event = StreamFault(stream_id, error, detail, error_code)


if TYPE_CHECKING:
    _H2Stream = h2.stream.H2Stream
else:  # a release without it still imports: stream_faults is then off
    _H2Stream = getattr(h2.stream, "H2Stream", object)


class _ResetEarlier(Exception):
    """A header block on a stream h2ping reset: nothing to do, nothing to answer
    (see :meth:`_Stream.receive_headers`, :meth:`FastConnection._begin_new_stream`)."""


class _Stream(_H2Stream):
    """An h2 stream whose own faults are raised as :class:`_Fault`."""

    header_list_limit = getattr(h2.connection.H2Connection, "DEFAULT_MAX_HEADER_LIST_SIZE", 65536)

    def receive_headers(
        self,
        headers: Iterable[tuple[bytes, bytes]],
        end_stream: bool,
        header_encoding: bool | str | None,
    ) -> Any:
        if self.state_machine.state is _CLOSED:
            if self.state_machine.stream_closed_by is _CLOSED_BY_RESET:
                # Reset by h2ping: the block was decoded (HPACK is in sync) and is
                # discarded unanswered (RFC 9113 5.1), as DATA is (see
                # FastConnection._handle_data_on_closed_stream). Raised, not
                # returned empty: h2 would go on to the block's PRIORITY, which
                # expects this call's event.
                raise _ResetEarlier(self.stream_id)
            # h2 refuses a header block on a stream it has forgotten with
            # StreamClosedError, and an informational one on a closed stream it
            # still holds with ProtocolError. The request_headers path forgets
            # closed streams later than h2 would: all are refused the first way.
            raise h2.exceptions.StreamClosedError(self.stream_id)
        size = header_list_size(cast("list[Header]", headers))  # h2 decoded the whole block
        if size > self.header_list_limit:
            trailers = self.state_machine.headers_received
            error = (
                errors.HTTP_RESPONSE_TRAILER_SECTION_SIZE
                if trailers
                else errors.HTTP_RESPONSE_HEADER_SECTION_SIZE
            )
            detail = (
                f"{'trailer' if trailers else 'response header'} list of {size} bytes, "
                f"over the limit of {self.header_list_limit} (max-response-header-bytes)"
            )
            raise _Fault(self.stream_id, error, detail, ErrorCodes.CANCEL)
        try:
            return super().receive_headers(headers, end_stream, header_encoding)
        except h2.exceptions.StreamClosedError:
            raise  # h2 resets the stream itself, or makes it a connection error
        except h2.exceptions.ProtocolError as exc:
            raise self._malformed(exc, "bad response header block") from exc

    def receive_data(self, data: bytes, end_stream: bool, flow_control_len: int) -> Any:
        try:
            return super().receive_data(data, end_stream, flow_control_len)
        except (h2.exceptions.StreamClosedError, h2.exceptions.FlowControlError):
            raise  # flow control is the connection's business, as in Go's transport
        except h2.exceptions.ProtocolError as exc:
            raise self._malformed(exc, "bad response DATA") from exc

    def _malformed(self, exc: Exception, where: str) -> _Fault:
        detail = f"malformed response: {describe_h2_error(exc, where)}"
        return _Fault(self.stream_id, errors.HTTP_PROTOCOL_ERROR, detail, ErrorCodes.PROTOCOL_ERROR)


class _UncheckedStream(_Stream):
    """A :class:`_Stream` skipping the steps of h2's header handling that do
    nothing under :data:`H2_CONFIG` (validation and normalization off, no header
    encoding): building the validation flags and filtering the list through
    them, which cost a few percent of a small request's CPU in h2's
    configuration lookups. Part of the ``response_headers`` path."""

    def _build_hdr_validation_flags(self, events: Any) -> Any:
        return None  # read only by validation and normalization, both off

    def _process_received_headers(
        self, headers: Iterable[tuple[bytes, bytes]], flags: Any, header_encoding: Any
    ) -> list[tuple[bytes, bytes]]:
        return list(headers)


def _unchecked(config: h2.config.H2Configuration) -> bool:
    """Whether h2's header checks and conversions are all off in ``config``."""
    return not (
        config.validate_inbound_headers
        or config.normalize_inbound_headers
        or config.validate_outbound_headers
        or config.normalize_outbound_headers
        or config.header_encoding
    )


class FastConnection(h2.connection.H2Connection):
    """A client connection enforcing ``header_list_limit`` per stream, taking the
    fast paths named in ``fast`` (the probes of :mod:`.fastpaths` choose)."""

    def __init__(
        self,
        config: h2.config.H2Configuration,
        header_list_limit: int,
        fast: Collection[str] = FAST_PATHS,
    ) -> None:
        super().__init__(config=config)
        # hpack's encoder would let its table grow to whatever the peer allows
        # (up to 4 GiB); h2ping's request blocks leave it alone anyway.
        self.encoder = CappedEncoder()
        self._fast_receive = RECEIVE in fast
        self._fast_data = DATA in fast
        self._stream_faults = STREAM_FAULTS in fast
        self._fast_headers = REQUEST_HEADERS in fast
        self._fast_body = REQUEST_DATA in fast
        self._fast_responses = RESPONSE_HEADERS in fast
        self._stream_class = (
            _UncheckedStream if self._fast_responses and _unchecked(config) else _Stream
        )
        #: What request_headers makes a stream of: what _begin_new_stream leaves.
        self._new_stream = self._stream_class if self._stream_faults else _H2Stream
        self._forget_at = _FORGET_FLOOR
        # (our initial stream window, the peer's, its stream limit) as h2's
        # settings hold them, read once between SETTINGS frames (see _new_stream_settings).
        self._settings_now: tuple[int, int, int] | None = None
        self._request_blocks = RequestBlockEncoder()
        if HPACK in fast:
            self.decoder = FieldCachingDecoder()  # before any header block: a fresh state
        self.header_list_limit = header_list_limit
        #: (type, stream id) of the frame h2 refused for the whole connection,
        #: once it did; None before, or when it refused bytes it could not
        #: split into frames.
        self.fault_frame: tuple[int, int] | None = None
        # h2 would lower this to the advertised limit when a SETTINGS frame
        # changing it is acknowledged; ours goes out once, as an initial value
        # (our_settings in plain.py), so this ceiling stays.
        # Without stream faults, h2 enforces the limit while decoding.
        self.decoder.max_header_list_size = header_list_limit + (
            DECODE_HEADROOM if self._stream_faults else 0
        )

    def let_go(self) -> None:
        """The connection is over: undo h2's own reference cycle (its frame
        dispatch table holds bound methods of the connection), so that it is
        freed with its last reference, not by a full pass of the cyclic
        collector. Where a release has no such table, there is nothing to undo."""
        table = getattr(self, "_frame_dispatch_table", None)
        if isinstance(table, dict):
            table.clear()

    def send_request(self, stream_id: int, headers: list[Header], end_stream: bool) -> None:
        """Open ``stream_id`` with a request's HEADERS, as ``send_headers`` does."""
        if not (self._fast_headers and self._send_request_fast(stream_id, headers, end_stream)):
            self.send_headers(stream_id, headers, end_stream=end_stream)

    def _send_request_fast(self, stream_id: int, headers: list[Header], end_stream: bool) -> bool:
        """Frame the request itself where h2 would do nothing else; False with
        nothing changed where it might (h2 then raises, or needs CONTINUATION,
        or a dynamic table size update must lead the block)."""
        if (
            self.state_machine.state not in _SENDING
            or stream_id in self.streams
            or self.encoder.header_table.resized
        ):
            return False
        block = self._request_blocks.encode(headers)
        size = len(block)
        if size > self.max_outbound_frame_size:
            return False
        if stream_id <= self.highest_outbound_stream_id or not stream_id & 1:
            return False  # h2 raises: an id too low, or a server's
        our_window, peer_window, peer_streams = self._settings_now or self._new_stream_settings()
        known = len(self.streams)  # open ones, and closed ones not yet forgotten
        if known >= self._forget_at or known >= peer_streams:
            if self.open_outbound_streams >= peer_streams:
                return False  # h2 raises TooManyStreamsError
            self._forget_at = max(_FORGET_FLOOR, 2 * len(self.streams))
        if self.state_machine.state is _IDLE:  # the first request opens the connection
            self.state_machine.process_input(_SEND_HEADERS)
        # The stream, as h2's _begin_new_stream makes it, and the moves of its
        # state machine that send_headers makes: IDLE to OPEN (request_sent), and
        # on to HALF_CLOSED_LOCAL with END_STREAM.
        stream = self._new_stream(stream_id, self.config, our_window, peer_window)
        stream.max_outbound_frame_size = self.max_outbound_frame_size
        if _COPIES_INBOUND_FRAME_SIZE:
            stream.max_inbound_frame_size = self.max_inbound_frame_size  # type: ignore[attr-defined]
        if self._stream_faults:
            stream.header_list_limit = self.header_list_limit  # type: ignore[attr-defined]
        self.streams[stream_id] = stream
        self.highest_outbound_stream_id = stream_id
        machine = stream.state_machine
        machine.client = True
        machine.headers_sent = True
        flags = _END_HEADERS
        if end_stream:
            machine.state = _HALF_CLOSED_LOCAL
            flags |= _END_STREAM
        else:
            machine.state = _OPEN
        for name, value in headers:
            if name == b":method":
                stream.request_method = value
            elif name == b":authority":
                if stream._authority is None:
                    stream._authority = value
            elif name[:1] != b":":
                break  # pseudo-headers come first
        head = size.to_bytes(3, "big") + _HEADERS_FRAME + bytes((flags,))
        self._data_to_send += head + stream_id.to_bytes(4, "big") + block
        return True

    def _new_stream_settings(self) -> tuple[int, int, int]:
        """What a new stream takes from h2's settings (h2's ``_begin_new_stream``
        and its stream limit read them through a mapping's three calls each), kept
        until the next SETTINGS frame or ACK (:meth:`_receive_frame`): the only
        frames that change them, our SETTINGS going out once, in the preface."""
        local, remote = self.local_settings, self.remote_settings
        now = (
            local.initial_window_size,
            remote.initial_window_size,
            remote.max_concurrent_streams,
        )
        self._settings_now = now
        return now

    def send_body(self, stream_id: int, data: bytes | memoryview, end_stream: bool) -> None:
        """A DATA frame of a request's body on ``stream_id``, as ``send_data`` sends it."""
        if not (self._fast_body and self._send_body_fast(stream_id, data, end_stream)):
            self.send_data(stream_id, data, end_stream=end_stream)

    def _send_body_fast(self, stream_id: int, data: bytes | memoryview, end_stream: bool) -> bool:
        """Frame the DATA itself, with the window and state changes h2's
        ``send_data`` makes, where h2 would do nothing else; False, with nothing
        changed, where it would (raise, mostly): h2 then takes it. The payload
        is copied once, into h2's outbound buffer, where h2 copies it four times
        (into a frame object, its body, the frame, the buffer)."""
        if self.state_machine.state is not _CLIENT_OPEN:
            return False
        stream = self.streams.get(stream_id)
        if stream is None or stream.state_machine.state not in _BODY_SENDING:
            return False
        size = len(data)
        if (
            size > self.max_outbound_frame_size
            or size > self.outbound_flow_control_window
            or size > stream.outbound_flow_control_window
        ):
            return False  # h2 raises FrameTooLargeError or FlowControlError
        flags = b"\x00"
        if end_stream:
            stream.state_machine.process_input(_STREAM_SEND_END)
            flags = b"\x01"
        self.outbound_flow_control_window -= size
        stream.outbound_flow_control_window -= size
        self._data_to_send += (
            size.to_bytes(3, "big") + _DATA_FRAME + flags + stream_id.to_bytes(4, "big")
        )
        self._data_to_send += data
        return True

    def take_outbound(self) -> bytes | bytearray:
        """Everything queued for the peer, as ``data_to_send()`` returns it, but
        without its copy: h2's buffer itself, a new one begun in its place (h2
        only ever appends to its buffer, and nothing writes to the one handed
        out again). A request body goes out as one copy fewer: on an upload,
        that copy was a tenth of the proxy's CPU. h2's own call where the
        request paths are off (the buffer's name missing)."""
        if not self._fast_body:
            return self.data_to_send()
        data = self._data_to_send
        self._data_to_send = bytearray()
        return data

    def take_response_headers(
        self, stream_id: int, block: bytes, end_stream: bool
    ) -> tuple[list[Header] | None, list[h2.events.Event]] | None:
        """Take a response's first header block (one HEADERS frame with
        END_HEADERS, no padding or priority) on ``stream_id`` as h2 would.
        Returns ``(headers, [])`` for a final response with nothing else to say
        (the caller tells the stream its response, and its end with
        ``end_stream``), else ``(None, events)``: h2's events for it. None,
        with nothing changed (the block not decoded), where h2 might do
        otherwise: the caller then gives h2 the frame."""
        if not self._fast_responses or self.state_machine.state is not _CLIENT_OPEN:
            return None
        stream = self.streams.get(stream_id)
        if stream is None:
            return None
        machine = stream.state_machine
        if machine.state not in _RECEIVING or machine.headers_received:
            return None  # trailers, or a stream h2 must refuse
        try:
            headers = cast("list[Header]", h2.connection._decode_headers(self.decoder, block))
            if stream.__class__ is _UncheckedStream and self._final_response(
                stream, headers, end_stream
            ):
                return headers, []
            # (CLIENT_OPEN, RECV_HEADERS) changes nothing; h2 asks all the same.
            events: list[h2.events.Event] = self.state_machine.process_input(_RECV_HEADERS)
            frames, stream_events = stream.receive_headers(
                headers, end_stream, self.config.header_encoding
            )
        except _Fault as fault:
            return None, self._reset_faulty(None, fault.event)
        except h2.exceptions.ProtocolError as exc:
            self.fault_frame = (HeadersFrame.type, stream_id)
            _compression_error(exc)
            self._terminate_connection(exc.error_code)  # as h2's receive_data does
            raise
        if frames:
            self._prepare_for_sending(frames)
        return None, events + stream_events

    def _final_response(
        self, stream: h2.stream.H2Stream, headers: list[Header], end_stream: bool
    ) -> bool:
        """Make the changes h2's ``receive_headers`` makes for a final response
        head within our header list limit and with a valid content-length (if
        any), and say True; else False with nothing changed, and h2's own steps
        follow. The connection's state machine does not move on response HEADERS
        (CLIENT_OPEN stays), and the checks and conversions of _UncheckedStream
        are off: what is left is the stream's state and its content-length."""
        if not headers or headers[0][0] != b":status" or headers[0][1][:1] == b"1":
            return False  # informational (or :status not first): h2 sorts it out
        if header_list_size(headers) > stream.header_list_limit:  # type: ignore[attr-defined]
            return False  # _Stream faults it
        machine = stream.state_machine
        if machine.client is not True:
            return False  # h2 asserts it
        try:
            stream._initialize_content_length(headers)
        except h2.exceptions.ProtocolError:
            return False  # h2 raises it again, and _Stream faults it
        machine.headers_received = True  # response_received
        if end_stream:
            _response_ended(machine)
        return True

    def take_data(self, stream_id: int, size: int, last: bool = False) -> h2.stream.H2Stream | None:
        """Account for a DATA frame without padding of ``size`` bytes on
        ``stream_id`` as h2 would, and return its stream: the caller delivers
        the payload itself, and gives its credit back with :meth:`ack_taken`.
        ``last``: the frame has END_STREAM, and must complete a content-length
        (see :meth:`take_last_data`, which also ends the stream). None, with
        nothing changed, wherever h2 would do more than count (an error, a
        closed or unknown stream, DATA before the response headers): the caller
        then gives h2 the frame."""
        if not self._fast_data or self.state_machine.state is not _CLIENT_OPEN:
            return None
        stream = self.streams.get(stream_id)
        if stream is None:
            return None
        machine = stream.state_machine
        # (Trailers end the stream, or fault it: either way it is not receiving.)
        if machine.state not in _RECEIVING or not machine.headers_received:
            return None
        connection_window = self._inbound_flow_control_window_manager
        stream_window = stream._inbound_window_manager
        if size > connection_window.current_window_size or size > stream_window.current_window_size:
            return None  # h2 raises the flow-control error
        expected = stream._expected_content_length
        if expected is not None:
            total = stream._actual_content_length + size
            if total > expected or (last and total != expected):
                return None  # h2 raises: DATA beyond or short of content-length
        connection_window.current_window_size -= size
        stream_window.current_window_size -= size
        stream._actual_content_length += size
        return stream

    def take_last_data(self, stream_id: int, size: int) -> h2.stream.H2Stream | None:
        """As :meth:`take_data`, for a DATA frame with END_STREAM (and no
        padding): also ends the stream's receiving half, as h2 would. The caller
        delivers the payload, then the response's end."""
        stream = self.take_data(stream_id, size, True)
        if stream is not None:
            _response_ended(stream.state_machine)
        return stream

    def ack_quietly(self, stream_id: int, size: int) -> bool:
        """Mark ``size`` received bytes on ``stream_id`` processed, as
        ``acknowledge_received_data`` does, when no window would get a
        WINDOW_UPDATE for it yet; else False with nothing changed (see
        :meth:`ack_taken`)."""
        if not self._fast_data:
            return False
        stream = self.streams.get(stream_id)
        return stream is not None and self.ack_taken(stream, size)

    def ack_taken(self, stream: h2.stream.H2Stream, size: int) -> bool:
        """:meth:`ack_quietly` for a stream :meth:`take_data` returned, without
        looking it up again: the credit of the frames just delivered. h2 sends a
        WINDOW_UPDATE once half a window is processed, or sooner when a window is
        empty; where it would, False with nothing changed. A stream that ended
        has no window of its own left: only the connection's counts, as in h2
        (whether h2 still holds the stream or has forgotten it)."""
        connection = self._inbound_flow_control_window_manager
        if (
            not connection.current_window_size
            or connection._bytes_processed + size >= connection.max_window_size // 2
        ):
            return False
        state = stream.state_machine.state
        if state in _RECEIVING:
            window = stream._inbound_window_manager
            if not window.current_window_size or window._bytes_processed + size >= (
                window.max_window_size // 2
            ):
                return False
            window._bytes_processed += size
        elif state is not _CLOSED:
            return False
        connection._bytes_processed += size
        return True

    def _begin_new_stream(self, stream_id: int, allowed_ids: Any) -> h2.stream.H2Stream:
        if (
            self._stream_faults
            and stream_id <= self.highest_outbound_stream_id  # not a request's new stream
            and self._stream_closed_by(stream_id) is _CLOSED_BY_RESET
        ):
            # HEADERS on a stream h2ping reset and h2 has forgotten (its block is
            # decoded: HPACK is in sync). h2 would answer RST_STREAM; discarded
            # unanswered, as on a reset stream h2 still holds (_Stream). Whether h2
            # still holds it depends on when it last counted its open streams.
            raise _ResetEarlier(stream_id)
        stream = super()._begin_new_stream(stream_id, allowed_ids)
        if not self._stream_faults:
            return stream
        # h2 builds the stream itself; _Stream only adds behaviour, no state.
        stream.__class__ = self._stream_class
        stream.header_list_limit = self.header_list_limit  # type: ignore[attr-defined]
        return stream

    def _receive_frame(self, frame: Frame) -> list[h2.events.Event]:
        if frame.__class__ is SettingsFrame:  # the peer's settings, or its ACK of ours
            self._settings_now = None
        try:
            if self._fast_receive:
                return self._handle_frame(frame)
            return super()._receive_frame(frame)
        except _Fault as fault:
            return self._reset_faulty(frame, fault.event)
        except _ResetEarlier:
            return []
        except h2.exceptions.StreamClosedError:
            if not self._stream_faults or not isinstance(frame, HeadersFrame):
                # A frame on a stream that ended: a connection error (RFC 9113 5.1).
                self.fault_frame = (frame.type or 0, frame.stream_id)
                raise
            # HEADERS on a stream that ended normally: the block was decoded
            # (HPACK is in sync); nothing waits on the stream. Tell the peer.
            self._prepare_for_sending(
                [RstStreamFrame(frame.stream_id, error_code=ErrorCodes.STREAM_CLOSED)]
            )
            return []
        except h2.exceptions.ProtocolError as exc:
            self.fault_frame = (frame.type or 0, frame.stream_id)  # a connection error: say where
            _compression_error(exc)
            raise

    def _handle_frame(self, frame: Frame) -> list[h2.events.Event]:
        """h2's own ``_receive_frame`` without its first step, which formats the
        frame for a trace log that is off: for DATA the whole payload as hex (a
        seventh of the CPU of a download), for HEADERS a few percent of a small
        request's. What follows is h2's, step for step."""
        try:
            frames, events = self._frame_dispatch_table[frame.__class__](frame)
        except h2.exceptions.StreamClosedError as exc:
            # Closed by our RST_STREAM: a stream error, answered with another.
            if not self._stream_is_closed_by_reset(exc.stream_id):
                raise
            self._prepare_for_sending([RstStreamFrame(exc.stream_id, error_code=exc.error_code)])
            return exc._events
        except h2.exceptions.StreamIDTooLowError as exc:
            if self._stream_is_closed_by_reset(exc.stream_id):
                self._prepare_for_sending(
                    [RstStreamFrame(exc.stream_id, error_code=ErrorCodes.STREAM_CLOSED)]
                )
                return []
            if self._stream_is_closed_by_end(exc.stream_id):
                raise h2.exceptions.StreamClosedError(exc.stream_id) from exc
            raise
        self._prepare_for_sending(frames)
        return events

    def _handle_data_on_closed_stream(
        self, events: list[h2.events.Event], exc: h2.exceptions.StreamClosedError, frame: DataFrame
    ) -> tuple[list[Frame], list[h2.events.Event]]:
        """DATA on a closed stream: its connection-window credit goes back, as in
        h2, but on a stream h2ping reset itself it is not answered. What the peer
        sent before it saw our RST_STREAM is discarded (RFC 9113 5.1: "An endpoint
        MUST ignore frames that it receives on closed streams after it has sent a
        RST_STREAM frame"); h2 answers each frame with another RST_STREAM, which
        lets a peer that goes on sending make h2ping write for ever. Part of
        the ``stream_faults`` path: off, h2 answers as it does."""
        frames, events = super()._handle_data_on_closed_stream(events, exc, frame)
        if self._stream_faults and self._stream_closed_by(frame.stream_id) is _CLOSED_BY_RESET:
            frames = [f for f in frames if f.__class__ is not RstStreamFrame]
        return frames, events

    def _reset_faulty(self, frame: Frame | None, event: StreamFault) -> list[h2.events.Event]:
        stream = self.streams.get(event.stream_id)
        if stream is not None:
            # Closed as if we had sent RST_STREAM: h2 then drops (and credits)
            # whatever the peer still sends on it.
            stream.state_machine.state = _CLOSED
            stream.state_machine.stream_closed_by = _CLOSED_BY_RESET
        frames: list[Frame] = [RstStreamFrame(event.stream_id, error_code=event.error_code)]
        if isinstance(frame, DataFrame):
            # Counted against the connection window, and nobody will read it.
            increment = self._inbound_flow_control_window_manager.process_bytes(
                frame.flow_controlled_length
            )
            if increment:
                frames.append(WindowUpdateFrame(0, window_increment=increment))
        self._prepare_for_sending(frames)
        return [event]
