"""How a request that could not be forwarded is told to its client and the log:
a status with a one-line reason and ``Proxy-Status`` (RFC 9209) while none of
the response reached the client, else a cut connection."""

from __future__ import annotations

import logging

from ..errors import UpstreamError
from ..http1.messages import ResponseWriter
from .accounting import Accounting
from .replay import Replay

log = logging.getLogger("h2ping.exchange")

PROXY_NAME = "h2ping"

#: The lines a failed request leaves in the log, each after the request (and
#: where it went).
_ABORTED = "%s: response aborted after headers: %s"
_FAILED = "%s: %d %s"


def proxy_status(error: UpstreamError) -> str:
    """The ``Proxy-Status`` field value (RFC 9209) for an upstream failure."""
    detail = error.detail.replace("\\", "\\\\").replace('"', '\\"')
    detail = "".join(c if " " <= c <= "~" else "?" for c in detail)
    value = f"{PROXY_NAME}; error={error.error}"
    if error.next_hop is not None:  # the forward proxy's failure: it is named
        value += f'; next-hop="{error.next_hop}"'
    if error.received_status is not None:
        value += f"; received-status={error.received_status}"
    return f'{value}; details="{detail}"'


def tell_failure(
    error: UpstreamError, writer: ResponseWriter, account: Accounting, replay: Replay, where: str
) -> tuple[str, int]:
    """Answer ``error.status`` (502, or the 4xx of a request the proxy refuses
    itself) while none of the response reached the client, else cut the
    connection; one log line either way. Returns the outcome and the status the
    client got."""
    if writer.started and writer.retract():
        # Nothing of the response reached the client yet: an error response can stand in.
        account.response_retracted()
    cause = {"cause": error.error}
    if writer.started:
        log.warning(_ABORTED, where, error, extra=cause)
        writer.abort()
        return "aborted", 0
    error = replay.refusal(error)
    status = error.status
    # A request the proxy refuses itself is the client's doing, as the listener's are.
    log.log(
        logging.INFO if status < 500 else logging.WARNING,
        _FAILED,
        where,
        status,
        error,
        extra=cause,
    )
    account.error_response(status)
    writer.send_error(status, f"h2ping: {error}", proxy_status(error))
    # A 4xx is the proxy refusing the request itself, not an upstream failure.
    return ("rejected" if status < 500 else "failed"), status
