"""An HPACK decoder that remembers the literal fields it has decoded.

Servers send most response fields as literals, every time: nginx sends
``server``, ``date``, ``content-type`` and ``content-length`` as "literal with
incremental indexing" in every response, Huffman-coded, and hpack decodes the
Huffman code in pure Python, byte by byte. Most of those fields repeat from one
response to the next. A literal field whose name is a literal or comes from the
static table decodes the same whatever the dynamic table holds, so its decoding
can be kept, keyed by its encoded bytes; its effect on the dynamic table (an
entry added, for incremental indexing) is still applied each time. Fields that
name a dynamic-table entry, and long ones, are decoded by hpack as usual.

It also decodes a block in a loop of its own when asked for raw bytes (as h2
always asks): a one-byte index is looked up in place, and the fields are
returned as decoded, without hpack's per-field helper calls and copies.

And whole blocks repeat: a server's responses to the same kind of request, in
the same second, carry the same status, server, date, type and length. A block
that names nothing in the dynamic table (static indices, literals with static
or literal names) and changes no table size decodes the same whatever the
table holds, so its fields are kept, keyed by the block, with the entries it
adds to the table (literals with incremental indexing, in order); a repeat adds
them again, one after the other, and decodes nothing.

This overrides hpack's ``Decoder.decode`` and ``Decoder._decode_literal``,
which every literal field goes through (hpack 4.0-4.2), and uses the
decoder's ``_decode_indexed``, ``_update_encoding_context`` and
``_assert_valid_table_size`` and its table's ``get_by_index``,
``dynamic_entries``, ``_current_size`` and ``_maxsize`` (adding entries as
its ``add`` does):
h2ping's ``hpack`` fast path, taken only where its probe
(:func:`.probes.hpack`) passed.
tests/unit/test_hpackdecode.py decodes the same blocks with both and compares
the headers and the dynamic table after each block.
"""

from __future__ import annotations

from typing import Any

import hpack
from hpack import HeaderTuple

#: Fields kept per connection; the store starts again empty when full.
CACHED_FIELDS = 512
#: Whole blocks kept per connection, and the longest kept; as the fields' store.
CACHED_BLOCKS = 32
CACHED_BLOCK_SIZE = 512
_STATIC_ENTRIES = 61  # RFC 7541 Appendix A
_ONE_BYTE_LENGTH = 0x7F  # a string length this size or more takes more bytes
FIELD_OVERHEAD = 32  # RFC 7541 4.1: each field's size counts its name, value and 32


class FieldCachingDecoder(hpack.Decoder):
    """``hpack.Decoder``, decoding each repeated literal field only once."""

    def __init__(self) -> None:
        super().__init__()
        self._fields: dict[bytes, Any] = {}
        # A block's fields, the entries it adds to the table, and its header list size.
        self._blocks: dict[bytes, tuple[list[Any], list[Any], int]] = {}
        self.hits = 0  # fields taken from the store, for tests
        self.block_hits = 0  # blocks taken from the store, for tests

    def decode(self, data: bytes, raw: bool = False) -> Any:
        if not raw:
            return super().decode(data, raw)
        if data.__class__ is not bytes:
            data = bytes(data)
        table = self.header_table
        limit = self.max_header_list_size
        kept = self._blocks.get(data)
        if kept is not None and kept[2] <= limit:  # (else decoded, to fail where hpack does)
            for name, value in kept[1]:
                _index(table, name, value)
            self._assert_valid_table_size()
            self.block_hits += 1
            return kept[0][:]  # the caller's own list
        view = memoryview(data)
        fields = self._fields
        headers: list[Any] = []
        size = pos = 0
        end = len(data)
        header: Any
        # Whether the block can be kept whole (see the module's docstring), and
        # the entries it adds to the table.
        keep = end <= CACHED_BLOCK_SIZE
        added: list[Any] = []
        while pos < end:
            first = data[pos]
            if first & 0x80:
                if first == 0xFF:  # an index of 127 or more: more bytes
                    keep = False
                    header, consumed = self._decode_indexed(view[pos:])
                else:  # raises hpack's InvalidTableIndex as hpack does
                    if first & 0x7F > _STATIC_ENTRIES:
                        keep = False
                    header, consumed = HeaderTuple(*table.get_by_index(first & 0x7F)), 1
            elif first & 0x40 or not first & 0x20:  # a literal field
                indexing = first & 0x40 != 0
                field_end = _field_end(data, pos, indexing)
                header = fields.get(data[pos:field_end]) if field_end else None
                if header is None:
                    if not field_end:  # a dynamic name, or long: decoded by hpack each time
                        keep = False
                    header, consumed = self._decode_literal(view[pos:], indexing)
                else:
                    self.hits += 1
                    if indexing:
                        _index(table, header[0], header[1])
                    consumed = field_end - pos
                if indexing:
                    added.append(header)
            else:
                if headers:
                    raise hpack.HPACKDecodingError(
                        "Table size update not at the start of the block"
                    )
                keep = False
                pos += self._update_encoding_context(view[pos:])
                continue
            if header[0].__class__ is not bytes or header[1].__class__ is not bytes:
                header = header.__class__(bytes(header[0]), bytes(header[1]))  # (older hpack)
            headers.append(header)
            size += len(header[0]) + len(header[1]) + FIELD_OVERHEAD
            if size > limit:
                raise hpack.OversizedHeaderListError(
                    f"A header list larger than {limit} has been received"
                )
            pos += consumed
        self._assert_valid_table_size()
        if keep:
            blocks = self._blocks
            if len(blocks) >= CACHED_BLOCKS:
                blocks.clear()
            blocks[data] = (headers[:], added, size)
        return headers

    def _decode_literal(self, data: bytes | memoryview, should_index: bool) -> tuple[Any, int]:
        end = _field_end(data, 0, should_index)
        if end == 0:
            return super()._decode_literal(data, should_index)
        key = bytes(data[:end])
        header = self._fields.get(key)
        if header is None:
            header, consumed = super()._decode_literal(data, should_index)
            if header[0].__class__ is not bytes or header[1].__class__ is not bytes:
                header = header.__class__(bytes(header[0]), bytes(header[1]))  # (older hpack)
            if len(self._fields) >= CACHED_FIELDS:
                self._fields.clear()
            self._fields[key] = header
            return header, consumed
        self.hits += 1
        if should_index:
            _index(self.header_table, header[0], header[1])
        return header, end


def _index(table: Any, name: bytes, value: bytes) -> None:
    """Add a field to the dynamic table as hpack's ``HeaderTable.add`` does,
    evicting the oldest entries to make room, without its per-entry helper calls
    and debug log calls (a third of a cached field's cost)."""
    size = len(name) + len(value) + FIELD_OVERHEAD
    limit = table._maxsize
    entries = table.dynamic_entries
    if size > limit:  # larger than the table: it empties it (RFC 7541 4.4)
        entries.clear()
        table._current_size = 0
        return
    entries.appendleft((name, value))
    current = table._current_size + size
    while current > limit:
        old_name, old_value = entries.pop()
        current -= len(old_name) + len(old_value) + FIELD_OVERHEAD
    table._current_size = current


def _field_end(data: bytes | memoryview, start: int, should_index: bool) -> int:
    """Where the literal field at ``start`` in ``data`` ends, if it can be kept:
    its name a literal or a static-table entry, both lengths in one byte. 0
    otherwise (then hpack decodes it, and reports errors)."""
    prefix = 0x3F if should_index else 0x0F
    name_index = data[start] & prefix
    if name_index == prefix or name_index > _STATIC_ENTRIES:  # longer, or dynamic
        return 0
    pos = start + 1
    if not name_index:
        if len(data) <= pos:
            return 0
        name_length = data[pos] & 0x7F
        if name_length == _ONE_BYTE_LENGTH:
            return 0
        pos += 1 + name_length
    if len(data) <= pos:
        return 0
    value_length = data[pos] & 0x7F
    if value_length == _ONE_BYTE_LENGTH:
        return 0
    return pos + 1 + value_length  # past the end of a cut block: hpack reports that
