"""HTTP/1.1 <-> HTTP/2 header mapping (RFC 9110 section 7.6.1, RFC 9113 section 8.2).

Headers travel as ``(name, value)`` byte pairs, the form httptools produces and h2
accepts without re-encoding. HTTP/2 names are lowercase; HTTP/1.1 hop-by-hop fields
describe one connection and must not cross the proxy. Everything else, credentials
included, passes byte-for-byte.

A request's head is also held to the header list limit of the connection it is
about to go on, as the peer counts it (RFC 9113 section 6.5.2): many requests
share an upstream connection, and a head over the peer's
SETTINGS_MAX_HEADER_LIST_SIZE makes servers end the whole connection (GOAWAY
ENHANCE_YOUR_CALM), failing the other requests on it. One over it is answered 431
here, sent nowhere, never replayed. The connection says what its limit is; this
decides.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hpack import NeverIndexedHeaderTuple

from .. import errors
from ..config import Upstream
from ..errors import UpstreamError
from ..fields import Header
from ..http2.streams import PROVISIONAL_HEADER_LIST

#: Fields that only describe the client's HTTP/1.1 connection (RFC 9110 7.6.1,
#: RFC 9113 8.2.2). ``host`` becomes ``:authority``; ``expect`` is answered by the
#: listener itself; ``http2-settings`` only exists for the h2c upgrade dance.
HOP_BY_HOP: frozenset[bytes] = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
        b"te",
        b"host",
        b"expect",
        b"http2-settings",
    }
)

#: Kept out of HPACK's dynamic table so compression cannot reveal them (as h2 and
#: nghttp2 do): credentials, and cookies short enough to guess.
_NEVER_INDEXED: frozenset[bytes] = frozenset({b"authorization", b"proxy-authorization"})
_SHORT_COOKIE = 20

#: Response fields HTTP/2 forbids (RFC 9113 8.2.2).
_RESPONSE_CONNECTION_FIELDS: frozenset[bytes] = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"te"}
)


def _connection_tokens(headers: Iterable[Header]) -> set[bytes]:
    """Names listed in ``Connection``: also hop-by-hop for this message."""
    tokens: set[bytes] = set()
    for name, value in headers:
        if name == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return tokens


def request_path(
    target: bytes, prefix: bytes = b"", base_query: bytes = b"", *, options: bool = False
) -> bytes:
    """The ``:path`` for a request target, joined to the upstream's base path and query
    as Go's ``httputil.ProxyRequest.SetURL`` joins them: ``prefix`` (the base path
    without its trailing slash) goes before the path, ``base_query`` before the query,
    with ``&`` between them when both are non-empty.

    Absolute-form keeps only path and query, because the request always goes to the
    configured upstream, never to the host in the URL. ``*`` (``OPTIONS *``, the
    server as a whole) names no resource that a base path could narrow, and takes
    no query: it stays ``*`` (RFC 9113 section 8.3.1). So does an ``OPTIONS``
    (``options``) in absolute-form without path or query (RFC 9112 section 3.2.4).
    """
    if target[:1] == b"/":
        if not prefix and not base_query:
            return target  # the common case: nothing to join
    elif target == b"*":
        return target
    elif (scheme_end := target.find(b"://")) >= 0:
        rest = target[scheme_end + 3 :]
        path_start = rest.find(b"/")
        query_start = rest.find(b"?")
        if path_start < 0 or (0 <= query_start < path_start):
            if options and query_start < 0:
                return b"*"
            target = rest[query_start:] if query_start >= 0 else b""
        else:
            target = rest[path_start:]
    path, has_query, query = target.partition(b"?")
    path = prefix + path if path[:1] == b"/" else prefix + b"/" + path
    if base_query:
        query = base_query + b"&" + query if query else base_query
        has_query = b"?"
    return path + has_query + query


def request_headers(
    method: bytes, target: bytes, headers: list[Header], upstream: Upstream
) -> list[Header]:
    """Map a parsed HTTP/1.1 request head to an HTTP/2 header list. Field names
    come lowercased from the listener.

    The result is sent without h2's own validation and normalization (they cost a
    large share of the CPU per request), so it must already be what they would
    produce: names lowercase tokens (llhttp has checked the token syntax), values
    free of CR, LF and NUL (also llhttp's check) and of surrounding whitespace,
    no connection-specific fields, credentials marked never-indexed.
    """
    dropped = _connection_tokens(headers)
    out: list[Header] = [
        (b":method", method),
        (b":scheme", upstream.scheme_bytes),
        (b":authority", upstream.authority_bytes),
        (
            b":path",
            request_path(
                target, upstream.path_prefix, upstream.query_bytes, options=method == b"OPTIONS"
            ),
        ),
    ]
    for name, value in headers:
        if name == b"te":
            # The only TE an HTTP/2 request may carry (RFC 9113 8.2.2).
            if b"trailers" in (t.strip().lower() for t in value.split(b",")):
                out.append((b"te", b"trailers"))
            continue
        if name in HOP_BY_HOP or name in dropped:
            continue
        # llhttp drops leading whitespace but keeps trailing (RFC 9110 5.5: not
        # part of the value).
        value = value.rstrip(b" \t")
        if name in _NEVER_INDEXED or (name == b"cookie" and len(value) < _SHORT_COOKIE):
            out.append(NeverIndexedHeaderTuple(name, value))
        else:
            out.append((name, value))
    return out


#: The status of a head over the upstream's limit (RFC 6585 section 5).
HEAD_TOO_LARGE = 431


def goes_early(size: int, replays: int) -> bool:
    """Whether a head of ``size`` may go on a connection whose peer has not said
    its limit yet (right behind the preface): only a head any server takes, and
    only on a first try (a request refused once waits for the peer's figure)."""
    return size <= PROVISIONAL_HEADER_LIST and not replays


def head_refusal(size: int, limit: int | None) -> UpstreamError | None:
    """Why a head of ``size`` may not go where the peer's limit is ``limit``
    (None: no limit), or None when it fits."""
    if limit is None or size <= limit:
        return None
    return UpstreamError(
        errors.HTTP_REQUEST_ERROR,
        f"request header section of {size} bytes (as HTTP/2 counts it) is over the "
        f"upstream's limit of {limit} (SETTINGS_MAX_HEADER_LIST_SIZE)",
        status=HEAD_TOO_LARGE,
    )


class MalformedResponse(ValueError):
    """The upstream's header block breaks RFC 9113 8.3. The message never quotes
    the offending bytes: they may be a cookie."""


# A lowercase token (RFC 9110 5.1; HTTP/2 forbids uppercase, RFC 9113 8.2.1).
_LOWERCASE_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9a-z]+")
# Controls other than HTAB (CR and LF would split the HTTP/1.1 response), or
# surrounding whitespace (RFC 9113 8.2.1).
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]|\A[ \t]|[ \t]\Z")


#: Response fields already found valid (most repeat, byte for byte, in every
#: response); emptied when full, so that a server inventing fields cannot grow it.
#: Only fields of these names are kept: they carry no credentials (a
#: ``set-cookie`` value, say, is checked each time and kept nowhere).
CHECKED_FIELDS = 1024
KEPT_NAMES = frozenset(
    {
        b"accept-ranges", b"access-control-allow-origin", b"age", b"cache-control",
        b"content-encoding", b"content-language", b"content-length", b"content-type",
        b"date", b"etag", b"expires", b"last-modified", b"server",
        b"strict-transport-security", b"vary", b"via", b"x-content-type-options",
    }
)  # fmt: skip
_CHECKED_FIELDS: set[Header] = set()


def _check_field(field: Header) -> None:
    """Raise :class:`MalformedResponse` unless ``field`` may cross to HTTP/1.1."""
    name, value = field
    if not _LOWERCASE_TOKEN.fullmatch(name):
        raise MalformedResponse("header name that is not a lowercase token")
    if _BAD_VALUE.search(value):
        raise MalformedResponse("control character or surrounding space in a header value")
    if name in _RESPONSE_CONNECTION_FIELDS:
        raise MalformedResponse("connection-specific header field")
    if name == b"content-length" and not value.isdigit():
        # It frames the HTTP/1.1 response: one valid value, or none at all.
        raise MalformedResponse("invalid content-length")
    if name in KEPT_NAMES:
        if len(_CHECKED_FIELDS) >= CHECKED_FIELDS:
            _CHECKED_FIELDS.clear()
        _CHECKED_FIELDS.add(field)


def response_head(headers: Iterable[Header]) -> tuple[int, list[Header]]:
    """Check an HTTP/2 response header block and split it into status and
    HTTP/1.1 fields, in one pass (h2's own inbound validation is off: slower,
    and it fails the whole connection instead of the one stream)."""
    status = 0
    length: bytes | None = None
    out: list[Header] = []
    for field in headers:
        name, value = field
        if name[:1] == b":":
            if name != b":status" or status or out:
                raise MalformedResponse("unknown, repeated or misplaced pseudo-header")
            # Three digits, 100 to 599 (RFC 9110 section 15): anything else has
            # no HTTP/1.1 status line to become.
            if len(value) != 3 or not value.isdigit() or not b"100" <= value <= b"599":
                raise MalformedResponse("invalid :status")
            status = int(value)
            continue
        if field not in _CHECKED_FIELDS:
            _check_field(field)
        if name == b"content-length":
            if length is not None:
                if value != length:
                    raise MalformedResponse("conflicting content-length headers")
                continue  # the same value again (RFC 9110 8.6): pass it on once
            length = value
        out.append(field)
    if not status:
        raise MalformedResponse("no :status")
    return status, out
