"""Record batches v2 in Produce and Fetch, sans-IO: what a produced batch becomes, what is
refused and with which Kafka error, and the Fetch records read back by the backend's reader."""

from __future__ import annotations

import struct

import crc32c
import pytest

from gateway.backends.kafka.records import BATCH_BODY, decode_batches, encode_batch
from gateway.model import Record, RecordBatch
from gateway.protocols.kafka.batches import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    MESSAGE_TOO_LARGE,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    UNSUPPORTED_FOR_MESSAGE_FORMAT,
    InvalidBatch,
    fetch_records,
    read_produced,
)

RECORDS = [
    Record(b"k%d" % i, b"v%d" % i, (("h", b"x%d" % i),), (1_700_000_000_000 + i) * 1000)
    for i in range(20)
]


def with_producer(batch: bytes, pid: int, epoch: int, seq: int, attrs: int | None = None) -> bytes:
    """``batch`` with its producer fields (and attributes) set, the CRC made right again."""
    data = bytearray(batch)
    fields = list(BATCH_BODY.unpack_from(data, 21))
    fields[4], fields[5], fields[6] = pid, epoch, seq
    if attrs is not None:
        fields[0] = attrs
    BATCH_BODY.pack_into(data, 21, *fields)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_a_produced_batch_keeps_keys_values_headers_timestamps(codec: int) -> None:
    data = with_producer(encode_batch(RECORDS, 0, codec=codec), 77, 3, 40)
    produced = read_produced(data, 1 << 20)
    assert (produced.producer_id, produced.producer_epoch, produced.base_sequence) == (77, 3, 40)
    assert produced.batch.count == 20
    assert [r[:4] for r in produced.batch.records] == [r[:4] for r in RECORDS]


def test_fetch_records_read_back_at_their_offsets() -> None:
    stored = RecordBatch(RECORDS, base_offset=1000)
    data = b"".join(fetch_records([stored], 0))
    got = decode_batches(data, 0)
    assert [r.offset for r in got] == list(range(1000, 1020))
    assert [r[:4] for r in got] == [r[:4] for r in RECORDS]


def test_too_large_batch_is_message_too_large() -> None:
    data = encode_batch(RECORDS, 0)
    with pytest.raises(InvalidBatch) as info:
        read_produced(data, len(data) - 1)
    assert info.value.code == MESSAGE_TOO_LARGE


def test_two_batches_in_one_partition_are_refused() -> None:
    data = encode_batch(RECORDS[:2], 0)
    with pytest.raises(InvalidBatch) as info:
        read_produced(data + data, 1 << 20)
    assert info.value.code == INVALID_RECORD


def test_old_message_format_is_refused() -> None:
    data = bytearray(encode_batch(RECORDS[:2], 0))
    data[16] = 1  # magic
    with pytest.raises(InvalidBatch) as info:
        read_produced(bytes(data), 1 << 20)
    assert info.value.code == UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_transactional_batch_is_refused() -> None:
    data = with_producer(encode_batch(RECORDS[:2], 0), 5, 0, 0, attrs=0x10)
    with pytest.raises(InvalidBatch) as info:
        read_produced(data, 1 << 20)
    assert info.value.code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_crc_mismatch_and_bad_compression_are_corrupt() -> None:
    data = bytearray(encode_batch(RECORDS[:2], 0))
    data[-1] ^= 0xFF
    with pytest.raises(InvalidBatch) as info:
        read_produced(bytes(data), 1 << 20)
    assert info.value.code == CORRUPT_MESSAGE
    zstd = bytearray(encode_batch(RECORDS, 0, codec=4))
    zstd[70:80] = b"\0" * 10
    broken = with_producer(bytes(zstd), -1, -1, -1)
    with pytest.raises(InvalidBatch) as info:
        read_produced(broken, 1 << 20)
    assert info.value.code == CORRUPT_MESSAGE


def test_an_empty_record_set_is_corrupt() -> None:
    with pytest.raises(InvalidBatch) as info:
        read_produced(b"", 1 << 20)
    assert info.value.code == CORRUPT_MESSAGE


def test_records_that_do_not_fill_the_batch_or_skip_a_delta_are_refused() -> None:
    """Large records (two-byte lengths) and many records (two-byte deltas) pass the walk; a
    batch whose records end early, or whose deltas skip, does not."""
    big = [Record(b"k", b"x" * 5000, (), 1_700_000_000_000_000)] * 3
    many = [Record(None, b"v%d" % i, (), -1) for i in range(300)]
    for records in (big, many):
        assert read_produced(encode_batch(records, 0), 1 << 20).batch.count == len(records)
    data = bytearray(encode_batch(many, 0))
    data[-1:] = b""  # one byte short: the header's length and the records disagree
    struct.pack_into(">i", data, 8, len(data) - 12)
    with pytest.raises(InvalidBatch) as info:
        read_produced(with_producer(bytes(data), -1, -1, -1), 1 << 20)
    assert info.value.code == CORRUPT_MESSAGE
    skipping = bytearray(encode_batch(many[:2], 0))
    # record 1's offset delta (zigzag 1 -> 2) becomes 2 (zigzag 4): a gap
    second = 61 + 1 + skipping[61] // 2  # start of record 1: after record 0's length and body
    pos = second + 1 + 1 + 1  # its length varint, attributes, timestamp delta
    assert skipping[pos] == 2
    skipping[pos] = 4
    with pytest.raises(InvalidBatch) as info:
        read_produced(with_producer(bytes(skipping), -1, -1, -1), 1 << 20)
    assert info.value.code == INVALID_RECORD


def test_a_whole_native_batch_goes_back_as_sent_a_part_of_it_re_encoded() -> None:
    sent = encode_batch(RECORDS, 0, codec=3)  # lz4, as a client compressed it
    stored = read_produced(sent, 1 << 20).batch.stored_at(500)
    whole = b"".join(fetch_records([stored], 0))
    assert whole[8:] == sent[8:] and struct.unpack_from(">q", whole)[0] == 500
    part = stored.slice(505, 5)  # a read from inside the batch
    got = decode_batches(b"".join(fetch_records([part], 0)), 0)
    assert [r.offset for r in got] == list(range(505, 510))
    assert [r[:4] for r in got] == [r[:4] for r in RECORDS[5:10]]


def test_microsecond_timestamps_go_out_in_milliseconds_without_a_header() -> None:
    """Records another protocol stored with microseconds reach a Kafka client at the
    millisecond, with only their own headers."""
    records = [
        Record(b"k", b"v%d" % i, (("h", b"1"),), 1_700_000_000_123_456 + i) for i in range(3)
    ]
    got = decode_batches(b"".join(fetch_records([RecordBatch(records, base_offset=7)], 0)), 0)
    assert [r.offset for r in got] == [7, 8, 9]
    assert [r.timestamp_us for r in got] == [1_700_000_000_123_000] * 3
    assert all(r.headers == (("h", b"1"),) for r in got)
