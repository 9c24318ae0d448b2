"""What the first bytes of a peer's answer say when they are no HTTP/2 frames.

A server that speaks HTTP/1.x, or TLS, where h2ping expects HTTP/2 breaks the
protocol on its first bytes, and h2 would call that a malformed frame (a frame
header read from ``HTTP/1.1 400``...). These are the words the proxy's 502 and
``h2ping check`` both use instead; they quote nothing the peer sent.
"""

from __future__ import annotations

#: The bytes of an HTTP/2 frame header (RFC 9113, section 4.1).
FRAME_HEADER = 9
#: What :func:`not_http2` says of an answer in text.
TEXT_ANSWER = "answered with text, not HTTP/2: it speaks HTTP/1.x"


def not_http2(first: bytes) -> str | None:
    """What ``first`` (the start of the first bytes read) says, if it is no HTTP/2.
    Only the first read is looked at: a peer's first answer comes in one segment."""
    if first.startswith(b"HTTP/"):
        return "answered in HTTP/1.x, not HTTP/2"
    if first[:1] in (b"\x15", b"\x16") and first[1:2] == b"\x03":  # a TLS alert or handshake
        return "answered with TLS: use an https:// upstream"
    head = first[:FRAME_HEADER]
    if len(head) == FRAME_HEADER and all(32 <= b < 127 or b in b"\t\r\n" for b in head):
        # A frame header is binary: its length's first byte is 0 for any frame
        # under 64 KiB. Text is an HTTP/1.x server's answer without a status line
        # (an HTTP/0.9-style error page), or a banner.
        return TEXT_ANSWER
    return None
