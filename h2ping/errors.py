"""Why a request could not be forwarded, in the words of RFC 9209 (Proxy-Status).

The HTTP/2 side raises these; the exchange turns them into a 502 with a
``Proxy-Status`` header, or into an aborted client connection when the response
has already started.
"""

from __future__ import annotations

from .config import HostPort


class ListenError(OSError):
    """A listening address could not be bound; ``address`` says which one it was."""

    def __init__(self, address: HostPort, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.address = address


class BindError(ListenError):
    """The proxy's listen address could not be bound."""


class AdminListenError(ListenError):
    """The admin address could not be bound (told apart from :class:`BindError`:
    a launcher's hint about ``-listen`` would mislead)."""


class AccessLogError(OSError):
    """The access log could not be opened; ``path`` says which one it was."""

    def __init__(self, path: str, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.path = path


class UpstreamError(Exception):
    """A failure on the upstream side.

    ``error`` is an RFC 9209 error type (section 2.3), ``detail`` a short plain text
    for logs and the ``details`` parameter. ``retryable`` marks failures where the
    upstream certainly did not process the request (GOAWAY above last_stream_id,
    REFUSED_STREAM): only those may be replayed. ``conn_id`` names the connection
    that failed when the request never got onto it (a failed connect), for logs.
    ``reset_code`` is the RST_STREAM error code when the upstream reset the stream.
    ``suspect`` marks a retryable refusal that may be for the request itself (the
    first stream a GOAWAY with an error code left unprocessed): it gets one more
    try, not a series of them, each costing a connection. ``status`` is what the
    client is answered: 502, or a 4xx when the proxy refuses the request itself
    (a head over the upstream's header list limit: 431).
    ``next_hop`` names the forward proxy (``host:port``) when the failure is the
    proxy's, and ``received_status`` is the status it answered ``CONNECT`` with:
    ``Proxy-Status`` carries both (RFC 9209 sections 2.1.2 and 2.1.4).
    """

    def __init__(
        self,
        error: str,
        detail: str,
        *,
        retryable: bool = False,
        conn_id: int = 0,
        reset_code: int | None = None,
        suspect: bool = False,
        status: int = 502,
        next_hop: str | None = None,
        received_status: int | None = None,
    ) -> None:
        super().__init__(f"{error}: {detail}")
        self.error = error
        self.detail = detail
        self.retryable = retryable
        self.conn_id = conn_id
        self.reset_code = reset_code
        self.suspect = suspect
        self.status = status
        self.next_hop = next_hop
        self.received_status = received_status


# RFC 9209 section 2.3 error types used by h2ping.
DNS_ERROR = "dns_error"
DESTINATION_UNAVAILABLE = "destination_unavailable"
CONNECTION_REFUSED = "connection_refused"
CONNECTION_TIMEOUT = "connection_timeout"
#: No file descriptor was free for a new upstream connection.
CONNECTION_LIMIT_REACHED = "connection_limit_reached"
CONNECTION_TERMINATED = "connection_terminated"
TLS_PROTOCOL_ERROR = "tls_protocol_error"
TLS_CERTIFICATE_ERROR = "tls_certificate_error"
HTTP_PROTOCOL_ERROR = "http_protocol_error"
#: The request cannot go to the next hop as it is (its head is over the
#: upstream's header list limit).
HTTP_REQUEST_ERROR = "http_request_error"
#: The forward proxy refused to open the tunnel (403 and the like to CONNECT).
HTTP_REQUEST_DENIED = "http_request_denied"
#: h2ping's own settings do not suit the forward proxy (407: credentials wanted).
PROXY_CONFIGURATION_ERROR = "proxy_configuration_error"
HTTP_RESPONSE_HEADER_SECTION_SIZE = "http_response_header_section_size"
HTTP_RESPONSE_TRAILER_SECTION_SIZE = "http_response_trailer_section_size"
PROXY_INTERNAL_ERROR = "proxy_internal_error"
