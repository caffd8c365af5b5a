"""Record batches v2 in Produce requests and Fetch answers, sans-IO, over the Kafka backend's
record codec (``gateway.backends.kafka.records``): a produced batch becomes a canonical block
without per-record objects, stored records go out as one v2 batch per stored batch at its true
backend offsets."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.backends.kafka.records import (
    BATCH_BODY,
    BATCH_HEAD,
    CONTROL_FLAG,
    HEAD_SIZE,
    OVERHEAD,
    TRANSACTIONAL_FLAG,
    KafkaRecordError,
    canonical_to_batch,
    decode_batches,
)
from gateway.backends.kafka.to_canonical import batches_to_canonical
from gateway.canonical import CANONICAL
from gateway.model import RecordBatch

NO_PRODUCER = -1


class InvalidBatch(ValueError):
    """A produced record set the gateway refuses; ``code`` is the Kafka error code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_RECORD = 87
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    batch: RecordBatch
    producer_id: int
    producer_epoch: int
    base_sequence: int


def read_produced(data: bytes | memoryview, max_bytes: int) -> ProducedBatch:
    """The one v2 batch of a Produce (v3+) partition. Raises InvalidBatch: not exactly one
    batch, not magic 2, a CRC mismatch, a control or transactional batch, above ``max_bytes``
    (the listener's message_max_bytes, as a broker's message.max.bytes: per batch)."""
    buf = bytes(data)
    if len(buf) > max_bytes:
        raise InvalidBatch(
            f"record batch of {len(buf)} bytes is above message_max_bytes {max_bytes}",
            MESSAGE_TOO_LARGE,
        )
    if len(buf) < HEAD_SIZE + BATCH_BODY.size:
        raise InvalidBatch(f"record set of {len(buf)} bytes holds no batch", CORRUPT_MESSAGE)
    _base, length, _epoch, magic, _crc = BATCH_HEAD.unpack_from(buf, 0)
    if magic != 2:
        raise InvalidBatch(
            f"message format magic {magic}: v3+ Produce carries record batches v2",
            UNSUPPORTED_FOR_MESSAGE_FORMAT,
        )
    if OVERHEAD + length != len(buf):
        raise InvalidBatch("a Produce partition must hold exactly one record batch", INVALID_RECORD)
    attrs, last_delta, _bts, _mts, pid, pepoch, bseq, count = BATCH_BODY.unpack_from(buf, HEAD_SIZE)
    if attrs & (CONTROL_FLAG | TRANSACTIONAL_FLAG):
        raise InvalidBatch(
            "transactional and control batches are refused (no transactions)",
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        )
    if count <= 0 or last_delta != count - 1:
        raise InvalidBatch(
            f"batch of {count} records with last offset delta {last_delta}", INVALID_RECORD
        )
    try:
        canonical = batches_to_canonical(buf, 0, count)
        if canonical is not None and canonical[1] == count:
            block, n, max_ts = canonical
            batch = RecordBatch(encoded=block, codec=CANONICAL, count=n, max_timestamp_us=max_ts)
        else:
            records = decode_batches(buf, 0, count)
            if len(records) != count:
                raise InvalidBatch(
                    f"batch says {count} records, holds {len(records)}", CORRUPT_MESSAGE
                )
            batch = RecordBatch([r._replace(offset=-1) for r in records])
    except KafkaRecordError as exc:
        raise InvalidBatch(str(exc), CORRUPT_MESSAGE) from None
    except ValueError as exc:  # a codec's error on corrupt compressed data
        raise InvalidBatch(f"cannot decompress the batch: {exc}", CORRUPT_MESSAGE) from None
    return ProducedBatch(batch, pid, pepoch, bseq)


def fetch_records(batches: tuple[RecordBatch, ...] | list[RecordBatch], now_ms: int) -> list[bytes]:
    """Stored batches as v2 batches (uncompressed), each at its backend offset."""
    out = []
    for batch in batches:
        if not batch.count:
            continue
        block = batch.encode(CANONICAL)
        data, _n = canonical_to_batch(block, now_ms, batch.base_offset)
        out.append(data)
    return out
