"""Record batches v2 in Produce and Fetch, sans-IO: what a produced batch becomes, what is
refused and with which Kafka error, and the Fetch records read back by the backend's reader."""

from __future__ import annotations

import random
import struct

import crc32c
import pytest

from gateway.backends.kafka.records import (
    BATCH_BODY,
    BATCH_HEAD,
    compress,
    decode_batches,
    encode_batch,
    varint,
)
from gateway.backends.kafka.to_canonical import batches_to_canonical
from gateway.canonical import CANONICAL
from gateway.model import Record, RecordBatch
from gateway.protocols.kafka.batches import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    INVALID_TIMESTAMP,
    MESSAGE_TOO_LARGE,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    UNSUPPORTED_FOR_MESSAGE_FORMAT,
    InvalidBatch,
    KeylessRecord,
    _fast_walk,
    _walk,
    fetch_records,
    produced_steps,
    read_produced,
)
from gateway.protocols.steps import finish

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


@pytest.mark.parametrize("micros", [0, 250])
def test_other_protocols_reserved_headers_stay_out_of_a_kafka_fetch(micros: int) -> None:
    """A record another protocol stored with its own fields (``_gw.iggy.id``,
    ``_gw.liftbridge.correlation_id``) reaches a Kafka client with its other headers only,
    whether its timestamps are whole milliseconds or not."""
    stored = [
        Record(
            b"k%d" % i,
            b"v%d" % i,
            (
                ("_gw.iggy.id", b"\x01" * 16),
                ("h", b"x%d" % i),
                ("_gw.liftbridge.correlation_id", b"c"),
            ),
            (1_700_000_000_000 + i) * 1000 + micros,
        )
        for i in range(20)
    ]
    got = decode_batches(b"".join(fetch_records([RecordBatch(stored, base_offset=5)], 0)), 0)
    assert [r.headers for r in got] == [(("h", b"x%d" % i),) for i in range(20)]
    assert [r.timestamp_us for r in got] == [(1_700_000_000_000 + i) * 1000 for i in range(20)]
    assert [r.offset for r in got] == list(range(5, 25))


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


# ------------------------------------------------------------------ every record is checked

BASE_MS = 1_700_000_000_000


def record(
    i: int,
    key: bytes = b"k",
    value: bytes = b"v",
    headers: tuple[tuple[bytes, bytes | None], ...] = ((b"h", b"x"),),
    ts_delta: int = 0,
    *,
    klen: int | None = None,
    vlen: int | None = None,
    nh: int | None = None,
    hklen: int | None = None,
    hvlen: int | None = None,
    tail: bytes = b"",
) -> bytes:
    """Record ``i``'s body (without its length prefix), any length overridable."""
    parts = [b"\0", varint(ts_delta), varint(i)]
    parts += [varint(len(key) if klen is None else klen), key]
    parts += [varint(len(value) if vlen is None else vlen), value]
    parts.append(varint(len(headers) if nh is None else nh))
    for name, hval in headers:
        parts += [varint(len(name) if hklen is None else hklen), name]
        if hval is None:
            parts.append(varint(-1))
        else:
            parts += [varint(len(hval) if hvlen is None else hvlen), hval]
    return b"".join(parts) + tail


def raw_batch(bodies: list[bytes], codec: int = 0, lengths: list[int] | None = None) -> bytes:
    """One v2 batch of these record bodies (each prefixed with its length, or ``lengths``)."""
    lengths = lengths or [len(b) for b in bodies]
    records = compress(codec, b"".join(varint(n) + b for n, b in zip(lengths, bodies, strict=True)))
    n = len(bodies)
    after_crc = BATCH_BODY.pack(codec, n - 1, BASE_MS, BASE_MS, -1, -1, -1, n) + records
    head = BATCH_HEAD.pack(0, 9 + len(after_crc), -1, 2, crc32c.crc32c(after_crc))
    return head + after_crc


def refused(bodies: list[bytes], codec: int, lengths: list[int] | None = None) -> int:
    with pytest.raises(InvalidBatch) as info:
        read_produced(raw_batch(bodies, codec, lengths), 1 << 24)
    return info.value.code


MALFORMED = {
    "key length past the end": (record(1, klen=200), CORRUPT_MESSAGE),
    "value length past the end": (record(1, vlen=90, headers=()), CORRUPT_MESSAGE),
    "header count too large": (record(1, nh=1000), CORRUPT_MESSAGE),
    "header count a little too large": (record(1, nh=2), CORRUPT_MESSAGE),
    "negative header count": (record(1, nh=-1), CORRUPT_MESSAGE),
    "record shorter than its prefix": (record(1, tail=b"\0\0"), CORRUPT_MESSAGE),
    "key length -2": (record(1, key=b"", klen=-2), CORRUPT_MESSAGE),
    "value length -5": (record(1, value=b"", vlen=-5), CORRUPT_MESSAGE),
    "header key length -1": (record(1, headers=((b"", b"x"),), hklen=-1), CORRUPT_MESSAGE),
    "header value length -3": (record(1, headers=((b"h", b""),), hvlen=-3), CORRUPT_MESSAGE),
    "header value past the end": (record(1, hvlen=9), CORRUPT_MESSAGE),
    "header name above 16 KiB": (record(1, headers=((b"\xff" * 16385, b"x"),)), CORRUPT_MESSAGE),
    "timestamp past 64-bit nanoseconds": (record(1, ts_delta=1 << 62), INVALID_TIMESTAMP),
    "timestamp below -1": (record(1, ts_delta=-BASE_MS - 2), INVALID_TIMESTAMP),
    "gateway microseconds header not digits": (
        record(1, headers=((b"_gw.us", b"abc"),)),
        INVALID_RECORD,
    ),
    "gateway microseconds header too long": (
        record(1, headers=((b"_gw.us", b"1234"),)),
        INVALID_RECORD,
    ),
}


@pytest.mark.parametrize("codec", [0, 4])
@pytest.mark.parametrize("shape", sorted(MALFORMED))
def test_a_malformed_record_in_a_valid_batch_is_refused(shape: str, codec: int) -> None:
    """The batch's CRC, count, offset deltas and the record lengths are right; one record's
    fields are not. A broker walks every record; so does the gateway."""
    body, code = MALFORMED[shape]
    assert refused([record(0), body, record(2)], codec) == code


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_a_length_prefix_shorter_or_longer_than_its_record_is_refused(codec: int) -> None:
    bodies = [record(0), record(1, value=b"x" * 300), record(2)]
    sizes = [len(b) for b in bodies]
    for wrong in (sizes[1] - 2, sizes[1] + 2):
        assert refused(bodies, codec, [sizes[0], wrong, sizes[2]]) == CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", [0, 4])
def test_unusual_but_valid_records_pass_and_read_back(codec: int) -> None:
    """Nulls (-1), empty header names, wide varints (a 20000-byte value, 70 headers, a
    timestamp delta past two bytes), the gateway's own microseconds header: all valid."""
    bodies = [
        record(0, key=b"", klen=-1, value=b"", vlen=-1, headers=((b"", None),)),
        record(1, value=b"z" * 20_000, ts_delta=100_000),
        record(2, headers=tuple((b"h%d" % j, b"v") for j in range(70)), ts_delta=-5),
        record(3, headers=((b"_gw.us", b"999"), (b"\xff" * 16384, b"w")), ts_delta=-BASE_MS - 1),
    ]
    produced = read_produced(raw_batch(bodies, codec), 1 << 24)
    got = decode_batches(b"".join(fetch_records([produced.batch.stored_at(0)], 0)), 0)
    assert [(r.key, r.value) for r in got[:2]] == [(None, None), (b"k", b"z" * 20_000)]
    assert got[0].headers == (("", b""),)
    assert len(got[2].headers) == 70
    assert CANONICAL.decode(CANONICAL.encode(got), 0)[3].headers[0][1] == b"w"  # another reader
    assert [r.timestamp_us for r in got] == [
        BASE_MS * 1000,
        (BASE_MS + 100_000) * 1000,
        (BASE_MS - 5) * 1000,
        -1000 + 999,
    ]


def test_whatever_passes_decodes_for_every_reader() -> None:
    """Random damage to the records of a valid batch (CRC made right again): whatever the
    gateway accepts, the Kafka reader, the canonical reader and the canonical writer take
    without an error (so no accepted batch is unreadable for another protocol), and the fast
    check never accepts what the full walk refuses."""
    rng = random.Random(7)
    bodies = [
        record(i, key=b"key%d" % i, value=b"v" * (i * 40), headers=((b"h", b"x"),) * (i % 3))
        for i in range(5)
    ]
    valid = raw_batch(bodies)
    accepted = 0
    for _ in range(3000):
        data = bytearray(valid)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(61, len(data))] = rng.randrange(256)
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
        try:
            produced = read_produced(bytes(data), 1 << 24)
        except InvalidBatch:
            continue
        accepted += 1
        records = decode_batches(bytes(data), 0)
        assert len(records) == 5
        CANONICAL.encode(records)
        assert batches_to_canonical(bytes(data), 0, 100) is not None
        assert produced.batch.count == 5
    assert accepted > 50  # damage to keys and values only: still valid records


def test_the_fast_check_agrees_with_the_full_walk() -> None:
    """The records the fast walk vouches for pass the full walk; it vouches for all of a
    valid batch of one- and two-byte varints."""
    rng = random.Random(11)
    bodies = [record(i, value=b"v" * rng.randrange(200), ts_delta=i * 50) for i in range(20)]
    records = b"".join(varint(len(b)) + b for b in bodies)
    assert _fast_walk(records, 0, 20) == (20, len(records))
    stopped_early = 0
    for _ in range(3000):
        data = bytearray(records)
        data[rng.randrange(len(data))] = rng.randrange(256)
        buf = bytes(data)
        vouched, end = _fast_walk(buf, 0, 20)
        stopped_early += vouched < 20
        assert _walk(buf, 0, end, vouched, -BASE_MS, BASE_MS) == (vouched, end)  # no raise
    assert stopped_early > 100  # damage to lengths and deltas, not only to values


def steps_taken(data: bytes, step: int) -> tuple[int, object]:
    """(how many times the stepwise read yielded, its result or the InvalidBatch it raised)."""
    steps = produced_steps(data, 1 << 24, step)
    yields = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return yields, done.value
        except InvalidBatch as exc:
            return yields, (exc.code, str(exc))
        yields += 1


@pytest.mark.parametrize("codec", [0, 4])
def test_a_large_batch_is_checked_in_steps_with_the_same_result(codec: int) -> None:
    """1000 records in steps of 100: 10 steps (and the decompression one of its own), the
    batch read as in one go; a batch of at most one step never yields."""
    data = raw_batch([record(i, value=b"v%d" % i, ts_delta=i) for i in range(1000)], codec)
    yields, got = steps_taken(data, 100)
    assert yields == 9 + (codec != 0)
    whole = read_produced(data, 1 << 24)
    assert isinstance(got, type(whole)) and got.batch.count == whole.batch.count == 1000
    assert [r[:4] for r in got.batch.records] == [r[:4] for r in whole.batch.records]
    assert steps_taken(data, 1000)[0] == 0


@pytest.mark.parametrize("codec", [0, 4])
def test_a_malformed_record_late_in_a_stepped_batch_is_refused_as_in_one_go(codec: int) -> None:
    bodies = [record(i) for i in range(1000)]
    for at, bad in ((999, record(999, klen=200)), (555, record(554)), (700, record(700, nh=-1))):
        data = raw_batch(bodies[:at] + [bad] + bodies[at + 1 :], codec)
        with pytest.raises(InvalidBatch) as info:
            read_produced(data, 1 << 24)
        yields, got = steps_taken(data, 100)
        assert got == (info.value.code, str(info.value))
        assert yields >= at // 100 - 1  # the records before it were checked in steps


def test_trailing_bytes_after_a_stepped_batch_are_refused() -> None:
    bodies = [record(i) for i in range(300)]
    lengths = [len(b) for b in bodies]
    data = raw_batch(bodies[:-1] + [bodies[-1] + b"\0\0"], 0, lengths)
    assert steps_taken(data, 100)[1] == (
        CORRUPT_MESSAGE,
        "2 bytes after the batch's 300 records",
    )


def test_the_careful_walk_steps_by_bytes_too() -> None:
    """Records the fast walk leaves to the careful one (64 headers each, 3-byte offset
    deltas...): a step stops after about a megabyte whatever the step's record count."""
    headers = tuple((b"h%d" % j, b"x" * 200) for j in range(64))  # ~13 KB a record
    data = raw_batch([record(i, headers=headers) for i in range(400)])  # ~5 MB
    yields, got = steps_taken(data, 10_000)
    assert 3 <= yields <= 6
    assert finish(produced_steps(data, 1 << 24, 10_000)).batch.count == 400


def keyless_at(data: bytes, step: int = 10_000) -> int:
    """The index KeylessRecord names for ``data`` as a compacted topic's batch."""
    with pytest.raises(KeylessRecord) as info:
        finish(produced_steps(data, 1 << 24, step, keyed=True))
    assert info.value.code == INVALID_RECORD
    return info.value.index


@pytest.mark.parametrize("codec", [0, 1, 4])
def test_a_compacted_topics_batch_needs_a_key_on_every_record(codec: int) -> None:
    nokey = {"key": b"", "klen": -1}
    bodies = [record(0), record(1, **nokey), record(2, key=b""), record(3, **nokey)]
    data = raw_batch(bodies, codec)
    assert read_produced(data, 1 << 24).batch.count == 4  # any other topic takes it
    assert keyless_at(data) == 1  # the first record without a key is named
    # an empty key is a key; long keys, many headers (the careful walk) are checked too
    many = tuple((b"h%d" % i, b"x") for i in range(70))
    keyed = [record(0, key=b""), record(1, key=b"k" * 300), record(2, headers=many)]
    assert read_produced(raw_batch(keyed, codec), 1 << 24, keyed=True).batch.count == 3
    assert keyless_at(raw_batch([*keyed, record(3, headers=many, **nokey)], codec)) == 3
    # the batch's other faults answer first, as a broker's do (it checks every record)
    late_ts = [record(0, **nokey), record(1, ts_delta=1 << 62)]
    with pytest.raises(InvalidBatch) as info:
        read_produced(raw_batch(late_ts, codec), 1 << 24, keyed=True)
    assert info.value.code == INVALID_TIMESTAMP
    malformed = [record(0, **nokey), record(1, nh=1000)]
    with pytest.raises(InvalidBatch) as info:
        read_produced(raw_batch(malformed, codec), 1 << 24, keyed=True)
    assert info.value.code == CORRUPT_MESSAGE


def test_keyless_records_are_found_across_steps() -> None:
    nokey = {"key": b"", "klen": -1}
    for where in ([7], [1, 7], [9]):
        bodies = [record(i, **nokey) if i in where else record(i) for i in range(10)]
        assert keyless_at(raw_batch(bodies), step=3) == where[0]
    # the fast walk leaves a null key to the careful walk only when asked to
    records = b"".join(varint(len(b)) + b for b in bodies)
    assert _fast_walk(records, 0, 10) == (10, len(records))
    assert _fast_walk(records, 0, 10, 0, True)[0] == 9
