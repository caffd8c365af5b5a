"""The send/poll hot paths: SEND_MESSAGES -> canonical block -> POLL_MESSAGES entries, checked
against the generic Record path and the codec's own poll decoder."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from gateway.canonical import CANONICAL, VERSION_STARTS, check_block, without_starts
from gateway.model import Record, RecordBatch
from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy.messages import (
    ID_HEADER,
    KINDS_HEADER,
    derived_id,
    headers_from_model,
    poll_reply,
    send_batch,
)

TS = 1_700_000_000_000_000
header_entries = st.lists(
    st.tuples(
        st.text("abcdefghij", min_size=1, max_size=8),
        st.sampled_from([c.HeaderKind.RAW, c.HeaderKind.STRING, c.HeaderKind.UINT32]),
    ),
    max_size=3,
)


def entry(name: str, kind: int) -> tuple[str, int, bytes]:
    return (name, kind, b"\x01\x02\x03\x04" if kind == c.HeaderKind.UINT32 else b"val")


@given(
    st.lists(
        st.tuples(st.sampled_from([0, 7, (1 << 128) - 1]), st.binary(max_size=40), header_entries),
        min_size=1,
        max_size=12,
    ),
    st.one_of(st.none(), st.binary(min_size=1, max_size=8)),
    st.integers(0, 11),
)
def test_send_then_poll_keeps_every_field(messages, key, start) -> None:
    wire = [
        (
            mid.to_bytes(16, "little"),
            c.encode_headers([entry(n, k) for n, k in hdrs]),
            payload,
        )
        for mid, payload, hdrs in messages
    ]
    batch = send_batch(wire, key, TS)
    stored = batch.stored_at(100)
    window = stored.slice(100 + min(start, len(messages) - 1))
    fast, n, last = poll_reply("s.t", 2, 111, [window])
    # the generic path over decoded records gives the same bytes
    records = RecordBatch(list(window.records))
    records.base_offset = window.first_offset
    slow, n2, last2 = poll_reply("s.t", 2, 111, [records])
    assert (fast, n, last) == (slow, n2, last2)
    polled = c.decode_polled(fast)
    assert polled.partition_id == 3 and polled.current_offset == 111
    first = window.first_offset - 100
    assert len(polled.messages) == len(messages) - first == n
    for i, m in enumerate(polled.messages):
        mid, payload, hdrs = messages[first + i]
        assert m.offset == 100 + first + i == window.first_offset + i
        assert m.payload == payload and m.timestamp == TS and m.state == 1
        assert m.checksum == c.zlib.crc32(payload)
        assert m.id == (mid or derived_id("s.t", 2, m.offset))
        assert c.decode_headers(m.headers) == [entry(n, k) for n, k in hdrs]
    decoded = CANONICAL.decode(batch.encode(CANONICAL), 0)
    assert all(r.key == key for r in decoded)


def test_headers_of_other_protocols_come_back_raw_without_reserved_ones() -> None:
    mid, block = headers_from_model(
        [
            ("h", b"v"),
            ("_gw.liftbridge.correlation", b"c1"),
            (ID_HEADER, (5).to_bytes(16, "little")),
        ]
    )
    assert mid == 5
    assert c.decode_headers(block) == [("h", c.HeaderKind.RAW, b"v")]
    # a kinds header that does not match the user headers is ignored
    _, block = headers_from_model([("a", b"x"), (KINDS_HEADER, b"\x02\x02")])
    assert c.decode_headers(block) == [("a", c.HeaderKind.RAW, b"x")]


def test_derived_ids_are_unique_and_never_zero() -> None:
    ids = {derived_id(t, p, o) for t in ("a", "b") for p in (0, 1) for o in (0, 1, 2**40)}
    assert len(ids) == 12 and 0 not in ids


def test_records_from_other_protocols_poll_with_derived_ids() -> None:
    recs = [Record(b"k", os.urandom(10), (), TS, 4), Record(None, None, (("x", b"1"),), -1, 5)]
    batch = RecordBatch(recs)
    batch.base_offset = 4
    payload, n, last = poll_reply("t", 0, 5, [batch])
    polled = c.decode_polled(payload)
    assert (n, last) == (2, 5)
    assert [m.id for m in polled.messages] == [derived_id("t", 0, 4), derived_id("t", 0, 5)]
    assert polled.messages[1].payload == b"" and polled.messages[1].timestamp == 0
    assert c.decode_headers(polled.messages[1].headers) == [("x", 1, b"1")]


@given(
    st.lists(
        st.tuples(st.sampled_from([0, 7]), st.binary(max_size=40), header_entries),
        min_size=1,
        max_size=12,
    ),
    st.one_of(st.none(), st.binary(min_size=1, max_size=8)),
    st.integers(0, 11),
)
def test_send_writes_start_tables_and_old_blocks_poll_the_same(messages, key, start) -> None:
    """SEND_MESSAGES becomes a canonical version-3 block whose start table is what a walk finds;
    a version-1 block of the same records (stored before the tables) polls to the same bytes
    from any offset."""
    wire = [
        (mid.to_bytes(16, "little"), c.encode_headers([entry(n, k) for n, k in hdrs]), payload)
        for mid, payload, hdrs in messages
    ]
    batch = send_batch(wire, key, TS)
    v3 = bytes(batch.encoded_as(CANONICAL))
    assert v3[0] == VERSION_STARTS and check_block(v3) == (v3, len(messages))
    old = RecordBatch(encoded=without_starts(v3), codec=CANONICAL, count=len(messages))
    at = 100 + min(start, len(messages) - 1)
    assert poll_reply("s.t", 0, 5, [old.stored_at(100).slice(at)]) == poll_reply(
        "s.t", 0, 5, [batch.stored_at(100).slice(at)]
    )
