"""The Kafka backend's record batch transcoders (no broker): the C-level path for uniform runs
(``records.MIN_RUN`` and up) must give exactly what the record-by-record path gives, which is
checked against ``decode_batches`` and the canonical codec."""

from __future__ import annotations

import random
import struct
import zlib

import crc32c
import pytest

from gateway.backends.kafka import records as rec
from gateway.backends.kafka import to_canonical
from gateway.backends.kafka.records import (
    KafkaRecordError,
    canonical_to_batch,
    decode_batches,
    encode_batch,
)
from gateway.backends.kafka.to_canonical import batches_to_canonical
from gateway.canonical import CANONICAL, VERSION_STARTS, check_block, without_starts
from gateway.model import Record, RecordBatch
from gateway.protocols.kafka08.messageset import encode_fetch, encode_message_set, parse_produce

TS = 1_700_000_000_000_000


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch):
    """Call ``fn`` with the uniform-run path switched off."""

    def call(fn, *args):
        with monkeypatch.context() as m:
            m.setattr(rec, "MIN_RUN", 1 << 62)
            m.setattr(to_canonical, "MIN_RUN", 1 << 62)
            return fn(*args)

    return call


def uniform(n: int, key: bytes | None, value: bytes | None, ts: int, headers=()) -> list[Record]:
    rnd = random.Random(n)
    out = []
    for _ in range(n):
        k = None if key is None else rnd.randbytes(len(key))
        v = None if value is None else rnd.randbytes(len(value))
        out.append(Record(k, v, headers, ts))
    return out


SHAPES = [
    pytest.param(None, b"v" * 100, TS + 123, (), id="null-key-us"),
    pytest.param(None, b"v" * 100, TS, (), id="null-key-whole-ms"),
    pytest.param(b"k" * 8, b"v" * 300, TS + 7, (), id="key-value"),
    pytest.param(b"k" * 8, None, TS + 999, (), id="null-value"),
    pytest.param(None, None, TS, (), id="null-both"),
    pytest.param(b"", b"", TS + 1, (), id="empty-both"),
    pytest.param(None, b"x" * 70, TS + 5, (("trace", b"abc"), ("n", b"")), id="headers"),
]


@pytest.mark.parametrize(("key", "value", "ts", "headers"), SHAPES)
@pytest.mark.parametrize("n", [16, 64, 65, 8192, 8300])
def test_uniform_runs_transcode_like_the_record_path(slow, key, value, ts, headers, n):
    records = uniform(n, key, value, ts, headers)
    block = CANONICAL.encode(records)
    v2, count = canonical_to_batch(block, 0, 7)
    assert count == n
    assert (v2, count) == slow(canonical_to_batch, block, 0, 7)
    assert [r._replace(offset=-1) for r in decode_batches(v2)] == records
    # fetch side: from several offsets (inside the first run, across the 64 and 8192 varint
    # boundaries), with and without a record limit, over two batches and a cut-off third
    second = encode_batch(records, 0, 7 + n)
    data = v2 + second + second[: len(second) // 2]
    for start, limit in ((7, 1 << 30), (8, 10), (7 + 63, 100), (7 + n - 1, 5), (7 + n + 64, 70)):
        fast = batches_to_canonical(data, start, limit)
        assert fast == slow(batches_to_canonical, data, start, limit)
        assert fast is not None
        block_out, got, _max_ts = fast
        want = (records + records)[start - 7 : start - 7 + limit]
        assert got == len(want)
        assert CANONICAL.decode(block_out, start) == [
            r._replace(offset=start + i) for i, r in enumerate(want)
        ]


def test_large_records_in_a_uniform_run(slow):
    records = uniform(20, b"k" * 300, b"v" * 200_000, TS + 42, (("h", b"x" * 5000),))
    block = CANONICAL.encode(records)
    v2, _ = canonical_to_batch(block, 0)
    assert v2 == slow(canonical_to_batch, block, 0)[0]
    got = batches_to_canonical(v2, 3, 100)
    assert got == slow(batches_to_canonical, v2, 3, 100)
    assert got is not None and CANONICAL.decode(got[0], 3) == [
        r._replace(offset=3 + i) for i, r in enumerate(records[3:])
    ]


@pytest.mark.parametrize("max_bytes", [1, 5_000, 100_000, 250_000])
def test_canonical_stops_at_max_bytes_like_the_record_path(slow, max_bytes):
    records = uniform(3000, None, b"v" * 100, TS + 9)
    data = encode_batch(records, 0, 0)
    fast = batches_to_canonical(data, 10, 1 << 30, max_bytes)
    assert fast == slow(batches_to_canonical, data, 10, 1 << 30, max_bytes)
    assert fast is not None
    block, n, _ = fast
    record = 18 + 100  # a canonical record of this shape
    assert n == max(1, -(-(max_bytes - 21) // record))  # until the block reaches max_bytes
    assert CANONICAL.decode(block, 10) == [
        r._replace(offset=10 + i) for i, r in enumerate(records[10 : 10 + n])
    ]


def test_negative_timestamps_take_now():
    records = [Record(None, b"v", (), -1)] * 40
    v2, _ = canonical_to_batch(CANONICAL.encode(records), now_ms=1234)
    assert {r.timestamp_us for r in decode_batches(v2)} == {1_234_000}


def test_a_record_of_another_shape_inside_a_run_is_transcoded_right(slow):
    records = uniform(500, None, b"v" * 50, TS + 3)
    records[300] = Record(b"odd", b"v" * 49, (), TS + 4)
    block = CANONICAL.encode(records)
    v2, _ = canonical_to_batch(block, 0)
    assert v2 == slow(canonical_to_batch, block, 0)[0]
    got = batches_to_canonical(v2, 0, 1000)
    assert got == slow(batches_to_canonical, v2, 0, 1000)
    assert got is not None
    assert CANONICAL.decode(got[0], 0) == [r._replace(offset=i) for i, r in enumerate(records)]


def test_kafka08_produce_to_v2_and_back_to_a_fetch_answer():
    """kcat's shape end to end: a magic-0 set -> canonical -> v2 -> canonical -> magic 0."""
    values = [bytes([65 + i % 26]) * 100 for i in range(9000)]
    message_set = encode_message_set([Record(None, v) for v in values])
    batch = parse_produce(message_set, TS + 456)
    block = batch.encoded_as(CANONICAL)
    assert block is not None
    v2, count = canonical_to_batch(block, 0, base_offset=1000)
    fetched = batches_to_canonical(v2, 1000, 1 << 30)
    assert fetched is not None and fetched[1] == count == 9000
    window = RecordBatch(encoded=fetched[0], codec=CANONICAL, count=9000, base_offset=1000)
    answer, n = encode_fetch([window], 1 << 30)
    expected = encode_message_set([Record(None, v) for v in values], base_offset=1000)
    assert (bytes(answer), n) == (expected, 9000)


def _with_records(batch: bytes, records: bytes, attrs: int, deltas: list[int] | None = None):
    """``batch`` with its records region, attributes and (optionally) offset deltas replaced,
    CRC recomputed."""
    head = bytearray(batch[: rec.HEAD_SIZE + rec.BODY_SIZE])
    struct.pack_into(">h", head, rec.HEAD_SIZE, attrs)
    if deltas is not None:
        struct.pack_into(">i", head, rec.HEAD_SIZE + 2, deltas[-1])
    body = bytes(head[rec.HEAD_SIZE :]) + records
    struct.pack_into(">i", head, 8, len(body) + 9)
    struct.pack_into(">I", head, 17, crc32c.crc32c(body))
    return bytes(head[: rec.HEAD_SIZE]) + body


def test_gzip_batches_are_read_on_both_paths(slow):
    records = uniform(200, b"key", b"v" * 40, TS + 11)
    plain = encode_batch(records, 0, 50)
    region = plain[rec.HEAD_SIZE + rec.BODY_SIZE :]
    gz = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    zipped = _with_records(plain, gz.compress(region) + gz.flush(), 1)
    assert decode_batches(zipped) == decode_batches(plain)
    got = batches_to_canonical(zipped, 60, 1 << 30)
    assert got == batches_to_canonical(plain, 60, 1 << 30)
    assert got == slow(batches_to_canonical, zipped, 60, 1 << 30)
    snappy = _with_records(plain, region, 2)
    with pytest.raises(KafkaRecordError):
        batches_to_canonical(snappy, 0, 10)


def test_control_batches_are_skipped_and_make_the_canonical_path_give_up():
    data_batch = encode_batch(uniform(30, None, b"v" * 10, TS), 0, 0)
    marker = _with_records(encode_batch([Record(b"\x00\x00\x00\x00", b"x")], 0, 30), b"", 0x20)
    after = encode_batch(uniform(30, None, b"w" * 10, TS), 0, 31)
    data = data_batch + marker + after
    records = decode_batches(data)
    assert len(records) == 60 and records[30].offset == 31
    assert batches_to_canonical(data, 0, 1000) is None  # offset 30 is missing: not dense
    assert batches_to_canonical(data, 31, 1000) is not None


def test_offset_gaps_in_a_batch_make_the_canonical_path_give_up(slow):
    """A compacted batch: offset deltas skip; the uniform path must notice (its deltas are
    checked), not read the records as dense."""
    records = uniform(100, None, b"v" * 20, TS)
    v2 = encode_batch(records, 0, 0)
    region = bytearray(v2[rec.HEAD_SIZE + rec.BODY_SIZE :])
    # record 50's offset delta 50 (zigzag 100 = 0x64) becomes 51 (0x66): same width
    stride = (region[0] >> 1) + 1  # records 0..63: length, attributes, tsDelta, offsetDelta
    assert region[50 * stride + 3] == 0x64
    region[50 * stride + 3] = 0x66
    changed = _with_records(v2, bytes(region), 0)
    assert batches_to_canonical(changed, 0, 1000) is None
    assert slow(batches_to_canonical, changed, 0, 1000) is None
    assert [r.offset for r in decode_batches(changed)][49:52] == [49, 51, 51]


def test_truncated_and_corrupt_records_raise():
    v2 = encode_batch(uniform(40, None, b"v" * 20, TS), 0, 0)
    region = v2[rec.HEAD_SIZE + rec.BODY_SIZE :]
    bad = _with_records(v2, region[:-7], 0)
    with pytest.raises(KafkaRecordError):
        batches_to_canonical(bad, 0, 100)
    with pytest.raises(KafkaRecordError):
        decode_batches(bad)


@pytest.mark.parametrize(("key", "value", "ts", "headers"), SHAPES)
def test_start_tables_both_ways(slow, key, value, ts, headers):
    """Produce: a version-1 block (stored before the tables) and a version-3 one give the same
    v2 batch. Fetch: the canonical block made from a Fetch answer carries a start table that is
    what a walk finds (check_block refuses any other), on the run path and the record path."""
    records = uniform(200, key, value, ts, headers)
    records[150] = Record(b"odd", b"v" * 3, (), ts + 1)  # a record of another shape in a run
    v3 = CANONICAL.encode(records)
    assert v3[0] == VERSION_STARTS
    assert canonical_to_batch(v3, 0, 7) == canonical_to_batch(without_starts(v3), 0, 7)
    data = encode_batch(records, 0, 7)
    for start, limit in ((7, 1 << 30), (9, 100), (7 + 149, 3)):
        for path in (batches_to_canonical, lambda *a: slow(batches_to_canonical, *a)):
            got = path(data, start, limit)
            assert got is not None
            block, count, _ = got
            assert block[0] == VERSION_STARTS and check_block(block) == (block, count)


@pytest.mark.parametrize("codec", [0, 4])
def test_stamped_producer_fields_keep_the_batch_valid(codec):
    records = [Record(b"k%d" % i, b"v" * i, (), 1_700_000_000_000_000 + i) for i in range(20)]
    plain = encode_batch(records, 0, codec=codec)
    stamped = rec.stamp_producer(plain, 123456789, 7, 2_000_000)
    fields = rec.BATCH_BODY.unpack_from(stamped, rec.HEAD_SIZE)
    assert fields[4:7] == (123456789, 7, 2_000_000)  # producer id, epoch, first sequence
    assert rec.BATCH_BODY.unpack_from(plain, rec.HEAD_SIZE)[4:7] == (-1, -1, -1)
    crc = rec.BATCH_HEAD.unpack_from(stamped)[4]
    assert crc == crc32c.crc32c(stamped[rec.HEAD_SIZE :]) != rec.BATCH_HEAD.unpack_from(plain)[4]
    assert decode_batches(stamped, 0) == decode_batches(plain, 0)  # checks the CRC
    assert [r.value for r in decode_batches(stamped, 0)] == [r.value for r in records]
