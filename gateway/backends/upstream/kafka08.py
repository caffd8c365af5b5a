"""Upstream Kafka 0.8: a Kafka 0.8 broker (or a gateway's Kafka 0.8 listener) through
``gateway.protocols.kafka08.client`` (the codec's client role, ``ClientConnection``).

Mapping: topics, partitions and offsets are Kafka's (``topic_prefix`` + name). Records are
produced as magic-1 messages (key, value, millisecond timestamp; nulls kept), acks -1; 0.8 has no
headers (dropped), and Fetch v0 answers are magic 0, so reads carry no timestamps (-1). Committed
offsets (with their metadata) are the broker's group offsets (OffsetCommit v1 as a simple,
generation -1 commit; OffsetFetch v1), so 0.8 consumers of the same group see them. Kafka 0.8
has no CreateTopics: topics are made with the cluster's tools or by its auto-creation
(``create_topic`` answers TOPIC_EXISTS for a topic that exists, else UNSUPPORTED); no topic
deletion, partition changes, time index (0.8's Offsets by time are per segment) or key-value
store (UNSUPPORTED). Watermarks come from Offsets (latest gives the high watermark and the log
start).
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
from gateway.protocols.kafka08 import codec as kc
from gateway.protocols.kafka08.client import Kafka08Client, Kafka08Error
from gateway.protocols.kafka08.messageset import InvalidMessageSet

_CODES = {
    1: ErrorCode.OFFSET_OUT_OF_RANGE,
    2: ErrorCode.CORRUPT_MESSAGE,
    5: ErrorCode.BACKEND_UNAVAILABLE,  # LeaderNotAvailable
    6: ErrorCode.BACKEND_UNAVAILABLE,  # NotLeaderForPartition
    7: ErrorCode.TIMEOUT,
    10: ErrorCode.RECORD_TOO_LARGE,
    14: ErrorCode.BACKEND_UNAVAILABLE,  # offsets load in progress
    15: ErrorCode.BACKEND_UNAVAILABLE,  # coordinator not available
    16: ErrorCode.NOT_COORDINATOR,
    17: ErrorCode.INVALID_TOPIC,
}
UNKNOWN_TOPIC_OR_PARTITION = 3


class Kafka08Upstream(UpstreamBackend):
    protocol = "kafka08"
    protocol_errors = (kc.RemoteProtocolError, InvalidMessageSet)
    capabilities = upstream_capabilities(
        headers=False,
        timestamps=False,
        topic_admin=False,
        delete_partitions=False,
        create_topics=False,
        committed_offsets=True,
    )

    async def _connect(self) -> Kafka08Client:
        return await Kafka08Client.connect(self.host, self.port)

    def stored_form(self, record: Record) -> Record:
        return Record(record.key, record.value, (), -1, record.offset)

    async def _kafka(self, fn: Any, what: str, retry: bool = True) -> Any:
        async def run(client: Kafka08Client) -> Any:
            try:
                return await fn(client)
            except Kafka08Error as exc:
                return exc

        result = await self.call(run, retry=retry)
        if isinstance(result, Kafka08Error):
            raise await self._error(result, what)
        return result

    async def _error(self, exc: Kafka08Error, what: str, topic: str = "") -> GatewayError:
        if exc.code == UNKNOWN_TOPIC_OR_PARTITION:
            return GatewayError(ErrorCode.UNKNOWN_PARTITION, f"{what}: {exc}")
        return GatewayError(_CODES.get(exc.code, ErrorCode.INTERNAL), f"{what}: {exc}")

    # ------------------------------------------------------------------ topics
    async def _partitions(self) -> dict[str, int]:
        """Every topic (upstream names) and its partition count; Metadata for all topics
        creates nothing."""
        meta = await self._kafka(lambda c: c.metadata([]), "metadata")
        return {t.topic: len(t.partitions) for t in meta.topics if t.error == 0}

    async def create_topic(
        self, name: str, partitions: int, config: tuple[tuple[str, str], ...] = ()
    ) -> TopicInfo:
        self.check_new_topic(name, partitions)
        if self.up(name) in await self._partitions():
            raise GatewayError(ErrorCode.TOPIC_EXISTS, f"topic {name!r} already exists")
        raise unsupported(
            "creating topics (Kafka 0.8 has no CreateTopics: use the cluster's tools)", self.name
        )

    async def list_topics(self) -> list[TopicInfo]:
        out = []
        for upstream_name, count in (await self._partitions()).items():
            name = self.down(upstream_name)
            if name is not None:
                out.append(self.info(name, count))
        return out

    async def _count(self, topic: str) -> int:
        count = (await self._partitions()).get(self.up(topic))
        if count is None:
            raise GatewayError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {topic!r}")
        return count

    async def topic(self, name: str) -> TopicInfo:
        return self.info(name, await self._count(name))

    async def _check(self, topic: str, partition: int) -> None:
        """UNKNOWN_TOPIC or UNKNOWN_PARTITION: 0.8 answers both with code 3."""
        self.check_partition(topic, partition, await self._count(topic))

    async def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        if partition < 0:
            raise GatewayError(ErrorCode.UNKNOWN_PARTITION, f"no partition {partition}")
        try:
            offsets = await self._kafka(
                lambda c: c.offsets(self.up(topic), partition, -1, 2), f"offsets {topic}"
            )
        except GatewayError as exc:
            if exc.code is ErrorCode.UNKNOWN_PARTITION:
                await self._check(topic, partition)
            raise
        hw = offsets[0]
        start = offsets[1] if len(offsets) > 1 else hw
        return PartitionInfo(topic, partition, start, hw)

    # ------------------------------------------------------------------ data
    async def _append(self, topic: str, partition: int, batch: RecordBatch) -> AppendResult:
        records = batch.records
        if not records:
            info = await self.partition_info(topic, partition)
            return AppendResult(partition, info.high_watermark, info.high_watermark - 1)
        try:
            base = await self._kafka(
                lambda c: c.produce(self.up(topic), partition, records, magic=1),
                f"produce {topic}/{partition}",
                retry=False,
            )
        except GatewayError as exc:
            if exc.code is ErrorCode.UNKNOWN_PARTITION:
                await self._check(topic, partition)
            raise
        max_ts = max((r.timestamp_us for r in records), default=-1)
        return AppendResult(partition, base, base + len(records) - 1, max_ts)

    async def read(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> list[RecordBatch]:
        if offset < 0:
            raise GatewayError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is negative")
        if partition < 0:
            raise GatewayError(ErrorCode.UNKNOWN_PARTITION, f"no partition {partition}")
        size = max(1024, min(max_bytes, 64 << 20))

        async def fetch(client: Kafka08Client) -> Any:
            nonlocal size
            while True:
                records, hw = await client.fetch(self.up(topic), partition, offset, size)
                if records or offset >= hw or size >= 64 << 20:
                    return records
                size *= 4  # a message larger than the fetch: ask for more, as 0.8 clients do

        try:
            records = await self._kafka(fetch, f"fetch {topic}/{partition}@{offset}")
        except GatewayError as exc:
            if exc.code is ErrorCode.UNKNOWN_PARTITION:
                await self._check(topic, partition)
            raise
        records = within(records, max_records, max_bytes)
        return [RecordBatch(records, base_offset=offset)] if records else []

    # ------------------------------------------------------------------ committed offsets
    async def commit_offset(
        self, group: str, topic: str, partition: int, offset: int, metadata: str
    ) -> None:
        await self._kafka(
            lambda c: c.commit(group, self.up(topic), partition, offset, metadata),
            f"offset commit {group} {topic}/{partition}",
            retry=False,
        )

    async def fetch_offset(self, group: str, topic: str, partition: int) -> tuple[int, str] | None:
        try:
            offset, metadata = await self._kafka(
                lambda c: c.fetch_offset(group, self.up(topic), partition),
                f"offset fetch {group} {topic}/{partition}",
            )
        except GatewayError as exc:
            if exc.code is ErrorCode.UNKNOWN_PARTITION:
                return None  # 0.8.2 answers 3 for a group with no offset there
            raise
        return None if offset < 0 else (offset, metadata)


def make(name: str, config: Any) -> Kafka08Upstream:
    return Kafka08Upstream(name, config)
