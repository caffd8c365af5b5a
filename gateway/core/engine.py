"""The core: executes the model's commands against the routed backends.

Sessions call ``await core.execute(command)`` and get the command's result or a GatewayError.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import structlog
import trio

from gateway.backends.base import Backend
from gateway.core.backend_groups import BackendGroupCoordinator
from gateway.core.classic import ClassicGroups
from gateway.core.group_store import SharedGroupCoordinator
from gateway.core.groups import GroupCoordinator
from gateway.core.idempotence import ProducerRegistry
from gateway.core.names import check_command, check_topic
from gateway.core.partitioner import partition_for_key
from gateway.core.router import Router
from gateway.core.waiters import Waiters
from gateway.fdlimit import default_partition_cap
from gateway.model import (
    AppendResult,
    Command,
    CommitOffset,
    CommittedOffset,
    CreatePartitions,
    CreateTopic,
    DeletePartitions,
    DeleteTopic,
    DescribeGroup,
    DescribeTopic,
    ErrorCode,
    Fetch,
    FetchOffset,
    FetchResult,
    GatewayError,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    ListOffsets,
    ListOffsetsResult,
    ListTopics,
    OffsetSpec,
    Partitioning,
    Ping,
    Produce,
    ProduceResult,
    Record,
    RecordBatch,
    Stats,
    StatsResult,
    SyncGroup,
    TopicDescription,
    TopicInfo,
)
from gateway.observability import BACKEND_ERRORS, BACKEND_LATENCY, labelled, limit_hit, snake_case

log = structlog.get_logger("gateway.core")

R = TypeVar("R")
_Handler = Callable[[Any], Awaitable[Any]]
"""A row of the handler table; ``Command.handled_by`` checked the row when the table was built,
so ``execute`` returns its result as the command's ``R`` with no cast on the hot path."""


class CreationRate:
    """``max_topics_created_per_s``: a token bucket (burst: one second's worth) shared by every
    topic or partition creation of the process, explicit or automatic. 0 means unlimited."""

    def __init__(self, per_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_s = per_s
        self._clock = clock
        self._tokens = max(1.0, per_s)
        self._stamp = clock()

    def take(self) -> None:
        if self.per_s <= 0:
            return
        now = self._clock()
        self._tokens = min(max(1.0, self.per_s), self._tokens + (now - self._stamp) * self.per_s)
        self._stamp = now
        if self._tokens < 1:
            limit_hit("max_topics_created_per_s", "server", log)
            raise GatewayError(
                ErrorCode.BACKEND_UNAVAILABLE,
                f"topics are being created faster than max_topics_created_per_s "
                f"({self.per_s:g}); retry later",
            )
        self._tokens -= 1


class Core:
    def __init__(
        self,
        backends: Mapping[str, Backend],
        routes: list[tuple[str, str]],
        *,
        auto_create_topics: bool = True,
        default_partitions: int = 1,
        max_topics: int = 10_000,
        max_partitions_per_topic: int = 10_000,
        max_partitions_total: int = 0,
        max_topics_created_per_s: float = 0,
        group_assignment: str = "range",
        group_lease_ms: int = 10_000,
        max_group_members: int = 1000,
        max_kafka_groups: int = 10_000,
        max_producer_states: int = 100_000,
    ) -> None:
        self.max_topics = max_topics
        self.max_partitions_per_topic = max_partitions_per_topic
        self.max_partitions_total = max_partitions_total  # 0: derived from the file limit
        self.creations = CreationRate(max_topics_created_per_s)
        self._creating = 0  # partitions of creates under way (reserved against the budgets)
        self._creating_topics = 0
        self.router = Router(backends, routes)
        self.waiters = Waiters()
        self.groups: GroupCoordinator
        default_groups = self.router.default_backend.capabilities.groups
        if default_groups == "backend":
            # the backend's server runs the groups (an upstream broker): every gateway on it
            # sees the broker's one group
            self.groups = BackendGroupCoordinator(
                self.router.backend_for,
                self.router.default_backend,
                lambda: self.router.backends.values(),
                default_protocol=group_assignment,
                max_members=max_group_members,
            )
        elif self.router.default_backend.capabilities.shared_groups:
            # several gateways on this backend: one group, kept in the backend
            self.groups = SharedGroupCoordinator(
                self.router.backend_for,
                self.router.default_backend,
                lambda: self.router.backends.values(),
                default_protocol=group_assignment,
                lease_ms=group_lease_ms,
                max_members=max_group_members,
            )
        else:
            self.groups = GroupCoordinator(
                self.router.backend_for,
                self.router.default_backend,
                lambda: self.router.backends.values(),
                default_protocol=group_assignment,
                max_members=max_group_members,
            )
        self.classic = ClassicGroups(self.groups, max_kafka_groups)  # Kafka's groups
        self._joins_refused: set[tuple[str, str]] = set()  # (log event, backend) logged
        self.producers = ProducerRegistry(max_producer_states)
        self.auto_create_topics = auto_create_topics
        self.default_partitions = default_partitions
        self._round_robin = itertools.count()
        for backend in backends.values():
            backend.append_listener = self.waiters.notify
        self._handlers: dict[type[Command[Any]], _Handler] = dict(
            [
                CreateTopic.handled_by(self._create_topic),
                DeleteTopic.handled_by(self._delete_topic),
                ListTopics.handled_by(self._list_topics),
                DescribeTopic.handled_by(self._describe_topic),
                CreatePartitions.handled_by(self._create_partitions),
                DeletePartitions.handled_by(self._delete_partitions),
                Produce.handled_by(self.produce),
                Fetch.handled_by(self.fetch),
                ListOffsets.handled_by(self._list_offsets),
                CommitOffset.handled_by(self._commit),
                FetchOffset.handled_by(self._fetch_offset),
                JoinGroup.handled_by(self._join),
                SyncGroup.handled_by(self._sync),
                Heartbeat.handled_by(self._heartbeat),
                LeaveGroup.handled_by(self._leave),
                DescribeGroup.handled_by(self._describe_group),
                Stats.handled_by(self._stats),
                Ping.handled_by(self._ping),
            ]
        )

    @property
    def backends(self) -> dict[str, Backend]:
        return self.router.backends

    async def execute(self, command: Command[R]) -> R:
        """Run ``command`` on its routed backend: its result, or a GatewayError."""
        handler = self._handlers.get(type(command))
        if handler is None:
            raise GatewayError(ErrorCode.INVALID_REQUEST, f"unknown command {command!r}")
        check_command(command)  # no empty names, no control characters (core/names.py)
        topic = getattr(command, "topic", None)
        backend = self.router.backend_for(topic).name if topic else "-"
        name = snake_case(type(command).__name__)
        started = time.perf_counter()
        try:
            return await handler(command)
        except GatewayError as exc:
            BACKEND_ERRORS.labels(backend=backend, code=exc.code.value).inc()
            raise
        finally:
            labelled(BACKEND_LATENCY, backend, name).observe(time.perf_counter() - started)

    # ------------------------------------------------------------------ topics
    async def _check_limits(self, new_topic: bool, partitions: int, added: int = 0) -> None:
        """``partitions``: the topic's count after the change; ``added``: how many are new. On
        success ``added`` is reserved (``_creating``) until the caller's create ends, so
        concurrent creates cannot all pass the partition budget together."""
        if partitions > self.max_partitions_per_topic:
            raise GatewayError(
                ErrorCode.INVALID_PARTITIONS,
                f"{partitions} partitions exceed max_partitions_per_topic "
                f"({self.max_partitions_per_topic})",
            )
        if new_topic:
            count = self._creating_topics
            for backend in self.router.backends.values():
                count += len(await backend.list_topics())
            if count >= self.max_topics:
                raise GatewayError(
                    ErrorCode.INVALID_REQUEST,
                    f"the gateway already has {count} topics (max_topics = {self.max_topics})",
                )
        cap = self.max_partitions_total or default_partition_cap()
        total = 0
        for backend in self.router.backends.values():
            total += sum(info.partitions for info in await backend.list_topics())
        total += self._creating
        if total + added > cap:
            limit_hit("max_partitions_total", "server", log, partitions=total, asked=added)
            raise GatewayError(
                ErrorCode.INVALID_PARTITIONS,
                f"the gateway holds {total} partitions; {added} more would exceed "
                f"max_partitions_total ({cap})",
            )
        self.creations.take()
        self._creating += added
        self._creating_topics += new_topic

    async def _create_topic(self, cmd: CreateTopic) -> TopicInfo:
        partitions = cmd.partitions if cmd.partitions is not None else self.default_partitions
        try:  # an existing topic is "exists", whatever the budgets say
            await self.router.backend_for(cmd.topic).topic(cmd.topic)
        except GatewayError as exc:
            if exc.code is not ErrorCode.UNKNOWN_TOPIC:
                raise
        else:
            raise GatewayError(ErrorCode.TOPIC_EXISTS, f"topic {cmd.topic!r} already exists")
        await self._check_limits(True, partitions, partitions)
        try:
            return await self.router.backend_for(cmd.topic).create_topic(
                cmd.topic, partitions, cmd.config
            )
        finally:
            self._creating -= partitions
            self._creating_topics -= 1

    async def _delete_topic(self, cmd: DeleteTopic) -> None:
        await self.router.backend_for(cmd.topic).delete_topic(cmd.topic)
        self.waiters.notify_all()

    async def _list_topics(self, cmd: ListTopics) -> list[TopicInfo]:
        seen: dict[str, TopicInfo] = {}
        for backend in self.router.backends.values():
            for info in await backend.list_topics():
                # a topic is listed by the backend its route points to
                if self.router.backend_for(info.name) is backend:
                    seen.setdefault(info.name, info)
        return [seen[name] for name in sorted(seen)]

    async def topic(self, name: str, create: bool = False) -> TopicInfo:
        check_topic(name, ErrorCode.INVALID_TOPIC if create else ErrorCode.UNKNOWN_TOPIC)
        backend = self.router.backend_for(name)
        try:
            return await backend.topic(name)
        except GatewayError as exc:
            if exc.code is not ErrorCode.UNKNOWN_TOPIC or not (create and self.auto_create_topics):
                raise
        await self._check_limits(True, self.default_partitions, self.default_partitions)
        try:
            return await backend.create_topic(name, self.default_partitions)
        except GatewayError as err:
            if err.code is ErrorCode.TOPIC_EXISTS:  # created concurrently
                return await backend.topic(name)
            raise
        finally:
            self._creating -= self.default_partitions
            self._creating_topics -= 1

    async def _describe_topic(self, cmd: DescribeTopic) -> TopicDescription:
        info = await self.topic(cmd.topic, cmd.create)
        backend = self.router.backend_for(cmd.topic)
        parts = tuple([await backend.partition_info(cmd.topic, p) for p in range(info.partitions)])
        return TopicDescription(info, parts)

    async def _create_partitions(self, cmd: CreatePartitions) -> TopicInfo:
        current = (await self.router.backend_for(cmd.topic).topic(cmd.topic)).partitions
        await self._check_limits(False, current + cmd.count, cmd.count)
        try:
            return await self.router.backend_for(cmd.topic).create_partitions(cmd.topic, cmd.count)
        finally:
            self._creating -= cmd.count

    async def _delete_partitions(self, cmd: DeletePartitions) -> TopicInfo:
        info = await self.router.backend_for(cmd.topic).delete_partitions(cmd.topic, cmd.count)
        self.waiters.notify_all()
        return info

    # ------------------------------------------------------------------ data
    async def produce(self, cmd: Produce) -> ProduceResult:
        backend = self.router.backend_for(cmd.topic)
        if cmd.expected_offset is not None:
            if cmd.partition is None:
                raise GatewayError(
                    ErrorCode.INVALID_REQUEST,
                    "a produce with an expected offset must name its partition",
                )
            if cmd.expected_offset < 0:
                raise GatewayError(
                    ErrorCode.INVALID_REQUEST,
                    f"expected offset {cmd.expected_offset} is negative",
                )
        if cmd.partition is not None:
            if cmd.producer_id is not None and cmd.sequence is not None:
                result = await self.producers.append(
                    backend,
                    cmd.topic,
                    cmd.partition,
                    cmd.batch,
                    cmd.producer_id,
                    cmd.producer_epoch,
                    cmd.sequence,
                    cmd.expected_offset,
                )
            else:
                result = await backend.append(
                    cmd.topic, cmd.partition, cmd.batch, cmd.expected_offset
                )
            return ProduceResult(cmd.topic, (result,))
        info = await backend.topic(cmd.topic)
        if cmd.partitioning is Partitioning.KEY_HASH:
            by_partition: dict[int, list[Record]] = {}
            rr = next(self._round_robin) % info.partitions
            for record in cmd.batch.records:
                p = partition_for_key(record.key, info.partitions) if record.key is not None else rr
                by_partition.setdefault(p, []).append(record)
            appends: list[AppendResult] = []
            for p in sorted(by_partition):
                appends.append(await backend.append(cmd.topic, p, RecordBatch(by_partition[p])))
            return ProduceResult(cmd.topic, tuple(appends))
        p = next(self._round_robin) % info.partitions
        return ProduceResult(cmd.topic, (await backend.append(cmd.topic, p, cmd.batch),))

    async def fetch(self, cmd: Fetch) -> FetchResult:
        """Read from ``cmd.offset``; at the log end wait (max_wait_ms) until ``min_bytes``."""
        backend = self.router.backend_for(cmd.topic)
        deadline = trio.current_time() + cmd.max_wait_ms / 1000
        batches: list[RecordBatch] = []
        offset = cmd.offset
        got_records = got_bytes = 0
        while True:
            try:
                new = await backend.read(
                    cmd.topic,
                    cmd.partition,
                    offset,
                    cmd.max_records - got_records,
                    max(1, cmd.max_bytes - got_bytes) if batches else cmd.max_bytes,
                )
            except GatewayError as exc:
                if exc.code is not ErrorCode.CORRUPT_MESSAGE or not batches:
                    raise
                break  # serve what came before the damage; the next fetch reaches it
            for b in new:
                batches.append(b)
                got_records += b.count
                got_bytes += b.size_bytes
                offset = b.last_offset + 1
            if (
                got_bytes >= cmd.min_bytes
                or got_records >= cmd.max_records
                or got_bytes >= cmd.max_bytes
                or trio.current_time() >= deadline
            ):
                break
            if backend.capabilities.notifies_appends:
                part = await backend.partition_info(cmd.topic, cmd.partition)
                if part.high_watermark > offset:
                    continue
                await self.waiters.wait(cmd.topic, cmd.partition, deadline)
            else:
                target = offset

                async def has_data(target: int = target) -> bool:
                    info = await backend.partition_info(cmd.topic, cmd.partition)
                    return info.high_watermark > target

                await self.waiters.poll(has_data, deadline)
        part = await backend.partition_info(cmd.topic, cmd.partition)
        return FetchResult(
            cmd.topic, cmd.partition, tuple(batches), part.high_watermark, part.log_start_offset
        )

    async def _list_offsets(self, cmd: ListOffsets) -> ListOffsetsResult:
        backend = self.router.backend_for(cmd.topic)
        part = await backend.partition_info(cmd.topic, cmd.partition)
        if cmd.timestamp_us == OffsetSpec.LATEST:
            offset = part.high_watermark
        elif cmd.timestamp_us == OffsetSpec.EARLIEST:
            offset = part.log_start_offset
        else:
            offset = await backend.offset_for_timestamp(cmd.topic, cmd.partition, cmd.timestamp_us)
        return ListOffsetsResult(offset, part.log_start_offset, part.high_watermark)

    # ------------------------------------------------------------------ groups
    async def _partition_count(self, topic: str) -> int:
        try:
            return (await self.router.backend_for(topic).topic(topic)).partitions
        except GatewayError as exc:
            if exc.code is ErrorCode.UNKNOWN_TOPIC:
                return 0
            raise

    async def _commit(self, cmd: CommitOffset) -> None:
        generation = cmd.generation
        if generation >= 0 and cmd.member_id and self.classic.has(cmd.group):
            self.classic.check_generation(cmd.group, cmd.member_id, generation)
            generation = -1  # fenced here; the coordinator only stores it
        await self.groups.commit(
            cmd.group,
            cmd.topic,
            cmd.partition,
            cmd.offset,
            cmd.metadata,
            generation,
            cmd.member_id,
        )

    async def _fetch_offset(self, cmd: FetchOffset) -> CommittedOffset:
        return await self.groups.fetch(cmd.group, cmd.topic, cmd.partition)

    def _refuse_join_unless(
        self, cmd: JoinGroup, able: Callable[[Backend], bool], event: str, why: str, instead: str
    ) -> None:
        """Refuse ``cmd`` with UNSUPPORTED on the first of its backends not ``able`` to hold it,
        logging ``event`` once per backend (not per join)."""
        backends = [self.router.backend_for(t) for t in cmd.topics] or [self.router.default_backend]
        for backend in backends:
            if able(backend):
                continue
            if (event, backend.name) not in self._joins_refused:
                self._joins_refused.add((event, backend.name))
                log.warning(event, backend=backend.name, group=cmd.group)
            raise GatewayError(
                ErrorCode.UNSUPPORTED,
                f"backend {backend.name!r} {why} (group {cmd.group!r}); {instead}",
            )

    def _check_groups_allowed(self, cmd: JoinGroup) -> None:
        """Refuse membership on a backend with ``groups = "none"`` (an upstream broker without
        consumer groups: gateways on it could not share one group)."""
        self._refuse_join_unless(
            cmd,
            lambda backend: backend.capabilities.groups != "none",
            "group_join_refused",
            "has no consumer groups its gateways could share",
            "read partitions by number and commit offsets instead",
        )

    def _check_offsets_kept(self, cmd: JoinGroup) -> None:
        """Refuse a Kafka (client-assigned) member where committed offsets cannot be stored (an
        Iggy upstream without a login, a TANK upstream): its clients fetch and commit offsets
        around every assignment and fail on the answers, so the group could not hand partitions
        over where a member stopped."""
        self._refuse_join_unless(
            cmd,
            lambda backend: backend.capabilities.committed_offsets,
            "kafka_group_join_refused",
            "keeps no committed offsets, which Kafka consumer groups need",
            "assign partitions and keep offsets instead",
        )

    async def _join(self, cmd: JoinGroup) -> Any:
        self._check_groups_allowed(cmd)
        if cmd.protocols:
            self._check_offsets_kept(cmd)
            return await self.classic.join(cmd)
        if self.classic.get(cmd.group) is not None:
            raise GatewayError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"group {cmd.group!r} has Kafka members (client-side assignment)",
            )
        return await self.groups.join(
            cmd.group,
            cmd.topics,
            cmd.member_id,
            cmd.session_timeout_ms,
            self._partition_count,
            cmd.create_member,
            cmd.protocol,
        )

    async def _sync(self, cmd: SyncGroup) -> Any:
        if self.classic.has(cmd.group):
            return await self.classic.sync(cmd)
        return await self.groups.sync(
            cmd.group, cmd.member_id, cmd.generation, self._partition_count
        )

    async def _heartbeat(self, cmd: Heartbeat) -> None:
        if self.classic.has(cmd.group):
            await self.classic.heartbeat(cmd.group, cmd.member_id, cmd.generation, cmd.instance_id)
            return
        await self.groups.heartbeat(cmd.group, cmd.member_id, cmd.generation, self._partition_count)

    async def _leave(self, cmd: LeaveGroup) -> None:
        if self.classic.has(cmd.group):
            await self.classic.leave(cmd.group, cmd.member_id, cmd.instance_id)
            return
        await self.groups.leave(cmd.group, cmd.member_id, self._partition_count)

    async def _describe_group(self, cmd: DescribeGroup) -> Any:
        group = self.classic.get(cmd.group)
        if group is not None:
            return self.classic.describe(group)
        await self.groups.expire(cmd.group, self._partition_count)
        return self.groups.describe(cmd.group)

    # ------------------------------------------------------------------ misc
    async def _stats(self, cmd: Stats) -> StatsResult:
        topics = await self._list_topics(ListTopics())
        partitions = records = 0
        for info in topics:
            backend = self.router.backend_for(info.name)
            for p in range(info.partitions):
                part = await backend.partition_info(info.name, p)
                partitions += 1
                records += part.high_watermark - part.log_start_offset
        return StatsResult(len(topics), partitions, records)

    async def _ping(self, cmd: Ping) -> float:
        return time.time()
