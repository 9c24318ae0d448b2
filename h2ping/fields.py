"""The one type both protocol sides share: a header field as raw bytes.

``(name, value)`` byte pairs are what httptools produces on the HTTP/1.1 side and
what h2 accepts on the HTTP/2 side without re-encoding, so neither side needs to
import the other (or the mapping between them) to name it.
"""

from __future__ import annotations

Header = tuple[bytes, bytes]
