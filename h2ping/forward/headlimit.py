"""The upstream's header list limit, applied to one request's head.

Many requests share an upstream connection, and a head over the peer's
SETTINGS_MAX_HEADER_LIST_SIZE makes servers end the whole connection (GOAWAY
ENHANCE_YOUR_CALM), failing the other requests on it. So a head is held to the
limit of the connection it is about to go on, as the peer counts it (RFC 9113
section 6.5.2), and one over it is answered 431 here, sent nowhere, never
replayed. The connection says what its limit is; this decides.
"""

from __future__ import annotations

from .. import errors
from ..errors import UpstreamError
from ..http2.streams import PROVISIONAL_HEADER_LIST

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
