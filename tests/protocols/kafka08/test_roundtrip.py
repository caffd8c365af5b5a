"""Hypothesis round trips through the sans-IO codec: layouts, message sets (both roles, every
codec and magic), the stored-block fetch path against the records path, framing in pieces."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.canonical import CANONICAL, VERSION_STARTS, check_block, without_starts
from gateway.model import Record, RecordBatch
from gateway.protocols.kafka08 import codec as c
from gateway.protocols.kafka08 import compression
from gateway.protocols.kafka08.messageset import (
    InvalidMessageSet,
    decode_message_set,
    encode_fetch,
    encode_message_set,
    parse_produce,
)

maybe_bytes = st.one_of(st.none(), st.binary(max_size=64))
records_st = st.lists(
    st.builds(lambda k, v: Record(k, v), maybe_bytes, maybe_bytes), min_size=1, max_size=30
)
name = st.text(alphabet="abcxyz._-", min_size=1, max_size=12)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=60, deadline=None)
@given(
    acks=st.sampled_from([-1, 0, 1]),
    timeout=i32,
    topics=st.lists(st.tuples(name, st.lists(st.tuples(i32, records_st), max_size=3)), max_size=3),
    corr=i32,
    client=st.one_of(st.none(), name),
)
def test_produce_request_round_trip(acks, timeout, topics, corr, client) -> None:
    body = c.PRODUCE_REQUEST(
        acks,
        timeout,
        [
            c.PRODUCE_TOPIC(t, [c.PRODUCE_PARTITION(p, encode_message_set(rs)) for p, rs in parts])
            for t, parts in topics
        ],
    )
    server = c.ServerConnection()
    server.receive_data(c.encode_request(0, 0, corr, client, body))
    req = server.next_request()
    assert (req.correlation_id, req.client_id, req.body.acks) == (corr, client, acks)
    for (t, parts), got in zip(topics, req.body.topics, strict=True):
        assert got.topic == t
        for (p, rs), gp in zip(parts, got.partitions, strict=True):
            assert gp.partition == p
            batch = parse_produce(gp.message_set, now_us=7)
            assert [(r.key, r.value) for r in batch.records] == [(r.key, r.value) for r in rs]


@settings(max_examples=40, deadline=None)
@given(
    brokers=st.lists(st.tuples(i32, name, i32), max_size=3),
    topics=st.lists(
        st.tuples(
            st.integers(-1, 20),
            name,
            st.lists(
                st.tuples(st.integers(-1, 20), i32, i32, st.lists(i32, max_size=3)), max_size=3
            ),
        ),
        max_size=3,
    ),
)
def test_metadata_response_round_trip(brokers, topics) -> None:
    body = c.METADATA_RESPONSE(
        [c.BROKER(*b) for b in brokers],
        [
            c.TOPIC_METADATA(e, t, [c.PARTITION_METADATA(pe, p, ld, r, r) for pe, p, ld, r in ps])
            for e, t, ps in topics
        ],
    )
    frame = c.encode_response(3, 0, 5, body)
    assert c.decode_response(3, 0, frame[4:]) == (5, body)


@settings(max_examples=60, deadline=None)
@given(
    rs=records_st,
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from([0, 1, 2, 3]),
    base=st.integers(0, 2**40),
)
def test_message_set_round_trip(rs, magic, codec, base) -> None:
    ts = 1_600_000_000_123
    rs = [r._replace(timestamp_us=ts * 1000) for r in rs]
    data = encode_message_set(rs, base, magic, codec)
    got = decode_message_set(data)
    assert [(r.key, r.value, r.offset) for r in got] == [
        (r.key, r.value, base + i) for i, r in enumerate(rs)
    ]
    if magic == 1:
        assert {r.timestamp_us for r in got} == {ts * 1000}
    produced = parse_produce(data, now_us=99)
    assert [(r.key, r.value) for r in produced.records] == [(r.key, r.value) for r in rs]


@settings(max_examples=60, deadline=None)
@given(
    rs=records_st,
    start=st.integers(0, 29),
    max_bytes=st.integers(0, 3000),
    base=st.integers(0, 10**9),
)
def test_stored_block_fetch_matches_records_path(rs, start, max_bytes, base) -> None:
    """The hand-tuned path (canonical block -> entries) gives exactly the bytes the records path
    encodes, for any window and any cut."""
    start = min(start, len(rs) - 1)
    block = parse_produce(encode_message_set(rs), now_us=1).stored_at(base)
    assert block.encoded_window(CANONICAL) is not None
    plain = RecordBatch(list(rs)).stored_at(base)
    fast, n_fast = encode_fetch([block.slice(base + start)], max_bytes)
    slow, n_slow = encode_fetch([plain.slice(base + start)], max_bytes)
    assert bytes(fast) == bytes(slow)
    assert n_fast == n_slow
    assert len(fast) <= max_bytes
    got = decode_message_set(fast)
    assert len(got) == n_fast
    assert [(r.offset, r.key, r.value) for r in got] == [
        (base + start + i, r.key, r.value) for i, r in enumerate(rs[start : start + len(got)])
    ]


@settings(max_examples=30, deadline=None)
@given(rs=records_st, codec=st.sampled_from([1, 2, 3]), max_bytes=st.integers(1, 5000))
def test_compressed_fetch_round_trip(rs, codec, max_bytes) -> None:
    batch = RecordBatch(list(rs)).stored_at(100)
    data, n = encode_fetch([batch], max_bytes, codec)
    got = decode_message_set(data)
    assert len(got) == n
    assert [(r.offset, r.key, r.value) for r in got] == [
        (100 + i, r.key, r.value) for i, r in enumerate(rs[:n])
    ]


@settings(max_examples=30, deadline=None)
@given(data=st.binary(max_size=200_000), codec=st.sampled_from([1, 2, 3]))
def test_compression_round_trip(data, codec) -> None:
    assert compression.decompress(codec, compression.compress(codec, data)) == data


@settings(max_examples=30, deadline=None)
@given(rs=records_st, cuts=st.lists(st.integers(1, 50), max_size=20))
def test_framing_in_pieces(rs, cuts) -> None:
    """Requests fed in arbitrary pieces come out whole and in order."""
    wire = b"".join(
        c.encode_request(3, 0, i, "x", c.METADATA_REQUEST([f"t{i}"])) for i in range(len(rs))
    )
    server = c.ServerConnection()
    got = []
    pos = 0
    for cut in [*cuts, len(wire)]:
        server.receive_data(wire[pos : pos + cut])
        pos += cut
        while (req := server.next_request()) is not None:
            got.append(req.body.topics)
    assert got == [[f"t{i}"] for i in range(len(rs))]


@settings(max_examples=150, deadline=None)
@given(
    api=st.sampled_from([0, 1, 2, 3, 8, 9, 10, 18]),
    version=st.integers(0, 4),
    body=st.binary(max_size=300),
)
def test_garbage_requests_raise_only_remote_protocol_errors(api, version, body) -> None:
    """Whatever follows a valid header, decoding either works or raises RemoteProtocolError."""
    payload = struct.pack(">hhih", api, version, 1, -1) + body
    try:
        req = c.decode_request(payload)
    except c.RemoteProtocolError:
        return
    if api == 0:  # and the message sets inside either parse or are refused per partition
        for t in req.body.topics:
            for p in t.partitions:
                try:
                    parse_produce(p.message_set, now_us=1)
                except InvalidMessageSet:
                    pass


@settings(max_examples=150, deadline=None)
@given(rs=records_st, flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)),
                                     min_size=1, max_size=4))  # fmt: skip
def test_corrupted_message_sets_are_refused_or_parse(rs, flips) -> None:
    data = bytearray(encode_message_set(rs, codec=1 if len(rs) % 2 else 0))
    for where, xor in flips:
        data[where % len(data)] ^= xor
    try:
        batch = parse_produce(bytes(data), now_us=1)
    except InvalidMessageSet:
        return
    batch.records  # noqa: B018 - whatever was accepted decodes


@settings(max_examples=150, deadline=None)
@given(
    codec=st.sampled_from([1, 2, 3]),
    prefix=st.sampled_from(
        [b"", b"\x1f\x8b\x08", compression.XERIAL_HEADER, compression.LZ4_MAGIC]
    ),
    data=st.binary(max_size=200),
)
def test_garbage_compressed_payloads_raise_compression_error(codec, prefix, data) -> None:
    try:
        compression.decompress(codec, prefix + data)
    except compression.CompressionError:
        pass


@settings(max_examples=60, deadline=None)
@given(rs=records_st, start=st.integers(0, 29), max_bytes=st.integers(0, 3000))
def test_produce_writes_start_tables_and_old_blocks_fetch_the_same(rs, start, max_bytes) -> None:
    """A produced set becomes a canonical version-3 block whose start table is what a walk finds
    (check_block refuses any other); a version-1 block of the same records (stored before the
    tables) gives the same Fetch bytes for any window, which version 3 finds by its table."""
    start = min(start, len(rs) - 1)
    batch = parse_produce(encode_message_set(rs), now_us=1)
    v3 = bytes(batch.encoded_as(CANONICAL))
    assert v3[0] == VERSION_STARTS and check_block(v3) == (v3, len(rs))
    v1 = without_starts(v3)
    old = RecordBatch(encoded=v1, codec=CANONICAL, count=len(rs)).stored_at(7)
    new = batch.stored_at(7)
    assert encode_fetch([old.slice(7 + start)], max_bytes) == encode_fetch(
        [new.slice(7 + start)], max_bytes
    )
