"""Request header blocks that leave HPACK's dynamic table alone.

hpack's encoder indexes every field it may, and looks each one up in the
dynamic table and Huffman-codes it in pure Python, byte by byte: a large share
of a small request's CPU. Here every field is sent as RFC 7541's "literal
without indexing" (or "never indexed" for credentials, or as a static-table
index where the static table has the whole field), naming a static-table entry
where the static table has the name. Such a field means the same whatever
either side's dynamic table holds, and changes neither table, so its bytes can
be kept and reused: a request's header block is mostly a join of kept bytes.
The cost is bytes on the wire: a repeated field is sent in full each time
instead of as one index byte, a few dozen bytes per request.

Each connection keeps its own fields, as an HPACK encoder keeps its table, and
only what such a table would hold: fields marked never-indexed (credentials),
values that change from request to request (``:path``, ``content-length``) and
long values are encoded each time and not kept, without Huffman coding
(Python's Huffman coder would cost more than it saves on them).

Huffman coding of kept fields uses hpack's coder and code table when they are
there (hpack 4.0-4.2), and plain strings otherwise; the ``request_headers``
probe (:mod:`.probes`) decodes blocks from this encoder with hpack's
decoder before the path is taken.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from hpack import Encoder, NeverIndexedHeaderTuple

from ...fields import Header
from .peerrules import ENCODER_TABLE_LIMIT

try:  # hpack's own Huffman coder; without it, strings go uncompressed
    from hpack.huffman import HuffmanEncoder
    from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH

    _huffman: Callable[[bytes], bytes] | None = HuffmanEncoder(
        REQUEST_CODES, REQUEST_CODES_LENGTH
    ).encode
except Exception:  # pragma: no cover - a changed hpack
    _huffman = None


#: RFC 7541 Appendix A, in index order from 1.
STATIC_TABLE: tuple[tuple[bytes, bytes], ...] = tuple(
    (name.encode(), value.encode())
    for name, value in (
        (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"),
        (":path", "/index.html"), (":scheme", "http"), (":scheme", "https"),
        (":status", "200"), (":status", "204"), (":status", "206"), (":status", "304"),
        (":status", "400"), (":status", "404"), (":status", "500"), ("accept-charset", ""),
        ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""),
        ("accept", ""), ("access-control-allow-origin", ""), ("age", ""), ("allow", ""),
        ("authorization", ""), ("cache-control", ""), ("content-disposition", ""),
        ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
        ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""),
        ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""),
        ("if-match", ""), ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""),
        ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""), ("location", ""),
        ("max-forwards", ""), ("proxy-authenticate", ""), ("proxy-authorization", ""),
        ("range", ""), ("referer", ""), ("refresh", ""), ("retry-after", ""), ("server", ""),
        ("set-cookie", ""), ("strict-transport-security", ""), ("transfer-encoding", ""),
        ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""),
    )
)  # fmt: skip
_FULL_INDEX = {field: index for index, field in enumerate(STATIC_TABLE, 1) if field[1]}
_NAME_INDEX: dict[bytes, int] = {}
for _index, (_name, _) in enumerate(STATIC_TABLE, 1):
    _NAME_INDEX.setdefault(_name, _index)

#: Fields whose values differ per request: encoded each time, never kept.
VARYING = frozenset({b":path", b"content-length"})
#: Kept fields, per connection; the store starts again empty when full. With
#: KEPT_VALUE_LIMIT, that bounds it to about 50 KiB per connection.
KEPT_FIELDS = 128
#: A longer value is encoded each time (a large cookie or token is not worth keeping).
KEPT_VALUE_LIMIT = 256

_INDEXED = 0x80  # 6.1: the whole field from the static table
_WITHOUT_INDEXING = 0x00  # 6.2.2
_NEVER_INDEXED = 0x10  # 6.2.3
_HUFFMAN = 0x80


def integer(value: int, prefix_bits: int, first: int) -> bytes:
    """RFC 7541 5.1: ``value`` in a ``prefix_bits`` prefix of a byte starting ``first``."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string(data: bytes, huffman: bool) -> bytes:
    """RFC 7541 5.2: ``data`` with its length, Huffman-coded when that is shorter."""
    if huffman and _huffman is not None:
        coded = _huffman(data)
        if len(coded) < len(data):
            return integer(len(coded), 7, _HUFFMAN) + coded
    return integer(len(data), 7, 0) + data


def field(name: bytes, value: bytes, sensitive: bool, huffman: bool = True) -> bytes:
    """One field's representation, the same bytes on any connection at any time."""
    if not sensitive:
        index = _FULL_INDEX.get((name, value))
        if index is not None:
            return integer(index, 7, _INDEXED)
    first = _NEVER_INDEXED if sensitive else _WITHOUT_INDEXING
    name_index = _NAME_INDEX.get(name)
    if name_index is not None:
        return integer(name_index, 4, first) + string(value, huffman)
    return bytes((first,)) + string(name, huffman) + string(value, huffman)


#: The first bytes of each VARYING field, literal without indexing: its name's
#: index in the static table (4-bit prefix, RFC 7541 6.2.2).
_VARYING_PREFIX = {name: integer(_NAME_INDEX[name], 4, _WITHOUT_INDEXING) for name in VARYING}


def varying(name: bytes, value: bytes) -> bytes:
    """``field(name, value, False, huffman=False)`` for a ``name`` in
    :data:`VARYING`, in a few steps: such fields are encoded on every request."""
    index = _FULL_INDEX.get((name, value))  # (":path", "/"), say
    if index is not None:
        return integer(index, 7, _INDEXED)
    size = len(value)
    if size < 0x7F:  # the length in one byte
        return _VARYING_PREFIX[name] + size.to_bytes(1, "big") + value
    return _VARYING_PREFIX[name] + integer(size, 7, 0) + value


class RequestBlockEncoder:
    """Encodes header lists as blocks that use no dynamic table (see the module)."""

    def __init__(self) -> None:
        self._kept: dict[Header, bytes] = {}

    def encode(self, headers: Iterable[Header]) -> bytes:
        kept = self._kept
        parts = []
        for header in headers:
            if header.__class__ is NeverIndexedHeaderTuple:  # equal to a plain one: not kept
                parts.append(field(header[0], header[1], True, huffman=False))
                continue
            encoded = kept.get(header)
            if encoded is None:
                name, value = header
                if name in VARYING:
                    encoded = varying(name, value)
                elif len(value) > KEPT_VALUE_LIMIT:
                    encoded = field(name, value, False, huffman=False)
                else:
                    encoded = field(name, value, False)
                    if len(kept) >= KEPT_FIELDS:
                        kept.clear()
                    kept[header] = encoded
            parts.append(encoded)
        return b"".join(parts)


class CappedEncoder(Encoder):
    """hpack's encoder (for the blocks h2ping does not frame itself), its dynamic
    table never over :data:`ENCODER_TABLE_LIMIT`: h2 sets ``header_table_size`` to
    what the peer allows, up to 4 GiB, and hpack's encoder indexes every field
    it may until the table is full."""

    @property
    def header_table_size(self) -> int:
        return _table_size().fget(self)  # type: ignore[misc]

    @header_table_size.setter
    def header_table_size(self, value: int) -> None:
        _table_size().fset(self, min(value, ENCODER_TABLE_LIMIT))  # type: ignore[misc]


def _table_size() -> property:
    """hpack's own property (its setter sizes the table and queues the size
    update owed to the peer), looked up when used."""
    return vars(Encoder)["header_table_size"]
