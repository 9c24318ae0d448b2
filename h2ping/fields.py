"""The one type both protocol sides share: a header field as raw bytes, and
the size of a list of them as HTTP/2 counts it.

``(name, value)`` byte pairs are what httptools produces on the HTTP/1.1 side and
what h2 accepts on the HTTP/2 side without re-encoding, so neither side needs to
import the other (or the mapping between them) to name it.
"""

from __future__ import annotations

from collections.abc import Collection
from itertools import chain

Header = tuple[bytes, bytes]

#: What each field adds to a header list's size beyond its name and value.
FIELD_OVERHEAD = 32


def header_list_size(fields: Collection[Header]) -> int:
    """The size of a header list as SETTINGS_MAX_HEADER_LIST_SIZE counts it (RFC
    9113 section 6.5.2): name, value and 32 for each field, pseudo-fields included.
    (Summed in C: a generator would cost a frame's resumption per field.)"""
    return sum(map(len, chain.from_iterable(fields))) + FIELD_OVERHEAD * len(fields)
