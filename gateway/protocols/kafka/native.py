"""How a produced Kafka record batch v2 is kept in the model: the batch exactly as the client
sent it (compressed or not, headers, timestamps, producer fields), so a Kafka consumer gets it
back with only its base offset set, and no per-record work on either side. Other protocols (and
backends that store records) decode it to records with the Kafka backend's reader.

The block is one v2 batch whose records have offset deltas 0..count-1 (checked on produce by
:func:`gateway.protocols.kafka.batches.read_produced`). As a stored native block (the embedded
log's payload version 2) its layout is an on-disk format: a change needs a new codec name."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from gateway.backends.kafka.records import KafkaRecordError, decode_batches, encode_batch
from gateway.model import ErrorCode, GatewayError, Record, now_us

_OFFSET = struct.Struct(">q")


class KafkaBatchCodec:
    name = "kafka-v2"

    def encode(self, records: Sequence[Record]) -> bytes:
        return encode_batch(records, now_us() // 1000)

    def decode(self, data: bytes | memoryview, base_offset: int) -> list[Record]:
        try:
            records = decode_batches(data, 0)
        except (KafkaRecordError, ValueError) as exc:
            raise GatewayError(ErrorCode.CORRUPT_MESSAGE, f"stored Kafka batch: {exc}") from None
        return [r._replace(offset=base_offset + r.offset) for r in records]


KAFKA_V2 = KafkaBatchCodec()


def at_offset(block: bytes | memoryview, base_offset: int) -> list[bytes | memoryview]:
    """The stored batch with its base offset set, as pieces (the rest is not copied). The base
    offset is outside the batch's CRC, as the broker's own offset assignment is."""
    return [_OFFSET.pack(base_offset), memoryview(block)[8:]]
