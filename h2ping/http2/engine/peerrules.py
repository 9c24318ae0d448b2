"""Rules about what an upstream may say that h2 leaves to its user, for one connection.

- Informational (1xx) heads: RFC 9110 15.2 sets no number, but each costs HPACK
  work and a server could send them for ever in place of a response. Each is
  charged to the connection's flood budget (:mod:`.floodguard`) by its size.
  (How many one request takes is its exchange's rule: past it the stream is
  reset, and what the server sends on it afterwards is charged as frames on a
  closed stream.)
- A stream h2 resets itself, for what the peer did on it (a WINDOW_UPDATE that
  overflows the stream's window, RFC 9113 6.9.1; a frame on a stream the peer
  had ended), is h2ping's reset, and its request is told so, not "reset by
  upstream".
- SETTINGS identifiers h2 does not know are ignored, as RFC 9113 6.5.2 asks:
  h2 would keep every one a peer sends (up to 65,536, each with its history),
  so they are dropped from its record of the peer's settings.
- The request header table: h2 sizes hpack's encoder table to whatever
  SETTINGS_HEADER_TABLE_SIZE the peer allows (up to 4 GiB), and hpack indexes
  every request field until it is full, so a connection's memory would grow
  with every new field it sends. An encoder may use less than the decoder
  offers (RFC 7541 4.2): the plain engine lowers a larger value to
  :data:`ENCODER_TABLE_LIMIT` in the frame before h2 reads it
  (:meth:`PeerRules.capped`), and the fast layer caps the encoder itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import h2.connection
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes

from ... import errors
from ...fields import Header, header_list_size
from . import floodguard as fg
from .floodguard import FloodGuard

#: The setting codes h2 knows; others are dropped once seen.
_KNOWN_SETTINGS = frozenset(int(code) for code in h2.settings.SettingCodes)

#: (RFC 9209 error type, detail) for a stream's failure.
Fault = tuple[str, str]
#: The most dynamic table the request encoder keeps, whatever larger size the
#: peer allows: 4,096 is the protocol's default, and Go's transport caps its
#: encoder there too.
ENCODER_TABLE_LIMIT = 4096
_HEADER_TABLE_SIZE = int(h2.settings.SettingCodes.HEADER_TABLE_SIZE)
_SETTING = 6  # bytes per SETTINGS entry
_PAYLOAD = 9  # where a frame's payload starts
_ACK = 0x1


class PeerRules:
    """The rules of the module, for one connection's ``h2`` and flood ``guard``."""

    def __init__(self, conn: h2.connection.H2Connection, guard: FloodGuard) -> None:
        self._h2 = conn
        self._guard = guard
        self._table_size_sent: int | None = None  # as the peer sent it, where capped

    def capped(self, frame: bytes) -> bytes:
        """A SETTINGS ``frame`` with a SETTINGS_HEADER_TABLE_SIZE over
        :data:`ENCODER_TABLE_LIMIT` lowered to it (see the module); the value
        sent is kept for :meth:`settings_changed`. Others are returned as they are."""
        payload = len(frame) - _PAYLOAD
        if frame[4] & _ACK or payload % _SETTING:
            return frame  # h2 judges a malformed one itself
        out: bytearray | None = None
        for pos in range(_PAYLOAD, len(frame), _SETTING):
            value = int.from_bytes(frame[pos + 2 : pos + _SETTING], "big")
            code = int.from_bytes(frame[pos : pos + 2], "big")
            if code == _HEADER_TABLE_SIZE and value > ENCODER_TABLE_LIMIT:
                out = out or bytearray(frame)
                out[pos + 2 : pos + _SETTING] = ENCODER_TABLE_LIMIT.to_bytes(4, "big")
                self._table_size_sent = value
        return frame if out is None else bytes(out)

    def informational(self, headers: list[Header]) -> None:
        """Charge a 1xx head (raises :class:`~.floodguard.FloodError` when the
        budget is spent)."""
        size = header_list_size(headers)
        self._guard.charge({fg.INFORMATIONAL: 1 + size / fg.HPACK_BYTES_PER_UNIT})

    @staticmethod
    def local_reset(error_code: int) -> Fault:
        """What a stream's request is told when h2 reset the stream for the peer's fault."""
        if error_code == ErrorCodes.FLOW_CONTROL_ERROR:
            why = "a WINDOW_UPDATE overflowed the stream's send window"
        else:
            why = "a frame on a stream the upstream had ended"
        name = error_code.name if isinstance(error_code, ErrorCodes) else str(error_code)
        return errors.HTTP_PROTOCOL_ERROR, f"{why} (h2ping reset the stream: {name})"

    def settings_changed(self, changed: Mapping[Any, Any]) -> dict[int, int]:
        """The settings a SETTINGS frame changed, as sent, for those h2 knows; the
        others are dropped from h2's record of the peer's settings."""
        known: dict[int, int] = {}
        remote = self._h2.remote_settings
        for code, change in changed.items():
            if int(code) == _HEADER_TABLE_SIZE and self._table_size_sent is not None:
                known[int(code)] = self._table_size_sent  # as sent, not as capped
                self._table_size_sent = None
            elif int(code) in _KNOWN_SETTINGS:
                known[int(code)] = change.new_value
            else:
                with contextlib.suppress(KeyError):
                    del remote[code]
        return known
