"""Every name of h2's and hpack's that h2ping uses beyond their documented API.

One row per name: where it lives, what h2ping does with it, the fast paths that
rely on it (each is off where one of its names is missing, see
:func:`missing`), the library function that h2ping's code repeats or stands in
for, and the release it was taken from. To move to a new h2 or hpack, diff the
functions in the ``copies`` column between the release named in ``since`` and
the new one, and run the tests of the engine (docs: "Moving to a new h2").

Nothing outside :mod:`h2ping.http2.engine` uses any of these, and
``tests/unit/test_layers.py`` holds it so. ``renamed_in`` names the modules a release
renaming the name would touch: the fallback tests rename it there, as such a
release might, and check that the proxy still forwards with the paths of this
row off. An empty ``renamed_in`` marks a name that no rename can stand for
(enums, public types, a method h2 documents elsewhere): the probes and the
differential tests cover those.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

#: The fast paths, by the names /metrics shows.
RECEIVE = "receive"
DATA = "data"
STREAM_FAULTS = "stream_faults"
HPACK = "hpack"
REQUEST_HEADERS = "request_headers"
REQUEST_DATA = "request_data"
RESPONSE_HEADERS = "response_headers"
FAST_PATHS = (
    RECEIVE, DATA, STREAM_FAULTS, HPACK, REQUEST_HEADERS, REQUEST_DATA, RESPONSE_HEADERS
)  # fmt: skip

H2_VERSION = "h2 4.4.1"
HPACK_VERSION = "hpack 4.2.0"

_CONNECTION = "h2.connection.H2Connection"
_STREAM = "h2.stream.H2Stream"
_STREAM_MACHINE = "h2.stream.H2StreamStateMachine"
_WINDOW = "h2.windows.WindowManager"
_DECODER = "hpack.hpack.Decoder"
_TABLE = "hpack.table.HeaderTable"
_C, _S, _W, _H, _T = "h2.connection", "h2.stream", "h2.windows", "hpack.hpack", "hpack.table"


@dataclass(frozen=True)
class Reach:
    """One name used beyond the documented API (see the module)."""

    owner: str  # the module, or module.Class, it belongs to
    name: str
    use: str  # what h2ping does with it: calls, reads, writes, overrides, replaces, subclasses
    paths: frozenset[str]
    copies: str = ""  # the library function whose steps h2ping repeats or replaces
    since: str = H2_VERSION
    renamed_in: tuple[str, ...] = ()

    @property
    def qualname(self) -> str:
        return f"{self.owner}.{self.name}"

    @property
    def private(self) -> bool:
        return self.name.startswith("_")


def _paths(*names: str) -> frozenset[str]:
    return frozenset(names)


_RECV = "h2.connection.H2Connection._receive_frame"
_SEND_HEADERS = "h2.connection.H2Connection.send_headers"
_RECV_HEADERS = "h2.connection.H2Connection._receive_headers_frame"
_RECV_DATA = "h2.connection.H2Connection._receive_data_frame, h2.stream.H2Stream.receive_data"
_ACK = "h2.connection.H2Connection.acknowledge_received_data"
_SEND_DATA = "h2.connection.H2Connection.send_data, h2.stream.H2Stream.send_data"

MANIFEST: tuple[Reach, ...] = (
    # --- receive: h2's frame dispatch without its trace formatting
    # (request_headers: a SETTINGS frame, seen there, drops the settings kept for new streams)
    Reach(_CONNECTION, "_receive_frame", "overrides",
          _paths(RECEIVE, STREAM_FAULTS, RESPONSE_HEADERS, REQUEST_HEADERS), _RECV,
          renamed_in=(_C,)),
    Reach(_CONNECTION, "_frame_dispatch_table", "reads; clears at the connection's end",
          _paths(RECEIVE), _RECV, renamed_in=(_C,)),
    Reach(_CONNECTION, "_prepare_for_sending", "calls",
          _paths(RECEIVE, STREAM_FAULTS, RESPONSE_HEADERS), _RECV, renamed_in=(_C,)),
    Reach(_CONNECTION, "_stream_is_closed_by_reset", "calls", _paths(RECEIVE), _RECV,
          renamed_in=(_C,)),
    Reach(_CONNECTION, "_stream_is_closed_by_end", "calls", _paths(RECEIVE), _RECV,
          renamed_in=(_C,)),
    # DATA on a stream h2ping reset goes unanswered, as the stream's HEADERS do
    Reach(_CONNECTION, "_handle_data_on_closed_stream", "overrides", _paths(STREAM_FAULTS),
          "h2.connection.H2Connection._handle_data_on_closed_stream", renamed_in=(_C,)),
    Reach(_CONNECTION, "_stream_closed_by", "calls", _paths(STREAM_FAULTS),
          "h2.connection.H2Connection._stream_is_closed_by_reset", renamed_in=(_C,)),
    Reach("h2.exceptions.StreamClosedError", "_events", "reads", _paths(RECEIVE), _RECV,
          renamed_in=("h2.exceptions", _C, _S)),
    # --- stream_faults: one stream's fault resets that stream alone
    Reach(_CONNECTION, "_begin_new_stream",
          "overrides; calls once at import (what it gives a new stream)", _paths(STREAM_FAULTS),
          "h2.connection.H2Connection._begin_new_stream", renamed_in=(_C,)),
    Reach(_STREAM, "receive_headers", "overrides", _paths(STREAM_FAULTS, RESPONSE_HEADERS),
          "h2.stream.H2Stream.receive_headers"),
    Reach(_STREAM, "receive_data", "overrides", _paths(STREAM_FAULTS),
          "h2.stream.H2Stream.receive_data"),
    Reach(_S, "H2Stream", "subclasses (and sets as a stream's __class__), constructs",
          _paths(STREAM_FAULTS, REQUEST_HEADERS, RESPONSE_HEADERS),
          "h2.connection.H2Connection._begin_new_stream"),
    Reach(_STREAM_MACHINE, "stream_closed_by", "reads and writes",
          _paths(STREAM_FAULTS, DATA, RESPONSE_HEADERS),
          "h2.stream.H2StreamStateMachine.send_reset_stream, stream_ended"),
    Reach(_S, "StreamClosedBy", "reads", _paths(STREAM_FAULTS, DATA, RESPONSE_HEADERS)),
    Reach(_WINDOW, "process_bytes", "calls", _paths(STREAM_FAULTS), _RECV_DATA),
    Reach(_CONNECTION, "DEFAULT_MAX_HEADER_LIST_SIZE", "reads", _paths(STREAM_FAULTS)),
    # --- data: DATA frames and window credit without h2's per-frame machinery
    Reach(_CONNECTION, "_inbound_flow_control_window_manager", "reads and writes",
          _paths(DATA, STREAM_FAULTS), f"{_RECV_DATA}, {_ACK}", renamed_in=(_C,)),
    Reach(_STREAM, "_inbound_window_manager", "reads and writes", _paths(DATA),
          f"{_RECV_DATA}, {_ACK}", renamed_in=(_S,)),
    Reach(_STREAM, "_expected_content_length", "reads", _paths(DATA),
          "h2.stream.H2Stream._track_content_length", renamed_in=(_S,)),
    Reach(_STREAM, "_actual_content_length", "reads and writes", _paths(DATA),
          "h2.stream.H2Stream._track_content_length", renamed_in=(_S,)),
    Reach(_WINDOW, "_bytes_processed", "reads and writes", _paths(DATA),
          "h2.windows.WindowManager.process_bytes, _maybe_update_window", renamed_in=(_W,)),
    Reach(_WINDOW, "current_window_size", "reads and writes", _paths(DATA),
          "h2.windows.WindowManager.window_consumed"),
    Reach(_WINDOW, "max_window_size", "reads", _paths(DATA),
          "h2.windows.WindowManager._maybe_update_window"),
    # --- the state machines, read and driven by data, request_headers, response_headers
    Reach(_CONNECTION, "streams", "reads",
          _paths(DATA, STREAM_FAULTS, REQUEST_HEADERS, REQUEST_DATA, RESPONSE_HEADERS)),
    Reach(_CONNECTION, "state_machine", "reads and drives (process_input)",
          _paths(DATA, REQUEST_HEADERS, REQUEST_DATA, RESPONSE_HEADERS),
          "h2.connection.H2ConnectionStateMachine.process_input"),
    Reach(_STREAM, "state_machine", "reads, drives (process_input)",
          _paths(DATA, STREAM_FAULTS, REQUEST_HEADERS, REQUEST_DATA, RESPONSE_HEADERS),
          "h2.stream.H2StreamStateMachine.process_input"),
    # The moves h2's stream state machine makes for a request sent (request_sent),
    # a final response head (response_received) and a response's end
    # (stream_half_closed, stream_ended), made by writing their outcome.
    Reach(_STREAM_MACHINE, "state", "reads and writes",
          _paths(DATA, STREAM_FAULTS, REQUEST_HEADERS, RESPONSE_HEADERS),
          "h2.stream.H2StreamStateMachine.process_input"),
    Reach(_STREAM_MACHINE, "client", "reads and writes", _paths(REQUEST_HEADERS, RESPONSE_HEADERS),
          "h2.stream.H2StreamStateMachine.request_sent, response_received"),
    Reach(_STREAM_MACHINE, "headers_sent", "writes", _paths(REQUEST_HEADERS),
          "h2.stream.H2StreamStateMachine.request_sent"),
    Reach(_STREAM_MACHINE, "headers_received", "reads and writes", _paths(DATA, RESPONSE_HEADERS),
          "h2.stream.H2StreamStateMachine.response_received"),
    Reach(_C, "ConnectionState", "reads",
          _paths(DATA, REQUEST_HEADERS, REQUEST_DATA, RESPONSE_HEADERS)),
    Reach(_C, "ConnectionInputs", "reads", _paths(REQUEST_HEADERS, RESPONSE_HEADERS)),
    Reach(_C, "AllowedStreamIDs", "reads", _paths(REQUEST_HEADERS)),
    Reach(_S, "StreamState", "reads",
          _paths(DATA, STREAM_FAULTS, REQUEST_HEADERS, REQUEST_DATA, RESPONSE_HEADERS)),
    Reach(_S, "StreamInputs", "reads", _paths(REQUEST_DATA)),
    # --- request_headers: a request's HEADERS framed by h2ping
    Reach(_CONNECTION, "highest_outbound_stream_id", "reads and writes", _paths(REQUEST_HEADERS),
          "h2.connection.H2Connection._begin_new_stream"),
    Reach(_STREAM, "max_outbound_frame_size", "writes", _paths(REQUEST_HEADERS),
          "h2.connection.H2Connection._begin_new_stream"),
    Reach(_CONNECTION, "_data_to_send", "reads and writes", _paths(REQUEST_HEADERS, REQUEST_DATA),
          f"{_SEND_HEADERS}, {_SEND_DATA}, h2.connection.H2Connection.data_to_send",
          renamed_in=(_C,)),
    Reach(_STREAM, "_authority", "writes", _paths(REQUEST_HEADERS),
          "h2.stream.H2Stream.send_headers", renamed_in=(_S,)),
    Reach(_STREAM, "request_method", "writes", _paths(REQUEST_HEADERS),
          "h2.stream.H2Stream.send_headers", renamed_in=(_S,)),
    Reach(_CONNECTION, "encoder", "reads; replaces with a table-capped hpack Encoder",
          _paths(REQUEST_HEADERS)),
    Reach(_TABLE, "resized", "reads", _paths(REQUEST_HEADERS),
          "hpack.hpack.Encoder.encode", HPACK_VERSION, renamed_in=(_H, _T)),
    Reach("hpack.huffman", "HuffmanEncoder", "calls", frozenset(),
          "hpack.hpack.Encoder._encode_*", HPACK_VERSION),
    Reach("hpack.huffman_constants", "REQUEST_CODES", "reads", frozenset(), "", HPACK_VERSION),
    Reach("hpack.huffman_constants", "REQUEST_CODES_LENGTH", "reads", frozenset(), "",
          HPACK_VERSION),
    # --- request_data: a request body's DATA frames framed by h2ping
    Reach(_STREAM, "outbound_flow_control_window", "reads and writes", _paths(REQUEST_DATA),
          "h2.stream.H2Stream.send_data"),
    # --- response_headers: a response's HEADERS without hyperframe's frame objects
    Reach(_C, "_decode_headers", "calls", _paths(RESPONSE_HEADERS), _RECV_HEADERS,
          renamed_in=(_C,)),
    Reach(_STREAM, "_initialize_content_length", "calls", _paths(RESPONSE_HEADERS),
          "h2.stream.H2Stream.receive_headers", renamed_in=(_S,)),
    Reach(_CONNECTION, "_terminate_connection", "calls", _paths(RESPONSE_HEADERS),
          "h2.connection.H2Connection.receive_data", renamed_in=(_C,)),
    Reach(_STREAM, "_build_hdr_validation_flags", "overrides", _paths(RESPONSE_HEADERS),
          "h2.stream.H2Stream.receive_headers"),
    Reach(_STREAM, "_process_received_headers", "overrides", _paths(RESPONSE_HEADERS),
          "h2.stream.H2Stream.receive_headers"),
    # --- hpack: a decoder that decodes each repeated literal field once
    Reach(_CONNECTION, "decoder", "replaces, and writes max_header_list_size",
          _paths(HPACK, STREAM_FAULTS, RESPONSE_HEADERS)),
    Reach(_DECODER, "_decode_literal", "overrides", _paths(HPACK),
          "hpack.hpack.Decoder._decode_literal", HPACK_VERSION, renamed_in=(_H,)),
    Reach(_DECODER, "_decode_indexed", "calls", _paths(HPACK), "hpack.hpack.Decoder.decode",
          HPACK_VERSION),
    Reach(_DECODER, "_update_encoding_context", "calls", _paths(HPACK),
          "hpack.hpack.Decoder.decode", HPACK_VERSION),
    Reach(_DECODER, "_assert_valid_table_size", "calls", _paths(HPACK),
          "hpack.hpack.Decoder.decode", HPACK_VERSION),
    Reach(_DECODER, "header_table", "reads", _paths(HPACK), "", HPACK_VERSION),
    Reach(_TABLE, "get_by_index", "calls", _paths(HPACK), "hpack.hpack.Decoder.decode",
          HPACK_VERSION),
    Reach(_TABLE, "dynamic_entries", "reads and writes", _paths(HPACK),
          "hpack.table.HeaderTable.add, _shrink", HPACK_VERSION),
    Reach(_TABLE, "_current_size", "reads and writes", _paths(HPACK),
          "hpack.table.HeaderTable.add, _shrink", HPACK_VERSION, renamed_in=(_T,)),
    Reach(_TABLE, "_maxsize", "reads", _paths(HPACK),
          "hpack.table.HeaderTable.add, _shrink", HPACK_VERSION, renamed_in=(_T,)),
)  # fmt: skip


# ---------------------------------------------------------------- presence
#
# Instance attributes are looked for on specimens built through the documented
# API, so that a release that renames one in its __init__ is seen for what it is.


def _connection() -> Any:
    import h2.config
    import h2.connection

    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "GET"), (":scheme", "https"), (":authority", "a"),
                          (":path", "/")])  # fmt: skip
    return conn


def _stream() -> Any:
    return getattr(_connection(), "streams", {}).get(1)


def _window() -> Any:
    import h2.windows

    return h2.windows.WindowManager(65535)


def _decoder() -> Any:
    import hpack

    return hpack.Decoder()


def _table() -> Any:
    import hpack.table

    return hpack.table.HeaderTable()


def _stream_closed() -> Any:
    import h2.exceptions

    return h2.exceptions.StreamClosedError(1)


SPECIMENS: dict[str, Callable[[], Any]] = {
    _CONNECTION: _connection,
    _STREAM: _stream,
    _STREAM_MACHINE: lambda: getattr(_stream(), "state_machine", None),
    _WINDOW: _window,
    _DECODER: _decoder,
    _TABLE: _table,
    "h2.exceptions.StreamClosedError": _stream_closed,
}


def resolve(dotted: str) -> Any:
    """The module or class ``dotted`` names; raises when it is gone."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            found = getattr(found, part)
        return found
    raise ImportError(dotted)


def present(reach: Reach) -> bool:
    """Whether the installed library still has ``reach``'s name."""
    try:
        owner = resolve(reach.owner)
        if hasattr(owner, reach.name):
            return True
        specimen = SPECIMENS.get(reach.owner)
        return specimen is not None and hasattr(specimen(), reach.name)
    except Exception:  # whatever a changed library raises while building a specimen
        return False


def missing(reaches: Iterable[Reach] = MANIFEST) -> list[Reach]:
    """The rows whose name the installed libraries no longer have."""
    return [reach for reach in reaches if not present(reach)]


def lookup(dotted: str) -> Any:
    """``module.Name.MEMBER`` if the installed library has it, else a value equal to
    nothing, so that code comparing with it declines (its path is off anyway)."""
    try:
        return resolve(dotted)
    except Exception:
        return _ABSENT


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


_ABSENT: Any = _Absent()
