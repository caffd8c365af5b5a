"""A produced 0.8 message set read in steps (``produce_steps``): plain sets and compressed
wrappers yield every ``step`` messages, and give the same records, or the same refusal, as the
reading in one go; a set of at most one step never yields."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.canonical import CANONICAL
from gateway.model import Record
from gateway.protocols.kafka08 import compression
from gateway.protocols.kafka08.messageset import (
    InvalidMessageSet,
    encode_message,
    encode_message_set,
    parse_produce,
    produce_steps,
)

RECORDS = [Record(b"k%d" % i if i % 3 else None, b"v%d" % i) for i in range(1000)]


def stepped(data: bytes, step: int) -> tuple[int, Any]:
    """(how many times the stepwise read yielded, its batch or the refusal it raised)."""
    steps = produce_steps(data, 7, 1 << 20, step)
    yields = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return yields, done.value
        except InvalidMessageSet as exc:
            return yields, (exc.code, str(exc))
        yields += 1


def pairs(batch: Any) -> list[tuple[bytes | None, bytes | None]]:
    return [(r.key, r.value) for r in batch.records]


@pytest.mark.parametrize("codec", [compression.NONE, compression.GZIP, compression.SNAPPY])
def test_a_large_set_is_read_in_steps_with_the_same_records(codec: int) -> None:
    data = encode_message_set(RECORDS, codec=codec)
    yields, got = stepped(data, 100)
    # plain: 9 yields between 10 steps; a wrapper: its decompression is a step of its own too
    assert yields == (9 if codec == compression.NONE else 10)
    assert pairs(got) == pairs(parse_produce(data, 7)) == [(r.key, r.value) for r in RECORDS]
    # one step: a plain set of at most ``step`` messages, an inflated one of at most ``step``
    # smallest messages' bytes (26 each)
    assert stepped(data, 1000 if codec == compression.NONE else 2000)[0] == 0


def test_two_wrappers_are_stepped_through_both() -> None:
    data = encode_message_set(RECORDS[:500], codec=compression.GZIP) + encode_message_set(
        RECORDS[500:], 500, codec=compression.GZIP
    )
    yields, got = stepped(data, 100)
    assert yields >= 9
    assert pairs(got) == [(r.key, r.value) for r in RECORDS]


@pytest.mark.parametrize("codec", [compression.NONE, compression.GZIP])
def test_a_bad_message_late_in_a_stepped_set_is_refused_as_in_one_go(codec: int) -> None:
    entries = [encode_message(r.key, r.value, i) for i, r in enumerate(RECORDS)]
    bad = bytearray(entries[900])
    bad[18:22] = (-5).to_bytes(4, "big", signed=True)  # key length -5 (and its CRC off)
    inner = b"".join(entries[:900]) + bytes(bad) + b"".join(entries[901:])
    data = (
        inner
        if codec == compression.NONE
        else encode_message(None, compression.compress(codec, inner), 999, 0, codec)
    )
    with pytest.raises(InvalidMessageSet) as info:
        parse_produce(data, 7)
    yields, got = stepped(data, 100)
    assert got == (info.value.code, str(info.value))
    assert yields >= 8


@pytest.mark.parametrize("codec", [compression.GZIP, compression.SNAPPY, compression.LZ4])
def test_one_magic_0_wrapper_is_read_into_a_block_like_a_plain_set(codec: int) -> None:
    """No object per record: the inner set goes the plain set's way (a canonical block)."""
    batch = parse_produce(encode_message_set(RECORDS, codec=codec), 7)
    assert batch.codec is CANONICAL and batch.count == len(RECORDS)
    assert [(r.key, r.value, r.timestamp_us) for r in batch.records] == [
        (r.key, r.value, 7) for r in RECORDS
    ]


def wrapped(inner: bytes) -> bytes:
    return encode_message(None, compression.compress(compression.GZIP, inner), 9, 0, 1)


def test_inside_one_wrapper_a_nested_wrapper_is_refused_a_bad_crc_not_checked() -> None:
    """As before and as the 0.8.2 broker: inner CRCs are not checked (the wrapper's is)."""
    entries = [encode_message(r.key, r.value, i) for i, r in enumerate(RECORDS[:10])]
    nested = encode_message_set(RECORDS[:3], codec=compression.GZIP)
    with pytest.raises(InvalidMessageSet, match="nested compressed message"):
        parse_produce(wrapped(b"".join(entries[:5]) + nested), 7)
    bad = bytearray(entries[5])
    bad[-1] ^= 0xFF  # the value's last byte: its CRC no longer matches
    batch = parse_produce(wrapped(b"".join(entries[:5]) + bytes(bad)), 7)
    assert [r.value for r in batch.records] == [r.value for r in RECORDS[:5]] + [bytes(bad[-2:])]
    with pytest.raises(InvalidMessageSet, match="CRC mismatch"):
        parse_produce(b"".join(entries[:5]) + bytes(bad), 7)  # a plain set's are


def test_a_magic_1_wrapper_keeps_its_records_timestamps() -> None:
    base_ms = 1_700_000_000_000
    stamped = [r._replace(timestamp_us=(base_ms + i) * 1000) for i, r in enumerate(RECORDS)]
    batch = parse_produce(encode_message_set(stamped, magic=1, codec=compression.GZIP), 7)
    assert [(r.key, r.value, r.timestamp_us) for r in batch.records] == [
        (r.key, r.value, r.timestamp_us) for r in stamped
    ]
