"""RequestBlockEncoder's blocks decode, with hpack's decoder, to exactly the fields
given, and leave the decoder's dynamic table as it was."""

from __future__ import annotations

import hpack
import pytest
from hpack import HeaderTuple, NeverIndexedHeaderTuple
from hpack.hpack import encode_integer
from hpack.table import HeaderTable
from hypothesis import given
from hypothesis import strategies as st

from h2ping.http2.engine import hpackencode
from h2ping.http2.engine.hpackencode import (
    STATIC_TABLE,
    VARYING,
    RequestBlockEncoder,
    field,
    integer,
    varying,
)

NAMES = [b":method", b":path", b":authority", b"content-type", b"authorization", b"x-a", b"te"]
VALUES = [b"GET", b"POST", b"/", b"", b"application/json", b"v" * 300, b"\xff\x00binary"]

a_field = st.tuples(
    st.sampled_from(NAMES) | st.binary(min_size=1, max_size=150),
    st.sampled_from(VALUES) | st.binary(max_size=2000),
    st.booleans(),  # sensitive: never indexed
)


def headers(fields: list[tuple[bytes, bytes, bool]]) -> list[tuple[bytes, bytes]]:
    return [NeverIndexedHeaderTuple(n, v) if s else (n, v) for n, v, s in fields]


def test_the_static_table_is_hpacks() -> None:
    assert STATIC_TABLE == HeaderTable.STATIC_TABLE


@pytest.mark.parametrize("prefix", range(1, 9))
def test_integers_are_encoded_as_hpack_encodes_them(prefix: int) -> None:
    for value in (0, 1, 2**prefix - 2, 2**prefix - 1, 2**prefix, 127, 128, 300, 16383, 2**21):
        assert integer(value, prefix, 0) == bytes(encode_integer(value, prefix))


@given(st.lists(st.lists(a_field, max_size=10), min_size=1, max_size=5))
def test_blocks_decode_to_the_fields_given_and_index_nothing(
    blocks: list[list[tuple[bytes, bytes, bool]]],
) -> None:
    encoder, decoder = RequestBlockEncoder(), hpack.Decoder()
    decoder.decode(hpack.Encoder().encode([(b"x-before", b"1")]))  # a table to keep
    before = list(decoder.header_table.dynamic_entries)
    for fields in blocks:
        sent = headers(fields)
        for _ in range(2):  # encoded, then from what was kept
            got = decoder.decode(encoder.encode(sent), raw=True)
            assert [tuple(h) for h in got] == [(n, v) for n, v, _ in fields]
            # Credentials arrive marked never-indexed, so the next hop keeps them so.
            assert [isinstance(h, NeverIndexedHeaderTuple) for h in got] == [
                s for _, _, s in fields
            ]
            assert list(decoder.header_table.dynamic_entries) == before


def test_fields_are_the_same_bytes_every_time_and_only_repeating_ones_are_kept() -> None:
    encoder = RequestBlockEncoder()
    fields = [(b":method", b"POST"), (b":path", b"/a"), (b"user-agent", b"python/3.11")]
    assert encoder.encode(fields) == encoder.encode([HeaderTuple(*f) for f in fields])
    assert set(encoder._kept) == {(b":method", b"POST"), (b"user-agent", b"python/3.11")}
    # Credentials are never kept, even when a plain field with the same bytes is:
    # they are encoded never-indexed every time.
    secret = NeverIndexedHeaderTuple(b"user-agent", b"python/3.11")
    assert encoder.encode([secret]) != encoder.encode([fields[2]])
    encoder.encode([NeverIndexedHeaderTuple(b"authorization", b"Bearer t")])
    assert (b"authorization", b"Bearer t") not in encoder._kept


@given(
    name=st.sampled_from(sorted(VARYING)),
    value=st.one_of(
        st.sampled_from([b"/", b"/index.html", b"0", b"/" + b"p" * 125, b"/" + b"p" * 126]),
        st.binary(max_size=300),
    ),
)
def test_varying_fields_are_the_bytes_the_general_encoder_makes(name: bytes, value: bytes) -> None:
    """The short way for :path and content-length, with lengths on both sides
    of one byte's prefix and the static table's whole fields."""
    assert varying(name, value) == field(name, value, False, huffman=False)


def test_static_fields_are_one_byte_and_static_names_are_referenced() -> None:
    assert field(b":method", b"GET", False) == b"\x82"
    assert field(b":method", b"GET", True)[0] == 0x12  # never indexed, name index 2
    assert field(b"content-type", b"x", False)[:2] == b"\x0f\x10"  # index 31: 15 + 16
    assert field(b"x-a", b"b", False, huffman=False) == b"\x00\x03x-a\x01b"


def test_the_store_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hpackencode, "KEPT_FIELDS", 4)
    encoder = RequestBlockEncoder()
    for i in range(10):
        encoder.encode([(b"x-n", str(i).encode())])
        assert len(encoder._kept) <= 4
    encoder.encode([(b"x-big", b"v" * (hpackencode.KEPT_VALUE_LIMIT + 1))])
    assert (b"x-big", b"v" * (hpackencode.KEPT_VALUE_LIMIT + 1)) not in encoder._kept
