"""The memory backend: everything in process memory, gone on exit. For tests, demos and as the
baseline of benchmarks. Batches are kept as they were appended (no re-encoding)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from gateway.backends import BackendSpec
from gateway.backends.base import (
    Backend,
    Capabilities,
    check_partitions,
    check_topic_name,
    offset_mismatch,
)
from gateway.model import (
    AppendResult,
    ErrorCode,
    GatewayError,
    PartitionInfo,
    RecordBatch,
    TopicInfo,
    now_us,
)


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    pass


@dataclass
class _Partition:
    batches: list[RecordBatch] = field(default_factory=list)
    bases: list[int] = field(default_factory=list)
    high_watermark: int = 0
    log_start: int = 0


@dataclass
class _Topic:
    info: TopicInfo
    partitions: list[_Partition]


def _max_timestamp(batch: RecordBatch) -> int:
    if batch.max_timestamp_us >= 0:
        return batch.max_timestamp_us
    return max((r.timestamp_us for r in batch.records), default=-1)


class MemoryBackend(Backend):
    capabilities = Capabilities(durable=False)
    type_name = "memory"

    def __init__(self, name: str = "memory") -> None:
        super().__init__(name)
        self._topics: dict[str, _Topic] = {}
        self._kv: dict[str, dict[str, bytes]] = {}

    def _topic(self, name: str) -> _Topic:
        t = self._topics.get(name)
        if t is None:
            raise GatewayError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}")
        return t

    def _partition(self, topic: str, partition: int) -> _Partition:
        t = self._topic(topic)
        if not 0 <= partition < len(t.partitions):
            raise GatewayError(
                ErrorCode.UNKNOWN_PARTITION,
                f"topic {topic!r} has no partition {partition} (it has {len(t.partitions)})",
            )
        return t.partitions[partition]

    async def create_topic(
        self, name: str, partitions: int, config: tuple[tuple[str, str], ...] = ()
    ) -> TopicInfo:
        check_topic_name(name)
        check_partitions(partitions)
        if name in self._topics:
            raise GatewayError(ErrorCode.TOPIC_EXISTS, f"topic {name!r} already exists")
        info = TopicInfo(name, partitions, tuple(config))
        self._topics[name] = _Topic(info, [_Partition() for _ in range(partitions)])
        return info

    async def delete_topic(self, name: str) -> None:
        self._topic(name)
        del self._topics[name]

    async def list_topics(self) -> list[TopicInfo]:
        return [t.info for t in self._topics.values()]

    async def topic(self, name: str) -> TopicInfo:
        return self._topic(name).info

    async def create_partitions(self, name: str, count: int) -> TopicInfo:
        t = self._topic(name)
        check_partitions(len(t.partitions) + count)
        t.partitions.extend(_Partition() for _ in range(count))
        t.info = TopicInfo(name, len(t.partitions), t.info.config)
        return t.info

    async def delete_partitions(self, name: str, count: int) -> TopicInfo:
        t = self._topic(name)
        check_partitions(len(t.partitions) - count)
        del t.partitions[len(t.partitions) - count :]
        t.info = TopicInfo(name, len(t.partitions), t.info.config)
        return t.info

    async def append(
        self,
        topic: str,
        partition: int,
        batch: RecordBatch,
        expected_offset: int | None = None,
    ) -> AppendResult:
        p = self._partition(topic, partition)
        # no await from here to the end: the check and the append are one step
        if expected_offset is not None and expected_offset != p.high_watermark:
            raise offset_mismatch(topic, partition, expected_offset, p.high_watermark)
        if batch.count == 0:
            return AppendResult(partition, p.high_watermark, p.high_watermark - 1)
        base = p.high_watermark
        stored = batch.stored_at(base)
        stored.max_timestamp_us = _max_timestamp(stored)
        p.batches.append(stored)
        p.bases.append(base)
        p.high_watermark = base + stored.count
        self._appended(topic, partition, p.high_watermark)
        return AppendResult(partition, base, p.high_watermark - 1, now_us())

    async def read(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> list[RecordBatch]:
        p = self._partition(topic, partition)
        if offset < p.log_start or offset > p.high_watermark:
            raise GatewayError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside [{p.log_start}, {p.high_watermark}] "
                f"of {topic}/{partition}",
            )
        out: list[RecordBatch] = []
        i = bisect.bisect_right(p.bases, offset) - 1
        got_records = got_bytes = 0
        while 0 <= i < len(p.batches) and got_records < max_records and offset < p.high_watermark:
            view = p.batches[i].slice(offset, max_records - got_records)
            if out and got_bytes + view.size_bytes > max_bytes:
                break
            out.append(view)
            got_records += view.count
            got_bytes += view.size_bytes
            offset = view.last_offset + 1
            i += 1
            if got_bytes >= max_bytes:
                break
        return out

    async def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        p = self._partition(topic, partition)
        return PartitionInfo(topic, partition, p.log_start, p.high_watermark)

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp_us: int) -> int:
        p = self._partition(topic, partition)
        for batch in p.batches:
            if batch.max_timestamp_us < timestamp_us:
                continue
            for r in batch.records:
                if r.timestamp_us >= timestamp_us:
                    return r.offset
        return p.high_watermark

    async def kv_get(self, namespace: str, key: str) -> bytes | None:
        return self._kv.get(namespace, {}).get(key)

    async def kv_put(self, namespace: str, key: str, value: bytes) -> None:
        self._kv.setdefault(namespace, {})[key] = bytes(value)

    async def kv_delete(self, namespace: str, key: str) -> None:
        self._kv.get(namespace, {}).pop(key, None)

    async def kv_scan(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        items = self._kv.get(namespace, {}).items()
        return sorted((k, v) for k, v in items if k.startswith(prefix))


def _factory(name: str, options: Any, config: Any) -> Backend:
    return MemoryBackend(name)


BACKEND = BackendSpec("memory", MemoryConfig, _factory)
