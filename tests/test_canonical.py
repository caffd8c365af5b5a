"""The canonical batch encoding, versions 1 (no start table) and 3 (with a table of record
starts): both decode the same, tables are what a walk finds, and tables that are not are
refused with a message that says where."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.canonical import (
    CANONICAL,
    HEADER,
    VERSION,
    VERSION_STARTS,
    CanonicalCodecError,
    check_block,
    cut,
    peek_header,
    record_position,
    records_at,
    starts_of,
    without_starts,
)
from gateway.model import Record

records_st = st.lists(
    st.builds(
        Record,
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=40),
        st.lists(st.tuples(st.text(max_size=6), st.binary(max_size=8)), max_size=3).map(tuple),
        st.integers(0, 2**50),
    ),
    max_size=25,
)


def walk_starts(block: bytes) -> list[int]:
    """Record positions (from the first record) found by walking, as a reference."""
    _, count, first = records_at(block)
    pos, out = first, []
    for _ in range(count):
        out.append(pos - first)
        _, klen, vlen, nh = struct.unpack_from("<qiiH", block, pos)
        pos += 18 + max(klen, 0) + max(vlen, 0)
        for _ in range(nh):
            nlen, hvlen = struct.unpack_from("<HI", block, pos)
            pos += 6 + nlen + hvlen
    assert pos == len(block)
    return out


@settings(max_examples=200, deadline=None)
@given(records_st)
def test_versions_1_and_3_decode_the_same(records: list[Record]) -> None:
    v3 = CANONICAL.encode(records)
    v1 = CANONICAL.encode(records, starts=False)
    assert (v3[0], v1[0]) == (VERSION_STARTS, VERSION)
    assert len(v3) == len(v1) + 4 * len(records)  # the table's cost
    assert (
        CANONICAL.decode(v3, 5)
        == CANONICAL.decode(v1, 5)
        == [r._replace(offset=5 + i) for i, r in enumerate(records)]
    )
    assert peek_header(v3) == peek_header(v1)
    table = starts_of(v3)
    assert table is not None and list(table) == walk_starts(v3) == walk_starts(v1)
    assert starts_of(v1) is None
    # the two forms convert into each other without changing a record
    assert without_starts(v3) == v1 and without_starts(v1) is v1
    assert check_block(v1) == (v3, len(records))
    assert check_block(v3) == (v3, len(records))
    for i in range(len(records) + 1):
        assert record_position(v3, i) - records_at(v3)[2] == record_position(v1, i) - HEADER.size


@settings(max_examples=100, deadline=None)
@given(records_st, st.integers(0, 30), st.integers(0, 30))
def test_a_cut_holds_the_window_as_version_1(records: list[Record], a: int, b: int) -> None:
    start, stop = min(a, b), max(a, b)
    v3 = CANONICAL.encode(records)
    piece = cut(v3, start, stop)
    assert piece is not None and piece[0] == VERSION
    assert CANONICAL.decode(piece, -1) == CANONICAL.decode(v3, -1)[start:stop]
    assert cut(CANONICAL.encode(records, starts=False), start, stop) is None  # no table to cut by


def test_version_2_is_not_canonical() -> None:
    """2 is the embedded log's native payload prefix, never a canonical block."""
    block = bytearray(CANONICAL.encode([Record(None, b"v", (), 1)]))
    block[0] = 2
    for call in (peek_header, lambda b: CANONICAL.decode(b, 0), check_block, records_at):
        with pytest.raises(CanonicalCodecError, match="version 2"):
            call(bytes(block))


def three_records() -> bytes:
    return CANONICAL.encode([Record(b"k", b"value", (("h", b"x"),), 1)] * 3)


def test_a_table_entry_that_does_not_match_is_refused() -> None:
    block = bytearray(three_records())
    struct.pack_into("<I", block, HEADER.size + 4, 7)  # record 1 does not start at 7
    for call in (check_block, lambda b: CANONICAL.decode(b, 0)):
        with pytest.raises(CanonicalCodecError, match="says record 1 starts at 7, it starts at"):
            call(bytes(block))


def test_a_table_longer_than_the_block_is_refused() -> None:
    block = bytearray(three_records())
    struct.pack_into("<I", block, 1, 1_000_000)  # the count: a table of 4 MB in a tiny block
    for call in (check_block, lambda b: CANONICAL.decode(b, 0), starts_of):
        with pytest.raises(CanonicalCodecError, match="start table of 1000000 records overruns"):
            call(bytes(block))


def test_records_that_do_not_fill_the_block_are_refused() -> None:
    block = three_records()
    with pytest.raises(CanonicalCodecError, match="trailing bytes"):
        check_block(block + b"\0")
    with pytest.raises(CanonicalCodecError, match="truncated"):
        check_block(block[:-3])
    bad_name = bytearray(CANONICAL.encode([Record(None, b"v", (("ab", b""),), 1)], starts=False))
    bad_name[-2] = 0xFF
    with pytest.raises(CanonicalCodecError, match="not UTF-8"):
        check_block(bytes(bad_name))
