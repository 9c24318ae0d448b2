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

This overrides hpack's ``Decoder._decode_literal``, which every literal field
goes through (hpack 4.0-4.2), and uses ``header_table.add``: h2ping's ``hpack``
fast path, taken only where its probe (h2ping.probes.hpack) passed.
tests/test_hpackcache_unit.py decodes the same blocks with both and compares
the headers and the dynamic table after each block.
"""

from __future__ import annotations

from typing import Any

import hpack
from hpack.table import HeaderTable

#: Fields kept per connection; the store starts again empty when full.
CACHED_FIELDS = 512
_STATIC_ENTRIES = HeaderTable.STATIC_TABLE_LENGTH
_ONE_BYTE_LENGTH = 0x7F  # a string length this size or more takes more bytes


class FieldCachingDecoder(hpack.Decoder):
    """``hpack.Decoder``, decoding each repeated literal field only once."""

    def __init__(self) -> None:
        super().__init__()
        self._fields: dict[bytes, Any] = {}
        self.hits = 0  # fields taken from the store, for tests

    def _decode_literal(self, data: bytes | memoryview, should_index: bool) -> tuple[Any, int]:
        end = _field_end(data, should_index)
        if end == 0:
            return super()._decode_literal(data, should_index)
        key = bytes(data[:end])
        header = self._fields.get(key)
        if header is None:
            header, consumed = super()._decode_literal(data, should_index)
            if len(self._fields) >= CACHED_FIELDS:
                self._fields.clear()
            self._fields[key] = header
            return header, consumed
        self.hits += 1
        if should_index:
            self.header_table.add(header[0], header[1])
        return header, end


def _field_end(data: bytes | memoryview, should_index: bool) -> int:
    """Where the literal field at the start of ``data`` ends, if it can be kept:
    its name a literal or a static-table entry, both lengths in one byte. 0
    otherwise (then hpack decodes it, and reports errors)."""
    prefix = 0x3F if should_index else 0x0F
    name_index = data[0] & prefix
    if name_index == prefix or name_index > _STATIC_ENTRIES:  # longer, or dynamic
        return 0
    pos = 1
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
