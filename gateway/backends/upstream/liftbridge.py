"""Upstream Liftbridge: a Liftbridge server (or a gateway's Liftbridge listener) through
``gateway.protocols.liftbridge.client`` (gRPC on the codec's client role).

Mapping: a topic is a stream (``topic_prefix`` + name), its ``subject`` setting the stream's
subject (default: the name); partitions and offsets are Liftbridge's. Records: key and value (an
empty key is no key, a null value is empty); headers go through Liftbridge's header map: one
value per name (the last one wins), sorted by name; ``subject`` and ``reply``, which a Liftbridge
server adds to every message, are left out, and reserved ``_gw.*`` headers are not served back.
The server stamps the time (a read gives it, in microseconds). Appends are one PublishAsync call
per batch (ack policy ALL, offsets from the acks); reads are a Subscribe from the offset with a
stop offset. Streams are created and deleted; Liftbridge cannot add or remove partitions, look
up offsets by time through this backend, keep offset metadata or a key-value store
(UNSUPPORTED). The log start is not reported by Liftbridge: 0 is assumed.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from gateway.backends.base import unsupported
from gateway.backends.upstream.base import UpstreamBackend, upstream_capabilities, within
from gateway.model import (
    RESERVED_HEADER_PREFIX,
    AppendResult,
    ErrorCode,
    GatewayError,
    GroupDescription,
    JoinGroupResult,
    MemberAssignment,
    PartitionInfo,
    Record,
    RecordBatch,
    SyncGroupResult,
    TopicInfo,
)
from gateway.protocols.liftbridge import codec as lc
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.client import GrpcStatusError, LiftbridgeClient

SERVER_HEADERS = frozenset({"subject", "reply"})
_STATUS: dict[int, ErrorCode] = {
    lc.Status.ALREADY_EXISTS: ErrorCode.TOPIC_EXISTS,
    lc.Status.OUT_OF_RANGE: ErrorCode.OFFSET_OUT_OF_RANGE,
    lc.Status.INVALID_ARGUMENT: ErrorCode.INVALID_REQUEST,
    lc.Status.UNAVAILABLE: ErrorCode.BACKEND_UNAVAILABLE,
    lc.Status.DEADLINE_EXCEEDED: ErrorCode.TIMEOUT,
    lc.Status.FAILED_PRECONDITION: ErrorCode.READ_ONLY,
    lc.Status.UNIMPLEMENTED: ErrorCode.UNSUPPORTED,
    lc.Status.PERMISSION_DENIED: ErrorCode.UNAUTHORIZED,
    lc.Status.UNAUTHENTICATED: ErrorCode.UNAUTHENTICATED,
    lc.Status.RESOURCE_EXHAUSTED: ErrorCode.RECORD_TOO_LARGE,
}


def status_error(exc: GrpcStatusError, what: str) -> GatewayError:
    if exc.status == lc.Status.NOT_FOUND:
        code = (
            ErrorCode.UNKNOWN_PARTITION if "partition" in exc.message else ErrorCode.UNKNOWN_TOPIC
        )
    else:
        code = _STATUS.get(exc.status, ErrorCode.INTERNAL)
    return GatewayError(code, f"{what}: {exc}")


class LiftbridgeUpstream(UpstreamBackend):
    protocol = "liftbridge"
    protocol_errors = (lc.RemoteProtocolError,)
    capabilities = upstream_capabilities(
        timestamps=False,
        topic_admin=False,
        delete_topics=True,
        delete_partitions=False,
        groups="backend",  # the broker's consumer groups (below)
    )

    def __init__(self, name: str, config: Any) -> None:
        super().__init__(name, config)
        # this gateway's members of the broker's groups: (group, member) -> session timeout (s)
        # and when its client was last heard; the broker has no call listing a group's members
        self._held: dict[tuple[str, str], list[float]] = {}

    async def _connect(self) -> LiftbridgeClient:
        return await LiftbridgeClient.connect(self.host, self.port)

    def stored_form(self, record: Record) -> Record:
        headers = {
            k: v
            for k, v in record.headers
            if k not in SERVER_HEADERS and not k.startswith(RESERVED_HEADER_PREFIX)
        }
        kept = tuple(sorted(headers.items()))
        return Record(record.key or None, record.value or b"", kept, -1, record.offset)

    async def _rpc(self, fn: Any, what: str, retry: bool = True) -> Any:
        async def run(client: LiftbridgeClient) -> Any:
            try:
                return await fn(client)
            except GrpcStatusError as exc:
                return exc

        result = await self.call(run, retry=retry)
        if isinstance(result, GrpcStatusError):
            raise status_error(result, what)
        return result

    # ------------------------------------------------------------------ topics
    def _info(self, meta: Any) -> TopicInfo | None:
        name = self.down(meta.name)
        if name is None:
            return None
        config = dict(self._topic_config.get(name, ()))
        config["subject"] = meta.subject
        return TopicInfo(name, len(meta.partitions), tuple(sorted(config.items())))

    async def create_topic(
        self, name: str, partitions: int, config: tuple[tuple[str, str], ...] = ()
    ) -> TopicInfo:
        self.check_new_topic(name, partitions)
        subject = dict(config).get("subject") or self.up(name)
        await self._rpc(
            lambda c: c.create_stream(self.up(name), partitions, subject),
            f"create stream {name}",
            retry=False,
        )
        self._topic_config[name] = tuple(config)
        return await self.topic(name)

    async def list_topics(self) -> list[TopicInfo]:
        meta = await self._rpc(lambda c: c.metadata(), "fetch metadata")
        found = (self._info(m) for m in meta.streamMetadata if m.error == 0)
        return [t for t in found if t is not None]

    async def topic(self, name: str) -> TopicInfo:
        meta = await self._rpc(lambda c: c.metadata([self.up(name)]), f"metadata of {name}")
        for m in meta.streamMetadata:
            if m.name == self.up(name) and m.error == 0:
                info = self._info(m)
                if info is not None:
                    return info
        raise GatewayError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}")

    async def delete_topic(self, name: str) -> None:
        await self._rpc(lambda c: c.delete_stream(self.up(name)), f"delete {name}", retry=False)

    async def create_partitions(self, name: str, count: int) -> TopicInfo:
        raise unsupported("adding partitions (Liftbridge streams cannot grow)", self.name)

    async def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        if partition < 0:
            raise GatewayError(ErrorCode.UNKNOWN_PARTITION, f"no partition {partition}")
        try:
            md = await self._rpc(
                lambda c: c.partition_metadata(self.up(topic), partition),
                f"partition metadata of {topic}/{partition}",
            )
        except GatewayError as exc:
            if exc.code is ErrorCode.UNKNOWN_PARTITION:
                # Liftbridge answers "partition not found" for an unknown stream as well
                await self.topic(topic)  # UNKNOWN_TOPIC when it is the stream that is missing
            raise
        return PartitionInfo(topic, partition, 0, md.highWatermark + 1)

    # ------------------------------------------------------------------ data
    async def _append(self, topic: str, partition: int, batch: RecordBatch) -> AppendResult:
        records = batch.records
        if not records:
            info = await self.partition_info(topic, partition)
            return AppendResult(partition, info.high_watermark, info.high_watermark - 1)
        messages = [
            (r.key, r.value, {k: v for k, v in self.stored_form(r).headers}) for r in records
        ]
        offsets = await self._rpc(
            lambda c: c.publish_many(self.up(topic), partition, messages),
            f"publish to {topic}/{partition}",
            retry=False,
        )
        return AppendResult(partition, offsets[0], offsets[-1])

    async def read(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> list[RecordBatch]:
        if offset < 0:
            raise GatewayError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is negative")
        info = await self.partition_info(topic, partition)
        hw = info.high_watermark
        if offset > hw:
            raise GatewayError(
                ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} above the high watermark {hw}"
            )
        if offset == hw:
            return []
        stop = min(hw - 1, offset + max(1, max_records) - 1)
        messages = await self._rpc(
            lambda c: c.fetch(self.up(topic), partition, offset, stop),
            f"subscribe to {topic}/{partition}@{offset}",
        )
        records = [
            Record(
                m.key or None,
                m.value,
                tuple(sorted((k, v) for k, v in m.headers.items() if k not in SERVER_HEADERS)),
                m.timestamp // 1000 if m.timestamp > 0 else -1,
                m.offset,
            )
            for m in messages
        ]
        records = within(records, max_records, max_bytes)
        return [RecordBatch(records, base_offset=offset)] if records else []

    # ------------------------------------------------------------------ consumer groups
    # The broker's groups (JoinConsumerGroup, FetchConsumerGroupAssignments - also the
    # heartbeat -, LeaveConsumerGroup), under ``topic_prefix`` like streams. The group's epoch
    # is the model's generation - 1. The broker lists no group's members: a gateway describes
    # its own members (their assignments and the group's epoch, from the broker).

    def _sweep(self) -> None:
        now = time.monotonic()
        for key, (timeout, seen) in list(self._held.items()):
            if now - seen > timeout:  # its client went silent: the broker drops it too
                del self._held[key]

    def _touch(self, group: str, member_id: str) -> None:
        held = self._held.get((group, member_id))
        if held is not None:
            held[1] = time.monotonic()

    async def _group_rpc(self, method: str, request: Any, what: str, member: str) -> Any:
        async def run(client: LiftbridgeClient) -> Any:
            try:
                return await client.call(method, request)
            except GrpcStatusError as exc:
                return exc

        result = await self.call(run, retry=method != "LeaveConsumerGroup")
        if isinstance(result, GrpcStatusError):
            if result.status in (lc.Status.NOT_FOUND, lc.Status.FAILED_PRECONDITION):
                raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member!r}")
            raise status_error(result, what)
        return result

    async def _assignment(
        self, group: str, member_id: str, touch: bool = True
    ) -> tuple[int, MemberAssignment]:
        """(generation, the member's partitions) as the broker has them now; ``touch``: the
        member's client asked (a heartbeat), else a describe."""
        resp = await self._group_rpc(
            "FetchConsumerGroupAssignments",
            pb.FetchConsumerGroupAssignmentsRequest(
                groupId=self.up(group), consumerId=member_id, epoch=0
            ),
            f"assignments of {group}",
            member_id,
        )
        if touch:
            self._touch(group, member_id)
        partitions = []
        for a in resp.assignments:
            topic = self.down(a.stream)
            if topic is not None:
                partitions += [(topic, int(p)) for p in a.partitions]
        return int(resp.epoch) + 1, MemberAssignment(member_id, tuple(sorted(partitions)))

    async def group_join(
        self, group: str, topics: tuple[str, ...], member_id: str, session_timeout_ms: int
    ) -> JoinGroupResult:
        member_id = member_id or f"{group}-{uuid.uuid4().hex[:12]}"
        resp = await self._group_rpc(
            "JoinConsumerGroup",
            pb.JoinConsumerGroupRequest(
                groupId=self.up(group), consumerId=member_id, streams=[self.up(t) for t in topics]
            ),
            f"join {group}",
            member_id,
        )
        self._held[(group, member_id)] = [session_timeout_ms / 1000, time.monotonic()]
        desc = await self.group_describe(group)
        members = tuple(m.member_id for m in desc.members) or (member_id,)
        return JoinGroupResult(group, member_id, int(resp.epoch) + 1, members[0], members)

    async def group_sync(self, group: str, member_id: str, generation: int) -> SyncGroupResult:
        current, assignment = await self._assignment(group, member_id)
        if generation != current:
            raise GatewayError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's current {current}",
            )
        return SyncGroupResult(assignment)

    async def group_heartbeat(self, group: str, member_id: str, generation: int) -> None:
        current, _ = await self._assignment(group, member_id)
        if generation != current:
            raise GatewayError(
                ErrorCode.REBALANCE_IN_PROGRESS, f"group {group!r} rebalanced: join again"
            )

    async def group_leave(self, group: str, member_id: str) -> None:
        self._held.pop((group, member_id), None)
        await self._group_rpc(
            "LeaveConsumerGroup",
            pb.LeaveConsumerGroupRequest(groupId=self.up(group), consumerId=member_id),
            f"leave {group}",
            member_id,
        )

    async def group_describe(self, group: str) -> GroupDescription:
        self._sweep()
        generation, members = 0, []
        for g, member_id in list(self._held):
            if g != group:
                continue
            try:
                generation, assignment = await self._assignment(group, member_id, touch=False)
            except GatewayError as exc:
                if exc.code is not ErrorCode.UNKNOWN_MEMBER:
                    raise
                self._held.pop((group, member_id), None)  # the broker dropped it
                continue
            members.append(assignment)
        if not members:
            return GroupDescription(group, "empty", 0, ())
        topics = tuple(sorted({t for m in members for t, _ in m.partitions}))
        return GroupDescription(group, "stable", generation, tuple(members), topics)


def make(name: str, config: Any) -> LiftbridgeUpstream:
    return LiftbridgeUpstream(name, config)
