"""FieldCachingDecoder decodes exactly as hpack's Decoder does, block after block."""

from __future__ import annotations

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h2ping.http2.engine.hpackdecode import FieldCachingDecoder

# Names from the static table (so a literal field can name them by index), and others.
NAMES = [b"server", b"date", b"content-type", b"content-length", b"x-request-id", b"x-a"]
VALUES = [b"nginx/1.22.1", b"text/plain", b"22", b"", b"v" * 200, b"\xff\x00binary"]

field = st.tuples(
    st.sampled_from(NAMES) | st.binary(min_size=1, max_size=150),
    st.sampled_from(VALUES) | st.binary(max_size=150),
    st.booleans(),  # sensitive: never indexed
)
block = st.lists(field, max_size=8)


def state(decoder: hpack.Decoder) -> tuple[object, ...]:
    table = decoder.header_table
    return (list(table.dynamic_entries), table._current_size, table.maxsize)


def decode_both(
    blocks: list[bytes], raw: bool = True
) -> tuple[FieldCachingDecoder, hpack.Decoder, list[object]]:
    mine, theirs = FieldCachingDecoder(), hpack.Decoder()
    outcomes = []
    for data in blocks:
        got: list[object] = []
        for decoder in (mine, theirs):
            try:
                got.append((decoder.decode(data, raw=raw), None))
            except hpack.HPACKError as exc:
                got.append((None, type(exc)))
        assert got[0] == got[1]
        assert [type(h) for h in got[0][0] or []] == [type(h) for h in got[1][0] or []]
        assert state(mine) == state(theirs)
        outcomes.append(got[0])
    return mine, theirs, outcomes


@settings(max_examples=300, deadline=None)
@given(
    blocks=st.lists(block, min_size=1, max_size=12),
    huffman=st.booleans(),
    table_size=st.sampled_from([4096, 256, 0]),
)
def test_blocks_decode_as_with_hpack(
    blocks: list[list[tuple[bytes, bytes, bool]]], huffman: bool, table_size: int
) -> None:
    encoder = hpack.Encoder()
    encoder.header_table_size = table_size  # small tables evict, 0 keeps nothing
    decode_both([encoder.encode(b, huffman=huffman) for b in blocks])


def test_repeated_fields_come_from_the_store_and_still_index() -> None:
    encoder = hpack.Encoder()
    response = [(b":status", b"200"), (b"server", b"nginx"), (b"date", b"Thu, 03 Dec 2026")]
    # As nginx does: literal with incremental indexing every time, never the
    # dynamic entries, so each block adds to the table again.
    data = (
        encoder.encode(response[:1])
        + b"\x76"  # literal with incremental indexing, name: static entry 54 (server)
        + hpack.hpack.encode_integer(5, 7)
        + b"nginx"
    )
    # Each block its own (a field that differs), so that none repeats whole.
    blocks = [data + b"\x00" + literal(b"", b"x-n") + literal(b"", b"%d" % i) for i in range(5)]
    mine, _, outcomes = decode_both(blocks)
    assert mine.hits == 4  # the first decodes, the other four come from the store
    assert mine.block_hits == 0
    assert len(mine.header_table.dynamic_entries) == 5  # each one indexed
    assert outcomes[-1][0] == [(b":status", b"200"), (b"server", b"nginx"), (b"x-n", b"4")]


def test_a_repeated_block_comes_from_the_store_and_still_indexes() -> None:
    """A block that names nothing in the dynamic table decodes the same whatever
    it holds: kept whole; a repeat adds its entries again, in order."""
    data = (
        b"\x88"  # :status 200, static
        + literal(b"\x76", b"nginx")  # incremental indexing, name: static entry 54 (server)
        + add_entry(b"x-a", b"1")  # incremental indexing, literal name
        + b"\x10" + literal(b"", b"x-s") + literal(b"", b"secret")  # never indexed
    )  # fmt: skip
    mine, _, outcomes = decode_both([data] * 5)
    assert mine.block_hits == 4
    assert len(mine.header_table.dynamic_entries) == 10  # two entries a block, each time
    assert outcomes[-1][0] == [
        (b":status", b"200"),
        (b"server", b"nginx"),
        (b"x-a", b"1"),
        (b"x-s", b"secret"),
    ]
    # The caller's list is its own: changing it changes no later block's fields.
    headers = mine.decode(data, raw=True)
    headers.append((b"x-b", b"2"))
    assert len(mine.decode(data, raw=True)) == 4


def test_a_block_naming_a_dynamic_entry_or_resizing_is_decoded_each_time() -> None:
    """The same bytes name another field once the table has changed: such a
    block, and one that resizes the table, is never kept whole."""
    newest = b"\xbe"  # indexed: dynamic entry 62, the newest
    resize = b"\x3f\xe1\x1f"  # a table size update to 4,096
    mine, _, outcomes = decode_both(
        [
            add_entry(b"x-a", b"1"),
            newest,
            add_entry(b"x-b", b"2"),
            newest,
            resize + b"\x88",
            resize + b"\x88",
        ]
    )
    assert [outcomes[1][0], outcomes[3][0]] == [[(b"x-a", b"1")], [(b"x-b", b"2")]]
    assert mine.block_hits == 0


def test_a_kept_block_over_a_lowered_limit_fails_as_with_hpack() -> None:
    data = b"\x88" + literal(b"\x76", b"nginx")
    mine, theirs = FieldCachingDecoder(), hpack.Decoder()
    for decoder in (mine, theirs):
        decoder.decode(data, raw=True)
        decoder.decode(data, raw=True)
        decoder.max_header_list_size = 40  # the block's list is 42 + 43 bytes
    assert mine.block_hits == 1
    for decoder in (mine, theirs):
        with pytest.raises(hpack.OversizedHeaderListError):
            decoder.decode(data, raw=True)
    assert state(mine) == state(theirs)


@pytest.mark.parametrize(
    "data",
    [
        b"\x76\x05ngi",  # value cut short
        b"\x40\x03na",  # literal name cut short
        b"\x7f",  # an index that needs more bytes, and has none
        b"\x0f\x30\x01v",  # a 4-bit index over more bytes (15 + 48 = 63: dynamic, empty)
        b"\x40\x85\xff\xff\xff\xff\xff\x01v",  # a bad Huffman name
    ],
)
def test_bad_blocks_fail_as_with_hpack(data: bytes) -> None:
    decode_both([data, data])


def literal(first: bytes, value: bytes) -> bytes:
    return first + hpack.hpack.encode_integer(len(value), 7) + value


def add_entry(name: bytes, value: bytes) -> bytes:
    """Literal with incremental indexing, literal name: a new dynamic entry 62."""
    return b"\x40" + literal(b"", name) + literal(b"", value)


@pytest.mark.parametrize(
    "field",
    [
        # Incremental indexing, name: dynamic entry 62 (6-bit prefix, one byte).
        literal(b"\x7e", b"v"),
        # Never indexed, name: dynamic entry 62 as a 4-bit prefix over two bytes
        # (15 + 47), with a 46-byte value: read as a one-byte static index, its
        # length would come out right, and only the index says it is dynamic.
        literal(b"\x1f\x2f", b"w" * 46),
    ],
)
def test_fields_naming_a_dynamic_entry_are_decoded_each_time(field: bytes) -> None:
    """The same bytes mean another name once the dynamic table has changed."""
    mine, _, outcomes = decode_both(
        [add_entry(b"x-a", b"1") + field, add_entry(b"x-b", b"2") + field]
    )
    assert [headers[1][0] for headers, _ in outcomes] == [b"x-a", b"x-b"]  # type: ignore[index]
    assert mine.hits == 0


def test_a_repeated_field_larger_than_the_table_empties_it() -> None:
    """RFC 7541 4.4: an entry larger than the table leaves it empty. The table
    is 100 bytes; x-a: 1 takes 36 of them, server: v*80 would take 118."""
    small = b"\x3f\x45"  # a dynamic table size update to 100
    big = literal(b"\x76", b"v" * 80)  # incremental indexing, name: static entry 54 (server)
    mine, _, _ = decode_both([small + add_entry(b"x-a", b"1") + big, add_entry(b"x-a", b"1") + big])
    assert mine.hits == 2  # both from the store the second time; the big one still empties
    assert not mine.header_table.dynamic_entries
