"""``-log-headers``: what was forwarded, field by field, with credentials masked.

For each request four lines, each naming the request as the other lines of the
log do (``METHOD /path conn=N stream=M``): the client's request as received, the
request as sent upstream (once per attempt), the upstream's response as
received, and the response as sent to the client (the proxy's own ``502``
included). The fields are a JSON list of ``name: value`` strings, in their
order, so a value can hold any byte and still be read back.

Masked, as ``***``: the values of ``Authorization`` and ``Proxy-Authorization``
(their scheme, ``Bearer`` say, is kept), of ``Cookie`` and ``Set-Cookie`` (the
cookies' names and the attributes of ``Set-Cookie`` are kept), of every field
whose name says it holds a secret (:func:`secret_name`: ``x-api-key``,
``api-key``, ``x-auth-token``, ``client-secret``...), and every value of the
query of a request target or ``:path``, the names kept. Nothing else is: the
lines are for finding what a client or a server did, and leave out only what
would let someone reading them act as the client.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from ..fields import Header
from ..http1.messages import Request
from ..logs import HEADERS

log = logging.getLogger(HEADERS)

MASK = "***"

#: Fields whose value is a credential, whatever it looks like.
_CREDENTIALS = frozenset({b"authorization", b"proxy-authorization"})
#: Parts of a field name that say its value is a secret (x-api-key, api-key,
#: apikey, x-auth-token, x-amz-security-token, client-secret, x-session-id...).
_SECRET_NAME = re.compile(
    rb"key|token|secret|passw|auth|session|credential|signature|cookie", re.IGNORECASE
)
#: An authentication scheme (RFC 9110 section 11.1), kept in front of the mask.
_SCHEME = re.compile(rb"[A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]{0,31}")


def secret_name(name: bytes) -> bool:
    """Whether a field named ``name`` (lowercase) carries a secret by its name."""
    return name in _CREDENTIALS or _SECRET_NAME.search(name) is not None


def masked_value(name: bytes, value: bytes) -> str:
    """``value`` of the field ``name`` as the header log shows it."""
    if name in _CREDENTIALS:
        scheme, space, _ = value.partition(b" ")
        kept = scheme.decode("latin-1") + " " if space and _SCHEME.fullmatch(scheme) else ""
        return kept + MASK
    if name == b"cookie":
        return "; ".join(_cookie(pair) for pair in value.split(b";"))
    if name == b"set-cookie":
        first, sep, attributes = value.partition(b";")
        return _cookie(first) + (sep + attributes).decode("latin-1")
    if name[:1] == b":":  # a pseudo-header: its name says nothing of its value
        return masked_target(value) if name == b":path" else value.decode("latin-1")
    if secret_name(name):
        return MASK
    return value.decode("latin-1")


def _cookie(pair: bytes) -> str:
    name, equals, _ = pair.strip().partition(b"=")
    return name.decode("latin-1") + "=" + MASK if equals else MASK


def masked_target(target: bytes) -> str:
    """A request target or ``:path`` with every query value masked, the names kept."""
    path, question, query = target.partition(b"?")
    if not question:
        return target.decode("latin-1")
    names = [part.partition(b"=")[0] for part in query.split(b"&")]
    masked = "&".join(name.decode("latin-1") + "=" + MASK if name else MASK for name in names)
    return f"{path.decode('latin-1')}?{masked}"


def _fields(headers: Iterable[Header]) -> str:
    import json  # only with -log-headers: serving alone never loads it

    return json.dumps([f"{name.decode('latin-1')}: {masked_value(name, value)}"
                       for name, value in headers])  # fmt: skip


class HeaderLog:
    """Writes the four lines of each request (see the module); one per proxy."""

    __slots__ = ()

    def client_request(self, where: str, request: Request) -> None:
        line = (
            f"{request.method.decode()} {masked_target(request.target)} HTTP/{request.http_version}"
        )
        log.info("%s: client request as received: %s %s", where, line, _fields(request.headers))

    def upstream_request(self, where: str, fields: Iterable[Header]) -> None:
        log.info("%s: upstream request as sent: %s", where, _fields(fields))

    def upstream_response(self, where: str, headers: Iterable[Header]) -> None:
        log.info("%s: upstream response as received: %s", where, _fields(headers))

    def client_response(self, where: str, status: int, fields: Iterable[Header]) -> None:
        log.info("%s: client response as sent: %d %s", where, status, _fields(fields))
