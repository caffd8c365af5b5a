"""Upstream TANK: a TANK broker (or a gateway's TANK listener) through
``gateway.protocols.tank.client.TankClient`` (the codec's client role).

Mapping: offset = sequence number - 1; timestamps are milliseconds (the microseconds below a
millisecond are dropped); keys up to 255 bytes (longer keys keep their first 255), a null key and
an empty one are both "no key"; a null value is stored as empty content; headers do not exist in
TANK and are dropped. TANK's produce answer has no offsets: the append's offsets are read back as
the high watermark right after it (exact while one writer appends to the partition). TANK has no
topic deletion, partition changes, time index, consumer offsets or key-value store: those raise
UNSUPPORTED.
"""

from __future__ import annotations

from typing import Any

from gateway.backends.base import unsupported
from gateway.backends.upstream.base import UpstreamBackend, upstream_capabilities, within
from gateway.model import (
    AppendResult,
    ErrorCode,
    GatewayError,
    PartitionInfo,
    Record,
    RecordBatch,
    TopicInfo,
)
from gateway.protocols.tank import codec as tc
from gateway.protocols.tank.client import TankClient, TankError

_PRODUCE_ERRORS = {
    tc.P_UNKNOWN_PARTITION: ErrorCode.UNKNOWN_PARTITION,
    tc.P_UNKNOWN_TOPIC: ErrorCode.UNKNOWN_TOPIC,
    tc.P_READ_ONLY: ErrorCode.READ_ONLY,
    tc.P_INVALID_SEQNUMS: ErrorCode.INVALID_REQUEST,
    tc.P_NO_LEADER: ErrorCode.BACKEND_UNAVAILABLE,
    tc.P_OTHER_LEADER: ErrorCode.BACKEND_UNAVAILABLE,
    tc.P_INSUFFICIENT_REPLICAS: ErrorCode.BACKEND_UNAVAILABLE,
    tc.P_IO_FAULT: ErrorCode.BACKEND_UNAVAILABLE,
}
_CONSUME_ERRORS = {
    tc.C_BOUNDARY: ErrorCode.OFFSET_OUT_OF_RANGE,
    tc.C_UNKNOWN_PARTITION: ErrorCode.UNKNOWN_PARTITION,
    tc.C_NO_LEADER: ErrorCode.BACKEND_UNAVAILABLE,
    tc.C_OTHER_LEADER: ErrorCode.BACKEND_UNAVAILABLE,
    tc.C_SYSTEM_ERROR: ErrorCode.BACKEND_UNAVAILABLE,
}


class TankUpstream(UpstreamBackend):
    protocol = "tank"
    serial_appends = True  # the produce answer has no offsets: read from the watermark after
    protocol_errors = (tc.RemoteProtocolError,)
    capabilities = upstream_capabilities(
        headers=False,
        topic_admin=False,
        delete_partitions=False,
    )

    async def _connect(self) -> TankClient:
        return await TankClient.connect(self.host, self.port, b"gateway-upstream")

    def stored_form(self, record: Record) -> Record:
        ts = record.timestamp_us
        return Record(
            record.key[:255] if record.key else None,
            record.value or b"",
            (),
            ts - ts % 1000 if ts >= 0 else ts,
            record.offset,
        )

    # ------------------------------------------------------------------ topics
    async def create_topic(
        self, name: str, partitions: int, config: tuple[tuple[str, str], ...] = ()
    ) -> TopicInfo:
        self.check_new_topic(name, partitions)
        err = await self.call(lambda c: c.create_topic(self.up(name), partitions), retry=False)
        if err == tc.CT_EXISTS:
            raise GatewayError(ErrorCode.TOPIC_EXISTS, f"topic {name!r} already exists")
        if err != tc.CT_OK:
            code = ErrorCode.INVALID_TOPIC if err == tc.CT_INVALID else ErrorCode.INTERNAL
            raise GatewayError(code, f"TANK CreateTopic {name!r}: error {err}")
        self._topic_config[name] = tuple(config)
        return self.info(name, partitions)

    async def list_topics(self) -> list[TopicInfo]:
        found = await self.call(lambda c: c.discover_topics())
        out = []
        for upstream_name, partitions in found:
            name = self.down(upstream_name)
            if name is not None:
                out.append(self.info(name, partitions))
        return out

    async def _watermarks(self, topic: str) -> list[tuple[int, int]]:
        parts = await self.call(lambda c: c.discover_partitions(self.up(topic)))
        if not parts:
            raise GatewayError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {topic!r}")
        return parts

    async def topic(self, name: str) -> TopicInfo:
        return self.info(name, len(await self._watermarks(name)))

    async def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        parts = await self._watermarks(topic)
        self.check_partition(topic, partition, len(parts))
        first, hwmark = parts[partition]
        return PartitionInfo(topic, partition, first - 1 if first > 0 else hwmark, hwmark)

    async def delete_topic(self, name: str) -> None:
        raise unsupported("deleting topics (TANK has no such request)", self.name)

    # ------------------------------------------------------------------ data
    async def _append(self, topic: str, partition: int, batch: RecordBatch) -> AppendResult:
        records = batch.records
        if not records:
            info = await self.partition_info(topic, partition)
            return AppendResult(partition, info.high_watermark, info.high_watermark - 1)
        messages = [
            (
                r.key[:255] if r.key else None,
                r.value or b"",
                r.timestamp_us // 1000 if r.timestamp_us >= 0 else 0,
            )
            for r in records
        ]

        async def produce(client: TankClient) -> Any:
            status = await client.produce(self.up(topic), partition, messages, compress=False)
            if status is None:
                return None, []
            return status, await client.discover_partitions(self.up(topic))

        status, parts = await self.call(produce, retry=False)  # under append_lock
        if status is None:
            raise GatewayError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {topic!r}")
        if status != tc.P_OK:
            code = _PRODUCE_ERRORS.get(status, ErrorCode.INTERNAL)
            raise GatewayError(code, f"TANK produce {topic}/{partition}: status {status:#04x}")
        hwmark = parts[partition][1]
        max_ts = max(m[2] for m in messages) * 1000
        return AppendResult(partition, hwmark - len(records), hwmark - 1, max_ts)

    async def read(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> list[RecordBatch]:
        if offset < 0:
            raise GatewayError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is negative")
        if partition < 0:
            raise GatewayError(ErrorCode.UNKNOWN_PARTITION, f"no partition {partition}")

        async def consume(client: TankClient) -> Any:
            try:
                return await client.consume(
                    self.up(topic), partition, offset + 1, fetch_size=max(64, max_bytes)
                )
            except TankError as exc:
                return exc

        found = await self.call(consume)
        if isinstance(found, TankError):
            if found.code == 0xFF and "unknown topic" in str(found):
                raise GatewayError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {topic!r}")
            code = _CONSUME_ERRORS.get(found.code, ErrorCode.INTERNAL)
            raise GatewayError(code, f"TANK consume {topic}/{partition}@{offset}: {found}")
        messages, hwmark = found
        if offset > hwmark:
            raise GatewayError(
                ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} above the high watermark {hwmark}"
            )
        records = within(
            [
                Record(m.key or None, m.content, (), m.timestamp_ms * 1000, m.seq - 1)
                for m in messages
            ],
            max_records,
            max_bytes,
        )
        if not records:
            return []
        batch = RecordBatch(records, base_offset=offset)
        batch.max_timestamp_us = max(r.timestamp_us for r in records)
        return [batch]


def make(name: str, config: Any) -> TankUpstream:
    return TankUpstream(name, config)
