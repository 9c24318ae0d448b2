"""Why a request could not be forwarded, in the words of RFC 9209 (Proxy-Status).

The HTTP/2 side raises these; the exchange turns them into a 502 with a
``Proxy-Status`` header, or into an aborted client connection when the response
has already started.
"""

from __future__ import annotations

import h2.exceptions


class UpstreamError(Exception):
    """A failure on the upstream side.

    ``error`` is an RFC 9209 error type (section 2.3), ``detail`` a short plain text
    for logs and the ``details`` parameter. ``retryable`` marks failures where the
    upstream certainly did not process the request (GOAWAY above last_stream_id,
    REFUSED_STREAM): only those may be replayed. ``conn_id`` names the connection
    that failed when the request never got onto it (a failed connect), for logs.
    """

    def __init__(
        self, error: str, detail: str, *, retryable: bool = False, conn_id: int = 0
    ) -> None:
        super().__init__(f"{error}: {detail}")
        self.error = error
        self.detail = detail
        self.retryable = retryable
        self.conn_id = conn_id


# RFC 9209 section 2.3 error types used by h2ping.
DNS_ERROR = "dns_error"
DESTINATION_UNAVAILABLE = "destination_unavailable"
CONNECTION_REFUSED = "connection_refused"
CONNECTION_TIMEOUT = "connection_timeout"
CONNECTION_TERMINATED = "connection_terminated"
TLS_PROTOCOL_ERROR = "tls_protocol_error"
TLS_CERTIFICATE_ERROR = "tls_certificate_error"
HTTP_PROTOCOL_ERROR = "http_protocol_error"
HTTP_RESPONSE_HEADER_SECTION_SIZE = "http_response_header_section_size"
HTTP_RESPONSE_TRAILER_SECTION_SIZE = "http_response_trailer_section_size"
PROXY_INTERNAL_ERROR = "proxy_internal_error"


#: What to say about an h2 error. Its own message can quote header values (a
#: Set-Cookie, say): never pass that on to logs or clients.
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
