"""What to say about an error the h2 library raised, without repeating its message.

h2's own messages can quote header values (a Set-Cookie, say): these fixed texts
are what logs, ``Proxy-Status`` details and clients see instead.
"""

from __future__ import annotations

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
)


def describe_h2_error(exc: Exception, where: str = "malformed frame or header block") -> str:
    """A fixed description of an error the h2 library raised, with its class name.
    The texts matched are h2's own (4.1-4.4); where a release words them
    otherwise, ``where`` (what the caller was handling) describes it instead:
    only the description is less precise, never what is done about the error."""
    for kind in type(exc).__mro__:
        if kind in _H2_ERROR_TEXT:
            return f"{_H2_ERROR_TEXT[kind]} ({type(exc).__name__})"
    message = str(exc)
    for start, text in _H2_MESSAGE_TEXT:
        if message.startswith(start):
            return f"{text} ({type(exc).__name__})"
    return f"{where} ({type(exc).__name__})"
