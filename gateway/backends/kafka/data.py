"""The records of the Kafka backend: appends (Produce, conditional appends under the
partition's gate), reads (Fetch, converted to canonical blocks, with read-ahead), watermarks and
offsets by time (ListOffsets)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import trio
from kio.schema.errors import ErrorCode as KErr
from kio.schema.fetch.v10 import request as fetch_req
from kio.schema.list_offsets.v4 import request as lo_req
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from gateway.backends.base import AppendGate, landed_elsewhere, offset_mismatch
from gateway.backends.kafka.cluster import (
    RETRIABLE_KAFKA,
    KafkaCluster,
    TopicMeta,
    kafka_error,
    ms,
)
from gateway.backends.kafka.config import CODECS, ISOLATION_LEVELS
from gateway.backends.kafka.connection import unavailable
from gateway.backends.kafka.produce import UNKNOWN_OFFSET, Producer
from gateway.backends.kafka.records import (
    KafkaRecordError,
    canonical_to_batch,
    decode_batches,
    dense_batches,
    encode_batch,
    only_markers_from,
)
from gateway.backends.kafka.to_canonical import batches_to_canonical
from gateway.canonical import CANONICAL
from gateway.model import (
    APPEND_SENT,
    AppendResult,
    ErrorCode,
    GatewayError,
    PartitionInfo,
    Record,
    RecordBatch,
    now_us,
)

FRESH_S = 0.02
AHEAD_S = 0.5  # read-ahead state older than this is not used
AHEAD_MAX = 64  # partitions with read-ahead state, at most


class _Fetched(NamedTuple):
    """One partition of a Fetch answer. ``hw`` is what readers may read up to: the high
    watermark, or under read-committed the last stable offset."""

    data: bytes
    hw: int
    start: int
    aborted: tuple[tuple[int, int], ...] | None  # (producer id, first offset); None: uncommitted


@dataclass
class _Ahead:
    """Read-ahead state of one partition (see ``RecordStore.read``): the canonical batch last
    served from (its records past the client's cut are served from it) and the Fetch already
    sent for the offset after it."""

    last: RecordBatch  # canonical, from the last Fetch answer used
    at: float  # when that answer arrived
    next_offset: int  # where the read-ahead Fetch starts (last.last_offset + 1)
    done: trio.Event
    max_bytes: int = 1 << 20
    result: _Fetched | None = None
    result_at: float = 0.0


class RecordStore:
    """Produce, Fetch and ListOffsets on the partitions of a :class:`KafkaCluster`."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster
        self.config = cluster.config
        self._gate = AppendGate()
        self._hw_hint: dict[tuple[str, int], int] = {}
        # (log start, high watermark, when) from the last Fetch answer: a Fetch right after a
        # read (the core asks for the high watermark of every fetch result) needs no round trip
        self._fresh: dict[tuple[str, int], tuple[int, int, float]] = {}
        self._ahead: dict[tuple[str, int], _Ahead] = {}
        self._isolation = ISOLATION_LEVELS[cluster.config.isolation]
        self._codec = CODECS.index(cluster.config.compression)
        self.producer = Producer(cluster, self.partition_error)

    async def append(
        self,
        topic: str,
        partition: int,
        batch: RecordBatch,
        expected_offset: int | None = None,
    ) -> AppendResult:
        """Kafka has no conditional produce (KIP-27 was never done). A conditional append holds
        the partition's gate exclusive across a fresh high-watermark read and the produce, so no
        append of this gateway comes in between; a producer outside this gateway still can, and
        then the records land at other offsets: that is reported (INTERNAL, see
        ``landed_elsewhere``), not undone."""
        if expected_offset is None:
            async with self._gate.shared(topic, partition):
                return await self._append(topic, partition, batch)
        async with self._gate.exclusive(topic, partition):
            self._fresh.pop((topic, partition), None)  # a cached watermark may be stale
            hw = (await self.partition_info(topic, partition)).high_watermark
            if hw != expected_offset:
                raise offset_mismatch(topic, partition, expected_offset, hw)
            result = await self._append(topic, partition, batch)
        if batch.count and result.base_offset != expected_offset:
            raise landed_elsewhere(topic, partition, expected_offset, result.base_offset)
        return result

    async def _append(self, topic: str, partition: int, batch: RecordBatch) -> AppendResult:
        meta = await self.cluster.topic_meta(topic, partition)
        now = now_us()
        if not batch.count:
            info = await self.partition_info(topic, partition)
            return AppendResult(partition, info.high_watermark, info.high_watermark - 1, now)
        block = batch.encoded_as(CANONICAL)
        if block is not None:  # a canonical block (Kafka 0.8 produce): no per-record objects
            data, count = canonical_to_batch(block, now // 1000, codec=self._codec)
        else:
            records = batch.records
            data, count = encode_batch(records, now // 1000, codec=self._codec), len(records)
        base = await self.produce(topic, partition, meta, data, count)
        if base == UNKNOWN_OFFSET:  # a lost answer's retry, stored before: offsets not known
            self._fresh.pop((topic, partition), None)
            return AppendResult(partition, UNKNOWN_OFFSET, UNKNOWN_OFFSET, now)
        self._hw_hint[(topic, partition)] = base + count
        self._fresh.pop((topic, partition), None)
        return AppendResult(partition, base, base + count - 1, now)

    async def produce(
        self, topic: str, partition: int, meta: TopicMeta, data: bytes, count: int = 1
    ) -> int:
        """The base offset of ``data`` (one batch of ``count`` records); see ``produce.py``."""
        return await self.producer.produce(topic, partition, meta, data, count, APPEND_SENT.get())

    async def _list_offset(self, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
        """(offset, timestamp) from ListOffsets: -1 latest, -2 earliest, else a time in ms."""
        meta = await self.cluster.topic_meta(topic, partition)
        request = lo_req.ListOffsetsRequest(
            replica_id=BrokerId(-1),
            isolation_level=i8(0),
            topics=(
                lo_req.ListOffsetsTopic(
                    name=TopicName(topic),
                    partitions=(
                        lo_req.ListOffsetsPartition(
                            partition_index=i32(partition),
                            current_leader_epoch=i32(-1),
                            timestamp=i64(timestamp),
                        ),
                    ),
                ),
            ),
        )
        response = await self.cluster.call(request, self.cluster.leader(meta, partition))
        for t in response.topics:
            for p in t.partitions:
                if int(p.error_code):
                    raise await self.partition_error(
                        topic, partition, p.error_code, f"list offsets of {topic}/{partition}"
                    )
                return int(p.offset), int(p.timestamp)
        raise GatewayError(ErrorCode.INTERNAL, "empty ListOffsets response")

    async def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        """From a Fetch at the last high watermark seen (no records decoded): its answer carries
        the log start and high watermark. (Tansu 0.6 answers ListOffsets "latest" with the base
        offset of the last batch plus one, so ListOffsets is not used for the high watermark.)"""
        fresh = self._fresh.get((topic, partition))
        if fresh is not None and trio.current_time() - fresh[2] < FRESH_S:
            return PartitionInfo(topic, partition, fresh[0], fresh[1])
        hint = self._hw_hint.get((topic, partition), 0)
        try:
            _, hw, start = await self.fetch(topic, partition, hint, 1, 0)
        except GatewayError as exc:
            if exc.code is not ErrorCode.OFFSET_OUT_OF_RANGE:
                raise
            earliest, _ = await self._list_offset(topic, partition, -2)
            _, hw, start = await self.fetch(topic, partition, max(earliest, 0), 1, 0)
        return PartitionInfo(topic, partition, max(start, 0), max(hw, 0))

    async def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, max_records: int = 1 << 62
    ) -> tuple[list[Record], int, int]:
        got = await self._fetch_raw(topic, partition, offset, max_bytes)
        try:
            return decode_batches(got.data, offset, max_records, got.aborted), got.hw, got.start
        except KafkaRecordError as exc:
            raise GatewayError(ErrorCode.CORRUPT_MESSAGE, f"{topic}/{partition}: {exc}") from exc

    async def _fetch_raw(
        self, topic: str, partition: int, offset: int, max_bytes: int, wait_ms: int = 1
    ) -> _Fetched:
        """One Fetch of one partition. ``wait_ms``: the broker's max wait (min bytes is 1, so
        it answers as soon as it has a record). Under read-committed the broker answers up to
        the last stable offset, with the aborted transactions among the batches it sends."""
        meta = await self.cluster.topic_meta(topic, partition)
        request = fetch_req.FetchRequest(
            replica_id=BrokerId(-1),
            max_wait=ms(wait_ms),  # Tansu answers a zero wait with no partitions at all
            min_bytes=i32(1),
            max_bytes=i32(max(max_bytes, 1)),
            isolation_level=i8(self._isolation),
            session_id=i32(0),
            session_epoch=i32(-1),
            topics=(
                fetch_req.FetchTopic(
                    topic=TopicName(topic),
                    partitions=(
                        fetch_req.FetchPartition(
                            partition=i32(partition),
                            current_leader_epoch=i32(-1),
                            fetch_offset=i64(offset),
                            log_start_offset=i64(-1),
                            partition_max_bytes=i32(max(max_bytes, 1)),
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        response = await self.cluster.call(request, self.cluster.leader(meta, partition))
        if int(response.error_code):
            raise kafka_error(response.error_code, f"fetch from {topic}/{partition}")
        for t in response.responses:
            for p in t.partitions:
                if int(p.error_code):
                    raise await self.partition_error(
                        topic, partition, p.error_code, f"fetch from {topic}/{partition}"
                    )
                hw = int(p.high_watermark)
                aborted = None
                if self._isolation:
                    lso = int(p.last_stable_offset)
                    if 0 <= lso < hw:
                        hw = lso
                    aborted = tuple(
                        (int(a.producer_id), int(a.first_offset))
                        for a in p.aborted_transactions or ()
                    )
                data = p.records or b""
                if 0 <= offset < hw and only_markers_from(data, offset, aborted) >= hw:
                    # nothing but transaction markers (or aborted records) from here to the
                    # end: for readers the log ends here (a Kafka 0.8 client cannot skip them,
                    # and would wait at ``offset`` below a high watermark it never reaches)
                    hw = offset
                start = int(p.log_start_offset)
                self._hw_hint[(topic, partition)] = hw
                self._fresh[(topic, partition)] = (max(start, 0), hw, trio.current_time())
                return _Fetched(data, hw, start, aborted)
        raise unavailable(f"fetch from {topic}/{partition}: the broker answered no partition")

    async def read(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> list[RecordBatch]:
        """One Fetch. The records come back as one canonical block (no per-record objects,
        what the embedded log returns), or decoded when not dense (compaction, transactions).

        Read-ahead (on by default; ``read_ahead = false`` turns it off), for a consumer catching
        up: when an answer ends below the high watermark, the Fetch for the offset after it is
        sent at once, in the background, so the broker's work and the round trip overlap with
        the consumer handling this answer. A read from
        inside the last answer (a Kafka 0.8 client cuts answers at its max bytes, in other
        units than v2 records) gets the rest of that answer plus the read-ahead one. Offsets
        below the high watermark never change in Kafka, so these are the records a Fetch would
        get now; state older than ``AHEAD_S`` is not used, and creating or deleting the topic
        here, or a partition error, drops it."""
        ahead = self._ahead.get((topic, partition))
        if ahead is not None:
            served = await self._read_from_ahead(
                ahead, topic, partition, offset, max_records, max_bytes
            )
            if served is not None:
                return served
            self._ahead.pop((topic, partition), None)
        got = await self._fetch_raw(topic, partition, offset, max_bytes)
        self._check_range(topic, partition, offset, got)
        batches = self._batch_from(topic, partition, got, offset, max_records, max_bytes)
        if not batches and 0 <= offset < got.hw:
            # records may exist there but none came: the first batch is larger than max_bytes
            # and the broker sent a partial one, or (Tansu, loaded) its 1 ms wait ran out first;
            # or only transaction markers or aborted records lie between here and ``hw``
            room = max(max_bytes, 1 << 24)
            got = await self._fetch_raw(topic, partition, offset, room, wait_ms=500)
            self._check_range(topic, partition, offset, got)
            batches = self._batch_from(topic, partition, got, offset, max_records, room)
        if batches and ahead is None and self.config.read_ahead:  # not after a miss: two
            # consumers at other offsets would thrash
            self._read_ahead(topic, partition, batches[-1], got.hw, max_bytes)
        return batches

    @staticmethod
    def _check_range(topic: str, partition: int, offset: int, got: _Fetched) -> None:
        """OFFSET_OUT_OF_RANGE only outside [log start, high watermark]: an offset inside a gap
        (a transaction marker, aborted or compacted records) reads the records after it."""
        start = max(got.start, 0)
        if offset < start or offset > got.hw:
            raise GatewayError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} of {topic}/{partition} is outside its range "
                f"[{start}, {got.hw}] (log start, high watermark)",
            )

    async def _read_from_ahead(
        self,
        ahead: _Ahead,
        topic: str,
        partition: int,
        offset: int,
        max_records: int,
        max_bytes: int,
    ) -> list[RecordBatch] | None:
        """The records from ``offset`` out of the read-ahead state, or None when it does not
        hold them (the caller then fetches)."""
        last = ahead.last
        if trio.current_time() - ahead.at >= AHEAD_S:
            return None
        out: list[RecordBatch] = []
        if last.first_offset <= offset < ahead.next_offset:
            rest = last.slice(offset, max_records)
            # enough for this read (a Kafka 0.8 entry is at most ~1.2x a canonical record, so
            # below this the client takes all of it): the read-ahead answer waits for the next
            if rest.count >= max_records or rest.size_bytes * 5 >= max_bytes * 4:
                return [rest]
            out.append(rest)
        elif offset != ahead.next_offset:
            return None
        await ahead.done.wait()
        if ahead.result is None or trio.current_time() - ahead.result_at >= AHEAD_S:
            return out or None
        got = ahead.result
        left = max_records - sum(b.count for b in out)
        following = self._batch_from(
            topic, partition, got, ahead.next_offset, left, ahead.max_bytes
        )
        if not following or following[0].first_offset != ahead.next_offset:
            return out or None
        out.extend(following)
        # the core asks for the high watermark next: the one of this answer, as if it had just
        # arrived (it is at most AHEAD_S old; every Fetch answer is a little)
        self._fresh[(topic, partition)] = (max(got.start, 0), got.hw, trio.current_time())
        self._ahead.pop((topic, partition), None)
        self._read_ahead(topic, partition, following[-1], got.hw, ahead.max_bytes)
        return out

    def _read_ahead(
        self, topic: str, partition: int, batch: RecordBatch, hw: int, max_bytes: int
    ) -> None:
        """Keep ``batch`` (canonical) and, when the partition has more, fetch what follows it."""
        following = batch.last_offset + 1
        if batch.encoded_as(CANONICAL) is None or following >= hw or self.cluster.nursery is None:
            return
        if len(self._ahead) >= AHEAD_MAX:
            self._ahead.clear()
        ahead = _Ahead(batch, trio.current_time(), following, trio.Event(), max_bytes)
        self._ahead[(topic, partition)] = ahead
        self.cluster.nursery.start_soon(self._fetch_ahead, topic, partition, ahead)

    async def _fetch_ahead(self, topic: str, partition: int, ahead: _Ahead) -> None:
        try:
            ahead.result = await self._fetch_raw(
                topic, partition, ahead.next_offset, ahead.max_bytes
            )
            ahead.result_at = trio.current_time()
        except GatewayError:
            pass  # the read from there fetches again and reports the error
        finally:
            ahead.done.set()

    def forget_ahead(self, topic: str) -> None:
        for key in [k for k in self._ahead if k[0] == topic]:
            del self._ahead[key]

    def _batch_from(
        self,
        topic: str,
        partition: int,
        got: _Fetched,
        offset: int,
        max_records: int,
        max_bytes: int = 1 << 62,
    ) -> list[RecordBatch]:
        """The records from ``offset`` in a Fetch answer, as batches of consecutive offsets: one
        canonical block when they are dense (no per-record objects; it stops converting at
        ``max_bytes``, as the broker sends whole batches beyond it, which the reader would drop),
        else decoded records cut at every gap (transaction markers, aborted transactions,
        compaction), each batch keeping the offsets the cluster gave its records."""
        try:
            canonical = batches_to_canonical(
                got.data, max(offset, 0), max_records, max_bytes, got.aborted
            )
            if canonical is not None:
                block, count, max_ts = canonical
                if not count:
                    return []
                batch = RecordBatch(
                    encoded=block,
                    codec=CANONICAL,
                    count=count,
                    base_offset=offset,
                    max_timestamp_us=max_ts,
                )
                return [batch]
            records = decode_batches(got.data, max(offset, 0), max_records, got.aborted)
            return dense_batches(records)
        except KafkaRecordError as exc:
            raise GatewayError(ErrorCode.CORRUPT_MESSAGE, f"{topic}/{partition}: {exc}") from exc

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp_us: int) -> int:
        """ListOffsets by the millisecond, then a scan for the microsecond (the sub-millisecond
        part of a timestamp is a record header, which the broker does not index)."""
        target_ms = max(timestamp_us, 0) // 1000
        offset, _ = await self._list_offset(topic, partition, target_ms)
        hw = (await self.partition_info(topic, partition)).high_watermark
        if offset < 0:
            return hw
        while offset < hw:
            records, hw, _ = await self.fetch(topic, partition, offset, 1 << 20)
            if not records:
                break
            for r in records:
                if r.timestamp_us >= timestamp_us:
                    return r.offset
            offset = records[-1].offset + 1
        return hw

    async def partition_error(self, name: str, partition: int, err: Any, what: str) -> GatewayError:
        e = KErr(int(err))
        self.forget_ahead(name)
        if e is KErr.unknown_topic_or_partition:
            try:
                await self.cluster.topic_meta(name, partition, fresh=True)
            except GatewayError as exc:
                return exc
            return unavailable(f"{what}: {name}/{partition} is not available yet")
        if e in RETRIABLE_KAFKA:
            self.cluster.topics.pop(name, None)
        return kafka_error(e, what)
