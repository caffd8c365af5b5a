"""The Liftbridge API on the command model: one method per RPC (docs/protocols/liftbridge.md).

A stream is a topic; its subject is the topic config key ``subject`` (the stream name for topics
made through other protocols). This gateway is the one broker and the leader of every partition.
Cursors are committed offsets: cursor id = group name (``CommitOffset``/``FetchOffset``), listed
as the internal stream ``__cursors`` (one partition) so clients find a leader for them.
The consumer-group RPCs are in ``groups.py`` (:class:`GroupRpcs`, a part of :class:`Service`).

Errors are raised as :class:`~gateway.protocols.liftbridge.statuses.RpcError` (a gRPC status and
message); ``statuses.py`` maps the model's error codes to the statuses the reference server uses.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from gateway.core.view import CoreView
from gateway.model import (
    RESERVED_HEADER_PREFIX,
    Acks,
    Command,
    CommitOffset,
    CreateTopic,
    DeleteTopic,
    DescribeGroup,
    DescribeTopic,
    ErrorCode,
    Fetch,
    FetchOffset,
    GatewayError,
    ListOffsets,
    ListTopics,
    OffsetSpec,
    Produce,
    Record,
    RecordBatch,
    TopicInfo,
)
from gateway.observability import RECORDS_IN, RECORDS_OUT, labelled
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.acks import PublishAckEncoder
from gateway.protocols.liftbridge.codec import Status, frame_message
from gateway.protocols.liftbridge.groups import GroupRpcs, group_epoch
from gateway.protocols.liftbridge.state import LiftbridgeState
from gateway.protocols.liftbridge.statuses import RpcError, async_error, rpc_error, text

PROTOCOL = "liftbridge"
CURSORS_STREAM = "__cursors"
ACTIVITY_STREAM = "__activity"
RESERVED_STREAMS = frozenset({CURSORS_STREAM, ACTIVITY_STREAM})
ACK_NAMESPACE = "liftbridge-default"
CORRELATION_HEADER = RESERVED_HEADER_PREFIX + "liftbridge.correlation_id"
SUBSCRIBE_WAIT_MS = 1000
SUBSCRIBE_MAX_BYTES = 1 << 20


# A stream created with optimisticConcurrencyControl: a publish whose expectedOffset is not -1
# is stored only at exactly that offset (Produce.expected_offset), else refused.
OCC_KEY = "liftbridge.optimistic_concurrency"
NO_EXPECTED_OFFSET = -1


def optimistic(info: TopicInfo) -> bool:
    """Whether stream ``info`` was created with optimisticConcurrencyControl."""
    return info.get(OCC_KEY) == "true"


def expected_offset(req: pb.PublishRequest, info: TopicInfo) -> int | None:
    """The offset ``req`` must get on stream ``info``, None when unchecked. Optimistic
    concurrency needs acks (the reference server refuses ackPolicy NONE on such a stream)."""
    if not optimistic(info):
        return None
    if req.ackPolicy == pb.NONE:
        raise RpcError(Status.INVALID_ARGUMENT, text("publish_occ_no_ack"))
    return None if req.expectedOffset == NO_EXPECTED_OFFSET else req.expectedOffset


class Sender(Protocol):
    """What a streaming RPC gets from the session to send messages on its call."""

    timeout_s: float | None

    async def send(self, message: Any) -> None: ...

    def send_nowait(self, messages: list[Any]) -> None: ...


R = TypeVar("R")


def partition_subject(subject: str, partition: int) -> str:
    return subject if partition == 0 else f"{subject}.{partition}"


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` one token, ``>`` the rest."""
    p = pattern.split(".")
    s = subject.split(".")
    for i, tok in enumerate(p):
        if tok == ">":
            return len(s) > i
        if i >= len(s) or (tok != "*" and tok != s[i]):
            return False
    return len(p) == len(s)


def valid_subject(subject: str) -> bool:
    if not subject or any(c.isspace() for c in subject):
        return False
    return all(subject.split("."))


def new_inbox() -> str:
    return f"{ACK_NAMESPACE}.ack.{os.urandom(11).hex()}"


def stream_subject(info: TopicInfo) -> str:
    return info.get("subject") or info.name


class Service(GroupRpcs):
    """The RPCs. One per connection (cheap); shared state is in :class:`LiftbridgeState`."""

    def __init__(
        self,
        core: CoreView,
        state: LiftbridgeState,
        broker_id: str,
        host: str,
        port: int,
        max_message_bytes: int = 16 << 20,
        max_answer_bytes: int = 64 << 20,
    ) -> None:
        self.core = core
        self.state = state
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.max_message_bytes = max_message_bytes
        # what one read of a subscription asks the core for (the listener's max_answer_bytes
        # caps it; at least one message always comes)
        self.subscribe_bytes = max(1, min(SUBSCRIBE_MAX_BYTES, max_answer_bytes))
        self._topics: dict[str, TopicInfo] = {}
        self._records_in = labelled(RECORDS_IN, PROTOCOL)

    # ------------------------------------------------------------------ helpers
    async def _execute(self, command: Command[R]) -> R:
        try:
            return await self.core.execute(command)
        except GatewayError as exc:
            raise rpc_error(exc) from None

    async def _lookup(self, name: str, cached: bool = False) -> TopicInfo | None:
        """The stream ``name``; None when there is none."""
        if cached:
            info = self._topics.get(name)
            if info is not None:
                return info
        if not name:
            return None
        try:
            info = await self.core.topic(name)
        except GatewayError as exc:
            if exc.code is ErrorCode.UNKNOWN_TOPIC:
                return None
            raise rpc_error(exc) from None
        self._topics[name] = info
        return info

    async def _stream(
        self, name: str, missing: str, cached: bool = False, status: Status = Status.NOT_FOUND
    ) -> TopicInfo:
        """The stream ``name``, else ``status`` with ``missing`` (each RPC of the reference
        server words it its own way)."""
        info = await self._lookup(name, cached)
        if info is None:
            raise RpcError(status, missing)
        return info

    async def _partition(
        self,
        name: str,
        partition: int,
        missing: str | None = None,
        missing_partition: str | None = None,
        cached: bool = False,
    ) -> TopicInfo:
        """The stream of an existing partition, else NOT_FOUND: by default with the texts of
        a publish (``no such stream: s``, ``no such partition: 3``)."""
        await self.state.refresh(name)  # pause/readonly flags set through another gateway
        info = await self._lookup(name, cached)
        if info is None:
            raise RpcError(Status.NOT_FOUND, missing or text("publish_no_such_stream", stream=name))
        if not 0 <= partition < info.partitions:
            raise RpcError(
                Status.NOT_FOUND,
                missing_partition
                or missing
                or text("publish_no_such_partition", partition=partition),
            )
        return info

    def _partition_metadata(self, stream: str, partition: int, hw: int) -> pb.PartitionMetadata:
        flags = self.state.get(stream, partition)
        md = pb.PartitionMetadata(
            id=partition,
            leader=self.broker_id,
            replicas=[self.broker_id],
            isr=[self.broker_id],
            highWatermark=hw - 1,
            newestOffset=hw - 1,
        )
        # As the reference server: the three timestamp pairs are always there (zero when
        # unset; the gateway does not track when messages were received), and ``paused`` stays
        # true once a partition was paused, after a publish or subscribe resumed it.
        md.messagesReceivedTimestamps.SetInParent()
        md.pauseTimestamps.SetInParent()
        md.readonlyTimestamps.SetInParent()
        if flags is not None:
            md.paused = flags.was_paused
            md.readonly = flags.readonly
            md.pauseTimestamps.firstTimestamp, md.pauseTimestamps.latestTimestamp = flags.paused_ns
            md.readonlyTimestamps.firstTimestamp, md.readonlyTimestamps.latestTimestamp = (
                flags.readonly_ns
            )
        return md

    async def _stream_metadata(self, info: TopicInfo) -> pb.StreamMetadata:
        await self.state.refresh(info.name)
        desc = await self._execute(DescribeTopic(info.name))
        sm = pb.StreamMetadata(name=info.name, subject=stream_subject(info))
        created = info.get("created_ns")
        if created and created.isdigit():
            sm.creationTimestamp = int(created)
        for part in desc.partitions:
            sm.partitions[part.partition].CopyFrom(
                self._partition_metadata(info.name, part.partition, part.high_watermark)
            )
        return sm

    def _cursors_metadata(self) -> pb.StreamMetadata:
        sm = pb.StreamMetadata(name=CURSORS_STREAM, subject=CURSORS_STREAM)
        sm.partitions[0].CopyFrom(self._partition_metadata(CURSORS_STREAM, 0, 0))
        return sm

    # ------------------------------------------------------------------ streams
    async def CreateStream(self, req: pb.CreateStreamRequest) -> pb.CreateStreamResponse:
        # the reference server's order: name, subject, reserved, encryption, replication
        if not req.name:
            raise RpcError(Status.INVALID_ARGUMENT, text("name_empty"))
        if not valid_subject(req.subject):
            raise RpcError(Status.INVALID_ARGUMENT, text("subject_invalid"))
        if req.name in RESERVED_STREAMS:
            raise RpcError(Status.INVALID_ARGUMENT, text("stream_reserved"))
        if req.HasField("encryption") and req.encryption.value:
            raise RpcError(Status.FAILED_PRECONDITION, "encryption is not configured")
        if req.partitions < 0:
            # the reference server crashes on this; the gateway refuses it
            raise RpcError(Status.INVALID_ARGUMENT, f"invalid partitions {req.partitions}")
        if req.replicationFactor < -1:
            raise RpcError(
                Status.INVALID_ARGUMENT, text("replication_factor", rf=req.replicationFactor)
            )
        if req.replicationFactor > 1:
            raise RpcError(
                Status.INVALID_ARGUMENT,
                text("replication_factor_cluster", rf=req.replicationFactor, size=1),
            )
        config = [("subject", req.subject), ("created_ns", str(time.time_ns()))]
        if req.group:
            config.append(("liftbridge.group", req.group))
        if req.HasField("optimisticConcurrencyControl") and req.optimisticConcurrencyControl.value:
            config.append((OCC_KEY, "true"))
        for field_name, key in (
            ("retentionMaxAge", "retention_ms"),
            ("retentionMaxBytes", "retention_bytes"),
        ):
            if req.HasField(field_name):
                config.append((key, str(getattr(req, field_name).value)))
        await self._execute(CreateTopic(req.name, req.partitions or 1, tuple(config)))
        self.state.forget(req.name)
        await self.state.flush()
        return pb.CreateStreamResponse()

    async def DeleteStream(self, req: pb.DeleteStreamRequest) -> pb.DeleteStreamResponse:
        if req.name in RESERVED_STREAMS:
            raise RpcError(Status.INVALID_ARGUMENT, text("stream_reserved"))
        await self._stream(req.name, text("stream_does_not_exist"))
        await self._execute(DeleteTopic(req.name))
        self._topics.pop(req.name, None)
        self.state.end_subscribers(req.name, None, Status.NOT_FOUND, text("log_deleted"))
        self.state.forget(req.name)
        await self.state.flush()
        return pb.DeleteStreamResponse()

    async def _partition_list(self, name: str, partitions: Sequence[int]) -> list[int]:
        """The partitions of a Pause/SetReadonly request (none listed: all of them)."""
        if not partitions:
            info = await self._stream(name, text("stream_not_found"))
            return list(range(info.partitions))
        info = await self._stream(name, text("stream_does_not_exist"))
        for p in partitions:
            if not 0 <= p < info.partitions:
                raise RpcError(Status.NOT_FOUND, text("partition_does_not_exist"))
        return list(partitions)

    async def PauseStream(self, req: pb.PauseStreamRequest) -> pb.PauseStreamResponse:
        parts = await self._partition_list(req.name, req.partitions)
        self.state.pause(req.name, parts, req.resumeAll)
        await self.state.flush()
        self.state.end_subscribers(req.name, parts, Status.FAILED_PRECONDITION, text("log_closed"))
        return pb.PauseStreamResponse()

    async def SetStreamReadonly(
        self, req: pb.SetStreamReadonlyRequest
    ) -> pb.SetStreamReadonlyResponse:
        parts = await self._partition_list(req.name, req.partitions)
        self.state.set_readonly(req.name, parts, req.readonly)
        await self.state.flush()
        if req.readonly:
            # subscribers at the end learn it now; the others when they reach the end
            for p in parts:
                self.core.waiters.notify(req.name, p)
        return pb.SetStreamReadonlyResponse()

    # ------------------------------------------------------------------ metadata
    async def FetchMetadata(self, req: pb.FetchMetadataRequest) -> pb.FetchMetadataResponse:
        resp = pb.FetchMetadataResponse()
        topics: list[TopicInfo] = await self._execute(ListTopics())
        by_name = {t.name: t for t in topics}
        if req.streams:
            for name in req.streams:
                if name == CURSORS_STREAM:
                    resp.streamMetadata.append(self._cursors_metadata())
                elif name in by_name:
                    resp.streamMetadata.append(await self._stream_metadata(by_name[name]))
                else:
                    resp.streamMetadata.append(
                        pb.StreamMetadata(name=name, error=pb.StreamMetadata.UNKNOWN_STREAM)
                    )
        else:
            for t in topics:
                resp.streamMetadata.append(await self._stream_metadata(t))
            resp.streamMetadata.append(self._cursors_metadata())
        # as the reference server: every partition of the cluster (this one broker leads them
        # all), whichever streams were asked for; __cursors has one
        partitions = sum(t.partitions for t in topics) + 1
        resp.brokers.append(
            pb.Broker(
                id=self.broker_id,
                host=self.host,
                port=self.port,
                partitionCount=partitions,
                leaderCount=partitions,
            )
        )
        for group in req.groups:
            desc = await self._execute(DescribeGroup(group))
            gm = pb.ConsumerGroupMetadata(groupId=group)
            if desc.members:
                gm.coordinator = self.broker_id
                gm.epoch = group_epoch(desc.generation)
            else:
                gm.error = pb.ConsumerGroupMetadata.UNKNOWN_GROUP
            resp.groupMetadata.append(gm)
        return resp

    async def FetchPartitionMetadata(
        self, req: pb.FetchPartitionMetadataRequest
    ) -> pb.FetchPartitionMetadataResponse:
        if req.stream == CURSORS_STREAM and req.partition == 0:
            return pb.FetchPartitionMetadataResponse(
                metadata=self._partition_metadata(CURSORS_STREAM, 0, 0)
            )
        await self._partition(req.stream, req.partition, text("partition_not_found"))
        desc = await self._execute(DescribeTopic(req.stream))
        hw = desc.partitions[req.partition].high_watermark
        return pb.FetchPartitionMetadataResponse(
            metadata=self._partition_metadata(req.stream, req.partition, hw)
        )

    # ------------------------------------------------------------------ publish
    def _check_writable(self, stream: str, partition: int, partitions: int) -> None:
        flags = self.state.get(stream, partition)
        if flags is None:
            return
        if flags.readonly:
            raise RpcError(
                Status.FAILED_PRECONDITION, text("publish_readonly", partition=partition)
            )
        if flags.paused:
            self.state.resume(stream, partition, partitions)

    @staticmethod
    def _record(req: Any, now_us: int) -> Record:
        headers: tuple[tuple[str, bytes], ...] = tuple(req.headers.items()) if req.headers else ()
        cid = req.correlationId
        if cid:
            headers += ((CORRELATION_HEADER, cid.encode()),)
        return Record(req.key or None, req.value, headers, now_us)

    def _ack(
        self, req: Any, info: TopicInfo, partition: int, offset: int, received_ns: int
    ) -> pb.Ack:
        subject = stream_subject(info)
        return pb.Ack(
            stream=info.name,
            partitionSubject=subject,
            msgSubject=partition_subject(subject, partition),
            offset=offset,
            ackInbox=req.ackInbox,
            correlationId=req.correlationId,
            ackPolicy=req.ackPolicy,
            receptionTimestamp=received_ns,
            commitTimestamp=time.time_ns(),
        )

    async def Publish(self, req: pb.PublishRequest) -> pb.PublishResponse:
        if not req.stream:
            raise RpcError(Status.INVALID_ARGUMENT, text("publish_no_stream"))
        info = await self._partition(req.stream, req.partition)
        self._check_writable(req.stream, req.partition, info.partitions)
        await self.state.flush()  # a publish may have resumed a paused partition
        expected = expected_offset(req, info)
        received_ns = time.time_ns()
        if not req.ackInbox:
            req.ackInbox = new_inbox()
        result = await self._execute(
            Produce(
                req.stream,
                RecordBatch([self._record(req, received_ns // 1000)]),
                req.partition,
                acks=Acks.NONE if req.ackPolicy == pb.NONE else Acks.ALL,
                expected_offset=expected,
            )
        )
        labelled(RECORDS_IN, PROTOCOL).inc()
        if req.ackPolicy == pb.NONE:
            return pb.PublishResponse()
        return pb.PublishResponse(
            ack=self._ack(req, info, req.partition, result.base_offset, received_ns)
        )

    async def PublishToSubject(
        self, req: pb.PublishToSubjectRequest
    ) -> pb.PublishToSubjectResponse:
        if not valid_subject(req.subject):
            raise RpcError(Status.INVALID_ARGUMENT, f"invalid subject {req.subject!r}")
        received_ns = time.time_ns()
        if not req.ackInbox:
            req.ackInbox = new_inbox()
        first_ack: pb.Ack | None = None
        for target, partition in await self.streams_for_subject(req.subject):
            await self.state.refresh(target.name)
            flags = self.state.get(target.name, partition)
            if flags is not None and (flags.readonly or flags.paused):
                continue  # as on NATS: a paused partition is not listening, readonly drops
            record = self._record(req, received_ns // 1000)
            record = record._replace(
                headers=record.headers + (("subject", req.subject.encode()), ("reply", b""))
            )
            result = await self._execute(
                Produce(target.name, RecordBatch([record]), partition, acks=Acks.ALL)
            )
            labelled(RECORDS_IN, PROTOCOL).inc()
            if first_ack is None:
                first_ack = self._ack(req, target, partition, result.base_offset, received_ns)
                first_ack.msgSubject = req.subject
        if first_ack is None or req.ackPolicy == pb.NONE:
            return pb.PublishToSubjectResponse()
        return pb.PublishToSubjectResponse(ack=first_ack)

    async def streams_for_subject(self, subject: str) -> list[tuple[TopicInfo, int]]:
        """(stream, partition) pairs whose partition subject matches ``subject``; streams
        sharing a NATS queue group get it once (the first in name order)."""
        out: list[tuple[TopicInfo, int]] = []
        groups: set[str] = set()
        for info in await self._execute(ListTopics()):
            base = stream_subject(info)
            for p in range(info.partitions):
                if subject_matches(partition_subject(base, p), subject):
                    group = info.get("liftbridge.group")
                    if group:
                        if group in groups:
                            break
                        groups.add(group)
                    out.append((info, p))
                    break
        return out

    async def publish_async(
        self,
        requests: Sequence[pb.PublishRequest],
        inbox: str,
        respond: Callable[[list[bytes]], None],
    ) -> None:
        """Publish a run of PublishAsync requests: consecutive requests for the same partition
        go to the core as one batch; responses (acks or asyncErrors), framed, go to
        ``respond``."""
        i = 0
        n = len(requests)
        while i < n:
            first = requests[i]
            j = i + 1
            while (
                j < n
                and requests[j].stream == first.stream
                and requests[j].partition == first.partition
            ):
                j += 1
            run = requests[i:j]
            i = j
            try:
                info = await self._partition(first.stream, first.partition, cached=True)
                self._check_writable(first.stream, first.partition, info.partitions)
                await self.state.flush()
                if optimistic(info):
                    await self._publish_checked(run, info, inbox, respond)
                    continue
                received_ns = time.time_ns()
                now_us = received_ns // 1000
                record = self._record
                batch = RecordBatch([record(r, now_us) for r in run], max_timestamp_us=now_us)
                try:
                    result = await self.core.execute(
                        Produce(first.stream, batch, first.partition, acks=Acks.ALL)
                    )
                except GatewayError as exc:
                    if exc.code in (ErrorCode.UNKNOWN_TOPIC, ErrorCode.UNKNOWN_PARTITION):
                        self._topics.pop(first.stream, None)
                    raise rpc_error(exc) from None
            except RpcError as exc:
                respond([frame_message(async_error(r, exc).SerializeToString()) for r in run])
                continue
            self._records_in.inc(len(run))
            base = result.base_offset
            subject = stream_subject(info)
            encoder = PublishAckEncoder(
                first.stream,
                subject,
                partition_subject(subject, first.partition),
                inbox,
                received_ns,
                time.time_ns(),
            )
            acks = encoder.frames(base, run, pb.NONE)
            if acks:
                respond([acks])

    async def _publish_checked(
        self,
        requests: Sequence[pb.PublishRequest],
        info: TopicInfo,
        inbox: str,
        respond: Callable[[list[bytes]], None],
    ) -> None:
        """PublishAsync requests of one partition of an optimistic-concurrency stream: one
        conditional produce each (every request names its own offset), answered with its ack,
        or with INCORRECT_OFFSET / BAD_REQUEST as the reference server does."""
        for r in requests:
            received_ns = time.time_ns()
            try:
                expected = expected_offset(r, info)
                result = await self._execute(
                    Produce(
                        r.stream,
                        RecordBatch([self._record(r, received_ns // 1000)]),
                        r.partition,
                        acks=Acks.ALL,
                        expected_offset=expected,
                    )
                )
            except RpcError as exc:
                answer = async_error(r, exc)
            else:
                self._records_in.inc()
                r.ackInbox = inbox
                ack = self._ack(r, info, r.partition, result.base_offset, received_ns)
                answer = pb.PublishResponse(ack=ack, correlationId=r.correlationId)
            respond([frame_message(answer.SerializeToString())])

    # ------------------------------------------------------------------ subscribe
    async def subscribe_range(self, req: pb.SubscribeRequest) -> tuple[int, int | None, int]:
        """Checks in the reference order; returns (start offset, last offset to deliver or None,
        partitions)."""
        if req.HasField("consumer") and req.consumer.groupId and not req.consumer.consumerId:
            raise RpcError(Status.INVALID_ARGUMENT, text("no_consumer_id"))
        info = await self._partition(req.stream, req.partition, text("no_such_partition"))
        if req.resume:
            self.state.resume(req.stream, req.partition, info.partitions)
            await self.state.flush()
        flags = self.state.get(req.stream, req.partition)
        if flags is not None and flags.paused:
            raise RpcError(Status.FAILED_PRECONDITION, "partition is paused")
        lo = await self._execute(ListOffsets(req.stream, req.partition, OffsetSpec.EARLIEST))
        start_log, hw = lo.log_start_offset, lo.high_watermark
        pos = req.startPosition
        if pos == pb.NEW_ONLY:
            start = hw
        elif pos == pb.OFFSET:
            start = min(max(req.startOffset, start_log), hw)
        elif pos == pb.EARLIEST:
            start = start_log
        elif pos == pb.LATEST:
            start = max(hw - 1, start_log)
        elif pos == pb.TIMESTAMP:
            ts_us = math.ceil(req.startTimestamp / 1000)
            start = (
                await self._execute(ListOffsets(req.stream, req.partition, max(0, ts_us)))
            ).offset
        else:
            raise RpcError(
                Status.INVALID_ARGUMENT,
                text("unknown_start", pos=_enum_name(pb.StartPosition, pos)),
            )
        start = max(start, 0)
        stop: int | None
        sp = req.stopPosition
        if sp == pb.STOP_ON_CANCEL:
            if flags is None or not flags.readonly:
                return start, None, info.partitions
            # as the reference server: a readonly partition stops at its newest offset (an
            # empty one, or a start after it, is refused below)
            stop = hw - 1
        elif sp == pb.STOP_OFFSET:
            stop = req.stopOffset
        elif sp == pb.STOP_LATEST:
            if hw == start_log:
                raise RpcError(Status.RESOURCE_EXHAUSTED, text("stream_empty"))
            stop = hw - 1
        elif sp == pb.STOP_TIMESTAMP:
            ts_us = req.stopTimestamp // 1000
            first_after = (
                await self._execute(ListOffsets(req.stream, req.partition, max(0, ts_us + 1)))
            ).offset
            stop = first_after - 1
        else:
            raise RpcError(
                Status.INVALID_ARGUMENT, text("unknown_stop", pos=_enum_name(pb.StopPosition, sp))
            )
        if stop < start:
            raise RpcError(
                Status.INVALID_ARGUMENT, text("stop_before_start", stop=stop, start=start)
            )
        return start, stop, info.partitions

    async def Subscribe(self, req: pb.SubscribeRequest, call: Sender, sub: Any) -> None:
        """Stream messages from the computed start; returns at the stop offset by raising the
        end status, or runs until cancelled (``sub`` ends it from outside)."""
        start, stop, _ = await self.subscribe_range(req)
        stream, partition = req.stream, req.partition
        info = await self._stream(stream, text("no_such_partition"))
        subject = partition_subject(stream_subject(info), partition)
        self.state.add_subscriber(stream, partition, sub)
        try:
            await call.send(pb.Message())  # the handshake
            offset = start
            while True:
                res = await self._execute(
                    Fetch(
                        stream,
                        partition,
                        offset,
                        max_records=1000 if stop is None else stop - offset + 1,
                        max_bytes=self.subscribe_bytes,
                        max_wait_ms=SUBSCRIBE_WAIT_MS,
                    )
                )
                if res.log_start_offset > offset:
                    offset = res.log_start_offset
                records = res.records
                if stop is not None and records and records[-1].offset > stop:
                    # offsets with gaps (a Kafka backend): the records asked for may end early
                    records = [r for r in records if r.offset <= stop]
                    offset = stop + 1
                if records:
                    msgs = [_message(r, stream, partition, subject) for r in records]
                    labelled(RECORDS_OUT, PROTOCOL).inc(len(msgs))
                    offset = records[-1].offset + 1
                    await call.send(msgs)
                    if stop is not None and offset > stop:
                        raise RpcError(Status.RESOURCE_EXHAUSTED, text("stop_reached"))
                    continue
                await self.state.refresh(stream)
                flags = self.state.get(stream, partition)
                if flags is not None and flags.readonly and offset >= res.high_watermark:
                    raise RpcError(Status.RESOURCE_EXHAUSTED, text("readonly_end"))
        finally:
            self.state.remove_subscriber(stream, partition, sub)

    # ------------------------------------------------------------------ cursors
    def _check_cursor(self, req: Any) -> None:
        # As on the reference server, the stream and partition are not looked up: a cursor
        # of an unknown one is stored and fetched like any other.
        if not req.stream:
            raise RpcError(Status.INVALID_ARGUMENT, text("no_stream"))
        if not req.cursorId:
            raise RpcError(Status.INVALID_ARGUMENT, text("no_cursor_id"))

    async def SetCursor(self, req: pb.SetCursorRequest) -> pb.SetCursorResponse:
        self._check_cursor(req)
        await self._execute(CommitOffset(req.cursorId, req.stream, req.partition, req.offset))
        return pb.SetCursorResponse()

    async def FetchCursor(self, req: pb.FetchCursorRequest) -> pb.FetchCursorResponse:
        self._check_cursor(req)
        committed = await self._execute(FetchOffset(req.cursorId, req.stream, req.partition))
        return pb.FetchCursorResponse(offset=committed.offset)


def _enum_name(enum: Any, value: int) -> str:
    """An enum value as Go's protobuf prints it: its name, or the number when unknown."""
    try:
        return str(enum.Name(value))
    except ValueError:
        return str(value)


def _message(r: Record, stream: str, partition: int, subject: str) -> pb.Message:
    m = pb.Message(
        offset=r.offset,
        key=r.key or b"",
        value=r.value or b"",
        timestamp=r.timestamp_us * 1000 if r.timestamp_us >= 0 else 0,
        stream=stream,
        partition=partition,
    )
    headers = m.headers
    msg_subject = subject
    reply = ""
    for k, v in r.headers:
        if k.startswith(RESERVED_HEADER_PREFIX):
            continue
        headers[k] = v
        if k == "subject":
            msg_subject = v.decode("utf-8", "replace")
        elif k == "reply":
            reply = v.decode("utf-8", "replace")
    if "subject" not in headers:
        headers["subject"] = subject.encode()
        headers["reply"] = b""
    m.subject = msg_subject
    m.replySubject = reply
    return m
