"""What to say about an error the h2 library raised, without repeating its message.

h2's own messages can quote header values (a Set-Cookie, say): these fixed texts
are what logs, ``Proxy-Status`` details and clients see instead.
"""

from __future__ import annotations

import re

import h2.exceptions

#: Fixed texts by exception class (the nearest in its MRO wins).
_H2_ERROR_TEXT: dict[type[Exception], str] = {
    h2.exceptions.InvalidBodyLengthError: "response body does not match its content-length",
    h2.exceptions.FlowControlError: "flow-control window exceeded",
    h2.exceptions.FrameTooLargeError: "frame larger than the advertised maximum",
    h2.exceptions.FrameDataMissingError: "frame shorter than its fixed fields",
    h2.exceptions.DenialOfServiceError: "header list too large to decode",
    h2.exceptions.InvalidSettingsValueError: "invalid SETTINGS value",
    h2.exceptions.StreamIDTooLowError: "stream id lower than one already used",
    h2.exceptions.StreamClosedError: "frame on a closed stream",
}

#: h2 raises a bare ProtocolError for most malformed responses; the start of its
#: message says which, and only these starts are safe to repeat.
_H2_MESSAGE_TEXT: tuple[tuple[str, str], ...] = (
    ("Invalid content-length", "invalid content-length"),
    ("Conflicting content-length", "conflicting content-length headers"),
    ("Trailers must have END_STREAM", "trailers without END_STREAM"),
    ("Cannot set END_STREAM on informational", "informational response with END_STREAM"),
    ("Informational response after final", "informational response after the final one"),
    ("cannot receive data before headers", "DATA before the response headers"),
    ("Too many continuation frames", "header block in more than 64 CONTINUATION frames"),
    ("Invalid frame during header block", "other frame inside a header block"),
    ("Error decoding header block", "undecodable header block (HPACK)"),
    ("Received frame with invalid padding", "invalid padding"),
    ("Received frame with invalid header", "invalid frame header"),
    ("Received frame with non-compliant data", "frame fields out of range"),
    ("Invalid stream ID for peer", "stream id the server may not open"),
    ("Received pushed stream", "PUSH_PROMISE, with push disabled"),
)

#: h2's state machines refuse an input with this message: enum names only, so
#: the input and the state are repeated (they say which frame came when).
_STATE_MACHINE = re.compile(
    r"Invalid input (?:ConnectionInputs|StreamInputs)\.([A-Z_]+) "
    r"in state (?:ConnectionState|StreamState)\.([A-Z_]+)"
)

#: RFC 9113 frame types (and RFC 7838's ALTSVC, RFC 8336's ORIGIN), by number.
FRAME_TYPES = {
    0x0: "DATA",
    0x1: "HEADERS",
    0x2: "PRIORITY",
    0x3: "RST_STREAM",
    0x4: "SETTINGS",
    0x5: "PUSH_PROMISE",
    0x6: "PING",
    0x7: "GOAWAY",
    0x8: "WINDOW_UPDATE",
    0x9: "CONTINUATION",
    0xA: "ALTSVC",
    0xC: "ORIGIN",
}


def describe_frame(frame_type: int, stream_id: int) -> str:
    """``PING frame on stream 0``: a frame, by its header alone."""
    name = FRAME_TYPES.get(frame_type, f"type 0x{frame_type:x}")
    return f"{name} frame on stream {stream_id}"


def describe_h2_error(
    exc: Exception,
    where: str = "malformed frame or header block",
    frame: tuple[int, int] | None = None,
) -> str:
    """A fixed description of an error the h2 library raised, with its class name
    and, when known, the ``frame`` (type, stream id) h2 was handling. The texts
    matched are h2's own (4.1-4.4); where a release words them otherwise,
    ``where`` (what the caller was handling) describes it instead: only the
    description is less precise, never what is done about the error."""
    about = type(exc).__name__
    if frame is not None:
        about += f"; {describe_frame(*frame)}"
    for kind in type(exc).__mro__:
        if kind in _H2_ERROR_TEXT:
            return f"{_H2_ERROR_TEXT[kind]} ({about})"
    message = str(exc)
    for start, text in _H2_MESSAGE_TEXT:
        if message.startswith(start):
            return f"{text} ({about})"
    if (refused := _STATE_MACHINE.match(message)) is not None:
        received, state = refused.groups()
        return f"h2 refused {received} in state {state} ({about})"
    return f"{where} ({about})"
